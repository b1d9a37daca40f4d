//! The node admin API: how the control plane (`atoll serve`) manages the databases of an
//! `atoll node`. It listens on its own address (`--admin-listen`), apart from the database
//! hosts, and every request must carry the shared node secret as a bearer token.
//!
//! | route | body | answer |
//! |---|---|---|
//! | `GET /v1/node` | | [`NodeInfo`] |
//! | `GET /v1/databases` | | [`DatabaseIds`] |
//! | `POST /v1/databases` | [`CreateDatabase`] | `{}` |
//! | `PUT /v1/databases/{id}/config` | [`DatabaseConfig`] | `{}` |
//! | `DELETE /v1/databases/{id}` | | `{}` |
//! | `GET /v1/databases/{id}/stats` | | [`DatabaseStats`] |
//! | `GET /v1/databases/{id}/queries` | | the heaviest statements ([`QueryStats`]) |
//! | `POST /v1/usage/collect` | | [`UsageBatch`]: the same batch until acknowledged |
//! | `POST /v1/usage/{id}/ack` | | `{}` |
//! | `POST /v1/databases/{id}/quarantine` | | [`QuarantinedDatabase`]: moved aside, not served |
//! | `GET /v1/quarantine` | | [`Quarantine`] |
//! | `DELETE /v1/quarantine/{id}` | | [`QuarantinedDatabase`]; 409 before its retention is over |
//! | `POST /v1/databases/{id}/hand-over` | | [`HandedOver`]: a move's first step (`crate::moves`) |
//! | `POST /v1/databases/{id}/adopt` | [`AdoptDatabase`] | [`HandedOver`]: rebuilt here, not serving yet |
//! | `POST /v1/databases/{id}/resume` | | `{}`: serves (again) here |
//! | `POST /v1/databases/{id}/release` | | `{}`: a handed-over copy removed, its history kept |
//!
//! Every request also carries the id of the control plane's metadata store
//! ([`STORE_ID_HEADER`]): the node is stamped with the first one and refuses others
//! (see [`crate::identity`]).
//!
//! Errors are `{"error": …}` with the status of the [`DataError`] they come from.

use crate::error::DataError;
use crate::identity::StoreStamp;
use crate::node::Node;
use atoll_types::node::{
    AdoptDatabase, CreateDatabase, DatabaseConfig, DatabaseIds, DatabaseStats, HandedOver,
    HeldDatabase, NodeInfo, OrderDone, Quarantine, QuarantinedDatabase, QueryStats, UsageBatch,
    STORE_ID_HEADER,
};
use axum::extract::{Path, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, put};
use axum::{Json, Router};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

pub struct AdminState {
    pub node: Arc<Node>,
    pub info: NodeInfo,
    /// SHA-256 of the node secret: compared in constant time, never kept in clear.
    secret_digest: [u8; 32],
    /// The metadata store this node belongs to.
    pub stamp: StoreStamp,
    /// How long a quarantined database is kept before a purge may remove it.
    pub quarantine_retention: Duration,
}

impl AdminState {
    /// The admin state of `node`, with its store stamp read from its data directory.
    pub fn new(
        node: Arc<Node>,
        info: NodeInfo,
        secret: &str,
        quarantine_retention: Duration,
    ) -> Result<Arc<AdminState>, DataError> {
        let stamp = StoreStamp::open(node.data_dir())?;
        Ok(Arc::new(AdminState {
            node,
            info,
            secret_digest: Sha256::digest(secret.as_bytes()).into(),
            stamp,
            quarantine_retention,
        }))
    }
}

pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/v1/node", get(info))
        .route("/v1/databases", get(list).post(create))
        .route("/v1/databases/{id}", axum::routing::delete(delete))
        .route("/v1/databases/{id}/config", put(configure))
        .route("/v1/databases/{id}/stats", get(stats))
        .route("/v1/databases/{id}/restore", axum::routing::post(restore))
        .route("/v1/databases/{id}/backups", get(backups))
        .route("/v1/databases/{id}/queries", get(top_queries))
        .route("/v1/replicas", get(list_replicas).put(set_replicas))
        .route("/v1/usage/collect", axum::routing::post(collect_usage))
        .route("/v1/usage/{id}/ack", axum::routing::post(acknowledge_usage))
        .route(
            "/v1/databases/{id}/quarantine",
            axum::routing::post(quarantine_database),
        )
        .route("/v1/quarantine", get(list_quarantine))
        .route(
            "/v1/databases/{id}/hand-over",
            axum::routing::post(hand_over),
        )
        .route("/v1/databases/{id}/adopt", axum::routing::post(adopt))
        .route("/v1/databases/{id}/resume", axum::routing::post(resume))
        .route("/v1/databases/{id}/release", axum::routing::post(release))
        .route(
            "/v1/quarantine/{id}",
            axum::routing::delete(purge_quarantined),
        )
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            require_secret,
        ))
        // A database seed can be a large SQL dump.
        .layer(axum::extract::DefaultBodyLimit::max(512 * 1024 * 1024))
        .with_state(state)
}

