//! Atoll's data plane: database hosts.
//!
//! Every database is served at its own host `<db>-<org>.<db-domain>` (or with the
//! `x-namespace` header, or under the path prefix `/db/<db>-<org>/`). A node holds the
//! databases placed on it ([`node::Node`]) and serves:
//!
//! | routes | module |
//! |---|---|
//! | `/v2/pipeline`, `/v3/pipeline`, `/v3/cursor`, `/v3-protobuf/*`, `/v1/execute`, `/v1/batch`, `GET /v2`, `/v3`, `/v3-protobuf` | [`hrana`] |
//! | `POST /v1/upload`, `PUT /v2/upload/…` | [`upload`] |
//! | `GET /info`, `GET /export/{generation}`, `GET /dump` | [`export`] |
//! | `GET /health`, `GET /version` | here |
//!
//! Database tokens are checked by [`auth::DbRequest`]; the control plane manages the node
//! through [`node::Node`] (in process) or the node admin API ([`admin`]).

pub mod admin;
pub mod auth;
pub mod database;
pub mod dump;
pub mod error;
pub mod export;
pub mod hrana;
pub mod jwt;
pub mod meter;
pub mod namespace;
pub mod node;
pub mod upload;

use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// Shared state of a node's database-host listener.
pub struct DataPlaneState {
    pub node: Arc<node::Node>,
    /// Hosts are `<db>-<org>.<db_domain>`.
    pub db_domain: String,
    pub streams: hrana::StreamRegistry,
    pub uploads: upload::Uploads,
}

impl DataPlaneState {
    pub fn new(node: Arc<node::Node>, db_domain: &str) -> Arc<DataPlaneState> {
        Arc::new(DataPlaneState {
            node,
            db_domain: db_domain.to_string(),
            streams: hrana::StreamRegistry::new(),
            uploads: upload::Uploads::new(),
        })
    }
}

/// The database-host router (without the `/db/<label>` rewrite; see [`serve`]).
pub fn router(state: Arc<DataPlaneState>) -> Router {
    Router::new()
        .route("/health", get(|| async { "" }))
        .route(
            "/version",
            get(|| async { concat!("atoll ", env!("CARGO_PKG_VERSION")) }),
        )
        .merge(hrana::routes())
        .merge(upload::routes())
        .merge(export::routes())
        .with_state(state)
}

/// Serves the database hosts on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<DataPlaneState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use tower::Layer;
    let app = tower::util::MapRequestLayer::new(namespace::strip_db_prefix).layer(router(state));
    axum::serve(
        listener,
        // Connection info carries the client's address, for databases with an IP allow list.
        axum::ServiceExt::<axum::extract::Request>::into_make_service_with_connect_info::<
            std::net::SocketAddr,
        >(app),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
