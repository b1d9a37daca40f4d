//! Uploads of SQLite files into a database created with seed `database_upload`:
//!
//! - `POST /v1/upload`: the whole file as the request body (`curl --data-binary @file`);
//! - `PUT /v2/upload/start` → `{"chunk_size", "upload_id"}`, then
//!   `PUT /v2/upload/{upload_id}/chunk/{n}` for every chunk (any order, retries harmless),
//!   then `PUT /v2/upload/{upload_id}/finalize` — what the Turso CLI's `db import` sends.
//!
//! Bodies stream to a temporary file in the database's directory, never into memory. Before
//! it replaces the database, the file is checked ([`check_database_file_within`]): a file
//! Atoll cannot serve is refused with the reason and the database stays exactly as it was.
//! The check runs the file's own SQL (CHECK constraints, generated columns, index
//! expressions), so it is bounded like a statement ([`CheckBounds`]).
//!
//! This module owns the HTTP handlers and the installation of a checked file;
//! [`registry`] the uploads in progress, [`validate`] the checks of a file.

pub mod registry;
mod seal;
pub mod validate;

use crate::auth::{DbRequest, KeyedDbRequest};
use crate::database::{Database, PAGE_SIZE};
use crate::error::DataError;
use crate::node::Node;
use crate::sandbox::CancelToken;
use crate::DataPlaneState;
use atoll_types::node::DatabaseState;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::{Json, Router};
use futures_util::StreamExt;
use registry::{sqlite_files, ChunkWrite, ChunkedUpload, Finalizing, TempFile, TEMP_PREFIX};
use serde_json::{json, Value};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path as FsPath;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use validate::{check_database_file_within, CheckBounds};

/// Failures of the upload routes: the data plane's, plus upload ids this node does not
/// know (which `DataError` has no variant for).
#[derive(Debug)]
enum UploadError {
    Data(DataError),
    UnknownUpload(String),
}

impl From<DataError> for UploadError {
    fn from(e: DataError) -> Self {
        UploadError::Data(e)
    }
}

impl IntoResponse for UploadError {
    fn into_response(self) -> Response {
        match self {
            UploadError::Data(e) => e.into_response(),
            UploadError::UnknownUpload(message) => {
                (StatusCode::NOT_FOUND, Json(json!({ "error": message }))).into_response()
            }
        }
    }
}

pub fn routes() -> Router<Arc<DataPlaneState>> {
    Router::new()
        .route("/v1/upload", post(upload_file))
        .route("/v2/upload/start", put(start_chunked))
        .route("/v2/upload/{upload_id}/chunk/{n}", put(upload_chunk))
        .route("/v2/upload/{upload_id}/finalize", put(finalize_chunked))
}

