//! Object storage, the durable home of every database (`docs/STORAGE.md`): Atoll's durable
//! log. It knows databases only as SQLite files, WAL files and ids; the data plane
//! (`atoll-data`) runs it for the databases a node holds (`atoll_data::node_storage`).
//!
//! - [`Storage`]: the store behind `--storage-url` (`file://…` or `s3://bucket/prefix`),
//!   through the `object_store` crate, and the layout of keys in it.
//! - [`wal`]: reading committed transactions out of a database's WAL.
//! - [`wal_insert`]: writing frames into a WAL (replicas, offline writes pushed back).
//! - [`segment`]: the log's segments, checksummed frame by frame and whole.
//! - [`backlog`]: which of a node's logs have work for its shipper.
//! - [`shipper`]: each database's log — shipping its WAL, snapshots (generations),
//!   checkpoints, durability waits.
//! - [`restore`]: rebuilding a database, as of the end of its log or any instant in its
//!   restorable window, from a generation and the segments after it.
//! - [`retention`]: deleting what falls out of a database's restorable window.
//! - [`history`]: a transfer starts a database's history anew; nothing before is read.
//! - [`lease`]: the node's write lease; nothing is stored without it once failover is on.
//! - [`encryption`]: databases encrypted with their customer's key (pages sealed before
//!   they reach the WAL, so the log holds ciphertext).

pub mod backlog;
pub mod encryption;
pub mod error;
pub mod history;
pub mod lease;
pub mod restore;
pub mod retention;
pub mod segment;
pub mod shipper;
pub mod wal;
pub mod wal_index;
pub mod wal_insert;

pub use error::StorageError;

use crate::lease::Lease;
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload, WriteMultipart};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// SQLite page size of every Atoll database (uploads must match it).
pub const PAGE_SIZE: u64 = 4096;

/// How a commit is acknowledged (`--durability`, or a database's own `durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DurabilityMode {
    /// When it is in the local WAL; shipped within `--durability-lag`.
    #[default]
    Lag,
    /// Only once the segment holding its commit frame is stored.
    Sync,
}

/// How a node ships its databases' logs.
#[derive(Debug, Clone)]
pub struct StorageSettings {
    /// The longest a committed transaction waits before it is shipped (lag mode).
    pub durability_lag: Duration,
    /// The node's default mode; a database's configuration may ask for `sync`.
    pub durability: DurabilityMode,
    /// The most page bytes one segment holds (a larger transaction gets one of its own).
    pub segment_max_bytes: usize,
    /// WAL frames that make the shipper checkpoint (SQLite's own default is 1000).
    pub checkpoint_frames: u64,
    /// Days a database's history stays restorable when its configuration names none.
    pub default_retention_days: u32,
    /// How often retention's garbage collection runs per database.
    pub gc_interval: Duration,
    /// How long a `sync` commit waits for its segment before it fails.
    pub sync_timeout: Duration,
    /// `lag` mode: once a commit has waited this long to be shipped, writes are refused
    /// until object storage has caught up (what a lost disk can lose stays bounded).
    pub max_unshipped: Duration,
}

impl Default for StorageSettings {
    fn default() -> Self {
        StorageSettings {
            durability_lag: Duration::from_secs(1),
            durability: DurabilityMode::Lag,
            segment_max_bytes: 8 * 1024 * 1024,
            checkpoint_frames: 1000,
            default_retention_days: 30,
            gc_interval: Duration::from_secs(3600),
            sync_timeout: Duration::from_secs(10),
            max_unshipped: Duration::from_secs(300),
        }
    }
}

/// An object store and the prefix Atoll's keys live under.
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// The URL it was opened from, without credentials (for logs and errors).
    url: String,
    /// The node's write lease (`crate::lease`): nothing is written without it.
    lease: Arc<Lease>,
}

/// One listed object: its key relative to the store's prefix, and its size.
#[derive(Debug, Clone)]
pub struct Listed {
    pub key: String,
    pub size: u64,
}

