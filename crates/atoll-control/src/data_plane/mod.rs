//! The control plane's one way to the data nodes.
//!
//! Every database operation the control plane needs from a node goes through
//! [`DataPlane`]: in process for `atoll dev` (the node lives in the same binary), or over
//! the node admin API for `atoll serve` with `atoll node`s. Callers never know which.
//!
//! This module is the handle (which nodes there are, how to reach each); the rest is
//! split by job: [`node_client`] (the node admin API's orders, one method each),
//! `orders` (each operation, in process or over that client), `placement` (which node
//! takes a database), `node_config` (what a node must know of a database, and pushing
//! it), `reconcile` (converging the nodes to the store), `moves`, [`failover`] and
//! [`replicas`].

pub mod failover;
mod moves;
pub mod node_client;
mod node_config;
mod orders;
mod placement;
mod reconcile;
pub mod replicas;

use crate::error::ApiError;
use atoll_data::error::DataError;
use atoll_data::node::Node;
use atoll_meta::Store;
use atoll_types::node as wire;
use atoll_types::ErrorCode;
use node_client::{NodeAdmin, NodeClient};
use sha2::Digest;
use std::sync::Arc;

pub use node_config::{
    converge, database_config, node_config, org_credentials, org_external_keys,
    plan_retention_days, push_group_databases, push_org_databases, OrgCredentials,
};
pub use placement::HEALTHY_WITHIN_MS;
pub use reconcile::ReconcileReport;

pub enum DataPlane {
    /// The node runs inside this process (`atoll dev`): it serves every location.
    InProcess {
        node: Arc<Node>,
        http_base: String,
        hostname_suffix: String,
        /// How long a quarantined database is kept before a purge may remove it.
        quarantine_retention: std::time::Duration,
    },
    /// `atoll node`s reached through their admin API: those given at start (`--node`) and
    /// those that registered themselves in the store, refreshed from it
    /// ([`DataPlane::refresh_nodes`]) so every replica sees the same nodes.
    Remote {
        nodes: std::sync::RwLock<Vec<RemoteNode>>,
        /// SHA-256 of the node secret, for the nodes' own calls (heartbeats, routes).
        secret_digest: [u8; 32],
        /// The node admin API's client: the node secret and the store's id with every order.
        client: NodeClient,
        /// Lost nodes' databases are taken over elsewhere after this long without a
        /// heartbeat, and heartbeats are answered with write leases (`crate::failover`);
        /// `None`: failover is the operator's.
        failover_after: Option<std::time::Duration>,
        /// When this process started: a node's silence counts only once this replica has
        /// been up long enough to have heard from it (see `crate::failover`).
        started: std::time::Instant,
        /// Nodes an order could not reach (refused, timed out), with when: placement passes
        /// them over until they send a heartbeat again ([`DataPlane::answers`]).
        unanswered: std::sync::Mutex<std::collections::HashMap<String, i64>>,
        /// Nodes whose convergence (a reconcile pass's work on one node) is in flight: a
        /// pass starts a node's only when its previous one has finished, and waits for
        /// none (`reconcile`), so a hung node holds up its own work only.
        converging: std::sync::Mutex<std::collections::HashSet<String>>,
    },
}

/// An `atoll node` as the control plane knows it.
#[derive(Debug, Clone)]
pub struct RemoteNode {
    pub admin_url: String,
    pub info: wire::NodeInfo,
}

/// The name the in-process node is recorded under.
const IN_PROCESS_NODE: &str = "local";

impl RemoteNode {
    pub(crate) fn from_record(record: &atoll_meta::NodeRecord) -> RemoteNode {
        RemoteNode {
            admin_url: record.admin_url.clone(),
            info: wire::NodeInfo {
                name: record.name.clone(),
                location: record.location.clone(),
                hostname_suffix: record.hostname_suffix.clone(),
                http_url: record.http_url.clone(),
                databases: 0,
                direct_url: record.direct_url.clone(),
            },
        }
    }
}

impl DataPlane {
    pub fn in_process(node: Arc<Node>, http_base: &str, hostname_suffix: &str) -> DataPlane {
        DataPlane::InProcess {
            node,
            http_base: http_base.trim_end_matches('/').to_string(),
            hostname_suffix: hostname_suffix.to_string(),
            quarantine_retention: atoll_data::quarantine::DEFAULT_RETENTION,
        }
    }

    /// The in-process data plane, keeping quarantined databases for `retention` before a
    /// purge may remove them (no effect on remote nodes: each has its own setting).
    pub fn with_quarantine_retention(mut self, retention: std::time::Duration) -> DataPlane {
        if let DataPlane::InProcess {
            quarantine_retention,
            ..
        } = &mut self
        {
            *quarantine_retention = retention;
        }
        self
    }

