//! One database on this node: its configuration and its files.
//!
//! Layout: `<data-dir>/dbs/<uuid>/data` (the SQLite file, with `data-wal`; no `data-shm`:
//! the WAL index is in the node's memory, `atoll_storage::wal_index`)
//! and `<data-dir>/dbs/<uuid>/config.json` (the last configuration the control plane sent),
//! so a node restarts without its control plane.

use crate::error::DataError;
use crate::jwt::{self, Claims, JwtError};
use crate::sandbox::{self, Mode, SandboxSettings, SandboxedConnection};
use crate::write_lock::WriteLockWatch;
use atoll_storage::shipper::DatabaseLog;
use atoll_types::node::{DatabaseConfig, DatabaseState};
use rusqlite::config::DbConfig;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// SQLite page size of every Atoll database (uploads must match it; the durable log reads
/// pages of it).
pub use atoll_storage::PAGE_SIZE;

/// Settings of every connection to a database, chosen for many small databases on one node
/// serving short transactions:
///
/// - `journal_mode = WAL` (persistent in the file): readers never wait for the writer.
/// - `synchronous = NORMAL`: in WAL mode a commit is durable across a crash of the process
///   (it is in the WAL, which the OS holds); only a power loss or kernel crash may lose the
///   last commits, never corrupt the file. `FULL` would add an fsync to every commit.
/// - `cache_size` (set after these, from `SandboxSettings::page_cache_bytes`, 512 KiB by
///   default; SQLite's default is 2 MiB): the page cache is per connection and up to
///   the warm set's budget of idle connections stays open (`warm_set`: each counted at the
///   cache it holds; none past 30 s unused: `ConnectionPool::close_unused`); the OS page
///   cache serves the rest. A
///   busy database has one connection per concurrent request, each with its own cache: at
///   2 MiB, 64 concurrent clients of one database left the process at 166–180 MiB, at
///   512 KiB 71–92 MiB, with the same throughput (PERFORMANCE.md, issue 16).
/// - `journal_size_limit`: a WAL grown by one large write is truncated back to 64 MiB at
///   the next checkpoint rather than keeping its peak size on disk.
/// - no memory-mapped reads (`mmap_size` 0): they would count every touched page of every
///   open database in the process's RSS and buy little for small point queries on pages
///   the cache holds anyway. That is the engine's default (`SQLITE_DEFAULT_MMAP_SIZE`),
///   which tenants may not change (`sandbox`), so no statement sets it: each one is parsed
///   and run at every cold open (a test checks the default).
pub const CONNECTION_PRAGMAS: &str = "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
     PRAGMA journal_size_limit = 67108864;";

/// Sets up a new connection to a tenant's database (before the sandbox's own settings):
/// its statement cache, [`CONNECTION_PRAGMAS`], a page cache of `page_cache_bytes`, and
/// when the database is `shipped` to object storage, no checkpoints but the shipper's.
/// The node's connections and the SQL fuzzer's (`atoll fuzz-sql`) both open this way.
pub fn configure_connection(
    conn: &rusqlite::Connection,
    page_cache_bytes: u64,
    shipped: bool,
) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(crate::hrana::STATEMENT_CACHE_CAPACITY);
    conn.execute_batch(CONNECTION_PRAGMAS)?;
    // Negative: a size in KiB rather than in pages.
    let cache_kib = (page_cache_bytes / 1024).max(1);
    conn.pragma_update(None, "cache_size", -(cache_kib as i64))?;
    if shipped {
        // Only the shipper checkpoints, after shipping (`atoll_storage::shipper`): a
        // checkpoint here could copy frames into the file that object storage never got,
        // and a reset WAL would lose them.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
        crate::engine::disable_automatic_checkpoints(conn)?;
    }
    Ok(())
}

