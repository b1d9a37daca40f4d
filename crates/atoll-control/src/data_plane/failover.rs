//! Failover (docs/STORAGE.md, "Failover"): a database whose primary node is lost gets a
//! new primary elsewhere, rebuilt from object storage, without two nodes ever writing its
//! log at once.
//!
//! What makes a lost node safe to replace is its **write lease** (`atoll_storage::lease`):
//! a control plane started with `--failover-after-secs` answers every heartbeat with a
//! lease of [`wire::WRITE_LEASE_MS`] and records until when it runs. A node past its
//! lease commits nothing and stores nothing. A database is taken over from a node only
//! [`LEASE_MARGIN_MS`] after the recorded end of its lease; what object storage holds
//! then is everything the node ever stored, so in `sync` durability every acknowledged
//! write. A node that writes without a lease (no control plane grants one) is taken
//! from only when the operator says it is stopped (`force`).
//!
//! Two ways in:
//! - `POST …/groups/{g}/failover {location}` (`atoll group failover`): the group's primary
//!   location becomes `location`; each database whose node is up *moves* there (hand-over:
//!   no write lost in either durability), each whose node is lost is *taken over*.
//! - automatically, every [`CHECK_INTERVAL`] on a schedule of its own (apart from the
//!   reconcile passes): a node silent for `--failover-after-secs` has its
//!   databases taken over by another node of its location, or, when its location has no
//!   other healthy node, by the group's next location with one (the group fails over).
//!   A replica fails nothing over before it has been up that long itself: after an outage
//!   of the whole control plane every node looks silent in the store.

use crate::data_plane::{database_config, DataPlane};
use crate::error::ApiError;
use crate::periodic::{self, Schedule};
use crate::state::AppState;
use atoll_meta::{Database, DatabaseState, Group, GroupChanges, NodeRecord, Store};
use atoll_types::groups::FailedOver;
use atoll_types::node as wire;
use atoll_types::nodes::FailedMove;
use atoll_types::ErrorCode;
use std::collections::HashSet;
use std::sync::Arc;

/// How long after the recorded end of a node's lease its databases may be taken over:
/// room for a store write the node started just before its lease ended, and for clocks
/// that tick at slightly different rates.
pub const LEASE_MARGIN_MS: i64 = 10_000;

/// The shortest `--failover-after-secs`: a node must be given the time to lose its lease.
pub const MIN_FAILOVER_AFTER_SECS: u64 = (wire::WRITE_LEASE_MS / 1000) + 15;

/// How often a replica looks for lost nodes: a failover comes at most this long after a
/// node's databases may be taken over.
pub const CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// The lease one replica at a time looks for lost nodes under, and how long it runs:
/// renewed every [`CHECK_INTERVAL`] while a failover rebuilds databases, so a replica that
/// dies holding it delays the next check by this much at most.
const LEASE: &str = "failover";
const LEASE_MS: i64 = 15_000;

/// Looks for lost nodes every [`CHECK_INTERVAL`] and fails their databases over, apart
/// from reconcile passes (`crate::reconciler`), as a holder unique to this replica. Nothing
/// runs without `--failover-after-secs`.
pub fn spawn(state: AppState) -> tokio::task::JoinHandle<()> {
    let holder = uuid::Uuid::new_v4().to_string();
    tokio::spawn(async move {
        if state.data_plane.failover_after().is_none() {
            return;
        }
        periodic::run(
            Schedule::every(CHECK_INTERVAL),
            "cannot check for lost nodes; retrying at the next tick",
            || {
                let (state, holder) = (state.clone(), holder.clone());
                async move {
                    let done = check_once(&state, &holder).await?;
                    if done > 0 {
                        tracing::warn!(databases = done, "lost nodes failed over");
                    }
                    Ok::<(), ApiError>(())
                }
            },
        )
        .await
    })
}

