//! What the durable log's operations fail with. The data plane turns each variant into
//! the `DataError` (and so the HTTP status and message) it answered before the log had a
//! crate of its own (`atoll-data/src/error.rs`, `From<StorageError>`).

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// What was asked cannot be done: a malformed `--storage-url`, an instant outside the
    /// restorable window, a frame that ends no transaction, a database with no backup.
    #[error("{0}")]
    BadRequest(String),
    /// The log cannot do this now, and may later (a snapshot postponed while the
    /// database is busy, a new history while commits are still unshipped).
    #[error("{0}")]
    Unavailable(String),
    /// Object storage failed, or holds an object that is corrupt or missing: the message
    /// names the object.
    #[error("object storage: {0}")]
    ObjectStorage(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<rusqlite::Error> for StorageError {
    fn from(e: rusqlite::Error) -> Self {
        StorageError::Internal(e.to_string())
    }
}

impl From<std::io::Error> for StorageError {
    fn from(e: std::io::Error) -> Self {
        StorageError::Internal(e.to_string())
    }
}
