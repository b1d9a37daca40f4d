//! The primary's side of following: the frame endpoint (`GET /v1/internal/frames/{id}`)
//! that serves a replica the whole transactions after a frame, from the WAL while they are
//! there and from object storage after, waiting (bounded) for a commit when there is none.

use super::follow::{
    encode_frames, stored_transactions, BATCH_BYTES, EPOCH_HEADER, HEAD_HEADER, LONGEST_POLL,
};
use crate::error::DataError;
use crate::DataPlaneState;
use atoll_storage::segment::Frame;
use atoll_storage::shipper::TailRead;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// `GET /v1/internal/frames/{id}?after=N&wait_ms=M`: whole transactions after frame `N`
/// (waiting up to `M` ms for one when there is none), for a replica on another node.
/// Only nodes (the node secret) may ask.
pub(crate) async fn serve_frames(
    State(state): State<Arc<DataPlaneState>>,
    Path(id): Path<String>,
    Query(query): Query<FramesQuery>,
    headers: HeaderMap,
) -> Response {
    let trusted = state
        .forwarder
        .as_ref()
        .is_some_and(|forwarder| forwarder.trusts(&headers));
    if !trusted {
        return DataError::Unauthorized("node secret expected".into()).into_response();
    }
    match frames_after(
        &state,
        &id,
        query.after,
        Duration::from_millis(query.wait_ms.min(LONGEST_POLL.as_millis() as u64)),
    )
    .await
    {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct FramesQuery {
    after: u64,
    #[serde(default)]
    wait_ms: u64,
}

async fn frames_after(
    state: &Arc<DataPlaneState>,
    id: &str,
    after: u64,
    wait: Duration,
) -> Result<Response, DataError> {
    let db = state
        .node
        .by_id(id)
        .ok_or_else(|| DataError::UnknownDatabase(format!("database {id} is not on this node")))?;
    let log = Arc::clone(db.log().ok_or_else(|| {
        DataError::BadRequest(
            "this node has no object storage: its databases have no replicas".into(),
        )
    })?);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let signal = log.commit_signal().notified();
        let reading = Arc::clone(&log);
        let read = tokio::task::spawn_blocking(move || reading.read_tail(after, BATCH_BYTES))
            .await
            .map_err(|e| DataError::Internal(e.to_string()))??;
        let epoch = log.file_epoch();
        match read {
            TailRead::SnapshotPending => {
                return Ok((
                    StatusCode::CONFLICT,
                    "the database's snapshot is being stored",
                )
                    .into_response())
            }
            TailRead::Frames { frames, head } if !frames.is_empty() || after >= head => {
                if frames.is_empty() && tokio::time::Instant::now() < deadline {
                    // Nothing new: wait for a commit (its frames land just after the
                    // signal, so look again shortly in any case).
                    let _ = tokio::time::timeout_at(
                        deadline.min(tokio::time::Instant::now() + Duration::from_millis(10)),
                        signal,
                    )
                    .await;
                    continue;
                }
                return Ok(frames_response(&frames, head, epoch));
            }
            TailRead::Frames { head, .. } => return Ok(frames_response(&[], head, epoch)),
            TailRead::Stored { durable, head } => {
                let storage = state
                    .node
                    .storage()
                    .ok_or_else(|| DataError::Internal("no object storage".into()))?;
                return match stored_transactions(&storage.storage, id, after, durable).await? {
                    super::log::Frames::Found(frames) => Ok(frames_response(&frames, head, epoch)),
                    super::log::Frames::Gone => Ok((
                        StatusCode::GONE,
                        "those frames are no longer in the log: start from the latest snapshot",
                    )
                        .into_response()),
                };
            }
        }
    }
}

fn frames_response(frames: &[Frame], head: u64, epoch: u64) -> Response {
    let status = if frames.is_empty() {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::OK
    };
    let mut response = (status, Bytes::from(encode_frames(frames))).into_response();
    let headers = response.headers_mut();
    headers.insert(HEAD_HEADER, HeaderValue::from(head));
    headers.insert(EPOCH_HEADER, HeaderValue::from(epoch));
    response
}
