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
    /// Reached recently (within 90 s): new databases may be placed on it.
    pub healthy: bool,
}

/// `GET /v1/admin/nodes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct NodesResponse {
    pub nodes: Vec<NodeSummary>,
}
