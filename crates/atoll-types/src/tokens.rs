//! Platform API tokens (control-plane credentials).

use crate::Scope;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1|v2/auth/api-tokens/{name}`. No body (or no `organization`) mints an
/// unrestricted token, which is deprecated; `organization` alone an organization-scoped
/// token; `organization`, `group` and `scopes` a group-scoped one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateApiTokenRequest {
    #[serde(default)]
    pub organization: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    /// Individual scopes or the presets `read-only` and `full-access`.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Lifetime in the expiration grammar (`30d`, `2w1d`, `never`); default `never`.
    #[serde(default)]
    pub expiration: Option<String>,
}

/// The flat v1 answer; the secret is shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedApiTokenV1 {
    pub name: String,
    pub id: String,
    pub token: String,
    /// Present when the token is unrestricted: such tokens are deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecation: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedApiTokenValue {
    pub name: String,
    pub id: String,
    pub value: String,
}

/// The nested v2 answer the Turso CLI reads.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedApiTokenV2 {
    pub token: CreatedApiTokenValue,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecation: Option<String>,
}

/// The user who minted a token, shown in organization token listings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct TokenOwner {
    pub username: String,
    pub email: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct ApiToken {
    pub name: String,
    pub id: String,
    /// Slug of the organization; absent for unrestricted tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    /// Name of the pinned group; only for group-scoped tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Expanded scopes; only for group-scoped tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<Scope>>,
    /// `YYYY-MM-DD`.
    pub created_at: String,
    /// RFC 3339, or absent when never used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
    /// RFC 3339, or absent when the token never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The minting user; present in organization listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<TokenOwner>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApiTokenList {
    pub tokens: Vec<ApiToken>,
}

/// `DELETE /v1/auth/api-tokens/{name}` (the name) and
/// `DELETE /v1/organizations/{org}/api-tokens/{id}` (the id).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApiTokenRevoked {
    pub token: String,
}

/// `GET /v1/auth/validate`: unix seconds of expiry, `-1` when the token never expires.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenValidation {
    pub exp: i64,
}

/// `POST /v1/auth/invalidate` (`turso auth logout --all`): every login token of the caller
/// issued before `ValidFrom` (unix seconds) is revoked.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LoginTokensInvalidated {
    #[serde(rename = "ValidFrom", alias = "validFrom", alias = "valid_from")]
    pub valid_from: i64,
}
