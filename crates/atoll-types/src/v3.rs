//! Bodies of the v3 routes (`/v3/organizations/{orgId}/…`), which name organizations,
//! groups and databases by id (the turso CLI's `--v3-api` mode). Lists, groups and tokens
//! answer the v1 shapes; these are the bodies that differ.

use crate::databases::{Database, DatabaseList, Pagination, RestorableDatabase, Seed};
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

/// `GET /v3/organizations/{orgId}/databases?deleted=true`: restorable databases, a page at
/// a time (`limit`, `cursor`, as the live list).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeletedDatabasePage {
    pub databases: Vec<RestorableDatabase>,
    pub pagination: Pagination,
}

/// `GET /v3/organizations/{orgId}/databases`: the live list, or with `?deleted=true` the
/// deleted one.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum DatabaseListV3 {
    Live(DatabaseList),
    Deleted(DeletedDatabasePage),
}

/// `POST /v3/organizations/{orgId}/databases/{dbId}/restore`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RestoreDatabaseRequest {
    /// Restoring under another name than the database had is not available (501).
    #[serde(default)]
    pub name: Option<String>,
}