    /// Connects to `atoll node`s by their admin URLs, asking each who it is, as the control
    /// plane of the store `store_id`, and records each in the store. A node that does not
    /// answer is taken as the store last recorded it (the replica starts and serves the
    /// other nodes' databases; its own answer 503 until it is back). Fails when a node is
    /// unreachable and was never recorded, refuses the secret, or belongs to another store.
    pub async fn remote(
        admin_urls: &[String],
        secret: &str,
        store: &Store,
        store_id: &str,
    ) -> Result<DataPlane, ApiError> {
        let client = NodeClient::new(secret, store_id)?;
        let recorded = store.nodes().await?;
        let mut nodes = Vec::new();
        for url in admin_urls {
            let admin_url = url.trim_end_matches('/').to_string();
            let answer = client.at(&admin_url).info().await;
            let info = match answer {
                Ok(info) => {
                    let now = atoll_meta::now_millis();
                    store
                        .record_node(atoll_meta::NodeRecord {
                            name: info.name.clone(),
                            location: info.location.clone(),
                            admin_url: admin_url.clone(),
                            http_url: info.http_url.clone(),
                            hostname_suffix: info.hostname_suffix.clone(),
                            registered_at: now,
                            last_seen_at: now,
                            heartbeat_at: 0,
                            draining: false,
                            capacity: 0,
                            direct_url: info.direct_url.clone(),
                            leased_until: 0,
                        })
                        .await?;
                    info
                }
                Err(ApiError::NodeUnavailable(cause)) => {
                    let Some(record) = recorded.iter().find(|r| r.admin_url == admin_url) else {
                        return Err(ApiError::NodeUnavailable(format!(
                            "{admin_url} was never reached, so nothing is known of it: {cause}"
                        )));
                    };
                    tracing::warn!(node = %record.name, admin_url = %admin_url, error = %cause, "data node unreachable at start: serving without it until it is back");
                    RemoteNode::from_record(record).info
                }
                Err(other) => return Err(other),
            };
            if nodes.iter().any(|n: &RemoteNode| n.info.name == info.name) {
                return Err(ApiError::Internal(format!(
                    "two data nodes are named {}",
                    info.name
                )));
            }
            nodes.push(RemoteNode { admin_url, info });
        }
        // Nodes that registered themselves (and were not given): every replica knows them.
        for record in &recorded {
            if !nodes.iter().any(|n| n.info.name == record.name) && record.heartbeat_at > 0 {
                nodes.push(RemoteNode::from_record(record));
            }
        }
        Ok(DataPlane::Remote {
            nodes: std::sync::RwLock::new(nodes),
            secret_digest: sha2::Sha256::digest(secret.as_bytes()).into(),
            client,
            failover_after: None,
            started: std::time::Instant::now(),
            unanswered: std::sync::Mutex::default(),
            converging: std::sync::Mutex::default(),
        })
    }

    /// Fails lost nodes' databases over after `after` without a heartbeat (`atoll serve
    /// --failover-after-secs`), granting registered nodes write leases meanwhile.
    pub fn with_failover_after(mut self, after: Option<std::time::Duration>) -> DataPlane {
        if let DataPlane::Remote { failover_after, .. } = &mut self {
            *failover_after = after;
        }
        self
    }

    /// How long this replica has been up (in process: always zero, it fails nothing over).
    pub fn uptime(&self) -> std::time::Duration {
        match self {
            DataPlane::Remote { started, .. } => started.elapsed(),
            DataPlane::InProcess { .. } => std::time::Duration::ZERO,
        }
    }

    /// How long a node may go without a heartbeat before its databases are failed over.
    pub fn failover_after(&self) -> Option<std::time::Duration> {
        match self {
            DataPlane::Remote { failover_after, .. } => *failover_after,
            DataPlane::InProcess { .. } => None,
        }
    }