/// `POST /v1/upload`: the whole file in one request.
async fn upload_file(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(req): KeyedDbRequest,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, DataError> {
    require_write(&req)?;
    seal::check_cipher_header(&req.db, &headers)?;
    require_awaiting_upload(&req.db)?;
    let (limit, too_large) = state.uploads.limit_for(&req.db);
    if content_length(&headers)?.is_some_and(|len| len > limit) {
        return Err(DataError::TooLarge(too_large));
    }
    let claim = state.uploads.claim_single(&req.db)?;

    let dir = req.db.dir().to_path_buf();
    let path = dir.join(format!("{TEMP_PREFIX}{}", uuid::Uuid::new_v4().simple()));
    let temp = TempFile::new(path.clone());
    let file = blocking(move || {
        remove_stale_uploads(&dir, &[])?;
        Ok(std::fs::File::create_new(&path)?)
    })
    .await?;
    let idle = state.limits.upload_idle_timeout;
    let received = match receive(body, file, limit, idle, ()).await {
        Ok(_) => Ok(()),
        Err(Receive::TooLarge) => Err(DataError::TooLarge(too_large)),
        Err(Receive::Stalled) => Err(stalled(idle)),
        Err(Receive::Interrupted(e)) => Err(DataError::BadRequest(format!(
            "the upload was interrupted before the whole file arrived: {e}"
        ))),
        Err(Receive::Io(e)) => Err(e.into()),
    };
    if let Err(e) = received {
        temp.discard().await;
        return Err(e);
    }

    let node = Arc::clone(&state.node);
    let db = Arc::clone(&req.db);
    let key = req.key.clone();
    // A client that hangs up stops the check (it runs the file's SQL); the install itself
    // is never cut short.
    let cancel = CancelToken::new();
    let cancel_on_drop = cancel.cancel_on_drop();
    let bounds = CheckBounds::for_node(&node, Some(cancel)).from_organization(&db.config().org_id);
    let installed = blocking(move || {
        // The claim and the file live with the installing thread: a client that hangs up
        // now neither frees the database for another upload mid-install nor deletes the
        // file from under it.
        let _claim = claim;
        check_and_install(&node, &db, temp, None, &bounds, key.as_deref())
    })
    .await;
    cancel_on_drop.disarm();
    installed?;
    Ok(Json(json!({})))
}

#[derive(serde::Deserialize)]
struct StartRequest {
    db_size_bytes: u64,
}

/// `PUT /v2/upload/start` with `{"db_size_bytes": N}`.
async fn start_chunked(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(req): KeyedDbRequest,
    body: Bytes,
) -> Result<Json<Value>, UploadError> {
    require_write(&req)?;
    // Parsed by hand rather than with `Json`: clients are not always careful with
    // Content-Type, and the error should say what the body must be.
    let StartRequest {
        db_size_bytes: size,
    } = serde_json::from_slice(&body).map_err(|e| {
        DataError::BadRequest(format!(
            "the body must be JSON {{\"db_size_bytes\": <size of the file in bytes>}}: {e}"
        ))
    })?;
    require_awaiting_upload(&req.db)?;
    state.uploads.sweep(&state.node);
    let (limit, too_large) = state.uploads.limit_for(&req.db);
    if size == 0 {
        return Err(DataError::BadRequest("db_size_bytes is 0: the file is empty".into()).into());
    }
    if size > limit {
        return Err(DataError::TooLarge(too_large).into());
    }
    if size % PAGE_SIZE != 0 {
        return Err(DataError::BadRequest(format!(
            "db_size_bytes {size} is not a whole number of {PAGE_SIZE}-byte pages: the file is truncated, or not a database with page size {PAGE_SIZE}"
        ))
        .into());
    }

    let upload_id = uuid::Uuid::new_v4().simple().to_string();
    let chunk_size = state.uploads.chunk_size.load(Ordering::Relaxed);
    let dir = req.db.dir().to_path_buf();
    let path = dir.join(format!("{TEMP_PREFIX}{upload_id}"));
    {
        let mut inner = state.uploads.lock();
        if inner.busy(req.db.id()) {
            return Err(state.uploads.busy_error(&req.db).into());
        }
        inner.chunked.insert(
            upload_id.clone(),
            ChunkedUpload {
                database_id: req.db.id().to_string(),
                path: path.clone(),
                size,
                chunk_size,
                received: vec![false; size.div_ceil(chunk_size) as usize],
                writing: 0,
                finalizing: false,
                last_activity: Instant::now(),
            },
        );
    }
    let created = blocking(move || {
        remove_stale_uploads(&dir, &[&path])?;
        // Sized now so chunks land at their offsets in any order; sparse until written.
        let file = std::fs::File::create_new(&path)?;
        file.set_len(size)?;
        Ok(())
    })
    .await;
    if let Err(e) = created {
        let removed = state.uploads.lock().chunked.remove(&upload_id);
        if let Some(upload) = removed {
            drop(TempFile::new(upload.path));
        }
        return Err(e.into());
    }
    Ok(Json(
        json!({ "chunk_size": chunk_size, "upload_id": upload_id }),
    ))
}

/// `PUT /v2/upload/{upload_id}/chunk/{n}`: bytes `[n * chunk_size, …)` of the file.
async fn upload_chunk(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(req): KeyedDbRequest,
    Path((upload_id, n)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, UploadError> {
    require_write(&req)?;
    let n: u64 = n.parse().map_err(|_| {
        DataError::BadRequest(format!(
            "chunk number {n:?} is not a number: chunks are numbered from 0"
        ))
    })?;
    let (write, path, offset, len) = {
        let mut inner = state.uploads.lock();
        let upload = state.uploads.find(&mut inner, &upload_id, &req.db)?;
        if upload.finalizing {
            return Err(DataError::Conflict(format!(
                "upload {upload_id} is being finalized: it takes no more chunks"
            ))
            .into());
        }
        let count = upload.received.len() as u64;
        if n >= count {
            return Err(DataError::BadRequest(format!(
                "chunk {n} is out of range: this upload has {count} chunks (0 to {}) of {} bytes",
                count - 1,
                upload.chunk_size
            ))
            .into());
        }
        upload.writing += 1;
        upload.last_activity = Instant::now();
        let write = ChunkWrite {
            inner: Arc::clone(&state.uploads.inner),
            upload_id: upload_id.clone(),
            n,
            done: false,
        };
        (
            write,
            upload.path.clone(),
            n * upload.chunk_size,
            upload.chunk_len(n),
        )
    };
    let wrong_size = |got: String| {
        DataError::BadRequest(format!(
            "chunk {n} must be {len} bytes (db_size_bytes and chunk_size say so), got {got}"
        ))
    };
    if let Some(got) = content_length(&headers)? {
        if got != len {
            return Err(wrong_size(got.to_string()).into());
        }
    }
    let file = blocking(move || {
        let mut file = std::fs::OpenOptions::new().write(true).open(&path)?;
        file.seek(SeekFrom::Start(offset))?;
        Ok(file)
    })
    .await?;
    let idle = state.limits.upload_idle_timeout;
    let write = match receive(body, file, len, idle, write).await {
        Ok((got, write)) if got == len => write,
        Ok((got, _)) => return Err(wrong_size(got.to_string()).into()),
        Err(Receive::TooLarge) => return Err(wrong_size("more".into()).into()),
        Err(Receive::Stalled) => return Err(stalled(idle).into()),
        Err(Receive::Interrupted(e)) => {
            return Err(DataError::BadRequest(format!(
                "chunk {n} was interrupted before all of it arrived: {e}"
            ))
            .into())
        }
        Err(Receive::Io(e)) => return Err(DataError::from(e).into()),
    };
    write.complete();
    Ok(Json(json!({})))
}

/// `PUT /v2/upload/{upload_id}/finalize`: check the assembled file and install it.
async fn finalize_chunked(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(req): KeyedDbRequest,
    headers: HeaderMap,
    Path(upload_id): Path<String>,
) -> Result<Json<Value>, UploadError> {
    require_write(&req)?;
    seal::check_cipher_header(&req.db, &headers)?;
    state.uploads.sweep(&state.node);
    let (finalizing, path, size) = {
        let mut inner = state.uploads.lock();
        let upload = state.uploads.find(&mut inner, &upload_id, &req.db)?;
        if upload.finalizing {
            return Err(DataError::Conflict(format!(
                "upload {upload_id} is already being finalized"
            ))
            .into());
        }
        if upload.writing > 0 {
            return Err(DataError::Conflict(format!(
                "{} chunk request(s) of upload {upload_id} are still writing: finalize once they have answered",
                upload.writing
            ))
            .into());
        }
        let missing: Vec<String> = (0..upload.received.len())
            .filter(|&n| !upload.received[n])
            .map(|n| n.to_string())
            .collect();
        if !missing.is_empty() {
            // The upload stays: the client can still send what is missing.
            let shown = missing.iter().take(20).cloned().collect::<Vec<_>>();
            let more = if missing.len() > shown.len() {
                ", …"
            } else {
                ""
            };
            return Err(DataError::BadRequest(format!(
                "{} of the {} chunks have not arrived yet: {}{more}",
                missing.len(),
                upload.received.len(),
                shown.join(", ")
            ))
            .into());
        }
        upload.finalizing = true;
        (
            Finalizing {
                inner: Arc::clone(&state.uploads.inner),
                upload_id: upload_id.clone(),
            },
            upload.path.clone(),
            upload.size,
        )
    };
    let node = Arc::clone(&state.node);
    let db = Arc::clone(&req.db);
    let key = req.key.clone();
    let cancel = CancelToken::new();
    let cancel_on_drop = cancel.cancel_on_drop();
    let bounds = CheckBounds::for_node(&node, Some(cancel)).from_organization(&db.config().org_id);
    let installed = blocking(move || {
        let _finalizing = finalizing;
        check_and_install(
            &node,
            &db,
            TempFile::new(path),
            Some(size),
            &bounds,
            key.as_deref(),
        )
    })
    .await;
    cancel_on_drop.disarm();
    installed?;
    Ok(Json(json!({})))
}

fn require_write(req: &DbRequest) -> Result<(), DataError> {
    if req.access.write {
        Ok(())
    } else {
        Err(DataError::Forbidden(
            "uploads need a full-access token; this one is read-only".into(),
        ))
    }
}

fn require_awaiting_upload(db: &Database) -> Result<(), DataError> {
    db.ensure_held()?;
    let config = db.config();
    if config.state == DatabaseState::AwaitingUpload {
        Ok(())
    } else {
        Err(DataError::Conflict(format!(
            "database {} already has data: uploads go to a database created with seed database_upload",
            config.name
        )))
    }
}

fn content_length(headers: &HeaderMap) -> Result<Option<u64>, DataError> {
    headers
        .get(header::CONTENT_LENGTH)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| DataError::BadRequest("Content-Length is not a number".into()))
        })
        .transpose()
}

