//! Retention: what of a database's stored history is deleted, and how (docs/STORAGE.md,
//! "Retention and garbage collection"). The node's service loop runs it per database; a transfer's new history
//! deletes what came before it the same way (`history::delete_older`).

use crate::error::StorageError;
use crate::restore::{Catalog, GenerationInfo, SegmentInfo};
use crate::{keys, now_ms, Storage};

/// Retention: keeps the newest generation at or before the start of the window and
/// everything after it, so every instant inside the window stays restorable; deletes
/// older generations and the log they no longer need, and whatever came before a
/// transfer (`super::history`). Answers the bytes that remain.
pub async fn collect_garbage(
    storage: &Storage,
    id: &str,
    retention_days: u32,
) -> Result<u64, StorageError> {
    let cutoff = match retention_days {
        0 => i64::MIN,
        days => now_ms() - i64::from(days) * 86_400_000,
    };
    collect_garbage_before(storage, id, cutoff).await
}

/// Deletes `generations` and `segments` of database `id` from object storage, each
/// generation's manifest first (a generation without one is never used); answers the bytes
/// freed. Retention and a transfer's new history delete this way.
pub(crate) async fn delete_stored<'a>(
    storage: &Storage,
    id: &str,
    generations: impl Iterator<Item = &'a GenerationInfo>,
    segments: impl Iterator<Item = &'a SegmentInfo>,
) -> Result<u64, StorageError> {
    let mut freed = 0u64;
    for generation in generations {
        let prefix = keys::generation(id, generation.start, generation.created_ms);
        storage.delete(&format!("{prefix}manifest.json")).await?;
        storage.delete(&format!("{prefix}snapshot.db")).await?;
        freed += generation.bytes;
    }
    for segment in segments {
        storage.delete(&segment.key).await?;
        freed += segment.bytes;
    }
    Ok(freed)
}

/// Retention with the window starting at `cutoff_ms` (or at the start of the database's
/// current history, when that is later).
pub async fn collect_garbage_before(
    storage: &Storage,
    id: &str,
    cutoff_ms: i64,
) -> Result<u64, StorageError> {
    let history = crate::history::History::load(storage, id).await?;
    let cutoff = history
        .as_ref()
        .map_or(cutoff_ms, |h| cutoff_ms.max(h.created_ms));
    let catalog = Catalog::load_everything(storage, id).await?;
    let Some(keep) = catalog
        .generations
        .iter()
        .rev()
        .find(|g| g.created_ms <= cutoff)
        .cloned()
    else {
        return Ok(catalog.bytes);
    };
    let freed = delete_stored(
        storage,
        id,
        catalog
            .generations
            .iter()
            .filter(|g| g.created_ms < keep.created_ms),
        catalog.segments.iter().filter(|s| s.last <= keep.start),
    )
    .await?;
    if freed > 0 {
        tracing::info!(
            database_id = id,
            freed,
            "retention removed history outside the window"
        );
    }
    Ok(catalog.bytes.saturating_sub(freed))
}
