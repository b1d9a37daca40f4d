//! A node's side of its durable log: [`NodeStorage`] (the object storage a node ships its
//! databases' logs to) and what needs the node and its databases: the shipper loop that
//! runs every database's rounds, the node's index of its databases in the store, rebuilding
//! databases whose files are missing or damaged, adoptions, point-in-time seeds and
//! restores in place, and running retention. Named for the type it serves the node with
//! (it was `storage::service`); the log itself, which knows no `Database` or `Node`, is the
//! `atoll-storage` crate.

use crate::database::Database;
use crate::error::DataError;
use crate::node::Node;
use atoll_storage::backlog::Backlog;
use atoll_storage::restore::{self, Catalog, Target};
use atoll_storage::retention::collect_garbage;
use atoll_storage::shipper::{self, internal_connection, DatabaseLog, ShipContext};
use atoll_storage::{keys, now_ms, Storage, StorageError, StorageSettings};
use atoll_types::node::{
    Backups, DatabaseConfig, DatabaseState, Durability, Generation, RestoreOutcome,
};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where a node keeps its databases' logs (`--storage-url`) and how.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    pub url: String,
    /// The node's name: its index of databases lives under `nodes/<name>/`.
    pub node_name: String,
    pub settings: StorageSettings,
}

pub struct NodeStorage {
    pub storage: Storage,
    pub settings: StorageSettings,
    pub node_name: String,
    /// The databases whose logs have work for the shipper loop, and its wake-up (a `sync`
    /// commit, a snapshot owed, an index entry to write).
    pub backlog: Arc<Backlog>,
    /// When the loop last looked at every database (retention, rebuilds: [`SWEEP_INTERVAL`]).
    last_sweep: Mutex<Option<Instant>>,
    runtime: OnceLock<tokio::runtime::Handle>,
    /// Databases whose entry in the node's index (their configuration) must be written.
    index_dirty: Mutex<HashSet<String>>,
    /// Databases deleted on this node whose index entries must go.
    index_removed: Mutex<HashSet<String>>,
    /// Rounds running now (a database is never in two at once).
    in_flight: Mutex<HashSet<String>>,
    /// Each database's retention: when it last ran and what it counted. One map for both:
    /// every database has an entry, and an entry costs its id again (~100 bytes per
    /// database saved over two maps, issue 31).
    retention: Mutex<HashMap<String, Retention>>,
    /// Rounds and retention passes running at once, node-wide (a node with many databases
    /// must not list them all in object storage at the same moment).
    concurrency: Arc<tokio::sync::Semaphore>,
    /// When each database's growing lag was last logged.
    lag_logged: Mutex<HashMap<String, Instant>>,
}

impl NodeStorage {
    /// Opens the node's object storage, written only under `lease` (failover).
    pub fn open(
        config: &StorageConfig,
        lease: Arc<atoll_storage::lease::Lease>,
    ) -> Result<NodeStorage, DataError> {
        Ok(NodeStorage {
            storage: Storage::open(&config.url)?.with_lease(lease),
            settings: config.settings.clone(),
            node_name: config.node_name.clone(),
            backlog: Arc::new(Backlog::new()),
            last_sweep: Mutex::new(None),
            runtime: OnceLock::new(),
            index_dirty: Mutex::default(),
            index_removed: Mutex::default(),
            in_flight: Mutex::default(),
            retention: Mutex::default(),
            concurrency: Arc::new(tokio::sync::Semaphore::new(16)),
            lag_logged: Mutex::default(),
        })
    }

    /// The runtime that reaches object storage from blocking threads.
    pub(crate) fn runtime(&self) -> Result<tokio::runtime::Handle, DataError> {
        if let Some(handle) = self.runtime.get() {
            return Ok(handle.clone());
        }
        tokio::runtime::Handle::try_current()
            .map_err(|_| DataError::Internal("object storage is used outside the runtime".into()))
    }

    pub(crate) fn context<'a>(&'a self, runtime: &'a tokio::runtime::Handle) -> ShipContext<'a> {
        ShipContext {
            storage: &self.storage,
            settings: &self.settings,
            runtime,
        }
    }

