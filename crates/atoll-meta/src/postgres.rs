//! The PostgreSQL backend for `atoll serve`: many stateless control-plane replicas share
//! one PostgreSQL database.
//!
//! The store's operations are written once, as synchronous closures over [`Conn`], and run
//! on blocking threads for both backends. Here each statement of such a closure is sent
//! through an async `tokio-postgres` connection from a bounded `deadpool` pool: a request
//! waits for a connection in the async pool (not on a blocking thread), every statement
//! is prepared once per connection, and a read runs its statements without a transaction
//! (see [`PostgresBackend::transaction`]).

use crate::backend::{Access, Conn, Row, Value};
use crate::error::{Result, StoreError};
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use tokio_postgres::NoTls;
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/postgres/0001_identity.sql")),
    (2, include_str!("migrations/postgres/0002_databases.sql")),
    (
        3,
        include_str!("migrations/postgres/0003_deleted_databases.sql"),
    ),
    (4, include_str!("migrations/postgres/0004_usage.sql")),
    (5, include_str!("migrations/postgres/0005_audit_logs.sql")),
    (6, include_str!("migrations/postgres/0006_jobs.sql")),
    (
        7,
        include_str!("migrations/postgres/0007_isolation_control.sql"),
    ),
    (
        9,
        include_str!("migrations/postgres/0009_store_identity.sql"),
    ),
    (10, include_str!("migrations/postgres/0010_intent.sql")),
    (11, include_str!("migrations/postgres/0011_nodes.sql")),
    (12, include_str!("migrations/postgres/0012_durability.sql")),
    (13, include_str!("migrations/postgres/0013_org_jwks.sql")),
    (14, include_str!("migrations/postgres/0014_client_cas.sql")),
    (
        15,
        include_str!("migrations/postgres/0015_node_registration.sql"),
    ),
    (
        17,
        include_str!("migrations/postgres/0017_storage_samples.sql"),
    ),
    (
        18,
        include_str!("migrations/postgres/0018_write_leases.sql"),
    ),
    (
        19,
        include_str!("migrations/postgres/0019_instance_usage.sql"),
    ),
    (
        20,
        include_str!("migrations/postgres/0020_history_start.sql"),
    ),
    (
        21,
        include_str!("migrations/postgres/0021_remote_encryption.sql"),
    ),
];
/// Connections a process opens to PostgreSQL by default (`--database-pool-size`).
pub const DEFAULT_POSTGRES_POOL_SIZE: usize = 16;
/// How long an operation waits for a free connection before it fails.
const POOL_WAIT: Duration = Duration::from_secs(10);
/// Serialises migrations of several replicas starting at once (an arbitrary constant).
const MIGRATION_LOCK_KEY: i64 = 0x4154_4f4c_4c00;

pub(crate) struct PostgresBackend {
    config: tokio_postgres::Config,
    pool: Pool,
}

impl PostgresBackend {
    /// Connects a pool of at most `pool_size` connections to `url`; fails now, not at the
    /// first request, when the server is unreachable.
    pub(crate) async fn connect(url: &str, pool_size: usize) -> Result<Self> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Unavailable(format!("invalid PostgreSQL URL: {e}")))?;
        // An unreachable server must fail a request, not hang it (the URL may set its own).
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                // A closed connection is dropped when it comes back; anything else about
                // it is the next statement's to find out.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .wait_timeout(Some(POOL_WAIT))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Unavailable(format!("PostgreSQL pool: {e}")))?;
        let backend = PostgresBackend { config, pool };
        drop(backend.connection().await?);
        Ok(backend)
    }

    /// How to connect (for a connection of its own, such as a `LISTEN`).
    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    async fn connection(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(|e| match e {
            // Overloaded, not broken: a retry may well find a connection (503).
            PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => {
                StoreError::Unreachable(format!(
                    "all {} connections to PostgreSQL stayed busy for {} s (--database-pool-size)",
                    self.pool.status().max_size,
                    POOL_WAIT.as_secs()
                ))
            }
            PoolError::Backend(e) => {
                StoreError::Unreachable(format!("cannot connect to PostgreSQL: {e}"))
            }
            other => StoreError::Unreachable(format!("cannot connect to PostgreSQL: {other}")),
        })
    }

    pub(crate) async fn migrate(&self) -> Result<()> {
        self.transaction(Access::Write, |conn| {
            conn.query(
                "SELECT pg_advisory_xact_lock($1)",
                &[Value::Int(MIGRATION_LOCK_KEY)],
            )?;
            crate::store::apply_migrations(conn, MIGRATIONS)
        })
        .await
    }

    /// Runs `op` on a connection of the pool, on a blocking thread. A write is one
    /// transaction. A read runs each statement on its own: under PostgreSQL's READ
    /// COMMITTED every statement of a transaction sees a snapshot of its own anyway, so
    /// `BEGIN READ ONLY … COMMIT` around a read bought two round trips and no consistency.
    pub(crate) async fn transaction<R: Send + 'static>(
        &self,
        access: Access,
        op: impl FnOnce(&mut dyn Conn) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let mut client = self.connection().await?;
        let runtime = Handle::current();
        crate::store::blocking(move || {
            if access == Access::Read {
                return op(&mut PgConn {
                    runtime: &runtime,
                    client: &client,
                });
            }
            let tx = runtime
                .block_on(GenericClient::transaction(&mut client))
                .map_err(map_error)?;
            let value = op(&mut PgConn {
                runtime: &runtime,
                client: &tx,
            })?;
            runtime.block_on(tx.commit()).map_err(map_error)?;
            Ok(value)
        })
        .await
    }
}

