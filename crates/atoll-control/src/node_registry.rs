//! Nodes that register themselves (docs/STORAGE.md, "The reconciler", rule 2).
//!
//! An `atoll node` started with `--control-plane` sends a heartbeat every
//! [`wire::HEARTBEAT_INTERVAL_SECS`] to `POST /v1/internal/nodes/heartbeat` with the node
//! secret: name, location, URLs, capacity. Whichever replica answers records it in the
//! store, where every replica finds it ([`DataPlane::refresh_nodes`]); `--node` on
//! `atoll serve` becomes a list of bootstrap addresses. The same nodes ask
//! `GET /v1/internal/routes/{label}` which node holds a database they were asked for and do
//! not hold, to forward the request there (stable endpoints, rule 7).

use crate::data_plane::{node_config, org_credentials, read, DataPlane, RemoteNode};
use crate::error::ApiError;
use atoll_meta::DatabaseState;
use atoll_meta::Store;
use atoll_types::node as wire;
use atoll_types::ErrorCode;
use sha2::Digest;
use subtle::ConstantTimeEq;

impl DataPlane {
    /// Whether the data node runs inside this process (`atoll dev`).
    pub fn is_in_process(&self) -> bool {
        matches!(self, DataPlane::InProcess { .. })
    }

    /// Whether `presented` is the node secret (compared in constant time). The in-process
    /// data plane of `atoll dev` has no remote nodes and accepts none.
    pub fn accepts_node_secret(&self, presented: &str) -> bool {
        match self {
            DataPlane::Remote { secret_digest, .. } => {
                let digest: [u8; 32] = sha2::Sha256::digest(presented.as_bytes()).into();
                bool::from(digest.ct_eq(secret_digest))
            }
            DataPlane::InProcess { .. } => false,
        }
    }

