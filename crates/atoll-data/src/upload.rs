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

use crate::auth::DbRequest;
use crate::database::{Database, PAGE_SIZE};
use crate::error::DataError;
use crate::node::Node;
use crate::sandbox::{CancelToken, Interruption, Mode, SandboxSettings};
use crate::DataPlaneState;
use atoll_types::node::DatabaseState;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Largest file accepted by default. The Turso CLI allows 20 GiB; a self-hosted node
/// rarely has room for several such files at once (the upload and the database it
/// replaces), so the default is lower and operators raise it knowingly.
pub const DEFAULT_MAX_UPLOAD_BYTES: u64 = 8 << 30;

/// Chunk size offered to chunked uploads: big enough that an 8 GiB file is ~1000 requests,
/// small enough that a failed chunk costs the CLI little to resend.
pub const DEFAULT_CHUNK_SIZE: u64 = 8 << 20;

/// A chunked upload without any request for this long is dropped with its temporary file.
pub const DEFAULT_ABANDON_AFTER: Duration = Duration::from_secs(60 * 60);

/// Prefix of the temporary files uploads write in a database's directory.
const TEMP_PREFIX: &str = ".upload-";

/// Chunked uploads in progress, and which databases are receiving an upload right now.
pub struct Uploads {
    max_bytes: AtomicU64,
    chunk_size: AtomicU64,
    abandon_after_secs: AtomicU64,
    // Shared with the guards that release a claim when a request (or the blocking work it
    // started) ends, however it ends.
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// Databases receiving a single-request upload.
    single: HashSet<String>,
    /// Chunked uploads by upload id.
    chunked: HashMap<String, ChunkedUpload>,
}

struct ChunkedUpload {
    database_id: String,
    path: PathBuf,
    size: u64,
    chunk_size: u64,
    received: Vec<bool>,
    /// Chunk requests writing to the file now: the file must not be installed under them.
    writing: usize,
    finalizing: bool,
    last_activity: Instant,
}

impl ChunkedUpload {
    fn chunk_len(&self, n: u64) -> u64 {
        self.chunk_size.min(self.size - n * self.chunk_size)
    }
}

impl Inner {
    fn busy(&self, database_id: &str) -> bool {
        self.single.contains(database_id)
            || self.chunked.values().any(|u| u.database_id == database_id)
    }
}

/// A chunked upload as [`Uploads::in_progress`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadProgress {
    pub upload_id: String,
    pub database_id: String,
    pub db_size_bytes: u64,
    pub received_bytes: u64,
    pub idle: Duration,
}

impl Uploads {
    pub fn new() -> Uploads {
        Uploads {
            max_bytes: AtomicU64::new(DEFAULT_MAX_UPLOAD_BYTES),
            chunk_size: AtomicU64::new(DEFAULT_CHUNK_SIZE),
            abandon_after_secs: AtomicU64::new(DEFAULT_ABANDON_AFTER.as_secs()),
            inner: Arc::new(Mutex::new(Inner::default())),
        }
    }