    pub(crate) fn new_log(&self, db_id: &str, file: &Path) -> Arc<DatabaseLog> {
        Arc::new(DatabaseLog::open(
            db_id,
            file,
            Arc::clone(&self.backlog),
            Arc::clone(self.storage.lease()),
        ))
    }

    /// The database's configuration changed (or it is new): its index entry is written
    /// by the next pass of the loop.
    pub(crate) fn config_changed(&self, id: &str) {
        lock(&self.index_dirty).insert(id.to_string());
        lock(&self.index_removed).remove(id);
        self.backlog.wake();
    }

    pub(crate) fn database_removed(&self, id: &str) {
        lock(&self.index_dirty).remove(id);
        lock(&self.index_removed).insert(id.to_string());
        self.backlog.wake();
    }

    /// The durability a database asks for, or the node's.
    pub fn durability(&self, config: &DatabaseConfig) -> Durability {
        config.durability.unwrap_or(match self.settings.durability {
            atoll_storage::DurabilityMode::Lag => Durability::Lag,
            atoll_storage::DurabilityMode::Sync => Durability::Sync,
        })
    }

    pub fn retention_days(&self, config: &DatabaseConfig) -> u32 {
        config
            .pitr_retention_days
            .unwrap_or(self.settings.default_retention_days)
    }
}

/// Starts the node's shipper loop. Returns at once; the loop ends when the node shuts down
/// (after a last round for every database with unshipped commits).
pub fn start(node: &Arc<Node>) {
    let Some(storage) = node.storage().cloned() else {
        return;
    };
    let _ = storage.runtime.set(tokio::runtime::Handle::current());
    let node = Arc::clone(node);
    tokio::spawn(async move {
        let tick = (storage.settings.durability_lag / 4)
            .clamp(Duration::from_millis(20), Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = storage.backlog.woken() => {}
            }
            if node.is_shutting_down() {
                break;
            }
            pass(&node, &storage).await;
        }
    });
}

/// Ships everything committed so far on every database (a node going away does this last).
pub async fn flush_all(node: &Arc<Node>) {
    let Some(storage) = node.storage().cloned() else {
        return;
    };
    let Ok(runtime) = storage.runtime() else {
        return;
    };
    let node = Arc::clone(node);
    let _ = tokio::task::spawn_blocking(move || {
        for db in node.databases() {
            if let Some(log) = db.log() {
                if log.due(Duration::ZERO) {
                    if let Err(e) = log.ship_round(&storage.context(&runtime)) {
                        tracing::warn!(database_id = %db.id(), error = %e, "last shipping round failed");
                    }
                }
            }
        }
    })
    .await;
}

/// How often the loop looks at every database, not only those whose logs have work: for
/// retention (due once per `gc_interval`) and databases whose files must be rebuilt.
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);