async fn require_secret(
    State(state): State<Arc<AdminState>>,
    request: Request,
    next: Next,
) -> Result<Response, DataError> {
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    if !bool::from(digest.ct_eq(&state.secret_digest)) {
        return Err(DataError::Unauthorized("node secret expected".into()));
    }
    // Only after the secret: the store id is no credential, and a caller without the
    // secret must learn nothing about which store the node belongs to.
    let store_id = request
        .headers()
        .get(STORE_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            DataError::BadRequest(format!(
                "the {STORE_ID_HEADER} header is expected (a control plane of this version or later)"
            ))
        })?;
    state.stamp.claim(store_id)?;
    Ok(next.run(request).await)
}

async fn info(State(state): State<Arc<AdminState>>) -> Json<NodeInfo> {
    let mut info = state.info.clone();
    info.databases = state.node.database_count();
    Json(info)
}

/// `PUT /v1/replicas`: the whole list of replicas this node holds (the reconciler's
/// desired state for it); answers their status.
async fn set_replicas(
    State(state): State<Arc<AdminState>>,
    Json(wanted): Json<atoll_types::node::ReplicaSet>,
) -> Result<Json<atoll_types::node::ReplicaStatuses>, DataError> {
    crate::replication::follow::Replicas::converge(&state.node, wanted.replicas)?;
    Ok(Json(atoll_types::node::ReplicaStatuses {
        replicas: state.node.replicas.statuses(),
    }))
}

/// `GET /v1/replicas`: each replica's applied frame, the primary's head and the lag.
async fn list_replicas(
    State(state): State<Arc<AdminState>>,
) -> Json<atoll_types::node::ReplicaStatuses> {
    Json(atoll_types::node::ReplicaStatuses {
        replicas: state.node.replicas.statuses(),
    })
}

async fn list(State(state): State<Arc<AdminState>>) -> Json<DatabaseIds> {
    Json(held_databases(&state.node))
}

/// The databases a node holds, with the configuration version and state of each.
pub fn held_databases(node: &Node) -> DatabaseIds {
    let ids = node.database_ids();
    let databases = ids
        .iter()
        .filter_map(|id| node.by_id(id))
        .map(|db| {
            let config = db.config();
            HeldDatabase {
                id: config.id.clone(),
                config_version: config.config_version,
                state: config.state,
                handed_over_at: db.handed_over_at(),
            }
        })
        .collect();
    DatabaseIds { ids, databases }
}

async fn create(
    State(state): State<Arc<AdminState>>,
    Json(request): Json<CreateDatabase>,
) -> Result<Json<OrderDone>, DataError> {
    let node = Arc::clone(&state.node);
    if request.seed.runs_tenant_sql() {
        // A dump is tenant SQL: on the node's SQL threads (`sql_pool`), in its
        // organization's turn.
        let tenant = request.config.org_id.clone();
        state
            .node
            .sql()
            .run_for(&tenant, move || node.create_database(request).map(|_| ()))
            .await??;
    } else {
        blocking(move || node.create_database(request).map(|_| ())).await?;
    }
    Ok(Json(OrderDone {}))
}

/// Restores a database in place to an instant of its history (`node_storage`).
async fn restore(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    Json(request): Json<atoll_types::node::RestoreInPlace>,
) -> Result<Json<atoll_types::node::RestoreOutcome>, DataError> {
    let node = Arc::clone(&state.node);
    Ok(Json(
        blocking(move || node.restore_in_place(&id, request.timestamp_ms)).await?,
    ))
}

