//! A data node: the databases it holds, what the control plane may do to them, and a
//! bounded pool of idle connections.

use crate::database::Database;
use crate::error::DataError;
use crate::node_storage::{NodeStorage, StorageConfig};
use crate::pool::ConnectionPool;
use crate::sandbox::{Mode, SandboxSettings};
use crate::sql_pool::SqlPool;
use atoll_storage::shipper::LogState;
use atoll_storage::sync_dir;
use atoll_types::node::{CreateDatabase, DatabaseConfig, DatabaseState, DatabaseStats, Seed};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

/// Idle connections kept for reuse across all databases of a node. Each is a few hundred
/// KiB at most (page cache), so this bounds the memory idle databases hold.

#[derive(Default)]
struct Registry {
    by_id: HashMap<String, Arc<Database>>,
    by_label: HashMap<String, Arc<Database>>,
}

pub struct Node {
    data_dir: PathBuf,
    registry: RwLock<Registry>,
    /// Configuration changes, one at a time: each writes `config.json` through the same
    /// temporary file, and the file and the configuration in memory must end up the same
    /// (two concurrent deletes of one database once raced to a 502).
    configuring: Mutex<()>,
    pub pool: ConnectionPool,
    pub meters: crate::meter::Meters,
    /// The sandbox's limits for every tenant connection.
    sandbox: SandboxSettings,
    /// Where tenant SQL runs (`sql_pool`).
    sql: SqlPool,
    /// Raised when the node shuts down: every running statement is interrupted.
    shutdown: Arc<AtomicBool>,
    /// Object storage, the durable home of its databases (`storage`); `None` only for
    /// nodes built without it (some tests).
    storage: Option<Arc<NodeStorage>>,
    /// Replicas of databases whose primaries are on other nodes (`replication::follow`).
    pub replicas: crate::replication::follow::Replicas,
    /// Its lease on writing, when a control plane fails nodes over (`atoll_storage::lease`).
    lease: Arc<atoll_storage::lease::Lease>,
    /// Which tenant statement was running when the engine crashed the process, and the
    /// statements refused since (`crate::crash_journal`).
    crash_journal: crate::crash_journal::CrashJournal,
    /// Whether its databases' desired state is confirmed with the control plane
    /// (`crate::convergence`).
    convergence: Arc<crate::convergence::Convergence>,
}

/// How a node runs tenant SQL.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub sandbox: SandboxSettings,
    /// Threads of the tenant SQL pool.
    pub sql_threads: usize,
    /// Object storage (`--storage-url`); `None`: no log, no backups (tests only: the
    /// `atoll` commands always set one).
    pub storage: Option<StorageConfig>,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            sandbox: SandboxSettings::default(),
            sql_threads: SqlPool::default_threads(),
            storage: None,
        }
    }
}

impl Node {
    /// Opens the node's data directory with the default settings.
    pub fn open(data_dir: &Path) -> Result<Node, DataError> {
        Node::open_with(data_dir, NodeSettings::default())
    }

