//! Replicas in a group's other locations (docs/STORAGE.md, "Replicas"): the control
//! plane's half of `atoll_data::replication::follow`.
//!
//! A group in N locations gives each of its databases one instance per location: the
//! primary where the store places the database, and a replica in every other location
//! of the group. Where a replica goes is computed from the store alone (rendezvous
//! hashing of the database over the location's nodes that are not draining), so every
//! control-plane replica computes the same placement and adding a node moves few
//! replicas. Each reconcile pass sends every reachable node its whole list
//! (`PUT /v1/replicas`): the node starts what is new and drops what is no longer asked
//! for. Replicas are a cache of the log (object storage holds it): losing one loses
//! nothing, and it is rebuilt wherever the placement says.

use crate::data_plane::{database_config, DataPlane, RemoteNode};
use crate::error::ApiError;
use atoll_meta::{Database, DatabaseState, NodeRecord, Store};
use atoll_types::node::{ReplicaSet, ReplicaSpec, ReplicaStatus};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// One instance of a database: its location, node and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstancePlace {
    pub location: String,
    pub node: String,
    pub primary: bool,
}

/// The node of `location` holding database `db_id`'s replica: the highest rendezvous
/// score among the location's nodes that are not draining.
pub fn replica_node(records: &[NodeRecord], location: &str, db_id: &str) -> Option<String> {
    records
        .iter()
        .filter(|r| r.location == location && !r.draining)
        .max_by_key(|r| {
            let digest = Sha256::digest(format!("{db_id}/{}", r.name).as_bytes());
            (
                u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")),
                r.name.clone(),
            )
        })
        .map(|r| r.name.clone())
}

/// The instances of `db` in a group whose locations are `locations`: the primary (where
/// the store places it), then one replica per other location that has a node.
pub fn instances_of(
    db: &Database,
    locations: &[String],
    records: &[NodeRecord],
) -> Vec<InstancePlace> {
    let primary_location = records
        .iter()
        .find(|r| r.name == db.node)
        .map_or_else(|| db.location.clone(), |r| r.location.clone());
    let mut out = vec![InstancePlace {
        location: primary_location.clone(),
        node: db.node.clone(),
        primary: true,
    }];
    for location in locations {
        if *location == primary_location {
            continue;
        }
        if let Some(node) = replica_node(records, location, &db.id) {
            if node != db.node {
                out.push(InstancePlace {
                    location: location.clone(),
                    node,
                    primary: false,
                });
            }
        }
    }
    out
}

/// A stable UUID-shaped name for the replica of `db_id` in `location`.
pub fn replica_uuid(db_id: &str, location: &str) -> String {
    let digest = Sha256::digest(format!("{db_id}/replica/{location}").as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

impl DataPlane {
    /// Every replica the store asks for, by node (nodes with none are absent).
    pub async fn wanted_replicas(
        &self,
        store: &Store,
    ) -> Result<BTreeMap<String, Vec<ReplicaSpec>>, ApiError> {
        let mut wanted: BTreeMap<String, Vec<ReplicaSpec>> = BTreeMap::new();
        let DataPlane::Remote { .. } = self else {
            return Ok(wanted);
        };
        let records = store.nodes().await?;
        for group in store.groups_in_several_locations().await? {
            let Some(org) = store.org_by_id(&group.org_id).await? else {
                continue;
            };
            for db in store.databases_in_group(&group.id).await? {
                if db.state != DatabaseState::Active {
                    continue;
                }
                let Ok(primary) = self.remote_node(&db.node) else {
                    continue;
                };
                let primary_url = direct_url(&primary);
                let places = instances_of(&db, &group.locations, &records);
                if places.len() < 2 {
                    continue;
                }
                let config = database_config(store, &db, &group, &org).await?;
                for place in places.into_iter().filter(|p| !p.primary) {
                    wanted.entry(place.node).or_default().push(ReplicaSpec {
                        config: config.clone(),
                        primary_url: primary_url.clone(),
                    });
                }
            }
        }
        Ok(wanted)
    }

    /// Sends every node in `nodes` its whole list of replicas. A node that cannot be
    /// reached keeps what it has until the next pass.
    pub async fn converge_replicas(
        &self,
        store: &Store,
        nodes: &[String],
    ) -> Result<usize, ApiError> {
        let mut wanted = self.wanted_replicas(store).await?;
        let mut sent = 0;
        for node in nodes {
            let replicas = wanted.remove(node).unwrap_or_default();
            let count = replicas.len();
            let answer = self
                .admin(node)?
                .set_replicas(&ReplicaSet { replicas })
                .await;
            match answer {
                Ok(_) => sent += count,
                Err(e) => {
                    tracing::warn!(node = %node, error = %e, "cannot send the node its replicas yet")
                }
            }
        }
        Ok(sent)
    }

    /// How far the replica of `db_id` on `node` is (`None` when the node does not answer
    /// or holds no such replica yet).
    pub async fn replica_status(&self, node: &str, db_id: &str) -> Option<ReplicaStatus> {
        let statuses = self.admin(node).ok()?.replicas().await.ok()?;
        statuses.replicas.into_iter().find(|r| r.id == db_id)
    }
}

/// The URL other nodes reach a node's database listener at.
fn direct_url(node: &RemoteNode) -> String {
    if node.info.direct_url.is_empty() {
        node.info.http_url.clone()
    } else {
        node.info.direct_url.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, location: &str) -> NodeRecord {
        NodeRecord {
            name: name.into(),
            location: location.into(),
            admin_url: String::new(),
            http_url: String::new(),
            hostname_suffix: String::new(),
            registered_at: 0,
            last_seen_at: 0,
            heartbeat_at: 0,
            draining: false,
            capacity: 0,
            direct_url: String::new(),
            leased_until: 0,
        }
    }

    #[test]
    fn a_replica_goes_to_a_node_of_its_location_and_stays_there() {
        let mut records = vec![node("a", "ams"), node("b", "fra"), node("c", "fra")];
        let first = replica_node(&records, "fra", "db-1").unwrap();
        assert!(first == "b" || first == "c");
        // The same answer every time, whatever the order of the records.
        records.reverse();
        assert_eq!(replica_node(&records, "fra", "db-1").unwrap(), first);
        // A draining node takes none.
        for r in records.iter_mut() {
            if r.name == first {
                r.draining = true;
            }
        }
        assert_ne!(replica_node(&records, "fra", "db-1").unwrap(), first);
        assert_eq!(replica_node(&records, "nowhere", "db-1"), None);
        // Many databases spread over both nodes.
        records.iter_mut().for_each(|r| r.draining = false);
        let on_b = (0..100)
            .filter(|i| replica_node(&records, "fra", &format!("db-{i}")).unwrap() == "b")
            .count();
        assert!((20..=80).contains(&on_b), "{on_b} of 100 on one node");
    }

    #[test]
    fn replica_names_are_stable_and_uuid_shaped() {
        let a = replica_uuid("db", "fra");
        assert_eq!(a, replica_uuid("db", "fra"));
        assert_ne!(a, replica_uuid("db", "ams"));
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
    }
}
