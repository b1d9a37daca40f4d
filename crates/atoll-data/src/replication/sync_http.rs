//! The HTTP protocol of libSQL's synced databases: `GET /info`, `GET /export/{generation}`
//! and `GET /sync/{generation}/{start}/{end}`, as the Rust `libsql` crate calls them for
//! `Builder::new_synced_database`, and for `Builder::new_remote_replica` whenever `/info`
//! answers (its default "auto" protocol probes it). `docs/DATA-PLANE.md` describes the
//! mapping; in short:
//!
//! - A client's *generation* is the file it started from plus the frames after it, which
//!   it numbers 1, 2, 3… A generation here is named by the frame of Atoll's log it starts
//!   at: generation `g ≥ 2` is the database as of global frame `g − 2`, and its frame `k`
//!   is global frame `g − 2 + k`. Generation 1 is kept for what it always was on Atoll:
//!   `GET /export/1` is a consistent copy of the live file (tools that hard-code it keep
//!   working); it is not a generation anyone can sync from.
//! - `GET /info` answers the newest generation (after waiting, bounded, for commits made
//!   before the request to be stored), `GET /export/{g}` rebuilds that state from the log
//!   in object storage, and pulls serve the frames after it. A client stays in its
//!   generation for good: the log never rewinds (a restore in place is new frames), so
//!   there is never a reason to send it to another one.
//! - "Nothing newer" is what libSQL's client expects: 400 with `{"generation": g}` (its
//!   own generation, which tells it to stop). Other refusals use other statuses and
//!   `{"error": …}`, which the client reports as they are.
//! - A transfer starts the database's history anew (`transfer_history`): a generation
//!   from before it is refused like one from a lost history (409: delete the replica's
//!   files and sync again), and nothing is served while the new history is being started
//!   (503).
//! - Pushing frames (offline writes, `POST /sync/…`) is taken on top of the head the
//!   client wrote on, and refused as a conflict when anything else committed since
//!   (`push`).

use super::log::{self, Frames};
use super::push;
use crate::auth::{DbRequest, KeyedDbRequest};
use crate::error::DataError;
use crate::transfer_history as history;
use crate::DataPlaneState;
use atoll_storage::segment::Frame;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;

/// Generation 1: the live file, as `GET /export/1` always answered.
pub const LIVE_GENERATION: u64 = 1;

/// The most frames one pull answers (libSQL asks for 128); a larger range gets this many
/// and the client asks again from where they end.
pub const MAX_PULL_FRAMES: u64 = 1024;

/// libSQL's client counts generations and frames in `u32`.
const CLIENT_MAX: u64 = u32::MAX as u64;

pub fn routes() -> Router<Arc<DataPlaneState>> {
    Router::new()
        .route("/sync/{generation}/{start}/{end}", get(pull).post(push))
        .route(
            "/sync/{generation}/{start}/{end}/{baton}",
            post(push_continued),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_PUSH_BYTES))
}

/// The largest push request: 4,096 frames (the client sends 128 unless told otherwise).
const MAX_PUSH_BYTES: usize = 4096 * push::FRAME_BYTES;

/// A generation and a range of frames `start..end` from a `/sync/…` path, checked.
fn sync_range(generation: &str, start: &str, end: &str) -> Result<(u64, u64, u64), DataError> {
    let number = |what: &str, value: &str| {
        value.parse::<u64>().map_err(|_| {
            DataError::BadRequest(format!("{what} must be a whole number, not {value:?}"))
        })
    };
    let generation = number("generation", generation)?;
    let start = number("start frame", start)?;
    let end = number("end frame", end)?;
    if generation == LIVE_GENERATION {
        return Err(DataError::Conflict(
            "generation 1 is the live file, not a generation a replica can sync: start from the generation GET /info answers".into(),
        ));
    }
    if generation == 0
        || generation > CLIENT_MAX + 2
        || start == 0
        || end <= start
        || end > CLIENT_MAX
    {
        return Err(DataError::BadRequest(format!(
            "/sync/{generation}/{start}/{end} is not a range of frames: generations and frames count from 1, and the end (exclusive) comes after the start"
        )));
    }
    Ok((generation, start, end))
}

