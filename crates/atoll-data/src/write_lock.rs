//! Who waits for a database's write lock, and when a transaction holding it must let go.
//!
//! SQLite has one writer per database. A client that opens a write transaction and then
//! waits (on its own network, or forever) would otherwise keep every other writer out for
//! as long as its stream lives. As sqld does, an interactive transaction that has held the
//! write lock for longer than the transaction timeout while another writer waits is
//! rolled back, and the next request on its stream gets `TRANSACTION_TIMEOUT`.
//!
//! Waiters are seen through SQLite's busy handler: it runs on the thread of the statement
//! that waits, which [`WaitScope`] tells which database it is (a busy handler is a plain
//! function, so the context travels in a thread-local). Holders are the connections of
//! idle streams (HTTP batons, WebSocket streams); their sweepers ask
//! [`WriteLockWatch::must_yield`] and roll back.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A writer that waited this recently still counts as waiting.
const WAITER_MEMORY: Duration = Duration::from_secs(2);

/// One database's record of writers waiting for its lock.
#[derive(Default)]
pub struct WriteLockWatch {
    /// When a writer last waited, in milliseconds since [`epoch`] (0: never).
    last_wait_ms: AtomicU64,
}

impl WriteLockWatch {
    /// Records a writer waiting now (the busy handler; a hand-over waiting for the lock).
    pub(crate) fn note_waiting(&self) {
        self.last_wait_ms.store(now_ms().max(1), Ordering::Relaxed);
    }

    /// Whether a writer has waited for the lock within the last moments.
    pub fn writer_waiting(&self) -> bool {
        let at = self.last_wait_ms.load(Ordering::Relaxed);
        at != 0 && now_ms().saturating_sub(at) <= WAITER_MEMORY.as_millis() as u64
    }

    /// Whether a transaction that took the write lock at `since` must give it up now.
    pub fn must_yield(&self, since: Instant, timeout: Duration) -> bool {
        since.elapsed() >= timeout && self.writer_waiting()
    }
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

pub(crate) fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64
}

struct WaitContext {
    watch: Option<Arc<WriteLockWatch>>,
    limit: Duration,
    started: Option<Instant>,
}

/// How long a statement run outside any [`WaitScope`] (Atoll's own work) waits.
const DEFAULT_BUSY_WAIT: Duration = Duration::from_secs(5);

thread_local! {
    static WAITING: RefCell<WaitContext> = const {
        RefCell::new(WaitContext { watch: None, limit: DEFAULT_BUSY_WAIT, started: None })
    };
}

/// While it lives, statements on this thread wait up to `limit` for `watch`'s database.
pub struct WaitScope(());

impl WaitScope {
    pub fn enter(watch: &Arc<WriteLockWatch>, limit: Duration) -> WaitScope {
        WAITING.with(|context| {
            *context.borrow_mut() = WaitContext {
                watch: Some(Arc::clone(watch)),
                limit,
                started: None,
            }
        });
        WaitScope(())
    }
}

impl Drop for WaitScope {
    fn drop(&mut self) {
        WAITING.with(|context| {
            *context.borrow_mut() = WaitContext {
                watch: None,
                limit: DEFAULT_BUSY_WAIT,
                started: None,
            }
        });
    }
}

/// Waits between attempts, as SQLite's own busy timeout does: short at first.
const BACKOFF_MS: [u64; 12] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];

/// SQLite's busy handler: `true` to try again.
fn on_busy(attempt: i32) -> bool {
    let wait = WAITING.with(|context| {
        let mut context = context.borrow_mut();
        let now = Instant::now();
        if attempt == 0 || context.started.is_none() {
            context.started = Some(now);
        }
        let started = context.started.unwrap_or(now);
        if now.duration_since(started) >= context.limit {
            context.started = None;
            return None;
        }
        if let Some(watch) = &context.watch {
            watch.note_waiting();
        }
        let step = usize::try_from(attempt)
            .unwrap_or(0)
            .min(BACKOFF_MS.len() - 1);
        Some(Duration::from_millis(BACKOFF_MS[step]))
    });
    match wait {
        Some(wait) => {
            std::thread::sleep(wait);
            true
        }
        None => false,
    }
}

pub(crate) fn install_busy_handler(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.busy_handler(Some(on_busy))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_yields_only_while_a_writer_waits() {
        let watch = Arc::new(WriteLockWatch::default());
        let long_ago = Instant::now() - Duration::from_secs(10);
        assert!(!watch.must_yield(long_ago, Duration::from_secs(5)));
        let _scope = WaitScope::enter(&watch, Duration::from_millis(20));
        // The first attempt waits and records the waiter.
        assert!(on_busy(0));
        assert!(watch.must_yield(long_ago, Duration::from_secs(5)));
        assert!(!watch.must_yield(Instant::now(), Duration::from_secs(5)));
        // Past the limit, the waiter gives up.
        std::thread::sleep(Duration::from_millis(25));
        assert!(!on_busy(5));
    }
}
