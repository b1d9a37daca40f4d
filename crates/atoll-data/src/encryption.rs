//! Databases encrypted with their customer's key, on the node (docs/ENCRYPTION.md): the
//! key every request carries (`x-turso-encryption-key`, base64), checked against the
//! database's verifier before anything opens a connection; and the routes that do not
//! serve encrypted databases (yet), which say so instead of answering ciphertext or
//! failing halfway.
//!
//! The key is never stored on the node: a request holds it, and so does each connection it
//! opened while the connection is pooled (`pool`); nothing else does. Connections are only
//! handed to requests whose key matched the verifier — the one key of the database — so a
//! pooled connection is never used by a request without that key.

use crate::database::Database;
use crate::error::{DataError, EncryptionRefusal};
use atoll_storage::encryption::{Cipher, EncryptionKey, Verifier};
use atoll_types::node::{DatabaseConfig, ENCRYPTION_KEY_HEADER};
use axum::http::HeaderMap;
use std::sync::Arc;

/// The key `headers` carry for `db`, checked: `None` for a database that is not
/// encrypted (which refuses a key: the client believes it encrypted).
pub fn request_key(
    db: &Database,
    headers: &HeaderMap,
) -> Result<Option<Arc<EncryptionKey>>, DataError> {
    let config = db.config();
    let sent = headers.get(ENCRYPTION_KEY_HEADER);
    match (&config.encryption, sent) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(not_encrypted(&config)),
        (Some(_), None) => Err(DataError::Encryption(
            EncryptionRefusal::KeyRequired,
            format!(
                "database {} is encrypted: send its key in the {ENCRYPTION_KEY_HEADER} header (remoteEncryptionKey in libSQL clients)",
                config.name
            ),
        )),
        (Some(_), Some(value)) => {
            let text = value.to_str().map_err(|_| malformed("it is not text"))?;
            key_for(&config, text).map(|key| Some(Arc::new(key)))
        }
    }
}

/// Checks `text` (base64) as the key of database `config`.
pub fn key_for(config: &DatabaseConfig, text: &str) -> Result<EncryptionKey, DataError> {
    let Some(encryption) = &config.encryption else {
        return Err(not_encrypted(config));
    };
    let cipher = Cipher::from_name(&encryption.cipher)
        .map_err(|e| DataError::Internal(format!("database {}: {e}", config.id)))?;
    let verifier = Verifier::from_hex(&encryption.verifier).ok_or_else(|| {
        DataError::Internal(format!(
            "database {} has a malformed key verifier",
            config.id
        ))
    })?;
    let key = EncryptionKey::from_base64(cipher, text).map_err(|e| malformed(&e.to_string()))?;
    if !key.matches(&config.id, &verifier) {
        return Err(DataError::Encryption(
            EncryptionRefusal::KeyInvalid,
            format!(
                "the encryption key is not the key of database {}",
                config.name
            ),
        ));
    }
    Ok(key)
}

/// Checks that `key`, checked when a long-lived session began (a WebSocket), is still the
/// database's: a rotation since ends what it may open.
pub fn still_the_key(db: &Database, key: &EncryptionKey) -> Result<(), DataError> {
    let config = db.config();
    let matches = config
        .encryption
        .as_ref()
        .and_then(|e| Verifier::from_hex(&e.verifier))
        .is_some_and(|verifier| key.matches(&config.id, &verifier));
    if matches {
        Ok(())
    } else {
        Err(DataError::Encryption(
            EncryptionRefusal::KeyInvalid,
            format!(
                "the encryption key is no longer the key of database {} (it was rotated)",
                config.name
            ),
        ))
    }
}

/// Copies the pages of the encrypted database file `source` to `target` as they are
/// (ciphertext), without the key: one read transaction, pinned without reading the schema
/// (ciphertext to a keyless connection) as the shipper's snapshots are, and SQLite's
/// backup API.
pub(crate) fn copy_sealed_pages(
    source: &std::path::Path,
    target: &std::path::Path,
) -> Result<(), DataError> {
    let conn = atoll_storage::shipper::internal_connection(source)?;
    conn.execute_batch("BEGIN")?;
    conn.query_row("PRAGMA schema_version", [], |_| Ok(()))?;
    let copied = crate::export::backup_into(&conn, target);
    let _ = conn.execute_batch("COMMIT");
    copied
}

/// Refuses `what` (a route, an operation) for an encrypted database, and a key sent to a
/// database that is not encrypted: for what does not serve encrypted databases yet. Costs
/// no allocation when it lets the request through (every plain request passes here).
pub fn plain_only(db: &Database, headers: &HeaderMap, what: &str) -> Result<(), DataError> {
    let config = db.config();
    if config.encryption.is_some() {
        return Err(not_for_encrypted(&config, what));
    }
    if headers.contains_key(ENCRYPTION_KEY_HEADER) {
        return Err(not_encrypted(&config));
    }
    Ok(())
}

/// `what` is not available for encrypted database `config` (yet).
pub fn not_for_encrypted(config: &DatabaseConfig, what: &str) -> DataError {
    DataError::Encryption(
        EncryptionRefusal::NotAvailable,
        format!(
            "{what} is not available for encrypted databases yet (database {}): query it over Hrana HTTP (/v2/pipeline, /v3/pipeline, /v3/cursor) or /v1/execute with its key (docs/ENCRYPTION.md)",
            config.name
        ),
    )
}

pub(crate) fn not_encrypted(config: &DatabaseConfig) -> DataError {
    DataError::Encryption(
        EncryptionRefusal::NotAvailable,
        format!(
            "database {} is not encrypted with a client-provided key: send requests without {ENCRYPTION_KEY_HEADER} (create a database with remote_encryption to encrypt it)",
            config.name
        ),
    )
}

fn malformed(why: &str) -> DataError {
    DataError::Encryption(
        EncryptionRefusal::KeyMalformed,
        format!("the {ENCRYPTION_KEY_HEADER} header is malformed: {why}"),
    )
}