/// The generation a new replica starts from: the state at the stored head, once the
/// commits made before this call are stored. `None` without object storage (a node
/// without `--storage-url` has only the live file, generation 1).
pub async fn current_generation(
    db: &Arc<crate::database::Database>,
) -> Result<Option<u64>, DataError> {
    history::ensure_started(db)?;
    let Some(head) = log::wait_for_commits(db).await else {
        return Ok(None);
    };
    Ok(Some(head + 2))
}

/// The state a generation starts from, as a file rebuilt from the log (`GET /export/{g}`
/// for `g ≥ 2`). The caller streams it and removes its directory. `Ok(Err(why))`: no
/// such generation (404).
pub async fn generation_file(
    state: &DataPlaneState,
    db: &crate::database::Database,
    generation: u64,
) -> Result<Result<std::path::PathBuf, String>, DataError> {
    history::ensure_started(db)?;
    let head = log::durable_head(db).ok_or_else(log::no_storage)?;
    let Some(frame) = generation.checked_sub(2).filter(|&f| f <= head) else {
        return Ok(Err(format!(
            "generation {generation} does not exist: the newest is {} (GET /info)",
            head + 2
        )));
    };
    if frame < history::first_frame(db) {
        return Ok(Err(before_history(generation, db)));
    }
    match log::state_at(&state.node, db, frame).await {
        Ok(file) => Ok(Ok(file)),
        Err(DataError::BadRequest(why)) => Ok(Err(format!(
            "generation {generation} cannot be rebuilt: {why}"
        ))),
        Err(e) => Err(e),
    }
}

/// `GET /sync/{generation}/{start}/{end}`: frames `start..end` of the generation, as
/// SQLite WAL frames (24-byte header, big-endian page number and database size after a
/// commit, then the page).
///
/// An encrypted database's frames are decrypted with the request's key on their way out:
/// libSQL's embedded replicas send the key with every sync request and keep a plain
/// replica (or one encrypted with their own local key). Frames written under another key
/// (before a rotation) are refused: such a replica syncs again from the current
/// generation.
async fn pull(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(req): KeyedDbRequest,
    Path((generation, start, end)): Path<(String, String, String)>,
) -> Result<Response, DataError> {
    req.db.ensure_queryable()?;
    req.db.ensure_readable()?;
    let (generation, start, end) = sync_range(&generation, &start, &end)?;
    let storage = state.node.storage().cloned().ok_or_else(log::no_storage)?;
    history::ensure_started(&req.db)?;
    let base = generation - 2;
    if base < history::first_frame(&req.db) {
        return Err(DataError::Conflict(before_history(generation, &req.db)));
    }
    let Some(first) = base.checked_add(start) else {
        return Err(DataError::BadRequest("frame numbers out of range".into()));
    };
    let mut head = log::durable_head(&req.db).ok_or_else(log::no_storage)?;
    if base > head {
        return Err(DataError::Conflict(format!(
            "generation {generation} is newer than the database (its newest is {}): this replica was made from another server or a lost history; delete its files and sync again",
            head + 2
        )));
    }
    if first > head {
        // The replica is at the stored head: wait for what was committed before it asked.
        head = log::wait_for_commits(&req.db).await.unwrap_or(head);
    }
    if first > head + 1 {
        return Err(DataError::Conflict(format!(
            "the replica asks for frame {start} of generation {generation} but the database has {} frames after it: this replica is ahead of the database (its history was lost and rebuilt); delete its files and sync again",
            head - base
        )));
    }
    if first > head {
        return Ok(up_to_date(generation));
    }
    let last = (first + (end - start).min(MAX_PULL_FRAMES) - 1).min(head);
    let frames = match log::read_frames(&storage.storage, req.db.id(), first, last).await? {
        Frames::Found(frames) if !frames.is_empty() => frames,
        Frames::Found(_) => return Ok(up_to_date(generation)),
        Frames::Gone => {
            return Err(DataError::Conflict(format!(
                "frame {start} of generation {generation} is no longer kept (the database's history is kept for its retention period): delete this replica's files and sync again"
            )))
        }
    };
    let frames = match &req.key {
        Some(key) => decrypt_frames(frames, &key.page_cipher(), generation, &req.db)?,
        None => frames,
    };
    let body = wal_frames(&frames);
    state
        .node
        .meters
        .record_synced(req.db.id(), body.len() as u64);
    let mut response = Body::from(body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(response)
}

/// Decrypts the pages of `frames` (an encrypted database's, read from the log as they
/// are) with the request's key.
fn decrypt_frames(
    mut frames: Vec<Frame>,
    cipher: &atoll_storage::encryption::page::PageCipher,
    generation: u64,
    db: &crate::database::Database,
) -> Result<Vec<Frame>, DataError> {
    for frame in &mut frames {
        if cipher.open(frame.page_no, &mut frame.page).is_err() {
            return Err(DataError::Conflict(format!(
                "frame {} of generation {generation} of database {} is not under the key sent (a rotation of the key since?): delete this replica's files and sync again",
                frame.frame_no,
                db.config().name
            )));
        }
    }
    Ok(frames)
}

/// Why generation `generation` of `db` is not served: it is from before the current
/// owner's history (a transfer started it anew).
fn before_history(generation: u64, db: &crate::database::Database) -> String {
    format!(
        "generation {generation} is from before the database's history, which starts at its transfer to this organization (its first generation is {}): delete this replica's files and sync again",
        history::first_frame(db) + 2
    )
}

/// What libSQL's client reads as "nothing newer in your generation".
fn up_to_date(generation: u64) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "generation": generation })),
    )
        .into_response()
}

