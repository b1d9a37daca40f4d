//! Long orders of the node admin API (a create, a restore in place, the listing of
//! backups, a move's hand-over and adopt) run as operations: the order answers `202` with
//! the operation's id at once, the work goes on in the background, and
//! `GET /v1/operations/{id}` says how far it is and, once finished, its outcome. The
//! control plane polls it with a short timeout per poll, so a node that stops answering
//! mid-order is noticed in seconds rather than after the whole order's time.
//!
//! - **One at a time per database.** An order for a database that has an operation
//!   running answers that operation when it asks the same (a retried order joins it,
//!   never starts a second copy), and 409 when it asks something else. The listing of
//!   backups only reads: it runs beside any other.
//! - **Bounded per organization**: at most [`MAX_RUNNING_PER_ORG`] running at once
//!   (429 with `Retry-After` beyond), so one tenant's bulk restores cannot take every
//!   blocking thread of the node.
//! - **Forgotten after a while**: a finished operation is kept [`KEEP_FINISHED`], and
//!   no more than [`MAX_FINISHED`] of them, so memory stays bounded however many orders
//!   a node has run.
//! - **Only in memory.** A node that restarts forgets its operations: the control plane
//!   then finds the id unknown (404), takes the order as failed and undoes it as it undoes
//!   any failed order. The work itself was cut off with the process; each order's work is
//!   safe to cut (a create stages its files and renames them last, a hand-over is marked
//!   on disk and finished or undone by the reconciler).
//! - **Abandoned work is rolled back where it can be**: an operation is abandoned when a
//!   delete of its database arrives while it runs, when it is cancelled
//!   (`DELETE /v1/operations/{id}`), or when nobody has asked about it for
//!   [`ABANDONED_AFTER`] (its control plane gave up on it or died). A create that
//!   finishes abandoned deletes what it created; the other orders' outcomes stand (a
//!   restore is one transaction at the head of the log, a hand-over is finished by the
//!   reconciler's abandoned-move rule).
//!
//! Each phase is logged with the operation's id, and `atoll_node_operations_running`
//! (by kind) and `atoll_node_operations_total` (by kind and outcome) count them.

