//! Replicas in other locations (docs/STORAGE.md, "Replicas"): a node holding a *replica*
//! of a database keeps its own copy of the file and applies the primary's log to it.
//!
//! - The primary serves the frames after any frame number on its database listener
//!   (`GET /v1/internal/frames/{id}`, node secret only): from its WAL while they are there
//!   (so a replica lags the primary by a round trip, not by `--durability-lag`), from object
//!   storage once they were checkpointed away. A request waits (bounded) for a commit when
//!   there is nothing new, so a replica follows with one long poll at a time.
//! - The replica starts from object storage (the stored head), then follows the primary.
//!   Each batch is verified (frame numbers without a gap, the rolling checksum chained to
//!   the last frame it applied) and applied as **one** transaction with libSQL's WAL frame
//!   injection (`libsql_wal_insert_frame`), so its readers see whole states of the primary,
//!   never half a transaction. When the primary is unreachable it reads object storage
//!   directly; when the chain breaks, the primary's file was replaced (an upload: its
//!   *epoch* changed), or the frames it needs are gone, it starts again from storage.
//! - Reads (and Turso Sync pulls, `crate::sync::pull`) are served from the copy; writes, interactive streams, WebSockets and every
//!   other route go to the primary (`forward`). After a forwarded request the replica
//!   waits (bounded) until it has applied the frame the primary reported, so a client
//!   reads its own writes through the replica.
//!
//! This module owns the follower (the replicas a node holds, bootstrapping and applying
//! the primary's frames) and the frames' wire format; the frame endpoint is in
//! [`super::frames`], the routing of a replica's requests in [`super::routing`].

use crate::database::{Database, PAGE_SIZE};
use crate::error::DataError;
use crate::forward::Forwarder;
use crate::node::Node;
use atoll_storage::restore::{self, Target};
use atoll_storage::segment::{frame_checksum, Frame};
use atoll_types::node::{DatabaseConfig, ReplicaSpec, ReplicaStatus};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

/// The primary's last committed frame when it answered.
pub const HEAD_HEADER: &str = "x-atoll-head";
/// The primary file's epoch (`LogState::file_epoch`).
pub const EPOCH_HEADER: &str = "x-atoll-epoch";
/// Set by a primary on an answer to a request a replica forwarded: the last frame
/// committed when it answered, which the replica applies before answering its client.
pub const FRAME_NO_HEADER: &str = "x-atoll-frame-no";

/// The longest a frames request waits for a commit.
pub(super) const LONGEST_POLL: Duration = Duration::from_secs(10);
/// Page bytes per batch.
pub(super) const BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Frames per batch read from the stored log.
const BATCH_FRAMES: u64 = (BATCH_BYTES / PAGE_SIZE as usize) as u64;
/// The longest a replica holds its client's answer waiting to apply a forwarded write.
const READ_YOUR_WRITES_WAIT: Duration = Duration::from_secs(2);
/// Frames in a replica's own WAL past which it checkpoints.
const CHECKPOINT_FRAMES: u32 = 1000;

/// The replicas a node holds.
#[derive(Default)]
pub struct Replicas {
    by_id: RwLock<HashMap<String, Arc<Replica>>>,
    /// The same replicas by hostname label (every request not for a primary of the node
    /// looks here), rebuilt with each list.
    by_label: RwLock<HashMap<String, Arc<Replica>>>,
    /// The node's client and secret for asking primaries (set with forwarding).
    link: OnceLock<Arc<Forwarder>>,
}

impl Replicas {
    pub fn set_link(&self, forwarder: Arc<Forwarder>) {
        let _ = self.link.set(forwarder);
    }

    /// The replica serving `label`, once it has its first state.
    pub fn serving(&self, label: &str) -> Option<Arc<Replica>> {
        self.by_label
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(label)
            .filter(|r| r.ready.load(Ordering::Acquire))
            .cloned()
    }

    /// The replica of database `id`, if the node holds one.
    pub fn get(&self, id: &str) -> Option<Arc<Replica>> {
        self.read().get(id).cloned()
    }

