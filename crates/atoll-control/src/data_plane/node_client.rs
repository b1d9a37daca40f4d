//! The client of the node admin API (`atoll-data/src/admin.rs`): one method per order, its
//! bodies the wire types of `atoll_types::node`.
//!
//! Every order carries the node secret and the store's id, answers within
//! [`ORDER_TIMEOUT`], and has its failures mapped to [`ApiError`] the way the in-process
//! node's are ([`send`]). A new order is a route in `atoll-data/src/admin.rs`, its bodies in
//! `atoll_types::node`, and one method here; nothing else spells an admin URL.
//!
//! **Long orders** (a create, a restore in place, the listing of backups, a move's
//! hand-over and adopt, which copy or rebuild whole databases) run on the node as
//! operations (`atoll-data/src/admin/operations.rs`): the order answers `202` with the
//! operation's id at once, and [`NodeAdmin::operation`] polls `GET /v1/operations/{id}`
//! until it is done, each poll within [`POLL_TIMEOUT`]. A node that stops answering
//! mid-order (paused, partitioned, dead) is therefore given up within seconds
//! ([`ApiError::NodeUnavailable`]), however long the order may take when the node works,
//! and callers run their undo paths as for any order that failed. A node that restarted
//! no longer knows the operation (404): the order failed, the same way. The whole
//! operation is bounded too ([`OPERATION_BOUND`], [`MOVE_STEP_BOUND`]), generously: past
//! it the operation is cancelled on the node and the order fails.

use crate::error::ApiError;
use atoll_data::error::DataError;
use atoll_types::node::{
    self as wire, AdoptDatabase, Backups, CreateDatabase, DatabaseConfig, DatabaseIds,
    DatabaseStats, HandedOver, NodeInfo, OrderDone, Quarantine, QuarantinedDatabase, QueryStats,
    ReplicaSet, ReplicaStatuses, RestoreInPlace, RestoreOutcome, Sizes, SizesRequest, UsageBatch,
};
use reqwest::Method;
use std::time::Duration;

/// How long an order to a node may take: most touch one database's files or the node's
/// memory and answer in milliseconds, so a node that has not answered in this long is
/// hung or cut off, and whoever waits on it (the reconciler, an API request) moves on.
pub const ORDER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one poll of a long order's operation may take: the node answers it from
/// memory, so a node that has not answered in this long is hung or cut off.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a long order may run on a node in all (a seeded create, a restore in place,
/// the listing of backups) while the node keeps answering its polls: generous, since a
/// node that stops answering is found out by [`POLL_TIMEOUT`] long before.
pub const OPERATION_BOUND: Duration = Duration::from_secs(30 * 60);

/// The same for a move's steps (hand-over, adopt, also used by failovers and rebuilds):
/// two of them together must end within `atoll_data::moves::MOVE_TIMEOUT` (300 s), past
/// which the reconciler takes a handed-over copy as abandoned.
pub const MOVE_STEP_BOUND: Duration = Duration::from_secs(120);

/// How often a long order's operation is polled at most: quickly first (most finish in
/// milliseconds), then every second.
const POLL_INTERVAL_FIRST: Duration = Duration::from_millis(20);
const POLL_INTERVAL_MAX: Duration = Duration::from_secs(1);

/// How long the request that starts a long order may take: [`ORDER_TIMEOUT`], plus a
/// second for each 4 MiB of its body (an SQL dump of up to 512 MiB is sent with it).
fn start_timeout(body_bytes: usize) -> Duration {
    ORDER_TIMEOUT + Duration::from_secs((body_bytes / (4 << 20)) as u64)
}

/// What every order to every node shares: the HTTP client, the node secret, the store's id.
pub struct NodeClient {
    http: reqwest::Client,
    secret: String,
    /// Sent with every order ([`wire::STORE_ID_HEADER`]): a node serves one store.
    store_id: String,
}

impl NodeClient {
    pub fn new(secret: &str, store_id: &str) -> Result<NodeClient, ApiError> {
        // Each request has a timeout of its own (`NodeAdmin::order`, `start_timeout`).
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(NodeClient {
            http,
            secret: secret.to_string(),
            store_id: store_id.to_string(),
        })
    }

    /// The store whose orders this client sends.
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    /// The orders to the node whose admin API is at `admin_url`.
    pub fn at(&self, admin_url: &str) -> NodeAdmin<'_> {
        NodeAdmin {
            client: self,
            admin_url: admin_url.to_string(),
        }
    }
}

/// The admin API of one node: one method per order.
pub struct NodeAdmin<'a> {
    client: &'a NodeClient,
    admin_url: String,
}