impl Storage {
    /// Opens `file:///dir` (created if missing) or `s3://bucket/prefix`. S3 takes the
    /// standard AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL` for MinIO, R2, Garage…; plain `http://` endpoints are allowed).
    pub fn open(url: &str) -> Result<Storage, StorageError> {
        let bad = |why: String| StorageError::BadRequest(format!("--storage-url {url}: {why}"));
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad(
                    "a file:// URL needs an absolute path (file:///…)".into()
                ));
            }
            std::fs::create_dir_all(path)
                .map_err(|e| bad(format!("cannot create the directory: {e}")))?;
            let store = object_store::local::LocalFileSystem::new_with_prefix(path)
                .map_err(|e| bad(e.to_string()))?;
            return Ok(Storage {
                store: Arc::new(store),
                prefix: ObjectPath::default(),
                url: url.to_string(),
                lease: Arc::new(Lease::unrequired()),
            });
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("an s3:// URL names a bucket: s3://bucket/prefix".into()));
            }
            let mut builder = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(object_store::RetryConfig {
                    max_retries: 3,
                    retry_timeout: Duration::from_secs(30),
                    ..Default::default()
                });
            let endpoint = std::env::var("AWS_ENDPOINT_URL")
                .or_else(|_| std::env::var("AWS_ENDPOINT"))
                .ok();
            if let Some(endpoint) = endpoint {
                builder = builder
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_endpoint(endpoint)
                    .with_virtual_hosted_style_request(false);
            }
            if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err()
            {
                builder = builder.with_region("us-east-1");
            }
            let store = builder.build().map_err(|e| bad(e.to_string()))?;
            return Ok(Storage {
                store: Arc::new(store),
                prefix: ObjectPath::from(prefix.trim_matches('/')),
                url: format!("s3://{bucket}/{}", prefix.trim_matches('/')),
                lease: Arc::new(Lease::unrequired()),
            });
        }
        Err(bad("use file:///absolute/dir or s3://bucket/prefix".into()))
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Writes only under the node's lease `lease` (failover: `crate::lease`).
    pub fn with_lease(mut self, lease: Arc<Lease>) -> Storage {
        self.lease = lease;
        self
    }

    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    fn path(&self, key: &str) -> ObjectPath {
        let mut path = self.prefix.clone();
        for part in key.split('/').filter(|p| !p.is_empty()) {
            path = path.child(part);
        }
        path
    }

    fn relative(&self, path: &ObjectPath) -> String {
        let full = path.as_ref();
        let prefix = self.prefix.as_ref();
        if prefix.is_empty() {
            full.to_string()
        } else {
            full.strip_prefix(prefix)
                .unwrap_or(full)
                .trim_start_matches('/')
                .to_string()
        }
    }

    fn error(&self, what: &str, key: &str, e: impl std::fmt::Display) -> StorageError {
        StorageError::ObjectStorage(format!("{what} {key} in {}: {e}", self.url))
    }

    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), StorageError> {
        self.lease
            .store(key, async {
                self.store
                    .put(&self.path(key), PutPayload::from(bytes))
                    .await
                    .map_err(|e| self.error("cannot store", key, e))
            })
            .await?;
        Ok(())
    }

    /// Stores a local file in parts (snapshots can be large), answering its length.
    pub async fn put_file(&self, key: &str, file: &Path) -> Result<u64, StorageError> {
        self.lease
            .store(key, self.put_file_unleased(key, file))
            .await
    }

    async fn put_file_unleased(&self, key: &str, file: &Path) -> Result<u64, StorageError> {
        use tokio::io::AsyncReadExt;
        const PART: usize = 8 * 1024 * 1024;
        if tokio::fs::metadata(file).await?.len() <= PART as u64 {
            // One request where a multipart upload would take three (S3: create, part,
            // complete): a new database's snapshot is one page.
            let bytes = tokio::fs::read(file).await?;
            let total = bytes.len() as u64;
            self.store
                .put(&self.path(key), PutPayload::from(bytes))
                .await
                .map_err(|e| self.error("cannot store", key, e))?;
            return Ok(total);
        }
        let upload = self
            .store
            .put_multipart(&self.path(key))
            .await
            .map_err(|e| self.error("cannot store", key, e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut source = tokio::fs::File::open(file).await?;
        let mut buf = vec![0u8; 1024 * 1024];
        let mut total = 0u64;
        loop {
            let n = source.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            total += n as u64;
            writer
                .wait_for_capacity(4)
                .await
                .map_err(|e| self.error("cannot store", key, e))?;
            writer.write(&buf[..n]);
        }
        writer
            .finish()
            .await
            .map_err(|e| self.error("cannot store", key, e))?;
        Ok(total)
    }

    /// An object's bytes; `None` when it does not exist.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, StorageError> {
        match self.store.get(&self.path(key)).await {
            Ok(result) => Ok(Some(
                result
                    .bytes()
                    .await
                    .map_err(|e| self.error("cannot read", key, e))?,
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("cannot read", key, e)),
        }
    }

    /// Writes an object to a local file, handing each chunk to `inspect` (a running
    /// checksum) on the way. A local store's file is copied on a blocking thread; a
    /// remote object's stream is written in large chunks (one small write per network
    /// chunk made a 1 GiB restore several times slower).
    pub async fn get_to_file(
        &self,
        key: &str,
        file: &Path,
        mut inspect: impl FnMut(&[u8]) + Send + 'static,
    ) -> Result<u64, StorageError> {
        use tokio::io::AsyncWriteExt;
        const CHUNK: usize = 4 * 1024 * 1024;
        let result = self.store.get(&self.path(key)).await.map_err(|e| match e {
            object_store::Error::NotFound { .. } => {
                StorageError::ObjectStorage(format!("object {key} is missing from {}", self.url))
            }
            e => self.error("cannot read", key, e),
        })?;
        match result.payload {
            object_store::GetResultPayload::File(mut source, _) => {
                let target = file.to_path_buf();
                tokio::task::spawn_blocking(move || -> Result<u64, StorageError> {
                    use std::io::{Read, Write};
                    let mut out = std::fs::File::create(&target)?;
                    let mut buf = vec![0u8; CHUNK];
                    let mut total = 0u64;
                    loop {
                        let n = source.read(&mut buf)?;
                        if n == 0 {
                            break;
                        }
                        inspect(&buf[..n]);
                        out.write_all(&buf[..n])?;
                        total += n as u64;
                    }
                    out.sync_all()?;
                    Ok(total)
                })
                .await
                .map_err(|e| StorageError::Internal(e.to_string()))?
            }
            object_store::GetResultPayload::Stream(mut stream) => {
                let mut out = tokio::fs::File::create(file).await?;
                let mut pending = Vec::with_capacity(CHUNK);
                let mut total = 0u64;
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk.map_err(|e| self.error("cannot read", key, e))?;
                    inspect(&chunk);
                    total += chunk.len() as u64;
                    pending.extend_from_slice(&chunk);
                    if pending.len() >= CHUNK {
                        out.write_all(&pending).await?;
                        pending.clear();
                    }
                }
                out.write_all(&pending).await?;
                out.sync_all().await?;
                Ok(total)
            }
        }
    }

    /// Every object under `prefix`, in key order.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StorageError> {
        let path = self.path(prefix);
        let mut stream = self.store.list(Some(&path));
        let mut out = Vec::new();
        while let Some(meta) = stream.next().await {
            let meta = match meta {
                Ok(meta) => meta,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(self.error("cannot list", prefix, e)),
            };
            out.push(Listed {
                key: self.relative(&meta.location),
                size: meta.size,
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.lease
            .store(key, async {
                match self.store.delete(&self.path(key)).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(self.error("cannot delete", key, e)),
                }
            })
            .await
    }

    /// Deletes every object under `prefix`.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<usize, StorageError> {
        let listed = self.list(prefix).await?;
        for object in &listed {
            self.delete(&object.key).await?;
        }
        Ok(listed.len())
    }
}

