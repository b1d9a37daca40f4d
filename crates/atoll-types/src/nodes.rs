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