/// One pass of the shipper loop: the node's index, then a round for every database whose
/// log is due (and retention where it is due). Visits the databases the [`Backlog`] names,
/// and every database once per [`SWEEP_INTERVAL`]: the cost of a pass follows what is
/// written, not how many databases the node holds.
async fn pass(node: &Arc<Node>, storage: &Arc<NodeStorage>) {
    write_index(node, storage).await;
    let lag = storage.settings.durability_lag;
    let mut max_lag_ms = 0u64;
    let marked = storage.backlog.take();
    let sweep = {
        let mut last = lock(&storage.last_sweep);
        let due = last.is_none_or(|at| at.elapsed() >= SWEEP_INTERVAL);
        if due {
            *last = Some(Instant::now());
        }
        due
    };
    let visited: Vec<Arc<Database>> = if sweep {
        node.databases()
    } else {
        marked.iter().filter_map(|id| node.by_id(id)).collect()
    };
    for db in visited {
        if let Some(log) = db.log() {
            let status = log.status();
            max_lag_ms = max_lag_ms.max(status.lag_ms);
            // Logged when it grows past twice the bound (once a minute per database).
            if status.lag_ms > 2 * lag.as_millis() as u64 {
                let mut logged = lock(&storage.lag_logged);
                let due = logged
                    .get(db.id())
                    .is_none_or(|at| at.elapsed() >= Duration::from_secs(60));
                if due {
                    logged.insert(db.id().to_string(), Instant::now());
                    tracing::warn!(
                        database_id = %db.id(),
                        lag_ms = status.lag_ms,
                        pending_commits = status.pending_commits,
                        error = status.last_error.as_deref().unwrap_or(""),
                        "replication to object storage is behind"
                    );
                }
            }
        }
        if db.needs_rebuild() {
            spawn_rebuild(node, storage, &db);
            continue;
        }
        let Some(log) = db.log().cloned() else {
            continue;
        };
        let gc_due = sweep && retention_due(storage, db.id());
        if !log.due(lag) && !gc_due {
            // Not due yet: looked at again by the next pass.
            if log.has_work() {
                storage.backlog.mark(db.id());
            }
            continue;
        }
        if !lock(&storage.in_flight).insert(db.id().to_string()) {
            // In a round (or queued for one) now: the round marks it again when it ends
            // with work left, which covers any mark taken here. Marking it again here
            // instead made every tick walk every queued database (100,000 of them behind
            // the first retention pass after they were created).
            continue;
        }
        let storage = Arc::clone(storage);
        let db = Arc::clone(&db);
        tokio::spawn(async move {
            let _permit = Arc::clone(&storage.concurrency).acquire_owned().await;
            let id = db.id().to_string();
            if log.due(lag) {
                let runtime = tokio::runtime::Handle::current();
                let round_storage = Arc::clone(&storage);
                let round_log = Arc::clone(&log);
                let result = tokio::task::spawn_blocking(move || {
                    // `sync` commits that arrived during a round wait for the next one at
                    // once, not for the next tick (group commit: each round takes them all).
                    loop {
                        let result = round_log.ship_round(&round_storage.context(&runtime));
                        if result.is_err() || !round_log.sync_pending() {
                            return result;
                        }
                    }
                })
                .await;
                match result {
                    Ok(Ok(())) => metrics::counter!("atoll_storage_rounds_total").increment(1),
                    Ok(Err(StorageError::Unavailable(why))) => {
                        tracing::debug!(database_id = %id, %why, "round postponed")
                    }
                    Ok(Err(e)) => {
                        metrics::counter!("atoll_storage_round_failures_total").increment(1);
                        if !db.file_path().exists() && db.config().state == DatabaseState::Active {
                            db.mark_needs_rebuild();
                        }
                        tracing::warn!(database_id = %id, error = %e, "shipping failed; retrying")
                    }
                    Err(e) => {
                        tracing::error!(database_id = %id, error = %e, "shipping round panicked")
                    }
                }
            }
            if retention_due(&storage, &id) {
                lock(&storage.retention)
                    .entry(id.clone())
                    .or_default()
                    .ran_at = Some(Instant::now());
                let retention = storage.retention_days(&db.config());
                let counted_from = log.take_stored_since_count();
                match collect_garbage(&storage.storage, &id, retention).await {
                    Ok(bytes) => {
                        lock(&storage.retention)
                            .entry(id.clone())
                            .or_default()
                            .stored_bytes = bytes;
                    }
                    Err(e) => {
                        // Not counted: keep what was stored in the running figure.
                        lock(&storage.retention)
                            .entry(id.clone())
                            .or_default()
                            .stored_bytes += counted_from;
                        tracing::warn!(database_id = %id, error = %e, "retention failed")
                    }
                }
            }
            lock(&storage.in_flight).remove(&id);
            // Commits that arrived during the round, or a round that failed: the next
            // pass looks again.
            if log.has_work() {
                storage.backlog.mark(&id);
            }
        });
    }
    metrics::gauge!("atoll_storage_lag_seconds").set(max_lag_ms as f64 / 1000.0);
}

