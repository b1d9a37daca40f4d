//! The threads tenant SQL runs on: a fixed number of its own, apart from tokio's blocking
//! pool (which the metadata store, uploads and the control plane use). Tenants that keep
//! every one of these threads busy slow each other down (their statements queue, and each
//! ends by its deadline), but the API, logins and the metadata store keep answering.
//!
//! Fair shares (docs/DESIGN.md, "Blast radius"): work is queued per tenant (the
//! organization a database belongs to), and a free thread takes the next job of the tenant
//! with the fewest jobs running, the one served longest ago among equals. A tenant with 48
//! runaway statements queued therefore delays another tenant's statement by one statement
//! at most (until the first of the runaway ones running ends), not by 48; with nobody else
//! waiting, it may use every thread. A tenant's own jobs run in the order it queued them.

use crate::error::DataError;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Threads per core when `--sql-threads` is not given. Tenant statements block on the disk
/// and on each other's locks as much as they compute, so more threads than cores keep the
/// cores busy; a cursor's thread also waits for its client to read.
const THREADS_PER_CORE: usize = 16;
const MIN_THREADS: usize = 16;

/// The tenant of the node's own work (sweeping expired streams, creates the control plane
/// asks for): no organization id is empty.
pub const NODE_TENANT: &str = "";

pub struct SqlPool {
    queues: Arc<Queues>,
    threads: usize,
}

struct Queues {
    state: Mutex<QueueState>,
    /// Signalled when a job is queued.
    queued: Condvar,
}

#[derive(Default)]
struct QueueState {
    tenants: HashMap<Arc<str>, Tenant>,
    /// The tenants with jobs waiting, in the order they are served: fewest jobs running
    /// first, then the one served longest ago.
    waiting: BTreeSet<(usize, u64, Arc<str>)>,
    /// Counts jobs started, to order tenants by when they were last served.
    started: u64,
    /// The pool was dropped: threads end once nothing is queued.
    closed: bool,
    /// Threads waiting for a job: a job queued while none waits wakes nobody (every
    /// thread takes the next job itself when it finishes one).
    idle: usize,
}

/// A tenant with jobs waiting or running (forgotten when it has neither).
#[derive(Default)]
struct Tenant {
    jobs: VecDeque<Job>,
    running: usize,
    last_served: u64,
}

impl Tenant {
    fn turn(&self, key: &Arc<str>) -> (usize, u64, Arc<str>) {
        (self.running, self.last_served, Arc::clone(key))
    }
}

impl QueueState {
    fn push(&mut self, tenant: &str, job: Job) {
        let key = match self.tenants.get_key_value(tenant) {
            Some((key, _)) => Arc::clone(key),
            None => Arc::from(tenant),
        };
        let entry = self.tenants.entry(Arc::clone(&key)).or_default();
        if entry.jobs.is_empty() {
            self.waiting.insert(entry.turn(&key));
        }
        entry.jobs.push_back(job);
    }

    /// The next job to run, and its tenant (now counted as running one more).
    fn pop(&mut self) -> Option<(Arc<str>, Job)> {
        let (_, _, key) = self.waiting.pop_first()?;
        self.started += 1;
        let tenant = self.tenants.get_mut(&key)?;
        let job = tenant.jobs.pop_front()?;
        tenant.running += 1;
        tenant.last_served = self.started;
        if !tenant.jobs.is_empty() {
            self.waiting.insert(tenant.turn(&key));
        }
        Some((key, job))
    }

    /// A job of `key` ended.
    fn finished(&mut self, key: &Arc<str>) {
        let Some(tenant) = self.tenants.get_mut(key) else {
            return;
        };
        if tenant.jobs.is_empty() {
            tenant.running -= 1;
            if tenant.running == 0 {
                self.tenants.remove(key);
            }
            return;
        }
        // Waiting with one job fewer running: earlier in the turn.
        self.waiting.remove(&tenant.turn(key));
        tenant.running -= 1;
        self.waiting.insert(tenant.turn(key));
    }
}

impl SqlPool {
    /// The default size for this machine.
    pub fn default_threads() -> usize {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        (cores * THREADS_PER_CORE).max(MIN_THREADS)
    }

    pub fn new(threads: usize) -> SqlPool {
        let threads = threads.max(1);
        let queues = Arc::new(Queues {
            state: Mutex::new(QueueState::default()),
            queued: Condvar::new(),
        });
        for index in 0..threads {
            let queues = Arc::clone(&queues);
            let spawned = std::thread::Builder::new()
                .name(format!("atoll-sql-{index}"))
                .spawn(move || queues.work());
            if let Err(error) = spawned {
                tracing::error!(%error, "cannot start an SQL thread");
            }
        }
        SqlPool { queues, threads }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `work` for `tenant` (an organization id) on one of the pool's threads, in its
    /// turn among the tenants waiting.
    pub fn spawn_for(&self, tenant: &str, work: impl FnOnce() + Send + 'static) {
        let wake = {
            let mut state = self.queues.lock();
            state.push(tenant, Box::new(work));
            state.idle > 0
        };
        if wake {
            self.queues.queued.notify_one();
        }
    }

    /// Runs `work` for `tenant` on the pool and waits for its result.
    pub async fn run_for<T: Send + 'static>(
        &self,
        tenant: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, DataError> {
        let (done, result) = tokio::sync::oneshot::channel();
        self.spawn_for(tenant, move || {
            let _ = done.send(work());
        });
        result
            .await
            .map_err(|_| DataError::Internal("a database task failed".into()))
    }

    /// Runs the node's own `work` (as the tenant [`NODE_TENANT`]).
    pub fn spawn(&self, work: impl FnOnce() + Send + 'static) {
        self.spawn_for(NODE_TENANT, work);
    }

    /// Runs the node's own `work` (as the tenant [`NODE_TENANT`]) and waits for its result.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, DataError> {
        self.run_for(NODE_TENANT, work).await
    }
}