    /// Opens the node's data directory and loads every database it holds.
    pub fn open_with(data_dir: &Path, settings: NodeSettings) -> Result<Node, DataError> {
        let dbs = data_dir.join("dbs");
        std::fs::create_dir_all(&dbs)?;
        let shutdown = Arc::new(AtomicBool::new(false));
        let lease = Arc::new(atoll_storage::lease::Lease::load(data_dir));
        let (crash_journal, _) = crate::crash_journal::CrashJournal::open(data_dir)?;
        let storage = match &settings.storage {
            Some(config) => Some(Arc::new(NodeStorage::open(config, Arc::clone(&lease))?)),
            None => None,
        };
        let node = Node {
            data_dir: data_dir.to_path_buf(),
            registry: RwLock::new(Registry::default()),
            configuring: Mutex::new(()),
            pool: ConnectionPool::new(
                settings.sandbox.max_idle_connections,
                settings.sandbox.warm_memory_bytes,
                settings.sandbox.clone(),
                Arc::clone(&shutdown),
            ),
            meters: crate::meter::Meters::new(),
            sql: SqlPool::new(settings.sql_threads),
            sandbox: settings.sandbox,
            shutdown,
            storage,
            replicas: Default::default(),
            lease,
            crash_journal,
            convergence: Arc::default(),
        };
        for entry in std::fs::read_dir(&dbs)? {
            let dir = entry?.path();
            // A create or delete a crash interrupted (see `create_database` and
            // `delete_database`): never a database to serve, whatever files it still
            // holds, so finish the delete (an interrupted create's store row is still
            // `creating`, and the control plane removes it at start).
            let interrupted = dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(".creating-") || n.starts_with(".deleting-"));
            let restoring = dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(".restoring-"));
            if interrupted || restoring {
                tracing::warn!(dir = %dir.display(), "removing what an interrupted create or delete left");
                std::fs::remove_dir_all(&dir)?;
                continue;
            }
            // No upload is in progress while the node opens: a temporary file is one a
            // crash cut off.
            if dir.is_dir() {
                crate::upload::remove_stale_uploads(&dir, &[])?;
                // A snapshot or a state file a crash cut off (`atoll_storage::shipper`).
                for leftover in ["snapshot.tmp", "log.json.tmp", "config.json.tmp"] {
                    let _ = std::fs::remove_file(dir.join(leftover));
                }
            }
            let Ok(text) = std::fs::read_to_string(dir.join("config.json")) else {
                continue;
            };
            match serde_json::from_str::<DatabaseConfig>(&text) {
                Ok(config) => {
                    let log = node.new_log(&config.id, &dir);
                    node.insert(Arc::new(Database::new(dir, config, log)))
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "skipping database with unreadable config")
                }
            }
        }
        Ok(node)
    }

    /// Its convergence with the control plane (`crate::convergence`).
    pub fn convergence(&self) -> &Arc<crate::convergence::Convergence> {
        &self.convergence
    }

    /// Database `id`'s desired state is confirmed in the current epoch: the control plane
    /// just created it here, or handed it over to this node.
    pub fn confirm(&self, id: &str) {
        if let Some(db) = self.by_id(id) {
            db.confirm(self.convergence.epoch());
        }
    }

    /// The node's lease on writing (`atoll_storage::lease`).
    pub fn lease(&self) -> &Arc<atoll_storage::lease::Lease> {
        &self.lease
    }

    /// Object storage, where the node has it.
    pub fn storage(&self) -> Option<&Arc<NodeStorage>> {
        self.storage.as_ref()
    }

    fn new_log(&self, id: &str, dir: &Path) -> Option<Arc<atoll_storage::shipper::DatabaseLog>> {
        self.storage
            .as_ref()
            .map(|s| s.new_log(id, &dir.join("data")))
    }

    /// Makes every database forget the tokens it verified at least `older_than` ago
    /// (`Database::forget_verified_tokens`); answers how many forgot any.
    pub fn forget_verified_tokens(&self, older_than: Duration) -> usize {
        self.databases()
            .iter()
            .filter(|db| db.forget_verified_tokens(older_than))
            .count()
    }

    /// Every database it holds.
    pub fn databases(&self) -> Vec<Arc<Database>> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .values()
            .cloned()
            .collect()
    }

    /// A staging directory beside the databases (removed at the next start if left).
    pub(crate) fn staging_dir(&self, name: &str) -> Result<PathBuf, DataError> {
        self.db_dir(name)?;
        Ok(self.data_dir.join("dbs").join(format!(".restoring-{name}")))
    }

    /// Registers a database of the node's index that has no files here and needs none
    /// (awaiting its upload), or whose files were just rebuilt in its directory.
    pub(crate) fn install_recovered(
        &self,
        config: DatabaseConfig,
        state: Option<LogState>,
    ) -> Result<Arc<Database>, DataError> {
        let dir = self.db_dir(&config.id)?;
        std::fs::create_dir_all(&dir)?;
        write_config(&dir.join("config.json"), &config)?;
        let log = self.new_log(&config.id, &dir);
        if let (Some(log), Some(state)) = (&log, state) {
            log.reset(state)?;
        }
        let db = Arc::new(Database::new(dir, config, log));
        self.insert(Arc::clone(&db));
        Ok(db)
    }

    /// Registers a database of the node's index whose files are gone, to be rebuilt: it
    /// answers 503 until [`Node::install_rebuilt`].
    pub(crate) fn install_recovering(
        &self,
        config: DatabaseConfig,
    ) -> Result<Arc<Database>, DataError> {
        let dir = self.db_dir(&config.id)?;
        let log = self.new_log(&config.id, &dir);
        let db = Arc::new(Database::new(dir, config, log));
        db.mark_needs_rebuild();
        self.insert(Arc::clone(&db));
        Ok(db)
    }

    /// Installs a rebuilt file (in `staging/data`) as `db`'s: whatever was left of the
    /// old directory is kept aside as `.damaged-<id>-<ms>` for an operator to inspect.
    pub(crate) fn install_rebuilt(
        &self,
        db: &Database,
        staging: &Path,
        state: LogState,
    ) -> Result<(), DataError> {
        let _one_at_a_time = self.configuring.lock().unwrap_or_else(|p| p.into_inner());
        let config = db.config();
        write_config(&staging.join("config.json"), &config)?;
        let state_bytes =
            serde_json::to_vec(&state).map_err(|e| DataError::Internal(e.to_string()))?;
        std::fs::write(staging.join("log.json"), state_bytes)?;
        sync_dir(staging)?;
        self.pool.forget(db.id());
        if db.dir().exists() {
            let aside = self.data_dir.join("dbs").join(format!(
                ".damaged-{}-{}",
                db.id(),
                atoll_storage::now_ms()
            ));
            std::fs::rename(db.dir(), aside)?;
        }
        std::fs::rename(staging, db.dir())?;
        sync_dir(&self.data_dir.join("dbs"))?;
        let log = self.new_log(db.id(), db.dir());
        let rebuilt = Arc::new(Database::new(
            db.dir().to_path_buf(),
            DatabaseConfig::clone(&config),
            log,
        ));
        self.insert(rebuilt);
        self.pool.forget(db.id());
        Ok(())
    }

    /// Restores a database in place to its state at `timestamp_ms` (`node_storage`).
    /// An encrypted database's `key` is the key's text (base64), checked here.
    pub fn restore_in_place(
        &self,
        id: &str,
        timestamp_ms: i64,
        key: Option<&str>,
    ) -> Result<atoll_types::node::RestoreOutcome, DataError> {
        let db = self
            .by_id(id)
            .ok_or_else(|| DataError::UnknownDatabase(id.to_string()))?;
        let storage = self.storage.as_ref().ok_or_else(|| {
            DataError::BadRequest("this node has no object storage (--storage-url)".into())
        })?;
        let config = db.config();
        let key = match (&config.encryption, key) {
            (None, None) => None,
            (None, Some(_)) => return Err(crate::encryption::not_encrypted(&config)),
            (Some(_), None) => {
                return Err(crate::encryption::not_for_encrypted(
                    &config,
                    "a restore in place without the database's key",
                ))
            }
            (Some(_), Some(text)) => Some(crate::encryption::key_for(&config, text)?),
        };
        crate::node_storage::restore_in_place(self, storage, &db, timestamp_ms, key.as_ref())
    }

    /// Re-encrypts a database under a new key (`crate::key_rotation`); `current` and `new`
    /// are the keys' text (base64).
    pub fn rotate_encryption_key(
        &self,
        id: &str,
        order: atoll_types::node::RotateEncryptionKey,
        current: &str,
        new: &str,
    ) -> Result<atoll_types::node::EncryptionKeyRotated, DataError> {
        let db = self
            .by_id(id)
            .ok_or_else(|| DataError::UnknownDatabase(id.to_string()))?;
        if db.config().state != DatabaseState::Active {
            // Says why (deleted, archived, awaiting its upload).
            db.ensure_queryable()?;
        }
        if db.handed_over_at().is_some() || db.needs_rebuild() || db.is_replica() {
            return Err(DataError::Recovering(
                format!(
                    "database {} is moving or being rebuilt; rotate its key once it serves again",
                    db.config().name
                ),
                5,
            ));
        }
        crate::key_rotation::rotate(self, &db, order, current, new)
    }

    /// What object storage holds of a database.
    pub async fn backups(&self, id: &str) -> Result<atoll_types::node::Backups, DataError> {
        let db = self
            .by_id(id)
            .ok_or_else(|| DataError::UnknownDatabase(id.to_string()))?;
        let storage = self.storage.as_ref().ok_or_else(|| {
            DataError::BadRequest("this node has no object storage (--storage-url)".into())
        })?;
        crate::node_storage::backups(storage, &db).await
    }

    pub fn sandbox(&self) -> &SandboxSettings {
        &self.sandbox
    }

    /// The crash journal tenant statements run under (`crate::crash_journal`).
    pub fn crash_journal(&self) -> &crate::crash_journal::CrashJournal {
        &self.crash_journal
    }

    /// The threads tenant SQL runs on.
    pub fn sql(&self) -> &SqlPool {
        &self.sql
    }

    /// Interrupts every running statement, now and from now on: the node is going away.
    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::Relaxed);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    fn insert(&self, db: Arc<Database>) {
        let config = db.config();
        if let Some(storage) = &self.storage {
            storage.config_changed(db.id());
        }
        db.attach_convergence(&self.convergence);
        let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
        // A rebuilt copy replaces the one it was rebuilt for: confirmed as that one was.
        if let Some(replaced) = registry.by_id.get(db.id()) {
            db.confirm(replaced.confirmed_epoch());
        }
        // A deleted database keeps its files (it may be restored) but not its hostname,
        // which a new database may take.
        if config.state != DatabaseState::Deleted {
            registry
                .by_label
                .insert(config.label.clone(), Arc::clone(&db));
        }
        registry.by_id.insert(config.id.clone(), db);
    }

    pub fn by_label(&self, label: &str) -> Option<Arc<Database>> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_label
            .get(label)
            .cloned()
    }

    pub fn by_id(&self, id: &str) -> Option<Arc<Database>> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .get(id)
            .cloned()
    }

    pub fn database_ids(&self) -> Vec<String> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .keys()
            .cloned()
            .collect()
    }

    pub fn database_count(&self) -> usize {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .len()
    }

    fn db_dir(&self, id: &str) -> Result<PathBuf, DataError> {
        // Ids come from the control plane; refuse anything that could leave `dbs/`.
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(DataError::BadRequest(format!("invalid database id {id:?}")));
        }
        Ok(self.data_dir.join("dbs").join(id))
    }

    /// Where a database is staged while it is created (renamed into place when done): what
    /// it holds so far is how far the create got.
    pub fn creating_dir(&self, id: &str) -> PathBuf {
        self.data_dir.join("dbs").join(format!(".creating-{id}"))
    }

    /// Creates a database from its seed. Idempotent for the same id (a retried create
    /// answers the existing database); on failure nothing is left behind.
    pub fn create_database(&self, request: CreateDatabase) -> Result<Arc<Database>, DataError> {
        self.create_database_with_key(request, None)
    }

    /// [`Node::create_database`] for a database that may be encrypted with its
    /// customer's key (`config.encryption`): `key` is the key's text (base64), checked
    /// against the configuration's verifier, used to write the new file's first pages and
    /// dropped when this returns. An encrypted database starts empty, awaiting its upload
    /// (sealed as it is installed), from a dump, or as a copy of one under the same key.
    pub fn create_database_with_key(
        &self,
        request: CreateDatabase,
        key: Option<&str>,
    ) -> Result<Arc<Database>, DataError> {
        let CreateDatabase { mut config, seed } = request;
        if let Some(existing) = self.by_id(&config.id) {
            return Ok(existing);
        }
        let key = match (&config.encryption, key) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(DataError::BadRequest(format!(
                    "database {} is not encrypted, yet its create order carries a key",
                    config.name
                )))
            }
            (Some(_), None) => {
                return Err(DataError::Encryption(
                    crate::error::EncryptionRefusal::KeyRequired,
                    format!("creating encrypted database {} needs its key", config.name),
                ))
            }
            (Some(_), Some(text)) => Some(crate::encryption::key_for(&config, text)?),
        };
        if self.by_label(&config.label).is_some() {
            return Err(DataError::Conflict(format!(
                "hostname label {} is taken on this node",
                config.label
            )));
        }
        let dir = self.db_dir(&config.id)?;
        let staging = self.creating_dir(&config.id);
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)?;
        let result = (|| -> Result<(), DataError> {
            let file = staging.join("data");
            config.state = match &seed {
                Seed::Upload => DatabaseState::AwaitingUpload,
                _ => config.state,
            };
            match &seed {
                Seed::Empty => match &key {
                    Some(key) => initialise_encrypted(&file, key)?,
                    None => initialise_empty(&file)?,
                },
                Seed::Upload => {}
                Seed::Copy { source_id } => {
                    let source = self.by_id(source_id).ok_or_else(|| {
                        DataError::BadRequest(format!(
                            "source database {source_id} is not on this node"
                        ))
                    })?;
                    crate::transfer_history::ensure_started(&source)?;
                    match &key {
                        Some(key) => copy_encrypted_database(&source, key, &file)?,
                        None => copy_database(self, &source, &file)?,
                    }
                }
                Seed::PointInTime {
                    source_id,
                    timestamp_ms,
                    history_starts_at_ms,
                } => {
                    let storage = self.storage.as_ref().ok_or_else(|| {
                        DataError::BadRequest(
                            "this node has no object storage (--storage-url) to restore from"
                                .into(),
                        )
                    })?;
                    let retention = match self.by_id(source_id) {
                        Some(source) => {
                            // What the source committed up to now is in object storage
                            // before the restore reads it (an instant inside the lag).
                            if let Some(log) = source.log() {
                                let runtime = storage.runtime()?;
                                log.ship_round(&storage.context(&runtime))?;
                            }
                            storage.retention_days(&source.config())
                        }
                        None => storage.retention_days(&config),
                    };
                    crate::node_storage::restore_seed(
                        storage,
                        source_id,
                        *timestamp_ms,
                        *history_starts_at_ms,
                        retention,
                        &file,
                    )?;
                    if let Some(key) = &key {
                        check_opens(&file, key, &config.name)?;
                    }
                }
                Seed::Dump { sql } => {
                    match &key {
                        Some(key) => initialise_encrypted(&file, key)?,
                        None => initialise_empty(&file)?,
                    }
                    // A dump is tenant SQL like any other: it runs in the sandbox (no
                    // ATTACH, allow-listed pragmas, limits, a deadline); into an encrypted
                    // database through a connection holding its key.
                    let mut conn = crate::sandbox::open(
                        &file,
                        crate::sandbox::IfMissing::Create,
                        Mode::DumpLoader,
                        &self.sandbox,
                        &self.shutdown,
                        key.as_ref(),
                        |_| Ok(()),
                    )?;
                    // Journaled for the organization (the database is new: a crash must
                    // not be retried under another name); without an excerpt for an
                    // encrypted database (its literals are the tenant's data).
                    let organization = crate::crash_journal::organization_key(&config.org_id);
                    let _running = match &key {
                        Some(_) => self.crash_journal.running_sealed(&organization, sql),
                        None => self.crash_journal.running(&organization, sql),
                    }
                    .map_err(DataError::Forbidden)?;
                    crate::dump::load_dump(&mut conn, sql, self.sandbox.dump_load_timeout)?;
                    drop(conn);
                    match &key {
                        Some(key) => check_opens(&file, key, &config.name)?,
                        None => crate::dump::check_loaded(&file)?,
                    }
                }
            }
            let has_file = seed != Seed::Upload;
            // Object storage and the local disk at once: the new database's first
            // generation and index entry are uploaded while its file and configuration
            // are synced here (on S3 the uploads are the longer wait, on a local store the
            // fsyncs are); the rename below waits for both.
            let storage = match self.storage.as_deref() {
                Some(storage) => Some((storage, storage.runtime()?)),
                None => None,
            };
            std::thread::scope(|scope| {
                let stored = storage.as_ref().map(|(storage, runtime)| {
                    let (config, file) = (&config, has_file.then_some(file.as_path()));
                    scope.spawn(move || {
                        crate::node_storage::store_new_database(storage, runtime, config, file)
                    })
                });
                let written = (|| {
                    if has_file {
                        std::fs::File::open(&file)?.sync_all()?;
                    }
                    write_config(&staging.join("config.json"), &config)
                })();
                let stored = stored.map_or(Ok(()), |upload| {
                    upload.join().unwrap_or_else(|_| {
                        Err(DataError::Internal(
                            "storing the new database in object storage panicked".into(),
                        ))
                    })
                });
                written.and(stored)
            })?;
            sync_dir(&staging)?;
            std::fs::rename(&staging, &dir)?;
            sync_dir(&self.data_dir.join("dbs"))?;
            Ok(())
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        let log = self.new_log(&config.id, &dir);
        let db = Arc::new(Database::new(dir, config, log));
        self.insert(Arc::clone(&db));
        // Its configuration is the control plane's of this moment.
        db.confirm(self.convergence.epoch());
        Ok(db)
    }

    /// Replaces a database's configuration (flags, limits, keys, state, label).
    pub fn configure(&self, mut config: DatabaseConfig) -> Result<Arc<Database>, DataError> {
        let one_at_a_time = self.configuring.lock().unwrap_or_else(|p| p.into_inner());
        let db = self
            .by_id(&config.id)
            .ok_or_else(|| DataError::UnknownDatabase(config.id.clone()))?;
        let old = db.config();
        // Older than what the node has: a slow or retried push, or a replica that read the
        // store before the last change. The newer configuration stays (docs/STORAGE.md,
        // "The reconciler").
        if config.config_version != 0 && config.config_version < old.config_version {
            return Ok(db);
        }
        // The node turns `awaiting_upload` into `active` when an upload lands (the data file
        // appears); a control plane that has not heard of it yet must not turn it back.
        if config.state == DatabaseState::AwaitingUpload && db.file_path().exists() {
            config.state = DatabaseState::Active;
        }

        let serves = |c: &DatabaseConfig| c.state != DatabaseState::Deleted;
        if serves(&config) {
            if let Some(other) = self.by_label(&config.label) {
                if other.id() != config.id {
                    return Err(DataError::Conflict(format!(
                        "hostname label {} is taken on this node",
                        config.label
                    )));
                }
            }
        }
        if let Err(e) = write_config(&db.config_path(), &config) {
            // Deleted while this configure ran (its directory went to the trash): the
            // database is gone, not the node broken.
            if !db.dir().exists() {
                return Err(DataError::UnknownDatabase(config.id));
            }
            return Err(e);
        }
        db.set_config(config.clone());
        if let Some(storage) = &self.storage {
            storage.config_changed(db.id());
        }
        let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
        if serves(&old)
            && registry
                .by_label
                .get(&old.label)
                .is_some_and(|d| Arc::ptr_eq(d, &db))
        {
            registry.by_label.remove(&old.label);
        }
        if serves(&config) {
            registry
                .by_label
                .insert(config.label.clone(), Arc::clone(&db));
        }
        drop(registry);
        // Limits are applied when a connection opens.
        self.pool.forget(&config.id);
        drop(one_at_a_time);
        // A transfer: the new owner's history starts before the control plane is answered.
        crate::transfer_history::start_if_asked(self, &db);
        Ok(db)
    }

    /// Removes a database and its files.
    pub fn delete_database(&self, id: &str) -> Result<(), DataError> {
        let db = self.detach(id)?;
        if let Some(storage) = &self.storage {
            // Purging a deleted database (its restore window over) deletes its history too;
            // a delete of a database that was never deleted through the API keeps it in
            // object storage, restorable by id, whoever asked for it.
            if db.config().state == DatabaseState::Deleted {
                let storage = Arc::clone(storage);
                let id = id.to_string();
                if let Ok(runtime) = storage.runtime() {
                    runtime.spawn(async move {
                        match crate::node_storage::purge(&storage, &id).await {
                            Ok(n) => tracing::info!(database_id = %id, objects = n, "purged from object storage"),
                            Err(e) => tracing::warn!(database_id = %id, error = %e, "purging object storage failed"),
                        }
                    });
                }
            } else {
                tracing::warn!(database_id = %id, "database removed from this node; its history stays in object storage");
            }
        }
        // Rename first so a crash half-way never leaves a loadable, half-deleted database.
        let trash = self.data_dir.join("dbs").join(format!(".deleting-{id}"));
        std::fs::rename(db.dir(), &trash)?;
        std::fs::remove_dir_all(&trash)?;
        Ok(())
    }

    /// The node's data directory (`dbs/`, the store stamp, `quarantine/`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Stops serving a database and forgets it, leaving its files where they are for the
    /// caller to move or remove (a delete, a quarantine).
    pub fn detach(&self, id: &str) -> Result<Arc<Database>, DataError> {
        let db = {
            let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
            let db = registry
                .by_id
                .remove(id)
                .ok_or_else(|| DataError::UnknownDatabase(id.to_string()))?;
            let label = db.config().label.clone();
            if registry
                .by_label
                .get(&label)
                .is_some_and(|d| Arc::ptr_eq(d, &db))
            {
                registry.by_label.remove(&label);
            }
            db
        };
        self.pool.forget(id);
        self.meters.forget(id);
        if let Some(storage) = &self.storage {
            // Off the node's index either way (a quarantined database is not rebuilt at the
            // next start); its history stays in object storage unless `delete_database`
            // purges it.
            storage.database_removed(id);
        }
        Ok(db)
    }

    pub fn stats(&self, id: &str) -> Result<DatabaseStats, DataError> {
        let db = self
            .by_id(id)
            .ok_or_else(|| DataError::UnknownDatabase(id.to_string()))?;
        let status = db.log().map(|l| l.status());
        Ok(DatabaseStats {
            storage_bytes: db.storage_bytes(),
            state: Some(db.config().state),
            backup_bytes: self
                .storage
                .as_ref()
                .map(|s| crate::node_storage::stored_bytes(s, &db)),
            replication_lag_commits: status.as_ref().map(|s| s.pending_commits),
            replication_lag_ms: status.as_ref().map(|s| s.lag_ms),
            recovering: db.needs_rebuild(),
            // From the WAL index's header: reading the WAL itself (`DatabaseLog::head`)
            // would buffer its frames for replicas, for every database a listing asks
            // about. A database no connection holds has no index in memory
            // (`atoll_storage::wal_index`); its WAL is read then, which for a database at
            // rest is what the shipper left of it (little or nothing unshipped).
            head_frame_no: db
                .log()
                .and_then(|log| log.committed_head().or_else(|| log.head().ok())),
        })
    }

    /// Bytes on disk of each of `ids` the node holds (the others are left out).
    pub fn sizes(&self, ids: &[String]) -> atoll_types::node::Sizes {
        atoll_types::node::Sizes {
            storage_bytes: ids
                .iter()
                .filter_map(|id| Some((id.clone(), self.by_id(id)?.storage_bytes())))
                .collect(),
        }
    }

    /// Marks an uploaded database active (after its file was installed).
    pub fn activate(&self, db: &Database) -> Result<(), DataError> {
        let _one_at_a_time = self.configuring.lock().unwrap_or_else(|p| p.into_inner());
        let mut config = DatabaseConfig::clone(&db.config());
        config.state = DatabaseState::Active;
        write_config(&db.config_path(), &config)?;
        db.set_config(config);
        Ok(())
    }
}

