//! Caps on what clients keep open: Hrana streams (each holds a SQLite connection, and may
//! hold a transaction) and cursors (each holds a blocking thread while its reader is
//! slow), per database and per node. A [`Permit`] counts one open item for as long as
//! it lives, so every way a stream or cursor ends (closed, expired, failed, abandoned
//! request, dropped WebSocket) gives its place back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct OpenLimit {
    /// What is counted, for messages: "streams", "cursors".
    what: &'static str,
    per_database: usize,
    per_node: usize,
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    by_database: HashMap<String, usize>,
}

/// One open stream or cursor; dropping it frees its place.
pub struct Permit {
    limit: Arc<OpenLimit>,
    db_id: String,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Permit({} of {})", self.limit.what, self.db_id)
    }
}

/// Why a permit was refused: the message for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitReached(pub String);

impl OpenLimit {
    pub fn new(what: &'static str, per_database: usize, per_node: usize) -> Arc<OpenLimit> {
        Arc::new(OpenLimit {
            what,
            per_database,
            per_node,
            counts: Mutex::new(Counts::default()),
        })
    }

    pub fn acquire(self: &Arc<Self>, db_id: &str) -> Result<Permit, LimitReached> {
        let mut counts = self.lock();
        let on_database = counts.by_database.get(db_id).copied().unwrap_or(0);
        if on_database >= self.per_database {
            return Err(LimitReached(format!(
                "too many open {} on this database (limit {}): close some or wait for idle ones to expire",
                self.what, self.per_database
            )));
        }
        if counts.total >= self.per_node {
            return Err(LimitReached(format!(
                "too many open {} on this server (limit {}): try again shortly",
                self.what, self.per_node
            )));
        }
        counts.total += 1;
        *counts.by_database.entry(db_id.to_string()).or_insert(0) += 1;
        Ok(Permit {
            limit: Arc::clone(self),
            db_id: db_id.to_string(),
        })
    }

    /// Open items on `db_id`.
    pub fn open_on(&self, db_id: &str) -> usize {
        self.lock().by_database.get(db_id).copied().unwrap_or(0)
    }

    pub fn open_total(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut counts = self.limit.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(count) = counts.by_database.get_mut(&self.db_id) {
            *count -= 1;
            if *count == 0 {
                counts.by_database.remove(&self.db_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_database_and_per_node_caps() {
        let limit = OpenLimit::new("streams", 2, 3);
        let a1 = limit.acquire("a").unwrap();
        let _a2 = limit.acquire("a").unwrap();
        let refused = limit.acquire("a").unwrap_err();
        assert!(
            refused.0.contains("on this database (limit 2)"),
            "{refused:?}"
        );
        let _b1 = limit.acquire("b").unwrap();
        let refused = limit.acquire("b").unwrap_err();
        assert!(
            refused.0.contains("on this server (limit 3)"),
            "{refused:?}"
        );
        drop(a1);
        assert_eq!(limit.open_on("a"), 1);
        let _b2 = limit.acquire("b").unwrap();
        assert_eq!(limit.open_total(), 3);
    }
}
