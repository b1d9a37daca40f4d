//! Members and invites of an organization.

use crate::Role;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Member {
    pub username: String,
    pub role: Role,
    pub email: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MemberList {
    pub members: Vec<Member>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MemberResponse {
    pub member: Member,
}

/// `POST /v1/organizations/{org}/members` (`username`) and the TypeScript SDK's
/// `POST …/members/{username}` (`member`). `role` defaults to `member`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct AddMemberRequest {
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub member: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
}

/// `{"member": "<username>", "role": "<role>"}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MemberAdded {
    pub member: String,
    pub role: Role,
}

/// `PATCH …/members/{username}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UpdateMemberRequest {
    pub role: String,
}

/// `DELETE …/members/{username}` answers with the removed username.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MemberRemoved {
    pub member: String,
}

/// A pending invite (`GET /v2/organizations/{org}/invites`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Invite {
    pub id: i64,
    /// Email the invite was sent to; empty when the invite names a username.
    pub email: String,
    /// Username the invite names; empty when it was sent to an email.
    pub username: String,
    pub role: Role,
    pub organization: String,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InviteList {
    pub invites: Vec<Invite>,
}

/// `POST /v2/organizations/{org}/invites` (exactly one of `email` and `username`) and the
/// Turso CLI's `POST /v1/organizations/{org}/invite` (`email`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateInviteRequest {
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InviteCreated {
    pub email: String,
    pub username: String,
    pub role: Role,
    pub organization: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InviteCreatedResponse {
    pub invited: InviteCreated,
}

/// The legacy v1 invite object (`GET /v1/organizations/{org}/invites`), PascalCase as the
/// Turso CLI decodes it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "PascalCase")]
pub struct LegacyInvite {
    #[serde(rename = "ID")]
    pub id: i64,
    pub created_at: String,
    pub updated_at: String,
    pub deleted_at: Option<String>,
    pub role: Role,
    pub email: String,
    #[serde(rename = "OrganizationID")]
    pub organization_id: String,
    pub organization: String,
    pub accepted: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LegacyInviteList {
    pub invites: Vec<LegacyInvite>,
}

/// `POST /v1/user/invites/{org}/accept`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InviteAccepted {
    pub organization: String,
    pub role: Role,
}