/// The bytes of an empty database as SQLite builds it for a create (one 4 KiB page, WAL
/// mode, nothing in it). Built by SQLite itself on a process's first create; every later
/// create writes the same bytes: an SQLite file holds nothing that tells two empty
/// databases apart, and building it through SQLite made and removed three files (rollback
/// journal, WAL, shared memory) in the staging directory per create.
static EMPTY_DATABASE: OnceLock<Vec<u8>> = OnceLock::new();

/// Makes `file` an empty database (the create syncs it, and the staging directory).
fn initialise_empty(file: &Path) -> Result<(), DataError> {
    if let Some(image) = EMPTY_DATABASE.get() {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(file)?;
        out.write_all(image)?;
        return Ok(());
    }
    build_empty(file)?;
    let image = std::fs::read(file)?;
    let _ = EMPTY_DATABASE.set(image);
    Ok(())
}

/// An empty encrypted database: its first pages written (sealed) with `key`, the WAL
/// checkpointed into the file by the last close. Not from a cached image: every
/// database's pages are sealed under its own key with fresh nonces.
fn initialise_encrypted(
    file: &Path,
    key: &atoll_storage::encryption::EncryptionKey,
) -> Result<(), DataError> {
    let conn = atoll_storage::encryption::create(file, key)?;
    // Synced once by the caller before the rename, as an empty database is.
    conn.execute_batch("PRAGMA synchronous = OFF; PRAGMA user_version = 0;")?;
    conn.close().map_err(|(_, e)| e)?;
    Ok(())
}

