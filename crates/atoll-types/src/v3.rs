//! Bodies of the v3 routes (`/v3/organizations/{orgId}/…`), which name organizations,
//! groups and databases by id (the turso CLI's `--v3-api` mode). Lists, groups and tokens
//! answer the v1 shapes; these are the bodies that differ.

use crate::databases::{Database, Pagination, RestorableDatabase, Seed};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v3/organizations/{orgId}/databases`: the group by id.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateDatabaseRequestV3 {
    pub name: String,
    /// Id of a group of the organization; its `default` group when absent.
    #[serde(default)]
    pub group_id: Option<String>,
    #[serde(default)]
    pub seed: Option<Seed>,
    #[serde(default)]
    pub size_limit: Option<String>,
}

/// A database as v3 shows it: the v1 fields, and its allow rules (v3 has no separate
/// configuration route).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseV3 {
    #[serde(flatten)]
    pub database: Database,
    pub allow_rules_config: AllowRulesConfig,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct AllowRulesConfig {
    pub allowed_ips: Vec<String>,
    /// Always empty: Atoll has no AWS PrivateLink.
    pub allowed_aws_vpc_ids: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseResponseV3 {
    pub database: DatabaseV3,
}

/// `GET /v3/organizations/{orgId}/databases`: the live databases, or with `?deleted=true`
/// the deleted ones. One shape for both (an empty page must match exactly one schema); an
/// item is one or the other.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseListV3 {
    pub databases: Vec<ListedDatabase>,
    pub pagination: Pagination,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
// A page of a few hundred rows: the size of the larger variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum ListedDatabase {
    Live(Database),
    Deleted(RestorableDatabase),
}

/// `POST /v3/organizations/{orgId}/databases/{dbId}/restore`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RestoreDatabaseRequest {
    /// Restoring under another name than the database had is not available (501).
    #[serde(default)]
    pub name: Option<String>,
}
