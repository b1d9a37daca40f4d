//! Caps on what clients keep open: Hrana streams (each holds a SQLite connection, and may
//! hold a transaction) and cursors (each holds a blocking thread while its reader is
//! slow), per database, per organization and per node. A [`Permit`] counts one open item
//! for as long as it lives, so every way a stream or cursor ends (closed, expired, failed,
//! abandoned request, dropped WebSocket) gives its place back.
//!
//! Fair shares (docs/DESIGN.md, "Blast radius"): the per-organization cap (a quarter of
//! the node's by default) keeps one tenant, however many databases it has, from taking the
//! node's whole limit, so the others always find room. When several tenants together fill
//! the node, a refusal says which organization holds more than its fair share (the node's
//! limit divided among the organizations holding items) while the caller's holds less
//! ([`LimitReached::reclaim_from`]): the caller may then expire one of that organization's
//! idle streams early and take its place (`stream::acquire_stream_permit`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct OpenLimit {
    /// What is counted, for messages: "streams", "cursors".
    what: &'static str,
    per_database: usize,
    per_organization: usize,
    per_node: usize,
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    by_database: HashMap<String, usize>,
    by_organization: HashMap<String, usize>,
}

/// One open stream or cursor; dropping it frees its place.
pub struct Permit {
    limit: Arc<OpenLimit>,
    db_id: String,
    /// The database's organization when the permit was taken (a transfer may move the
    /// database later; the permit gives its place back where it took it).
    org_id: String,
}

impl Permit {
    /// The organization it is counted against.
    pub fn org_id(&self) -> &str {
        &self.org_id
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Permit({} of {})", self.limit.what, self.db_id)
    }
}

/// Why a permit was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitReached {
    /// For the client.
    pub message: String,
    /// The node is full while the caller's organization holds less than its fair share:
    /// the organization holding the most, above its fair share, whose idle items may be
    /// reclaimed for the caller.
    pub reclaim_from: Option<String>,
}