impl NodeAdmin<'_> {
    /// An order with its credential, the store's id and its timeout ([`ORDER_TIMEOUT`]).
    fn order(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .http
            .request(method, format!("{}{path}", self.admin_url))
            .timeout(ORDER_TIMEOUT)
            .bearer_auth(&self.client.secret)
            .header(wire::STORE_ID_HEADER, self.client.store_id.as_str())
    }

    /// A long order: started (`202` and its operation's id), then its operation polled
    /// until it is done ([`NodeAdmin::operation`]) within `bound`; answers its result.
    async fn long_order<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        bound: Duration,
    ) -> Result<T, ApiError> {
        self.long_order_of(self.order(method, path), path, body, bound)
            .await
    }

    /// [`Self::long_order`] of an order already built (with headers of its own).
    async fn long_order_of<T: serde::de::DeserializeOwned>(
        &self,
        mut order: reqwest::RequestBuilder,
        path: &str,
        body: Option<Vec<u8>>,
        bound: Duration,
    ) -> Result<T, ApiError> {
        if let Some(body) = body {
            order = order
                .timeout(start_timeout(body.len()))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let response = order.send().await.map_err(unreachable)?;
        if response.status() != reqwest::StatusCode::ACCEPTED {
            // A node of a version before operations answers the order itself.
            return answer(response).await;
        }
        let started: wire::OperationStarted = answer(response).await?;
        self.operation(&started.operation, path, bound).await
    }

    /// Polls operation `id` (of the order to `path`) until it is done, each poll within
    /// [`POLL_TIMEOUT`] and all within `bound`; answers its result as the order's answer,
    /// or its error as the order's error.
    pub async fn operation<T: serde::de::DeserializeOwned>(
        &self,
        id: &str,
        path: &str,
        bound: Duration,
    ) -> Result<T, ApiError> {
        let started = std::time::Instant::now();
        let mut interval = POLL_INTERVAL_FIRST;
        loop {
            let poll = self
                .order(Method::GET, &format!("/v1/operations/{id}"))
                .timeout(POLL_TIMEOUT)
                .send()
                .await
                .map_err(|e| {
                    ApiError::NodeUnavailable(format!(
                        "data node stopped answering during {path} (operation {id}): {e}"
                    ))
                })?;
            if poll.status() == reqwest::StatusCode::NOT_FOUND {
                return Err(ApiError::NodeUnavailable(format!(
                    "data node no longer knows operation {id} of {path}: it restarted before the order finished"
                )));
            }
            let operation: wire::Operation = answer(poll).await?;
            match operation.state {
                wire::OperationState::Done => {
                    return serde_json::from_value(operation.result.unwrap_or_default()).map_err(
                        |e| ApiError::Upstream(format!("bad answer from data node: {e}")),
                    );
                }
                wire::OperationState::Failed => {
                    let error = operation.error.unwrap_or(wire::OperationError {
                        status: 500,
                        error: "the operation failed".into(),
                    });
                    return Err(node_failure(error.status, error.error, None));
                }
                wire::OperationState::Running => {}
            }
            if started.elapsed() >= bound {
                // Cancelled on the node (a create it finishes is deleted there); the
                // order failed, however the cancel fares.
                let _ = self
                    .order(Method::DELETE, &format!("/v1/operations/{id}"))
                    .send()
                    .await;
                return Err(ApiError::Upstream(format!(
                    "data node did not finish {path} within {} s (operation {id}, at {})",
                    bound.as_secs(),
                    operation.phase
                )));
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(POLL_INTERVAL_MAX);
        }
    }

    /// `GET /v1/node`: who the node is.
    pub async fn info(&self) -> Result<NodeInfo, ApiError> {
        send(self.order(Method::GET, "/v1/node")).await
    }

    /// `GET /v1/databases`: the databases the node holds, with their configuration versions.
    pub async fn held_databases(&self) -> Result<DatabaseIds, ApiError> {
        send(self.order(Method::GET, "/v1/databases")).await
    }

    /// `POST /v1/databases`: creates a database, empty or from its seed (a long order).
    /// An encrypted database's `key` (base64) travels in the order's header, as clients
    /// send it: never in the body, which may be logged or retried from a record.
    pub async fn create_database(
        &self,
        request: &CreateDatabase,
        key: Option<&str>,
    ) -> Result<OrderDone, ApiError> {
        let body = json_body(request)?;
        let mut order = self.order(Method::POST, "/v1/databases");
        if let Some(key) = key {
            order = order.header(wire::ENCRYPTION_KEY_HEADER, key);
        }
        self.long_order_of(order, "/v1/databases", Some(body), OPERATION_BOUND)
            .await
    }

    /// `POST /v1/databases/{id}/encryption/rotate`: re-encrypts the database under a new
    /// key (a long order); both keys in headers, never in the body.
    pub async fn rotate_encryption_key(
        &self,
        order: &wire::RotateEncryptionKey,
        current: &str,
        new: &str,
    ) -> Result<wire::EncryptionKeyRotated, ApiError> {
        let path = format!("/v1/databases/{}/encryption/rotate", order.config.id);
        let built = self
            .order(Method::POST, &path)
            .header(wire::ENCRYPTION_KEY_HEADER, current)
            .header(wire::NEW_ENCRYPTION_KEY_HEADER, new);
        self.long_order_of(built, &path, Some(json_body(order)?), OPERATION_BOUND)
            .await
    }

    /// `PUT /v1/databases/{id}/config`: the database's configuration.
    pub async fn configure(&self, config: &DatabaseConfig) -> Result<OrderDone, ApiError> {
        let path = format!("/v1/databases/{}/config", config.id);
        send(self.order(Method::PUT, &path).json(config)).await
    }

    /// `DELETE /v1/databases/{id}`: deletes a database and its files.
    pub async fn delete_database(&self, id: &str) -> Result<OrderDone, ApiError> {
        send(self.order(Method::DELETE, &format!("/v1/databases/{id}"))).await
    }

    /// `GET /v1/databases/{id}/stats`.
    pub async fn stats(&self, id: &str) -> Result<DatabaseStats, ApiError> {
        send(self.order(Method::GET, &format!("/v1/databases/{id}/stats"))).await
    }

    /// `POST /v1/sizes`: bytes on disk of each of `ids` the node holds.
    pub async fn sizes(&self, ids: &[String]) -> Result<Sizes, ApiError> {
        let request = SizesRequest { ids: ids.to_vec() };
        send(self.order(Method::POST, "/v1/sizes").json(&request)).await
    }

    /// `GET /v1/databases/{id}/backups`: what object storage holds of the database (a
    /// long order: it lists object storage).
    pub async fn backups(&self, id: &str) -> Result<Backups, ApiError> {
        let path = format!("/v1/databases/{id}/backups");
        self.long_order(Method::GET, &path, None, OPERATION_BOUND)
            .await
    }

    /// `POST /v1/databases/{id}/restore`: restores the database in place (a long order).
    /// An encrypted database's `key` travels in the order's header.
    pub async fn restore(
        &self,
        id: &str,
        request: &RestoreInPlace,
        key: Option<&str>,
    ) -> Result<RestoreOutcome, ApiError> {
        let path = format!("/v1/databases/{id}/restore");
        let body = json_body(request)?;
        let mut order = self.order(Method::POST, &path);
        if let Some(key) = key {
            order = order.header(wire::ENCRYPTION_KEY_HEADER, key);
        }
        self.long_order_of(order, &path, Some(body), OPERATION_BOUND)
            .await
    }

    /// `GET /v1/databases/{id}/queries`: the database's heaviest statements.
    pub async fn top_queries(&self, id: &str) -> Result<Vec<QueryStats>, ApiError> {
        send(self.order(Method::GET, &format!("/v1/databases/{id}/queries"))).await
    }

    /// `POST /v1/usage/collect`: the node's usage batch (the same until acknowledged).
    pub async fn collect_usage(&self) -> Result<UsageBatch, ApiError> {
        send(self.order(Method::POST, "/v1/usage/collect")).await
    }

    /// `POST /v1/usage/{batch}/ack`: the batch is recorded; the node forgets it.
    pub async fn acknowledge_usage(&self, batch_id: &str) -> Result<OrderDone, ApiError> {
        send(self.order(Method::POST, &format!("/v1/usage/{batch_id}/ack"))).await
    }

    /// `POST /v1/databases/{id}/quarantine`: out of service, its files kept.
    pub async fn quarantine(&self, id: &str) -> Result<QuarantinedDatabase, ApiError> {
        let path = format!("/v1/databases/{id}/quarantine");
        send(self.order(Method::POST, &path)).await
    }

    /// `GET /v1/quarantine`: the node's quarantined databases.
    pub async fn quarantined(&self) -> Result<Quarantine, ApiError> {
        send(self.order(Method::GET, "/v1/quarantine")).await
    }

    /// `DELETE /v1/quarantine/{id}`: a quarantined database removed for good.
    pub async fn purge_quarantined(&self, id: &str) -> Result<QuarantinedDatabase, ApiError> {
        send(self.order(Method::DELETE, &format!("/v1/quarantine/{id}"))).await
    }

    /// `PUT /v1/replicas`: the node's whole list of replicas.
    pub async fn set_replicas(&self, replicas: &ReplicaSet) -> Result<ReplicaStatuses, ApiError> {
        send(self.order(Method::PUT, "/v1/replicas").json(replicas)).await
    }

    /// `GET /v1/replicas`: how far each replica of the node is.
    pub async fn replicas(&self) -> Result<ReplicaStatuses, ApiError> {
        send(self.order(Method::GET, "/v1/replicas")).await
    }

    /// `POST /v1/databases/{id}/hand-over`: a move's first step (a long order).
    pub async fn hand_over(&self, id: &str) -> Result<HandedOver, ApiError> {
        let path = format!("/v1/databases/{id}/hand-over");
        self.long_order(Method::POST, &path, None, MOVE_STEP_BOUND)
            .await
    }

    /// `POST /v1/databases/{id}/adopt`: rebuilt from object storage, not serving yet (a
    /// long order).
    pub async fn adopt(&self, id: &str, request: &AdoptDatabase) -> Result<HandedOver, ApiError> {
        let path = format!("/v1/databases/{id}/adopt");
        let body = json_body(request)?;
        self.long_order(Method::POST, &path, Some(body), MOVE_STEP_BOUND)
            .await
    }

    /// `POST /v1/databases/{id}/resume`: a handed-over or adopted copy serves.
    pub async fn resume(&self, id: &str) -> Result<OrderDone, ApiError> {
        send(self.order(Method::POST, &format!("/v1/databases/{id}/resume"))).await
    }

    /// `POST /v1/databases/{id}/release`: a handed-over copy is let go.
    pub async fn release(&self, id: &str) -> Result<OrderDone, ApiError> {
        send(self.order(Method::POST, &format!("/v1/databases/{id}/release"))).await
    }
}

/// A request's body as JSON, sent as it is (its size sets the start's timeout).
fn json_body(body: &impl serde::Serialize) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(body).map_err(|e| ApiError::Internal(e.to_string()))
}

