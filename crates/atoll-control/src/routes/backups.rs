//! Backups and point-in-time restore in place: `/v1/organizations/{org}/databases/{db}/backups`
//! and `…/databases/{db}/restore` (and the same un-prefixed, for the personal organization).
//! Atoll's routes (Turso has no equivalent); docs/API.md describes them. A point-in-time
//! copy into a new database is Turso's own create seed (`databases.rs`).

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_types::audit::AuditCode;
use atoll_types::backups::{
    BackupGeneration, BackupLag, DatabaseBackups, RestoreRequest, RestoreResponse,
};
use atoll_types::node::Durability;
use atoll_types::ErrorCode;
use axum::extract::State;
use axum::http::Method;
use axum::Json;
use serde_json::json;

pub fn routes() -> Vec<Route> {
    let mut routes = Vec::new();
    for prefix in ["/v1/organizations/{org}", "/v1"] {
        let db = format!("{prefix}/databases/{{db}}");
        routes.extend([
            Route::new(
                Method::GET,
                format!("{db}/backups"),
                Action::ReadDatabaseBackups,
                "Backups in object storage: generations, the restorable window, the lag",
                backups,
            )
            .response::<DatabaseBackups>(),
            Route::new(
                Method::POST,
                format!("{db}/restore"),
                Action::RestoreDatabaseInPlace,
                "Restore the database in place to an instant of its restorable window (undo: restore to an instant before the restore)",
                restore,
            )
            .request::<RestoreRequest>()
            .response::<RestoreResponse>(),
        ]);
    }
    routes
}

async fn backups(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<DatabaseBackups>> {
    let db = access.database();
    // Nothing from before a transfer: its node lists the current history only (and
    // nothing while it starts a transfer's new one).
    let backups = state.data_plane.backups(&db.node, &db.id).await?;
    Ok(Json(DatabaseBackups {
        storage: backups.storage_url,
        durability: match backups.durability {
            Some(Durability::Sync) => "sync",
            _ => "lag",
        }
        .to_string(),
        retention_days: backups.retention_days,
        restorable_from: backups.window_start_ms.map(wire::rfc3339_millis),
        restorable_until: backups.window_end_ms.map(wire::rfc3339_millis),
        generations: backups
            .generations
            .iter()
            .map(|g| BackupGeneration {
                start_frame_no: g.start_frame_no,
                created_at: wire::rfc3339_millis(g.created_ms),
                snapshot_bytes: g.snapshot_bytes,
            })
            .collect(),
        stored_bytes: backups.stored_bytes,
        replication_index: backups.durable_frame_no,
        lag: BackupLag {
            commits: backups.lag_commits,
            seconds: backups.lag_ms as f64 / 1000.0,
        },
        last_error: backups.last_error,
    }))
}

async fn restore(
    State(state): State<AppState>,
    access: Access,
    LenientJson(request): LenientJson<RestoreRequest>,
) -> ApiResult<Json<RestoreResponse>> {
    let db = access.database();
    let timestamp_ms = parse_timestamp(&request.timestamp)?;
    check_history(db, timestamp_ms, ErrorCode::InvalidRequest)?;
    let key = crate::routes::databases::encryption::key_of_request(
        db,
        request.encryption_key.as_deref(),
    )?;
    let outcome = state
        .data_plane
        .restore_in_place(&db.node, &db.id, timestamp_ms, key)
        .await?;
    let org = access.org();
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::DbRestore,
        format!(
            "restored database {} in place to {}",
            db.name, request.timestamp
        ),
        json!({"database": db.name, "timestamp": request.timestamp, "replication_index": outcome.frame_no}),
    )
    .await;
    Ok(Json(RestoreResponse {
        restored_to: wire::rfc3339_millis(outcome.restored_commit_ms),
        replication_index: outcome.frame_no,
    }))
}

/// Refuses a state of `db` from before its current owner's history: a transfer starts it
/// anew, and nothing of the old owner's is restorable by the new one (docs/SECURITY.md,
/// "Transfers"). `code`: the request's (a seed's, a restore's).
pub(crate) fn check_history(
    db: &atoll_meta::Database,
    timestamp_ms: i64,
    code: ErrorCode,
) -> ApiResult<()> {
    match db.history_starts_at {
        Some(since) if timestamp_ms < since => Err(ApiError::Invalid(
            code,
            format!(
                "{} is before the history of database {}: its history starts at its transfer to this organization, at {}",
                wire::rfc3339_millis(timestamp_ms),
                db.name,
                wire::rfc3339_millis(since)
            ),
        )),
        _ => Ok(()),
    }
}

/// An RFC 3339 instant as ms since the epoch; anything else is a 400 that shows the form.
pub(crate) fn parse_timestamp(text: &str) -> ApiResult<i64> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
        .map_err(|e| {
            ApiError::Invalid(
                ErrorCode::InvalidRequest,
                format!(
                    "timestamp {text:?} is not an RFC 3339 instant like 2026-11-24T12:00:00Z: {e}"
                ),
            )
        })
}