/// An empty database built by SQLite (see [`EMPTY_DATABASE`]).
fn build_empty(file: &Path) -> Result<(), DataError> {
    let conn = rusqlite::Connection::open(file)?;
    // The file is built in the staging directory, which a crash throws away whole: SQLite
    // need not sync while it is built (that was 10 of a create's 13 fsyncs); the finished
    // file is synced once below, before the rename makes it the database.
    conn.execute_batch(
        "PRAGMA synchronous = OFF; PRAGMA page_size = 4096; PRAGMA journal_mode = WAL;",
    )?;
    // Write the header now so the file is a valid, empty database from the first byte.
    conn.execute_batch("PRAGMA user_version = 0; VACUUM;")?;
    // The last close checkpoints the WAL into the file and removes it.
    conn.close().map_err(|(_, e)| e)?;
    std::fs::File::open(file)?.sync_all()?;
    Ok(())
}

/// A consistent copy through SQLite's online backup, even while the source is written.
fn copy_database(node: &Node, source: &Database, target: &Path) -> Result<(), DataError> {
    if source.config().state == DatabaseState::AwaitingUpload {
        return Err(DataError::BadRequest(
            "the source database has no data yet".into(),
        ));
    }
    let conn = source.open_connection(Mode::ReadOnly, &node.sandbox, &node.shutdown, None)?;
    conn.conn
        .backup(rusqlite::DatabaseName::Main, target, None)?;
    let copy = rusqlite::Connection::open(target)?;
    copy.execute_batch("PRAGMA journal_mode = WAL;")?;
    Ok(())
}

