//! Rotating the key of a database encrypted with its customer's key (beyond Turso;
//! docs/ENCRYPTION.md, "Rotation"): every page written again under the new key, in one
//! transaction, while the database answers 503.
//!
//! Order of a rotation, and what a kill at each step leaves:
//! 1. The marker file (`KEY_ROTATION_MARKER`) is written and synced: from here on,
//!    also after a restart, the database refuses requests until a rotation completes.
//! 2. Idle connections (under the old key) are closed.
//! 3. One connection that opens pages under either key and seals under the new one
//!    (`atoll_storage::encryption::engine::open_rotating`) rewrites every page in one
//!    write transaction. Killed before its commit: the database is whole under the old
//!    key; after: whole under the new one. Either way the same rotation, repeated,
//!    finishes it — which is why the marker stays until it has.
//! 4. The configuration with the new key's verifier is installed, the connections opened
//!    meanwhile are closed, the marker removed.
//!
//! A connection checked out before step 1 (a request in flight, an interactive stream)
//! keeps the old key: once it reads a rewritten page it fails its tag, and its request
//! answers an error. The rotation's frames ship like any commit's, so the history in
//! object storage holds the old key's pages before the rotation and the new key's after.

use crate::database::{Database, KEY_ROTATION_MARKER};
use crate::error::{DataError, EncryptionRefusal};
use crate::node::Node;
use atoll_storage::encryption::{engine, Cipher, EncryptionKey, Verifier};
use atoll_types::node::{EncryptionKeyRotated, RotateEncryptionKey};
use rusqlite::OpenFlags;
use std::sync::Arc;
use std::time::Duration;

/// How long the rotation waits for a writer that holds the database's write lock.
const WRITE_LOCK_WAIT: Duration = Duration::from_secs(30);

/// Re-encrypts `db` from the key `current` (base64, of `order.from_cipher`) to `new`
/// (base64, of the cipher `order.config` names). Runs on a blocking thread.
pub fn rotate(
    node: &Node,
    db: &Arc<Database>,
    order: RotateEncryptionKey,
    current: &str,
    new: &str,
) -> Result<EncryptionKeyRotated, DataError> {
    let config = db.config();
    if config.encryption.is_none() {
        return Err(crate::encryption::not_encrypted(&config));
    }
    let RotateEncryptionKey {
        from_cipher,
        config: rotated,
    } = order;
    if rotated.id != config.id || rotated.encryption.is_none() {
        return Err(DataError::BadRequest(
            "the rotated configuration must be this database's, encrypted".into(),
        ));
    }
    let new_key = crate::encryption::key_for(&rotated, new)?;
    let current_key = current_key(&config, &rotated, &from_cipher, current)?;
    if new_key.cipher().reserved_bytes() != current_key.cipher().reserved_bytes() {
        return Err(DataError::BadRequest(format!(
            "a rotation keeps the layout of the pages: {} and {} reserve different bytes per page",
            current_key.cipher().name(),
            new_key.cipher().name()
        )));
    }

    let marker = db.dir().join(KEY_ROTATION_MARKER);
    write_synced(&marker)?;
    db.set_rotating_key(true);
    node.pool.forget(db.id());

    let rewritten = rewrite(db, &current_key, &new_key);
    let pages = match rewritten {
        Ok(pages) => pages,
        Err(Rewrite::NotCommitted(e)) => {
            // Nothing was written: the database is whole under its current key.
            let _ = std::fs::remove_file(&marker);
            db.set_rotating_key(false);
            return Err(e);
        }
        // Unknown whether it committed: the marker stays, the database refuses requests
        // until the rotation is repeated.
        Err(Rewrite::Unknown(e)) => return Err(e),
    };
    node.configure(rotated)?;
    node.pool.forget(db.id());
    std::fs::remove_file(&marker)?;
    db.set_rotating_key(false);
    tracing::info!(database = %db.id(), pages, "encryption key rotated");
    Ok(EncryptionKeyRotated { pages })
}

