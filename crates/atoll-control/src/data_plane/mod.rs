//! The control plane's one way to the data nodes.
//!
//! Every database operation the control plane needs from a node goes through
//! [`DataPlane`]: in process for `atoll dev` (the node lives in the same binary), or over
//! the node admin API for `atoll serve` with `atoll node`s. Callers never know which.

pub mod node_client;

use crate::error::ApiError;
use atoll_data::error::DataError;
use atoll_data::node::Node;
use atoll_meta::{Database, DatabaseState, Group, Organization, Store};
use atoll_types::node::{self as wire, CreateDatabase, DatabaseConfig, ExternalKey, Jwk, TokenKey};
use atoll_types::ErrorCode;
use node_client::{NodeAdmin, NodeClient};
use sha2::Digest;
use std::sync::Arc;

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

/// A node whose last heartbeat is older than this (two missed) is passed over by
/// placement while another node of its location is on time.
const HEARTBEAT_LATE_MS: i64 = 2 * 1000 * wire::HEARTBEAT_INTERVAL_SECS as i64;

/// A node a replica reached this recently is healthy (3 reconcile passes at the default
/// interval): placement prefers healthy nodes. A node that sends heartbeats is healthy
/// only within [`atoll_meta::HEARTBEAT_TIMEOUT_MS`] of the last one.
pub const HEALTHY_WITHIN_MS: i64 = atoll_meta::CONTACT_TIMEOUT_MS;

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

    /// The node a new database of a group in `location` goes to, computed from the store
    /// alone so every replica places alike: among the nodes of that location reached by
    /// some replica within [`HEALTHY_WITHIN_MS`] (all of them when none was), the one the
    /// store places the fewest databases on, ties by name.
    pub async fn place(&self, store: &Store, location: &str) -> Result<String, ApiError> {
        self.place_except(store, location, None).await
    }

    /// [`DataPlane::place`], never on `except` (the node a drain moves databases off).
    /// Draining nodes and nodes at their capacity take nothing; healthy nodes are
    /// preferred (all of them when none is).
    pub async fn place_except(
        &self,
        store: &Store,
        location: &str,
        except: Option<&str>,
    ) -> Result<String, ApiError> {
        if let DataPlane::InProcess { .. } = self {
            return Ok(IN_PROCESS_NODE.to_string());
        }
        // The store is the truth: a node that registered through another replica counts.
        self.refresh_nodes(store).await?;
        let nodes = match self {
            DataPlane::InProcess { .. } => return Ok(IN_PROCESS_NODE.to_string()),
            DataPlane::Remote { nodes, .. } => read(nodes).clone(),
        };
        let records = store.nodes().await?;
        let counts = store.database_counts_by_node().await?;
        let count = |name: &str| counts.get(name).copied().unwrap_or(0);
        let mut candidates: Vec<&str> = nodes
            .iter()
            .filter(|n| n.info.location == location && Some(n.info.name.as_str()) != except)
            .map(|n| n.info.name.as_str())
            .collect();
        if candidates.is_empty() {
            return Err(ApiError::Invalid(
                ErrorCode::InvalidLocation,
                format!("no data node serves location {location}"),
            ));
        }
        let record = |name: &str| records.iter().find(|r| r.name == name);
        candidates.retain(|name| {
            record(name)
                .is_none_or(|r| !r.draining && (r.capacity <= 0 || count(name) < r.capacity))
        });
        if candidates.is_empty() {
            return Err(ApiError::NodeUnavailable(format!(
                "every data node of location {location} is draining or full"
            )));
        }
        let now = atoll_meta::now_millis();
        if candidates
            .iter()
            .any(|c| record(c).is_some_and(|r| r.is_healthy(now)))
        {
            candidates.retain(|c| record(c).is_some_and(|r| r.is_healthy(now)));
        }
        // Healthy by the store, but not answering: its heartbeats are late, or an order of
        // this replica could not reach it since the last one. Passed over while another
        // node of the location answers (a create would wait on it, then fail).
        let answering = |c: &&str| record(c).is_some_and(|r| self.answers(r, now));
        if candidates.iter().any(answering) {
            candidates.retain(answering);
        }
        Ok(candidates
            .into_iter()
            .min_by_key(|name| (count(name), *name))
            .map(str::to_string)
            .unwrap_or_default())
    }

    /// Records that an order could not reach `node` (refused or timed out): placement
    /// passes it over until it sends a heartbeat again.
    pub(crate) fn note_unanswered(&self, node: &str) {
        if let DataPlane::Remote { unanswered, .. } = self {
            unanswered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(node.to_string(), atoll_meta::now_millis());
        }
    }

    /// Records that `node` answered an order.
    pub(crate) fn note_answered(&self, node: &str) {
        if let DataPlane::Remote { unanswered, .. } = self {
            unanswered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(node);
        }
    }

    /// Whether the node of `record` can be expected to answer an order now: its heartbeats
    /// are on time (when it sends them), and none of this replica's orders failed to reach
    /// it since the last one.
    pub(crate) fn answers(&self, record: &atoll_meta::NodeRecord, now: i64) -> bool {
        let DataPlane::Remote { unanswered, .. } = self else {
            return true;
        };
        if record.heartbeat_at > 0 && now - record.heartbeat_at > HEARTBEAT_LATE_MS {
            return false;
        }
        let failed_at = unanswered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&record.name)
            .copied();
        failed_at.is_none_or(|at| record.heartbeat_at.max(record.last_seen_at) > at)
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

    pub async fn create_database(
        &self,
        node_name: &str,
        request: CreateDatabase,
    ) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                if request.seed.runs_tenant_sql() {
                    // A dump is tenant SQL: on the node's SQL threads, never on the blocking
                    // pool the metadata store needs, in its organization's turn.
                    let sql_node = Arc::clone(&node);
                    let tenant = request.config.org_id.clone();
                    return sql_node
                        .sql()
                        .run_for(&tenant, move || node.create_database(request).map(|_| ()))
                        .await
                        .and_then(|created| created)
                        .map_err(data_error);
                }
                blocking(move || node.create_database(request).map(|_| ())).await
            }
            DataPlane::Remote { .. } => {
                self.admin(node_name)?.create_database(&request).await?;
                Ok(())
            }
        }
    }

    pub async fn configure(&self, node_name: &str, config: DatabaseConfig) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                blocking(move || node.configure(config).map(|_| ())).await
            }
            DataPlane::Remote { .. } => {
                self.admin(node_name)?.configure(&config).await?;
                Ok(())
            }
        }
    }

    /// Deletes a database and its files; one the node does not have is already gone.
    pub async fn delete_database(&self, node_name: &str, id: &str) -> Result<(), ApiError> {
        let result = match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                let id = id.to_string();
                blocking(move || node.delete_database(&id)).await
            }
            DataPlane::Remote { .. } => {
                self.admin(node_name)?.delete_database(id).await.map(|_| ())
            }
        };
        match result {
            Err(ApiError::NotFound(..)) => Ok(()),
            other => other,
        }
    }

    /// Deletes, on their nodes, databases the store has already forgotten (and holds
    /// tombstones of). A failure is logged, not returned: nobody can reach the database
    /// any more, and the reconciler finishes the delete from its tombstone.
    pub async fn drop_forgotten(&self, store: &Store, databases: &[Database]) {
        for db in databases {
            match self.delete_database(&db.node, &db.id).await {
                Ok(()) => {
                    if let Err(e) = store.remove_tombstone(&db.id).await {
                        tracing::warn!(error = %e, database = %db.id, "could not remove a tombstone: the reconciler will");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, database = %db.id, "could not delete a forgotten database on its node: the reconciler will");
                    crate::reconciler::request_pass();
                }
            }
        }
    }

    pub async fn stats(&self, node_name: &str, id: &str) -> Result<wire::DatabaseStats, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                let id = id.to_string();
                blocking(move || node.stats(&id)).await
            }
            DataPlane::Remote { .. } => self.admin(node_name)?.stats(id).await,
        }
    }

    /// What object storage holds of a database (its node reads it).
    pub async fn backups(&self, node_name: &str, id: &str) -> Result<wire::Backups, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => node.backups(id).await.map_err(data_error),
            DataPlane::Remote { .. } => self.admin(node_name)?.backups(id).await,
        }
    }

    /// Restores a database in place to its state at `timestamp_ms`.
    pub async fn restore_in_place(
        &self,
        node_name: &str,
        id: &str,
        timestamp_ms: i64,
    ) -> Result<wire::RestoreOutcome, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                let id = id.to_string();
                blocking(move || node.restore_in_place(&id, timestamp_ms)).await
            }
            DataPlane::Remote { .. } => {
                self.admin(node_name)?
                    .restore(id, &wire::RestoreInPlace { timestamp_ms })
                    .await
            }
        }
    }

    /// The heaviest statements of a database (statistics live on its node).
    pub async fn top_queries(
        &self,
        node_name: &str,
        id: &str,
    ) -> Result<Vec<wire::QueryStats>, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                Ok(node.meters.top_queries(id, atoll_data::admin::TOP_QUERIES))
            }
            DataPlane::Remote { .. } => self.admin(node_name)?.top_queries(id).await,
        }
    }

    /// The usage batch of every node that answers (the same batch until acknowledged). A
    /// node that does not is skipped and logged: its batch waits for the next collection,
    /// the other nodes' usage is not held up by it.
    pub async fn collect_usage(&self) -> Result<Vec<(String, wire::UsageBatch)>, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                Ok(vec![(IN_PROCESS_NODE.to_string(), node.meters.collect())])
            }
            DataPlane::Remote { nodes, .. } => {
                let mut batches = Vec::new();
                let nodes = read(nodes).clone();
                for remote in &nodes {
                    match self.admin(&remote.info.name)?.collect_usage().await {
                        Ok(batch) => batches.push((remote.info.name.clone(), batch)),
                        Err(e) => {
                            tracing::warn!(node = %remote.info.name, error = %e, "usage not collected from an unreachable node; retried at the next collection")
                        }
                    }
                }
                Ok(batches)
            }
        }
    }

    pub async fn acknowledge_usage(&self, node_name: &str, batch_id: &str) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                node.meters.acknowledge(batch_id);
                Ok(())
            }
            DataPlane::Remote { .. } => self
                .admin(node_name)?
                .acknowledge_usage(batch_id)
                .await
                .map(|_| ()),
        }
    }

    /// The databases a node holds, with their configuration versions.
    async fn held_databases(&self, node_name: &str) -> Result<Vec<wire::HeldDatabase>, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                Ok(atoll_data::admin::held_databases(node).databases)
            }
            DataPlane::Remote { .. } => {
                let ids = self.admin(node_name)?.held_databases().await?;
                Ok(ids.databases)
            }
        }
    }

    /// Moves a database the store does not know out of its node's service, keeping its
    /// files (see `atoll_data::quarantine`).
    pub async fn quarantine(
        &self,
        node_name: &str,
        id: &str,
    ) -> Result<wire::QuarantinedDatabase, ApiError> {
        match self {
            DataPlane::InProcess {
                node,
                quarantine_retention,
                ..
            } => {
                let (node, id, retention) =
                    (Arc::clone(node), id.to_string(), *quarantine_retention);
                blocking(move || {
                    atoll_data::quarantine::quarantine(
                        &node,
                        &id,
                        retention,
                        atoll_meta::now_millis(),
                    )
                })
                .await
            }
            DataPlane::Remote { .. } => self.admin(node_name)?.quarantine(id).await,
        }
    }

    /// The quarantined databases of a node.
    pub async fn quarantined(
        &self,
        node_name: &str,
    ) -> Result<Vec<wire::QuarantinedDatabase>, ApiError> {
        match self {
            DataPlane::InProcess {
                node,
                quarantine_retention,
                ..
            } => {
                let (node, retention) = (Arc::clone(node), *quarantine_retention);
                blocking(move || {
                    atoll_data::quarantine::list(
                        node.data_dir(),
                        retention,
                        atoll_meta::now_millis(),
                    )
                })
                .await
            }
            DataPlane::Remote { .. } => {
                let quarantine = self.admin(node_name)?.quarantined().await?;
                Ok(quarantine.databases)
            }
        }
    }

    /// Removes a quarantined database for good (refused before its retention is over).
    pub async fn purge_quarantined(
        &self,
        node_name: &str,
        id: &str,
    ) -> Result<wire::QuarantinedDatabase, ApiError> {
        match self {
            DataPlane::InProcess {
                node,
                quarantine_retention,
                ..
            } => {
                let (node, id, retention) =
                    (Arc::clone(node), id.to_string(), *quarantine_retention);
                blocking(move || {
                    atoll_data::quarantine::purge(
                        node.data_dir(),
                        &id,
                        retention,
                        atoll_meta::now_millis(),
                    )
                })
                .await
            }
            DataPlane::Remote { .. } => self.admin(node_name)?.purge_quarantined(id).await,
        }
    }

    /// One pass that converges the nodes to the store (see `crate::reconciler`):
    ///
    /// - a database still `creating` after `creating_grace` was abandoned by a control
    ///   plane that died mid-create: removed from its node (by id: the store names it)
    ///   and from the store. Younger ones are left alone: another replica may be creating
    ///   them at this very moment;
    /// - a database a node holds that the store does not know is quarantined, never
    ///   deleted.
    ///
    /// Nodes are converged concurrently, each order with its own timeout; a node that
    /// cannot be reached (or stops answering midway) is reported and skipped, and the next
    /// pass retries.
    pub async fn reconcile(
        &self,
        store: &Store,
        creating_grace: std::time::Duration,
        now: i64,
    ) -> Result<ReconcileReport, ApiError> {
        // The in-process node is checked here too, not only at start: nothing below may
        // touch a data directory that belongs to another store.
        if let DataPlane::InProcess { .. } = self {
            self.claim_store(&store.store_id().await?)?;
        }
        // Nodes other replicas recorded, or that registered since the last pass.
        self.refresh_nodes(store).await?;
        // Lost nodes are failed over on a schedule of their own (`crate::failover`), never
        // behind a pass that waits on a node.
        let mut report = ReconcileReport::default();
        let grace_ms = i64::try_from(creating_grace.as_millis()).unwrap_or(i64::MAX);
        for db in store.databases_in_state(DatabaseState::Creating).await? {
            if db.created_at > now.saturating_sub(grace_ms) {
                continue;
            }
            match self.delete_database(&db.node, &db.id).await {
                Ok(()) => {
                    tracing::warn!(database = %db.id, name = %db.name, "removing a database whose creation was abandoned");
                    store.delete_database(&db.id).await?;
                    report.abandoned_creates.push(db.id);
                }
                Err(e) => {
                    tracing::warn!(database = %db.id, node = %db.node, error = %e, "cannot remove an abandoned create yet");
                }
            }
        }
        // Every node on its own and all at once: a node that hangs holds up its own work
        // only (until its orders time out), never another node's, its replicas included.
        let mut replicas = match self {
            DataPlane::Remote { .. } => Some(self.wanted_replicas(store).await?),
            DataPlane::InProcess { .. } => None,
        };
        let names = self.node_names();
        let passes = names
            .iter()
            .map(|name| {
                let replicas = replicas
                    .as_mut()
                    .map(|wanted| wanted.remove(name).unwrap_or_default());
                Box::pin(self.reconcile_reachable(store, name, replicas))
            })
            .collect();
        let mut failed = None;
        let outcomes = all(passes).await;
        for (name, outcome) in names.iter().zip(outcomes) {
            match outcome {
                Ok(Some(node_report)) => report.add(node_report),
                Ok(None) => report.unreachable_nodes.push(name.clone()),
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(report)
    }
}

impl DataPlane {
    /// Converges node `node_name` to the store when it answers (`None` when it does not:
    /// skipped by this pass).
    /// `replicas`: the node's whole list of replicas, sent once it is converged.
    async fn reconcile_reachable(
        &self,
        store: &Store,
        node_name: &str,
        replicas: Option<Vec<wire::ReplicaSpec>>,
    ) -> Result<Option<ReconcileReport>, ApiError> {
        let held = match self.held_databases(node_name).await {
            Ok(held) => {
                if let DataPlane::Remote { .. } = self {
                    self.note_answered(node_name);
                    store.node_seen(node_name, atoll_meta::now_millis()).await?;
                }
                held
            }
            Err(e) => {
                tracing::warn!(node = %node_name, error = %e, "data node unreachable: skipped by this reconcile pass");
                if let ApiError::NodeUnavailable(_) = e {
                    self.note_unanswered(node_name);
                }
                return Ok(None);
            }
        };
        let mut report = ReconcileReport::default();
        self.reconcile_node(store, node_name, &held, &mut report)
            .await?;
        if let Some(replicas) = replicas {
            let sent = self
                .admin(node_name)?
                .set_replicas(&wire::ReplicaSet { replicas })
                .await;
            if let Err(e) = sent {
                tracing::warn!(node = %node_name, error = %e, "cannot send the node its replicas yet");
            }
        }
        Ok(Some(report))
    }

    /// Whether `error` of an order to `node` says the node stopped answering (refused or
    /// timed out): the rest of its work waits for the next pass instead of each order
    /// waiting out its own timeout.
    fn stopped_answering(&self, node: &str, error: &ApiError) -> bool {
        let stopped = matches!(error, ApiError::NodeUnavailable(_));
        if stopped {
            self.note_unanswered(node);
        }
        stopped
    }

    /// Converges one reachable node, which holds `held`, to the store.
    async fn reconcile_node(
        &self,
        store: &Store,
        node_name: &str,
        held: &[wire::HeldDatabase],
        report: &mut ReconcileReport,
    ) -> Result<(), ApiError> {
        let held_version = |id: &str| held.iter().find(|h| h.id == id).map(|h| h.config_version);
        let now = atoll_meta::now_millis();

        // Copies a move handed over (or adopted) and its control plane left: past the
        // longest a move takes, resumed where the store places the database, released
        // where it does not (its history continues on the other node).
        for copy in held {
            let Some(at) = copy.handed_over_at else {
                continue;
            };
            if !atoll_data::moves::abandoned(at, now) {
                continue;
            }
            let placed = store.database_by_id(&copy.id).await?.map(|db| db.node);
            let resume = match placed.as_deref() {
                Some(node) => node == node_name,
                // Unknown to the store: quarantined below, like any unknown database.
                None => continue,
            };
            let admin = self.admin(node_name)?;
            let (step, finished) = if resume {
                ("resumed", admin.resume(&copy.id).await)
            } else {
                ("released", admin.release(&copy.id).await)
            };
            match finished {
                Ok(_) => {
                    tracing::warn!(node = %node_name, database = %copy.id, step, "finished a move its control plane abandoned");
                    report
                        .moves_finished
                        .push((node_name.to_string(), copy.id.clone()));
                }
                Err(e) => {
                    tracing::warn!(node = %node_name, database = %copy.id, error = %e, "cannot finish an abandoned move yet");
                    if self.stopped_answering(node_name, &e) {
                        return Ok(());
                    }
                }
            }
        }

        // Deletes the store decided (tombstones by id): finished here, then forgotten.
        for tombstone in store.tombstones(node_name).await? {
            if held_version(&tombstone.id).is_some() {
                if let Err(e) = self.delete_database(node_name, &tombstone.id).await {
                    tracing::warn!(node = %node_name, database = %tombstone.id, error = %e, "cannot finish a delete yet");
                    if self.stopped_answering(node_name, &e) {
                        return Ok(());
                    }
                    continue;
                }
                report.deleted.push(tombstone.id.clone());
            }
            store.remove_tombstone(&tombstone.id).await?;
        }

        // Configurations the node is behind on.
        let mut wanted = std::collections::HashSet::new();
        let mut groups = std::collections::HashMap::new();
        let mut orgs = std::collections::HashMap::new();
        for db in store.databases_on_node(node_name).await? {
            wanted.insert(db.id.clone());
            // A create in progress is its creator's (or, past the grace, removed above).
            if db.state == DatabaseState::Creating {
                continue;
            }
            let store_version = u64::try_from(db.config_version).unwrap_or(0);
            match held_version(&db.id) {
                Some(version) if version >= store_version => {}
                Some(_) => {
                    if !groups.contains_key(&db.group_id) {
                        let group = store.group_by_id(&db.group_id).await?;
                        groups.insert(db.group_id.clone(), group);
                    }
                    if !orgs.contains_key(&db.org_id) {
                        let org = store.org_by_id(&db.org_id).await?;
                        let keys = org_credentials(store, &db.org_id).await?;
                        orgs.insert(db.org_id.clone(), org.map(|org| (org, keys)));
                    }
                    let (Some(Some(group)), Some(Some((org, credentials)))) =
                        (groups.get(&db.group_id), orgs.get(&db.org_id))
                    else {
                        continue;
                    };
                    match self
                        .configure(node_name, node_config(&db, group, org, credentials))
                        .await
                    {
                        Ok(()) => report.configured.push(db.id.clone()),
                        Err(e) => {
                            tracing::warn!(node = %node_name, database = %db.id, error = %e, "cannot push a configuration yet");
                            if self.stopped_answering(node_name, &e) {
                                return Ok(());
                            }
                        }
                    }
                }
                None => {
                    // Created or moved there after the node was listed: not missing.
                    if !self.still_missing(store, node_name, &db.id).await? {
                        continue;
                    }
                    // Its files are not on the node (a lost disk, a node replaced under
                    // the same name): never recreated empty, rebuilt from object storage
                    // when the node has it; else reported.
                    tracing::error!(node = %node_name, database = %db.id, name = %db.name, "a database of the store is missing from its node");
                    report.missing.push((node_name.to_string(), db.id.clone()));
                    if let DataPlane::Remote { .. } = self {
                        if let Err(e) = self.rebuild_missing(store, node_name, &db).await {
                            tracing::warn!(node = %node_name, database = %db.id, error = %e, "cannot rebuild a missing database yet");
                        } else {
                            report.rebuilt.push((node_name.to_string(), db.id.clone()));
                        }
                    }
                }
            }
        }

        // What the store does not know, or places on another node: kept aside, never
        // deleted. A serving copy of a database the store places elsewhere is a node that
        // was evacuated while it was unreachable (`atoll admin drain --force`) and came
        // back: it must not serve (another node does), and it may hold the last writes
        // it acknowledged before it went, so it is kept for an operator.
        for held in held {
            if held.handed_over_at.is_some() {
                // A move's copy: finished above once its move is past, not quarantined.
                continue;
            }
            if wanted.contains(&held.id) {
                continue;
            }
            // Read now, not at the start of the pass: a move may have placed it here since.
            match store.database_by_id(&held.id).await? {
                Some(db) if db.node == node_name => continue,
                Some(db) => {
                    tracing::warn!(node = %node_name, database = %held.id, placed_on = %db.node, "a node serves a database the store places on another node: quarantined");
                }
                None => {}
            }
            if store.is_tombstoned(&held.id).await? {
                continue;
            }
            match self.quarantine(node_name, &held.id).await {
                Ok(_) => report
                    .quarantined
                    .push((node_name.to_string(), held.id.clone())),
                // Gone in the meantime (deleted by whoever forgot it): nothing to keep.
                Err(ApiError::NotFound(..)) => {}
                Err(e) => {
                    tracing::warn!(node = %node_name, database = %held.id, error = %e, "cannot quarantine an unknown database");
                    if self.stopped_answering(node_name, &e) {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }
}

impl DataPlane {
    /// Whether `node` still lacks database `id` the store still places there, both asked
    /// again now: a create or a move may have put it there since the pass listed the
    /// node (a rebuild's adopt refuses to replace a copy anyway).
    async fn still_missing(&self, store: &Store, node: &str, id: &str) -> Result<bool, ApiError> {
        if self.held_databases(node).await?.iter().any(|h| h.id == id) {
            return Ok(false);
        }
        Ok(store.database_by_id(id).await?.is_some_and(|now| {
            now.node == node && now.deleted_at.is_none() && now.state != DatabaseState::Creating
        }))
    }

    /// Rebuilds on `node` a database the store places there and the node does not hold,
    /// from object storage: adopted (everything stored), then served.
    async fn rebuild_missing(
        &self,
        store: &Store,
        node: &str,
        db: &Database,
    ) -> Result<(), ApiError> {
        let (Some(group), Some(org)) = (
            store.group_by_id(&db.group_id).await?,
            store.org_by_id(&db.org_id).await?,
        ) else {
            return Ok(());
        };
        let id = &db.id;
        let adopt = wire::AdoptDatabase {
            config: database_config(store, db, &group, &org).await?,
            frame_no: 0,
            replace: false,
        };
        self.admin(node)?.adopt(id, &adopt).await?;
        self.admin(node)?.resume(id).await?;
        tracing::warn!(node = %node, database = %id, "missing database rebuilt from object storage");
        Ok(())
    }
}

/// What a reconcile pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Databases whose node was given the store's newer configuration.
    pub configured: Vec<String>,
    /// Databases deleted from their node from a tombstone.
    pub deleted: Vec<String>,
    /// (node, database) pairs the store places on a node that does not hold them.
    pub missing: Vec<(String, String)>,
    /// Databases whose creation a dead control plane abandoned, removed.
    pub abandoned_creates: Vec<String>,
    /// (node, database) pairs moved to the node's quarantine: unknown to the store.
    pub quarantined: Vec<(String, String)>,
    /// Nodes the pass could not reach.
    pub unreachable_nodes: Vec<String>,
    /// (node, database) pairs missing from their node, rebuilt there from object storage.
    pub rebuilt: Vec<(String, String)>,
    /// (node, database) pairs of moves a dead control plane left half-done, finished.
    pub moves_finished: Vec<(String, String)>,
}

impl ReconcileReport {
    /// Adds what the pass did on one node.
    fn add(&mut self, node: ReconcileReport) {
        let ReconcileReport {
            configured,
            deleted,
            missing,
            abandoned_creates,
            quarantined,
            unreachable_nodes,
            rebuilt,
            moves_finished,
        } = node;
        self.configured.extend(configured);
        self.deleted.extend(deleted);
        self.missing.extend(missing);
        self.abandoned_creates.extend(abandoned_creates);
        self.quarantined.extend(quarantined);
        self.unreachable_nodes.extend(unreachable_nodes);
        self.rebuilt.extend(rebuilt);
        self.moves_finished.extend(moves_finished);
    }
}

/// Runs `futures` concurrently on the current task, answering their outputs in order.
async fn all<F: std::future::Future>(mut futures: Vec<std::pin::Pin<Box<F>>>) -> Vec<F::Output> {
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_some() {
                continue;
            }
            match future.as_mut().poll(cx) {
                std::task::Poll::Ready(value) => *output = Some(value),
                std::task::Poll::Pending => pending = true,
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
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
    }
}

/// What the node must know of a database: its flags (with its organization's quota
/// blocks), its state and the public halves of the database's and the group's signing keys.
///
/// `credentials` are its organization's key sets and client CA ([`org_credentials`]): every
/// configuration a node gets carries them, or the node would stop accepting end users'
/// tokens and client certificates; [`database_config`] reads them.
pub fn node_config(
    db: &Database,
    group: &Group,
    org: &Organization,
    credentials: &OrgCredentials,
) -> DatabaseConfig {
    let state = match db.state {
        _ if db.deleted_at.is_some() => wire::DatabaseState::Deleted,
        DatabaseState::AwaitingUpload => wire::DatabaseState::AwaitingUpload,
        _ if group.archived => wire::DatabaseState::Archived,
        _ => wire::DatabaseState::Active,
    };
    let mut keys = Vec::new();
    for (kid, secret) in [
        (&db.key_id, &db.signing_key),
        (&group.key_id, &group.signing_key),
    ] {
        if let Some(key) = atoll_data::jwt::decode_signing_key(secret) {
            keys.push(TokenKey {
                kid: kid.clone(),
                public_key: atoll_data::jwt::encode_key(key.verifying_key().as_bytes()),
            });
        }
    }
    let block_reason = (org.blocked_reads || org.blocked_writes).then(|| {
        format!(
            "organization {} is over its {} plan's monthly quota: turn on overages or move to a bigger plan",
            org.slug, org.plan_id
        )
    });
    DatabaseConfig {
        id: db.id.clone(),
        name: db.name.clone(),
        org_id: db.org_id.clone(),
        group_id: db.group_id.clone(),
        label: db.label.clone(),
        state,
        block_reads: db.block_reads || org.blocked_reads,
        block_writes: db.block_writes || org.blocked_writes,
        block_reason,
        size_limit: db.size_limit.and_then(|l| u64::try_from(l).ok()),
        allow_attach: db.allow_attach,
        allowed_ips: db.allowed_ips.clone(),
        keys,
        external_keys: credentials.external_keys.clone(),
        client_ca: credentials.client_ca.clone(),
        durability: match db.durability.as_deref() {
            Some("sync") => Some(wire::Durability::Sync),
            Some("lag") => Some(wire::Durability::Lag),
            _ => None,
        },
        pitr_retention_days: plan_retention_days(&org.plan_id),
        config_version: u64::try_from(db.config_version).unwrap_or(0),
        history_starts_at_ms: db.history_starts_at,
    }
}

/// What every database configuration of an organization carries of the organization: the
/// public keys of its key sets (JWKS) and its client-certificate CA.
#[derive(Debug, Clone, Default)]
pub struct OrgCredentials {
    pub external_keys: Vec<ExternalKey>,
    /// PEM certificate.
    pub client_ca: Option<String>,
}

/// The organization's [`OrgCredentials`] as the store holds them.
pub async fn org_credentials(store: &Store, org_id: &str) -> Result<OrgCredentials, ApiError> {
    Ok(OrgCredentials {
        external_keys: org_external_keys(store, org_id).await?,
        client_ca: store.org_client_ca(org_id).await?.map(|ca| ca.certificate),
    })
}

/// The public keys of an organization's key sets (JWKS), as its databases' configurations
/// carry them.
pub async fn org_external_keys(store: &Store, org_id: &str) -> Result<Vec<ExternalKey>, ApiError> {
    let mut keys = Vec::new();
    for set in store.org_key_sets(org_id).await? {
        match serde_json::from_str::<Vec<Jwk>>(&set.keys) {
            Ok(jwks) => keys.extend(jwks.into_iter().map(|jwk| ExternalKey {
                set: set.name.clone(),
                jwk,
            })),
            Err(error) => {
                tracing::error!(%error, org = %org_id, key_set = %set.name, "a stored key set cannot be read: its keys are not installed")
            }
        }
    }
    Ok(keys)
}

/// [`node_config`] with the organization's credentials read from the store.
pub async fn database_config(
    store: &Store,
    db: &Database,
    group: &Group,
    org: &Organization,
) -> Result<DatabaseConfig, ApiError> {
    let credentials = org_credentials(store, &org.id).await?;
    Ok(node_config(db, group, org, &credentials))
}

/// Days of point-in-time history a plan keeps, as Turso's plans do (free 1 day, then 10,
/// 30 and 90); `None` for a plan of the operator's own, which gets the node's
/// `--pitr-retention-days`.
pub fn plan_retention_days(plan_id: &str) -> Option<u32> {
    match plan_id {
        "starter" | "free" => Some(1),
        "developer" => Some(10),
        "scaler" => Some(30),
        "pro" => Some(90),
        _ => None,
    }
}

/// Sends the current configuration of every database of a group to its node (after the
/// group's key, archive state or organization changed).
pub async fn push_group_databases(
    data_plane: &DataPlane,
    store: &Store,
    group: &Group,
) -> Result<(), ApiError> {
    let org = store
        .org_by_id(&group.org_id)
        .await?
        .ok_or_else(|| ApiError::Internal("group without organization".into()))?;
    let credentials = org_credentials(store, &org.id).await?;
    for db in store.databases_in_group(&group.id).await? {
        if db.state != DatabaseState::Creating {
            converge(
                data_plane,
                &db.node,
                node_config(&db, group, &org, &credentials),
            )
            .await;
        }
    }
    Ok(())
}

/// Tells a database's node its configuration, which the store already holds (intent
/// first): a node that cannot take it now gets it from the reconciler, which this asks
/// for a pass at once. So an API change is never half-done: it answers per the store.
/// One the node no longer has (deleted meanwhile) needs nothing.
pub async fn converge(data_plane: &DataPlane, node: &str, config: DatabaseConfig) {
    let id = config.id.clone();
    match data_plane.configure(node, config).await {
        Ok(()) | Err(ApiError::NotFound(..)) => {}
        Err(e) => {
            tracing::warn!(error = %e, database = %id, node, "a node did not take a configuration: the reconciler will push it");
            crate::reconciler::request_pass();
        }
    }
}

/// Sends the configuration of every database of an organization (its quota blocks changed).
pub async fn push_org_databases(
    data_plane: &DataPlane,
    store: &Store,
    org: &Organization,
) -> Result<(), ApiError> {
    let credentials = org_credentials(store, &org.id).await?;
    for group in store.list_groups(&org.id).await? {
        for db in store.databases_in_group(&group.id).await? {
            if db.state != DatabaseState::Creating {
                converge(
                    data_plane,
                    &db.node,
                    node_config(&db, &group, org, &credentials),
                )
                .await;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote() -> DataPlane {
        DataPlane::Remote {
            nodes: std::sync::RwLock::default(),
            secret_digest: [0; 32],
            client: NodeClient::new("", "").unwrap(),
            failover_after: None,
            started: std::time::Instant::now(),
            unanswered: std::sync::Mutex::default(),
        }
    }

    fn node(heartbeat_at: i64) -> atoll_meta::NodeRecord {
        atoll_meta::NodeRecord {
            name: "east-1".into(),
            location: "east".into(),
            admin_url: String::new(),
            http_url: String::new(),
            hostname_suffix: String::new(),
            registered_at: 0,
            last_seen_at: 0,
            heartbeat_at,
            draining: false,
            capacity: 0,
            direct_url: String::new(),
            leased_until: 0,
        }
    }

    #[test]
    fn a_node_answers_while_its_heartbeats_are_on_time_and_no_order_failed_since() {
        let plane = remote();
        let now = atoll_meta::now_millis();
        assert!(plane.answers(&node(now - 1_000), now));
        assert!(
            !plane.answers(&node(now - HEARTBEAT_LATE_MS - 1), now),
            "two heartbeats missed (still healthy for the store: 15 s)"
        );
        plane.note_unanswered("east-1");
        assert!(
            !plane.answers(&node(now - 1_000), now),
            "an order failed since"
        );
        assert!(
            plane.answers(&node(atoll_meta::now_millis() + 1), now),
            "a heartbeat after the failure"
        );
        plane.note_unanswered("east-1");
        plane.note_answered("east-1");
        assert!(plane.answers(&node(now - 1_000), now));
    }
}