/// The keys of one database and of a node's index, in one place (`docs/STORAGE.md`).
pub mod keys {
    /// Everything of one database.
    pub fn database(id: &str) -> String {
        format!("dbs/{id}/")
    }

    pub fn generations(id: &str) -> String {
        format!("dbs/{id}/generations/")
    }

    /// A generation: the snapshot as of frame `start`, taken at `created_ms`.
    pub fn generation(id: &str, start: u64, created_ms: i64) -> String {
        format!("dbs/{id}/generations/{start:020}-{created_ms:020}/")
    }

    pub fn log(id: &str) -> String {
        format!("dbs/{id}/log/")
    }

    pub fn segment(id: &str, first: u64, last: u64, first_ms: i64, last_ms: i64) -> String {
        format!("dbs/{id}/log/{first:020}-{last:020}-{first_ms:020}-{last_ms:020}.seg")
    }

    /// Where the database's current history starts (a transfer starts it anew).
    pub fn history(id: &str) -> String {
        format!("dbs/{id}/history.json")
    }

    pub fn restores(id: &str) -> String {
        format!("dbs/{id}/restores/")
    }

    /// The databases a node holds, each with its configuration, so a node whose disk
    /// is lost knows what to rebuild.
    pub fn node_databases(node: &str) -> String {
        format!("nodes/{node}/databases/")
    }

    pub fn node_database(node: &str, id: &str) -> String {
        format!("nodes/{node}/databases/{id}.json")
    }

    /// `(start, created_ms)` of a generation directory's key (`…/generations/<s>-<c>/…`).
    pub fn parse_generation(key: &str) -> Option<(u64, i64)> {
        let rest = key.split("/generations/").nth(1)?;
        let name = rest.split('/').next()?;
        let (start, created) = name.split_once('-')?;
        Some((start.parse().ok()?, created.parse().ok()?))
    }

    /// `(first, last, first_ms, last_ms)` of a segment's key.
    pub fn parse_segment(key: &str) -> Option<(u64, u64, i64, i64)> {
        let name = key.rsplit('/').next()?.strip_suffix(".seg")?;
        let mut parts = name.split('-');
        let first = parts.next()?.parse().ok()?;
        let last = parts.next()?.parse().ok()?;
        let first_ms = parts.next()?.parse().ok()?;
        let last_ms = parts.next()?.parse().ok()?;
        Some((first, last, first_ms, last_ms))
    }
}

/// Milliseconds since the epoch, as the log records commit times.
pub fn now_ms_public() -> i64 {
    now_ms()
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Makes the entries of `dir` durable (a file created, renamed or removed in it): after a
/// file's own `sync_all`, what a crash must not undo.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