/// The current key, checked: the verifier the node has, or — the node was configured
/// with the new key before (a repeated rotation, or the control plane's push ran first) —
/// taken as given: a wrong one then fails the pages' tags and nothing is written.
fn current_key(
    config: &atoll_types::node::DatabaseConfig,
    rotated: &atoll_types::node::DatabaseConfig,
    from_cipher: &str,
    text: &str,
) -> Result<EncryptionKey, DataError> {
    let cipher =
        Cipher::from_name(from_cipher).map_err(|e| DataError::BadRequest(e.to_string()))?;
    let key = EncryptionKey::from_base64(cipher, text).map_err(|e| {
        DataError::Encryption(
            EncryptionRefusal::KeyMalformed,
            format!("the current encryption key is malformed: {e}"),
        )
    })?;
    let held = config
        .encryption
        .as_ref()
        .and_then(|e| Verifier::from_hex(&e.verifier));
    let already_new = config.encryption == rotated.encryption;
    match held {
        Some(verifier) if key.matches(&config.id, &verifier) || already_new => Ok(key),
        _ => Err(DataError::Encryption(
            EncryptionRefusal::KeyInvalid,
            format!(
                "the current encryption key is not the key of database {}",
                config.name
            ),
        )),
    }
}

enum Rewrite {
    /// Failed before the commit: nothing changed.
    NotCommitted(DataError),
    /// Failed where the commit may have happened.
    Unknown(DataError),
}

fn rewrite(db: &Database, current: &EncryptionKey, new: &EncryptionKey) -> Result<i64, Rewrite> {
    let not_committed = |e: DataError| Rewrite::NotCommitted(e);
    let conn = engine::open_rotating(
        &db.file_path(),
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        new,
        current,
    )
    .map_err(|e| not_committed(e.into()))?;
    // As every connection of a database with a log: only the shipper checkpoints, after
    // shipping (`Database::open_connection`).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .and_then(|_| conn.execute_batch("PRAGMA wal_autocheckpoint = 0;"))
    .and_then(|()| conn.busy_timeout(WRITE_LOCK_WAIT))
    .map_err(|e| not_committed(e.into()))?;
    if let Some(log) = db.log() {
        let log = Arc::clone(log);
        conn.commit_hook(Some(move || {
            log.record_commit();
            false
        }));
    }
    match engine::rewrite_pages(&conn) {
        Ok(pages) => Ok(pages),
        Err(e) if is_before_commit(&e) => Err(not_committed(refusal(db, e))),
        Err(e) => Err(Rewrite::Unknown(refusal(db, e))),
    }
}

/// `SQLITE_IOERR_DATA`: a page failed its tag.
const IOERR_DATA: std::ffi::c_int = rusqlite::ffi::SQLITE_IOERR | (32 << 8);

/// Errors `rewrite_pages` answers before anything could commit (and rolled back): the
/// write lock not taken, or a page neither key opens.
fn is_before_commit(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(failure, _) => {
            failure.code == rusqlite::ErrorCode::DatabaseBusy || failure.extended_code == IOERR_DATA
        }
        _ => false,
    }
}

fn refusal(db: &Database, e: rusqlite::Error) -> DataError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy) => DataError::Unavailable(format!(
            "database {} stayed busy for {} s (a transaction held its write lock); nothing was rotated, try again",
            db.config().name,
            WRITE_LOCK_WAIT.as_secs()
        )),
        // A page neither key opens: the current key is not the one its pages are under.
        Some(rusqlite::ErrorCode::SystemIoFailure) if is_before_commit(&e) => DataError::Encryption(
            EncryptionRefusal::KeyInvalid,
            format!(
                "the current encryption key does not open the pages of database {}; nothing was rotated",
                db.config().name
            ),
        ),
        _ => DataError::from(e),
    }
}

fn write_synced(path: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    file.sync_all()?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
