//! Users, login and instance administration.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /v1/user` and `GET /v1/current-user`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct User {
    pub username: String,
    pub name: String,
    pub email: String,
    #[serde(rename = "avatarUrl")]
    pub avatar_url: String,
    /// Plan of the user's personal organization.
    pub plan: String,
    pub mfa: bool,
    pub has_pending_invites: bool,
    /// Whether the user administers this Atoll instance (may create users).
    pub admin: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UserResponse {
    pub user: User,
}

/// `POST /v1/auth/login`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LoginRequest {
    pub username: String,
    pub password: String,
}

/// A login token: unrestricted, valid for 7 days.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LoginResponse {
    pub token: String,
    pub username: String,
    /// Unix seconds.
    pub expires_at: i64,
}

/// `POST /v1/auth/session`: the web console's login. The token itself is in the
/// `HttpOnly` cookie, never in the body, so the page's scripts never hold it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionStarted {
    pub username: String,
    /// Unix seconds.
    pub expires_at: i64,
}

/// `POST /v1/admin/users` (instance administrators only).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateUserRequest {
    pub username: String,
    pub password: String,
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub admin: Option<bool>,
}