/// A connection (a read) or a transaction (a write) of the pool, driven from a blocking
/// thread: each statement is awaited on the runtime that drives the connection.
struct PgConn<'a, C> {
    runtime: &'a Handle,
    client: &'a C,
}

impl<C: GenericClient> PgConn<'_, C> {
    /// `sql`, prepared on this connection the first time it runs there.
    fn prepared(&self, sql: &str) -> Result<tokio_postgres::Statement> {
        self.runtime
            .block_on(self.client.prepare_cached(sql))
            .map_err(map_error)
    }
}

impl<C: GenericClient> Conn for PgConn<'_, C> {
    fn execute_batch(&mut self, sql: &str) -> Result<()> {
        self.runtime
            .block_on(self.client.batch_execute(sql))
            .map_err(map_error)
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        let statement = self.prepared(sql)?;
        let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        self.runtime
            .block_on(self.client.execute(&statement, &params))
            .map_err(map_error)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let statement = self.prepared(sql)?;
        let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        let rows = self
            .runtime
            .block_on(self.client.query(&statement, &params))
            .map_err(map_error)?;
        rows.iter().map(convert_row).collect()
    }
}

fn convert_row(row: &tokio_postgres::Row) -> Result<Row> {
    let mut values = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let value = if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(i).map(|v| v.map(Value::Int))
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(i)
                .map(|v| v.map(|v| Value::Int(v.into())))
        } else if *ty == Type::INT2 {
            row.try_get::<_, Option<i16>>(i)
                .map(|v| v.map(|v| Value::Int(v.into())))
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(i)
                .map(|v| v.map(|v| Value::Int(v.into())))
        } else if *ty == Type::VOID {
            Ok(None)
        } else {
            row.try_get::<_, Option<String>>(i)
                .map(|v| v.map(Value::Text))
        }
        .map_err(|e| StoreError::Unavailable(format!("column {}: {e}", column.name())))?;
        values.push(value.unwrap_or(Value::Null));
    }
    Ok(Row(values))
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut tokio_postgres::types::private::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(v) if *ty == Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
            Value::Int(v) if *ty == Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
            Value::Int(v) if *ty == Type::BOOL => (*v != 0).to_sql(ty, out),
            Value::Int(v) => v.to_sql(ty, out),
            Value::Text(t) => t.to_sql(ty, out),
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn map_error(e: tokio_postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        if *db.code() == SqlState::UNIQUE_VIOLATION {
            return StoreError::Duplicate(db.constraint().unwrap_or("unique").to_string());
        }
    }
    // `Display` of a server error is only "db error": say which.
    match e.as_db_error() {
        // The server ended the connection or cannot take one now (a restart, a failover,
        // `pg_terminate_backend`): a retry on a new connection may well succeed (503).
        Some(db) if ends_the_connection(db.code()) => {
            StoreError::Unreachable(format!("{e}: {} ({})", db.message(), db.code().code()))
        }
        Some(db) => {
            StoreError::Unavailable(format!("{e}: {} ({})", db.message(), db.code().code()))
        }
        // Not an answer of the server: the connection is gone (or never was).
        None => StoreError::Unreachable(e.to_string()),
    }
}

/// Whether a server error says the connection is gone or none can be had now, rather than
/// that the statement is wrong: class 08 (connection exception), `admin_shutdown` (57P01,
/// what a restart, a failover or `pg_terminate_backend` sends), `crash_shutdown`,
/// `cannot_connect_now` (starting up or in recovery) and `too_many_connections`.
fn ends_the_connection(code: &SqlState) -> bool {
    code.code().starts_with("08")
        || [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
        ]
        .contains(code)
}
