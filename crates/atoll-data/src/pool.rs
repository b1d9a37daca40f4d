//! The node's idle database connections: the warm set every tenant shares.
//!
//! A connection is checked out for a request and checked back in after it; idle ones are
//! kept for reuse by database and sandbox mode (read-only and read-write connections are
//! kept apart: statements are cached per connection under the rules of its mode), within
//! the warm set's budget (`warm_set`: a number of connections from the open-files limit,
//! and bytes of memory, each connection counted at what it holds), and closed when unused
//! for a while.
//!
//! Fair shares (docs/SECURITY.md, "Fair shares"): when the pool is over its budget, the
//! connection closed to make room is the least recently used one of the organization
//! holding the most, if it holds more than its fair share of connections or of memory (the
//! budget divided among the organizations with idle connections); otherwise the least
//! recently used one of the node. A tenant
//! cycling through thousands of its own databases then evicts its own warm connections,
//! not its neighbours', who keep theirs and their warm latency; a tenant alone on the node
//! may still fill the whole pool.

use crate::database::Database;
use crate::error::DataError;
use crate::memory::CONNECTION_OVERHEAD_BYTES;
use crate::sandbox::{Mode, SandboxSettings, SandboxedConnection};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// [`ConnectionPool::shed`] closes this share of the idle connections (1/8).
const SHED_DIVISOR: usize = 8;

pub struct ConnectionPool {
    max_idle: usize,
    /// Bytes the idle connections may hold together (`--warm-memory`).
    memory_budget: u64,
    sandbox: SandboxSettings,
    shutdown: Arc<AtomicBool>,
    /// An async worker is opening a connection ([`ConnectionPool::open_on_worker`]).
    worker_opening: AtomicBool,
    inner: Mutex<PoolInner>,
}

/// The one open under way on an async worker, given up when dropped.
struct WorkerOpen<'a>(&'a AtomicBool);

impl<'a> WorkerOpen<'a> {
    fn claim(opening: &'a AtomicBool) -> Option<WorkerOpen<'a>> {
        opening
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| WorkerOpen(opening))
    }
}

impl Drop for WorkerOpen<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

type PoolKey = (String, Mode);

/// An idle connection's place in the pool.
struct Entry {
    key: PoolKey,
    org: Arc<str>,
    since: Instant,
    /// Bytes it holds, as counted when it came back.
    bytes: u64,
}

/// What one organization holds in the pool.
#[derive(Default)]
struct Held {
    /// Its idle connections, least recently returned first.
    seqs: BTreeSet<u64>,
    bytes: u64,
}

#[derive(Default)]
struct PoolInner {
    by_db: HashMap<PoolKey, Vec<(u64, SandboxedConnection)>>,
    /// Least recently returned first.
    order: BTreeMap<u64, Entry>,
    by_org: HashMap<Arc<str>, Held>,
    /// Organizations by how many idle connections they hold (the last holds the most).
    org_counts: BTreeSet<(usize, Arc<str>)>,
    /// Organizations by the bytes their idle connections hold (the last holds the most).
    org_bytes: BTreeSet<(u64, Arc<str>)>,
    /// Bytes all idle connections hold.
    bytes: u64,
    next: u64,
}

impl PoolInner {
    fn insert(&mut self, key: PoolKey, org: &str, conn: SandboxedConnection, bytes: u64) {
        let seq = self.next;
        self.next += 1;
        let org = match self.by_org.get_key_value(org) {
            Some((org, _)) => Arc::clone(org),
            None => Arc::from(org),
        };
        let held = self.by_org.entry(Arc::clone(&org)).or_default();
        self.org_counts.remove(&(held.seqs.len(), Arc::clone(&org)));
        self.org_bytes.remove(&(held.bytes, Arc::clone(&org)));
        held.seqs.insert(seq);
        held.bytes += bytes;
        self.org_counts.insert((held.seqs.len(), Arc::clone(&org)));
        self.org_bytes.insert((held.bytes, Arc::clone(&org)));
        self.bytes += bytes;
        self.by_db.entry(key.clone()).or_default().push((seq, conn));
        self.order.insert(
            seq,
            Entry {
                key,
                org,
                since: Instant::now(),
                bytes,
            },
        );
    }