/// What object storage must hold of a new database before the node serves it: when it has
/// a file, its first generation (restorable from its first instant; an upload's first
/// generation is stored when the upload lands), then its entry in the node's index (a node
/// that loses its disk right after the create still knows it). In that order: a node that
/// starts again rebuilds every database of its index, so an entry must never name a
/// database without a complete generation (a create killed between the two left one that
/// could not be rebuilt, nor removed). Through `runtime` (the storage's:
/// [`NodeStorage::runtime`]), on a blocking thread.
pub(crate) fn store_new_database(
    storage: &NodeStorage,
    runtime: &tokio::runtime::Handle,
    config: &DatabaseConfig,
    file: Option<&Path>,
) -> Result<(), DataError> {
    let mut stored = 0;
    if let Some(file) = file {
        shipper::first_generation(&storage.context(runtime), &config.id, file)?;
        stored = std::fs::metadata(file).map_or(0, |m| m.len());
    }
    let entry = serde_json::to_vec(config).map_err(|e| DataError::Internal(e.to_string()))?;
    runtime.block_on(storage.storage.put(
        &keys::node_database(&storage.node_name, &config.id),
        Bytes::from(entry),
    ))?;
    // What it takes in object storage is known from here on (its snapshot, then what its
    // log counts as it ships), and nothing of it can fall out of its window for a while:
    // its first retention pass waits a whole interval, instead of every new database's
    // running at once (90,000 of them queued after a mass creation, issue 31).
    lock(&storage.retention).insert(
        config.id.clone(),
        Retention {
            ran_at: Some(Instant::now()),
            stored_bytes: stored,
        },
    );
    Ok(())
}

/// Writes the node's index entries that changed: each database's configuration under
/// `nodes/<node>/databases/`, so a node whose disk is lost knows what it held.
async fn write_index(node: &Arc<Node>, storage: &Arc<NodeStorage>) {
    let dirty: Vec<String> = lock(&storage.index_dirty).drain().collect();
    for id in dirty {
        let Some(db) = node.by_id(&id) else {
            continue;
        };
        let config = serde_json::to_vec(&*db.config()).unwrap_or_default();
        let key = keys::node_database(&storage.node_name, &id);
        if let Err(e) = storage.storage.put(&key, Bytes::from(config)).await {
            tracing::warn!(database_id = %id, error = %e, "cannot write the node's index; retrying");
            lock(&storage.index_dirty).insert(id);
        }
    }
    let removed: Vec<String> = lock(&storage.index_removed).drain().collect();
    for id in removed {
        let key = keys::node_database(&storage.node_name, &id);
        if let Err(e) = storage.storage.delete(&key).await {
            tracing::warn!(database_id = %id, error = %e, "cannot update the node's index; retrying");
            lock(&storage.index_removed).insert(id);
        }
    }
}

/// How long a node starting waits for object storage to list its index before it serves
/// what its disk holds without it.
const INDEX_WAIT_AT_START: Duration = Duration::from_secs(10);

/// Rebuilds, at node start, every database of the node's index whose files are missing,
/// and every local database whose file is missing or damaged. Each is served again as
/// soon as it is rebuilt; until then it answers 503 with `Retry-After`.
///
/// Object storage that does not answer (down, unreachable, refusing) does not keep the
/// node from starting: it serves the databases its disk holds, says so in its log, and
/// reads its index in the background until storage answers (databases missing from its
/// disk come back then). Writes that wait for object storage (`sync` durability) are
/// refused meanwhile with `DURABILITY_UNAVAILABLE`; others are shipped once it answers.
pub async fn recover(node: &Arc<Node>) -> Result<usize, DataError> {
    let Some(storage) = node.storage().cloned() else {
        return Ok(0);
    };
    let _ = storage.runtime.set(tokio::runtime::Handle::current());
    let unreachable =
        match tokio::time::timeout(INDEX_WAIT_AT_START, recover_index(node, &storage)).await {
            Ok(Ok(count)) => return Ok(count + recover_local(node, &storage)),
            Ok(Err(DataError::Storage(why))) => why,
            Ok(Err(e)) => return Err(e),
            Err(_) => format!("no answer within {} s", INDEX_WAIT_AT_START.as_secs()),
        };
    tracing::error!(
        storage = %storage.storage.url(),
        error = %unreachable,
        "object storage is unreachable: this node serves what its disk holds (writes in sync durability are refused until storage answers, others are shipped then); databases missing from its disk come back once it answers"
    );
    spawn_index_retry(node, &storage);
    Ok(recover_local(node, &storage))
}

