//! Groups: `/v1/organizations/{org}/groups…` and the personal-organization `/v1/groups…`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Group {
    pub name: String,
    /// Version label of the group's engine.
    pub version: String,
    pub uuid: String,
    /// Location codes the group exists in; the primary first.
    pub locations: Vec<String>,
    pub primary: String,
    pub delete_protection: bool,
    pub archived: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GroupList {
    pub groups: Vec<Group>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GroupResponse {
    pub group: Group,
}

/// `POST …/groups`: `{name, location}`, or the Turso CLI's `{Name, Location, Version}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateGroupRequest {
    pub name: String,
    pub location: String,
    /// Accepted and ignored: Atoll ships one engine version.
    #[serde(default)]
    pub version: Option<String>,
    /// Accepted and ignored: every libSQL extension Atoll bundles is always on.
    #[serde(default)]
    pub extensions: Option<serde_json::Value>,
}

/// `GET|PATCH …/groups/{g}/configuration`; in a PATCH, absent or `null` means unchanged.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct GroupConfiguration {
    pub delete_protection: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct UpdateGroupConfiguration {
    #[serde(default)]
    pub delete_protection: Option<bool>,
}

/// `POST …/groups/{g}/transfer`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TransferGroupRequest {
    /// Slug of the organization that receives the group.
    pub organization: String,
}

/// `POST …/groups/{g}/rename` (the CLI sends `{"Name": …}`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RenameGroupRequest {
    pub name: String,
}