/// Copies encrypted database `source` to `target` page by page as they are — ciphertext,
/// without the key, as the shipper's snapshot does — after checking that `key` (the copy's)
/// is the source's: a copy keeps its source's key.
fn copy_encrypted_database(
    source: &Database,
    key: &atoll_storage::encryption::EncryptionKey,
    target: &Path,
) -> Result<(), DataError> {
    let config = source.config();
    let source_key_matches = config
        .encryption
        .as_ref()
        .and_then(|e| atoll_storage::encryption::Verifier::from_hex(&e.verifier))
        .is_some_and(|verifier| key.matches(source.id(), &verifier));
    if !source_key_matches {
        return Err(DataError::Encryption(
            crate::error::EncryptionRefusal::KeyInvalid,
            format!(
                "the key of the copy is not the key of database {}: a copy keeps its source's key",
                config.name
            ),
        ));
    }
    source.ensure_held()?;
    crate::encryption::copy_sealed_pages(&source.file_path(), target)?;
    check_opens(target, key, &config.name)
}

/// Checks that `key` reads the schema of the encrypted database at `file` (a copy, a
/// restored point in time): pages written under another key — before a rotation — fail
/// their tags here rather than at the tenant's first query.
fn check_opens(
    file: &Path,
    key: &atoll_storage::encryption::EncryptionKey,
    name: &str,
) -> Result<(), DataError> {
    open_encrypted_checked(file, key, name).map(drop)
}