/// Reads the node's index again every few seconds until object storage answers, and
/// installs what is missing from the disk (`recover`).
fn spawn_index_retry(node: &Arc<Node>, storage: &Arc<NodeStorage>) {
    let (node, storage) = (Arc::clone(node), Arc::clone(storage));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if node.is_shutting_down() {
                return;
            }
            match recover_index(&node, &storage).await {
                Ok(count) => {
                    tracing::info!(
                        rebuilding = count,
                        "object storage answers again: the node's index is read"
                    );
                    return;
                }
                Err(DataError::Storage(why)) => {
                    tracing::debug!(error = %why, "object storage is still unreachable")
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot install the databases of the node's index");
                    return;
                }
            }
        }
    });
}

/// Installs the databases of the node's index that its disk does not hold (rebuilt in the
/// background). Answers how many.
async fn recover_index(node: &Arc<Node>, storage: &Arc<NodeStorage>) -> Result<usize, DataError> {
    let listed = storage
        .storage
        .list(&keys::node_databases(&storage.node_name))
        .await?;
    let mut count = 0;
    for object in listed {
        let Some(bytes) = storage.storage.get(&object.key).await? else {
            continue;
        };
        let config: DatabaseConfig = match serde_json::from_slice(&bytes) {
            Ok(config) => config,
            Err(e) => {
                tracing::warn!(key = %object.key, error = %e, "unreadable index entry");
                continue;
            }
        };
        // Held, or removed from this node since it started (its entry not deleted yet:
        // storage was down).
        if node.by_id(&config.id).is_some() || lock(&storage.index_removed).contains(&config.id) {
            continue;
        }
        if config.state == DatabaseState::AwaitingUpload {
            // Nothing was stored yet: it comes back awaiting its upload.
            node.install_recovered(config, None)?;
            count += 1;
            continue;
        }
        tracing::warn!(database_id = %config.id, "database missing from this node's disk: rebuilding it from object storage");
        let db = node.install_recovering(config)?;
        spawn_rebuild(node, storage, &db);
        count += 1;
    }
    Ok(count)
}

/// Marks every local database whose file is missing or damaged for a rebuild. Answers how
/// many.
fn recover_local(node: &Arc<Node>, storage: &Arc<NodeStorage>) -> usize {
    let mut count = 0;
    for db in node.databases() {
        let state = db.config().state;
        if state == DatabaseState::AwaitingUpload || db.needs_rebuild() {
            continue;
        }
        if !file_is_sound(&db.file_path()) {
            tracing::warn!(database_id = %db.id(), "database file missing or damaged: rebuilding it from object storage");
            db.mark_needs_rebuild();
            spawn_rebuild(node, storage, &db);
            count += 1;
        }
    }
    count
}

/// A cheap start-up check: the file exists and begins with SQLite's header.
fn file_is_sound(path: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .is_ok_and(|()| &header == b"SQLite format 3\0")
}

fn spawn_rebuild(node: &Arc<Node>, storage: &Arc<NodeStorage>, db: &Arc<Database>) {
    if !lock(&storage.in_flight).insert(db.id().to_string()) {
        return;
    }
    db.mark_needs_rebuild();
    let node = Arc::clone(node);
    let storage = Arc::clone(storage);
    let db = Arc::clone(db);
    tokio::spawn(async move {
        let id = db.id().to_string();
        let started = Instant::now();
        match rebuild(&node, &storage, &db, None).await {
            Ok(frame_no) => tracing::info!(
                database_id = %id,
                frame_no,
                ms = started.elapsed().as_millis() as u64,
                "database rebuilt from object storage"
            ),
            Err(e) => {
                tracing::error!(database_id = %id, error = %e, "rebuilding from object storage failed; retrying")
            }
        }
        lock(&storage.in_flight).remove(&id);
    });
}

