//! The data nodes, recorded by the control plane at each contact: what every replica
//! needs to reach a node, address its databases and place new ones while that node is
//! down, and when a replica last reached it.

use super::Store;
use crate::error::Result;
use std::collections::BTreeMap;

/// A data node as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    pub name: String,
    pub location: String,
    pub admin_url: String,
    pub http_url: String,
    pub hostname_suffix: String,
    pub registered_at: i64,
    pub last_seen_at: i64,
    /// When the node last said it is alive by itself (0: it never registered, the
    /// control plane only reached it).
    pub heartbeat_at: i64,
    /// It takes no new databases and its own are moved away (`atoll admin nodes drain`).
    pub draining: bool,
    /// How many databases it takes at most (0: no bound).
    pub capacity: i64,
    /// Its database listener as other nodes reach it (forwarding); empty: `http_url`.
    pub direct_url: String,
    /// Until when (ms) the write lease granted with its last heartbeat runs; 0: it writes
    /// without one, so its databases are failed over only on an operator's word.
    pub leased_until: i64,
}

/// What a node says of itself in each heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHeartbeat {
    pub name: String,
    pub location: String,
    pub admin_url: String,
    pub http_url: String,
    pub direct_url: String,
    pub hostname_suffix: String,
    pub capacity: i64,
    /// The write lease the answer grants (ms from now); 0: none.
    pub lease_ms: i64,
}

/// A node that registered stops being healthy after this long without a heartbeat (3 missed
/// heartbeats at the node's 5 s interval).
pub const HEARTBEAT_TIMEOUT_MS: i64 = 15_000;
/// A node only reached by the control plane (no heartbeats) is healthy this long after the
/// last contact (3 reconcile passes at the default interval).
pub const CONTACT_TIMEOUT_MS: i64 = 90_000;

impl NodeRecord {
    /// Whether the node counts as up at `now`: by its heartbeats when it sends them, else by
    /// the control plane's last contact.
    pub fn is_healthy(&self, now: i64) -> bool {
        if self.heartbeat_at > 0 {
            now - self.heartbeat_at.max(self.last_seen_at) <= HEARTBEAT_TIMEOUT_MS
        } else {
            now - self.last_seen_at <= CONTACT_TIMEOUT_MS
        }
    }

    /// The URL other nodes forward its databases' requests to.
    pub fn forward_url(&self) -> &str {
        if self.direct_url.is_empty() {
            &self.http_url
        } else {
            &self.direct_url
        }
    }
}

impl Store {
    /// Records a node as it answered just now (`at`): new, or its addresses updated.
    pub async fn record_node(&self, node: NodeRecord) -> Result<()> {
        self.write("record_node", move |c| {
            c.execute(
                "INSERT INTO nodes (name, location, admin_url, http_url, hostname_suffix, registered_at, last_seen_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $6)
                 ON CONFLICT (name) DO UPDATE SET location = excluded.location,
                     admin_url = excluded.admin_url, http_url = excluded.http_url,
                     hostname_suffix = excluded.hostname_suffix, last_seen_at = excluded.last_seen_at",
                &[
                    node.name.into(),
                    node.location.into(),
                    node.admin_url.into(),
                    node.http_url.into(),
                    node.hostname_suffix.into(),
                    node.last_seen_at.into(),
                ],
            )?;
            Ok(())
        })
        .await
    }

    /// Records that a replica reached node `name` at `at`.
    pub async fn node_seen(&self, name: &str, at: i64) -> Result<()> {
        let name = name.to_string();
        self.write("node_seen", move |c| {
            c.execute(
                "UPDATE nodes SET last_seen_at = $2 WHERE name = $1 AND last_seen_at < $2",
                &[name.into(), at.into()],
            )?;
            Ok(())
        })
        .await
    }