/// One check for lost nodes as `holder`, unless another replica holds the lease (then 0).
async fn check_once(state: &AppState, holder: &str) -> Result<usize, ApiError> {
    let take = || async {
        let now = atoll_meta::now_millis();
        state
            .store
            .acquire_lease(LEASE, holder, now, now + LEASE_MS)
            .await
    };
    if !take().await? {
        return Ok(0);
    }
    // Nodes that registered through another replica since the last check.
    state.data_plane.refresh_nodes(&state.store).await?;
    let work = state.data_plane.fail_over_lost_nodes(&state.store);
    tokio::pin!(work);
    let mut renew = tokio::time::interval(CHECK_INTERVAL);
    renew.tick().await;
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = renew.tick() => {
                if let Err(e) = take().await {
                    tracing::warn!(error = %e, "cannot renew the failover lease");
                }
            }
        }
    }
}

/// What a group failover did.
#[derive(Debug, Default)]
pub struct GroupFailover {
    pub moved: Vec<FailedOver>,
    pub failed: Vec<FailedMove>,
}

/// Whether database copies on `node` may be taken over now, without its hand-over.
fn may_take_from(node: &NodeRecord, now: i64, force: bool) -> Result<(), ApiError> {
    if node.is_healthy(now) {
        return Err(ApiError::Conflict(
            ErrorCode::InvalidRequest,
            format!(
                "node {} is up: its databases move, they are not taken over",
                node.name
            ),
        ));
    }
    if node.leased_until > 0 {
        let free_at = node.leased_until + LEASE_MARGIN_MS;
        if now < free_at {
            let seconds = ((free_at - now) / 1000 + 1) as u64;
            return Err(ApiError::NodeUnavailable(format!(
                "node {} may still be writing until its lease ends: it can be failed over in {seconds} s",
                node.name
            )));
        }
        return Ok(());
    }
    if force {
        return Ok(());
    }
    Err(ApiError::Conflict(
        ErrorCode::InvalidRequest,
        format!(
            "node {} is not answering, but it writes without a lease (no control plane runs with --failover-after-secs), so it may still be writing: make sure it is stopped, then fail over with force",
            node.name
        ),
    ))
}

impl DataPlane {
    /// Takes database `db` over on node `to` from its lost node: `to` rebuilds it from
    /// object storage (everything the old node stored), the store places it there in one
    /// conditional update, and it serves. The old node's copy, should it come back, is
    /// quarantined (by the node itself as it regains its lease, and by the reconciler).
    pub async fn take_over(
        self: &Arc<Self>,
        store: &Store,
        db: &Database,
        to: &str,
    ) -> Result<(), ApiError> {
        let id = db.id.as_str();
        let (group, org) = super::moves::group_and_org(store, db).await?;
        let adopt = wire::AdoptDatabase {
            config: database_config(store, db, &group, &org).await?,
            frame_no: 0,
            // A copy an earlier, failed attempt left on `to` (the store places the
            // database on the lost node, so nothing else put it there).
            replace: true,
        };
        self.admin(to)?.adopt(id, &adopt).await.map_err(|e| {
            ApiError::NodeUnavailable(format!(
                "rebuilding database {} from object storage on node {to} failed: {e}",
                db.name
            ))
        })?;
        let placed = match store.place_database(id, &db.node, to).await {
            Ok(placed) => placed,
            // The store failed around the flip: settled as a move's is, once the store says
            // where the database is (the lost node's copy left alone), rather than leaving
            // a flipped database unserved until its adopted copy counts as abandoned.
            Err(e) => {
                let take_over = super::moves::Move {
                    id: id.to_string(),
                    from: db.node.clone(),
                    to: to.to_string(),
                    handed_over: false,
                };
                return match self.settle_move(store, take_over, group, org).await {
                    Some(true) => Ok(()),
                    Some(false) | None => Err(e.into()),
                };
            }
        };
        if !placed {
            self.release_or_leave(to, id).await;
            return Err(ApiError::Conflict(
                ErrorCode::DatabaseAlreadyExists,
                format!("database {id} changed place meanwhile; nothing was taken over"),
            ));
        }
        self.serve_where_placed(store, id, to, &group, &org).await;
        tracing::warn!(database = %id, from = %db.node, to = %to, "database taken over from a lost node (rebuilt from object storage)");
        Ok(())
    }