    pub fn statuses(&self) -> Vec<ReplicaStatus> {
        let mut out: Vec<ReplicaStatus> = self.read().values().map(|r| r.status()).collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    pub fn status(&self, id: &str) -> Option<ReplicaStatus> {
        self.read().get(id).map(|r| r.status())
    }

    /// Makes the node hold exactly `wanted` (the control plane's whole list for it):
    /// new ones start, changed ones take their new configuration and primary, the rest
    /// stop and their files go.
    pub fn converge(node: &Arc<Node>, wanted: Vec<ReplicaSpec>) -> Result<(), DataError> {
        let replicas = &node.replicas;
        let link = replicas.link.get().cloned().ok_or_else(|| {
            DataError::BadRequest(
                "this node runs without a control plane to forward through: it holds no replicas"
                    .into(),
            )
        })?;
        if node.storage().is_none() {
            return Err(DataError::BadRequest(
                "replicas need object storage (--storage-url): this node has none".into(),
            ));
        }
        let wanted: BTreeMap<String, ReplicaSpec> = wanted
            .into_iter()
            .map(|spec| (spec.config.id.clone(), spec))
            .collect();
        let mut current = replicas.write();
        for (id, replica) in current.iter() {
            if !wanted.contains_key(id) {
                replica.stop.store(true, Ordering::Release);
                replica.wake.notify_one();
            }
        }
        current.retain(|id, _| wanted.contains_key(id));
        for (id, spec) in wanted {
            if node.by_id(&id).is_some() {
                // The primary (or a copy a move left here) is on this node: a replica of
                // itself would be nonsense. The reconciler never asks for it.
                continue;
            }
            match current.get(&id) {
                Some(replica) => replica.update(spec),
                None => {
                    let replica = Replica::new(node, spec)?;
                    spawn_follower(Arc::clone(node), Arc::clone(&replica), Arc::clone(&link));
                    current.insert(id, replica);
                }
            }
        }
        // What the control plane sends is its state of this moment: confirmed
        // (`crate::convergence`).
        let epoch = node.convergence().epoch();
        for replica in current.values() {
            replica.db.attach_convergence(node.convergence());
            replica.db.confirm(epoch);
        }
        let labels = current
            .values()
            .map(|r| (r.db.config().label.clone(), Arc::clone(r)))
            .collect();
        drop(current);
        *replicas.by_label.write().unwrap_or_else(|p| p.into_inner()) = labels;
        remove_unwanted_dirs(node);
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Replica>>> {
        self.by_id.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Replica>>> {
        self.by_id.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// Replica directories no replica of the node owns (removed, or left by a crash).
fn remove_unwanted_dirs(node: &Node) {
    let root = node.data_dir().join("replicas");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    let held = node.replicas.read();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !held.contains_key(&name) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// What a replica remembers across restarts, beside its file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Applied {
    frame_no: u64,
    checksum: u64,
    epoch: u64,
}

pub struct Replica {
    pub db: Arc<Database>,
    dir: PathBuf,
    primary_url: RwLock<String>,
    applied: tokio::sync::watch::Sender<u64>,
    checksum: AtomicU64,
    epoch: AtomicU64,
    /// The primary's head as last reported, and when (ms).
    primary_head: AtomicU64,
    contact_ms: AtomicI64,
    /// Since when (ms) it is behind the primary's head; 0: caught up.
    behind_since_ms: AtomicI64,
    /// Held (written) while the copy changes and `applied` is moved to match it, so that a
    /// reader holding it sees a copy exactly at `applied` (a Turso Sync bootstrap).
    applying: tokio::sync::RwLock<()>,
    /// It has a state to serve.
    ready: AtomicBool,
    stop: AtomicBool,
    wake: tokio::sync::Notify,
    state: Mutex<String>,
}

impl Replica {
    fn new(node: &Node, spec: ReplicaSpec) -> Result<Arc<Replica>, DataError> {
        let dir = node.data_dir().join("replicas").join(&spec.config.id);
        std::fs::create_dir_all(&dir)?;
        let applied: Option<Applied> = std::fs::read(dir.join("replica.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let ready = applied.is_some() && dir.join("data").exists();
        let applied = if ready {
            applied.unwrap_or_default()
        } else {
            Applied::default()
        };
        let mut config = spec.config;
        // A replica never takes a write itself; its configuration is the primary's.
        config.durability = None;
        let db = Arc::new(Database::new_replica(dir.clone(), config));
        Ok(Arc::new(Replica {
            db,
            dir,
            primary_url: RwLock::new(spec.primary_url),
            applied: tokio::sync::watch::Sender::new(applied.frame_no),
            checksum: AtomicU64::new(applied.checksum),
            epoch: AtomicU64::new(applied.epoch),
            primary_head: AtomicU64::new(0),
            contact_ms: AtomicI64::new(0),
            behind_since_ms: AtomicI64::new(0),
            applying: tokio::sync::RwLock::new(()),
            ready: AtomicBool::new(ready),
            stop: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            state: Mutex::new(if ready { "following" } else { "starting" }.into()),
        }))
    }

    fn update(&self, spec: ReplicaSpec) {
        let mut config: DatabaseConfig = spec.config;
        config.durability = None;
        if config.config_version == 0 || config.config_version >= self.db.config().config_version {
            self.db.set_config(config);
        }
        *self.primary_url.write().unwrap_or_else(|p| p.into_inner()) = spec.primary_url;
    }

    pub fn primary_url(&self) -> String {
        self.primary_url
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Follows the frame applied.
    pub fn watch_applied(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// Keeps the copy at [`Replica::applied`] while the guard is held: no batch is applied
    /// and no new state replaces it meanwhile. On a blocking thread.
    pub fn hold_applied(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.applying.blocking_read()
    }

    /// Waits, at most [`READ_YOUR_WRITES_WAIT`], until frame `frame_no` is applied.
    pub async fn wait_applied(&self, frame_no: u64) -> bool {
        let mut watch = self.applied.subscribe();
        self.wake.notify_one();
        tokio::time::timeout(READ_YOUR_WRITES_WAIT, watch.wait_for(|&a| a >= frame_no))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    fn set_state(&self, state: impl Into<String>) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state.into();
    }

    fn status(&self) -> ReplicaStatus {
        let behind_since = self.behind_since_ms.load(Ordering::Acquire);
        ReplicaStatus {
            id: self.db.id().to_string(),
            primary_url: self.primary_url(),
            frame_no: self.applied(),
            primary_frame_no: self.primary_head.load(Ordering::Acquire),
            lag_ms: if behind_since == 0 {
                0
            } else {
                (atoll_storage::now_ms_public() - behind_since).max(0) as u64
            },
            last_contact_ms: self.contact_ms.load(Ordering::Acquire),
            ready: self.ready.load(Ordering::Acquire),
            state: self.state.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    fn file(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn persist(&self) -> Result<(), DataError> {
        let applied = Applied {
            frame_no: self.applied(),
            checksum: self.checksum.load(Ordering::Acquire),
            epoch: self.epoch.load(Ordering::Acquire),
        };
        let tmp = self.dir.join("replica.json.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec(&applied).map_err(|e| DataError::Internal(e.to_string()))?,
        )?;
        std::fs::rename(&tmp, self.dir.join("replica.json"))?;
        Ok(())
    }

    fn note_head(&self, head: u64) {
        self.primary_head.store(head, Ordering::Release);
        self.contact_ms
            .store(atoll_storage::now_ms_public(), Ordering::Release);
        self.note_progress();
    }

    fn note_progress(&self) {
        let head = self.primary_head.load(Ordering::Acquire);
        if self.applied() >= head {
            self.behind_since_ms.store(0, Ordering::Release);
        } else if self.behind_since_ms.load(Ordering::Acquire) == 0 {
            self.behind_since_ms
                .store(atoll_storage::now_ms_public(), Ordering::Release);
        }
    }
}

/// What one request to the primary brought.
enum Pulled {
    Frames(Vec<Frame>),
    /// The primary's file was replaced since this replica's state: start again.
    NewEpoch,
    /// Retry shortly (the primary is taking a snapshot).
    Later,
    /// The frames are no longer anywhere: start again.
    Gone,
}

fn spawn_follower(node: Arc<Node>, replica: Arc<Replica>, link: Arc<Forwarder>) {
    tokio::spawn(async move {
        let mut failures = 0u32;
        while !replica.stop.load(Ordering::Acquire) {
            let step = follow_once(&node, &replica, &link).await;
            match step {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    replica.set_state(format!("retrying: {e}"));
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(database_id = %replica.db.id(), error = %e, "replica cannot follow its primary");
                    }
                    let pause = Duration::from_millis(200 * u64::from(failures.min(10)));
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = replica.wake.notified() => {}
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&replica.dir);
        node.pool.forget(replica.db.id());
        tracing::info!(database_id = %replica.db.id(), "replica removed");
    });
}

/// One step: a first state if there is none, else one batch from the primary (or from
/// object storage when the primary does not answer).
async fn follow_once(
    node: &Arc<Node>,
    replica: &Arc<Replica>,
    link: &Forwarder,
) -> Result<(), DataError> {
    if !replica.ready.load(Ordering::Acquire) {
        return bootstrap(node, replica, link).await;
    }
    let after = replica.applied();
    let pulled = match pull_from_primary(replica, link, after, LONGEST_POLL).await {
        Ok(pulled) => pulled,
        Err(e) => {
            tracing::debug!(database_id = %replica.db.id(), error = %e, "primary unreachable: following object storage");
            pull_from_storage(node, replica, after).await?
        }
    };
    match pulled {
        Pulled::Frames(frames) if frames.is_empty() => {
            replica.set_state("following");
            Ok(())
        }
        Pulled::Frames(frames) => {
            apply_batch(replica, frames).await?;
            replica.set_state("following");
            Ok(())
        }
        Pulled::Later => {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(())
        }
        Pulled::NewEpoch | Pulled::Gone => {
            tracing::info!(database_id = %replica.db.id(), "replica starts again from object storage (the primary's file was replaced or its log moved on)");
            replica.ready.store(false, Ordering::Release);
            Ok(())
        }
    }
}

/// The replica's first state: the stored head of the log, as of the primary's current
/// epoch (asked first, so an upload after it is noticed).
async fn bootstrap(
    node: &Arc<Node>,
    replica: &Arc<Replica>,
    link: &Forwarder,
) -> Result<(), DataError> {
    replica.set_state("restoring from object storage");
    let epoch = match head_of_primary(replica, link).await {
        Ok(Some((head, epoch))) => {
            replica.note_head(head);
            Some(epoch)
        }
        // The primary is taking its snapshot: ask again.
        Ok(None) => {
            return Err(DataError::Unavailable(
                "the primary is taking a snapshot".into(),
            ))
        }
        Err(_) => None,
    };
    let storage = node
        .storage()
        .ok_or_else(|| DataError::Internal("no object storage".into()))?;
    let staging = replica.dir.join("staging");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)?;
    let restored = restore::restore_to_file(
        &storage.storage,
        replica.db.id(),
        Target::Latest,
        None,
        &staging.join("data"),
    )
    .await?;
    let applying = replica.applying.write().await;
    // Readers of an earlier state finish on the files they opened; new ones open this.
    node.pool.forget(replica.db.id());
    for suffix in ["data-wal", "data-shm"] {
        let _ = std::fs::remove_file(replica.dir.join(suffix));
    }
    std::fs::rename(staging.join("data"), replica.file())?;
    let _ = std::fs::remove_dir_all(&staging);
    replica.checksum.store(restored.checksum, Ordering::Release);
    replica.epoch.store(
        epoch.unwrap_or_else(|| replica.epoch.load(Ordering::Acquire)),
        Ordering::Release,
    );
    replica.applied.send_replace(restored.frame_no);
    drop(applying);
    replica.persist()?;
    replica.ready.store(true, Ordering::Release);
    replica.note_progress();
    replica.set_state("following");
    tracing::info!(database_id = %replica.db.id(), frame_no = restored.frame_no, "replica restored from object storage");
    Ok(())
}

async fn head_of_primary(
    replica: &Replica,
    link: &Forwarder,
) -> Result<Option<(u64, u64)>, DataError> {
    let response = frames_request(replica, link, u64::MAX, Duration::ZERO).await?;
    if response.status() == StatusCode::CONFLICT {
        return Ok(None);
    }
    let (head, epoch) = head_and_epoch(response.headers())?;
    Ok(Some((head, epoch)))
}

async fn frames_request(
    replica: &Replica,
    link: &Forwarder,
    after: u64,
    wait: Duration,
) -> Result<reqwest::Response, DataError> {
    let url = format!(
        "{}/v1/internal/frames/{}?after={after}&wait_ms={}",
        replica.primary_url().trim_end_matches('/'),
        replica.db.id(),
        wait.as_millis()
    );
    let response = link
        .internal_get(&url, wait + Duration::from_secs(10))
        .await
        .map_err(|e| DataError::Unavailable(format!("the primary did not answer: {e}")))?;
    match response.status() {
        StatusCode::OK | StatusCode::NO_CONTENT | StatusCode::CONFLICT | StatusCode::GONE => {
            Ok(response)
        }
        status => Err(DataError::Unavailable(format!(
            "the primary answered {status} for frames"
        ))),
    }
}

fn head_and_epoch(headers: &reqwest::header::HeaderMap) -> Result<(u64, u64), DataError> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| DataError::Internal(format!("the primary's answer lacks {name}")))
    };
    Ok((number(HEAD_HEADER)?, number(EPOCH_HEADER)?))
}

async fn pull_from_primary(
    replica: &Replica,
    link: &Forwarder,
    after: u64,
    wait: Duration,
) -> Result<Pulled, DataError> {
    let response = frames_request(replica, link, after, wait).await?;
    match response.status() {
        StatusCode::CONFLICT => return Ok(Pulled::Later),
        StatusCode::GONE => return Ok(Pulled::Gone),
        _ => {}
    }
    let (head, epoch) = head_and_epoch(response.headers())?;
    replica.note_head(head);
    if epoch != replica.epoch.load(Ordering::Acquire) {
        return Ok(Pulled::NewEpoch);
    }
    if head < after {
        // The primary is behind this replica: its history was replaced (restored from
        // object storage after losing unstored frames). Start again from what it has.
        return Ok(Pulled::Gone);
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| DataError::Unavailable(format!("the primary's frames did not arrive: {e}")))?;
    Ok(Pulled::Frames(decode_frames(&body)?))
}

/// Frames from object storage, when the primary does not answer.
async fn pull_from_storage(
    node: &Node,
    replica: &Replica,
    after: u64,
) -> Result<Pulled, DataError> {
    let storage = node
        .storage()
        .ok_or_else(|| DataError::Internal("no object storage".into()))?;
    match stored_transactions(&storage.storage, replica.db.id(), after, u64::MAX).await {
        Ok(super::log::Frames::Found(frames)) => {
            if frames.is_empty() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok(Pulled::Frames(frames))
        }
        // Not stored yet (the primary died before shipping them) looks the same as
        // removed by retention here: wait for the primary rather than start again from
        // an older state than the one already served.
        Ok(super::log::Frames::Gone) => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(Pulled::Frames(Vec::new()))
        }
        Err(e) => Err(e),
    }
}

/// Checks the batch continues what was applied, then applies it as one transaction.
async fn apply_batch(replica: &Arc<Replica>, frames: Vec<Frame>) -> Result<(), DataError> {
    let mut checksum = replica.checksum.load(Ordering::Acquire);
    for (expected, frame) in (replica.applied() + 1..).zip(frames.iter()) {
        if frame.frame_no != expected {
            replica.ready.store(false, Ordering::Release);
            return Err(DataError::Internal(format!(
                "frame {} arrived where {expected} was expected",
                frame.frame_no
            )));
        }
        checksum = frame_checksum(checksum, frame.page_no, frame.size_after, &frame.page);
        if checksum != frame.checksum {
            replica.ready.store(false, Ordering::Release);
            return Err(DataError::Internal(format!(
                "frame {} does not continue the log this replica holds (checksum mismatch): starting again from object storage",
                frame.frame_no
            )));
        }
    }
    let last = frames.last().map_or(0, |f| f.frame_no);
    let file = replica.file();
    let applying = replica.applying.write().await;
    tokio::task::spawn_blocking(move || inject::inject(&file, &frames))
        .await
        .map_err(|e| DataError::Internal(e.to_string()))??;
    replica.checksum.store(checksum, Ordering::Release);
    replica.applied.send_replace(last);
    drop(applying);
    replica.persist()?;
    replica.note_progress();
    Ok(())
}

mod inject {
    use super::{BTreeMap, DataError, Duration, Frame, CHECKPOINT_FRAMES};
    use atoll_storage::wal_insert::{self, WalInsert, WalInsertError};

    /// Writes whole transactions into the replica's WAL as one transaction of its own: the
    /// last image of each page, then the commit frame with the final size.
    /// Whether the SQLite header of `file` says WAL (its read and write versions, bytes 18
    /// and 19, are 2); a file too short for a header does not.
    fn header_says_wal(file: &std::path::Path) -> Result<bool, DataError> {
        use std::io::Read;
        let mut header = [0u8; 20];
        match std::fs::File::open(file)?.read_exact(&mut header) {
            Ok(()) => Ok(header[18] == 2 && header[19] == 2),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn inject(file: &std::path::Path, frames: &[Frame]) -> Result<(), DataError> {
        let Some(size_after) = frames
            .iter()
            .rev()
            .find(|f| f.size_after != 0)
            .map(|f| f.size_after)
        else {
            return Ok(());
        };
        let mut pages: BTreeMap<u32, &[u8]> = BTreeMap::new();
        for frame in frames {
            pages.insert(frame.page_no, &frame.page);
        }
        pages.retain(|&page_no, _| page_no <= size_after);
        let conn = rusqlite::Connection::open(file)?;
        // FULL: an injected transaction survives a power loss. `PRAGMA synchronous` loads
        // the schema, which an encrypted database's keyless connection cannot: there FULL
        // is the engine's compiled default (SQLITE_DEFAULT_WAL_SYNCHRONOUS, not overridden
        // by the build), which the test of encrypted replicas checks.
        if !atoll_storage::encryption::is_encrypted_file(file)? {
            conn.execute_batch("PRAGMA synchronous = FULL;")?;
        }
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")?;
        conn.busy_timeout(Duration::from_secs(10))?;
        // A first read puts the pager in WAL mode (the file's header says so): injection
        // needs the WAL open, and a fresh connection opens it only on its first read. The
        // header is read from the file and the read does not load the schema: an encrypted
        // database's schema is ciphertext to this connection, which has no key and needs
        // none (frames go in as bytes). `PRAGMA journal_mode` would load it.
        if !header_says_wal(file)? {
            conn.query_row("PRAGMA journal_mode = WAL", [], |row| {
                row.get::<_, String>(0)
            })?;
        }
        conn.query_row("PRAGMA schema_version", [], |_| Ok(()))?;
        // Nothing else writes a replica: the WAL's length stays the same until the
        // insertion begins.
        let count = wal_insert::frame_count(&conn).map_err(failed)?;
        let mut insert = WalInsert::begin(&conn).map_err(failed)?;
        let total = pages.len();
        for (i, (&page_no, page)) in pages.iter().enumerate() {
            let commit = if i + 1 == total { size_after } else { 0 };
            insert.append(page_no, commit, page).map_err(failed)?;
        }
        insert.end().map_err(failed)?;
        if count as usize + total > CHECKPOINT_FRAMES as usize {
            // Readers may hold older frames: copy what they allow, restart when all.
            let _ = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);");
        }
        Ok(())
    }

    fn failed(e: WalInsertError) -> DataError {
        DataError::Internal(format!("applying frames to the replica failed: {e}"))
    }
}

/// A batch on the wire: for each frame, frame number, rolling checksum (u64), page
/// number, size after (u32), all big-endian, then the page.
pub(super) fn encode_frames(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frames.len() * (24 + PAGE_SIZE as usize));
    for frame in frames {
        out.extend_from_slice(&frame.frame_no.to_be_bytes());
        out.extend_from_slice(&frame.checksum.to_be_bytes());
        out.extend_from_slice(&frame.page_no.to_be_bytes());
        out.extend_from_slice(&frame.size_after.to_be_bytes());
        out.extend_from_slice(&frame.page);
    }
    out
}

fn decode_frames(bytes: &[u8]) -> Result<Vec<Frame>, DataError> {
    let record = 24 + PAGE_SIZE as usize;
    if !bytes.len().is_multiple_of(record) {
        return Err(DataError::Internal(format!(
            "a batch of frames of {} bytes is not whole frames",
            bytes.len()
        )));
    }
    let mut frames = Vec::with_capacity(bytes.len() / record);
    for chunk in bytes.chunks_exact(record) {
        let u64_at = |at: usize| u64::from_be_bytes(chunk[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_be_bytes(chunk[at..at + 4].try_into().expect("4 bytes"));
        frames.push(Frame {
            frame_no: u64_at(0),
            checksum: u64_at(8),
            page_no: u32_at(16),
            size_after: u32_at(20),
            page: chunk[24..].to_vec(),
        });
    }
    Ok(frames)
}

/// Whole transactions after frame `after` from the stored log, up to `last_stored`: about
/// a batch, and always a whole transaction when one is stored, however large.
pub(super) async fn stored_transactions(
    storage: &atoll_storage::Storage,
    id: &str,
    after: u64,
    last_stored: u64,
) -> Result<super::log::Frames, DataError> {
    let mut span = BATCH_FRAMES;
    loop {
        let last = last_stored.min(after.saturating_add(span));
        if last <= after {
            return Ok(super::log::Frames::Found(Vec::new()));
        }
        match super::log::read_frames(storage, id, after + 1, last).await? {
            super::log::Frames::Found(mut frames) => {
                let log_ends = last == last_stored || (frames.len() as u64) < last - after;
                while frames.last().is_some_and(|f| f.size_after == 0) {
                    frames.pop();
                }
                if !frames.is_empty() || log_ends {
                    return Ok(super::log::Frames::Found(frames));
                }
                // One transaction longer than the span: read further.
                span = span.saturating_mul(2);
            }
            gone => return Ok(gone),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_the_wire() {
        let frames = vec![
            Frame {
                frame_no: 7,
                checksum: 42,
                page_no: 3,
                size_after: 0,
                page: vec![1; PAGE_SIZE as usize],
            },
            Frame {
                frame_no: 8,
                checksum: 43,
                page_no: 1,
                size_after: 9,
                page: vec![2; PAGE_SIZE as usize],
            },
        ];
        assert_eq!(decode_frames(&encode_frames(&frames)).unwrap(), frames);
        assert!(decode_frames(&[0; 10]).is_err());
    }

    /// The committed transactions in `primary`'s WAL, as a replica receives them.
    fn committed_frames(primary: &std::path::Path) -> Vec<Frame> {
        let read = atoll_storage::wal::read_committed(
            &atoll_storage::shipper::wal_path(primary),
            None,
            PAGE_SIZE as usize,
            usize::MAX,
        )
        .unwrap();
        read.frames
            .into_iter()
            .enumerate()
            .map(|(i, f)| Frame {
                frame_no: i as u64 + 1,
                checksum: 0,
                page_no: f.page_no,
                size_after: f.size_after,
                page: f.page,
            })
            .collect()
    }

    /// Whole transactions of one file, injected into another copy, give its state.
    #[test]
    fn injected_frames_give_the_primary_s_state() {
        let dir = std::env::temp_dir().join(format!("atoll-inject-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (primary, replica) = (dir.join("primary"), dir.join("replica"));
        let conn = rusqlite::Connection::open(&primary).unwrap();
        conn.execute_batch("PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE t (x); PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
        std::fs::copy(&primary, &replica).unwrap();
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0; INSERT INTO t VALUES (1), (2);")
            .unwrap();
        let frames = committed_frames(&primary);
        assert!(!frames.is_empty());
        // A reader of the replica is open meanwhile, as the pool's are.
        let reader = rusqlite::Connection::open(&replica).unwrap();
        let before: i64 = reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(before, 0);
        inject::inject(&replica, &frames).unwrap();
        let after: i64 = reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(after, 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A replica of a database encrypted with its customer's key takes its primary's frames
    /// without the key (they are ciphertext, inserted as bytes), and a reader with the key
    /// sees the primary's state.
    #[test]
    fn an_encrypted_replica_takes_frames_without_the_key() {
        use atoll_storage::encryption::{self, Cipher, EncryptionKey};
        let dir = std::env::temp_dir().join(format!("atoll-inject-enc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (primary, replica) = (dir.join("primary"), dir.join("replica"));
        let key = EncryptionKey::from_base64(
            Cipher::Aes256Gcm,
            "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=",
        )
        .unwrap();
        let conn = encryption::create(&primary, &key).unwrap();
        conn.execute_batch("CREATE TABLE t (x);").unwrap();
        encryption::engine::checkpoint(&conn, rusqlite::ffi::SQLITE_CHECKPOINT_TRUNCATE).unwrap();
        std::fs::copy(&primary, &replica).unwrap();
        conn.execute_batch(
            "PRAGMA wal_autocheckpoint = 0; INSERT INTO t VALUES ('secret one'), ('secret two');",
        )
        .unwrap();
        let frames = committed_frames(&primary);
        assert!(!frames.is_empty());
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let reader = encryption::open(&replica, flags, &key).unwrap();
        let count = |conn: &rusqlite::Connection| -> i64 {
            conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(count(&reader), 0);
        // What a keyless connection runs at: the compiled default, FULL (2).
        let keyless = rusqlite::Connection::open(dir.join("plain")).unwrap();
        let synchronous: i64 = keyless
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(synchronous, 2);
        inject::inject(&replica, &frames).unwrap();
        assert_eq!(count(&reader), 2);
        let wal = std::fs::read(atoll_storage::shipper::wal_path(&replica)).unwrap();
        assert!(
            !wal.windows(6).any(|w| w == b"secret"),
            "the replica's WAL holds ciphertext"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
