//! The node admin API: what the control plane tells a data node about its databases.
//! The control plane reaches a node only through these messages (in process for
//! `atoll dev`, over HTTP with a shared node secret for `atoll node`).

use serde::{Deserialize, Serialize};

/// Where a database is in its life, as the data plane enforces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatabaseState {
    /// Created for an upload that has not landed: counts towards quotas, refuses queries.
    AwaitingUpload,
    Active,
    /// Archived with its group: refuses queries until the group is unarchived.
    Archived,
    /// Deleted but restorable: refuses queries, keeps its files.
    Deleted,
}

/// A public key the data plane accepts database tokens from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenKey {
    /// Key id, carried in the token header (`kid`).
    pub kid: String,
    /// Raw 32-byte Ed25519 public key, URL-safe base64 without padding.
    pub public_key: String,
}

/// Everything a node needs to serve one database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseConfig {
    /// Database UUID: the directory name on the node, and the `id` claim of its tokens.
    pub id: String,
    pub name: String,
    pub org_id: String,
    /// Group UUID: the `gid` claim of group tokens.
    pub group_id: String,
    /// The first label of its hostname, `<db>-<org>`.
    pub label: String,
    pub state: DatabaseState,
    pub block_reads: bool,
    pub block_writes: bool,
    /// Why the database is blocked, appended to `BLOCKED` errors.
    #[serde(default)]
    pub block_reason: Option<String>,
    /// Largest size in bytes; `None` for no limit.
    pub size_limit: Option<u64>,
    /// Whether other databases may `ATTACH` this one (with a token allowing it).
    pub allow_attach: bool,
    /// Client addresses (IPs or CIDR ranges) allowed to reach the database; empty: any.
    #[serde(default)]
    pub allowed_ips: Vec<String>,
    /// Keys of the database and of its group.
    pub keys: Vec<TokenKey>,
    /// How its commits are acknowledged; `None`: the node's `--durability`.
    #[serde(default)]
    pub durability: Option<Durability>,
    /// Days its history stays restorable (its organization's plan); `None`: the node's
    /// default.
    #[serde(default)]
    pub pitr_retention_days: Option<u32>,
    /// The store's version of this configuration (docs/STORAGE.md, "The reconciler"): a
    /// node ignores a configuration older than the one it has, so a slow or retried push
    /// never undoes a newer one. 0 (from older control planes) is always applied.
    #[serde(default)]
    pub config_version: u64,
}

/// When a commit is acknowledged (`docs/STORAGE.md`, "Durability modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Once it is in the node's WAL; object storage has it within `--durability-lag`.
    Lag,
    /// Only once object storage has it.
    Sync,
}

/// How a new database starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Seed {
    /// An empty database.
    Empty,
    /// Nothing until a file is uploaded (state `awaiting_upload`).
    Upload,
    /// A copy of another database on the same node.
    Copy { source_id: String },
    /// An SQL dump, run in one transaction.
    Dump { sql: String },
    /// Another database (or this one's own history) as it was at `timestamp_ms`, or as the
    /// end of its log (`None`), rebuilt from object storage: works on any node, and for a
    /// source that was deleted or whose node is gone.
    PointInTime {
        source_id: String,
        timestamp_ms: Option<i64>,
    },
}

impl Seed {
    /// Whether creating from this seed runs a tenant's SQL (a dump), which the node runs in
    /// its SQL sandbox, on its SQL threads.
    pub fn runs_tenant_sql(&self) -> bool {
        matches!(self, Seed::Dump { .. })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateDatabase {
    pub config: DatabaseConfig,
    pub seed: Seed,
}

/// Live figures of a database on its node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseStats {
    pub storage_bytes: u64,
    /// Bytes its backups take in object storage; `None` where the node has no storage.
    #[serde(default)]
    pub backup_bytes: Option<u64>,
    /// Commits not yet in object storage, and the age of the oldest of them.
    #[serde(default)]
    pub replication_lag_commits: Option<u64>,
    #[serde(default)]
    pub replication_lag_ms: Option<u64>,
    /// Being rebuilt from object storage (its files were missing or damaged): not served
    /// until done.
    #[serde(default)]
    pub recovering: bool,
    /// The state on the node: an upload turns `awaiting_upload` into `active` there first.
    pub state: Option<DatabaseState>,
}

/// `POST /v1/databases/{id}/restore` of the node admin API: the database goes back to its
/// state at `timestamp_ms`, written as a new transaction at the head of its log (so the
/// restore itself can be undone by restoring to a time before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreInPlace {
    pub timestamp_ms: i64,
}