/// A request that got no answer: refused or timed out, the node is down or restarting,
/// which a retry outlives.
fn unreachable(e: reqwest::Error) -> ApiError {
    if e.is_connect() || e.is_timeout() {
        ApiError::NodeUnavailable(format!("data node unreachable: {e}"))
    } else {
        ApiError::Upstream(format!("data node unreachable: {e}"))
    }
}

/// Sends a node admin request and maps its answer, as the in-process calls are mapped.
async fn send<T: serde::de::DeserializeOwned>(
    request: reqwest::RequestBuilder,
) -> Result<T, ApiError> {
    answer(request.send().await.map_err(unreachable)?).await
}

/// A node's answer: its body on success, else its error mapped ([`node_failure`]).
async fn answer<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
) -> Result<T, ApiError> {
    let status = response.status();
    if status.is_success() {
        return response
            .json()
            .await
            .map_err(|e| ApiError::Upstream(format!("bad answer from data node: {e}")));
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let message = response
        .json::<wire::NodeError>()
        .await
        .map(|e| e.error)
        .unwrap_or_else(|_| format!("data node answered {status}"));
    Err(node_failure(status.as_u16(), message, retry_after))
}

/// A node's error (an order's, or a failed operation's) as the in-process node's would
/// be reported.
fn node_failure(status: u16, message: String, retry_after: Option<u64>) -> ApiError {
    let error = match status {
        400 => DataError::BadRequest(message),
        401 => DataError::Unauthorized(format!("the data node refused the node secret: {message}")),
        // Orders carry a customer's key only where one is needed: a 403 is that key's.
        403 => DataError::Encryption(atoll_data::error::EncryptionRefusal::KeyInvalid, message),
        404 => DataError::UnknownDatabase(message),
        409 => DataError::Conflict(message),
        // Too many long orders of the organization at once on the node.
        429 => return ApiError::TooManyRequests(message, retry_after.unwrap_or(5)),
        503 => DataError::Storage(message),
        _ => DataError::Internal(message),
    };
    super::data_error(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_order_is_started_within_the_order_timeout_plus_its_body() {
        assert_eq!(start_timeout(0), ORDER_TIMEOUT);
        assert_eq!(
            start_timeout(512 << 20),
            ORDER_TIMEOUT + Duration::from_secs(128)
        );
        assert!(POLL_TIMEOUT <= ORDER_TIMEOUT);
        // Two steps of a move end before the reconciler takes the move as abandoned.
        assert!(MOVE_STEP_BOUND * 2 < atoll_data::moves::MOVE_TIMEOUT);
    }

    #[test]
    fn a_failed_operation_answers_as_its_order_would_have() {
        assert!(matches!(
            node_failure(404, "db".into(), None),
            ApiError::NotFound(..)
        ));
        assert!(matches!(
            node_failure(409, "taken".into(), None),
            ApiError::Conflict(..)
        ));
        assert!(matches!(
            node_failure(429, "busy".into(), Some(7)),
            ApiError::TooManyRequests(_, 7)
        ));
        assert!(matches!(
            node_failure(500, "boom".into(), None),
            ApiError::Upstream(_)
        ));
    }
}
