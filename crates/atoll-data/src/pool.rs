//! The node's idle database connections: the warm set every tenant shares.
//!
//! A connection is checked out for a request and checked back in after it; idle ones are
//! kept for reuse by database and sandbox mode (read-only and read-write connections are
//! kept apart: statements are cached per connection under the rules of its mode), at most
//! `--max-idle-connections` over the node, and closed when unused for a while.
//!
//! Fair shares (docs/SECURITY.md, "Fair shares"): when the pool is full, the connection
//! closed to make room is the least recently used one of the organization holding the most,
//! if it holds more than its fair share (the pool's size divided among the organizations
//! with idle connections); otherwise the least recently used one of the node. A tenant
//! cycling through thousands of its own databases then evicts its own warm connections,
//! not its neighbours', who keep theirs and their warm latency; a tenant alone on the node
//! may still fill the whole pool.

use crate::database::Database;
use crate::error::DataError;
use crate::sandbox::{Mode, SandboxSettings, SandboxedConnection};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct ConnectionPool {
    max_idle: usize,
    sandbox: SandboxSettings,
    shutdown: Arc<AtomicBool>,
    inner: Mutex<PoolInner>,
}

type PoolKey = (String, Mode);

/// An idle connection's place in the pool.
struct Entry {
    key: PoolKey,
    org: Arc<str>,
    since: Instant,
}

#[derive(Default)]
struct PoolInner {
    by_db: HashMap<PoolKey, Vec<(u64, SandboxedConnection)>>,
    /// Least recently returned first.
    order: BTreeMap<u64, Entry>,
    /// Each organization's idle connections, least recently returned first.
    by_org: HashMap<Arc<str>, BTreeSet<u64>>,
    /// Organizations by how many idle connections they hold (the last holds the most).
    org_sizes: BTreeSet<(usize, Arc<str>)>,
    next: u64,
}

impl PoolInner {
    fn insert(&mut self, key: PoolKey, org: &str, conn: SandboxedConnection) {
        let seq = self.next;
        self.next += 1;
        let org = match self.by_org.get_key_value(org) {
            Some((org, _)) => Arc::clone(org),
            None => Arc::from(org),
        };
        let held = self.by_org.entry(Arc::clone(&org)).or_default();
        self.org_sizes.remove(&(held.len(), Arc::clone(&org)));
        held.insert(seq);
        self.org_sizes.insert((held.len(), Arc::clone(&org)));
        self.by_db.entry(key.clone()).or_default().push((seq, conn));
        self.order.insert(
            seq,
            Entry {
                key,
                org,
                since: Instant::now(),
            },
        );
    }

    /// Takes the idle connection `seq` out of the pool.
    fn take(&mut self, seq: u64) -> Option<SandboxedConnection> {
        let entry = self.order.remove(&seq)?;
        if let Some(held) = self.by_org.get_mut(&entry.org) {
            self.org_sizes.remove(&(held.len(), Arc::clone(&entry.org)));
            held.remove(&seq);
            if held.is_empty() {
                self.by_org.remove(&entry.org);
            } else {
                self.org_sizes.insert((held.len(), Arc::clone(&entry.org)));
            }
        }
        let idle = self.by_db.get_mut(&entry.key)?;
        let taken = idle
            .iter()
            .position(|(s, _)| *s == seq)
            .map(|pos| idle.remove(pos).1);
        if idle.is_empty() {
            self.by_db.remove(&entry.key);
        }
        taken
    }

    /// The connection to close to make room: the least recently used of the organization
    /// holding the most when that is more than its fair share, else of the whole pool.
    fn victim(&self, max_idle: usize) -> Option<u64> {
        let fair_share = (max_idle / self.by_org.len().max(1)).max(1);
        match self.org_sizes.last() {
            Some((held, org)) if *held > fair_share => {
                self.by_org.get(org).and_then(|seqs| seqs.first().copied())
            }
            _ => self.order.keys().next().copied(),
        }
    }
}

impl ConnectionPool {
    pub fn new(
        max_idle: usize,
        sandbox: SandboxSettings,
        shutdown: Arc<AtomicBool>,
    ) -> ConnectionPool {
        ConnectionPool {
            max_idle,
            sandbox,
            shutdown,
            inner: Mutex::new(PoolInner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection to `db` for `mode`, or a new one.
    pub fn checkout(&self, db: &Database, mode: Mode) -> Result<SandboxedConnection, DataError> {
        match self.checkout_idle(db, mode) {
            Some(conn) => Ok(conn),
            None => db.open_connection(mode, &self.sandbox, &self.shutdown),
        }
    }

    /// An idle connection to `db` for `mode`, if there is one (never opens a file).
    pub fn checkout_idle(&self, db: &Database, mode: Mode) -> Option<SandboxedConnection> {
        let key = (db.id().to_string(), mode);
        let mut inner = self.lock();
        let (seq, _) = inner.by_db.get(&key)?.last()?;
        let seq = *seq;
        inner.take(seq)
    }

    /// Returns a connection to `db` for reuse. One inside a transaction is closed instead
    /// (which rolls the transaction back).
    pub fn checkin(&self, db: &Database, conn: SandboxedConnection) {
        if !conn.conn.is_autocommit() {
            return;
        }
        let key = (db.id().to_string(), conn.control.mode());
        let org = db.config().org_id.clone();
        let evicted = {
            let mut inner = self.lock();
            inner.insert(key, &org, conn);
            let mut evicted = Vec::new();
            while inner.order.len() > self.max_idle {
                let Some(seq) = inner.victim(self.max_idle) else {
                    break;
                };
                evicted.extend(inner.take(seq));
            }
            evicted
        };
        // Closing runs outside the lock (it may checkpoint).
        drop(evicted);
    }

    /// Drops the idle connections of a database (its limits changed, or it is going away).
    pub fn forget(&self, db_id: &str) {
        let dropped = {
            let mut inner = self.lock();
            let mut dropped = Vec::new();
            for mode in [Mode::ReadWrite, Mode::ReadOnly, Mode::DumpLoader] {
                let seqs: Vec<u64> = inner
                    .by_db
                    .get(&(db_id.to_string(), mode))
                    .map(|idle| idle.iter().map(|(seq, _)| *seq).collect())
                    .unwrap_or_default();
                for seq in seqs {
                    dropped.extend(inner.take(seq));
                }
            }
            dropped
        };
        drop(dropped);
    }

    /// Closes the connections nobody used for `unused_for`. A burst of concurrent clients
    /// leaves one idle connection per client behind, each with its page cache (up to
    /// `--page-cache-size`) and SQLite's own allocations: once the burst is over they are
    /// given back instead of kept until the node stops. Returns how many were closed.
    /// Closing may checkpoint: call it where blocking is allowed.
    pub fn close_unused(&self, unused_for: Duration) -> usize {
        let closed = {
            let mut inner = self.lock();
            let mut closed = Vec::new();
            while let Some((&seq, entry)) = inner.order.first_key_value() {
                if entry.since.elapsed() < unused_for {
                    break;
                }
                closed.extend(inner.take(seq));
            }
            closed
        };
        let count = closed.len();
        drop(closed);
        count
    }

    pub fn idle_count(&self) -> usize {
        self.lock().order.len()
    }

    /// Idle connections `org_id` holds.
    pub fn idle_count_of(&self, org_id: &str) -> usize {
        self.lock().by_org.get(org_id).map_or(0, BTreeSet::len)
    }
}
