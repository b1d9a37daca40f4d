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

/// `POST …/groups/{g}/failover` (an Atoll extension): make `location` the group's primary
/// location. Databases whose primary node is up move there without losing a write; those
/// whose node was lost are taken over from object storage once that node's write lease
/// ran out (docs/STORAGE.md, "Failover").
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FailoverRequest {
    pub location: String,
    /// Take databases over from a lost node that writes without a lease (its control
    /// plane does not fail nodes over): the operator says it is stopped. Writes it
    /// acknowledged and did not store are lost (none in `sync` durability).
    #[serde(default)]
    pub force: bool,
}

/// The answer to a failover: the group as it is now, and what moved.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FailoverReport {
    pub group: Group,
    /// Databases whose primary is now in the location.
    pub moved: Vec<FailedOver>,
    /// Databases still primary elsewhere (asking again retries them).
    pub failed: Vec<crate::nodes::FailedMove>,
}

/// One database failed over.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct FailedOver {
    pub id: String,
    pub name: String,
    /// The node that holds it now.
    pub node: String,
    /// `moved` (its old node handed it over) or `taken-over` (rebuilt from object storage:
    /// its old node was lost).
    pub how: String,
}

/// `POST …/groups/{g}/rename` (the CLI sends `{"Name": …}`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RenameGroupRequest {
    pub name: String,
}