/// Opens the encrypted database at `file` with `key`, checked as [`check_opens`] says.
pub(crate) fn open_encrypted_checked(
    file: &Path,
    key: &atoll_storage::encryption::EncryptionKey,
    name: &str,
) -> Result<rusqlite::Connection, DataError> {
    let conn = atoll_storage::encryption::open(
        file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        key,
    )?;
    match conn.query_row("SELECT count(*) FROM sqlite_schema", [], |row| {
        row.get::<_, i64>(0)
    }) {
        Ok(_) => Ok(conn),
        Err(rusqlite::Error::SqliteFailure(failure, _))
            if failure.code == rusqlite::ErrorCode::SystemIoFailure =>
        {
            Err(DataError::Encryption(
                crate::error::EncryptionRefusal::KeyInvalid,
                format!(
                    "the key does not open database {name} as it was then (its pages were under another key: a rotation since?)"
                ),
            ))
        }
        Err(e) => Err(e.into()),
    }
}

fn write_config(path: &Path, config: &DatabaseConfig) -> Result<(), DataError> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(config).map_err(|e| DataError::Internal(e.to_string()))?;
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
    }
    std::fs::rename(tmp, path)?;
    Ok(())
}

/// How long a pooled connection may stay unused before the sweeper closes it
/// ([`crate::pool::ConnectionPool::close_unused`]); opening one again costs well under a
/// millisecond.
pub const UNUSED_CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

impl Node {
    /// Every ten seconds, for as long as the node lives, closes the pooled connections
    /// unused for [`UNUSED_CONNECTION_LIFETIME`] (on a blocking thread: closing may
    /// checkpoint), every minute makes the databases forget the tokens they no longer
    /// trust ([`Node::forget_verified_tokens`]), and when either freed anything, hands the
    /// freed memory back to the system.
    pub fn spawn_idle_sweeper(self: &Arc<Self>) {
        let node = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs(10));
            ticks.tick().await;
            for tick in 1u64.. {
                ticks.tick().await;
                let Some(node) = node.upgrade() else {
                    return;
                };
                let swept = tokio::task::spawn_blocking(move || {
                    let closed = node.pool.close_unused(UNUSED_CONNECTION_LIFETIME);
                    let forgot = tick.is_multiple_of(6)
                        && node.forget_verified_tokens(crate::database::VERIFIED_TOKEN_TTL) > 0;
                    if closed > 0 || forgot {
                        // A burst is over: what it allocated is free now, give it back.
                        crate::memory::release_free_memory();
                    }
                    closed
                })
                .await;
                if let Ok(closed @ 1..) = swept {
                    tracing::debug!(closed, "closed pooled connections left unused");
                }
            }
        });
    }
}
