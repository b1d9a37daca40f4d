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
//! | `POST /pull-updates` (Turso Sync; its pushes are `/v2/pipeline` batches) | [`sync`] |
//! | `GET /health`, `GET /version` | here |
//!
//! Database tokens are checked by [`auth::DbRequest`]; the control plane manages the node
//! through [`node::Node`] (in process) or the node admin API ([`admin`]).

pub mod admin;
pub mod auth;
pub mod convergence;
pub mod crash_journal;
pub mod database;
pub mod dump;
pub mod encryption;
pub mod engine;
pub mod error;
pub mod export;
pub mod external_jwt;
pub mod forward;
pub mod hrana;
pub mod identity;
pub mod jwt;
pub mod key_rotation;
pub mod memory;
pub mod meter;
pub mod moves;
pub mod namespace;
pub mod node;
pub mod node_storage;
pub mod open_cost;
pub mod pool;
pub mod quarantine;
pub mod registration;
pub mod replication;
pub mod sandbox;
pub mod shared_credentials;
pub mod sql_pool;
pub mod sync;
pub mod thread_clock;
pub mod transfer_history;
pub mod upload;
pub mod verified_signatures;
pub mod warm_set;
pub mod write_lock;

use atoll_http::admission::{admit, Admission};
use atoll_http::listener;
use atoll_http::rate_limit::{RateLimit, RateLimits};
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;
use std::time::Duration;

/// The database hosts' abuse limits (see `docs/OPERATIONS.md`). The defaults are far above
/// what real workloads and `atoll bench` do: they stop runaway or hostile clients only.
#[derive(Debug, Clone)]
pub struct DataLimits {
    /// Requests per database token (any `Authorization` header).
    pub rate_per_credential: Option<RateLimit>,
    /// Requests per client address without a credential (WebSocket upgrades, probes).
    pub rate_per_address: Option<RateLimit>,
    /// Open Hrana streams (HTTP batons and WebSocket streams) per database, per
    /// organization (all its databases on the node: its fair share, so that no tenant takes
    /// the node's whole limit), and per node.
    pub max_streams_per_database: usize,
    pub max_streams_per_organization: usize,
    pub max_streams_per_node: usize,
    /// Open Hrana cursors per database, per organization, and per node.
    pub max_cursors_per_database: usize,
    pub max_cursors_per_organization: usize,
    pub max_cursors_per_node: usize,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Connections one client address may hold at once on the database hosts' listener
    /// (`listener::Listener::with_max_connections_per_address`); 0: no cap. The `atoll`
    /// commands set it from `--max-connections-per-ip`
    /// (`listener::default_max_connections_per_address` unless given).
    pub max_connections_per_address: usize,
    /// A Hrana request body must arrive in full within this long (408).
    pub body_read_timeout: Duration,
    /// An upload that sends no byte for this long is abandoned (408).
    pub upload_idle_timeout: Duration,
    /// A WebSocket whose client sends nothing for this long is closed.
    pub websocket_idle_timeout: Duration,
    /// How the node runs tenant SQL: the sandbox's limits and its SQL threads.
    pub node: node::NodeSettings,
}

/// One organization may hold this fraction (1/4) of the node's streams and of its cursors
/// by default: a tenant, however many databases it has, leaves three quarters to the
/// others, and it takes four tenants at their caps to fill a node (then idle streams of
/// whoever holds more than a fair share are expired early for the others: `hrana::stream`).
pub const ORGANIZATION_SHARE: usize = 4;

impl Default for DataLimits {
    fn default() -> Self {
        DataLimits {
            rate_per_credential: Some(RateLimit::per_second(100_000)),
            rate_per_address: Some(RateLimit::per_minute(6_000)),
            max_streams_per_database: 256,
            max_streams_per_organization: 4096 / ORGANIZATION_SHARE,
            max_streams_per_node: 4096,
            max_cursors_per_database: 128,
            max_cursors_per_organization: 1024 / ORGANIZATION_SHARE,
            max_cursors_per_node: 1024,
            header_read_timeout: listener::DEFAULT_HEADER_READ_TIMEOUT,
            max_connections_per_address: 0,
            body_read_timeout: Duration::from_secs(60),
            upload_idle_timeout: Duration::from_secs(60),
            websocket_idle_timeout: Duration::from_secs(600),
            node: node::NodeSettings::default(),
        }
    }
}

/// Shared state of a node's database-host listener.
pub struct DataPlaneState {
    pub node: Arc<node::Node>,
    /// Hosts are `<db>-<org>.<db_domain>`.
    pub db_domain: String,
    pub streams: hrana::StreamRegistry,
    pub uploads: upload::registry::Uploads,
    /// Offline writes waiting for their commit frames (`replication::push`).
    pub pushes: replication::push::PendingPushes,
    pub limits: DataLimits,
    pub rate_limits: Arc<RateLimits>,
    pub open_streams: Arc<hrana::OpenLimit>,
    pub open_cursors: Arc<hrana::OpenLimit>,
    /// Forwards requests for databases other nodes hold (`atoll node --control-plane`).
    pub forwarder: Option<Arc<forward::Forwarder>>,
}

impl DataPlaneState {
    pub fn new(node: Arc<node::Node>, db_domain: &str) -> Arc<DataPlaneState> {
        DataPlaneState::with_limits(node, db_domain, DataLimits::default())
    }