    /// Records a node's heartbeat at `at`: it registers (new) or refreshes its addresses,
    /// capacity and write lease. Its draining flag is the operator's and stays as it was.
    pub async fn node_heartbeat(&self, beat: NodeHeartbeat, at: i64) -> Result<Option<NodeRecord>> {
        let name = beat.name.clone();
        let leased_until = if beat.lease_ms > 0 {
            at + beat.lease_ms
        } else {
            0
        };
        self.write("node_heartbeat", move |c| {
            c.execute(
                "INSERT INTO nodes (name, location, admin_url, http_url, hostname_suffix, registered_at, last_seen_at, heartbeat_at, capacity, direct_url, leased_until)
                 VALUES ($1, $2, $3, $4, $5, $6, $6, $6, $7, $8, $9)
                 ON CONFLICT (name) DO UPDATE SET location = excluded.location,
                     admin_url = excluded.admin_url, http_url = excluded.http_url,
                     hostname_suffix = excluded.hostname_suffix, last_seen_at = excluded.last_seen_at,
                     heartbeat_at = excluded.heartbeat_at, capacity = excluded.capacity,
                     direct_url = excluded.direct_url, leased_until = excluded.leased_until",
                &[
                    beat.name.into(),
                    beat.location.into(),
                    beat.admin_url.into(),
                    beat.http_url.into(),
                    beat.hostname_suffix.into(),
                    at.into(),
                    beat.capacity.into(),
                    beat.direct_url.into(),
                    leased_until.into(),
                ],
            )?;
            Ok(())
        })
        .await?;
        Ok(self.nodes().await?.into_iter().find(|n| n.name == name))
    }

    /// Marks a node draining (it takes no new databases) or not. Answers whether it exists.
    pub async fn set_node_draining(&self, name: &str, draining: bool) -> Result<bool> {
        let name = name.to_string();
        self.write("set_node_draining", move |c| {
            Ok(c.execute(
                "UPDATE nodes SET draining = $2 WHERE name = $1",
                &[name.into(), draining.into()],
            )? == 1)
        })
        .await
    }

    /// Every recorded node, by name.
    pub async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        self.read("nodes", move |c| {
            Ok(c.query(
                "SELECT name, location, admin_url, http_url, hostname_suffix, registered_at, last_seen_at,
                        heartbeat_at, draining, capacity, direct_url, leased_until
                 FROM nodes ORDER BY name",
                &[],
            )?
            .iter()
            .map(|row| NodeRecord {
                name: row.text(0),
                location: row.text(1),
                admin_url: row.text(2),
                http_url: row.text(3),
                hostname_suffix: row.text(4),
                registered_at: row.int(5),
                last_seen_at: row.int(6),
                heartbeat_at: row.int(7),
                draining: row.int(8) != 0,
                capacity: row.int(9),
                direct_url: row.text(10),
                leased_until: row.int(11),
            })
            .collect())
        })
        .await
    }

    /// The node the store places the database with hostname label `label` on (a
    /// forwarding node asks, for a database it does not hold).
    pub async fn node_of_label(&self, label: &str) -> Result<Option<String>> {
        let label = label.to_string();
        self.read("node_of_label", move |c| {
            Ok(c.query_opt(
                "SELECT node FROM databases WHERE label = $1",
                &[label.into()],
            )?
            .map(|row| row.text(0)))
        })
        .await
    }

    /// Places database `id` on node `to` if the store still places it on `from` (a move's
    /// or a failover's last step), bumping its configuration version; its location becomes
    /// `to`'s when the store knows that node. Answers whether it moved.
    pub async fn place_database(&self, id: &str, from: &str, to: &str) -> Result<bool> {
        let (id, from, to) = (id.to_string(), from.to_string(), to.to_string());
        self.write("place_database", move |c| {
            Ok(c.execute(
                "UPDATE databases SET node = $3, config_version = config_version + 1,
                        location = COALESCE((SELECT n.location FROM nodes n WHERE n.name = $3), location)
                 WHERE id = $1 AND node = $2",
                &[id.into(), from.into(), to.into()],
            )? == 1)
        })
        .await
    }

    /// How many databases the store places on each node (deleted ones included: they
    /// keep their files until purged). Nodes without any are absent.
    pub async fn database_counts_by_node(&self) -> Result<BTreeMap<String, i64>> {
        self.read("database_counts_by_node", move |c| {
            Ok(
                c.query("SELECT node, COUNT(*) FROM databases GROUP BY node", &[])?
                    .iter()
                    .map(|row| (row.text(0), row.int(1)))
                    .collect(),
            )
        })
        .await
    }
}
