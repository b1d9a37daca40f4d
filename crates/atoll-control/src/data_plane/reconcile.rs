//! One reconcile pass: the nodes converged to the store (see `crate::reconciler`, which
//! runs it).

use super::node_config::{database_config, node_config, org_credentials};
use super::{DataPlane, IN_PROCESS_NODE};
use crate::error::ApiError;
use atoll_meta::{Database, DatabaseState, Store};
use atoll_types::node as wire;
use std::collections::HashMap;
use std::sync::Arc;

impl DataPlane {
    /// One pass that converges the nodes to the store (see `crate::reconciler`):
    ///
    /// - a database still `creating` after `creating_grace` was abandoned by a control
    ///   plane that died mid-create: removed from its node (by id: the store names it)
    ///   and from the store. Younger ones are left alone: another replica may be creating
    ///   them at this very moment;
    /// - a database a node holds that the store does not know is quarantined, never
    ///   deleted.
    ///
    /// Each remote node is converged by a task of its own, which the pass starts only when
    /// the node's previous one has finished and does not wait for: a node that hangs (paused,
    /// cut off) holds up its own work only, never the next pass's work on other nodes, and
    /// at most one convergence per node is in flight. Each node's task logs what it did
    /// (the pass answers what it did itself, and the nodes it found still converging); a
    /// node that cannot be reached (or stops answering midway) is skipped by its task, and
    /// a later pass retries. The in-process node is converged within the pass, which
    /// answers all it did.
    pub async fn reconcile(
        self: &Arc<Self>,
        store: &Store,
        creating_grace: std::time::Duration,
        now: i64,
    ) -> Result<ReconcileReport, ApiError> {
        // The in-process node is checked here too, not only at start: nothing below may
        // touch a data directory that belongs to another store.
        if let DataPlane::InProcess { .. } = self.as_ref() {
            self.claim_store(&store.store_id().await?)?;
        }
        // Nodes other replicas recorded, or that registered since the last pass.
        self.refresh_nodes(store).await?;
        // Lost nodes are failed over on a schedule of their own (`crate::failover`), not
        // by a pass.
        let grace_ms = i64::try_from(creating_grace.as_millis()).unwrap_or(i64::MAX);
        let mut abandoned: HashMap<String, Vec<Database>> = HashMap::new();
        for db in store.databases_in_state(DatabaseState::Creating).await? {
            if db.created_at <= now.saturating_sub(grace_ms) {
                abandoned.entry(db.node.clone()).or_default().push(db);
            }
        }
        let mut report = ReconcileReport::default();
        let DataPlane::Remote { converging, .. } = self.as_ref() else {
            // One node, in this process: converged now, whatever node the records name.
            let abandoned: Vec<Database> = abandoned.into_values().flatten().collect();
            self.remove_abandoned_creates(store, &abandoned, &mut report)
                .await?;
            let name = IN_PROCESS_NODE;
            match self.reconcile_reachable(store, name, None).await? {
                Some(node_report) => report.add(node_report),
                None => report.unreachable_nodes.push(name.to_string()),
            }
            return Ok(report);
        };
        let mut replicas = self.wanted_replicas(store).await?;
        for name in self.node_names() {
            let abandoned = abandoned.remove(&name).unwrap_or_default();
            let replicas = replicas.remove(&name).unwrap_or_default();
            if !lock(converging).insert(name.clone()) {
                report.still_converging.push(name);
                continue;
            }
            let (data_plane, store) = (Arc::clone(self), store.clone());
            tokio::spawn(async move {
                // Forgotten when the task ends, however it ends.
                let _in_flight = InFlight(&data_plane, &name);
                match data_plane
                    .converge_node(&store, &name, &abandoned, Some(replicas))
                    .await
                {
                    Ok(node_report) if node_report != ReconcileReport::default() => {
                        tracing::info!(node = %name, report = ?node_report, "reconcile pass");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(node = %name, error = %e, "reconcile pass failed on a node; retrying at the next tick");
                    }
                }
            });
        }
        // Records of nodes that are no longer listed: their removal fails at once (no
        // such node) and is reported, as before.
        let unlisted: Vec<Database> = abandoned.into_values().flatten().collect();
        self.remove_abandoned_creates(store, &unlisted, &mut report)
            .await?;
        Ok(report)
    }

    /// Converges node `name`: removes the creates abandoned on it (`abandoned`), then
    /// brings it to the store ([`DataPlane::reconcile_reachable`]).
    async fn converge_node(
        &self,
        store: &Store,
        name: &str,
        abandoned: &[Database],
        replicas: Option<Vec<wire::ReplicaSpec>>,
    ) -> Result<ReconcileReport, ApiError> {
        let mut report = ReconcileReport::default();
        if !self
            .remove_abandoned_creates(store, abandoned, &mut report)
            .await?
        {
            report.unreachable_nodes.push(name.to_string());
            return Ok(report);
        }
        match self.reconcile_reachable(store, name, replicas).await? {
            Some(node_report) => report.add(node_report),
            None => report.unreachable_nodes.push(name.to_string()),
        }
        Ok(report)
    }

    /// Removes databases whose creation was abandoned (past the grace): from their node,
    /// then from the store. Answers false when their node stopped answering (the rest
    /// waits for a later pass).
    async fn remove_abandoned_creates(
        &self,
        store: &Store,
        abandoned: &[Database],
        report: &mut ReconcileReport,
    ) -> Result<bool, ApiError> {
        for db in abandoned {
            match self.delete_database(&db.node, &db.id).await {
                Ok(()) => {
                    tracing::warn!(database = %db.id, name = %db.name, "removing a database whose creation was abandoned");
                    store.delete_database(&db.id).await?;
                    report.abandoned_creates.push(db.id.clone());
                }
                Err(e) => {
                    tracing::warn!(database = %db.id, node = %db.node, error = %e, "cannot remove an abandoned create yet");
                    if self.stopped_answering(&db.node, &e) {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }
}

/// A node whose convergence is in flight, until dropped.
struct InFlight<'a>(&'a DataPlane, &'a str);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let DataPlane::Remote { converging, .. } = self.0 {
            lock(converging).remove(self.1);
        }
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
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
        // Looked up once per database of the store: a map, not a scan of the list (a node
        // with 100,000 databases made a scan per database a pass of 5·10⁹ comparisons
        // that took a core for most of the reconcile interval, issue 31).
        let versions: std::collections::HashMap<&str, u64> = held
            .iter()
            .map(|h| (h.id.as_str(), h.config_version))
            .collect();
        let held_version = |id: &str| versions.get(id).copied();
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
    /// Nodes this pass left alone because their previous convergence was still in
    /// flight (a node that hangs: its orders are waiting out their timeouts).
    pub still_converging: Vec<String>,
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
            still_converging,
        } = node;
        self.configured.extend(configured);
        self.deleted.extend(deleted);
        self.missing.extend(missing);
        self.abandoned_creates.extend(abandoned_creates);
        self.quarantined.extend(quarantined);
        self.unreachable_nodes.extend(unreachable_nodes);
        self.rebuilt.extend(rebuilt);
        self.moves_finished.extend(moves_finished);
        self.still_converging.extend(still_converging);
    }
}