/// The file in a database's directory that says it is handed over (its content: since when,
/// in ms).
pub(crate) const HAND_OVER_MARKER: &str = "handed-over";
/// The file that says a rotation of the database's key began and has not finished
/// (`crate::key_rotation`).
pub(crate) const KEY_ROTATION_MARKER: &str = "rotating-key";

pub struct Database {
    /// Never changes (the configuration's `id`); kept apart so reading it takes no lock.
    id: String,
    dir: PathBuf,
    /// Shared snapshots: a request reads the configuration several times, and a copy is
    /// a dozen strings allocated each time.
    config: RwLock<Arc<DatabaseConfig>>,
    verified_tokens: VerifiedTokens,
    /// Writers waiting for this database's write lock (`write_lock`).
    write_lock: Arc<WriteLockWatch>,
    /// Its log in object storage; `None` on a node without storage.
    log: Option<Arc<DatabaseLog>>,
    /// Its files are missing or damaged and it is being rebuilt from object storage: it
    /// answers 503 until that is done.
    rebuilding: AtomicBool,
    /// Handed over to another node (a move), or adopted from one and not yet taken over,
    /// since this instant (ms; 0: neither). It serves nothing until resumed or released
    /// (`crate::moves`).
    handed_over_at: AtomicI64,
    /// SQLite's write lock on its file, held from the hand-over on, so nothing commits
    /// after the frame it was handed over at. Boxed: a connection is ~150 bytes, and a
    /// node holds 100,000 databases that are almost never handed over.
    hand_over_lock: Mutex<Option<Box<rusqlite::Connection>>>,
    /// A replica of a primary on another node (`replication::follow`): it serves reads
    /// that close their stream, nothing else.
    replica: AtomicBool,
    /// Its pages are being re-encrypted under a new key, or a rotation was interrupted
    /// (`crate::key_rotation`): it answers 503 until the rotation is done.
    rotating_key: AtomicBool,
    /// Until when (`write_lock::now_ms`) its reads are not tried on the async worker that
    /// received them, because one of them ran over the budget there (`hrana::http`).
    inline_paused_until_ms: AtomicU64,
    /// What opening its file cost last time: whether a read may open it on an async
    /// worker (`crate::open_cost`).
    open_cost: Arc<crate::open_cost::OpenCost>,
    /// Its node's convergence with the control plane (`crate::convergence`), set when the
    /// node registers it, and the epoch in which its desired state was last confirmed.
    convergence: std::sync::OnceLock<Arc<crate::convergence::Convergence>>,
    confirmed_epoch: AtomicU64,
}