    /// Takes the idle connection `seq` out of the pool.
    fn take(&mut self, seq: u64) -> Option<SandboxedConnection> {
        let entry = self.order.remove(&seq)?;
        self.bytes -= entry.bytes;
        if let Some(held) = self.by_org.get_mut(&entry.org) {
            self.org_counts
                .remove(&(held.seqs.len(), Arc::clone(&entry.org)));
            self.org_bytes.remove(&(held.bytes, Arc::clone(&entry.org)));
            held.seqs.remove(&seq);
            held.bytes -= entry.bytes;
            if held.seqs.is_empty() {
                self.by_org.remove(&entry.org);
            } else {
                self.org_counts
                    .insert((held.seqs.len(), Arc::clone(&entry.org)));
                self.org_bytes.insert((held.bytes, Arc::clone(&entry.org)));
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

    fn over_budget(&self, max_idle: usize, memory_budget: u64) -> bool {
        self.order.len() > max_idle || self.bytes > memory_budget
    }

    /// The connection to close to make room: the least recently used of the organization
    /// holding the largest part of a budget (connections or memory) when that is more than
    /// its fair share, else of the whole pool.
    fn victim(&self, max_idle: usize, memory_budget: u64) -> Option<u64> {
        let orgs = self.by_org.len().max(1);
        let count_share = (max_idle / orgs).max(1);
        let memory_share = (memory_budget / orgs as u64).max(1);
        // Each candidate's excess, as a fraction of its fair share.
        let by_count = self
            .org_counts
            .last()
            .filter(|(held, _)| *held > count_share)
            .map(|(held, org)| (*held as f64 / count_share as f64, org));
        let by_memory = self
            .org_bytes
            .last()
            .filter(|(held, _)| *held > memory_share)
            .map(|(held, org)| (*held as f64 / memory_share as f64, org));
        let over = match (by_count, by_memory) {
            (Some(a), Some(b)) => Some(if a.0 >= b.0 { a.1 } else { b.1 }),
            (a, b) => a.or(b).map(|(_, org)| org),
        };
        match over {
            Some(org) => self
                .by_org
                .get(org)
                .and_then(|held| held.seqs.first().copied()),
            None => self.order.keys().next().copied(),
        }
    }
}

impl ConnectionPool {
    pub fn new(
        max_idle: usize,
        memory_budget: u64,
        sandbox: SandboxSettings,
        shutdown: Arc<AtomicBool>,
    ) -> ConnectionPool {
        ConnectionPool {
            max_idle,
            memory_budget,
            sandbox,
            shutdown,
            worker_opening: AtomicBool::new(false),
            inner: Mutex::new(PoolInner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection to `db` for `mode`, or a new one. An encrypted database's
    /// connections open with `key`, which the caller checked against the database's
    /// verifier (`crate::encryption`): the database has one key, so every idle connection
    /// of it was opened with the key this caller holds.
    pub fn checkout(
        &self,
        db: &Database,
        mode: Mode,
        key: Option<&atoll_storage::encryption::EncryptionKey>,
    ) -> Result<SandboxedConnection, DataError> {
        if let Some(conn) = self.checkout_idle(db, mode) {
            return Ok(conn);
        }
        match db.open_connection(mode, &self.sandbox, &self.shutdown, key) {
            // The warm set gives descriptors back for the open that needs them.
            Err(_) if crate::warm_set::short_of_descriptors() && self.shed() > 0 => {
                db.open_connection(mode, &self.sandbox, &self.shutdown, key)
            }
            opened => opened,
        }
    }

    /// Closes an eighth of the idle connections (at least one), chosen as for the budget
    /// (beyond a fair share first, then the least recently used), to give their file
    /// descriptors back: the process is short of them, whatever took them (client
    /// sockets, streams, uploads). Answers how many were closed. Closing may checkpoint:
    /// call it where blocking is allowed.
    pub fn shed(&self) -> usize {
        let closed = {
            let mut inner = self.lock();
            let count = (inner.order.len() / SHED_DIVISOR).max(1);
            let mut closed = Vec::with_capacity(count);
            while closed.len() < count {
                let Some(seq) = inner.victim(self.max_idle, self.memory_budget) else {
                    break;
                };
                closed.extend(inner.take(seq));
            }
            closed
        };
        let count = closed.len();
        drop(closed);
        if count > 0 {
            metrics::counter!("atoll_idle_connections_shed_total").increment(count as u64);
            tracing::warn!(
                closed = count,
                "the process is short of file descriptors: closed idle database connections"
            );
        }
        count
    }

    /// An idle connection to `db` for `mode`, if there is one (never opens a file).
    pub fn checkout_idle(&self, db: &Database, mode: Mode) -> Option<SandboxedConnection> {
        let key = (db.id().to_string(), mode);
        let mut inner = self.lock();
        let (seq, _) = inner.by_db.get(&key)?.last()?;
        let seq = *seq;
        inner.take(seq)
    }

    /// A new connection to `db` for `mode`, opened by the async worker that calls this:
    /// never an idle one, and nothing is closed to make room (as
    /// [`ConnectionPool::checkout`] does when the process is short of file descriptors;
    /// closing may checkpoint). `None` when another worker is opening one right now — one
    /// at a time, so a flood of cold reads leaves the other workers to everyone else's
    /// requests — or when the open failed (the caller goes the usual way, which reports
    /// it).
    pub fn open_on_worker(&self, db: &Database, mode: Mode) -> Option<SandboxedConnection> {
        let _opening = WorkerOpen::claim(&self.worker_opening)?;
        db.open_connection(mode, &self.sandbox, &self.shutdown, None)
            .ok()
    }

    /// Returns a connection to `db` for reuse. One inside a transaction is closed instead
    /// (which rolls the transaction back).
    pub fn checkin(&self, db: &Database, conn: SandboxedConnection) {
        // Closing runs here, outside the lock (it may checkpoint).
        drop(self.checkin_keeping_closed(db, conn));
    }

    /// [`ConnectionPool::checkin`], answering the connections to close instead of closing
    /// them (the one given back, if it is inside a transaction, and those evicted to stay
    /// within the budget): the caller closes them where blocking is allowed.
    #[must_use = "the connections answered must be closed (dropped) where blocking is allowed"]
    pub fn checkin_keeping_closed(
        &self,
        db: &Database,
        mut conn: SandboxedConnection,
    ) -> Vec<SandboxedConnection> {
        if !conn.conn.is_autocommit() {
            return vec![conn];
        }
        let key = (db.id().to_string(), conn.control.mode());
        let org = db.config().org_id.clone();
        let bytes = conn.heap.bytes(&conn.conn) + CONNECTION_OVERHEAD_BYTES;
        let mut inner = self.lock();
        inner.insert(key, &org, conn, bytes);
        let mut evicted = Vec::new();
        while inner.over_budget(self.max_idle, self.memory_budget) {
            let Some(seq) = inner.victim(self.max_idle, self.memory_budget) else {
                break;
            };
            evicted.extend(inner.take(seq));
        }
        evicted
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
        self.lock()
            .by_org
            .get(org_id)
            .map_or(0, |held| held.seqs.len())
    }

    /// Bytes the idle connections hold, as counted against `--warm-memory`.
    pub fn idle_bytes(&self) -> u64 {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One async worker opens at a time: a second claim while the first holds fails, and
    /// the claim is given back when its holder ends, however it ends.
    #[test]
    fn one_worker_opens_at_a_time() {
        let opening = AtomicBool::new(false);
        let first = WorkerOpen::claim(&opening).expect("nobody is opening");
        assert!(WorkerOpen::claim(&opening).is_none());
        drop(first);
        let unwound = std::panic::catch_unwind(|| {
            let _held = WorkerOpen::claim(&opening).unwrap();
            panic!("the open failed midway");
        });
        assert!(unwound.is_err());
        assert!(WorkerOpen::claim(&opening).is_some());
    }
}