    pub fn with_limits(
        node: Arc<node::Node>,
        db_domain: &str,
        limits: DataLimits,
    ) -> Arc<DataPlaneState> {
        DataPlaneState::forwarding(node, db_domain, limits, None)
    }

    /// The state of a node that forwards requests for databases it does not hold
    /// (`forward`).
    pub fn forwarding(
        node: Arc<node::Node>,
        db_domain: &str,
        limits: DataLimits,
        forwarder: Option<Arc<forward::Forwarder>>,
    ) -> Arc<DataPlaneState> {
        if let Some(forwarder) = &forwarder {
            node.replicas.set_link(Arc::clone(forwarder));
        }
        Arc::new(DataPlaneState {
            forwarder,
            node,
            db_domain: db_domain.to_string(),
            streams: hrana::StreamRegistry::new(),
            uploads: upload::registry::Uploads::new(),
            pushes: replication::push::PendingPushes::new(),
            rate_limits: Arc::new(RateLimits::new(
                limits.rate_per_credential,
                limits.rate_per_address,
            )),
            open_streams: hrana::OpenLimit::new(
                "streams",
                limits.max_streams_per_database,
                limits.max_streams_per_organization,
                limits.max_streams_per_node,
            ),
            open_cursors: hrana::OpenLimit::new(
                "cursors",
                limits.max_cursors_per_database,
                limits.max_cursors_per_organization,
                limits.max_cursors_per_node,
            ),
            limits,
        })
    }
}

/// The database hosts' admission (`atoll_http::admission`): a request another node
/// forwarded is limited by its client's address, and a refusal is the data plane's JSON
/// error.
#[derive(Clone)]
struct DataAdmission(Arc<DataPlaneState>);

impl Admission for DataAdmission {
    const PLANE: &'static str = "data";

    fn rate_limits(&self) -> &RateLimits {
        &self.0.rate_limits
    }

    fn body_read_timeout(&self) -> Duration {
        self.0.limits.body_read_timeout
    }

    fn adopt_forwarded_address(&self, request: &mut Request) {
        forward::adopt_client_address(&self.0, request);
    }

    fn too_many_requests(&self, retry_after_secs: u64) -> Response {
        error::DataError::TooManyRequests(
            "Too many requests: slow down and retry after the number of seconds in Retry-After"
                .to_string(),
            retry_after_secs,
        )
        .into_response()
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
        .merge(replication::sync_http::routes())
        .merge(replication::grpc::routes())
        .merge(sync::routes())
        .layer(cross_origin())
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            forward::forward_elsewhere,
        ))
        .layer(axum::middleware::from_fn_with_state(
            DataAdmission(Arc::clone(&state)),
            admit::<DataAdmission>,
        ))
        .layer(axum::middleware::from_fn_with_state(
            "data",
            atoll_http::metrics::track_requests,
        ))
        // Between nodes (the node secret), outside the clients' rate limits: replicas
        // long-poll their primaries here.
        .route(
            "/v1/internal/frames/{id}",
            get(replication::frames::serve_frames),
        )
        .with_state(state)
}

/// Browsers may call the database hosts from any page (the web console's SQL editor runs
/// on the API's origin, and sqld allows the same): credentials are bearer database tokens
/// a script must hold, never cookies, so allowing other origins gives a page nothing it
/// did not already have.
fn cross_origin() -> tower_http::cors::CorsLayer {
    use axum::http::{header, Method};
    tower_http::cors::CorsLayer::new()
        .allow_origin(tower_http::cors::Any)
        .allow_methods([Method::GET, Method::POST, Method::PUT])
        // `x-turso-encryption-key`: an encrypted database's key, which a browser client
        // (and the console's SQL editor) sends like any other.
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::HeaderName::from_static(atoll_types::node::ENCRYPTION_KEY_HEADER),
        ])
        .max_age(std::time::Duration::from_secs(600))
}

/// Serves the database hosts on `listener` (a `TcpListener` for plain HTTP, or a
/// [`listener::Listener`] with TLS) until `shutdown` resolves, with the per-address
/// connection cap of `state`'s limits.
pub async fn serve(
    listener: impl Into<listener::Listener>,
    state: Arc<DataPlaneState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    state.rate_limits.spawn_sweeper();
    state.node.spawn_idle_sweeper();
    let short_of_descriptors = Arc::downgrade(&state.node);
    listener::on_out_of_descriptors(move || {
        let Some(node) = short_of_descriptors.upgrade() else {
            return false;
        };
        tokio::task::spawn_blocking(move || node.pool.shed());
        true
    });
    let header_read_timeout = state.limits.header_read_timeout;
    let max_connections_per_address = state.limits.max_connections_per_address;
    let node = Arc::clone(&state.node);
    // A statement that runs while the server stops is interrupted rather than waited for:
    // graceful shutdown finishes the requests in flight, which then end at once.
    let shutdown = async move {
        shutdown.await;
        node.begin_shutdown();
    };
    let app = Router::new().fallback_service(
        tower::ServiceBuilder::new()
            .map_request(namespace::strip_db_prefix)
            .service(router(state)),
    );
    let listener = listener
        .into()
        .with_max_connections_per_address(max_connections_per_address);
    listener::serve_router(listener, app, header_read_timeout, shutdown).await
}
