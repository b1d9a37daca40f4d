//! The node admin API: how the control plane (`atoll serve`) manages the databases of an
//! `atoll node`. It listens on its own address (`--admin-listen`), apart from the database
//! hosts, and every request must carry the shared node secret as a bearer token.
//!
//! | route | body | answer |
//! |---|---|---|
//! | `GET /v1/node` | | [`NodeInfo`] |
//! | `GET /v1/databases` | | [`DatabaseIds`] |
//! | `POST /v1/databases` | [`CreateDatabase`] | `202` [`OperationStarted`]; done: `{}` |
//! | `PUT /v1/databases/{id}/config` | [`DatabaseConfig`] | `{}` |
//! | `DELETE /v1/databases/{id}` | | `{}`; an operation running on it is abandoned |
//! | `POST /v1/databases/{id}/restore` | [`RestoreInPlace`](atoll_types::node::RestoreInPlace) | `202` [`OperationStarted`]; done: [`RestoreOutcome`](atoll_types::node::RestoreOutcome) |
//! | `GET /v1/databases/{id}/backups` | | `202` [`OperationStarted`]; done: [`Backups`](atoll_types::node::Backups) |
//! | `GET /v1/databases/{id}/stats` | | [`DatabaseStats`] |
//! | `POST /v1/sizes` | [`SizesRequest`] | [`Sizes`]: bytes on disk of each database held (at most [`SIZES_PER_REQUEST`]) |
//! | `GET /v1/databases/{id}/queries` | | the heaviest statements ([`QueryStats`]) |
//! | `POST /v1/usage/collect` | | [`UsageBatch`]: the same batch until acknowledged |
//! | `POST /v1/usage/{id}/ack` | | `{}` |
//! | `POST /v1/databases/{id}/quarantine` | | [`QuarantinedDatabase`]: moved aside, not served |
//! | `GET /v1/quarantine` | | [`Quarantine`] |
//! | `DELETE /v1/quarantine/{id}` | | [`QuarantinedDatabase`]; 409 before its retention is over |
//! | `POST /v1/databases/{id}/hand-over` | | `202` [`OperationStarted`]; done: [`HandedOver`]: a move's first step (`crate::moves`) |
//! | `POST /v1/databases/{id}/adopt` | [`AdoptDatabase`] | `202` [`OperationStarted`]; done: [`HandedOver`]: rebuilt here, not serving yet |
//! | `POST /v1/databases/{id}/resume` | | `{}`: serves (again) here |
//! | `POST /v1/databases/{id}/release` | | `{}`: a handed-over copy removed, its history kept |
//! | `GET /v1/operations` | | [`Operations`]: running and recently finished |
//! | `GET /v1/operations/{id}` | | [`Operation`]: its phase, progress, outcome; 404 once forgotten or after a restart |
//! | `DELETE /v1/operations/{id}` | | [`Operation`]: abandoned (a create it finishes is deleted) |
//!
//! The long orders (`202`) run in the background as operations ([`operations`]): one at
//! a time per database (the same order again answers the running one, another 409), a
//! bounded number per organization (429), forgotten by a restart.
//!
//! Every request also carries the id of the control plane's metadata store
//! ([`STORE_ID_HEADER`]): the node is stamped with the first one and refuses others
//! (see [`crate::identity`]).
//!
//! Errors are `{"error": …}` with the status of the [`DataError`] they come from.

pub mod operations;