/// Runs file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, DataError> + Send + 'static,
) -> Result<T, DataError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| DataError::Internal(format!("upload task failed: {e}")))?
}

/// Deletes upload files of this database left by a crash (the caller holds the database's
/// upload claim, or the node is opening, so no other upload of it is writing), except `keep`.
pub(crate) fn remove_stale_uploads(dir: &FsPath, keep: &[&FsPath]) -> Result<(), DataError> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let stale = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(TEMP_PREFIX))
            && !keep.iter().any(|k| *k == path);
        if stale {
            tracing::info!(path = %path.display(), "removing a stale upload file");
            let _ = std::fs::remove_file(&path);
        }
    }
    Ok(())
}

enum Receive {
    /// More than the limit arrived.
    TooLarge,
    /// Nothing arrived for the idle timeout.
    Stalled,
    /// The client stopped sending (or sent something hyper could not read).
    Interrupted(String),
    Io(std::io::Error),
}

/// 408 for an upload that stopped sending: a stalled client must not hold the upload (and
/// its temporary file) forever, while a slow one that keeps sending is never cut off.
fn stalled(idle: std::time::Duration) -> DataError {
    DataError::Timeout(format!(
        "the upload sent nothing for {} seconds and was abandoned; retry it",
        idle.as_secs()
    ))
}

