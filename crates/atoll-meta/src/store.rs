//! [`Store`]: the metadata operations, each one transaction on a blocking thread.

mod audit;
mod client_cas;
mod credential_cache;
mod databases;
mod dumps;
mod groups;
mod identity;
mod invites;
mod jobs;
mod key_sets;
mod members;
mod nodes;
mod organizations;
mod signing_keys;
mod tokens;
mod tombstones;
mod usage;
mod users;

pub use audit::AuditFilter;
pub use databases::{DatabaseChanges, DatabaseFilter, DatabaseInsert};
pub use groups::GroupChanges;
pub use nodes::{NodeHeartbeat, NodeRecord, CONTACT_TIMEOUT_MS, HEARTBEAT_TIMEOUT_MS};
pub use tombstones::Tombstone;
pub use usage::{hour_bucket, InstanceUsageOf, StorageSample, Usage, UsageEntry, UsageHour};
pub use users::{NewGroup, NewUser};

use crate::backend::{Access, Conn, Value};
use crate::error::{Result, StoreError};
use crate::postgres::PostgresBackend;
pub use crate::postgres::DEFAULT_POSTGRES_POOL_SIZE;
use crate::secrets::SecretsKeyring;
use crate::sqlite::SqliteBackend;
use credential_cache::CredentialCache;
use std::path::Path;
use std::sync::Arc;

/// The PostgreSQL channel on which replicas announce credential changes.
const CREDENTIALS_CHANNEL: &str = "atoll_credentials";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Sqlite,
    Postgres,
}

enum Backend {
    Sqlite(Arc<SqliteBackend>),
    Postgres(Box<PostgresBackend>),
}

/// The metadata store. Cheap to clone; every clone shares the connections and the
/// credential cache.
#[derive(Clone)]
pub struct Store {
    backend: Arc<Backend>,
    credentials: Arc<CredentialCache>,
    /// Seals signing keys on their way in and opens them on their way out.
    secrets: Arc<SecretsKeyring>,
}

impl Store {
    fn with_backend(backend: Backend) -> Store {
        Store {
            backend: Arc::new(backend),
            credentials: Arc::new(CredentialCache::new(
                credential_cache::CAPACITY,
                credential_cache::TTL,
            )),
            secrets: Arc::new(SecretsKeyring::plaintext()),
        }
    }

    /// This store, sealing signing keys with `keyring` from now on (a new store keeps
    /// them in the clear until given one). Run [`Store::seal_signing_keys`] after it so
    /// what older versions or previous keys wrote is sealed under the current key.
    pub fn with_secrets(mut self, keyring: SecretsKeyring) -> Store {
        self.secrets = Arc::new(keyring);
        self
    }

    /// The keyring, for an operation's closure.
    fn secrets(&self) -> Arc<SecretsKeyring> {
        Arc::clone(&self.secrets)
    }

    /// Opens (creating if needed) the embedded SQLite store at `path` and migrates it.
    pub async fn open_sqlite(path: &Path) -> Result<Store> {
        let path = path.to_path_buf();
        let backend = blocking(move || SqliteBackend::open(&path)).await?;
        let store = Store::with_backend(Backend::Sqlite(Arc::new(backend)));
        store.migrate().await?;
        Ok(store)
    }

    /// Connects to PostgreSQL (`postgres://…`) with a pool of the default size and
    /// migrates the schema.
    pub async fn connect_postgres(url: &str) -> Result<Store> {
        Store::connect_postgres_with(url, DEFAULT_POSTGRES_POOL_SIZE).await
    }

    /// Connects to PostgreSQL with a pool of at most `pool_size` connections (requests
    /// beyond it wait for one) and migrates the schema.
    pub async fn connect_postgres_with(url: &str, pool_size: usize) -> Result<Store> {
        let backend = PostgresBackend::connect(url, pool_size).await?;
        let store = Store::with_backend(Backend::Postgres(Box::new(backend)));
        store.migrate().await?;
        store.listen_for_credential_changes();
        Ok(store)
    }

    /// Picks the backend from a database URL: `postgres://` or `postgresql://` for
    /// PostgreSQL, `sqlite://<path>` or a plain path for SQLite.
    pub async fn open(url: &str) -> Result<Store> {
        Store::open_with(url, DEFAULT_POSTGRES_POOL_SIZE).await
    }

