//! A node registers itself with the control plane and says it is alive (`atoll node
//! --control-plane URL`): every [`HEARTBEAT_INTERVAL_SECS`] it sends who it is, where it is
//! reached and how many databases it takes, with the node secret, to the first control-plane
//! replica that answers. The answer names the replica's metadata store: a node stamped with
//! another store (`crate::identity`) refuses it, as it refuses that store's orders.

use crate::admin::AdminState;
use crate::identity::StoreStamp;
use atoll_types::node::{
    Heartbeat, HeartbeatAccepted, NodeInfo, PlacedDatabases, HEARTBEAT_INTERVAL_SECS,
};
use std::sync::Arc;
use std::time::Duration;

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
                }
                Err(why) => {
                    // Loud on the first failure after a success, then at debug level: a
                    // control plane that is down for a while must not flood the log.
                    if registered {
                        tracing::warn!(error = %why, "no control plane took the heartbeat; retrying");
                    } else {
                        tracing::debug!(error = %why, "no control plane took the heartbeat; retrying");
                    }
                    registered = false;
                }
            }
        }
    })
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
                crate::storage::now_ms(),
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

/// Sends one heartbeat to the first replica that takes it; answers its URL and answer.
async fn send(
    client: &reqwest::Client,
    registration: &Registration,
    stamp: &StoreStamp,
    beat: &Heartbeat,
) -> Result<(String, HeartbeatAccepted), String> {
    let mut errors = Vec::new();
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
                errors.push(format!("{base}: {}", response.status()));
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
    Err(errors.join("; "))
}
