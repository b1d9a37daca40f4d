//! The client of the node admin API (`atoll-data/src/admin.rs`): one method per order, its
//! bodies the wire types of `atoll_types::node`.
//!
//! Every order carries the node secret and the store's id, has a timeout by what it asks
//! ([`order_timeout`]), and has its failures mapped to [`ApiError`] the way the in-process
//! node's are ([`send`]). A new order is a route in `atoll-data/src/admin.rs`, its bodies in
//! `atoll_types::node`, and one method here; nothing else spells an admin URL.

use crate::error::ApiError;
use atoll_data::error::DataError;
use atoll_types::node::{
    self as wire, AdoptDatabase, Backups, CreateDatabase, DatabaseConfig, DatabaseIds,
    DatabaseStats, HandedOver, NodeInfo, OrderDone, Quarantine, QuarantinedDatabase, QueryStats,
    ReplicaSet, ReplicaStatuses, RestoreInPlace, RestoreOutcome, UsageBatch,
};
use reqwest::Method;
use std::time::Duration;

/// How long an order to a node may take: most touch one database's files or the node's
/// memory and answer in milliseconds, so a node that has not answered in this long is
/// hung or cut off, and whoever waits on it (the reconciler, an API request) moves on.
pub const ORDER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long creating an empty database may take: a file, its first generation and index
/// entry in object storage.
pub const CREATE_ORDER_TIMEOUT: Duration = Duration::from_secs(15);

/// How long an order that copies a whole database may take: a seeded create (a copy, a
/// dump, a point in time), a restore in place, a move's hand-over or adopt, a rebuild from
/// object storage; and the listing of what object storage holds of a database.
pub const LONG_ORDER_TIMEOUT: Duration = Duration::from_secs(120);

/// The timeout of an order to a node's admin API, by what it asks.
fn order_timeout(method: &Method, path: &str) -> Duration {
    let long = (*method == Method::POST && path == "/v1/databases")
        || ["/restore", "/adopt", "/hand-over", "/backups"]
            .iter()
            .any(|step| path.ends_with(step));
    if long {
        LONG_ORDER_TIMEOUT
    } else {
        ORDER_TIMEOUT
    }
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
        // Each order has a timeout of its own (`order_timeout`); this is the longest.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(LONG_ORDER_TIMEOUT)
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
    /// An order with its credential, the store's id and its timeout.
    fn order(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let timeout = order_timeout(&method, path);
        self.client
            .http
            .request(method, format!("{}{path}", self.admin_url))
            .timeout(timeout)
            .bearer_auth(&self.client.secret)
            .header(wire::STORE_ID_HEADER, self.client.store_id.as_str())
    }

    /// `GET /v1/node`: who the node is.
    pub async fn info(&self) -> Result<NodeInfo, ApiError> {
        send(self.order(Method::GET, "/v1/node")).await
    }

    /// `GET /v1/databases`: the databases the node holds, with their configuration versions.
    pub async fn held_databases(&self) -> Result<DatabaseIds, ApiError> {
        send(self.order(Method::GET, "/v1/databases")).await
    }

    /// `POST /v1/databases`: creates a database, empty or from its seed.
    pub async fn create_database(&self, request: &CreateDatabase) -> Result<OrderDone, ApiError> {
        let mut order = self.order(Method::POST, "/v1/databases");
        if matches!(request.seed, wire::Seed::Empty | wire::Seed::Upload) {
            order = order.timeout(CREATE_ORDER_TIMEOUT);
        }
        send(order.json(request)).await
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

    /// `GET /v1/databases/{id}/backups`: what object storage holds of the database.
    pub async fn backups(&self, id: &str) -> Result<Backups, ApiError> {
        send(self.order(Method::GET, &format!("/v1/databases/{id}/backups"))).await
    }

    /// `POST /v1/databases/{id}/restore`: restores the database in place.
    pub async fn restore(
        &self,
        id: &str,
        request: &RestoreInPlace,
    ) -> Result<RestoreOutcome, ApiError> {
        let path = format!("/v1/databases/{id}/restore");
        send(self.order(Method::POST, &path).json(request)).await
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

    /// `POST /v1/databases/{id}/hand-over`: a move's first step.
    pub async fn hand_over(&self, id: &str) -> Result<HandedOver, ApiError> {
        send(self.order(Method::POST, &format!("/v1/databases/{id}/hand-over"))).await
    }

    /// `POST /v1/databases/{id}/adopt`: rebuilt from object storage, not serving yet.
    pub async fn adopt(&self, id: &str, request: &AdoptDatabase) -> Result<HandedOver, ApiError> {
        let path = format!("/v1/databases/{id}/adopt");
        send(self.order(Method::POST, &path).json(request)).await
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

/// Sends a node admin request and maps its answer, as the in-process calls are mapped.
async fn send<T: serde::de::DeserializeOwned>(
    request: reqwest::RequestBuilder,
) -> Result<T, ApiError> {
    let response = request.send().await.map_err(|e| {
        // Refused or timed out: the node is down or restarting, which a retry outlives.
        if e.is_connect() || e.is_timeout() {
            ApiError::NodeUnavailable(format!("data node unreachable: {e}"))
        } else {
            ApiError::Upstream(format!("data node unreachable: {e}"))
        }
    })?;
    let status = response.status();
    if status.is_success() {
        return response
            .json()
            .await
            .map_err(|e| ApiError::Upstream(format!("bad answer from data node: {e}")));
    }
    let message = response
        .json::<wire::NodeError>()
        .await
        .map(|e| e.error)
        .unwrap_or_else(|_| format!("data node answered {status}"));
    Err(super::data_error(match status.as_u16() {
        400 => DataError::BadRequest(message),
        401 => DataError::Unauthorized(format!("the data node refused the node secret: {message}")),
        404 => DataError::UnknownDatabase(message),
        409 => DataError::Conflict(message),
        503 => DataError::Storage(message),
        _ => DataError::Internal(message),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_time_out_by_what_they_ask() {
        assert_eq!(order_timeout(&Method::GET, "/v1/databases"), ORDER_TIMEOUT);
        assert_eq!(
            order_timeout(&Method::PUT, "/v1/databases/x/config"),
            ORDER_TIMEOUT
        );
        for (method, path) in [
            (Method::POST, "/v1/databases"),
            (Method::POST, "/v1/databases/x/adopt"),
            (Method::POST, "/v1/databases/x/hand-over"),
            (Method::POST, "/v1/databases/x/restore"),
            (Method::GET, "/v1/databases/x/backups"),
        ] {
            assert_eq!(order_timeout(&method, path), LONG_ORDER_TIMEOUT, "{path}");
        }
    }
}
