//! The registry of uploads in progress ([`Uploads`]): the node's limits (largest file,
//! chunk size, when a silent chunked upload is dropped), the chunked uploads and their
//! received chunks, the claims that keep two uploads off one database, and the guards and
//! temporary files that release them however a request ends.

use super::UploadError;
use crate::database::{Database, PAGE_SIZE};
use crate::error::DataError;
use crate::node::Node;
use std::collections::{HashMap, HashSet};
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
pub(super) const TEMP_PREFIX: &str = ".upload-";

/// Chunked uploads in progress, and which databases are receiving an upload right now.
pub struct Uploads {
    max_bytes: AtomicU64,
    pub(super) chunk_size: AtomicU64,
    abandon_after_secs: AtomicU64,
    // Shared with the guards that release a claim when a request (or the blocking work it
    // started) ends, however it ends.
    pub(super) inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
pub(super) struct Inner {
    /// Databases receiving a single-request upload.
    single: HashSet<String>,
    /// Chunked uploads by upload id.
    pub(super) chunked: HashMap<String, ChunkedUpload>,
}

pub(super) struct ChunkedUpload {
    pub(super) database_id: String,
    pub(super) path: PathBuf,
    pub(super) size: u64,
    pub(super) chunk_size: u64,
    pub(super) received: Vec<bool>,
    /// Chunk requests writing to the file now: the file must not be installed under them.
    pub(super) writing: usize,
    pub(super) finalizing: bool,
    pub(super) last_activity: Instant,
}

impl ChunkedUpload {
    pub(super) fn chunk_len(&self, n: u64) -> u64 {
        self.chunk_size.min(self.size - n * self.chunk_size)
    }
}

impl Inner {
    pub(super) fn busy(&self, database_id: &str) -> bool {
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

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    fn abandon_after(&self) -> Duration {
        Duration::from_secs(self.abandon_after_secs.load(Ordering::Relaxed))
    }

    /// The most a file for `db` may weigh, and what to tell the client when it weighs more.
    pub(super) fn limit_for(&self, db: &Database) -> (u64, String) {
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
    pub(super) fn claim_single(&self, db: &Database) -> Result<SingleClaim, DataError> {
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
    pub(super) fn sweep(&self, node: &Node) {
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
    pub(super) fn find<'a>(
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

    pub(super) fn busy_error(&self, db: &Database) -> DataError {
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

pub(super) fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

/// A database claimed by a single-request upload.
pub(super) struct SingleClaim {
    pub(super) inner: Arc<Mutex<Inner>>,
    pub(super) database_id: String,
}

impl Drop for SingleClaim {
    fn drop(&mut self) {
        lock(&self.inner).single.remove(&self.database_id);
    }
}

/// A chunk request writing into an upload's file.
pub(super) struct ChunkWrite {
    pub(super) inner: Arc<Mutex<Inner>>,
    pub(super) upload_id: String,
    pub(super) n: u64,
    pub(super) done: bool,
}

impl ChunkWrite {
    /// Records the chunk as received, in the same step that ends the write, so a finalize
    /// never sees the write over and the chunk still missing.
    pub(super) fn complete(mut self) {
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
pub(super) struct Finalizing {
    pub(super) inner: Arc<Mutex<Inner>>,
    pub(super) upload_id: String,
}

impl Drop for Finalizing {
    fn drop(&mut self) {
        lock(&self.inner).chunked.remove(&self.upload_id);
    }
}

/// A temporary file deleted (with any `-wal`/`-shm`/`-journal` SQLite left next to it)
/// when dropped, unless it was installed.
pub(super) struct TempFile {
    pub(super) path: Option<PathBuf>,
}

impl TempFile {
    pub(super) fn new(path: PathBuf) -> TempFile {
        TempFile { path: Some(path) }
    }

    pub(super) fn path(&self) -> &FsPath {
        self.path.as_deref().unwrap_or(FsPath::new(""))
    }

    /// The file was renamed into place: nothing is left to delete.
    pub(super) fn installed(mut self) {
        self.path = None;
    }

    /// Deletes the file now (on a blocking thread), so it is gone before the answer.
    pub(super) fn delete(mut self) {
        if let Some(path) = self.path.take() {
            remove_sqlite_files(&path);
        }
    }

    /// [`TempFile::delete`] from async code.
    pub(super) async fn discard(self) {
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
pub(super) fn sqlite_files(path: &FsPath) -> [PathBuf; 4] {
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
