//! Key sets (JWKS) of an organization's own auth provider: `/v2/organizations/{org}/jwks…`
//! and `…/jwks-template` (the turso CLI's `org jwks`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A registered key set.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct JwksEntry {
    pub jwks_name: String,
    /// Where it is fetched and refreshed from; empty for a key set given inline.
    pub jwks_url: String,
    /// Key ids of the keys it holds now (`null` for a key without one).
    #[serde(default)]
    pub key_ids: Vec<Option<String>>,
    /// The last successful fetch (RFC 3339), or its registration for an inline key set.
    #[serde(default)]
    pub refreshed_at: String,
    /// Why the last refresh failed (the keys of the last good fetch stay in service).
    #[serde(default)]
    pub last_error: Option<String>,
}

/// `GET /v2/organizations/{org}/jwks`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JwksList {
    pub jwks: Vec<JwksEntry>,
}

/// `PUT /v2/organizations/{org}/jwks/{name}`: the key set from `jwks_url` (an address the
/// operator allows), or inline in `jwks` (`{"keys": [...]}`, an Atoll extension). `region`
/// (sent by the turso CLI) is ignored.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct SaveJwksRequest {
    #[serde(default)]
    pub jwks_url: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub jwks: Option<serde_json::Value>,
    #[serde(default)]
    pub region: Option<String>,
}

/// The answer of `PUT …/jwks/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JwksSaved {
    pub jwks: JwksEntry,
}

/// `GET /v2/organizations/{org}/jwks-template`: in the JSON body (as the turso CLI sends
/// it) or the query string.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct JwksTemplateRequest {
    #[serde(default)]
    pub database: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    /// `full-access` (default) or `read-only`.
    #[serde(default)]
    pub scope: Option<String>,
    /// Fine-grained (table-level) permissions: not available; must be empty.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub permissions: Option<Vec<serde_json::Value>>,
}

/// The claims to configure the auth provider with.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JwksTemplate {
    #[schema(value_type = Object)]
    pub template: serde_json::Value,
}
