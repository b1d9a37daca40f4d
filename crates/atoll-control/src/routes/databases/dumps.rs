//! `POST …/databases/dumps`: SQL dumps uploaded to seed a database from, and their
//! lifetime and allowance.

use crate::audit;
use crate::auth::Access;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_http::body::BodyReadTimeout;
use atoll_types::audit::AuditCode;
use atoll_types::databases::DumpUploaded;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, State};
use axum::{Extension, Json};
use serde_json::json;

pub(super) async fn upload_dump(
    State(state): State<AppState>,
    access: Access,
    Extension(BodyReadTimeout(idle)): Extension<BodyReadTimeout>,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<DumpUploaded>> {
    // Rejected here rather than by axum, whose answer is text/plain.
    let mut multipart = multipart
        .map_err(|e| ApiError::invalid(format!("expected a multipart/form-data body: {e}")))?;
    let org = access.org();
    let now = atoll_meta::now_millis();
    let pending = state
        .store
        .pending_dumps(&org.id, now - dump_lifetime_ms(&state))
        .await?;
    let limits = (
        state.config.max_dumps_per_org,
        state.config.max_dump_bytes_per_org,
    );
    if pending.count >= limits.0 {
        return Err(too_many_dumps(
            &state,
            &pending,
            now,
            format!(
                "organization {} already holds {} dumps",
                org.slug, pending.count
            ),
        ));
    }
    let mut sql = None;
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| ApiError::invalid(format!("invalid multipart body: {e}")))?
    {
        if field.name() == Some("file") {
            let mut bytes = Vec::new();
            // Read piece by piece: a dump over the limit is refused as soon as it is, and a
            // client that stops sending is let go after the body timeout.
            loop {
                let chunk = tokio::time::timeout(idle, field.chunk())
                    .await
                    .map_err(|_| crate::body::body_timed_out(idle))?
                    .map_err(|e| ApiError::invalid(format!("cannot read the dump: {e}")))?;
                let Some(chunk) = chunk else {
                    break;
                };
                let size = bytes.len() + chunk.len();
                let allowed = state
                    .config
                    .max_dump_bytes
                    .min(usize::try_from(limits.1).unwrap_or(usize::MAX));
                if size > allowed {
                    return Err(ApiError::PayloadTooLarge(format!(
                        "the dump is larger than {allowed} bytes"
                    )));
                }
                if pending.bytes.saturating_add(size as u64) > limits.1 {
                    return Err(too_many_dumps(
                        &state,
                        &pending,
                        now,
                        format!(
                            "organization {}'s dumps would take more than {} bytes",
                            org.slug, limits.1
                        ),
                    ));
                }
                bytes.extend_from_slice(&chunk);
            }
            let text = String::from_utf8(bytes)
                .map_err(|_| ApiError::invalid("the dump is not UTF-8 text"))?;
            sql = Some(text);
        }
    }
    let sql = sql
        .ok_or_else(|| ApiError::invalid("multipart field `file` with the SQL dump is missing"))?;
    if sql.trim().is_empty() {
        return Err(ApiError::invalid("the dump is empty"));
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    state.store.insert_dump(&id, &org.id, sql).await?;
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::DbDumpUpload,
        "uploaded an SQL dump to seed databases from",
        json!({"dump": id}),
    )
    .await;
    Ok(Json(DumpUploaded {
        dump_url: format!(
            "{}/v1/organizations/{}/databases/dumps/{id}",
            state.config.public_url, org.slug
        ),
    }))
}

/// Milliseconds an uploaded dump stays usable.
pub(super) fn dump_lifetime_ms(state: &AppState) -> i64 {
    i64::try_from(state.config.dump_lifetime.as_millis()).unwrap_or(i64::MAX)
}

pub(super) fn dump_expired(state: &AppState, created_at: i64, now: i64) -> bool {
    created_at.saturating_add(dump_lifetime_ms(state)) <= now
}

/// An organization at its dump allowance waits until its oldest dump expires (or uses
/// its dumps: a create deletes the dump it used).
pub(super) fn too_many_dumps(
    state: &AppState,
    pending: &atoll_meta::PendingDumps,
    now: i64,
    why: String,
) -> ApiError {
    let frees_at = pending
        .oldest_created_at
        .map_or(now, |at| at.saturating_add(dump_lifetime_ms(state)));
    let wait = u64::try_from((frees_at - now).max(0) / 1000 + 1).unwrap_or(1);
    ApiError::TooManyRequests(
        format!(
            "{why}: an organization may hold {} dumps and {} bytes of dumps at once; \
             create databases from them (which deletes them) or wait until the oldest expires",
            state.config.max_dumps_per_org, state.config.max_dump_bytes_per_org
        ),
        wait,
    )
}
