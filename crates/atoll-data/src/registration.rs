//! A node registers itself with the control plane and says it is alive (`atoll node
//! --control-plane URL`): every [`HEARTBEAT_INTERVAL_SECS`] it sends who it is, where it is
//! reached and how many databases it takes, with the node secret, to the first control-plane
//! replica that answers. The answer names the replica's metadata store: a node stamped with
//! another store (`crate::identity`) refuses it, as it refuses that store's orders.
//!
//! It also keeps the node converged (`crate::convergence`): after the first heartbeat
//! answered, and after every one answered once the node had lost touch, it asks the
//! control plane for the desired state of every database it holds and applies it before
//! they are served; after a heartbeat that failed it asks again (serving meanwhile), so a
//! configuration pushed while it was briefly unreachable is not left to the reconciler.

use crate::admin::AdminState;
use crate::error::DataError;
use crate::identity::StoreStamp;
use atoll_types::node::{
    DesiredPlacement, DesiredState, Heartbeat, HeartbeatAccepted, HeldDatabaseIds, NodeInfo,
    PlacedDatabases, HEARTBEAT_INTERVAL_SECS,
};
use std::sync::Arc;
use std::time::Duration;

/// How soon a node that serves nothing (out of touch, or not confirmed) tries again.
const RETRY_OUT_OF_TOUCH: Duration = Duration::from_secs(1);

/// What a node tells the control plane about itself.
#[derive(Debug, Clone)]
pub struct Registration {
    /// Control-plane replicas, tried in order until one answers.
    pub control_planes: Vec<String>,
    pub secret: String,
    pub info: NodeInfo,
    pub admin_url: String,
    pub capacity: u64,
}

/// Sends heartbeats until the process ends. The node's admin state holds its store stamp:
/// one stamp for the orders it takes and the control planes it registers with.
pub fn spawn(admin: Arc<AdminState>, registration: Registration) -> tokio::task::JoinHandle<()> {
    // Before the node serves anything: its databases wait for their confirmation.
    admin.node.convergence().require();
    tokio::spawn(async move {
        let client = match reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(10))
            .build()
        {
            Ok(client) => client,
            Err(e) => {
                tracing::error!(error = %e, "cannot build the heartbeat client: this node does not register itself");
                return;
            }
        };
        let stamp = &admin.stamp;
        let mut ticker = tokio::time::interval(Duration::from_secs(HEARTBEAT_INTERVAL_SECS));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut registered = false;
        // A heartbeat failed since the last confirmation: ask for the desired state again.
        let mut missed = false;
        loop {
            ticker.tick().await;
            let mut beat = Heartbeat {
                info: registration.info.clone(),
                admin_url: registration.admin_url.clone(),
                capacity: registration.capacity,
            };
            beat.info.databases = admin.node.database_count();
            let sent_at = std::time::Instant::now();
            match send(&client, &registration, stamp, &beat).await {
                Ok((url, accepted)) => {
                    if !registered {
                        tracing::info!(control_plane = %url, "registered with the control plane");
                        registered = true;
                    }
                    if let Err(e) =
                        take_lease(&client, &registration, &admin, &url, &accepted, sent_at).await
                    {
                        tracing::warn!(error = %e, "the write lease was not renewed; retrying with the next heartbeat");
                    }
                    let (epoch, new_epoch) = admin.node.convergence().heartbeat_answered(sent_at);
                    if new_epoch || missed || unconfirmed(&admin, epoch) {
                        match confirm(&client, &registration, &admin, &url, epoch).await {
                            Ok(report) => {
                                missed = false;
                                if new_epoch || !report.is_empty() {
                                    tracing::info!(
                                        configured = report.configured,
                                        deleted = report.deleted,
                                        quarantined = report.quarantined,
                                        replicas = report.replicas,
                                        "desired state confirmed with the control plane: serving"
                                    );
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot confirm the desired state of this node's databases yet (they answer 503); retrying");
                                ticker.reset_after(RETRY_OUT_OF_TOUCH);
                            }
                        }
                    }
                }
                Err(NotTaken {
                    errors: why,
                    store_down,
                }) => {
                    // Loud on the first failure after a success, then at debug level: a
                    // control plane that is down for a while must not flood the log.
                    if registered {
                        tracing::warn!(error = %why, "no control plane took the heartbeat; retrying");
                    } else {
                        tracing::debug!(error = %why, "no control plane took the heartbeat; retrying");
                    }
                    // A control plane answered that its store is unavailable: nothing can
                    // change while it is, so a node in touch stays in touch (it serves on;
                    // its lease is not renewed).
                    if store_down {
                        admin.node.convergence().store_down_answered(sent_at);
                    }
                    registered = false;
                    missed = true;
                    // Out of touch, the node serves nothing: try again sooner than the next
                    // heartbeat (a resumed process's heartbeat in flight fails at once).
                    if !admin.node.convergence().is_in_touch() {
                        ticker.reset_after(RETRY_OUT_OF_TOUCH);
                    }
                }
            }
        }
    })
}