impl Drop for SqlPool {
    fn drop(&mut self) {
        self.queues.lock().closed = true;
        self.queues.queued.notify_all();
    }
}

impl Queues {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An SQL thread's life: the next job in turn, until the pool is dropped and nothing
    /// is left queued.
    fn work(&self) {
        // The tenant of the job this thread just ran: counted as finished under the same
        // lock that takes the next job (one lock per job on a thread, not two).
        let mut finished: Option<Arc<str>> = None;
        loop {
            let (tenant, job) = {
                let mut state = self.lock();
                if let Some(tenant) = finished.take() {
                    state.finished(&tenant);
                }
                loop {
                    if let Some(next) = state.pop() {
                        break next;
                    }
                    if state.closed {
                        return;
                    }
                    state.idle += 1;
                    state = self.queued.wait(state).unwrap_or_else(|p| p.into_inner());
                    state.idle -= 1;
                }
            };
            // A panicking statement must not take its thread with it: the pool would
            // shrink with every panic.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            finished = Some(tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn runs_work_and_survives_panics() {
        let pool = SqlPool::new(1);
        assert!(pool.run(|| panic!("a statement panicked")).await.is_err());
        assert_eq!(pool.run(|| 41 + 1).await.unwrap(), 42);
        assert_eq!(pool.run_for("org-a", || 7).await.unwrap(), 7);
    }

    /// Starts, on a pool of `threads`, a job holding its thread until released, and waits
    /// until it runs: the jobs queued next wait for a thread.
    fn occupy(pool: &SqlPool, tenant: &str) -> std::sync::mpsc::Sender<()> {
        let (started_tx, started) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        pool.spawn_for(tenant, move || {
            let _ = started_tx.send(());
            let _ = released.recv();
        });
        started.recv_timeout(Duration::from_secs(10)).unwrap();
        release
    }

    /// The order in which queued jobs ran, by label.
    fn run_queued(pool: &SqlPool, jobs: &[(&str, &'static str)]) -> Vec<&'static str> {
        let order = Arc::new(Mutex::new(Vec::new()));
        let (done_tx, done) = std::sync::mpsc::channel();
        for (tenant, label) in jobs {
            let (order, done_tx, label) = (Arc::clone(&order), done_tx.clone(), *label);
            pool.spawn_for(tenant, move || {
                order.lock().unwrap().push(label);
                let _ = done_tx.send(());
            });
        }
        for _ in jobs {
            done.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        let ran = order.lock().unwrap().clone();
        ran
    }

    /// Issue 26: one tenant's queue of slow statements delays another tenant's statement by
    /// one slot, not by the whole queue.
    #[test]
    fn another_tenants_job_runs_next_not_after_the_queue() {
        let pool = SqlPool::new(1);
        let release = occupy(&pool, "org-a");
        let mut jobs: Vec<(&str, &'static str)> = vec![("org-a", "a"); 10];
        jobs.push(("org-b", "b"));
        let runner = std::thread::spawn({
            let pool = Arc::new(pool);
            move || run_queued(&pool, &jobs)
        });
        std::thread::sleep(Duration::from_millis(50));
        release.send(()).unwrap();
        let order = runner.join().unwrap();
        assert_eq!(order.len(), 11);
        assert_eq!(order[0], "b", "{order:?}");
    }

    /// Tenants with jobs waiting are served in turn; each one's jobs in the order queued.
    #[test]
    fn tenants_take_turns() {
        let pool = Arc::new(SqlPool::new(1));
        let release = occupy(&pool, NODE_TENANT);
        let jobs = vec![
            ("org-a", "a1"),
            ("org-a", "a2"),
            ("org-a", "a3"),
            ("org-b", "b1"),
            ("org-b", "b2"),
            ("org-c", "c1"),
        ];
        let runner = std::thread::spawn({
            let pool = Arc::clone(&pool);
            move || run_queued(&pool, &jobs)
        });
        std::thread::sleep(Duration::from_millis(50));
        release.send(()).unwrap();
        assert_eq!(runner.join().unwrap(), ["a1", "b1", "c1", "a2", "b2", "a3"]);
    }

    /// With several threads, a tenant holding them all gives the next free one to a tenant
    /// with none running, whatever it has queued.
    #[test]
    fn the_tenant_with_fewest_jobs_running_goes_first() {
        let pool = Arc::new(SqlPool::new(2));
        let first = occupy(&pool, "org-a");
        let second = occupy(&pool, "org-a");
        let mut jobs: Vec<(&str, &'static str)> = vec![("org-a", "a"); 5];
        jobs.push(("org-b", "b"));
        let runner = std::thread::spawn({
            let pool = Arc::clone(&pool);
            move || run_queued(&pool, &jobs)
        });
        std::thread::sleep(Duration::from_millis(50));
        first.send(()).unwrap();
        let order = runner.join().unwrap();
        second.send(()).unwrap();
        assert_eq!(order[0], "b", "{order:?}");
        // Everything ran, and the pool forgot the tenants that are done.
        assert!(pool.queues.lock().waiting.is_empty());
    }
}
