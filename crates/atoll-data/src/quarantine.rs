//! Databases a node holds that its metadata store does not know.
//!
//! They are never deleted on sight: a store restored from an older backup, or a control
//! plane pointed at the wrong store, would otherwise wipe every database created since.
//! The reconciler moves such a database to `<data-dir>/quarantine/<id>` (it stops being
//! served, its files stay whole), `atoll admin quarantine` lists them, and only an explicit
//! purge removes one, and only once it has been there for the node's retention.

use crate::error::DataError;
use crate::node::Node;
use atoll_types::node::{DatabaseConfig, QuarantinedDatabase};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a quarantined database is kept before a purge may remove it.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// When it was moved aside, written next to its files.
const STAMP: &str = "quarantined-at";

fn quarantine_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("quarantine")
}

fn entry_dir(data_dir: &Path, id: &str) -> Result<PathBuf, DataError> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(DataError::BadRequest(format!("invalid database id {id:?}")));
    }
    Ok(quarantine_dir(data_dir).join(id))
}

/// Stops serving database `id` and moves its files to the quarantine.
pub fn quarantine(
    node: &Node,
    id: &str,
    retention: Duration,
    now_ms: i64,
) -> Result<QuarantinedDatabase, DataError> {
    let target = entry_dir(node.data_dir(), id)?;
    let db = node.detach(id)?;
    std::fs::create_dir_all(quarantine_dir(node.data_dir()))?;
    // A database quarantined before under the same id (restored, then unknown again)
    // keeps its first copy's place: the newer one is the one moved aside now.
    let target = if target.exists() {
        quarantine_dir(node.data_dir()).join(format!("{id}-{now_ms}"))
    } else {
        target
    };
    std::fs::write(db.dir().join(STAMP), now_ms.to_string())?;
    std::fs::rename(db.dir(), &target)?;
    atoll_storage::sync_dir(&node.data_dir().join("dbs"))?;
    atoll_storage::sync_dir(&quarantine_dir(node.data_dir()))?;
    tracing::warn!(database = %id, dir = %target.display(), "quarantined a database its metadata store does not know, or places on another node");
    read_entry(&target, retention, now_ms)
}

/// Every quarantined database of the node.
pub fn list(
    data_dir: &Path,
    retention: Duration,
    now_ms: i64,
) -> Result<Vec<QuarantinedDatabase>, DataError> {
    let dir = quarantine_dir(data_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut databases = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() && !name.starts_with('.') {
            databases.push(read_entry(&path, retention, now_ms)?);
        }
    }
    databases.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(databases)
}

/// Removes a quarantined database for good; refused (409) before its retention is over.
pub fn purge(
    data_dir: &Path,
    id: &str,
    retention: Duration,
    now_ms: i64,
) -> Result<QuarantinedDatabase, DataError> {
    let dir = entry_dir(data_dir, id)?;
    if !dir.is_dir() {
        return Err(DataError::UnknownDatabase(id.to_string()));
    }
    let entry = read_entry(&dir, retention, now_ms)?;
    if !entry.purgeable {
        return Err(DataError::Conflict(format!(
            "database {id} was quarantined at {} ms and is kept for {} s: it cannot be purged yet",
            entry.quarantined_at,
            retention.as_secs()
        )));
    }
    // Renamed first, as deletes are, so a crash half-way leaves nothing half-listed.
    let trash = quarantine_dir(data_dir).join(format!(".purging-{id}"));
    std::fs::rename(&dir, &trash)?;
    std::fs::remove_dir_all(&trash)?;
    tracing::warn!(database = %id, "purged a quarantined database");
    Ok(entry)
}

fn read_entry(
    dir: &Path,
    retention: Duration,
    now_ms: i64,
) -> Result<QuarantinedDatabase, DataError> {
    let id = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let config: Option<DatabaseConfig> = std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    // Without its stamp (a crash between the write and the move is the only way), the
    // retention counts from now: never purgeable early.
    let quarantined_at = std::fs::read_to_string(dir.join(STAMP))
        .ok()
        .and_then(|text| text.trim().parse::<i64>().ok())
        .unwrap_or(now_ms);
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    Ok(QuarantinedDatabase {
        id,
        name: config.as_ref().map(|c| c.name.clone()),
        org_id: config.as_ref().map(|c| c.org_id.clone()),
        label: config.as_ref().map(|c| c.label.clone()),
        quarantined_at,
        bytes: directory_bytes(dir),
        purgeable: now_ms.saturating_sub(quarantined_at) >= retention_ms,
    })
}

fn directory_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