    /// Records a node's heartbeat in the store and in this replica's list of nodes.
    pub async fn heartbeat(
        &self,
        store: &Store,
        beat: wire::Heartbeat,
    ) -> Result<wire::HeartbeatAccepted, ApiError> {
        let DataPlane::Remote { nodes, .. } = self else {
            return Err(ApiError::Invalid(
                ErrorCode::InvalidRequest,
                "this server runs its data node in process (atoll dev): nodes register with atoll serve".into(),
            ));
        };
        atoll_types::names::validate_resource_name("node", &beat.info.name)
            .map_err(|e| ApiError::Invalid(ErrorCode::InvalidRequest, e))?;
        atoll_types::names::validate_resource_name("location", &beat.info.location)
            .map_err(|e| ApiError::Invalid(ErrorCode::InvalidRequest, e))?;
        for (what, url) in [
            ("admin_url", &beat.admin_url),
            ("http_url", &beat.info.http_url),
        ]
        .into_iter()
        .chain((!beat.info.direct_url.is_empty()).then_some(("direct_url", &beat.info.direct_url)))
        {
            let parsed = reqwest::Url::parse(url).map_err(|e| {
                ApiError::Invalid(ErrorCode::InvalidRequest, format!("{what}: {e}"))
            })?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(ApiError::Invalid(
                    ErrorCode::InvalidRequest,
                    format!("{what} must be an http:// or https:// URL"),
                ));
            }
        }
        let admin_url = beat.admin_url.trim_end_matches('/').to_string();
        let record = store
            .node_heartbeat(
                atoll_meta::NodeHeartbeat {
                    name: beat.info.name.clone(),
                    location: beat.info.location.clone(),
                    admin_url: admin_url.clone(),
                    http_url: beat.info.http_url.clone(),
                    direct_url: beat.info.direct_url.clone(),
                    hostname_suffix: beat.info.hostname_suffix.clone(),
                    capacity: i64::try_from(beat.capacity).unwrap_or(i64::MAX),
                    lease_ms: self.lease_ms().map_or(0, |ms| ms as i64),
                },
                atoll_meta::now_millis(),
            )
            .await?;
        let remote = RemoteNode {
            admin_url,
            info: beat.info,
        };
        let is_new = {
            let mut nodes = nodes.write().unwrap_or_else(|p| p.into_inner());
            match nodes.iter_mut().find(|n| n.info.name == remote.info.name) {
                Some(known) => {
                    *known = remote;
                    false
                }
                None => {
                    nodes.push(remote);
                    true
                }
            }
        };
        if is_new {
            tracing::info!(node = %record.as_ref().map_or("", |r| r.name.as_str()), "data node registered");
            // Whatever the store wants of it (configurations, deletes) is done now.
            crate::reconciler::request_pass();
        }
        Ok(wire::HeartbeatAccepted {
            store_id: store.store_id().await?,
            lease_ms: self.lease_ms(),
        })
    }

    /// The write lease a heartbeat's answer grants: one when this replica fails lost
    /// nodes over (`crate::failover`), none otherwise.
    fn lease_ms(&self) -> Option<u64> {
        self.failover_after().map(|_| wire::WRITE_LEASE_MS)
    }

    /// The databases the store places on node `name` (a node that regains its write
    /// lease quarantines its copies of any other).
    pub async fn placed_on(
        &self,
        store: &Store,
        name: &str,
    ) -> Result<wire::PlacedDatabases, ApiError> {
        Ok(wire::PlacedDatabases {
            ids: store
                .databases_on_node(name)
                .await?
                .into_iter()
                .map(|db| db.id)
                .collect(),
        })
    }

    /// What the store wants of each database node `name` holds (`held`), read now: the
    /// node installs it before it serves them (after it starts, or reconnects after its
    /// heartbeats failed), so nothing changed while it was away is served stale.
    pub async fn desired_state(
        &self,
        store: &Store,
        name: &str,
        held: &[String],
    ) -> Result<wire::DesiredState, ApiError> {
        let placed: std::collections::HashMap<String, atoll_meta::Database> = store
            .databases_on_node(name)
            .await?
            .into_iter()
            .map(|db| (db.id.clone(), db))
            .collect();
        let mut groups = std::collections::HashMap::new();
        let mut orgs = std::collections::HashMap::new();
        let mut databases = Vec::with_capacity(held.len());
        for id in held {
            let placement = match placed.get(id) {
                Some(db) if db.state == DatabaseState::Creating => wire::DesiredPlacement::Creating,
                Some(db) => {
                    if !groups.contains_key(&db.group_id) {
                        let group = store.group_by_id(&db.group_id).await?;
                        groups.insert(db.group_id.clone(), group);
                    }
                    if !orgs.contains_key(&db.org_id) {
                        let org = store.org_by_id(&db.org_id).await?;
                        let credentials = org_credentials(store, &db.org_id).await?;
                        orgs.insert(db.org_id.clone(), org.map(|org| (org, credentials)));
                    }
                    match (groups.get(&db.group_id), orgs.get(&db.org_id)) {
                        (Some(Some(group)), Some(Some((org, credentials)))) => {
                            wire::DesiredPlacement::Here {
                                config: Box::new(node_config(db, group, org, credentials)),
                            }
                        }
                        // Its group or organization is gone (deleted with it a moment
                        // ago): nothing of it is served.
                        _ => wire::DesiredPlacement::Deleted,
                    }
                }
                None => match store.database_by_id(id).await? {
                    Some(db) => wire::DesiredPlacement::Elsewhere {
                        node: Some(db.node),
                    },
                    None if store.is_tombstoned(id).await? => wire::DesiredPlacement::Deleted,
                    None => wire::DesiredPlacement::Elsewhere { node: None },
                },
            };
            databases.push(wire::DesiredDatabase {
                id: id.clone(),
                placement,
            });
        }
        let replicas = match self {
            DataPlane::Remote { .. } => self
                .wanted_replicas(store)
                .await?
                .remove(name)
                .unwrap_or_default(),
            DataPlane::InProcess { .. } => Vec::new(),
        };
        Ok(wire::DesiredState {
            databases,
            replicas,
        })
    }

    /// Refuses a location for a group's replicas where they could never run: in the static
    /// shape (`atoll serve --node`, nodes without `--control-plane`) a node has no control
    /// plane to forward a replica's writes through and holds no replicas, so a location
    /// whose nodes all are such would be listed and never serve. A location without nodes
    /// yet is accepted (its replicas start when a node registers there).
    pub async fn check_replica_location(
        &self,
        store: &Store,
        location: &str,
    ) -> Result<(), ApiError> {
        let DataPlane::Remote { .. } = self else {
            return Ok(());
        };
        let nodes: Vec<_> = store
            .nodes()
            .await?
            .into_iter()
            .filter(|n| n.location == location)
            .collect();
        if nodes.is_empty() || nodes.iter().any(|n| n.heartbeat_at > 0) {
            return Ok(());
        }
        Err(ApiError::Invalid(
            ErrorCode::InvalidLocation,
            format!(
                "location {location} has only data nodes that do not register themselves (atoll node without --control-plane, reached through atoll serve --node), and those cannot hold a group's replicas: start its nodes with --control-plane to add it"
            ),
        ))
    }

    /// Adds the nodes other replicas recorded (registered ones, or reached with their
    /// `--node`) to this replica's list, and refreshes the addresses of known ones.
    pub async fn refresh_nodes(&self, store: &Store) -> Result<(), ApiError> {
        let DataPlane::Remote { nodes, .. } = self else {
            return Ok(());
        };
        let records = store.nodes().await?;
        let mut nodes = nodes.write().unwrap_or_else(|p| p.into_inner());
        for record in records {
            let fresh = RemoteNode::from_record(&record);
            match nodes.iter_mut().find(|n| n.info.name == record.name) {
                Some(known) => {
                    known.admin_url = fresh.admin_url;
                    known.info.http_url = fresh.info.http_url;
                    known.info.direct_url = fresh.info.direct_url;
                    known.info.hostname_suffix = fresh.info.hostname_suffix;
                    known.info.location = fresh.info.location;
                }
                None => nodes.push(fresh),
            }
        }
        Ok(())
    }

    /// Where a node forwards a request for the database with hostname label `label`.
    pub async fn route(&self, store: &Store, label: &str) -> Result<wire::DatabaseRoute, ApiError> {
        let not_found = || {
            ApiError::NotFound(
                ErrorCode::DatabaseNotFound,
                format!("no database has the hostname label {label}"),
            )
        };
        let node = store.node_of_label(label).await?.ok_or_else(not_found)?;
        let DataPlane::Remote { nodes, .. } = self else {
            return Err(not_found());
        };
        let url = read(nodes).iter().find(|n| n.info.name == node).map(|n| {
            if n.info.direct_url.is_empty() {
                n.info.http_url.clone()
            } else {
                n.info.direct_url.clone()
            }
        });
        match url {
            Some(url) => Ok(wire::DatabaseRoute { node, url }),
            None => Err(ApiError::NodeUnavailable(format!(
                "data node {node} is not known to this replica yet"
            ))),
        }
    }
}