use crate::error::DataError;
use atoll_types::node::{
    Operation, OperationError, OperationKind, OperationProgress, OperationState,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many long operations one organization may have running on a node at once.
pub const MAX_RUNNING_PER_ORG: usize = 8;

/// How long a finished operation's outcome stays readable.
pub const KEEP_FINISHED: Duration = Duration::from_secs(600);

/// How many finished operations a node keeps at most (the oldest go first).
pub const MAX_FINISHED: usize = 256;

/// An operation nobody has asked about for this long was given up by whoever ordered it
/// (the control plane polls at least every few seconds while it waits).
pub const ABANDONED_AFTER: Duration = Duration::from_secs(30);

/// The seconds a tenant over [`MAX_RUNNING_PER_ORG`] is told to wait.
const RETRY_AFTER_SECS: u64 = 5;

/// The node's operations: running and recently finished.
#[derive(Default)]
pub struct Operations {
    entries: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    kind: OperationKind,
    database_id: String,
    org_id: String,
    started_at_ms: i64,
    progress: Arc<Progress>,
    /// `None` while it runs.
    finished: Option<Finished>,
    /// A delete of its database or a cancel arrived while it ran.
    cancelled: bool,
    /// When someone last asked about it (or it started).
    last_asked: Instant,
}

struct Finished {
    at: Instant,
    at_ms: i64,
    outcome: Result<serde_json::Value, OperationError>,
}

/// What an operation reports while it runs: its phase, and bytes done of a total where
/// the work can tell (or a probe that measures them when asked).
struct Progress {
    phase: Mutex<String>,
    done: AtomicU64,
    /// `u64::MAX`: not known.
    total: AtomicU64,
    /// Measures the bytes done when asked (the size of a file being written).
    probe: Mutex<Option<Probe>>,
}

type Probe = Box<dyn Fn() -> u64 + Send + Sync>;

/// What [`Operations::start`] did.
pub enum Started {
    /// A new operation: the caller runs its work and finishes it ([`Running::finish`]).
    New(Running),
    /// The same order is already running for this database: its id.
    Joined(String),
}

impl Operations {
    pub fn new() -> Arc<Operations> {
        Arc::new(Operations::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts an operation of `kind` on `database_id` for organization `org_id`, unless
    /// one runs for that database already (the same kind: joined; another: 409) or the
    /// organization has [`MAX_RUNNING_PER_ORG`] running (429).
    pub fn start(
        self: &Arc<Self>,
        kind: OperationKind,
        database_id: &str,
        org_id: &str,
    ) -> Result<Started, DataError> {
        let now = Instant::now();
        let mut entries = self.lock();
        prune(&mut entries, now);
        let running = |e: &&Entry| e.finished.is_none();
        let on_database = entries
            .iter()
            .filter(|(_, e)| e.finished.is_none() && e.database_id == database_id);
        for (id, entry) in on_database {
            if entry.kind == kind {
                return Ok(Started::Joined(id.clone()));
            }
            if ![entry.kind, kind].contains(&OperationKind::Backups) {
                return Err(DataError::Conflict(format!(
                    "database {database_id} has a {} operation running ({id}): try again once it is finished",
                    kind_name(entry.kind)
                )));
            }
        }
        let of_org = entries
            .values()
            .filter(running)
            .filter(|e| e.org_id == org_id)
            .count();
        if of_org >= MAX_RUNNING_PER_ORG {
            return Err(DataError::TooManyRequests(
                format!("the organization has {of_org} long operations running on this node: try again shortly"),
                RETRY_AFTER_SECS,
            ));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let progress = Arc::new(Progress {
            phase: Mutex::new("queued".into()),
            done: AtomicU64::new(0),
            total: AtomicU64::new(u64::MAX),
            probe: Mutex::new(None),
        });
        entries.insert(
            id.clone(),
            Entry {
                kind,
                database_id: database_id.to_string(),
                org_id: org_id.to_string(),
                started_at_ms: crate::admin::now_millis(),
                progress: Arc::clone(&progress),
                finished: None,
                cancelled: false,
                last_asked: now,
            },
        );
        metrics::gauge!("atoll_node_operations_running", "kind" => kind_name(kind)).increment(1);
        tracing::info!(operation = %id, kind = kind_name(kind), database_id, "operation started");
        Ok(Started::New(Running {
            tracker: Tracker {
                operations: Arc::clone(self),
                id,
                kind,
                database_id: database_id.to_string(),
                progress,
            },
            finished: false,
        }))
    }

    /// Operation `id` as it is now; asking counts as its orderer still waiting for it.
    pub fn get(&self, id: &str) -> Option<Operation> {
        let now = Instant::now();
        let mut entries = self.lock();
        prune(&mut entries, now);
        let entry = entries.get_mut(id)?;
        entry.last_asked = now;
        Some(report(id, entry))
    }

    /// Every running operation and those finished recently, the oldest first.
    pub fn list(&self) -> Vec<Operation> {
        let mut entries = self.lock();
        prune(&mut entries, Instant::now());
        let mut listed: Vec<Operation> = entries.iter().map(|(id, e)| report(id, e)).collect();
        listed.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        listed
    }

    /// Abandons operation `id` if it runs (see the module's documentation); answers it.
    pub fn cancel(&self, id: &str) -> Option<Operation> {
        let mut entries = self.lock();
        let entry = entries.get_mut(id)?;
        if entry.finished.is_none() && !entry.cancelled {
            entry.cancelled = true;
            tracing::warn!(operation = %id, kind = kind_name(entry.kind), database_id = %entry.database_id, "operation cancelled");
        }
        Some(report(id, entry))
    }

    /// Abandons the operation running on `database_id`, if any (its database is being
    /// deleted): answers whether there was one.
    pub fn cancel_for_database(&self, database_id: &str) -> bool {
        let ids: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, e)| e.finished.is_none() && e.database_id == database_id)
            .map(|(id, _)| id.clone())
            .collect();
        ids.iter().filter(|id| self.cancel(id).is_some()).count() > 0
    }

    fn abandoned(&self, id: &str, now: Instant) -> bool {
        self.lock().get(id).is_some_and(|e| {
            e.cancelled || now.saturating_duration_since(e.last_asked) > ABANDONED_AFTER
        })
    }

    fn finish(&self, id: &str, outcome: Result<serde_json::Value, OperationError>) {
        let now = Instant::now();
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(id) else {
            return;
        };
        if entry.finished.is_some() {
            return;
        }
        let kind = kind_name(entry.kind);
        let took_ms = crate::admin::now_millis() - entry.started_at_ms;
        match &outcome {
            Ok(_) => {
                tracing::info!(operation = %id, kind, database_id = %entry.database_id, took_ms, "operation done")
            }
            Err(e) => {
                tracing::warn!(operation = %id, kind, database_id = %entry.database_id, took_ms, status = e.status, error = %e.error, "operation failed")
            }
        }
        let outcome_label = if outcome.is_ok() { "done" } else { "failed" };
        metrics::gauge!("atoll_node_operations_running", "kind" => kind).decrement(1);
        metrics::counter!("atoll_node_operations_total", "kind" => kind, "outcome" => outcome_label)
            .increment(1);
        entry.finished = Some(Finished {
            at: now,
            at_ms: crate::admin::now_millis(),
            outcome,
        });
        prune(&mut entries, now);
    }
}

/// Forgets finished operations past [`KEEP_FINISHED`], then the oldest beyond
/// [`MAX_FINISHED`]. Running ones are never forgotten.
fn prune(entries: &mut HashMap<String, Entry>, now: Instant) {
    entries.retain(|_, e| {
        e.finished
            .as_ref()
            .is_none_or(|f| now.saturating_duration_since(f.at) <= KEEP_FINISHED)
    });
    let mut finished: Vec<(Instant, String)> = entries
        .iter()
        .filter_map(|(id, e)| e.finished.as_ref().map(|f| (f.at, id.clone())))
        .collect();
    if finished.len() > MAX_FINISHED {
        finished.sort();
        for (_, id) in &finished[..finished.len() - MAX_FINISHED] {
            entries.remove(id);
        }
    }
}

fn report(id: &str, entry: &Entry) -> Operation {
    let progress = &entry.progress;
    let (state, phase, result, error, finished_at_ms) = match &entry.finished {
        None => (
            OperationState::Running,
            progress
                .phase
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            None,
            None,
            None,
        ),
        Some(Finished {
            at_ms,
            outcome: Ok(value),
            ..
        }) => (
            OperationState::Done,
            "done".to_string(),
            Some(value.clone()),
            None,
            Some(*at_ms),
        ),
        Some(Finished {
            at_ms,
            outcome: Err(e),
            ..
        }) => (
            OperationState::Failed,
            "failed".to_string(),
            None,
            Some(e.clone()),
            Some(*at_ms),
        ),
    };
    let total = Some(progress.total.load(Ordering::Relaxed)).filter(|t| *t != u64::MAX);
    if entry.finished.is_none() {
        let probe = progress.probe.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(probe) = probe.as_ref() {
            // Kept: what the probe measures may be gone once the work is done (a staging
            // directory renamed into place).
            progress.done.fetch_max(probe(), Ordering::Relaxed);
        }
    }
    let done = match (&state, total) {
        (OperationState::Done, Some(total)) => total,
        _ => progress.done.load(Ordering::Relaxed),
    };
    Operation {
        id: id.to_string(),
        kind: entry.kind,
        database_id: entry.database_id.clone(),
        state,
        phase,
        progress: (done > 0 || total.is_some()).then(|| OperationProgress {
            done,
            total,
            unit: "bytes".into(),
        }),
        started_at_ms: entry.started_at_ms,
        finished_at_ms,
        result,
        error,
    }
}

/// The name of a kind, as logs and metrics label it.
pub fn kind_name(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::Create => "create",
        OperationKind::Restore => "restore",
        OperationKind::Backups => "backups",
        OperationKind::HandOver => "hand_over",
        OperationKind::Adopt => "adopt",
        OperationKind::RotateEncryptionKey => "rotate_encryption_key",
    }
}

/// What the work of an operation reports through: its phase and progress, and whether it
/// was abandoned.
#[derive(Clone)]
pub struct Tracker {
    operations: Arc<Operations>,
    id: String,
    kind: OperationKind,
    database_id: String,
    progress: Arc<Progress>,
}

impl Tracker {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The operation enters `phase` (logged).
    pub fn phase(&self, phase: &str) {
        *self
            .progress
            .phase
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = phase.to_string();
        tracing::info!(operation = %self.id, kind = kind_name(self.kind), database_id = %self.database_id, phase, "operation phase");
    }

    /// The bytes the work will have done when finished.
    pub fn set_total(&self, total: u64) {
        self.progress.total.store(total, Ordering::Relaxed);
    }

    /// The bytes done so far are measured by `probe` whenever someone asks.
    pub fn probe(&self, probe: impl Fn() -> u64 + Send + Sync + 'static) {
        *self
            .progress
            .probe
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Box::new(probe));
    }

    /// Whether whoever ordered it gave it up (see the module's documentation).
    pub fn abandoned(&self) -> bool {
        self.operations.abandoned(&self.id, Instant::now())
    }
}

