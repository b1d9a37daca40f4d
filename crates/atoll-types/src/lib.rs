//! Wire types of the Atoll control plane.
//!
//! Everything a client and the server must agree on lives here: request and response
//! bodies (with the exact casing of the Turso Platform API), the validation rules of names,
//! roles, token scopes, the expiration grammar and the stable error codes. This crate knows
//! nothing of HTTP servers or SQL, so the CLI and the typed client can share it.

pub mod allowed_ips;
pub mod audit;
pub mod backups;
pub mod client_certificates;
pub mod databases;
pub mod error;
pub mod expiration;
pub mod groups;
pub mod hosted;
pub mod jwks;
pub mod locations;
pub mod members;
pub mod names;
pub mod node;
pub mod nodes;
pub mod organizations;
pub mod roles;
pub mod scopes;
pub mod sizes;
pub mod tokens;
pub mod usage;
pub mod users;
pub mod v3;

pub use error::{ErrorBody, ErrorCode};
pub use roles::Role;
pub use scopes::Scope;

/// The empty object `{}` that routes without a documented body answer with: the official
/// TypeScript SDK calls `response.json()` on every success, so an empty body would throw.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Empty {}