/// Whether a database the node serves is not confirmed in `epoch` (one installed since
/// the last confirmation: rebuilt at start from the node's index, or one whose
/// configuration could not be applied).
fn unconfirmed(admin: &AdminState, epoch: u64) -> bool {
    admin
        .node
        .databases()
        .iter()
        .any(|db| db.handed_over_at().is_none() && db.confirmed_epoch() < epoch)
}

/// What one confirmation changed.
#[derive(Debug, Default)]
struct Confirmed {
    configured: usize,
    deleted: usize,
    quarantined: usize,
    replicas: usize,
}

impl Confirmed {
    fn is_empty(&self) -> bool {
        self.configured + self.deleted + self.quarantined == 0
    }
}

/// Asks `control_plane` for the desired state of every database the node holds and
/// applies it: newer configurations installed, databases deleted while the node was away
/// removed, copies placed elsewhere (failed over, moved) quarantined, the replica set
/// replaced; each database applied is confirmed in `epoch` and served from then on.
async fn confirm(
    client: &reqwest::Client,
    registration: &Registration,
    admin: &Arc<AdminState>,
    control_plane: &str,
    epoch: u64,
) -> Result<Confirmed, String> {
    let node = &admin.node;
    // A copy handed over (a move) serves nothing and is its move's business.
    let held: Vec<String> = node
        .databases()
        .into_iter()
        .filter(|db| db.handed_over_at().is_none())
        .map(|db| db.id().to_string())
        .collect();
    let response = client
        .post(format!(
            "{control_plane}/v1/internal/nodes/{}/desired-state",
            registration.info.name
        ))
        .bearer_auth(&registration.secret)
        .json(&HeldDatabaseIds { ids: held.clone() })
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if matches!(
        response.status(),
        reqwest::StatusCode::NOT_FOUND | reqwest::StatusCode::METHOD_NOT_ALLOWED
    ) {
        // A control plane older than this node: it cannot say; the node serves what it
        // holds, as nodes did before (upgrade control planes first).
        tracing::warn!(control_plane, "the control plane cannot tell the desired state of this node's databases (an older version): serving what this node holds");
        for id in &held {
            if let Some(db) = node.by_id(id) {
                db.confirm(epoch);
            }
        }
        return Ok(Confirmed::default());
    }
    let desired: DesiredState = response
        .error_for_status()
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let admin = Arc::clone(admin);
    tokio::task::spawn_blocking(move || apply(&admin, desired, epoch))
        .await
        .map_err(|e| e.to_string())?
}

/// Applies a desired state (on a blocking thread: configurations are written and synced).
fn apply(admin: &AdminState, desired: DesiredState, epoch: u64) -> Result<Confirmed, String> {
    let node = &admin.node;
    let mut report = Confirmed::default();
    let mut failed = Vec::new();
    for wanted in desired.databases {
        let Some(db) = node.by_id(&wanted.id) else {
            continue;
        };
        if db.handed_over_at().is_some() {
            continue;
        }
        let id = wanted.id;
        match wanted.placement {
            DesiredPlacement::Here { config } => {
                let newer = config.config_version > db.config().config_version;
                match node.configure(*config) {
                    Ok(db) => {
                        db.confirm(epoch);
                        if newer {
                            tracing::info!(database = %id, "configuration changed while this node was away: installed before serving");
                            report.configured += 1;
                        }
                    }
                    Err(DataError::UnknownDatabase(_)) => {}
                    Err(e) => failed.push(format!("{id}: {e}")),
                }
            }
            DesiredPlacement::Creating => db.confirm(epoch),
            DesiredPlacement::Deleted => match node.delete_database(&id) {
                Ok(()) | Err(DataError::UnknownDatabase(_)) => {
                    tracing::warn!(database = %id, "deleted while this node was away: removed, not served");
                    report.deleted += 1;
                }
                Err(e) => failed.push(format!("{id}: {e}")),
            },
            DesiredPlacement::Elsewhere { node: placed_on } => {
                match crate::quarantine::quarantine(
                    node,
                    &id,
                    admin.quarantine_retention,
                    atoll_storage::now_ms(),
                ) {
                    Ok(_) | Err(DataError::UnknownDatabase(_)) => {
                        tracing::warn!(database = %id, placed_on = placed_on.as_deref().unwrap_or("nowhere"), "placed elsewhere (or unknown to the store) while this node was away: quarantined, not served");
                        report.quarantined += 1;
                    }
                    Err(e) => failed.push(format!("{id}: {e}")),
                }
            }
        }
    }
    report.replicas = desired.replicas.len();
    if let Err(e) =
        crate::replication::follow::Replicas::converge(&admin.node, desired.replicas.clone())
    {
        // A node without object storage holds no replicas: nothing to confirm then.
        if !desired.replicas.is_empty() {
            failed.push(format!("replicas: {e}"));
        }
    }
    if failed.is_empty() {
        Ok(report)
    } else {
        Err(failed.join("; "))
    }
}

