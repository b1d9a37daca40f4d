//! Atoll's control plane: the Turso-compatible platform API.
//!
//! Layout: [`routes`] holds the route table (every route, its action and its schemas) and
//! one module per resource, named after the URL; [`auth`] authenticates the bearer token
//! into a [`auth::Principal`] and answers every action from one policy table;
//! [`error::ApiError`] maps every failure to its status. The web console (`/console/`) is
//! static files in the binary that call the same API.

mod audit;
pub mod auth;
mod body;
pub mod config;
mod console;
pub mod data_plane;
mod database_tokens;
pub mod error;
pub mod jobs;
pub mod jwks;
pub mod login_throttle;
mod node_registry;
mod openapi;
mod periodic;
pub mod quotas;
pub mod reconciler;
pub mod routes;
mod server;
mod state;
pub mod usage;
mod wire;

pub use config::{ControlConfig, Location};
pub use data_plane::{failover, DataPlane};
pub use database_tokens::new_signing_key;
pub use login_throttle::{LoginThrottleSettings, LOGIN_FAILURES_BEFORE_BACKOFF};
pub use server::{bootstrap_user, serve, BootstrapOutcome};
pub use state::AppState;
