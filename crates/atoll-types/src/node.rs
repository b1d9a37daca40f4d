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
    /// The store's version of this configuration (docs/STORAGE.md, "The reconciler"): a
    /// node ignores a configuration older than the one it has, so a slow or retried push
    /// never undoes a newer one. 0 (from older control planes) is always applied.
    #[serde(default)]
    pub config_version: u64,
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
    /// The state on the node: an upload turns `awaiting_upload` into `active` there first.
    pub state: Option<DatabaseState>,
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