    /// Largest file accepted (a database's own size limit, when lower, wins).
    pub fn set_max_bytes(&self, bytes: u64) {
        self.max_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Chunk size offered to chunked uploads started from now on (rounded up to whole pages).
    pub fn set_chunk_size(&self, bytes: u64) {
        let pages = bytes.div_ceil(PAGE_SIZE).max(1);
        self.chunk_size.store(pages * PAGE_SIZE, Ordering::Relaxed);
    }

    /// How long a chunked upload may sit without requests before it is dropped.
    pub fn set_abandon_after(&self, idle: Duration) {
        self.abandon_after_secs
            .store(idle.as_secs(), Ordering::Relaxed);
    }

    /// The chunked uploads not yet finalized or dropped.
    pub fn in_progress(&self) -> Vec<UploadProgress> {
        let inner = self.lock();
        inner
            .chunked
            .iter()
            .map(|(id, u)| UploadProgress {
                upload_id: id.clone(),
                database_id: u.database_id.clone(),
                db_size_bytes: u.size,
                received_bytes: (0..u.received.len() as u64)
                    .filter(|&n| u.received[n as usize])
                    .map(|n| u.chunk_len(n))
                    .sum(),
                idle: u.last_activity.elapsed(),
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    fn abandon_after(&self) -> Duration {
        Duration::from_secs(self.abandon_after_secs.load(Ordering::Relaxed))
    }

    /// The most a file for `db` may weigh, and what to tell the client when it weighs more.
    fn limit_for(&self, db: &Database) -> (u64, String) {
        let max = self.max_bytes.load(Ordering::Relaxed);
        let config = db.config();
        match config.size_limit {
            Some(limit) if limit < max => (
                limit,
                format!(
                    "the file is larger than database {}'s size limit of {limit} bytes",
                    config.name
                ),
            ),
            _ => (
                max,
                format!("the file is larger than this node's upload limit of {max} bytes"),
            ),
        }
    }

    /// Claims `db` for a single-request upload; the claim ends when the guard drops.
    fn claim_single(&self, db: &Database) -> Result<SingleClaim, DataError> {
        let id = db.id().to_string();
        let mut inner = self.lock();
        if inner.busy(&id) {
            return Err(self.busy_error(db));
        }
        inner.single.insert(id.clone());
        Ok(SingleClaim {
            inner: Arc::clone(&self.inner),
            database_id: id,
        })
    }

    /// Drops chunked uploads nobody has touched for a while, or whose database is gone, and
    /// deletes their files. Runs on `start` and `finalize` rather than on a timer: uploads
    /// are rare, and nothing else needs the space back sooner.
    fn sweep(&self, node: &Node) {
        let abandon_after = self.abandon_after();
        let dropped: Vec<(String, ChunkedUpload)> = {
            let mut inner = self.lock();
            let stale: Vec<String> = inner
                .chunked
                .iter()
                .filter(|(_, u)| {
                    u.writing == 0
                        && !u.finalizing
                        && (u.last_activity.elapsed() >= abandon_after
                            || node.by_id(&u.database_id).is_none())
                })
                .map(|(id, _)| id.clone())
                .collect();
            stale
                .into_iter()
                .filter_map(|id| inner.chunked.remove_entry(&id))
                .collect()
        };
        for (id, upload) in dropped {
            tracing::info!(upload_id = %id, database_id = %upload.database_id, "dropping abandoned upload");
            drop(TempFile::new(upload.path));
        }
    }

    /// The upload `upload_id` of `db`, or the error that says there is none.
    fn find<'a>(
        &self,
        inner: &'a mut Inner,
        upload_id: &str,
        db: &Database,
    ) -> Result<&'a mut ChunkedUpload, UploadError> {
        match inner.chunked.get_mut(upload_id) {
            // An id of another database answers like an unknown one: it confirms nothing
            // about databases the token does not cover.
            Some(upload) if upload.database_id == db.id() => Ok(upload),
            _ => Err(UploadError::UnknownUpload(format!(
                "no upload {upload_id} for this database: start one with PUT /v2/upload/start (an upload is dropped after {} s without requests)",
                self.abandon_after().as_secs()
            ))),
        }
    }

    fn busy_error(&self, db: &Database) -> DataError {
        DataError::Conflict(format!(
            "another upload to database {} is in progress: wait for it to end (a chunked upload is dropped after {} s without requests)",
            db.config().name,
            self.abandon_after().as_secs()
        ))
    }
}

impl Default for Uploads {
    fn default() -> Self {
        Self::new()
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

/// A database claimed by a single-request upload.
struct SingleClaim {
    inner: Arc<Mutex<Inner>>,
    database_id: String,
}

impl Drop for SingleClaim {
    fn drop(&mut self) {
        lock(&self.inner).single.remove(&self.database_id);
    }
}

/// A chunk request writing into an upload's file.
struct ChunkWrite {
    inner: Arc<Mutex<Inner>>,
    upload_id: String,
    n: u64,
    done: bool,
}

impl ChunkWrite {
    /// Records the chunk as received, in the same step that ends the write, so a finalize
    /// never sees the write over and the chunk still missing.
    fn complete(mut self) {
        let mut inner = lock(&self.inner);
        if let Some(upload) = inner.chunked.get_mut(&self.upload_id) {
            upload.received[self.n as usize] = true;
            upload.writing -= 1;
            upload.last_activity = Instant::now();
        }
        self.done = true;
    }
}

impl Drop for ChunkWrite {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut inner = lock(&self.inner);
        if let Some(upload) = inner.chunked.get_mut(&self.upload_id) {
            upload.writing -= 1;
            upload.last_activity = Instant::now();
        }
    }
}

/// A chunked upload being finalized; it ends, installed or refused, when the guard drops.
struct Finalizing {
    inner: Arc<Mutex<Inner>>,
    upload_id: String,
}

impl Drop for Finalizing {
    fn drop(&mut self) {
        lock(&self.inner).chunked.remove(&self.upload_id);
    }
}

/// A temporary file deleted (with any `-wal`/`-shm`/`-journal` SQLite left next to it)
/// when dropped, unless it was installed.
struct TempFile {
    path: Option<PathBuf>,
}

impl TempFile {
    fn new(path: PathBuf) -> TempFile {
        TempFile { path: Some(path) }
    }

    fn path(&self) -> &FsPath {
        self.path.as_deref().unwrap_or(FsPath::new(""))
    }

    /// The file was renamed into place: nothing is left to delete.
    fn installed(mut self) {
        self.path = None;
    }

    /// Deletes the file now (on a blocking thread), so it is gone before the answer.
    fn delete(mut self) {
        if let Some(path) = self.path.take() {
            remove_sqlite_files(&path);
        }
    }

    /// [`TempFile::delete`] from async code.
    async fn discard(self) {
        let _ = tokio::task::spawn_blocking(move || self.delete()).await;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let Some(path) = self.path.take() else {
            return;
        };
        let remove = move || remove_sqlite_files(&path);
        // Deleting gigabytes takes the file system a while: keep it off the executor when
        // the guard drops there (a request cancelled mid-upload).
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

fn remove_sqlite_files(path: &FsPath) {
    for p in sqlite_files(path) {
        let _ = std::fs::remove_file(p);
    }
}

/// `path` and the files SQLite may keep next to it.
fn sqlite_files(path: &FsPath) -> [PathBuf; 4] {
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [
        path.to_path_buf(),
        with("-wal"),
        with("-shm"),
        with("-journal"),
    ]
}

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
    req: DbRequest,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, DataError> {
    require_write(&req)?;
    crate::auth::refuse_encryption_key(&headers)?;
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
        check_and_install(&node, &db, temp, None, &bounds)
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
    req: DbRequest,
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
    req: DbRequest,
    Path((upload_id, n)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, UploadError> {
    require_write(&req)?;
    crate::auth::refuse_encryption_key(&headers)?;
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
    req: DbRequest,
    Path(upload_id): Path<String>,
) -> Result<Json<Value>, UploadError> {
    require_write(&req)?;
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
    let cancel = CancelToken::new();
    let cancel_on_drop = cancel.cancel_on_drop();
    let bounds = CheckBounds::for_node(&node, Some(cancel)).from_organization(&db.config().org_id);
    let installed = blocking(move || {
        let _finalizing = finalizing;
        check_and_install(&node, &db, TempFile::new(path), Some(size), &bounds)
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
) -> Result<(), DataError> {
    match install(node, db, &temp, expected_len, bounds) {
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

fn install(
    node: &Node,
    db: &Database,
    temp: &TempFile,
    expected_len: Option<u64>,
    bounds: &CheckBounds,
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

/// Files get one statement timeout of checking for every this many bytes (at least one):
/// `PRAGMA integrity_check` reads a database of tenant size in well under a second, and a
/// large file must not fail for its size alone.
pub const CHECK_BYTES_PER_TIMEOUT: u64 = 64 << 20;

/// How often (in virtual-machine instructions) a check looks whether it must stop. Finer
/// than a statement's: the check spends a few instructions per row, and one row's CHECK
/// constraint may be slow.
const CHECK_PROGRESS_INTERVAL: i32 = 1_000;

/// What bounds a check of a file a tenant supplied (an upload, the database a push would
/// make). The check runs the file's own SQL on every row — CHECK constraints, generated
/// columns, index expressions — so it is held to what a tenant's statement is held to: a
/// connection of the sandbox (its limits and rules, read-only), a deadline derived from
/// the node's statement timeout ([`CheckBounds::deadline`]), its client going away, and
/// the node shutting down.
#[derive(Clone)]
pub struct CheckBounds {
    settings: SandboxSettings,
    cancel: Option<CancelToken>,
    node: Option<Arc<Node>>,
    /// The organization the file is from, for the node's crash journal.
    org_id: Option<String>,
}

impl CheckBounds {
    /// A check `node` runs for a request whose client may go away (`cancel`).
    pub fn for_node(node: &Arc<Node>, cancel: Option<CancelToken>) -> CheckBounds {
        CheckBounds {
            settings: node.sandbox().clone(),
            cancel,
            node: Some(Arc::clone(node)),
            org_id: None,
        }
    }

    /// The check is of a file `org_id` supplied: it runs under the node's crash journal
    /// (`crate::crash_journal`), so a file whose check crashed the node is not checked again
    /// for that organization.
    pub fn from_organization(mut self, org_id: &str) -> CheckBounds {
        self.org_id = Some(org_id.to_string());
        self
    }

    /// A check outside a node (tests, the fuzz target): `settings` only.
    pub fn standalone(settings: SandboxSettings) -> CheckBounds {
        CheckBounds {
            settings,
            cancel: None,
            node: None,
            org_id: None,
        }
    }

    /// How long checking a file of `bytes` may take: the node's statement timeout for
    /// every started [`CHECK_BYTES_PER_TIMEOUT`].
    pub fn deadline(&self, bytes: u64) -> Duration {
        let parts = bytes.div_ceil(CHECK_BYTES_PER_TIMEOUT).max(1);
        self.settings
            .statement_timeout
            .saturating_mul(u32::try_from(parts).unwrap_or(u32::MAX))
    }
}

/// [`check_database_file_within`] with the default settings and nothing else to stop it.
pub fn check_database_file(path: &FsPath) -> Result<(), DataError> {
    check_database_file_within(path, &CheckBounds::standalone(SandboxSettings::default()))
}

/// Checks that the SQLite file at `path` is one Atoll can serve as it is: page size 4096,
/// WAL mode, no auto-vacuum, UTF-8, complete (length agrees with its header) and intact
/// (`PRAGMA integrity_check`, within `bounds`). A problem with the file is a `BadRequest`
/// saying what to do, as is a check that ran out of time; an I/O failure reading it is
/// `Internal`.
///
/// These are the requirements the Turso CLI checks locally before an upload; the header is
/// checked first so the usual mistakes are answered without reading the whole file.
pub fn check_database_file_within(path: &FsPath, bounds: &CheckBounds) -> Result<(), DataError> {
    check_file_format(path)?;
    match integrity_check(path, bounds, "the file")? {
        Ok(()) => Ok(()),
        Err(detail) => Err(DataError::BadRequest(format!(
            "the file is corrupt ({detail}): repair it (sqlite3 old.db .recover | sqlite3 new.db) and upload the repaired copy"
        ))),
    }
}

/// The checks of [`check_database_file_within`] that read only the file's header and
/// length.
pub(crate) fn check_file_format(path: &FsPath) -> Result<(), DataError> {
    let bad = |reason: String| DataError::BadRequest(reason);
    let len = std::fs::metadata(path)?.len();
    if len == 0 {
        return Err(bad("the file is empty".into()));
    }
    let mut header = [0u8; 100];
    let mut file = std::fs::File::open(path)?;
    let mut filled = 0;
    while filled < header.len() {
        match file.read(&mut header[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    drop(file);
    let header = &header[..filled];

    if !header.starts_with(b"SQLite format 3\0") {
        let text = String::from_utf8_lossy(header).to_ascii_uppercase();
        let hint = if ["PRAGMA", "BEGIN", "CREATE", "INSERT"]
            .iter()
            .any(|kw| text.trim_start().starts_with(kw))
        {
            " (this looks like an SQL dump: create the database from it with seed type dump instead)"
        } else {
            ""
        };
        return Err(bad(format!(
            "the file is not an SQLite database: it does not start with the header \"SQLite format 3\"{hint}"
        )));
    }
    if header.len() < 100 {
        return Err(bad(format!(
            "the file is {len} bytes, too short for an SQLite database: the upload is truncated"
        )));
    }
    let u16_at = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
    let u32_at = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };

    let page_size = match u16_at(16) {
        1 => 65536,
        n => u64::from(n),
    };
    if page_size != PAGE_SIZE {
        return Err(bad(format!(
            "the database page size is {page_size} bytes, Atoll needs {PAGE_SIZE}: run PRAGMA journal_mode=DELETE; PRAGMA page_size={PAGE_SIZE}; VACUUM; PRAGMA journal_mode=WAL; on it, then upload it again"
        )));
    }
    if header[18] != 2 || header[19] != 2 {
        return Err(bad(
            "the file is not in WAL journal mode: run PRAGMA journal_mode=WAL and checkpoint it (PRAGMA wal_checkpoint(TRUNCATE)), then upload it again".into(),
        ));
    }
    // Offset 52 is the largest root page for auto-vacuum; non-zero means auto-vacuum is on
    // (offset 64 tells which kind).
    if u32_at(52) != 0 {
        let kind = if u32_at(64) != 0 {
            "INCREMENTAL"
        } else {
            "FULL"
        };
        return Err(bad(format!(
            "the file has auto_vacuum={kind}, Atoll needs auto_vacuum=NONE: run PRAGMA auto_vacuum=NONE; VACUUM; on it, then upload it again"
        )));
    }
    // 0 is a database that never had a schema: SQLite will use UTF-8.
    match u32_at(56) {
        0 | 1 => {}
        encoding => {
            let name = match encoding {
                2 => "UTF-16le".to_string(),
                3 => "UTF-16be".to_string(),
                other => format!("unknown ({other})"),
            };
            return Err(bad(format!(
                "the file's text encoding is {name}, Atoll needs UTF-8: copy it into a UTF-8 database (sqlite3 old.db .dump | sqlite3 new.db), then upload that"
            )));
        }
    }
    if len % PAGE_SIZE != 0 {
        return Err(bad(format!(
            "the file is {len} bytes, not a whole number of {PAGE_SIZE}-byte pages: the upload is truncated, or the file is damaged"
        )));
    }
    // The header's page count is valid when its "version-valid-for" number (offset 92)
    // matches the change counter (offset 24); SQLite has always written both since 3.7.0.
    let header_pages = u64::from(u32_at(28));
    if u32_at(92) == u32_at(24) && header_pages != 0 && header_pages != len / PAGE_SIZE {
        return Err(bad(format!(
            "the file holds {} pages but its header says {header_pages}: it is truncated, or was copied while it was written — checkpoint it (PRAGMA wal_checkpoint(TRUNCATE)) and copy it again",
            len / PAGE_SIZE
        )));
    }

    Ok(())
}

/// Runs `PRAGMA integrity_check` on the file at `path` within `bounds`. `Ok(Err(detail))`:
/// the file is damaged; `Err`: the check was stopped, or the file's SQL failed — the error
/// says why, naming the file as `what` — or it could not start.
///
/// `integrity_check` rather than `quick_check`: it also finds indexes that disagree with
/// their tables (a pushed page can drop a row from a UNIQUE index, and the database then
/// answers and refuses writes wrongly). It costs more — about ten times `quick_check` on a
/// table with two indexes (1 M rows, 164 MB: 2.2 s against 0.19 s) — which the deadline
/// covers.
pub(crate) fn integrity_check(
    path: &FsPath,
    bounds: &CheckBounds,
    what: &str,
) -> Result<Result<(), String>, DataError> {
    let deadline = bounds.deadline(std::fs::metadata(path)?.len());
    let _running = match (&bounds.node, &bounds.org_id) {
        (Some(node), Some(org_id)) => Some(
            node.crash_journal()
                .running(
                    &crate::crash_journal::organization_key(org_id),
                    crate::crash_journal::FILE_CHECK,
                )
                .map_err(DataError::Forbidden)?,
        ),
        _ => None,
    };
    // The sandbox's connection: its value and SQL length limits bound what one row's SQL
    // may build, its authorizer the functions it may call, and `query_only` keeps the
    // file being judged as it is. Its statement clock is replaced by the check's own
    // (below): the check must also see the node shutting down.
    let sandboxed = crate::sandbox::open(
        path,
        Mode::ReadOnly,
        &bounds.settings,
        &Arc::new(std::sync::atomic::AtomicBool::new(false)),
        |_| Ok(()),
    )?;
    let watch = std::panic::AssertUnwindSafe(CheckWatch {
        until: Instant::now() + deadline,
        deadline,
        cancel: bounds.cancel.clone(),
        node: bounds.node.clone(),
        stopped: Arc::default(),
    });
    let stopped = Arc::clone(&watch.stopped);
    sandboxed
        .conn
        .progress_handler(CHECK_PROGRESS_INTERVAL, Some(move || watch.should_stop()));
    crate::memory::start_statement_memory_budget(bounds.settings.max_statement_memory);
    let verdict: Result<Vec<String>, rusqlite::Error> = sandboxed
        .conn
        .prepare("PRAGMA integrity_check(5)")
        .and_then(|mut stmt| stmt.query_map([], |row| row.get::<_, String>(0))?.collect());
    let over_memory = crate::memory::end_statement_memory_budget();
    let refusal = sandboxed.control.take_refusal();
    drop(sandboxed);
    let stopped = stopped
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .or(over_memory.then_some(Interruption::OutOfMemoryBudget(
            bounds.settings.max_statement_memory,
        )));
    if let Some(why) = stopped {
        return Err(check_stopped(why, what, &bounds.settings));
    }
    match verdict {
        Ok(lines) if lines == ["ok"] => Ok(Ok(())),
        Ok(lines) => Ok(Err(format!("integrity_check: {}", lines.join("; ")))),
        Err(e) if is_damage(&e) => Ok(Err(e.to_string())),
        // The file's SQL failed (a value over the node's limits, a refused function):
        // every write would fail the same way.
        Err(e) => Err(DataError::BadRequest(format!(
            "{what} could not be checked, so it was refused: its own SQL (CHECK constraints, generated columns, index expressions) failed on a row: {}",
            refusal.unwrap_or_else(|| e.to_string())
        ))),
    }
}

/// Whether SQLite failed on the file's bytes (rather than on its SQL).
fn is_damage(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    matches!(e.sqlite_error_code(), Some(DatabaseCorrupt | NotADatabase))
}

/// The progress handler of a check: whether it must stop now, and why.
struct CheckWatch {
    until: Instant,
    deadline: Duration,
    cancel: Option<CancelToken>,
    node: Option<Arc<Node>>,
    stopped: Arc<Mutex<Option<Interruption>>>,
}

impl CheckWatch {
    fn should_stop(&self) -> bool {
        let why = if self.node.as_ref().is_some_and(|n| n.is_shutting_down()) {
            Some(Interruption::Shutdown)
        } else if self.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            Some(Interruption::ClientGone)
        } else if Instant::now() >= self.until {
            Some(Interruption::Deadline(self.deadline))
        } else {
            None
        };
        if why.is_some() {
            *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = why;
        }
        why.is_some()
    }
}

/// The answer to a check that was stopped before it ended.
fn check_stopped(why: Interruption, what: &str, settings: &SandboxSettings) -> DataError {
    use crate::sandbox::human_duration;
    match why {
        Interruption::Deadline(limit) => DataError::BadRequest(format!(
            "{what} could not be checked within {}, so it was refused: checking runs its own SQL (CHECK constraints, generated columns, index expressions) on every row, and may take the node's statement timeout ({}, --statement-timeout) for every {} MiB of the database; make that SQL cheaper",
            human_duration(limit),
            human_duration(settings.statement_timeout),
            CHECK_BYTES_PER_TIMEOUT >> 20
        )),
        Interruption::ClientGone => DataError::BadRequest(format!(
            "the check of {what} was interrupted: its client went away"
        )),
        Interruption::Shutdown => DataError::Unavailable(format!(
            "the check of {what} was interrupted: the server is shutting down; send it again"
        )),
        Interruption::OutOfMemoryBudget(limit) => DataError::BadRequest(format!(
            "{what} could not be checked, so it was refused: its own SQL (CHECK constraints, generated columns, index expressions) needed more than {} MiB of memory on a row (the node's --max-statement-memory)",
            limit >> 20
        )),
    }
}
