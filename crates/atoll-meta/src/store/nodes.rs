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

    /// Every recorded node, by name.
    pub async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        self.read("nodes", move |c| {
            Ok(c.query(
                "SELECT name, location, admin_url, http_url, hostname_suffix, registered_at, last_seen_at
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
            })
            .collect())
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
