//! The reconciler: converges the data nodes to the metadata store, which holds the desired
//! state (docs/STORAGE.md, "The reconciler").
//!
//! A pass runs every `ControlConfig::reconcile_interval` on every replica; a lease in the
//! store lets one replica at a time do it, and each step is safe to repeat. What a pass
//! does is [`crate::data_plane::DataPlane::reconcile`]: push every configuration a node is
//! behind on, finish deletes from their tombstones, finish what dead control planes
//! abandoned, and quarantine (never delete) what the store does not know. A failed node
//! call asks for a pass at once ([`request_pass`]). Each node is converged by a task of its
//! own, each order with a timeout suited to it (`crate::data_plane::node_client::ORDER_TIMEOUT`);
//! a pass starts a node's task only when its previous one has finished and waits for none,
//! so one hung node delays its own work only, never a pass's work on the other nodes; lost
//! nodes are failed over apart (`crate::failover::spawn`).

use crate::data_plane::ReconcileReport;
use crate::error::ApiResult;
use crate::periodic::{self, Schedule};
use crate::state::AppState;
use std::time::Duration;

/// Woken when a node call failed after the store recorded a change, so the pass that
/// finishes it runs now rather than at the next tick.
static PASS_WANTED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Asks this process's reconciler for a pass as soon as it can.
pub fn request_pass() {
    PASS_WANTED.notify_one();
}

/// The lease a pass takes, so two replicas do not run the same steps at once.
const LEASE: &str = "reconcile";

/// Runs one pass as `holder` unless another replica holds the lease (then `None`).
pub async fn run_once(
    state: &AppState,
    holder: &str,
    now: i64,
) -> ApiResult<Option<ReconcileReport>> {
    // The lease outlives a few passes, so another replica does not start the same steps
    // while the node tasks this replica's passes started may still run (their orders wait
    // out their timeouts on a hung node); each pass renews it.
    let lease_ms = i64::try_from(state.config.reconcile_interval.as_millis())
        .unwrap_or(i64::MAX / 4)
        .saturating_mul(4);
    if !state
        .store
        .acquire_lease(LEASE, holder, now, now.saturating_add(lease_ms))
        .await?
    {
        return Ok(None);
    }
    let report = state
        .data_plane
        .reconcile(&state.store, state.config.creating_grace, now)
        .await?;
    if report != ReconcileReport::default() {
        tracing::info!(?report, "reconcile pass");
    }
    Ok(Some(report))
}

/// Runs a pass every `interval` (the first at once) and when one is requested, as a holder
/// unique to this replica.
pub fn spawn(state: AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    let holder = uuid::Uuid::new_v4().to_string();
    tokio::spawn(async move {
        // Lost nodes are looked for on a schedule of their own, so nothing a pass does (or
        // the store's slowness) delays a failover; stopped with the reconciler.
        let _failover = AbortOnDrop(crate::failover::spawn(state.clone()));
        // A little later than asked: the node that just failed may be restarting.
        let schedule = Schedule::every(interval).or_when(&PASS_WANTED, Duration::from_millis(500));
        periodic::run(
            schedule,
            "reconcile pass failed; retrying at the next tick",
            || {
                let (state, holder) = (state.clone(), holder.clone());
                async move {
                    // Every replica learns of nodes that registered through another one,
                    // lease or not: it must reach them to serve their databases.
                    if let Err(e) = state.data_plane.refresh_nodes(&state.store).await {
                        tracing::warn!(error = %e, "cannot refresh the data nodes from the store");
                    }
                    run_once(&state, &holder, atoll_meta::now_millis())
                        .await
                        .map(|_| ())
                }
            },
        )
        .await
    })
}

/// Aborts a task when dropped (its owner's task was aborted).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