    /// Makes `location` the primary location of `group`: every database's primary goes
    /// there, moved from a node that is up, taken over from one that is lost (`force`:
    /// also from a lost node without a lease). A database that cannot go now is reported
    /// and stays; asking again retries it.
    pub async fn fail_over_group(
        self: &Arc<Self>,
        store: &Store,
        group: &Group,
        location: &str,
        force: bool,
    ) -> Result<(Group, GroupFailover), ApiError> {
        if self.is_in_process() {
            return Err(ApiError::Invalid(
                ErrorCode::InvalidRequest,
                "this server runs one data node in process (atoll dev): there is no other node to fail over to".into(),
            ));
        }
        if !group.locations.iter().any(|l| l == location) {
            return Err(ApiError::Invalid(
                ErrorCode::InvalidLocation,
                format!(
                    "group {} is not in location {location}: add the location first",
                    group.name
                ),
            ));
        }
        let group = if group.primary_location == location {
            group.clone()
        } else {
            let mut locations = vec![location.to_string()];
            locations.extend(group.locations.iter().filter(|l| *l != location).cloned());
            store
                .update_group(
                    &group.id,
                    GroupChanges {
                        locations: Some(locations),
                        ..Default::default()
                    },
                )
                .await?
        };
        let mut report = GroupFailover::default();
        for db in store.databases_in_group(&group.id).await? {
            if db.state != DatabaseState::Active || db.deleted_at.is_some() {
                continue;
            }
            match self.fail_over_database(store, &db, location, force).await {
                Ok(Some(done)) => report.moved.push(done),
                Ok(None) => {}
                Err(e) => report.failed.push(FailedMove {
                    id: db.id.clone(),
                    name: db.name.clone(),
                    error: e.to_string(),
                }),
            }
        }
        // Replicas follow the new primaries: the next pass places them.
        crate::reconciler::request_pass();
        Ok((group, report))
    }

    /// Puts `db`'s primary on a node of `location` (nothing to do when it is there).
    async fn fail_over_database(
        self: &Arc<Self>,
        store: &Store,
        db: &Database,
        location: &str,
        force: bool,
    ) -> Result<Option<FailedOver>, ApiError> {
        let records = store.nodes().await?;
        let now = atoll_meta::now_millis();
        let holder = records.iter().find(|r| r.name == db.node);
        if holder.is_some_and(|h| h.location == location) {
            return Ok(None);
        }
        let to = self.place_healthy(store, &records, location, None).await?;
        let how = match holder {
            Some(holder) if !holder.is_healthy(now) => {
                may_take_from(holder, now, force)?;
                self.take_over(store, db, &to).await?;
                "taken-over"
            }
            _ => {
                self.move_database(store, db, &to).await?;
                "moved"
            }
        };
        Ok(Some(FailedOver {
            id: db.id.clone(),
            name: db.name.clone(),
            node: to,
            how: how.into(),
        }))
    }

    /// The node of `location` (other than `except`) that takes a database now: placement's
    /// choice, which must be healthy (placement falls back to any node when none is).
    async fn place_healthy(
        &self,
        store: &Store,
        records: &[NodeRecord],
        location: &str,
        except: Option<&str>,
    ) -> Result<String, ApiError> {
        let now = atoll_meta::now_millis();
        let to = self.place_except(store, location, except).await?;
        if records
            .iter()
            .any(|r| r.name == to && r.is_healthy(now) && !r.draining)
        {
            Ok(to)
        } else {
            Err(ApiError::NodeUnavailable(format!(
                "no healthy node in location {location} to take the primary"
            )))
        }
    }