impl OpenLimit {
    pub fn new(
        what: &'static str,
        per_database: usize,
        per_organization: usize,
        per_node: usize,
    ) -> Arc<OpenLimit> {
        Arc::new(OpenLimit {
            what,
            per_database,
            per_organization,
            per_node,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// A place for one item of database `db_id` of organization `org_id`.
    pub fn acquire(self: &Arc<Self>, db_id: &str, org_id: &str) -> Result<Permit, LimitReached> {
        let mut counts = self.lock();
        let on_database = counts.by_database.get(db_id).copied().unwrap_or(0);
        if on_database >= self.per_database {
            return Err(self.refused(
                format!(
                    "too many open {} on this database (limit {}): close some or wait for idle ones to expire",
                    self.what, self.per_database
                ),
                None,
            ));
        }
        let on_organization = counts.by_organization.get(org_id).copied().unwrap_or(0);
        if on_organization >= self.per_organization {
            return Err(self.refused(
                format!(
                    "too many open {} for this organization on this server (limit {}): close some or wait for idle ones to expire",
                    self.what, self.per_organization
                ),
                None,
            ));
        }
        if counts.total >= self.per_node {
            let reclaim_from = counts.over_share(org_id, self.per_node);
            return Err(self.refused(
                format!(
                    "too many open {} on this server (limit {}): try again shortly",
                    self.what, self.per_node
                ),
                reclaim_from,
            ));
        }
        counts.total += 1;
        *counts.by_database.entry(db_id.to_string()).or_insert(0) += 1;
        *counts
            .by_organization
            .entry(org_id.to_string())
            .or_insert(0) += 1;
        Ok(Permit {
            limit: Arc::clone(self),
            db_id: db_id.to_string(),
            org_id: org_id.to_string(),
        })
    }

    fn refused(&self, message: String, reclaim_from: Option<String>) -> LimitReached {
        LimitReached {
            message,
            reclaim_from,
        }
    }

    /// Open items on `db_id`.
    pub fn open_on(&self, db_id: &str) -> usize {
        self.lock().by_database.get(db_id).copied().unwrap_or(0)
    }

    /// Open items of organization `org_id`.
    pub fn open_for(&self, org_id: &str) -> usize {
        self.lock()
            .by_organization
            .get(org_id)
            .copied()
            .unwrap_or(0)
    }

    pub fn open_total(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Counts {
    /// With the node full: the organization to take a place from for `org_id`, if `org_id`
    /// holds less than its fair share (`per_node` divided among the organizations holding
    /// items, `org_id` included) and another holds more.
    fn over_share(&self, org_id: &str, per_node: usize) -> Option<String> {
        let own = self.by_organization.get(org_id).copied().unwrap_or(0);
        let holders = self.by_organization.len() + usize::from(own == 0);
        let fair_share = per_node / holders.max(1);
        if own >= fair_share {
            return None;
        }
        self.by_organization
            .iter()
            .filter(|(org, count)| org.as_str() != org_id && **count > fair_share)
            .max_by_key(|(_, count)| **count)
            .map(|(org, _)| org.clone())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut guard = self.limit.lock();
        let counts = &mut *guard;
        counts.total = counts.total.saturating_sub(1);
        for (map, key) in [
            (&mut counts.by_database, &self.db_id),
            (&mut counts.by_organization, &self.org_id),
        ] {
            if let Some(count) = map.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_database_and_per_node_caps() {
        let limit = OpenLimit::new("streams", 2, 10, 3);
        let a1 = limit.acquire("a", "org").unwrap();
        let _a2 = limit.acquire("a", "org").unwrap();
        let refused = limit.acquire("a", "org").unwrap_err();
        assert!(
            refused.message.contains("on this database (limit 2)"),
            "{refused:?}"
        );
        let _b1 = limit.acquire("b", "org").unwrap();
        let refused = limit.acquire("b", "org").unwrap_err();
        assert!(
            refused.message.contains("on this server (limit 3)"),
            "{refused:?}"
        );
        assert_eq!(refused.reclaim_from, None, "the only organization");
        drop(a1);
        assert_eq!(limit.open_on("a"), 1);
        let _b2 = limit.acquire("b", "org").unwrap();
        assert_eq!(limit.open_total(), 3);
    }

    /// One organization with many databases takes its share of the node, never the whole:
    /// another organization is still let in.
    #[test]
    fn an_organization_with_many_databases_gets_its_share_only() {
        let limit = OpenLimit::new("streams", 256, 4, 16);
        let mut held = Vec::new();
        for db in 0..17 {
            for _ in 0..2 {
                if let Ok(permit) = limit.acquire(&format!("a{db}"), "org-a") {
                    held.push(permit);
                }
            }
        }
        assert_eq!(held.len(), 4);
        assert_eq!(limit.open_for("org-a"), 4);
        let refused = limit.acquire("a17", "org-a").unwrap_err();
        assert!(
            refused
                .message
                .contains("for this organization on this server (limit 4)"),
            "{refused:?}"
        );
        assert_eq!(refused.reclaim_from, None);
        let _b = limit.acquire("b", "org-b").unwrap();
        drop(held);
        assert_eq!(limit.open_for("org-a"), 0);
        assert_eq!(limit.open_total(), 1);
    }

    /// A full node names the organization above its fair share to a caller below it, and
    /// nobody to a caller already at or above it.
    #[test]
    fn a_full_node_names_who_holds_more_than_a_fair_share() {
        let limit = OpenLimit::new("streams", 100, 6, 10);
        let mut held = Vec::new();
        for _ in 0..6 {
            held.push(limit.acquire("a", "org-a").unwrap());
        }
        for _ in 0..4 {
            held.push(limit.acquire("b", "org-b").unwrap());
        }
        // Three organizations: a fair share is 3; org-a holds 6, org-b 4.
        let refused = limit.acquire("c", "org-c").unwrap_err();
        assert!(refused.message.contains("on this server (limit 10)"));
        assert_eq!(refused.reclaim_from.as_deref(), Some("org-a"));
        // Between org-a and org-b a fair share is 5: org-b, at 4, may take from org-a.
        let refused = limit.acquire("b", "org-b").unwrap_err();
        assert_eq!(refused.reclaim_from.as_deref(), Some("org-a"));
        // org-a is at its cap anyway.
        let refused = limit.acquire("a", "org-a").unwrap_err();
        assert_eq!(refused.reclaim_from, None);
        // org-a down to 5, org-b up to 5: both hold their fair share, nobody gives way.
        held.remove(0);
        let _b5 = limit.acquire("b", "org-b").unwrap();
        let refused = limit.acquire("b", "org-b").unwrap_err();
        assert_eq!(refused.reclaim_from, None);
    }
}