/// Writes a request body into `file` from its current position, on a blocking thread,
/// refusing more than `limit` bytes and giving up when nothing arrives for `idle`. `guard` lives as long as that thread uses the file —
/// even past this future, if the request is cancelled — and comes back with the byte count
/// when the whole body was written.
async fn receive<G: Send + 'static>(
    body: Body,
    mut file: std::fs::File,
    limit: u64,
    idle: std::time::Duration,
    guard: G,
) -> Result<(u64, G), Receive> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(32);
    let writer = tokio::task::spawn_blocking(move || {
        let mut written = 0u64;
        while let Some(bytes) = rx.blocking_recv() {
            file.write_all(&bytes)?;
            written += bytes.len() as u64;
        }
        Ok((written, guard))
    });

    let mut stream = body.into_data_stream();
    let mut received = 0u64;
    let mut outcome = Ok(());
    loop {
        let Ok(frame) = tokio::time::timeout(idle, stream.next()).await else {
            outcome = Err(Receive::Stalled);
            break;
        };
        let Some(frame) = frame else {
            break;
        };
        match frame {
            Ok(bytes) => {
                received += bytes.len() as u64;
                if received > limit {
                    outcome = Err(Receive::TooLarge);
                    break;
                }
                if tx.send(bytes).await.is_err() {
                    // The writer stopped on an I/O error, which it reports below.
                    break;
                }
            }
            Err(e) => {
                outcome = Err(Receive::Interrupted(e.to_string()));
                break;
            }
        }
    }
    drop(tx);
    let written = match writer.await {
        Ok(written) => written.map_err(Receive::Io),
        Err(e) => Err(Receive::Io(std::io::Error::other(e))),
    };
    outcome.and(written)
}

