//! Backups and point-in-time restore: `…/databases/{db}/backups` and `…/databases/{db}/restore`
//! (Atoll's routes; docs/API.md, "Backups and point-in-time restore").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What object storage holds of a database, and how far behind it the database's node is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct DatabaseBackups {
    /// The store (`--storage-url`, without credentials).
    pub storage: String,
    /// When a commit is acknowledged: `lag` or `sync`.
    pub durability: String,
    /// Days of history kept (the organization's plan).
    pub retention_days: u32,
    /// The restorable window (RFC 3339); absent before the first snapshot.
    pub restorable_from: Option<String>,
    pub restorable_until: Option<String>,
    /// Snapshots, oldest first; each is followed by the log up to the next.
    pub generations: Vec<BackupGeneration>,
    /// Bytes the database's snapshots and log take in object storage.
    pub stored_bytes: u64,
    /// The last frame in object storage (the database's replication index there).
    pub replication_index: u64,
    /// Commits on the node not in object storage yet.
    pub lag: BackupLag,
    /// Why shipping fails, while it fails.
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct BackupGeneration {
    /// The snapshot holds the database as of this frame.
    pub start_frame_no: u64,
    /// When it was taken (RFC 3339).
    pub created_at: String,
    pub snapshot_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct BackupLag {
    pub commits: u64,
    /// Age of the oldest commit not yet stored.
    pub seconds: f64,
}

/// `POST …/databases/{db}/restore`: the database goes back to its state at `timestamp`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct RestoreRequest {
    /// An instant inside the restorable window (RFC 3339).
    pub timestamp: String,
    /// The key of a database encrypted with its customer's key (base64): the restore
    /// writes its pages under it. Ignored never: refused for a plain database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct RestoreResponse {
    /// Commit time of the last transaction of the state restored (RFC 3339).
    pub restored_to: String,
    /// The restore is itself a write at this frame: restoring to an instant before it
    /// undoes it.
    pub replication_index: u64,
}
