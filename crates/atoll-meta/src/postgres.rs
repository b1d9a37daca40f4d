//! The PostgreSQL backend for `atoll serve`: many stateless control-plane replicas share
//! one PostgreSQL database. Uses the synchronous `postgres` client on blocking threads,
//! like the SQLite backend, so the operations are written once.

use crate::backend::{Access, Conn, Row, Value};
use crate::error::{Result, StoreError};
use postgres::error::SqlState;
use postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use postgres::{Client, NoTls};
use std::sync::Mutex;

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
];
const MAX_IDLE_CONNECTIONS: usize = 16;
/// Serialises migrations of several replicas starting at once (an arbitrary constant).
const MIGRATION_LOCK_KEY: i64 = 0x4154_4f4c_4c00;

pub(crate) struct PostgresBackend {
    config: postgres::Config,
    idle: Mutex<Vec<Client>>,
}

impl PostgresBackend {
    pub(crate) fn connect(url: &str) -> Result<Self> {
        let mut config: postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Unavailable(format!("invalid PostgreSQL URL: {e}")))?;
        // An unreachable server must fail a request, not hang it (the URL may set its own).
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(5));
        }
        let backend = PostgresBackend {
            config,
            idle: Mutex::new(Vec::new()),
        };
        // Fail at start, not at the first request, when the server is unreachable.
        let client = backend.new_client()?;
        backend.release(client);
        Ok(backend)
    }

    /// How to connect (for a connection of its own, such as a `LISTEN`).
    pub(crate) fn config(&self) -> &postgres::Config {
        &self.config
    }

    fn new_client(&self) -> Result<Client> {
        self.config
            .connect(NoTls)
            .map_err(|e| StoreError::Unreachable(format!("cannot connect to PostgreSQL: {e}")))
    }

    fn release(&self, client: Client) {
        if client.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE_CONNECTIONS {
            idle.push(client);
        }
    }

    pub(crate) fn migrate(&self) -> Result<()> {
        self.transaction(Access::Write, |conn| {
            conn.query(
                "SELECT pg_advisory_xact_lock($1)",
                &[Value::Int(MIGRATION_LOCK_KEY)],
            )?;
            crate::store::apply_migrations(conn, MIGRATIONS)
        })
    }

    pub(crate) fn transaction<R>(
        &self,
        access: Access,
        op: impl FnOnce(&mut dyn Conn) -> Result<R>,
    ) -> Result<R> {
        let pooled = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut client = match pooled {
            Some(client) => client,
            None => self.new_client()?,
        };
        let result = run_in_transaction(&mut client, access, op);
        self.release(client);
        result
    }
}

fn run_in_transaction<R>(
    client: &mut Client,
    access: Access,
    op: impl FnOnce(&mut dyn Conn) -> Result<R>,
) -> Result<R> {
    let mut builder = client.build_transaction();
    if access == Access::Read {
        builder = builder.read_only(true);
    }
    let mut tx = builder.start().map_err(map_error)?;
    let value = op(&mut PgConn { tx: &mut tx })?;
    tx.commit().map_err(map_error)?;
    Ok(value)
}

struct PgConn<'a, 'b> {
    tx: &'a mut postgres::Transaction<'b>,
}

impl Conn for PgConn<'_, '_> {
    fn execute_batch(&mut self, sql: &str) -> Result<()> {
        self.tx.batch_execute(sql).map_err(map_error)
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        self.tx.execute(sql, &params).map_err(map_error)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        let rows = self.tx.query(sql, &params).map_err(map_error)?;
        rows.iter().map(convert_row).collect()
    }
}

fn convert_row(row: &postgres::Row) -> Result<Row> {
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
        out: &mut postgres::types::private::BytesMut,
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

fn map_error(e: postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        if *db.code() == SqlState::UNIQUE_VIOLATION {
            return StoreError::Duplicate(db.constraint().unwrap_or("unique").to_string());
        }
    }
    // `Display` of a server error is only "db error": say which.
    match e.as_db_error() {
        Some(db) => {
            StoreError::Unavailable(format!("{e}: {} ({})", db.message(), db.code().code()))
        }
        // Not an answer of the server: the connection is gone (or never was).
        None => StoreError::Unreachable(e.to_string()),
    }
}

impl Drop for PostgresBackend {
    /// Closing a synchronous client blocks on its own runtime, which panics on an async
    /// worker thread; the store may well be dropped there, so the clients close on a
    /// thread of their own.
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|p| p.into_inner()));
        if !idle.is_empty() {
            let _ = std::thread::Builder::new()
                .name("atoll-pg-close".into())
                .spawn(move || drop(idle));
        }
    }
}