    /// The admin API of remote node `node_name`: its orders ([`node_client`]).
    pub(crate) fn admin(&self, node_name: &str) -> Result<NodeAdmin<'_>, ApiError> {
        match self {
            DataPlane::Remote { client, .. } => {
                let remote = self.remote_node(node_name)?;
                Ok(client.at(&remote.admin_url))
            }
            DataPlane::InProcess { .. } => Err(ApiError::Internal("no remote nodes".into())),
        }
    }

    /// Who each node is: name, location, URLs (the in-process node serves every location:
    /// it is given as `location`).
    pub fn node_infos(&self, location: &str) -> Vec<wire::NodeInfo> {
        match self {
            DataPlane::InProcess {
                http_base,
                hostname_suffix,
                node,
                ..
            } => vec![wire::NodeInfo {
                name: IN_PROCESS_NODE.to_string(),
                location: location.to_string(),
                hostname_suffix: hostname_suffix.clone(),
                http_url: http_base.clone(),
                databases: node.database_count(),
                direct_url: String::new(),
            }],
            DataPlane::Remote { nodes, .. } => read(nodes).iter().map(|n| n.info.clone()).collect(),
        }
    }

    /// The names of the nodes, in order.
    pub fn node_names(&self) -> Vec<String> {
        match self {
            DataPlane::InProcess { .. } => vec![IN_PROCESS_NODE.to_string()],
            DataPlane::Remote { nodes, .. } => {
                read(nodes).iter().map(|n| n.info.name.clone()).collect()
            }
        }
    }

    /// Accepts orders from the store `store_id` only. A remote node checks it on every
    /// order; the in-process node's data directory is stamped here, at start, so a
    /// process pointed at another store refuses to manage its databases.
    pub fn claim_store(&self, store_id: &str) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                atoll_data::identity::StoreStamp::open(node.data_dir())
                    .and_then(|stamp| stamp.claim(store_id))
                    .map_err(|e| ApiError::Internal(e.to_string()))
            }
            DataPlane::Remote { client, .. } if client.store_id() == store_id => Ok(()),
            DataPlane::Remote { .. } => Err(ApiError::Internal(
                "the data plane was set up for another store".into(),
            )),
        }
    }

    pub(crate) fn remote_node(&self, name: &str) -> Result<RemoteNode, ApiError> {
        match self {
            DataPlane::Remote { nodes, .. } => read(nodes)
                .iter()
                .find(|n| n.info.name == name)
                .cloned()
                .ok_or_else(|| ApiError::Upstream(format!("data node {name} is not known"))),
            DataPlane::InProcess { .. } => Err(ApiError::Internal("no remote nodes".into())),
        }
    }

    /// The database's hostname: `<db>-<org>.<suffix of its node>`.
    pub fn hostname(&self, node: &str, label: &str) -> String {
        let suffix = match self {
            DataPlane::InProcess {
                hostname_suffix, ..
            } => hostname_suffix.as_str(),
            DataPlane::Remote { .. } => &self
                .remote_node(node)
                .map(|n| n.info.hostname_suffix)
                .unwrap_or_else(|_| "invalid".into()),
        };
        format!("{label}.{suffix}")
    }

    /// A URL of the database that works without wildcard DNS (path prefix form).
    pub fn http_url(&self, node: &str, label: &str) -> String {
        let base = match self {
            DataPlane::InProcess { http_base, .. } => http_base.as_str(),
            DataPlane::Remote { .. } => &self
                .remote_node(node)
                .map(|n| n.info.http_url)
                .unwrap_or_default(),
        };
        format!("{}/db/{label}/", base.trim_end_matches('/'))
    }
}

pub(crate) fn read(
    nodes: &std::sync::RwLock<Vec<RemoteNode>>,
) -> std::sync::RwLockReadGuard<'_, Vec<RemoteNode>> {
    nodes.read().unwrap_or_else(|p| p.into_inner())
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DataError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(data_error)
}

/// Node failures as the API reports them.
pub(crate) fn data_error(error: DataError) -> ApiError {
    match error {
        DataError::BadRequest(message) => ApiError::Invalid(ErrorCode::InvalidSeed, message),
        DataError::Conflict(message) => {
            ApiError::Conflict(ErrorCode::DatabaseAlreadyExists, message)
        }
        DataError::UnknownDatabase(id) | DataError::UnknownDatabaseForToken(id) => {
            ApiError::NotFound(
                ErrorCode::DatabaseNotFound,
                format!("database {id} is not on its node"),
            )
        }
        DataError::NoDatabase(m)
        | DataError::Unauthorized(m)
        | DataError::Forbidden(m)
        | DataError::Unavailable(m)
        | DataError::TooLarge(m)
        | DataError::Timeout(m)
        | DataError::TooManyRequests(m, _)
        | DataError::Storage(m)
        | DataError::Recovering(m, _)
        | DataError::Internal(m) => ApiError::Upstream(m),
        DataError::Encryption(refusal, m) => match refusal {
            atoll_data::error::EncryptionRefusal::KeyMalformed => {
                ApiError::Invalid(ErrorCode::EncryptionKeyMalformed, m)
            }
            atoll_data::error::EncryptionRefusal::NotAvailable => {
                ApiError::Invalid(ErrorCode::EncryptionNotAvailable, m)
            }
            // A key the control plane could not check against its own record (the current
            // key of a repeated rotation) that the pages refused.
            atoll_data::error::EncryptionRefusal::KeyInvalid => ApiError::Forbidden(m),
            // The control plane sends the keys orders need: a refusal is the node's fault.
            atoll_data::error::EncryptionRefusal::KeyRequired => ApiError::Upstream(m),
        },
    }
}
