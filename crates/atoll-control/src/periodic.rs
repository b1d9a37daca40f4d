//! The background loops' one schedule: the lifecycle jobs, the usage collector, the key
//! set refresher, the reconciler and the lost-node check each run a pass every interval
//! until their task is aborted (when `crate::serve` returns). A pass that fails is logged
//! and retried at the next tick; a pass that must run on one replica at a time takes its
//! lease in the store itself.

use std::future::Future;
use std::time::Duration;

/// When a periodic task runs its passes.
pub(crate) struct Schedule {
    pub interval: Duration,
    /// Whether the first pass runs at once (else one interval after the start).
    pub first_at_once: bool,
    /// Also woken by this (a pass asked for now), after `delay`.
    pub woken_by: Option<(&'static tokio::sync::Notify, Duration)>,
}

impl Schedule {
    /// A pass at once, then every `interval`.
    pub(crate) fn every(interval: Duration) -> Schedule {
        Schedule {
            interval,
            first_at_once: true,
            woken_by: None,
        }
    }

    /// A pass every `interval`, the first one interval after the start.
    pub(crate) fn after_each(interval: Duration) -> Schedule {
        Schedule {
            first_at_once: false,
            ..Schedule::every(interval)
        }
    }

    /// Also a pass `delay` after `wanted` is notified.
    pub(crate) fn or_when(self, wanted: &'static tokio::sync::Notify, delay: Duration) -> Schedule {
        Schedule {
            woken_by: Some((wanted, delay)),
            ..self
        }
    }
}

/// Runs `pass` on `schedule` for ever; a pass that fails is logged with `failure` (its
/// message) and the next tick runs it again. A late tick is delayed, never doubled.
pub(crate) async fn run<F, Fut, E>(schedule: Schedule, failure: &'static str, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut ticker = tokio::time::interval(schedule.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    if !schedule.first_at_once {
        // The first tick is immediate.
        ticker.tick().await;
    }
    loop {
        match schedule.woken_by {
            None => {
                ticker.tick().await;
            }
            Some((wanted, delay)) => {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = wanted.notified() => tokio::time::sleep(delay).await,
                }
            }
        }
        if let Err(error) = pass().await {
            tracing::warn!(%error, "{failure}");
        }
    }
}

/// [`run`] on a task of its own: aborting the handle stops it.
pub(crate) fn spawn<F, Fut, E>(
    schedule: Schedule,
    failure: &'static str,
    pass: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + 'static,
{
    tokio::spawn(run(schedule, failure, pass))
}
