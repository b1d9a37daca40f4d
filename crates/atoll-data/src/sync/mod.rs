//! Turso Sync: the server side of `@tursodatabase/sync` and the `turso` engine's sync
//! (`docs/DATA-PLANE.md`, "Turso Sync"). A client keeps a local database, pulls the
//! pages that changed on the server and pushes its own changes as SQL statements.
//!
//! - [`pull`]: `POST /pull-updates`, pages from the database's stored log (a revision is a
//!   position in it), the bootstrap of an empty client included.
//! - [`pages`]: which pages an answer carries and how they are written out.
//! - [`live_copy`]: a bootstrap's pages from a consistent copy of the live database.
//! - [`proto`]: the protobuf messages of that route.
//!
//! Pushes need no route of their own: the client sends its changes as one Hrana batch
//! (`BEGIN IMMEDIATE`, the rows, an upsert of its `turso_sync_last_change_id` row,
//! `COMMIT`) to `POST /v2/pipeline`, served by [`crate::hrana`] like any other write.

pub mod live_copy;
pub mod pages;
pub mod proto;
pub mod pull;

use crate::DataPlaneState;
use axum::routing::post;
use axum::Router;
use std::sync::Arc;

pub fn routes() -> Router<Arc<DataPlaneState>> {
    Router::new().route("/pull-updates", post(pull::pull_updates))
}