impl Database {
    pub(crate) fn new(
        dir: PathBuf,
        mut config: DatabaseConfig,
        log: Option<Arc<DatabaseLog>>,
    ) -> Database {
        crate::shared_credentials::share(&mut config);
        // A hand-over outlives a restart: the database stays out of service until the
        // control plane resumes or releases it.
        let handed_over_at = std::fs::read_to_string(dir.join(HAND_OVER_MARKER))
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok())
            .unwrap_or(0);
        if let (Some(log), true) = (&log, handed_over_at != 0) {
            log.set_fenced(true);
        }
        if let (Some(log), Some(since)) = (&log, config.history_starts_at_ms) {
            log.ask_history(since);
        }
        let rotating_key = dir.join(KEY_ROTATION_MARKER).exists();
        Database {
            id: config.id.clone(),
            dir,
            config: RwLock::new(Arc::new(config)),
            verified_tokens: VerifiedTokens::default(),
            write_lock: Arc::default(),
            log,
            rebuilding: AtomicBool::new(false),
            handed_over_at: AtomicI64::new(handed_over_at),
            hand_over_lock: Mutex::new(None),
            inline_paused_until_ms: AtomicU64::new(0),
            open_cost: Arc::default(),
            replica: AtomicBool::new(false),
            // An interrupted rotation outlives a restart: which key the pages are under is
            // known only once the rotation is repeated.
            rotating_key: AtomicBool::new(rotating_key),
            convergence: std::sync::OnceLock::new(),
            confirmed_epoch: AtomicU64::new(0),
        }
    }

    /// Ties it to its node's convergence (`crate::convergence`); the first call counts.
    pub(crate) fn attach_convergence(&self, convergence: &Arc<crate::convergence::Convergence>) {
        let _ = self.convergence.set(Arc::clone(convergence));
    }

    /// The epoch in which its desired state was last confirmed (0: never).
    pub(crate) fn confirmed_epoch(&self) -> u64 {
        self.confirmed_epoch.load(Ordering::Acquire)
    }

    /// Its desired state is confirmed in `epoch` (never moved back to an older one).
    pub(crate) fn confirm(&self, epoch: u64) {
        self.confirmed_epoch.fetch_max(epoch, Ordering::AcqRel);
    }

    /// Refuses every request, before its credentials are even checked, while its node
    /// cannot confirm its desired state with the control plane (it started, or lost touch):
    /// a 503 that says to retry, never its old configuration (`crate::convergence`).
    pub fn ensure_confirmed(&self) -> Result<(), DataError> {
        match self.convergence.get() {
            Some(convergence) => convergence.check(self.confirmed_epoch(), &self.config().name),
            None => Ok(()),
        }
    }

    /// A replica's database (see the field).
    pub(crate) fn new_replica(dir: PathBuf, config: DatabaseConfig) -> Database {
        let db = Database::new(dir, config, None);
        db.replica.store(true, Ordering::Release);
        db
    }

    /// Whether its reads may be tried on the async worker that received them.
    pub(crate) fn inline_allowed(&self) -> bool {
        self.inline_paused_until_ms.load(Ordering::Relaxed) <= crate::write_lock::now_ms()
    }

    /// Whether its last open cost at most `budget` of CPU time, with no statement that may
    /// have grown its schema since (`crate::open_cost`).
    pub(crate) fn opens_within(&self, budget: Duration) -> bool {
        self.open_cost.within(budget)
    }

    /// The length of its WAL file (0 when there is none): what a first open reads into
    /// the WAL index.
    pub(crate) fn wal_bytes(&self) -> u64 {
        std::fs::metadata(self.dir.join("data-wal")).map_or(0, |m| m.len())
    }

    /// Sends its reads to the SQL threads for `pause` (one ran over the inline budget).
    pub(crate) fn pause_inline(&self, pause: Duration) {
        let until = crate::write_lock::now_ms() + pause.as_millis() as u64;
        self.inline_paused_until_ms.store(until, Ordering::Relaxed);
    }

    pub fn is_replica(&self) -> bool {
        self.replica.load(Ordering::Acquire)
    }

    /// Since when it is handed over (ms), if it is.
    pub fn handed_over_at(&self) -> Option<i64> {
        let at = self.handed_over_at.load(Ordering::Acquire);
        (at != 0).then_some(at)
    }

    /// Marks it handed over since `at` (ms), keeping `lock` (a connection holding the
    /// write lock) until it is resumed or released.
    pub(crate) fn set_handed_over(&self, at: i64, lock: Option<rusqlite::Connection>) {
        if let Some(log) = &self.log {
            log.set_fenced(true);
        }
        self.handed_over_at.store(at, Ordering::Release);
        *self
            .hand_over_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = lock.map(Box::new);
    }

    /// Serves again: the hand-over is undone (or the adoption completed).
    pub(crate) fn clear_handed_over(&self) {
        self.handed_over_at.store(0, Ordering::Release);
        if let Some(log) = &self.log {
            log.set_fenced(false);
        }
        // Dropping the connection rolls its transaction back and frees the write lock.
        self.hand_over_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    pub(crate) fn set_rotating_key(&self, rotating: bool) {
        self.rotating_key.store(rotating, Ordering::Release);
    }

    /// Refuses whatever touches its files while it is rebuilt, handed over or re-encrypted
    /// (an upload, a query), with a 503 that says to retry.
    pub fn ensure_held(&self) -> Result<(), DataError> {
        if self.rotating_key.load(Ordering::Acquire) {
            return Err(DataError::Recovering(
                format!(
                    "the encryption key of database {} is being rotated; try again shortly (a rotation that answered an error is finished by repeating it with the same keys)",
                    self.config().name
                ),
                1,
            ));
        }
        if self.handed_over_at().is_some() {
            return Err(DataError::Recovering(
                format!(
                    "database {} is moving to another node; try again shortly",
                    self.config().name
                ),
                1,
            ));
        }
        if self.needs_rebuild() {
            return Err(DataError::Recovering(
                format!(
                    "database {} is being rebuilt from object storage (its files on this node were missing or damaged); try again shortly",
                    self.config().name
                ),
                5,
            ));
        }
        Ok(())
    }

    /// Its log in object storage, where the node has storage.
    pub fn log(&self) -> Option<&Arc<DatabaseLog>> {
        self.log.as_ref()
    }

    /// Whether it waits to be rebuilt from object storage.
    pub fn needs_rebuild(&self) -> bool {
        self.rebuilding.load(Ordering::Acquire)
    }

    pub(crate) fn mark_needs_rebuild(&self) {
        self.rebuilding.store(true, Ordering::Release);
    }

    pub fn write_lock(&self) -> &Arc<WriteLockWatch> {
        &self.write_lock
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// A snapshot of the configuration; re-read at every program run, so flag changes
    /// apply from the next request.
    pub fn config(&self) -> Arc<DatabaseConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Installs a new configuration. Its keys may differ (a rotation), so every token
    /// verified under the old ones is verified again.
    pub(crate) fn set_config(&self, mut config: DatabaseConfig) {
        crate::shared_credentials::share(&mut config);
        // Before its keys: a transfer's new owner never finds the old history served
        // (`transfer_history`).
        if let (Some(log), Some(since)) = (&self.log, config.history_starts_at_ms) {
            log.ask_history(since);
        }
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
        self.verified_tokens.clear();
    }

    /// Verifies a database token against this database's keys at `now` (Unix seconds),
    /// skipping the signature check for a token verified under the same keys within
    /// [`VERIFIED_TOKEN_TTL`]. The expiry is checked every time.
    pub fn verify_token(&self, token: &str, now: i64) -> Result<Claims, JwtError> {
        let digest = token_digest(token);
        if let Some(claims) = self.verified_tokens.get(&digest) {
            if claims.exp.is_some_and(|exp| exp <= now) {
                return Err(JwtError::Expired);
            }
            return Ok(claims);
        }
        // Its keys as the configuration carries them: decoded per verification rather
        // than kept decoded (`verified_signatures::verify`).
        let config = self.config();
        let claims = jwt::verify(token, &config.keys, now)?;
        // Not if the configuration was replaced meanwhile: the token may be signed by a
        // key that is gone.
        self.verified_tokens
            .insert_if(digest, &claims, || Arc::ptr_eq(&config, &self.config()));
        Ok(claims)
    }

    /// Forgets the tokens it verified at least `older_than` ago (no longer trusted past
    /// [`VERIFIED_TOKEN_TTL`]), which only a new request to it would otherwise replace:
    /// on a node with 100,000 databases, those of databases queried once and not since
    /// held ~64 MiB at rest (PERFORMANCE.md, "What a node holds at rest"). Answers whether
    /// it forgot any.
    pub fn forget_verified_tokens(&self, older_than: Duration) -> bool {
        self.verified_tokens.forget_older_than(older_than)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The SQLite file.
    pub fn file_path(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub(crate) fn config_path(&self) -> PathBuf {
        self.dir.join("config.json")
    }

    /// Refuses queries unless the database is active, saying what to do.
    pub fn ensure_queryable(&self) -> Result<(), DataError> {
        self.ensure_confirmed()?;
        self.ensure_held()?;
        let config = self.config();
        match config.state {
            DatabaseState::Active => Ok(()),
            DatabaseState::AwaitingUpload => Err(DataError::Unavailable(format!(
                "database {} is waiting for its upload: send the SQLite file to /v1/upload or the /v2/upload routes first",
                config.name
            ))),
                        DatabaseState::Deleted => Err(DataError::Unavailable(format!(
                "database {} was deleted: an organization admin can restore it for 5 days (POST /v1/organizations/{{org}}/deleted-databases/{{id}}/restore)",
                config.name
            ))),
            DatabaseState::Archived => Err(DataError::Unavailable(format!(

                "database {} is archived with its group: unarchive the group (POST /v1/organizations/{{org}}/groups/{{group}}/unarchive) to use it again",
                config.name
            ))),
        }
    }

    /// Refuses what reads the data wholesale (an export, a dump) while reads are blocked
    /// (`block_reads`, or a quota's read block).
    pub fn ensure_readable(&self) -> Result<(), DataError> {
        let config = self.config();
        if !config.block_reads {
            return Ok(());
        }
        Err(DataError::Forbidden(match &config.block_reason {
            Some(reason) => format!("reads of database {} are blocked: {reason}", config.name),
            None => format!("reads of database {} are blocked", config.name),
        }))
    }

    /// Refuses what writes pages wholesale (pushed offline writes) while writes are blocked
    /// (`block_writes`, or a quota's write block).
    pub fn ensure_writable(&self) -> Result<(), DataError> {
        let config = self.config();
        if !config.block_writes {
            return Ok(());
        }
        Err(DataError::Forbidden(match &config.block_reason {
            Some(reason) => format!("writes to database {} are blocked: {reason}", config.name),
            None => format!("writes to database {} are blocked", config.name),
        }))
    }

    /// Opens a connection for `mode`'s SQL in the sandbox, with the database's size limit;
    /// an encrypted database's with its `key` (checked by the caller), and never without.
    pub fn open_connection(
        &self,
        mode: Mode,
        settings: &SandboxSettings,
        shutdown: &Arc<AtomicBool>,
        key: Option<&atoll_storage::encryption::EncryptionKey>,
    ) -> Result<SandboxedConnection, DataError> {
        let config = self.config();
        let key = match (&config.encryption, key) {
            (Some(_), Some(key)) => Some(key),
            (Some(_), None) => {
                return Err(crate::encryption::not_for_encrypted(
                    &config,
                    "an operation without the database's key",
                ))
            }
            (None, _) => None,
        };
        let size_limit = config.size_limit;
        let file = self.file_path();
        // A file whose writes were shipped must be there: never let SQLite create an empty
        // one in place of a lost one, rebuild it (below, when the open fails).
        let must_exist = self.log.is_some() && config.state == DatabaseState::Active;
        let if_missing = if must_exist {
            sandbox::IfMissing::Fail
        } else {
            sandbox::IfMissing::Create
        };
        let log = self.log.clone();
        let started = crate::thread_clock::cpu_time();
        let opened = sandbox::open(&file, if_missing, mode, settings, shutdown, key, |conn| {
            configure_connection(conn, settings.page_cache_bytes, log.is_some())?;
            if let Some(log) = log {
                if mode != Mode::ReadOnly {
                    // Commit times for point-in-time restore, in commit order (the hook
                    // runs under the write lock).
                    conn.commit_hook(Some(move || {
                        // Handed over (a move): the commit becomes a rollback, and the
                        // client an error, never an acknowledgement of a lost write.
                        if log.is_fenced() {
                            return true;
                        }
                        log.record_commit();
                        false
                    }));
                }
            }
            if let Some(limit) = size_limit {
                let pages = (limit / PAGE_SIZE).max(1);
                conn.pragma_update(None, "max_page_count", pages)?;
            }
            Ok(())
        });
        let opened = match opened {
            Err(_) if must_exist && !file.exists() => {
                self.mark_needs_rebuild();
                return Err(DataError::Recovering(
                    format!(
                        "database {} is being rebuilt from object storage (its file on this node is missing); try again shortly",
                        config.name
                    ),
                    5,
                ));
            }
            opened => opened?,
        };
        self.open_cost
            .record(crate::thread_clock::cpu_time().saturating_sub(started));
        opened.control.watch_open_cost(Arc::clone(&self.open_cost));
        Ok(opened)
    }

    /// Bytes in use: pages in use (page count minus free pages) plus the WAL file.
    pub fn storage_bytes(&self) -> u64 {
        let wal = self.wal_bytes();
        let main = std::fs::metadata(self.file_path())
            .map(|m| m.len())
            .unwrap_or(0);
        main + wal
    }
}

/// How long a verified database token is trusted without checking its signature again.
/// Its expiry is still checked on every request; a key rotation forgets it at once.
pub const VERIFIED_TOKEN_TTL: Duration = Duration::from_secs(60);
/// Tokens remembered per database: most databases see one or two (a database token, a
/// group token), and a bound keeps 100,000 databases' worth small.
const VERIFIED_TOKENS_PER_DATABASE: usize = 4;

/// Recently verified tokens of one database, by SHA-256 of the token. An Ed25519
/// verification costs more than the rest of authenticating a request together, and
/// clients send the same token with every request. Keyed by digest so that a lookup
/// compares fixed-size hashes, never the secret itself.
#[derive(Default)]
struct VerifiedTokens {
    entries: Mutex<Vec<([u8; 32], Claims, Instant)>>,
}

impl VerifiedTokens {
    fn get(&self, digest: &[u8; 32]) -> Option<Claims> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .find(|(d, _, at)| d == digest && at.elapsed() < VERIFIED_TOKEN_TTL)
            .map(|(_, claims, _)| claims.clone())
    }

    /// Remembers `claims` if `still_valid()` holds, asked under the lock that
    /// [`VerifiedTokens::clear`] takes, so a clear cannot slip in between.
    fn insert_if(&self, digest: [u8; 32], claims: &Claims, still_valid: impl FnOnce() -> bool) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if !still_valid() {
            return;
        }
        entries.retain(|(d, _, at)| *d != digest && at.elapsed() < VERIFIED_TOKEN_TTL);
        if entries.len() >= VERIFIED_TOKENS_PER_DATABASE {
            // The oldest goes: entries are kept in insertion order.
            entries.remove(0);
        }
        entries.push((digest, claims.clone(), Instant::now()));
    }

    fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Drops the entries verified at least `older_than` ago, and the list's allocation with
    /// the last; answers whether anything was dropped.
    fn forget_older_than(&self, older_than: Duration) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let before = entries.len();
        entries.retain(|(_, _, at)| at.elapsed() < older_than);
        if entries.is_empty() {
            *entries = Vec::new();
        }
        entries.len() < before
    }
}

fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::tests::claims;

    #[test]
    fn verified_tokens_are_forgotten_once_older_than_asked_and_their_list_freed() {
        let tokens = VerifiedTokens::default();
        tokens.insert_if([1; 32], &claims(), || true);
        tokens.insert_if([2; 32], &claims(), || true);
        // Verified just now: a sweep with the real lifetime keeps them.
        assert!(!tokens.forget_older_than(VERIFIED_TOKEN_TTL));
        assert!(tokens.get(&[1; 32]).is_some());
        assert!(tokens.forget_older_than(Duration::ZERO));
        assert!(tokens.get(&[1; 32]).is_none() && tokens.get(&[2; 32]).is_none());
        let entries = tokens.entries.lock().unwrap();
        assert_eq!(
            entries.capacity(),
            0,
            "the emptied list keeps no allocation"
        );
    }
}
