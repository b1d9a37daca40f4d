//! What instance administrators see of the data nodes (`/v1/admin/…`, `atoll admin`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A database a node holds that the metadata store did not know, moved aside on that node
/// instead of deleted (see docs/STORAGE.md, "The reconciler").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct QuarantinedDatabase {
    /// The node that holds it.
    pub node: String,
    /// Its UUID (its directory name on the node).
    pub id: String,
    /// Name, organization and hostname label from its last configuration, when it had one.
    pub name: Option<String>,
    pub org_id: Option<String>,
    pub label: Option<String>,
    /// When it was moved aside (RFC 3339).
    pub quarantined_at: String,
    pub bytes: u64,
    /// Whether its retention is over, so a purge removes it.
    pub purgeable: bool,
}

/// `GET /v1/admin/quarantine`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct QuarantineResponse {
    pub databases: Vec<QuarantinedDatabase>,
    /// Nodes that could not be asked: their quarantine is not in the list.
    pub unreachable_nodes: Vec<String>,
}

/// `POST /v1/admin/quarantine/purge`: every quarantined database whose retention is over,
/// or only `id` (refused with 409 while its retention runs).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct PurgeQuarantineRequest {
    pub id: Option<String>,
}

/// What a purge removed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct PurgeQuarantineResponse {
    pub purged: Vec<QuarantinedDatabase>,
    pub unreachable_nodes: Vec<String>,
}

/// A data node (`GET /v1/admin/nodes`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct NodeSummary {
    pub name: String,
    pub location: String,
    /// Base URL of its database hosts.
    pub http_url: String,
    /// Databases the store places on it (deleted ones kept for restore included).
    pub databases: i64,
    /// When a control-plane replica last reached it (RFC 3339); none for a node running
    /// inside the server process.
    pub last_seen_at: Option<String>,
    /// Alive: a heartbeat within 15 s for a node that registers itself, else reached by a
    /// replica within 90 s. New databases go to healthy nodes first.
    pub healthy: bool,
    /// When its last heartbeat came (RFC 3339); none for a node that does not register
    /// itself (it is reached through `atoll serve --node`).
    #[serde(default)]
    pub last_heartbeat_at: Option<String>,
    /// Draining (`atoll admin nodes drain`): it takes no new databases.
    #[serde(default)]
    pub draining: bool,
    /// How many databases it takes at most (0: no bound).
    #[serde(default)]
    pub capacity: i64,
}

/// `GET /v1/admin/nodes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct NodesResponse {
    pub nodes: Vec<NodeSummary>,
}

/// A database a drain moved.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct MovedDatabase {
    pub id: String,
    pub name: String,
    /// The node it is on now.
    pub to: String,
}

/// A database a drain could not move (it stays where it is; draining again retries).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct FailedMove {
    pub id: String,
    pub name: String,
    pub error: String,
}

/// `POST /v1/admin/nodes/{node}/drain`: what moved off the node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct DrainReport {
    pub node: String,
    pub moved: Vec<MovedDatabase>,
    pub failed: Vec<FailedMove>,
}

/// `DELETE /v1/admin/nodes/{node}/drain`: the node takes new databases again.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct NodeUndrained {
    pub node: String,
}
