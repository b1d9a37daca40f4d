//! Uploads into a database encrypted with its customer's key (docs/ENCRYPTION.md,
//! "Uploads"). Turso's contract: the client sends a *plain* SQLite file that meets the
//! usual requirements and also reserves the cipher's bytes at the end of every page (28,
//! 32 or 48: `Cipher::reserved_bytes`), with the key in `x-turso-encryption-key` (and
//! optionally the cipher in `x-turso-encryption-cipher`). The file is checked like any
//! upload (`validate`, in the sandbox with its deadline), then sealed page by page here
//! and only the sealed file is installed: the plain one is replaced before the database
//! sees it.

use crate::database::Database;
use crate::error::DataError;
use atoll_storage::encryption::{self, EncryptionKey};
use axum::http::HeaderMap;
use std::io::Read;
use std::path::Path;

/// The header Turso's upload takes the cipher in.
pub const CIPHER_HEADER: &str = "x-turso-encryption-cipher";

/// Refuses an upload that names a cipher other than the database's (or names one for a
/// database that is not encrypted: the key check already refuses that with a key).
pub fn check_cipher_header(db: &Database, headers: &HeaderMap) -> Result<(), DataError> {
    let Some(sent) = headers.get(CIPHER_HEADER) else {
        return Ok(());
    };
    let sent = sent.to_str().unwrap_or("").trim().to_ascii_lowercase();
    let config = db.config();
    match &config.encryption {
        Some(encryption) if encryption.cipher == sent => Ok(()),
        Some(encryption) => Err(DataError::BadRequest(format!(
            "{CIPHER_HEADER} is {sent}, but database {} is encrypted with {}",
            config.name, encryption.cipher
        ))),
        None => Err(DataError::BadRequest(format!(
            "{CIPHER_HEADER} was sent, but database {} is not encrypted",
            config.name
        ))),
    }
}

/// Replaces the checked plain file at `path` by the same pages sealed under `key`.
pub fn seal(path: &Path, key: &EncryptionKey, name: &str) -> Result<(), DataError> {
    let reserved = reserved_bytes(path)?;
    let needed = key.cipher().reserved_bytes();
    if reserved != needed {
        return Err(DataError::BadRequest(format!(
            "the file reserves {reserved} bytes at the end of each page; an upload into encrypted database {name} ({}) must reserve {needed}: in the sqlite3 shell run `.filectrl reserve_bytes {needed}` then `VACUUM;` and `PRAGMA journal_mode=WAL;`, and upload that copy",
            key.cipher().name()
        )));
    }
    let sealed = path.with_extension("sealing");
    remove_with_companions(&sealed)?;
    let result = (|| -> Result<(), DataError> {
        {
            let mut target = encryption::create(&sealed, key)?;
            let source = rusqlite::Connection::open(path)?;
            // Same page size and reserved bytes: SQLite's backup API copies the pages as
            // they are, and the target's codec seals each one on its way to the WAL.
            // Nobody else has either file: no step waits.
            rusqlite::backup::Backup::new(&source, &mut target)?.run_to_completion(
                4096,
                std::time::Duration::ZERO,
                None,
            )?;
            encryption::engine::checkpoint(&target, rusqlite::ffi::SQLITE_CHECKPOINT_TRUNCATE)?;
        }
        crate::node::open_encrypted_checked(&sealed, key, name)?;
        std::fs::File::open(&sealed)?.sync_all()?;
        // Replaces the plain file: from here on only ciphertext is on the disk.
        std::fs::rename(&sealed, path)?;
        remove_with_companions(&sealed)
    })();
    if result.is_err() {
        let _ = remove_with_companions(&sealed);
    }
    result
}

/// Byte 20 of the SQLite header: the bytes reserved at the end of every page.
fn reserved_bytes(path: &Path) -> Result<usize, DataError> {
    let mut header = [0u8; 21];
    std::fs::File::open(path)?.read_exact(&mut header)?;
    Ok(usize::from(header[20]))
}

fn remove_with_companions(path: &Path) -> Result<(), DataError> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    Ok(())
}
