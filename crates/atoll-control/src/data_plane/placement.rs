//! Which node takes a database: from the store alone, so every replica places alike, and
//! past nodes that stopped answering.

use super::{read, DataPlane, IN_PROCESS_NODE};
use crate::error::ApiError;
use atoll_meta::Store;
use atoll_types::node as wire;
use atoll_types::ErrorCode;

/// A node whose last heartbeat is older than this (two missed) is passed over by
/// placement while another node of its location is on time.
const HEARTBEAT_LATE_MS: i64 = 2 * 1000 * wire::HEARTBEAT_INTERVAL_SECS as i64;

/// A node a replica reached this recently is healthy (3 reconcile passes at the default
/// interval): placement prefers healthy nodes. A node that sends heartbeats is healthy
/// only within [`atoll_meta::HEARTBEAT_TIMEOUT_MS`] of the last one.
pub const HEALTHY_WITHIN_MS: i64 = atoll_meta::CONTACT_TIMEOUT_MS;

impl DataPlane {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data_plane::node_client::NodeClient;

    fn remote() -> DataPlane {
        DataPlane::Remote {
            nodes: std::sync::RwLock::default(),
            secret_digest: [0; 32],
            client: NodeClient::new("", "").unwrap(),
            failover_after: None,
            started: std::time::Instant::now(),
            unanswered: std::sync::Mutex::default(),
            converging: std::sync::Mutex::default(),
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
