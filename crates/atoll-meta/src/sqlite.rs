//! The embedded backend: one libSQL file in WAL mode, one writer connection and a small
//! pool of readers.

use crate::backend::{Access, Conn, Row, Value};
use crate::error::{Result, StoreError};
use rusqlite::{types::ValueRef, Connection, ErrorCode};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/sqlite/0001_identity.sql")),
    (2, include_str!("migrations/sqlite/0002_databases.sql")),
    (
        3,
        include_str!("migrations/sqlite/0003_deleted_databases.sql"),
    ),
    (4, include_str!("migrations/sqlite/0004_usage.sql")),
    (5, include_str!("migrations/sqlite/0005_audit_logs.sql")),
    (6, include_str!("migrations/sqlite/0006_jobs.sql")),
    (
        7,
        include_str!("migrations/sqlite/0007_isolation_control.sql"),
    ),
    (9, include_str!("migrations/sqlite/0009_store_identity.sql")),
    (10, include_str!("migrations/sqlite/0010_intent.sql")),
    (11, include_str!("migrations/sqlite/0011_nodes.sql")),
    (12, include_str!("migrations/sqlite/0012_durability.sql")),
    (13, include_str!("migrations/sqlite/0013_org_jwks.sql")),
    (14, include_str!("migrations/sqlite/0014_client_cas.sql")),
    (
        15,
        include_str!("migrations/sqlite/0015_node_registration.sql"),
    ),
    (
        17,
        include_str!("migrations/sqlite/0017_storage_samples.sql"),
    ),
    (18, include_str!("migrations/sqlite/0018_write_leases.sql")),
    (
        19,
        include_str!("migrations/sqlite/0019_instance_usage.sql"),
    ),
    (20, include_str!("migrations/sqlite/0020_history_start.sql")),
    (
        21,
        include_str!("migrations/sqlite/0021_remote_encryption.sql"),
    ),
];
const MAX_IDLE_READERS: usize = 8;

pub(crate) struct SqliteBackend {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
}

impl SqliteBackend {
    pub(crate) fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let writer = open_connection(path)?;
        Ok(SqliteBackend {
            path: path.to_path_buf(),
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn migrate(&self) -> Result<()> {
        self.transaction(Access::Write, |conn| {
            crate::store::apply_migrations(conn, MIGRATIONS)
        })
    }

    /// Rewrites the file without free pages and empties the WAL, so rows replaced by the
    /// last transactions (plaintext signing keys before they were sealed) no longer sit
    /// in the files on disk.
    pub(crate) fn erase_replaced_content(&self) -> Result<()> {
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        writer.execute_batch("VACUUM").map_err(map_error)?;
        writer
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(map_error)
    }

    pub(crate) fn transaction<R>(
        &self,
        access: Access,
        op: impl FnOnce(&mut dyn Conn) -> Result<R>,
    ) -> Result<R> {
        match access {
            Access::Write => {
                let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
                // IMMEDIATE takes the write lock up front, so a transaction never fails
                // half-way because another process wrote first.
                run_in_transaction(&mut writer, "BEGIN IMMEDIATE", op)
            }
            Access::Read => {
                let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
                let mut reader = match pooled {
                    Some(conn) => conn,
                    None => open_connection(&self.path)?,
                };
                let result = run_in_transaction(&mut reader, "BEGIN", op);
                let mut idle = self.readers.lock().unwrap_or_else(|p| p.into_inner());
                if idle.len() < MAX_IDLE_READERS {
                    idle.push(reader);
                }
                result
            }
        }
    }
}

fn open_connection(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path).map_err(map_error)?;
    // WAL lets readers run beside the writer; NORMAL sync keeps every committed
    // transaction across a process crash (only an OS crash may lose the last ones).
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         PRAGMA foreign_keys = ON;
         PRAGMA busy_timeout = 5000;",
    )
    .map_err(map_error)?;
    Ok(conn)
}

fn run_in_transaction<R>(
    conn: &mut Connection,
    begin: &str,
    op: impl FnOnce(&mut dyn Conn) -> Result<R>,
) -> Result<R> {
    conn.execute_batch(begin).map_err(map_error)?;
    let mut session = SqliteConn { conn };
    match op(&mut session) {
        Ok(value) => {
            if let Err(e) = session.conn.execute_batch("COMMIT") {
                let _ = session.conn.execute_batch("ROLLBACK");
                return Err(map_error(e));
            }
            Ok(value)
        }
        Err(e) => {
            let _ = session.conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

struct SqliteConn<'a> {
    conn: &'a mut Connection,
}

impl Conn for SqliteConn<'_> {
    fn execute_batch(&mut self, sql: &str) -> Result<()> {
        self.conn.execute_batch(sql).map_err(map_error)
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        let sql = numbered_placeholders(sql);
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_error)?;
        let changed = stmt
            .execute(rusqlite::params_from_iter(params.iter().map(to_sqlite)))
            .map_err(map_error)?;
        Ok(changed as u64)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let sql = numbered_placeholders(sql);
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_error)?;
        let columns = stmt.column_count();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter().map(to_sqlite)))
            .map_err(map_error)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(map_error)? {
            let mut values = Vec::with_capacity(columns);
            for i in 0..columns {
                values.push(match row.get_ref(i).map_err(map_error)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(v) => Value::Int(v),
                    ValueRef::Real(v) => Value::Int(v as i64),
                    ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Value::Text(String::from_utf8_lossy(b).into_owned()),
                });
            }
            out.push(Row(values));
        }
        Ok(out)
    }
}

fn to_sqlite(value: &Value) -> rusqlite::types::Value {
    match value {
        Value::Null => rusqlite::types::Value::Null,
        Value::Int(v) => rusqlite::types::Value::Integer(*v),
        Value::Text(t) => rusqlite::types::Value::Text(t.clone()),
    }
}

/// `$1` → `?1`. SQLite reads `$1` as a *named* parameter numbered by first appearance,
/// which silently misbinds a statement that mentions `$2` before `$1`.
fn numbered_placeholders(sql: &str) -> String {
    sql.replace('$', "?")
}

fn map_error(e: rusqlite::Error) -> StoreError {
    if let rusqlite::Error::SqliteFailure(failure, message) = &e {
        if failure.code == ErrorCode::ConstraintViolation {
            let detail = message.clone().unwrap_or_else(|| e.to_string());
            if detail.contains("UNIQUE") || detail.contains("PRIMARY KEY") {
                return StoreError::Duplicate(detail);
            }
        }
    }
    StoreError::Unavailable(e.to_string())
}
