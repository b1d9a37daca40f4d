//! Lifecycle jobs: archive idle free-plan groups, purge deleted databases whose restore
//! window ended, delete expired dumps, report uploads never finished.
//!
//! Each run takes a lease in the metadata store first, so any number of control-plane
//! replicas can run the jobs: one does the work at a time. `now` is a parameter (the
//! clock is injected), so tests move time instead of waiting.

use crate::data_plane::push_group_databases;
use crate::error::ApiResult;
use crate::periodic::{self, Schedule};
use crate::state::AppState;
use atoll_meta::{DatabaseState, GroupChanges};
use std::time::Duration;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// A free-plan group with no activity for this long is archived with its databases.
pub const ARCHIVE_AFTER_MS: i64 = 10 * DAY_MS;
/// Deleted databases are restorable this long on paid plans, then purged.
pub const RESTORE_WINDOW_MS: i64 = 5 * DAY_MS;
/// A database still waiting for its upload after this long is reported.
pub const UNFINISHED_UPLOAD_AFTER_MS: i64 = DAY_MS;
/// How long one run may hold the lease.
pub const LEASE_MS: i64 = 5 * 60 * 1000;

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct JobReport {
    /// False when another replica holds the lease (nothing was done).
    pub ran: bool,
    pub archived_groups: Vec<String>,
    pub purged_databases: Vec<String>,
    pub unfinished_uploads: Vec<String>,
    /// Dumps deleted because they outlived `ControlConfig::dump_lifetime`.
    pub expired_dumps: u64,
}

pub async fn run_once(state: &AppState, holder: &str, now: i64) -> ApiResult<JobReport> {
    let mut report = JobReport::default();
    if !state
        .store
        .acquire_lease("lifecycle", holder, now, now + LEASE_MS)
        .await?
    {
        return Ok(report);
    }
    report.ran = true;

    for group in state
        .store
        .idle_groups(crate::config::FREE_PLAN, now - ARCHIVE_AFTER_MS)
        .await?
    {
        let changes = GroupChanges {
            archived: Some(true),
            ..Default::default()
        };
        let archived = state.store.update_group(&group.id, changes).await?;
        push_group_databases(&state.data_plane, &state.store, &archived).await?;
        tracing::info!(group = %group.id, name = %group.name, "archived an idle free-plan group");
        report.archived_groups.push(group.id);
    }

    for db in state
        .store
        .databases_deleted_before(now - RESTORE_WINDOW_MS)
        .await?
    {
        // Forgotten first, with a tombstone: the node's delete is finished by the
        // reconciler if it cannot be done now.
        state.store.delete_database(&db.id).await?;
        state
            .data_plane
            .drop_forgotten(&state.store, std::slice::from_ref(&db))
            .await;
        tracing::info!(database = %db.id, name = %db.name, "purged a deleted database after its restore window");
        report.purged_databases.push(db.id);
    }

    // Dumps take room in the metadata store: one not used within its lifetime goes.
    let lifetime_ms = i64::try_from(state.config.dump_lifetime.as_millis()).unwrap_or(i64::MAX);
    report.expired_dumps = state
        .store
        .delete_dumps_created_before(now.saturating_sub(lifetime_ms))
        .await?;
    if report.expired_dumps > 0 {
        tracing::info!(count = report.expired_dumps, "deleted expired dumps");
    }

    for db in state
        .store
        .databases_in_state(DatabaseState::AwaitingUpload)
        .await?
    {
        if db.created_at < now - UNFINISHED_UPLOAD_AFTER_MS && db.deleted_at.is_none() {
            tracing::warn!(database = %db.id, name = %db.name, "a database has waited for its upload for over a day");
            report.unfinished_uploads.push(db.id);
        }
    }
    Ok(report)
}

/// Runs the jobs every `interval`, as `holder` (unique per replica).
pub fn spawn(state: AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    let holder = uuid::Uuid::new_v4().to_string();
    periodic::spawn(
        Schedule::every(interval),
        "lifecycle jobs failed; retrying at the next tick",
        move || {
            let (state, holder) = (state.clone(), holder.clone());
            async move {
                run_once(&state, &holder, atoll_meta::now_millis())
                    .await
                    .map(|_| ())
            }
        },
    )
}