/// Rebuilds `db` from object storage and installs it; with `handed_over_at`, it comes up
/// handed over (an adoption: it serves nothing until resumed).
async fn rebuild(
    node: &Arc<Node>,
    storage: &Arc<NodeStorage>,
    db: &Arc<Database>,
    handed_over_at: Option<i64>,
) -> Result<u64, DataError> {
    let staging = node.staging_dir(db.id())?;
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)?;
    if let Some(at) = handed_over_at {
        std::fs::write(
            staging.join(crate::database::HAND_OVER_MARKER),
            at.to_string(),
        )?;
    }
    let file = staging.join("data");
    let retention = storage.retention_days(&db.config());
    let restored = restore::restore_to_file(
        &storage.storage,
        db.id(),
        Target::Latest,
        Some(retention),
        &file,
    )
    .await;
    let restored = match restored {
        Ok(restored) => restored,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e.into());
        }
    };
    let mut state = restored.continuing_state();
    // The history it was rebuilt from goes on (a transfer's start, `atoll_storage::history`).
    match atoll_storage::history::History::load(&storage.storage, db.id()).await {
        Ok(history) => {
            if let Some(history) = history {
                state.history_start = history.start;
                state.history_since_ms = history.since_ms;
            }
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e.into());
        }
    }
    let node = Arc::clone(node);
    let db = Arc::clone(db);
    let frame_no = restored.frame_no;
    tokio::task::spawn_blocking(move || node.install_rebuilt(&db, &staging, state))
        .await
        .map_err(|e| DataError::Internal(e.to_string()))??;
    Ok(frame_no)
}

/// A move's second step on the new holder: rebuilds the database from object storage, up
/// to at least `frame_no` (where the old holder handed it over), and keeps it handed over
/// (serving nothing, not in the node's index) until the control plane resumes it here.
/// A copy left handed over by an earlier attempt is replaced with `replace`, and is a
/// conflict without it. Answers the frame reached.
pub async fn adopt(
    node: &Arc<Node>,
    config: DatabaseConfig,
    frame_no: u64,
    replace: bool,
) -> Result<u64, DataError> {
    let storage = node.storage().cloned().ok_or_else(|| {
        DataError::BadRequest("this node has no object storage (--storage-url)".into())
    })?;
    let _ = storage.runtime.set(tokio::runtime::Handle::current());
    let id = config.id.clone();
    if let Some(existing) = node.by_id(&id) {
        if existing.handed_over_at().is_none() {
            return Err(DataError::Conflict(format!(
                "this node already serves database {id}"
            )));
        }
        if !replace {
            return Err(DataError::Conflict(format!(
                "this node already holds a copy of database {id} (handed over)"
            )));
        }
        let node = Arc::clone(node);
        let id = id.clone();
        tokio::task::spawn_blocking(move || crate::moves::release(&node, &id))
            .await
            .map_err(|e| DataError::Internal(e.to_string()))??;
    }
    let at = now_ms();
    if config.state == DatabaseState::AwaitingUpload {
        // Nothing was ever stored: it comes over still waiting for its upload.
        let db = node.install_recovered(config, None)?;
        std::fs::write(
            db.dir().join(crate::database::HAND_OVER_MARKER),
            at.to_string(),
        )?;
        db.set_handed_over(at, None);
        // `install_recovered` put it in the index; it joins it when resumed.
        storage.database_removed(&id);
        return Ok(0);
    }
    // Claimed before it is registered, so the shipper's pass never starts a rebuild of
    // its own (one that would come up serving).
    if !claim_in_flight(&storage, &id).await {
        return Err(DataError::Conflict(format!(
            "database {id} is already being rebuilt here"
        )));
    }
    let db = match node.install_recovering(config) {
        Ok(db) => db,
        Err(e) => {
            lock(&storage.in_flight).remove(&id);
            return Err(e);
        }
    };
    db.set_handed_over(at, None);
    storage.database_removed(&id);
    let result = rebuild(node, &storage, &db, Some(at)).await;
    lock(&storage.in_flight).remove(&id);
    let reached = match result {
        Ok(reached) if reached >= frame_no => return Ok(reached),
        Ok(reached) => DataError::Conflict(format!(
            "object storage holds database {id} up to frame {reached}, short of frame {frame_no} where it was handed over"
        )),
        Err(e) => e,
    };
    let node = Arc::clone(node);
    let _ = tokio::task::spawn_blocking(move || crate::moves::release(&node, &id)).await;
    Err(reached)
}

