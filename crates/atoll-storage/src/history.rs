//! A transfer starts a database's history anew (docs/STORAGE.md, "Transfers start the
//! history anew"; docs/SECURITY.md, "Transfers").
//!
//! Before a transfer, the log holds every state of the old owner's, deleted rows included:
//! a point-in-time copy, a restore, an embedded replica pulling frames from the start or a
//! rebuilt generation would all hand them to the new owner. So when a database's
//! configuration says its history starts later than the history its log holds (the
//! store's `history_starts_at`, set by a transfer), the node that holds it:
//!
//! 1. ships everything committed so far (the old history is whole: its last frames too are
//!    in object storage, and are left out with the rest);
//! 2. runs `VACUUM` on the live database: every page is rewritten from a fresh copy of the
//!    live rows, so no free page or free space in a page carries a deleted row on;
//! 3. stores a generation at the new head (its snapshot: the vacuumed file);
//! 4. records the history's start in `dbs/<id>/history.json` ([`History`]): from then on
//!    [`super::restore::Catalog::load`] leaves out every generation and segment before
//!    it, so no reader of object storage (restores, copies, exports, embedded replicas,
//!    backups listings, rebuilds) ever sees the old history again;
//! 5. deletes the old history from object storage (retention deletes what is left, should
//!    this fail).
//!
//! Until that is done the database's history is *pending*: whatever serves it (sync,
//! exports of files and generations, copies, point-in-time restores, backups listings)
//! answers 503 with `Retry-After`; SQL goes on (it reads live rows only). The shipper's
//! rounds retry a start that failed.

use super::restore::Catalog;
use super::{keys, Storage};
use crate::error::StorageError;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Where a database's current history starts: `dbs/<id>/history.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// Its first generation: the vacuumed database as of frame `start`, taken at
    /// `created_ms`. No frame up to `start` belongs to it.
    pub start: u64,
    pub created_ms: i64,
    /// The transfer it starts at (the store's `history_starts_at`), in ms.
    pub since_ms: i64,
}

/// How long a database whose new history could not be started waits before the next try.
pub(crate) const RETRY: std::time::Duration = std::time::Duration::from_secs(2);

impl History {
    /// The history recorded for database `id`; `None` when it was never transferred.
    pub async fn load(storage: &Storage, id: &str) -> Result<Option<History>, StorageError> {
        let key = keys::history(id);
        let Some(bytes) = storage.get(&key).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            StorageError::ObjectStorage(format!("object {key} is not a history record: {e}"))
        })
    }

    pub(crate) async fn store(&self, storage: &Storage, id: &str) -> Result<(), StorageError> {
        let json =
            serde_json::to_vec_pretty(self).map_err(|e| StorageError::Internal(e.to_string()))?;
        storage.put(&keys::history(id), Bytes::from(json)).await
    }

    /// Whether a generation (as `(start, created_ms)`) belongs to this history.
    pub fn holds_generation(&self, start: u64, created_ms: i64) -> bool {
        (created_ms, start) >= (self.created_ms, self.start)
    }

    /// The refusal of a state at `at_ms`, before this history's first state.
    pub fn refuse_before(&self, at_ms: i64) -> StorageError {
        StorageError::BadRequest(format!(
            "{} is before the database's history: it starts at its transfer to this organization ({}); its first restorable instant is {}",
            super::restore::rfc3339(at_ms),
            super::restore::rfc3339(self.since_ms),
            super::restore::rfc3339(self.created_ms)
        ))
    }

    /// Leaves out of `catalog` every generation and segment from before this history.
    pub fn leave_out_older(&self, catalog: &mut Catalog) {
        catalog
            .generations
            .retain(|g| self.holds_generation(g.start, g.created_ms));
        catalog.segments.retain(|s| s.last > self.start);
    }
}

/// Deletes from object storage what database `id` stored before `history`: its
/// generations (manifest first, as retention does) and the segments it no longer needs.
/// Answers the bytes freed.
pub(crate) async fn delete_older(
    storage: &Storage,
    id: &str,
    history: &History,
) -> Result<u64, StorageError> {
    let catalog = Catalog::load_everything(storage, id).await?;
    let freed = super::retention::delete_stored(
        storage,
        id,
        catalog
            .generations
            .iter()
            .filter(|g| !history.holds_generation(g.start, g.created_ms)),
        catalog.segments.iter().filter(|s| s.last <= history.start),
    )
    .await?;
    if freed > 0 {
        tracing::info!(
            database_id = id,
            freed,
            "the history before the database's transfer was deleted"
        );
    }
    Ok(freed)
}