use crate::error::DataError;
use crate::identity::StoreStamp;
use crate::node::Node;
use atoll_types::node::{
    AdoptDatabase, CreateDatabase, DatabaseConfig, DatabaseIds, DatabaseStats, HandedOver,
    HeldDatabase, NodeInfo, Operation, OperationKind, OperationStarted, Operations, OrderDone,
    Quarantine, QuarantinedDatabase, QueryStats, Seed, Sizes, SizesRequest, UsageBatch,
    SIZES_PER_REQUEST, STORE_ID_HEADER,
};
use axum::extract::{Path, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::StatusCode;
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
    /// The long orders running or finished recently (forgotten by a restart).
    pub operations: Arc<operations::Operations>,
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
            operations: operations::Operations::new(),
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
        .route(
            "/v1/databases/{id}/encryption/rotate",
            axum::routing::post(rotate_encryption_key),
        )
        .route("/v1/databases/{id}/backups", get(backups))
        .route("/v1/databases/{id}/queries", get(top_queries))
        .route("/v1/sizes", axum::routing::post(sizes))
        .route("/v1/replicas", get(list_replicas).put(set_replicas))
        .route("/v1/usage/collect", axum::routing::post(collect_usage))
        .route("/v1/usage/{id}/ack", axum::routing::post(acknowledge_usage))
        .route(
            "/v1/databases/{id}/quarantine",
            axum::routing::post(quarantine_database),
        )
        .route("/v1/quarantine", get(list_quarantine))
        .route("/v1/operations", get(list_operations))
        .route(
            "/v1/operations/{id}",
            get(operation).delete(cancel_operation),
        )
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

/// The answer of a long order: its operation runs.
type Accepted = (StatusCode, Json<OperationStarted>);

/// Runs the work `work` makes of a long order as an operation ([`operations`]) of `kind`
/// on `database_id` for organization `org_id`: answers `202` with its id at once (or with
/// the id of the same order already running for the database), the work going on in a
/// task of its own; its answer is the operation's result.
fn run_operation<T, Work>(
    state: &AdminState,
    kind: OperationKind,
    database_id: &str,
    org_id: &str,
    work: impl FnOnce(operations::Tracker) -> Work,
) -> Result<Accepted, DataError>
where
    T: serde::Serialize,
    Work: std::future::Future<Output = Result<T, DataError>> + Send + 'static,
{
    let running = match state.operations.start(kind, database_id, org_id)? {
        operations::Started::Joined(id) => return Ok(accepted(id)),
        operations::Started::New(running) => running,
    };
    let tracker = running.tracker();
    let id = tracker.id().to_string();
    let work = work(tracker);
    tokio::spawn(async move {
        let outcome = work.await.and_then(|answer| {
            serde_json::to_value(answer).map_err(|e| DataError::Internal(e.to_string()))
        });
        running.finish(outcome);
    });
    Ok(accepted(id))
}

fn accepted(operation: String) -> Accepted {
    (StatusCode::ACCEPTED, Json(OperationStarted { operation }))
}

/// The organization of a database the node holds, for its operations' bound.
fn org_of(node: &Node, id: &str) -> Result<String, DataError> {
    node.by_id(id)
        .map(|db| db.config().org_id.clone())
        .ok_or_else(|| DataError::UnknownDatabase(id.to_string()))
}

/// Creates a database, as an operation: its progress is what its staging directory holds
/// (of the source's size for a copy). A create its control plane abandoned while it ran
/// deletes what it created.
async fn create(
    State(state): State<Arc<AdminState>>,
    headers: axum::http::HeaderMap,
    Json(request): Json<CreateDatabase>,
) -> Result<Accepted, DataError> {
    // An encrypted database's key, for its first pages only (never stored or logged).
    let key = optional_key_header(&headers, atoll_types::node::ENCRYPTION_KEY_HEADER)?;
    let node = Arc::clone(&state.node);
    let id = request.config.id.clone();
    let org = request.config.org_id.clone();
    run_operation(
        &state,
        OperationKind::Create,
        &id.clone(),
        &org.clone(),
        |tracker| async move {
            let existed = node.by_id(&id).is_some();
            let staging = node.creating_dir(&id);
            tracker.probe(move || directory_bytes(&staging));
            let phase = match &request.seed {
                Seed::Empty | Seed::Upload => "creating",
                Seed::Copy { source_id } => {
                    if let Some(source) = node.by_id(source_id) {
                        tracker.set_total(database_bytes(&source.file_path()));
                    }
                    "copying"
                }
                Seed::PointInTime { .. } => "restoring from object storage",
                Seed::Dump { .. } => "loading the dump",
            };
            tracker.phase(phase);
            let creating = Arc::clone(&node);
            if request.seed.runs_tenant_sql() {
                // A dump is tenant SQL: on the node's SQL threads (`sql_pool`), in its
                // organization's turn.
                node.sql()
                    .run_for(&org, move || {
                        creating
                            .create_database_with_key(request, key.as_deref().map(String::as_str))
                            .map(|_| ())
                    })
                    .await??;
            } else {
                blocking(move || {
                    creating
                        .create_database_with_key(request, key.as_deref().map(String::as_str))
                        .map(|_| ())
                })
                .await?;
            }
            if !existed && tracker.abandoned() {
                tracker.phase("deleting an abandoned create");
                blocking(move || node.delete_database(&id)).await?;
                return Err(DataError::Conflict(
                    "the create was abandoned by its control plane: what it created is deleted"
                        .into(),
                ));
            }
            Ok(OrderDone {})
        },
    )
}

/// Bytes of the files in `dir` (none when it is gone).
fn directory_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Bytes of a database file and its WAL: what a copy of it writes, about.
fn database_bytes(file: &std::path::Path) -> u64 {
    let wal = file.with_file_name(format!(
        "{}-wal",
        file.file_name().and_then(|n| n.to_str()).unwrap_or("data")
    ));
    [file.to_path_buf(), wal]
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

/// Restores a database in place to an instant of its history (`node_storage`), as an
/// operation.
async fn restore(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    Json(request): Json<atoll_types::node::RestoreInPlace>,
) -> Result<Accepted, DataError> {
    // An encrypted database's key (never stored or logged).
    let key = optional_key_header(&headers, atoll_types::node::ENCRYPTION_KEY_HEADER)?;
    let org = org_of(&state.node, &id)?;
    let node = Arc::clone(&state.node);
    run_operation(
        &state,
        OperationKind::Restore,
        &id.clone(),
        &org,
        |tracker| async move {
            tracker.phase("restoring");
            blocking(move || {
                node.restore_in_place(
                    &id,
                    request.timestamp_ms,
                    key.as_deref().map(String::as_str),
                )
            })
            .await
        },
    )
}

/// A header of an order carrying a customer's key (base64), if it is there.
fn optional_key_header(
    headers: &axum::http::HeaderMap,
    name: &str,
) -> Result<Option<zeroize::Zeroizing<String>>, DataError> {
    headers
        .get(name)
        .map(|value| {
            value
                .to_str()
                .map(|text| zeroize::Zeroizing::new(text.to_string()))
                .map_err(|_| DataError::BadRequest(format!("the {name} header is not text")))
        })
        .transpose()
}

/// Re-encrypts a database under a new key, as an operation; the current key in
/// `x-turso-encryption-key`, the new one in `x-atoll-new-encryption-key` (never stored
/// or logged).
async fn rotate_encryption_key(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    Json(order): Json<atoll_types::node::RotateEncryptionKey>,
) -> Result<Accepted, DataError> {
    let key_header = |name: &str| -> Result<zeroize::Zeroizing<String>, DataError> {
        optional_key_header(&headers, name)?.ok_or_else(|| {
            DataError::Encryption(
                crate::error::EncryptionRefusal::KeyRequired,
                format!("a key rotation needs the {name} header"),
            )
        })
    };
    let current = key_header(atoll_types::node::ENCRYPTION_KEY_HEADER)?;
    let new = key_header(atoll_types::node::NEW_ENCRYPTION_KEY_HEADER)?;
    let org = org_of(&state.node, &id)?;
    let node = Arc::clone(&state.node);
    run_operation(
        &state,
        OperationKind::RotateEncryptionKey,
        &id.clone(),
        &org,
        |tracker| async move {
            tracker.phase("re-encrypting");
            blocking(move || node.rotate_encryption_key(&id, order, &current, &new)).await
        },
    )
}

/// What object storage holds of a database: generations, the restorable window, the lag;
/// an operation (it lists object storage).
async fn backups(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Accepted, DataError> {
    let org = org_of(&state.node, &id)?;
    let node = Arc::clone(&state.node);
    run_operation(
        &state,
        OperationKind::Backups,
        &id.clone(),
        &org,
        |tracker| async move {
            tracker.phase("listing object storage");
            node.backups(&id).await
        },
    )
}

/// `GET /v1/operations`: every running operation and those finished recently.
async fn list_operations(State(state): State<Arc<AdminState>>) -> Json<Operations> {
    Json(Operations {
        operations: state.operations.list(),
    })
}

/// `GET /v1/operations/{id}`: how far an operation is, or its outcome.
async fn operation(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<Operation>, DataError> {
    state
        .operations
        .get(&id)
        .map(Json)
        .ok_or_else(|| unknown_operation(&id))
}

/// `DELETE /v1/operations/{id}`: its orderer gives it up.
async fn cancel_operation(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<Operation>, DataError> {
    state
        .operations
        .cancel(&id)
        .map(Json)
        .ok_or_else(|| unknown_operation(&id))
}

fn unknown_operation(id: &str) -> DataError {
    DataError::UnknownDatabase(format!(
        "operation {id} (this node restarted since, or finished it too long ago)"
    ))
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
    // A create still running for it deletes what it creates once it is done.
    state.operations.cancel_for_database(&id);
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

async fn sizes(
    State(state): State<Arc<AdminState>>,
    Json(request): Json<SizesRequest>,
) -> Result<Json<Sizes>, DataError> {
    if request.ids.len() > SIZES_PER_REQUEST {
        return Err(DataError::BadRequest(format!(
            "at most {SIZES_PER_REQUEST} databases per request"
        )));
    }
    let node = Arc::clone(&state.node);
    Ok(Json(blocking(move || Ok(node.sizes(&request.ids))).await?))
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

/// A move's first step, as an operation.
async fn hand_over(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Accepted, DataError> {
    let org = org_of(&state.node, &id)?;
    let node = Arc::clone(&state.node);
    run_operation(
        &state,
        OperationKind::HandOver,
        &id.clone(),
        &org,
        |tracker| async move {
            tracker.phase("handing over");
            blocking(move || crate::moves::hand_over(&node, &id)).await
        },
    )
}

/// A database rebuilt here from object storage (a move's second step, a failover, a
/// rebuild), as an operation.
async fn adopt(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    Json(request): Json<AdoptDatabase>,
) -> Result<Accepted, DataError> {
    if request.config.id != id {
        return Err(DataError::BadRequest(
            "the configuration is for another database".into(),
        ));
    }
    let node = Arc::clone(&state.node);
    let org = request.config.org_id.clone();
    run_operation(
        &state,
        OperationKind::Adopt,
        &id,
        &org,
        |tracker| async move {
            tracker.phase("rebuilding from object storage");
            let frame_no = crate::node_storage::adopt(
                &node,
                request.config,
                request.frame_no,
                request.replace,
            )
            .await?;
            Ok(HandedOver { frame_no })
        },
    )
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