/// Claims database `id` for a rebuild. A shipping round or garbage collection of the
/// shipper's pass holds the same claim for a moment (on a copy released just before, as
/// after a failed adopt: the test of moves saw it), so it is waited for; a rebuild holds it
/// for far longer than the wait, and then the claim is refused.
async fn claim_in_flight(storage: &NodeStorage, id: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if lock(&storage.in_flight).insert(id.to_string()) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Rebuilds `source_id` as of `timestamp_ms` (or its latest state) into `file`, for a new
/// database; never from before `history_starts_at_ms`, the start of its current owner's
/// history (`crate::transfer_history`). Runs on a blocking thread.
pub(crate) fn restore_seed(
    storage: &NodeStorage,
    source_id: &str,
    timestamp_ms: Option<i64>,
    history_starts_at_ms: Option<i64>,
    retention_days: u32,
    file: &Path,
) -> Result<(), DataError> {
    let runtime = storage.runtime()?;
    if let Some(since) = history_starts_at_ms {
        runtime.block_on(crate::transfer_history::check_seed(
            &storage.storage,
            source_id,
            since,
            timestamp_ms,
        ))?;
    }
    let target = timestamp_ms.map_or(Target::Latest, Target::Time);
    runtime.block_on(restore::restore_to_file(
        &storage.storage,
        source_id,
        target,
        Some(retention_days),
        file,
    ))?;
    Ok(())
}

/// Restores a database in place to its state at `timestamp_ms`: everything up to now is
/// shipped first (so the present stays restorable), the past state is rebuilt beside it,
/// then written into the live database as one transaction through SQLite's backup API, so
/// open connections see it at their next read and the log records it like any write.
/// Runs on a blocking thread.
///
/// An encrypted database is restored with its `key` (checked by the caller): the past
/// state is read and written through connections holding it, so the pages written are
/// sealed under it like any commit's.
pub(crate) fn restore_in_place(
    node: &Node,
    storage: &NodeStorage,
    db: &Database,
    timestamp_ms: i64,
    key: Option<&atoll_storage::encryption::EncryptionKey>,
) -> Result<RestoreOutcome, DataError> {
    let log = db
        .log()
        .ok_or_else(|| DataError::Internal("the database has no log".into()))?;
    db.ensure_queryable()?;
    crate::transfer_history::ensure_started(db)?;
    let runtime = storage.runtime()?;
    log.ship_round(&storage.context(&runtime))?;
    let staging = node.staging_dir(&format!("{}-restore", db.id()))?;
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)?;
    let past = staging.join("data");
    let result = (|| {
        let restored = runtime.block_on(restore::restore_to_file(
            &storage.storage,
            db.id(),
            Target::Time(timestamp_ms),
            Some(storage.retention_days(&db.config())),
            &past,
        ))?;
        let (source, mut live) = match key {
            Some(key) => (
                crate::node::open_encrypted_checked(&past, key, &db.config().name)?,
                keyed_internal_connection(&db.file_path(), key)?,
            ),
            None => (
                rusqlite::Connection::open(&past)?,
                internal_connection(&db.file_path())?,
            ),
        };
        let hook_log = Arc::clone(log);
        live.commit_hook(Some(move || {
            hook_log.record_commit();
            false
        }));
        write_whole(&source, &mut live)?;
        drop(live);
        node.pool.forget(db.id());
        log.ship_round(&storage.context(&runtime))?;
        let record = serde_json::json!({
            "restored_to_ms": timestamp_ms,
            "restored_commit_ms": restored.commit_ms,
            "at_ms": now_ms(),
            "frame_no": log.state().durable_frame_no,
        });
        runtime.block_on(storage.storage.put(
            &format!("{}{}.json", keys::restores(db.id()), now_ms()),
            Bytes::from(record.to_string()),
        ))?;
        Ok(RestoreOutcome {
            restored_commit_ms: restored.commit_ms,
            frame_no: log.state().durable_frame_no,
        })
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// [`internal_connection`] of an encrypted database, with its key.
fn keyed_internal_connection(
    file: &Path,
    key: &atoll_storage::encryption::EncryptionKey,
) -> Result<rusqlite::Connection, DataError> {
    let conn = atoll_storage::encryption::open(
        file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        key,
    )?;
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )?;
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")?;
    Ok(conn)
}

/// Copies every page of `source` into `live` in one write transaction, waiting (bounded)
/// for a writer that holds the lock.
fn write_whole(
    source: &rusqlite::Connection,
    live: &mut rusqlite::Connection,
) -> Result<(), DataError> {
    use rusqlite::backup::{Backup, StepResult};
    let deadline = Instant::now() + Duration::from_secs(30);
    let backup = Backup::new(source, live)?;
    loop {
        match backup.step(-1)? {
            StepResult::Done => return Ok(()),
            StepResult::More => continue,
            StepResult::Busy | StepResult::Locked => {
                if Instant::now() >= deadline {
                    return Err(DataError::Unavailable(
                        "the database stayed busy for 30 s; the restore was not applied, try again"
                            .into(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => continue,
        }
    }
}

/// What object storage holds of a database, and the shipper's lag.
pub async fn backups(storage: &NodeStorage, db: &Database) -> Result<Backups, DataError> {
    let config = db.config();
    let retention = storage.retention_days(&config);
    // While a transfer's new history is being started, nothing of the old one is listed.
    let catalog = if crate::transfer_history::pending(db) {
        Catalog::default()
    } else {
        Catalog::load(&storage.storage, db.id()).await?
    };
    let window = catalog.window(Some(retention));
    let status = db.log().map(|l| l.status()).unwrap_or_default();
    Ok(Backups {
        storage_url: storage.storage.url().to_string(),
        generations: catalog
            .generations
            .iter()
            .map(|g| Generation {
                start_frame_no: g.start,
                created_ms: g.created_ms,
                snapshot_bytes: g.bytes,
            })
            .collect(),
        window_start_ms: window.map(|w| w.0),
        window_end_ms: window.map(|w| w.1),
        retention_days: retention,
        stored_bytes: catalog.bytes,
        durable_frame_no: status.durable_frame_no,
        lag_commits: status.pending_commits,
        lag_ms: status.lag_ms,
        durability: Some(storage.durability(&config)),
        last_error: status.last_error,
    })
}

/// Bytes in object storage: as retention last counted them (it lists them), plus what
/// was stored since.
pub fn stored_bytes(storage: &NodeStorage, db: &Database) -> u64 {
    let counted = lock(&storage.retention)
        .get(db.id())
        .map_or(0, |retention| retention.stored_bytes);
    counted + db.log().map_or(0, |l| l.stored_since_count())
}

/// Deletes everything a purged database left in object storage.
pub async fn purge(storage: &NodeStorage, id: &str) -> Result<usize, DataError> {
    let removed = storage.storage.delete_prefix(&keys::database(id)).await?;
    storage
        .storage
        .delete(&keys::node_database(&storage.node_name, id))
        .await?;
    lock(&storage.retention).remove(id);
    Ok(removed)
}

/// A database's retention as the node's loop keeps it.
#[derive(Default)]
struct Retention {
    /// When it last ran; `None`: never on this node since it started.
    ran_at: Option<Instant>,
    /// Bytes the database takes in object storage, as last counted.
    stored_bytes: u64,
}

/// Whether a database's retention is due: never run, or over an interval ago.
fn retention_due(storage: &NodeStorage, id: &str) -> bool {
    lock(&storage.retention)
        .get(id)
        .and_then(|retention| retention.ran_at)
        .is_none_or(|at| at.elapsed() >= storage.settings.gc_interval)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