    /// [`Store::open`], with at most `pool_size` connections to PostgreSQL (the SQLite
    /// store has one writer and readers of its own).
    pub async fn open_with(url: &str, pool_size: usize) -> Result<Store> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Store::connect_postgres_with(url, pool_size).await
        } else {
            let path = url.strip_prefix("sqlite://").unwrap_or(url);
            Store::open_sqlite(Path::new(path)).await
        }
    }

    pub fn kind(&self) -> BackendKind {
        match &*self.backend {
            Backend::Sqlite(_) => BackendKind::Sqlite,
            Backend::Postgres(_) => BackendKind::Postgres,
        }
    }

    /// Applies the migrations this binary knows and the store has not seen. Safe to run
    /// from several processes at once.
    pub async fn migrate(&self) -> Result<()> {
        match &*self.backend {
            Backend::Sqlite(b) => {
                let b = Arc::clone(b);
                blocking(move || b.migrate()).await
            }
            Backend::Postgres(b) => b.migrate().await,
        }
    }

    async fn read<R: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Conn) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.run(op, Access::Read, f).await
    }

    async fn write<R: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Conn) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.run(op, Access::Write, f).await
    }

    /// A write that revokes tokens or changes what a credential may do: once it has run,
    /// no request in this process authenticates with what the credential cache held.
    async fn write_affecting_credentials<R: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Conn) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let postgres = self.kind() == BackendKind::Postgres;
        let result = self
            .run(op, Access::Write, move |c| {
                let value = f(c)?;
                // Every other replica empties its cache when this commits (delivered at
                // commit, not at all on rollback); see `listen_for_credential_changes`.
                if postgres {
                    c.execute("SELECT pg_notify($1, '')", &[CREDENTIALS_CHANNEL.into()])?;
                }
                Ok(value)
            })
            .await;
        // Even after a failure: the transaction may have committed before the error
        // reached us (a lost connection on commit), and an extra miss costs little.
        self.credentials.invalidate_all();
        result
    }

    /// Empties this replica's credential cache whenever another replica (or this one)
    /// commits a change to what a credential may do, through PostgreSQL `LISTEN/NOTIFY`,
    /// so a revocation applies on every replica at once; the cache's TTL stays as the
    /// fallback. A task of its own holds the listening connection: it reconnects when
    /// the connection is lost and ends when the store is dropped. Until it listens (at
    /// first, and while it reconnects) the cache is suspended: notifications may be missed
    /// meanwhile, so every lookup reads the store.
    fn listen_for_credential_changes(&self) {
        let Backend::Postgres(backend) = &*self.backend else {
            return;
        };
        let config = backend.config().clone();
        self.credentials.suspend();
        let cache = Arc::downgrade(&self.credentials);
        tokio::spawn(async move {
            loop {
                let Some(live) = cache.upgrade() else { return };
                live.suspend();
                drop(live);
                let listened = listen_once(&config, &cache).await;
                if cache.upgrade().is_none() {
                    return;
                }
                if let Err(e) = listened {
                    tracing::warn!(error = %e, "lost the credential-change listener; reconnecting");
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
    }

    /// The one path every operation takes: a blocking thread, one transaction, and one
    /// log line naming the operation when it fails.
    async fn run<R: Send + 'static>(
        &self,
        op: &'static str,
        access: Access,
        f: impl FnOnce(&mut dyn Conn) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let started = std::time::Instant::now();
        let result = match &*self.backend {
            Backend::Sqlite(b) => {
                let b = Arc::clone(b);
                blocking(move || b.transaction(access, f)).await
            }
            Backend::Postgres(b) => b.transaction(access, f).await,
        };
        // Operation names are a fixed set: a bounded label.
        metrics::histogram!("atoll_store_operation_duration_seconds", "operation" => op)
            .record(started.elapsed().as_secs_f64());
        match &result {
            Err(StoreError::Unavailable(cause) | StoreError::Unreachable(cause)) => {
                tracing::error!(operation = op, %cause, "metadata store operation failed");
            }
            Err(StoreError::Secrets(cause)) => {
                tracing::error!(operation = op, %cause, "cannot open a sealed signing key");
            }
            _ => {}
        }
        result
    }
}

/// One listening connection, until it is lost (an error) or the cache is dropped.
async fn listen_once(
    config: &tokio_postgres::Config,
    cache: &std::sync::Weak<CredentialCache>,
) -> std::result::Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tokio_postgres::NoTls).await?;
    // Notifications come out of the connection, which a task of its own drives.
    let (notified, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(_))) => {
                    if notified.send(()).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {CREDENTIALS_CHANNEL}"))
        .await?;
    // Every change committed from here on is notified: what the cache may hold from
    // before goes, and it caches again.
    match cache.upgrade() {
        Some(live) => live.resume(),
        None => {
            driver.abort();
            return Ok(());
        }
    }
    loop {
        // Woken now and then to notice a dropped store.
        let next =
            tokio::time::timeout(std::time::Duration::from_secs(5), notifications.recv()).await;
        let Some(live) = cache.upgrade() else {
            driver.abort();
            return Ok(());
        };
        match next {
            Ok(Some(())) => live.invalidate_all(),
            Ok(None) => break,
            Err(_) => {}
        }
    }
    match driver.await {
        Ok(ended) => ended,
        // Not aborted here: only a panic of the driver.
        Err(_) => Ok(()),
    }
}

pub(crate) async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> Result<R> + Send + 'static,
) -> Result<R> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Unavailable(format!("store task failed: {e}")))?
}

pub(crate) fn apply_migrations(conn: &mut dyn Conn, migrations: &[(i64, &str)]) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    BIGINT PRIMARY KEY,
             applied_at BIGINT NOT NULL
         )",
    )?;
    // Every migration not applied yet, by version (not "above the highest": a migration
    // merged from a parallel branch may carry a lower number than one already applied).
    let applied: Vec<i64> = conn
        .query("SELECT version FROM schema_migrations", &[])?
        .iter()
        .map(|row| row.int(0))
        .collect();
    for (version, script) in migrations {
        if applied.contains(version) {
            continue;
        }
        conn.execute_batch(script)
            .map_err(|e| StoreError::Unavailable(format!("migration {version} failed: {e}")))?;
        conn.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
            &[Value::Int(*version), Value::Int(crate::now_millis())],
        )?;
    }
    Ok(())
}

pub(crate) fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}
