//! Every operation on a node's databases, to the in-process node or over the node admin
//! API ([`super::node_client`]): callers never know which.

use super::{blocking, data_error, read, DataPlane, IN_PROCESS_NODE};
use crate::error::ApiError;
use atoll_meta::{Database, Store};
use atoll_types::node::{self as wire, CreateDatabase, DatabaseConfig};
use std::sync::Arc;

impl DataPlane {
    /// Creates a database; an encrypted one (`request.config.encryption`) with its `key`
    /// (base64), which the node uses for the new file's first pages and then forgets.
    pub async fn create_database(
        &self,
        node_name: &str,
        request: CreateDatabase,
        key: Option<zeroize::Zeroizing<String>>,
    ) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                if request.seed.runs_tenant_sql() {
                    // A dump is tenant SQL: on the node's SQL threads, never on the blocking
                    // pool the metadata store needs, in its organization's turn.
                    let sql_node = Arc::clone(&node);
                    let tenant = request.config.org_id.clone();
                    return sql_node
                        .sql()
                        .run_for(&tenant, move || {
                            node.create_database_with_key(
                                request,
                                key.as_deref().map(String::as_str),
                            )
                            .map(|_| ())
                        })
                        .await
                        .and_then(|created| created)
                        .map_err(data_error);
                }
                blocking(move || {
                    node.create_database_with_key(request, key.as_deref().map(String::as_str))
                        .map(|_| ())
                })
                .await
            }
            DataPlane::Remote { .. } => {
                self.admin(node_name)?
                    .create_database(&request, key.as_deref().map(String::as_str))
                    .await?;
                Ok(())
            }
        }
    }

    pub async fn configure(&self, node_name: &str, config: DatabaseConfig) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                blocking(move || node.configure(config).map(|_| ())).await
            }
            DataPlane::Remote { .. } => {
                self.admin(node_name)?.configure(&config).await?;
                Ok(())
            }
        }
    }

    /// Re-encrypts a database under a new key; `current` and `new` are the keys (base64).
    pub async fn rotate_encryption_key(
        &self,
        node_name: &str,
        order: wire::RotateEncryptionKey,
        current: zeroize::Zeroizing<String>,
        new: zeroize::Zeroizing<String>,
    ) -> Result<wire::EncryptionKeyRotated, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                let id = order.config.id.clone();
                blocking(move || node.rotate_encryption_key(&id, order, &current, &new)).await
            }
            DataPlane::Remote { .. } => {
                self.admin(node_name)?
                    .rotate_encryption_key(&order, &current, &new)
                    .await
            }
        }
    }

    /// Deletes a database and its files; one the node does not have is already gone.
    pub async fn delete_database(&self, node_name: &str, id: &str) -> Result<(), ApiError> {
        let result = match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                let id = id.to_string();
                blocking(move || node.delete_database(&id)).await
            }
            DataPlane::Remote { .. } => {
                self.admin(node_name)?.delete_database(id).await.map(|_| ())
            }
        };
        match result {
            Err(ApiError::NotFound(..)) => Ok(()),
            other => other,
        }
    }

    /// Deletes, on their nodes, databases the store has already forgotten (and holds
    /// tombstones of). A failure is logged, not returned: nobody can reach the database
    /// any more, and the reconciler finishes the delete from its tombstone.
    pub async fn drop_forgotten(&self, store: &Store, databases: &[Database]) {
        for db in databases {
            match self.delete_database(&db.node, &db.id).await {
                Ok(()) => {
                    if let Err(e) = store.remove_tombstone(&db.id).await {
                        tracing::warn!(error = %e, database = %db.id, "could not remove a tombstone: the reconciler will");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, database = %db.id, "could not delete a forgotten database on its node: the reconciler will");
                    crate::reconciler::request_pass();
                }
            }
        }
    }

    /// Bytes on disk of each of `ids` on node `node_name` (at most
    /// [`wire::SIZES_PER_REQUEST`]); a database the node does not hold is left out.
    pub async fn sizes(&self, node_name: &str, ids: Vec<String>) -> Result<wire::Sizes, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                blocking(move || Ok(node.sizes(&ids))).await
            }
            DataPlane::Remote { .. } => self.admin(node_name)?.sizes(&ids).await,
        }
    }

    pub async fn stats(&self, node_name: &str, id: &str) -> Result<wire::DatabaseStats, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                let id = id.to_string();
                blocking(move || node.stats(&id)).await
            }
            DataPlane::Remote { .. } => self.admin(node_name)?.stats(id).await,
        }
    }

    /// What object storage holds of a database (its node reads it).
    pub async fn backups(&self, node_name: &str, id: &str) -> Result<wire::Backups, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => node.backups(id).await.map_err(data_error),
            DataPlane::Remote { .. } => self.admin(node_name)?.backups(id).await,
        }
    }

    /// Restores a database in place to its state at `timestamp_ms`; an encrypted one with
    /// its `key` (base64).
    pub async fn restore_in_place(
        &self,
        node_name: &str,
        id: &str,
        timestamp_ms: i64,
        key: Option<zeroize::Zeroizing<String>>,
    ) -> Result<wire::RestoreOutcome, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                let id = id.to_string();
                blocking(move || {
                    node.restore_in_place(&id, timestamp_ms, key.as_deref().map(String::as_str))
                })
                .await
            }
            DataPlane::Remote { .. } => {
                self.admin(node_name)?
                    .restore(
                        id,
                        &wire::RestoreInPlace { timestamp_ms },
                        key.as_deref().map(String::as_str),
                    )
                    .await
            }
        }
    }

    /// The heaviest statements of a database (statistics live on its node).
    pub async fn top_queries(
        &self,
        node_name: &str,
        id: &str,
    ) -> Result<Vec<wire::QueryStats>, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                Ok(node.meters.top_queries(id, atoll_data::admin::TOP_QUERIES))
            }
            DataPlane::Remote { .. } => self.admin(node_name)?.top_queries(id).await,
        }
    }

    /// The usage batch of every node that answers (the same batch until acknowledged). A
    /// node that does not is skipped and logged: its batch waits for the next collection,
    /// the other nodes' usage is not held up by it.
    pub async fn collect_usage(&self) -> Result<Vec<(String, wire::UsageBatch)>, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                Ok(vec![(IN_PROCESS_NODE.to_string(), node.meters.collect())])
            }
            DataPlane::Remote { nodes, .. } => {
                let mut batches = Vec::new();
                let nodes = read(nodes).clone();
                for remote in &nodes {
                    match self.admin(&remote.info.name)?.collect_usage().await {
                        Ok(batch) => batches.push((remote.info.name.clone(), batch)),
                        Err(e) => {
                            tracing::warn!(node = %remote.info.name, error = %e, "usage not collected from an unreachable node; retried at the next collection")
                        }
                    }
                }
                Ok(batches)
            }
        }
    }

    pub async fn acknowledge_usage(&self, node_name: &str, batch_id: &str) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                node.meters.acknowledge(batch_id);
                Ok(())
            }
            DataPlane::Remote { .. } => self
                .admin(node_name)?
                .acknowledge_usage(batch_id)
                .await
                .map(|_| ()),
        }
    }

    /// The databases a node holds, with their configuration versions.
    pub(super) async fn held_databases(
        &self,
        node_name: &str,
    ) -> Result<Vec<wire::HeldDatabase>, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                Ok(atoll_data::admin::held_databases(node).databases)
            }
            DataPlane::Remote { .. } => {
                let ids = self.admin(node_name)?.held_databases().await?;
                Ok(ids.databases)
            }
        }
    }

    /// Moves a database the store does not know out of its node's service, keeping its
    /// files (see `atoll_data::quarantine`).
    pub async fn quarantine(
        &self,
        node_name: &str,
        id: &str,
    ) -> Result<wire::QuarantinedDatabase, ApiError> {
        match self {
            DataPlane::InProcess {
                node,
                quarantine_retention,
                ..
            } => {
                let (node, id, retention) =
                    (Arc::clone(node), id.to_string(), *quarantine_retention);
                blocking(move || {
                    atoll_data::quarantine::quarantine(
                        &node,
                        &id,
                        retention,
                        atoll_meta::now_millis(),
                    )
                })
                .await
            }
            DataPlane::Remote { .. } => self.admin(node_name)?.quarantine(id).await,
        }
    }

    /// The quarantined databases of a node.
    pub async fn quarantined(
        &self,
        node_name: &str,
    ) -> Result<Vec<wire::QuarantinedDatabase>, ApiError> {
        match self {
            DataPlane::InProcess {
                node,
                quarantine_retention,
                ..
            } => {
                let (node, retention) = (Arc::clone(node), *quarantine_retention);
                blocking(move || {
                    atoll_data::quarantine::list(
                        node.data_dir(),
                        retention,
                        atoll_meta::now_millis(),
                    )
                })
                .await
            }
            DataPlane::Remote { .. } => {
                let quarantine = self.admin(node_name)?.quarantined().await?;
                Ok(quarantine.databases)
            }
        }
    }

    /// Removes a quarantined database for good (refused before its retention is over).
    pub async fn purge_quarantined(
        &self,
        node_name: &str,
        id: &str,
    ) -> Result<wire::QuarantinedDatabase, ApiError> {
        match self {
            DataPlane::InProcess {
                node,
                quarantine_retention,
                ..
            } => {
                let (node, id, retention) =
                    (Arc::clone(node), id.to_string(), *quarantine_retention);
                blocking(move || {
                    atoll_data::quarantine::purge(
                        node.data_dir(),
                        &id,
                        retention,
                        atoll_meta::now_millis(),
                    )
                })
                .await
            }
            DataPlane::Remote { .. } => self.admin(node_name)?.purge_quarantined(id).await,
        }
    }
}
