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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A writer that waited this recently still counts as waiting.
const WAITER_MEMORY: Duration = Duration::from_secs(2);

/// One database's record of writers waiting for its lock.
#[derive(Default)]
pub struct WriteLockWatch {
    /// When a writer last waited, in milliseconds since [`epoch`] (0: never).
    last_wait_ms: AtomicU64,
    /// Writers of this process waiting in the busy handler right now.
    waiters: AtomicUsize,
    /// Counts the moments a statement of this process ended with no transaction open (so
    /// holding no lock); a waiter wakes when it moves.
    releases: Mutex<u64>,
    released: Condvar,
    /// A writer outside a transaction holds the turn ([`WriteLockWatch::take_turn`]).
    turn_taken: Mutex<bool>,
    turn_given_back: Condvar,
}

/// A writer's turn at a database, or its wait for one that ran out; given back (and the
/// wait forgotten) when dropped, after the statement.
pub struct WriterTurn<'a> {
    watch: &'a WriteLockWatch,
    held: bool,
}

impl WriterTurn<'_> {
    /// Whether the writer has the turn (else its wait ran out).
    pub fn held(&self) -> bool {
        self.held
    }
}

impl Drop for WriterTurn<'_> {
    fn drop(&mut self) {
        WAITING.with(|context| context.borrow_mut().turn_wait_started = None);
        if self.held {
            *self
                .watch
                .turn_taken
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = false;
            self.watch.turn_given_back.notify_one();
        }
    }
}

impl WriteLockWatch {
    /// Waits, at most `within`, for this database's writer turn: one statement that writes
    /// outside a transaction at a time. SQLite has one writer anyway; left to its busy
    /// handler, 32 SQL threads inserting into one database at once each held a read
    /// snapshot while they retried, so checkpoints could not finish and were tried again on
    /// every commit, and throughput fell to 0.8 of what it was with fewer threads taking
    /// jobs at once. Waiting here, they hold nothing, and take their turns in order.
    /// When the wait runs out, the statement goes on to SQLite's own busy handling (a
    /// transaction of another connection may hold the lock, which turns do not cover),
    /// with what is left of `within`. Keep the answer until the statement has run.
    pub fn take_turn(&self, within: Duration) -> WriterTurn<'_> {
        let asked = Instant::now();
        WAITING.with(|context| context.borrow_mut().turn_wait_started = Some(asked));
        let taken = self.turn_taken.lock().unwrap_or_else(|p| p.into_inner());
        let (mut taken, waited) = self
            .turn_given_back
            .wait_timeout_while(taken, within, |taken| *taken)
            .unwrap_or_else(|p| p.into_inner());
        if waited.timed_out() && *taken {
            return WriterTurn {
                watch: self,
                held: false,
            };
        }
        *taken = true;
        WriterTurn {
            watch: self,
            held: true,
        }
    }

    /// A statement on this database just ended outside a transaction: one writer waiting
    /// for the lock may try again now instead of at the end of its back-off sleep.
    pub(crate) fn note_released(&self) {
        if self.waiters.load(Ordering::Acquire) == 0 {
            return;
        }
        *self.releases.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.released.notify_one();
    }

    /// Waits until a statement of this process ends outside a transaction, or `at_most`.
    fn wait_for_release(&self, at_most: Duration) {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let releases = self.releases.lock().unwrap_or_else(|p| p.into_inner());
        let seen = *releases;
        let _ = self
            .released
            .wait_timeout_while(releases, at_most, |releases| *releases == seen);
        self.waiters.fetch_sub(1, Ordering::AcqRel);
    }

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
    /// When the statement began waiting for its writer turn: its wait in the busy handler
    /// counts from then, so the two waits together stay within `limit`.
    turn_wait_started: Option<Instant>,
}

/// How long a statement run outside any [`WaitScope`] (Atoll's own work) waits.
const DEFAULT_BUSY_WAIT: Duration = Duration::from_secs(5);

thread_local! {
    static WAITING: RefCell<WaitContext> = const {
        RefCell::new(WaitContext {
            watch: None,
            limit: DEFAULT_BUSY_WAIT,
            started: None,
            turn_wait_started: None,
        })
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
                turn_wait_started: None,
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
                turn_wait_started: None,
            }
        });
    }
}

/// Waits between attempts, as SQLite's own busy timeout does: short at first.
const BACKOFF_MS: [u64; 12] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];

/// SQLite's busy handler: `true` to try again. It waits as SQLite's own busy timeout does
/// (the back-off above), but a writer of this process that lets go of the lock wakes one
/// waiter at once: sleeping through the back-off, 64 connections inserting into one
/// database spent most of their time asleep with the lock free, and the writers that
/// kept arriving in the meantime held readers' snapshots open so that checkpoints could
/// not finish and were tried again on every commit (each with two fsyncs).
fn on_busy(attempt: i32) -> bool {
    let wait = WAITING.with(|context| {
        let mut context = context.borrow_mut();
        let now = Instant::now();
        if attempt == 0 || context.started.is_none() {
            context.started = Some(context.turn_wait_started.unwrap_or(now));
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
        Some((
            Duration::from_millis(BACKOFF_MS[step]),
            context.watch.clone(),
        ))
    });
    match wait {
        Some((wait, Some(watch))) => {
            watch.wait_for_release(wait);
            true
        }
        Some((wait, None)) => {
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

    /// A writer of this process that lets go of the lock wakes a waiter at once, instead
    /// of leaving it asleep for the rest of its back-off (here a minute).
    #[test]
    fn a_release_wakes_a_waiting_writer() {
        let watch = Arc::new(WriteLockWatch::default());
        let (done, woke) = std::sync::mpsc::channel();
        let waiter = Arc::clone(&watch);
        std::thread::spawn(move || {
            waiter.wait_for_release(Duration::from_secs(60));
            let _ = done.send(());
        });
        while watch.waiters.load(Ordering::Acquire) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The waiter counts itself before it takes the lock it waits under: keep releasing
        // until it is woken (a release before it waits is one it need not see).
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            watch.note_released();
            match woke.recv_timeout(Duration::from_millis(50)) {
                Ok(()) => break,
                Err(_) if Instant::now() < deadline => continue,
                Err(error) => panic!("the waiter slept on: {error}"),
            }
        }
        assert_eq!(watch.waiters.load(Ordering::Acquire), 0);
    }

    /// Writers outside transactions take turns: the second waits for the first to give
    /// its turn back, and one that waits too long goes on without (to SQLite's busy
    /// handler, with nothing left of its wait).
    #[test]
    fn writers_take_turns() {
        let watch = Arc::new(WriteLockWatch::default());
        let _scope = WaitScope::enter(&watch, Duration::from_secs(60));
        let first = watch.take_turn(Duration::from_secs(60));
        assert!(first.held());
        let late = watch.take_turn(Duration::from_millis(20));
        assert!(!late.held());
        // Its busy wait counts from when it asked for the turn: already spent.
        assert!(WAITING.with(|context| context.borrow().turn_wait_started.is_some()));
        drop(late);
        assert!(WAITING.with(|context| context.borrow().turn_wait_started.is_none()));
        let (done, took) = std::sync::mpsc::channel();
        let other = Arc::clone(&watch);
        std::thread::spawn(move || {
            let turn = other.take_turn(Duration::from_secs(60));
            let _ = done.send(turn.held());
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(took.try_recv().is_err(), "took a turn that was held");
        drop(first);
        assert!(took.recv_timeout(Duration::from_secs(20)).unwrap());
    }

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
