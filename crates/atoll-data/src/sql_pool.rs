//! The threads tenant SQL runs on: a fixed number of its own, apart from tokio's blocking
//! pool (which the metadata store, uploads and the control plane use). Tenants that keep
//! every one of these threads busy slow each other down (their statements queue, and each
//! ends by its deadline), but the API, logins and the metadata store keep answering.

use crate::error::DataError;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Threads per core when `--sql-threads` is not given. Tenant statements block on the disk
/// and on each other's locks as much as they compute, so more threads than cores keep the
/// cores busy; a cursor's thread also waits for its client to read.
const THREADS_PER_CORE: usize = 16;
const MIN_THREADS: usize = 16;

pub struct SqlPool {
    jobs: Mutex<mpsc::Sender<Job>>,
    threads: usize,
}

impl SqlPool {
    /// The default size for this machine.
    pub fn default_threads() -> usize {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        (cores * THREADS_PER_CORE).max(MIN_THREADS)
    }

    pub fn new(threads: usize) -> SqlPool {
        let threads = threads.max(1);
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for index in 0..threads {
            let receiver = Arc::clone(&receiver);
            let spawned = std::thread::Builder::new()
                .name(format!("atoll-sql-{index}"))
                .spawn(move || loop {
                    let job = {
                        let receiver = receiver.lock().unwrap_or_else(|p| p.into_inner());
                        receiver.recv()
                    };
                    let Ok(job) = job else {
                        return;
                    };
                    // A panicking statement must not take its thread with it: the pool
                    // would shrink with every panic.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                });
            if let Err(error) = spawned {
                tracing::error!(%error, "cannot start an SQL thread");
            }
        }
        SqlPool {
            jobs: Mutex::new(sender),
            threads,
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `work` on one of the pool's threads (when one is free).
    pub fn spawn(&self, work: impl FnOnce() + Send + 'static) {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        // The receiver lives as long as the threads, which never stop.
        let _ = jobs.send(Box::new(work));
    }

    /// Runs `work` on the pool and waits for its result.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, DataError> {
        let (done, result) = tokio::sync::oneshot::channel();
        self.spawn(move || {
            let _ = done.send(work());
        });
        result
            .await
            .map_err(|_| DataError::Internal("a database task failed".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_work_and_survives_panics() {
        let pool = SqlPool::new(1);
        assert!(pool.run(|| panic!("a statement panicked")).await.is_err());
        assert_eq!(pool.run(|| 41 + 1).await.unwrap(), 42);
    }
}
