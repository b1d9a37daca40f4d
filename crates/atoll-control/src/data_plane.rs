//! The control plane's one way to the data nodes.
//!
//! Every database operation the control plane needs from a node goes through
//! [`DataPlane`]: in process for `atoll dev` (the node lives in the same binary), or over
//! the node admin API for `atoll serve` with `atoll node`s. Callers never know which.

use crate::error::ApiError;
use atoll_data::error::DataError;
use atoll_data::node::Node;
use atoll_meta::{Database, DatabaseState, Group, Store};
use atoll_types::node::{self as wire, CreateDatabase, DatabaseConfig, TokenKey};
use atoll_types::ErrorCode;
use std::sync::Arc;

pub enum DataPlane {
    /// The node runs inside this process (`atoll dev`): serves every location.
    InProcess { node: Arc<Node>, http_base: String },
}

impl DataPlane {
    pub fn in_process(node: Arc<Node>, http_base: &str) -> DataPlane {
        DataPlane::InProcess {
            node,
            http_base: http_base.trim_end_matches('/').to_string(),
        }
    }

    /// The node a new database of a group in `location` goes to.
    pub fn place(&self, _location: &str) -> Result<String, ApiError> {
        match self {
            DataPlane::InProcess { .. } => Ok("local".to_string()),
        }
    }

    /// A URL of the database that works without wildcard DNS (path prefix form).
    pub fn http_url(&self, _node: &str, label: &str) -> String {
        match self {
            DataPlane::InProcess { http_base, .. } => format!("{http_base}/db/{label}/"),
        }
    }

    pub async fn create_database(
        &self,
        _node: &str,
        request: CreateDatabase,
    ) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                blocking(move || node.create_database(request).map(|_| ())).await
            }
        }
    }

    pub async fn configure(&self, _node: &str, config: DatabaseConfig) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                blocking(move || node.configure(config).map(|_| ())).await
            }
        }
    }

    /// Deletes a database and its files; one the node does not have is already gone.
    pub async fn delete_database(&self, _node: &str, id: &str) -> Result<(), ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                let id = id.to_string();
                match blocking(move || node.delete_database(&id)).await {
                    Err(ApiError::NotFound(..)) => Ok(()),
                    other => other,
                }
            }
        }
    }

    pub async fn stats(&self, _node: &str, id: &str) -> Result<wire::DatabaseStats, ApiError> {
        match self {
            DataPlane::InProcess { node, .. } => {
                let node = Arc::clone(node);
                let id = id.to_string();
                blocking(move || node.stats(&id)).await
            }
        }
    }

    /// At start: removes what a crash left half-done. Databases still `creating` are
    /// removed from the store and the node; node databases the store does not know are
    /// deleted.
    pub async fn reconcile(&self, store: &Store) -> Result<(), ApiError> {
        for db in store.databases_in_state(DatabaseState::Creating).await? {
            tracing::warn!(database = %db.id, name = %db.name, "removing a database whose creation was interrupted");
            self.delete_database(&db.node, &db.id).await?;
            store.delete_database(&db.id).await?;
        }
        match self {
            DataPlane::InProcess { node, .. } => {
                for id in node.database_ids() {
                    if store.database_by_id(&id).await?.is_none() {
                        tracing::warn!(database = %id, "deleting a database the metadata store does not know");
                        self.delete_database("local", &id).await?;
                    }
                }
            }
        }
        Ok(())
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DataError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(data_error)
}

/// Node failures as the API reports them.
fn data_error(error: DataError) -> ApiError {
    match error {
        DataError::BadRequest(message) => ApiError::Invalid(ErrorCode::InvalidSeed, message),
        DataError::Conflict(message) => {
            ApiError::Conflict(ErrorCode::DatabaseAlreadyExists, message)
        }
        DataError::UnknownDatabase(id) => ApiError::NotFound(
            ErrorCode::DatabaseNotFound,
            format!("database {id} is not on its node"),
        ),
        DataError::NoDatabase(m)
        | DataError::Unauthorized(m)
        | DataError::Forbidden(m)
        | DataError::Unavailable(m)
        | DataError::TooLarge(m)
        | DataError::Internal(m) => ApiError::Upstream(m),
    }
}

/// What the node must know of a database: its flags, its state and the public halves of
/// the database's and the group's signing keys.
pub fn node_config(db: &Database, group: &Group) -> DatabaseConfig {
    let state = match db.state {
        DatabaseState::AwaitingUpload => wire::DatabaseState::AwaitingUpload,
        _ if group.archived => wire::DatabaseState::Archived,
        _ => wire::DatabaseState::Active,
    };
    let mut keys = Vec::new();
    for (kid, secret) in [
        (&db.key_id, &db.signing_key),
        (&group.key_id, &group.signing_key),
    ] {
        if let Some(key) = atoll_data::jwt::decode_signing_key(secret) {
            keys.push(TokenKey {
                kid: kid.clone(),
                public_key: atoll_data::jwt::encode_key(key.verifying_key().as_bytes()),
            });
        }
    }
    DatabaseConfig {
        id: db.id.clone(),
        name: db.name.clone(),
        org_id: db.org_id.clone(),
        group_id: db.group_id.clone(),
        label: db.label.clone(),
        state,
        block_reads: db.block_reads,
        block_writes: db.block_writes,
        size_limit: db.size_limit.and_then(|l| u64::try_from(l).ok()),
        allow_attach: db.allow_attach,
        keys,
    }
}

/// Sends the current configuration of every database of a group to its node (after the
/// group's key, archive state or organization changed).
pub async fn push_group_databases(
    data_plane: &DataPlane,
    store: &Store,
    group: &Group,
) -> Result<(), ApiError> {
    for db in store.databases_in_group(&group.id).await? {
        if db.state != DatabaseState::Creating {
            data_plane
                .configure(&db.node, node_config(&db, group))
                .await?;
        }
    }
    Ok(())
}