/// Checks `temp` ([`check_database_file_within`]) and installs it as `db`'s file. On any
/// failure the database is untouched and `temp` deleted.
fn check_and_install(
    node: &Node,
    db: &Database,
    temp: TempFile,
    expected_len: Option<u64>,
    bounds: &CheckBounds,
    key: Option<&atoll_storage::encryption::EncryptionKey>,
) -> Result<(), DataError> {
    match install(node, db, &temp, expected_len, bounds, key) {
        Ok(()) => {
            temp.installed();
            Ok(())
        }
        Err(e) => {
            temp.delete();
            Err(e)
        }
    }
}

/// An encrypted database's upload arrives plain and is sealed under `key` once checked
/// (`seal`).
fn install(
    node: &Node,
    db: &Database,
    temp: &TempFile,
    expected_len: Option<u64>,
    bounds: &CheckBounds,
    key: Option<&atoll_storage::encryption::EncryptionKey>,
) -> Result<(), DataError> {
    if let Some(expected) = expected_len {
        let len = std::fs::metadata(temp.path())?.len();
        if len != expected {
            return Err(DataError::Internal(format!(
                "upload file is {len} bytes, expected {expected}"
            )));
        }
    }
    check_database_file_within(temp.path(), bounds)?;
    // SQLite removes these when the checking connection closes; make sure, since only the
    // main file moves.
    for leftover in sqlite_files(temp.path()).into_iter().skip(1) {
        remove_if_exists(&leftover)?;
    }
    if let Some(key) = key {
        seal::seal(temp.path(), key, &db.config().name)?;
    }
    // Re-checked here: the control plane may have changed the database while the file was
    // arriving (the upload claim only keeps other uploads out).
    require_awaiting_upload(db)?;

    std::fs::OpenOptions::new()
        .write(true)
        .open(temp.path())?
        .sync_all()?;
    // Object storage gets the new file as a new generation before any frame written on
    // top of it is shipped (noted before the file moves, so a crash in between still
    // does).
    if let Some(log) = db.log() {
        log.expect_new_file()?;
    }
    // Nothing may hold the old file open across the swap (a connection opened before the
    // upload would keep reading an empty database).
    node.pool.forget(db.id());
    let target = db.file_path();
    // A WAL or shared-memory file of whatever was there before must not be replayed into
    // the new file.
    for stale in sqlite_files(&target).into_iter().skip(1) {
        remove_if_exists(&stale)?;
    }
    std::fs::rename(temp.path(), &target)?;
    atoll_storage::sync_dir(db.dir())?;
    node.activate(db)?;
    node.pool.forget(db.id());
    if let (Some(log), Some(storage)) = (db.log(), node.storage()) {
        // The new file's generation, before writes on top of it are shipped. A failure
        // leaves it owed: the shipper's next round stores it.
        let runtime = storage.runtime()?;
        if let Err(e) = log.ship_round(&storage.context(&runtime)) {
            tracing::warn!(database_id = %db.id(), error = %e, "the upload's first generation is not stored yet; retrying");
        }
    }
    tracing::info!(database_id = %db.id(), "upload installed");
    Ok(())
}

fn remove_if_exists(path: &FsPath) -> Result<(), DataError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}