    /// The automatic part, run every [`CHECK_INTERVAL`]: each node silent for longer than
    /// `--failover-after-secs` whose lease ran out has its databases taken over. Answers
    /// how many databases got a new primary.
    pub async fn fail_over_lost_nodes(self: &Arc<Self>, store: &Store) -> Result<usize, ApiError> {
        let Some(after) = self.failover_after() else {
            return Ok(0);
        };
        // A replica that was down (every replica, after an outage of the control plane)
        // finds every node silent in the store: the nodes could not send heartbeats to
        // anyone. It waits until it has been up for `after` itself, so that a node's
        // silence is one it could have heard the end of, instead of taking over every
        // database of healthy nodes at its first pass.
        if self.uptime() < after {
            return Ok(0);
        }
        let after_ms = after.as_millis() as i64;
        let now = atoll_meta::now_millis();
        let records = store.nodes().await?;
        let mut done = 0usize;
        let mut groups_failed_over = HashSet::new();
        for lost in records.iter().filter(|r| {
            r.heartbeat_at > 0
                && r.leased_until > 0
                && now - r.heartbeat_at > after_ms
                && may_take_from(r, now, false).is_ok()
        }) {
            for db in store.databases_on_node(&lost.name).await? {
                if db.state != DatabaseState::Active || db.deleted_at.is_some() {
                    continue;
                }
                if groups_failed_over.contains(&db.group_id) {
                    continue;
                }
                // Another node of the same location first: the group keeps its primary.
                if let Ok(to) = self
                    .place_healthy(store, &records, &lost.location, Some(&lost.name))
                    .await
                {
                    match self.take_over(store, &db, &to).await {
                        Ok(()) => done += 1,
                        Err(e) => {
                            tracing::warn!(database = %db.id, node = %lost.name, error = %e, "automatic failover failed; the next pass retries")
                        }
                    }
                    continue;
                }
                let Some(group) = store.group_by_id(&db.group_id).await? else {
                    continue;
                };
                let Some(location) = group.locations.iter().find(|l| {
                    **l != lost.location
                        && records
                            .iter()
                            .any(|r| r.location == **l && r.is_healthy(now) && !r.draining)
                }) else {
                    tracing::error!(database = %db.id, node = %lost.name, "node lost and no other location of the group has a healthy node: the database waits for its node");
                    continue;
                };
                groups_failed_over.insert(group.id.clone());
                match self.fail_over_group(store, &group, location, false).await {
                    Ok((_, report)) => {
                        done += report.moved.len();
                        for failed in report.failed {
                            tracing::warn!(database = %failed.id, error = %failed.error, "automatic failover of a database failed; the next pass retries");
                        }
                        tracing::warn!(group = %group.name, node = %lost.name, location = %location, "node lost: the group failed over");
                    }
                    Err(e) => {
                        tracing::warn!(group = %group.name, error = %e, "automatic failover of the group failed; the next pass retries")
                    }
                }
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(heartbeat_at: i64, leased_until: i64) -> NodeRecord {
        NodeRecord {
            name: "east-1".into(),
            location: "east".into(),
            admin_url: String::new(),
            http_url: String::new(),
            hostname_suffix: String::new(),
            registered_at: 0,
            last_seen_at: heartbeat_at,
            heartbeat_at,
            draining: false,
            capacity: 0,
            direct_url: String::new(),
            leased_until,
        }
    }

    #[test]
    fn a_node_is_taken_from_only_past_its_lease_and_the_margin() {
        let lease = wire::WRITE_LEASE_MS as i64;
        let leased = node(1_000, 1_000 + lease);
        let end = 1_000 + lease + LEASE_MARGIN_MS;
        assert!(
            may_take_from(&leased, 1_000, false).is_err(),
            "up: it moves"
        );
        assert!(
            matches!(
                may_take_from(&leased, end - 1, true),
                Err(ApiError::NodeUnavailable(_))
            ),
            "not even with force while the lease may run"
        );
        assert!(may_take_from(&leased, end, false).is_ok());

        let unleased = node(1_000, 0);
        assert!(may_take_from(&unleased, end, false).is_err());
        assert!(
            may_take_from(&unleased, end, true).is_ok(),
            "the operator's word"
        );
    }
}
