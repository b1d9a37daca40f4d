//! A bootstrap's pages from the live database: a consistent copy taken in one read
//! transaction (SQLite's online backup, as `GET /export/1`), together with the position
//! in the log that transaction saw. Rebuilding the database from object storage gives the
//! same pages but reads every object of its log; the copy costs one pass over the file.

use crate::database::Database;
use crate::error::DataError;
use crate::export::backup_into;
use crate::node::Node;
use crate::replication::follow::Replica;
use crate::sandbox::Mode;
use atoll_storage::shipper::DatabaseLog;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Tries to pin a read transaction to a known position this many times while writers
/// commit in between.
const ATTEMPTS: usize = 5;

/// A copy of the database as of log position `revision`, unlinked already where the
/// system allows (it goes away when the file is closed).
pub struct LiveCopy {
    pub file: std::fs::File,
    pub revision: u64,
    path: Option<PathBuf>,
}

impl Drop for LiveCopy {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The copy, or `None` when its position cannot be told (no log, the WAL index not
/// readable, or writers committing throughout every attempt): the caller rebuilds from
/// object storage instead. Runs on a SQL thread.
pub fn take(node: &Node, db: &Database) -> Result<Option<LiveCopy>, DataError> {
    let Some(log) = db.log() else {
        return Ok(None);
    };
    let path = db
        .dir()
        .join(format!(".sync-{}", uuid::Uuid::new_v4().simple()));
    let source = node.pool.checkout(db, Mode::ReadOnly, None)?;
    // Atoll's own statements (a transaction, a pragma, the backup), not tenant SQL.
    let copied = source
        .control
        .trusted(|| copy_at_known_position(&source.conn, log, &path));
    node.pool.checkin(db, source);
    let revision = match copied {
        Ok(Some(revision)) => revision,
        Ok(None) => return Ok(None),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
    };
    let file = std::fs::File::open(&path)?;
    let path = match std::fs::remove_file(&path) {
        Ok(()) => None,
        Err(_) => Some(path),
    };
    Ok(Some(LiveCopy {
        file,
        revision,
        path,
    }))
}

/// The copy of a replica's file, as of the frame it has applied (the primary's log
/// position that state is at). Runs on a SQL thread.
pub fn take_replica(node: &Node, replica: &Replica) -> Result<LiveCopy, DataError> {
    let db = &replica.db;
    let path = db
        .dir()
        .join(format!(".sync-{}", uuid::Uuid::new_v4().simple()));
    let source = node.pool.checkout(db, Mode::ReadOnly, None)?;
    let copied = source.control.trusted(|| {
        source.conn.execute_batch("BEGIN")?;
        let within = (|| -> Result<(u32, u64), DataError> {
            // No batch is applied while the read transaction starts: it sees the copy
            // exactly at the frame applied.
            let held = replica.hold_applied();
            let schema_version: u32 =
                source
                    .conn
                    .query_row("PRAGMA schema_version", [], |row| row.get(0))?;
            let revision = replica.applied();
            drop(held);
            backup_into(&source.conn, &path)?;
            Ok((schema_version, revision))
        })();
        source.conn.execute_batch("ROLLBACK")?;
        within
    });
    node.pool.checkin(db, source);
    let revision = match copied.and_then(|(schema_version, revision)| {
        restore_schema_cookie(&path, schema_version)?;
        Ok(revision)
    }) {
        Ok(revision) => revision,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
    };
    let file = std::fs::File::open(&path)?;
    let path = match std::fs::remove_file(&path) {
        Ok(()) => None,
        Err(_) => Some(path),
    };
    Ok(LiveCopy {
        file,
        revision,
        path,
    })
}

/// Opens a read transaction between two identical readings of the committed head (so
/// nothing committed in between: the transaction sees exactly that position), copies the
/// database inside it, and answers the position.
fn copy_at_known_position(
    conn: &rusqlite::Connection,
    log: &DatabaseLog,
    path: &Path,
) -> Result<Option<u64>, DataError> {
    for _ in 0..ATTEMPTS {
        let Some(before) = log.committed_head() else {
            return Ok(None);
        };
        conn.execute_batch("BEGIN")?;
        let within = (|| -> Result<Option<u32>, DataError> {
            // Reading the schema cookie starts the read transaction.
            let schema_version: u32 =
                conn.query_row("PRAGMA schema_version", [], |row| row.get(0))?;
            if log.committed_head() != Some(before) {
                return Ok(None);
            }
            // The backup reads through the transaction the connection holds.
            backup_into(conn, path)?;
            Ok(Some(schema_version))
        })();
        conn.execute_batch("ROLLBACK")?;
        match within {
            Ok(Some(schema_version)) => {
                restore_schema_cookie(path, schema_version)?;
                return Ok(Some(before));
            }
            Ok(None) => {
                let _ = std::fs::remove_file(path);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// SQLite's backup bumps the copy's schema cookie (header offset 40); the client must see
/// the database's own, so that the cookie changes exactly when the schema does.
fn restore_schema_cookie(path: &Path, schema_version: u32) -> Result<(), DataError> {
    let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.seek(SeekFrom::Start(40))?;
    file.write_all(&schema_version.to_be_bytes())?;
    Ok(())
}