/// What object storage holds of a database: generations, the restorable window, the lag.
async fn backups(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<atoll_types::node::Backups>, DataError> {
    Ok(Json(state.node.backups(&id).await?))
}

async fn configure(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    Json(config): Json<DatabaseConfig>,
) -> Result<Json<OrderDone>, DataError> {
    if config.id != id {
        return Err(DataError::BadRequest(
            "the configuration is for another database".into(),
        ));
    }
    let node = Arc::clone(&state.node);
    blocking(move || node.configure(config).map(|_| ())).await?;
    Ok(Json(OrderDone {}))
}

async fn delete(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<OrderDone>, DataError> {
    let node = Arc::clone(&state.node);
    blocking(move || node.delete_database(&id)).await?;
    Ok(Json(OrderDone {}))
}

async fn stats(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<DatabaseStats>, DataError> {
    let node = Arc::clone(&state.node);
    Ok(Json(blocking(move || node.stats(&id)).await?))
}

async fn top_queries(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Json<Vec<QueryStats>> {
    Json(state.node.meters.top_queries(&id, TOP_QUERIES))
}

/// How many statements `…/stats` lists, as sqld does.
pub const TOP_QUERIES: usize = 10;

async fn collect_usage(State(state): State<Arc<AdminState>>) -> Json<UsageBatch> {
    Json(state.node.meters.collect())
}

async fn acknowledge_usage(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Json<OrderDone> {
    state.node.meters.acknowledge(&id);
    Json(OrderDone {})
}

async fn quarantine_database(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<QuarantinedDatabase>, DataError> {
    let admin = Arc::clone(&state);
    let quarantined = blocking(move || {
        crate::quarantine::quarantine(&admin.node, &id, admin.quarantine_retention, now_millis())
    })
    .await?;
    Ok(Json(quarantined))
}

async fn list_quarantine(
    State(state): State<Arc<AdminState>>,
) -> Result<Json<Quarantine>, DataError> {
    let admin = Arc::clone(&state);
    let databases = blocking(move || {
        crate::quarantine::list(
            admin.node.data_dir(),
            admin.quarantine_retention,
            now_millis(),
        )
    })
    .await?;
    Ok(Json(Quarantine { databases }))
}

async fn purge_quarantined(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<QuarantinedDatabase>, DataError> {
    let admin = Arc::clone(&state);
    let purged = blocking(move || {
        crate::quarantine::purge(
            admin.node.data_dir(),
            &id,
            admin.quarantine_retention,
            now_millis(),
        )
    })
    .await?;
    Ok(Json(purged))
}

async fn hand_over(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<HandedOver>, DataError> {
    let node = Arc::clone(&state.node);
    Ok(Json(
        blocking(move || crate::moves::hand_over(&node, &id)).await?,
    ))
}

async fn adopt(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    Json(request): Json<AdoptDatabase>,
) -> Result<Json<HandedOver>, DataError> {
    if request.config.id != id {
        return Err(DataError::BadRequest(
            "the configuration is for another database".into(),
        ));
    }
    let frame_no = crate::node_storage::adopt(
        &state.node,
        request.config,
        request.frame_no,
        request.replace,
    )
    .await?;
    Ok(Json(HandedOver { frame_no }))
}

async fn resume(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<OrderDone>, DataError> {
    let node = Arc::clone(&state.node);
    let resumed = id.clone();
    blocking(move || crate::moves::resume(&node, &resumed)).await?;
    // The control plane places it here as of now: its configuration is confirmed.
    state.node.confirm(&id);
    Ok(Json(OrderDone {}))
}

async fn release(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<OrderDone>, DataError> {
    let node = Arc::clone(&state.node);
    blocking(move || crate::moves::release(&node, &id)).await?;
    Ok(Json(OrderDone {}))
}

/// Milliseconds since the epoch.
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DataError> + Send + 'static,
) -> Result<T, DataError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DataError::Internal(e.to_string()))?
}

/// Serves the admin API on `listener` (plain, or an [`atoll_http::listener::Listener`]
/// with TLS) until `shutdown` resolves.
pub async fn serve(
    listener: impl Into<atoll_http::listener::Listener>,
    state: Arc<AdminState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    atoll_http::listener::serve_router(
        listener,
        router(state),
        atoll_http::listener::DEFAULT_HEADER_READ_TIMEOUT,
        shutdown,
    )
    .await
}