/// Takes the write lease a heartbeat's answer grants (or the word that none is needed).
/// A node that does not hold its lease now may have had its databases failed over while it
/// was cut off: before it commits again, every copy it serves that the store places
/// elsewhere is quarantined (kept for an operator's look, never served again).
async fn take_lease(
    client: &reqwest::Client,
    registration: &Registration,
    admin: &AdminState,
    control_plane: &str,
    accepted: &HeartbeatAccepted,
    sent_at: std::time::Instant,
) -> Result<(), String> {
    let node = &admin.node;
    let lease = node.lease();
    let Some(lease_ms) = accepted.lease_ms else {
        return lease.waive().map_err(|e| e.to_string());
    };
    if !lease.holds() || !lease.is_required() {
        // The copies held before asking: one created after the answer is placed here.
        let held: Vec<_> = node
            .databases()
            .into_iter()
            .filter(|db| db.handed_over_at().is_none())
            .map(|db| db.id().to_string())
            .collect();
        let placed: PlacedDatabases = client
            .get(format!(
                "{control_plane}/v1/internal/nodes/{}/databases",
                registration.info.name
            ))
            .bearer_auth(&registration.secret)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        let placed: std::collections::HashSet<String> = placed.ids.into_iter().collect();
        for id in held.iter().filter(|id| !placed.contains(*id)) {
            let quarantined = crate::quarantine::quarantine(
                node,
                id,
                admin.quarantine_retention,
                atoll_storage::now_ms(),
            );
            match quarantined {
                Ok(_) => {
                    tracing::warn!(database = %id, "this copy was failed over to another node while this node was cut off: quarantined, not served")
                }
                Err(e) => return Err(format!("cannot quarantine database {id}: {e}")),
            }
        }
    }
    let was_held = lease.holds() && lease.is_required();
    lease
        .grant(sent_at, std::time::Duration::from_millis(lease_ms))
        .map_err(|e| e.to_string())?;
    if !was_held && lease.holds() {
        tracing::info!("write lease taken: this node commits again");
    }
    Ok(())
}

/// Why no replica took a heartbeat: what each said, and whether one of them answered that
/// its metadata store is unavailable.
struct NotTaken {
    errors: String,
    store_down: bool,
}

/// Sends one heartbeat to the first replica that takes it; answers its URL and answer.
async fn send(
    client: &reqwest::Client,
    registration: &Registration,
    stamp: &StoreStamp,
    beat: &Heartbeat,
) -> Result<(String, HeartbeatAccepted), NotTaken> {
    let mut errors = Vec::new();
    let mut store_down = false;
    for base in &registration.control_planes {
        let base = base.trim_end_matches('/');
        let answer = client
            .post(format!("{base}/v1/internal/nodes/heartbeat"))
            .bearer_auth(&registration.secret)
            .json(beat)
            .send()
            .await;
        let response = match answer {
            Ok(response) if response.status().is_success() => response,
            Ok(response) => {
                let status = response.status();
                if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                    let body: serde_json::Value = response.json().await.unwrap_or_default();
                    store_down |= body["code"] == "store_unavailable";
                }
                errors.push(format!("{base}: {status}"));
                continue;
            }
            Err(e) => {
                errors.push(format!("{base}: {e}"));
                continue;
            }
        };
        let accepted: HeartbeatAccepted = match response.json().await {
            Ok(accepted) => accepted,
            Err(e) => {
                errors.push(format!("{base}: {e}"));
                continue;
            }
        };
        if let Err(e) = stamp.claim(&accepted.store_id) {
            tracing::error!(control_plane = %base, error = %e, "a control plane of another metadata store took the heartbeat: this node serves only its own store");
            errors.push(format!("{base}: another store"));
            continue;
        }
        return Ok((base.to_string(), accepted));
    }
    Err(NotTaken {
        errors: errors.join("; "),
        store_down,
    })
}
