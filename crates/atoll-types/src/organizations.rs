//! Organizations: `/v1/organizations…` and `/v2/organizations`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An organization as every route returns it. Personal organizations have `type: personal`
/// and the username as slug.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Organization {
    /// Stable identifier (UUID); the CLI reads it from `/v2/organizations`.
    pub id: String,
    pub name: String,
    pub slug: String,
    /// `personal` or `team`.
    #[serde(rename = "type")]
    pub kind: String,
    pub overages: bool,
    pub require_mfa: bool,
    pub blocked_reads: bool,
    pub blocked_writes: bool,
    pub plan_id: String,
    pub plan_timeline: String,
    /// External platform managing the organization: always empty on Atoll.
    pub platform: String,
    pub restore_enabled: bool,
    /// Billing customer id read by the Turso CLI; Atoll has no payment provider.
    pub stripe_id: String,
}

/// `GET /v2/organizations` (and `GET /v1/organizations` for the TypeScript SDK).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OrganizationList {
    pub organizations: Vec<Organization>,
}

/// `GET|PATCH /v1/organizations/{org}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OrganizationResponse {
    pub organization: Organization,
}

/// `POST /v1/organizations`: the Turso CLI's shape, answered as `{"org": …}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateOrganizationRequest {
    pub name: String,
    /// Optional slug; derived from `name` when absent.
    #[serde(default)]
    pub slug: Option<String>,
    /// Accepted for compatibility with the Turso CLI and ignored.
    #[serde(default)]
    pub stripe_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateOrganizationResponse {
    pub org: Organization,
}

/// `PATCH /v1/organizations/{org}`: absent or `null` fields stay unchanged.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct UpdateOrganizationRequest {
    #[serde(default)]
    pub overages: Option<bool>,
    #[serde(default)]
    pub require_mfa: Option<bool>,
}

/// `DELETE /v1/organizations/{org}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeleteOrganizationResponse {
    /// Slug of the deleted organization.
    pub organization: String,
}

/// `POST /v1/admin/organizations/{org}/plan` (instance administrators).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SetPlanRequest {
    /// `starter`, `developer`, `scaler`, `pro` or `enterprise`.
    pub plan: String,
}

/// The plans an organization can be on, cheapest first.
pub const PLANS: [&str; 5] = ["starter", "developer", "scaler", "pro", "enterprise"];