/// What a restore in place did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreOutcome {
    /// The commit time of the last transaction of the state restored.
    pub restored_commit_ms: i64,
    /// The frame the restore was written at (the log's new head).
    pub frame_no: u64,
}

/// `GET /v1/databases/{id}/backups` of the node admin API: what object storage holds of a
/// database and how far behind it the node is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backups {
    pub storage_url: String,
    /// Generations, oldest first.
    pub generations: Vec<Generation>,
    /// The restorable window (ms since the epoch); `None` before the first snapshot.
    pub window_start_ms: Option<i64>,
    pub window_end_ms: Option<i64>,
    pub retention_days: u32,
    /// Bytes in object storage (snapshots and log).
    pub stored_bytes: u64,
    /// The last frame in object storage, and what is not there yet.
    pub durable_frame_no: u64,
    pub lag_commits: u64,
    pub lag_ms: u64,
    pub durability: Option<Durability>,
    /// The last shipping failure, if shipping fails now.
    pub last_error: Option<String>,
}

/// A snapshot in object storage and the log that follows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    /// The snapshot holds the database as of this frame.
    pub start_frame_no: u64,
    pub created_ms: i64,
    pub snapshot_bytes: u64,
}

/// `GET /v1/node` of the node admin API: who the node is and where clients reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node's name: the control plane records which node holds each database by it.
    pub name: String,
    pub location: String,

    /// Hostnames of its databases are `<db>-<org>.<hostname_suffix>`.
    pub hostname_suffix: String,
    /// Base URL of its database hosts (path-prefix form: `<http_url>/db/<db>-<org>/`).
    pub http_url: String,
    pub databases: usize,
}

/// `GET /v1/databases` of the node admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseIds {
    pub ids: Vec<String>,
    /// What the node holds of each database, for the reconciler to compare with the store.
    #[serde(default)]
    pub databases: Vec<HeldDatabase>,
}

/// A database as its node holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldDatabase {
    pub id: String,
    /// The version of the configuration the node has.
    pub config_version: u64,
    pub state: DatabaseState,
}

/// The error body of the node admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeError {
    pub error: String,
}

/// Usage counted on a node for one database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseUsage {
    pub rows_read: u64,
    pub rows_written: u64,
    pub bytes_synced: u64,
}

/// `POST /v1/usage/collect` of the node admin API: usage since the last acknowledged
/// batch, by database id. The same batch comes back until `POST /v1/usage/{id}/ack`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageBatch {
    pub id: String,
    pub databases: Vec<(String, DatabaseUsage)>,
}

/// Rows a statement text read and wrote on a database, over all its runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryStats {
    pub query: String,
    pub rows_read: u64,
    pub rows_written: u64,
    pub count: u64,
}

/// The header every node admin request carries: the id of the control plane's metadata
/// store. A node is stamped with the first one it sees and refuses any other, so a control
/// plane on an empty or wrong store cannot manage another store's databases.
pub const STORE_ID_HEADER: &str = "x-atoll-store-id";

/// A database a node holds that its store did not know: moved aside, never deleted at
/// start-up, removed only by an explicit purge once its retention is over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedDatabase {
    pub id: String,
    /// From the database's last configuration on the node, when it had one.
    pub name: Option<String>,
    pub org_id: Option<String>,
    pub label: Option<String>,
    /// When it was moved aside, milliseconds since the epoch.
    pub quarantined_at: i64,
    /// Bytes of its files.
    pub bytes: u64,
    /// Whether its retention is over (a purge may remove it).
    pub purgeable: bool,
}

/// `GET /v1/quarantine` of the node admin API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    pub databases: Vec<QuarantinedDatabase>,
}