/// `POST /sync/{generation}/{start}/{end}`: frames written offline, the first request of
/// a push.
async fn push(
    state: State<Arc<DataPlaneState>>,
    KeyedDbRequest(req): KeyedDbRequest,
    Path((generation, start, end)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<Response, DataError> {
    receive_push(state, req, (generation, start, end), None, body).await
}

/// `POST /sync/{generation}/{start}/{end}/{baton}`: the next request of a push, with the
/// baton the previous one answered.
async fn push_continued(
    state: State<Arc<DataPlaneState>>,
    KeyedDbRequest(req): KeyedDbRequest,
    Path((generation, start, end, baton)): Path<(String, String, String, String)>,
    body: Bytes,
) -> Result<Response, DataError> {
    receive_push(state, req, (generation, start, end), Some(baton), body).await
}

async fn receive_push(
    State(state): State<Arc<DataPlaneState>>,
    req: DbRequest,
    (generation, start, end): (String, String, String),
    baton: Option<String>,
    frames: Bytes,
) -> Result<Response, DataError> {
    req.db.ensure_queryable()?;
    if !req.access.write {
        return Err(DataError::Forbidden(
            "Authorization forbidden: a read-only token cannot push writes".into(),
        ));
    }
    req.db.ensure_writable()?;
    let (generation, start, end) = sync_range(&generation, &start, &end)?;
    let expected = (end - start) as usize * push::FRAME_BYTES;
    if frames.len() != expected {
        return Err(DataError::BadRequest(format!(
            "a push of frames {start}..{end} carries {} frames of {} bytes ({expected} bytes), not {} bytes",
            end - start,
            push::FRAME_BYTES,
            frames.len()
        )));
    }
    let request = push::PushRequest {
        generation,
        start,
        baton,
        frames,
    };
    let answer = push::receive(&state, &req.db, request, req.key.clone()).await?;
    Ok(Json(answer).into_response())
}

/// SQLite WAL frames: page number and database size after the commit (0 inside a
/// transaction), both big-endian, then salts and checksums (left zero: the client's own
/// WAL computes its own) and the page.
fn wal_frames(frames: &[Frame]) -> Bytes {
    let page = frames.first().map_or(0, |f| f.page.len());
    let mut out = Vec::with_capacity(frames.len() * (24 + page));
    for frame in frames {
        out.extend_from_slice(&frame.page_no.to_be_bytes());
        out.extend_from_slice(&frame.size_after.to_be_bytes());
        out.extend_from_slice(&[0u8; 16]);
        out.extend_from_slice(&frame.page);
    }
    Bytes::from(out)
}