/// A running operation: finished exactly once, by [`Running::finish`] or, if its work
/// ends without (a panic), as failed when dropped.
pub struct Running {
    tracker: Tracker,
    finished: bool,
}

impl Running {
    pub fn tracker(&self) -> Tracker {
        self.tracker.clone()
    }

    /// Records the work's outcome: the order's answer, or its error with the status the
    /// order would have answered.
    pub fn finish(mut self, outcome: Result<serde_json::Value, DataError>) {
        self.finished = true;
        let outcome = outcome.map_err(|e| OperationError {
            status: e.status().as_u16(),
            error: e.to_string(),
        });
        self.tracker.operations.finish(&self.tracker.id, outcome);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.finished {
            self.tracker.operations.finish(
                &self.tracker.id,
                Err(OperationError {
                    status: 500,
                    error: "internal error: the operation stopped before it finished".into(),
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(operations: &Arc<Operations>, kind: OperationKind, db: &str) -> Running {
        match operations.start(kind, db, "org").unwrap() {
            Started::New(running) => running,
            Started::Joined(id) => panic!("joined {id}"),
        }
    }

    #[test]
    fn an_operation_reports_its_phase_progress_and_outcome() {
        let operations = Operations::new();
        let running = started(&operations, OperationKind::Create, "db1");
        let tracker = running.tracker();
        let id = tracker.id().to_string();
        let seen = operations.get(&id).unwrap();
        assert_eq!(seen.state, OperationState::Running);
        assert_eq!(seen.phase, "queued");
        assert_eq!(seen.progress, None);

        tracker.phase("copying");
        tracker.set_total(100);
        tracker.probe(|| 40);
        let seen = operations.get(&id).unwrap();
        assert_eq!(seen.phase, "copying");
        assert_eq!(
            seen.progress,
            Some(OperationProgress {
                done: 40,
                total: Some(100),
                unit: "bytes".into()
            })
        );

        // What was measured stays once the probe measures nothing any more.
        tracker.probe(|| 0);
        assert_eq!(operations.get(&id).unwrap().progress.unwrap().done, 40);
        running.finish(Ok(serde_json::json!({})));
        let seen = operations.get(&id).unwrap();
        assert_eq!(seen.state, OperationState::Done);
        assert_eq!(seen.progress.unwrap().done, 100, "done is whole");
        assert_eq!(seen.result, Some(serde_json::json!({})));
        assert!(seen.finished_at_ms.is_some());
        assert_eq!(operations.list().len(), 1);
    }

    #[test]
    fn a_failure_keeps_the_status_the_order_would_have_answered() {
        let operations = Operations::new();
        let running = started(&operations, OperationKind::Restore, "db1");
        let id = running.tracker().id().to_string();
        running.finish(Err(DataError::UnknownDatabase("db1".into())));
        let seen = operations.get(&id).unwrap();
        assert_eq!(seen.state, OperationState::Failed);
        let error = seen.error.unwrap();
        assert_eq!(error.status, 404);
        assert!(error.error.contains("db1"), "{}", error.error);
    }

    #[test]
    fn work_that_ends_without_finishing_fails_its_operation() {
        let operations = Operations::new();
        let running = started(&operations, OperationKind::Adopt, "db1");
        let id = running.tracker().id().to_string();
        drop(running);
        let seen = operations.get(&id).unwrap();
        assert_eq!(seen.state, OperationState::Failed);
        assert_eq!(seen.error.unwrap().status, 500);
    }

    #[test]
    fn the_same_order_joins_the_running_operation_and_another_conflicts() {
        let operations = Operations::new();
        let running = started(&operations, OperationKind::Create, "db1");
        let id = running.tracker().id().to_string();
        match operations
            .start(OperationKind::Create, "db1", "org")
            .unwrap()
        {
            Started::Joined(joined) => assert_eq!(joined, id),
            Started::New(_) => panic!("a second create of db1 started"),
        }
        assert!(matches!(
            operations.start(OperationKind::Restore, "db1", "org"),
            Err(DataError::Conflict(_))
        ));
        // Another database is free; once finished, the same database is too.
        drop(started(&operations, OperationKind::Create, "db2"));
        // Listing backups only reads: beside a create, and a restore beside it.
        let listing = started(&operations, OperationKind::Backups, "db1");
        running.finish(Ok(serde_json::json!({})));
        drop(started(&operations, OperationKind::Restore, "db1"));
        drop(listing);
    }

    #[test]
    fn an_organization_has_a_bounded_number_running() {
        let operations = Operations::new();
        let running: Vec<Running> = (0..MAX_RUNNING_PER_ORG)
            .map(|i| started(&operations, OperationKind::Backups, &format!("db{i}")))
            .collect();
        assert!(matches!(
            operations.start(OperationKind::Backups, "one-more", "org"),
            Err(DataError::TooManyRequests(_, RETRY_AFTER_SECS))
        ));
        // Another organization is not held up by it.
        assert!(matches!(
            operations.start(OperationKind::Backups, "theirs", "other-org"),
            Ok(Started::New(_))
        ));
        drop(running);
        assert!(matches!(
            operations.start(OperationKind::Backups, "one-more", "org"),
            Ok(Started::New(_))
        ));
    }

    #[test]
    fn finished_operations_are_forgotten_after_a_while_and_beyond_a_count() {
        let operations = Operations::new();
        let first = started(&operations, OperationKind::Backups, "db-first");
        let first_id = first.tracker().id().to_string();
        first.finish(Ok(serde_json::json!({})));
        for i in 0..MAX_FINISHED {
            started(&operations, OperationKind::Backups, &format!("db{i}"))
                .finish(Ok(serde_json::json!({})));
        }
        assert_eq!(operations.list().len(), MAX_FINISHED);
        assert!(operations.get(&first_id).is_none(), "the oldest went first");

        // Past KEEP_FINISHED every finished one goes; a running one stays.
        let running = started(&operations, OperationKind::Create, "db-running");
        let later = Instant::now() + KEEP_FINISHED + Duration::from_secs(1);
        prune(&mut operations.lock(), later);
        let left = operations.list();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].state, OperationState::Running);
        drop(running);
    }

    #[test]
    fn an_operation_is_abandoned_when_cancelled_deleted_or_no_longer_asked_about() {
        let operations = Operations::new();
        let running = started(&operations, OperationKind::Create, "db1");
        let tracker = running.tracker();
        let now = Instant::now();
        assert!(!tracker.abandoned());
        assert!(!operations.abandoned(tracker.id(), now + ABANDONED_AFTER - Duration::from_secs(1)));
        assert!(operations.abandoned(tracker.id(), now + ABANDONED_AFTER + Duration::from_secs(1)));
        assert!(operations.cancel_for_database("db1"));
        assert!(tracker.abandoned());
        assert!(!operations.cancel_for_database("db2"));

        let other = started(&operations, OperationKind::Create, "db2");
        let id = other.tracker().id().to_string();
        assert_eq!(
            operations.cancel(&id).unwrap().state,
            OperationState::Running
        );
        assert!(other.tracker().abandoned());
        assert!(operations.cancel("unknown").is_none());
    }
}
