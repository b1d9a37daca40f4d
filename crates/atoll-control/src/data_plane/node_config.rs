//! What a node must know of a database ([`DatabaseConfig`]), read from the store, and
//! pushing it to the node after a change.

use super::DataPlane;
use crate::error::ApiError;
use atoll_meta::{Database, DatabaseState, Group, Organization, Store};
use atoll_types::node::{self as wire, DatabaseConfig, ExternalKey, Jwk, TokenKey};
use std::sync::Arc;

/// What the node must know of a database: its flags (with its organization's quota
/// blocks), its state and the public halves of the database's and the group's signing keys.
///
/// `credentials` are its organization's key sets and client CA ([`org_credentials`]): every
/// configuration a node gets carries them, or the node would stop accepting end users'
/// tokens and client certificates; [`database_config`] reads them.
pub fn node_config(
    db: &Database,
    group: &Group,
    org: &Organization,
    credentials: &OrgCredentials,
) -> DatabaseConfig {
    let state = match db.state {
        _ if db.deleted_at.is_some() => wire::DatabaseState::Deleted,
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
    let block_reason = (org.blocked_reads || org.blocked_writes).then(|| {
        format!(
            "organization {} is over its {} plan's monthly quota: turn on overages or move to a bigger plan",
            org.slug, org.plan_id
        )
    });
    DatabaseConfig {
        id: db.id.clone(),
        name: db.name.clone(),
        org_id: db.org_id.clone(),
        group_id: db.group_id.clone(),
        label: db.label.clone(),
        state,
        block_reads: db.block_reads || org.blocked_reads,
        block_writes: db.block_writes || org.blocked_writes,
        block_reason,
        size_limit: db.size_limit.and_then(|l| u64::try_from(l).ok()),
        allow_attach: db.allow_attach,
        allowed_ips: db.allowed_ips.clone(),
        keys,
        external_keys: credentials.external_keys.clone(),
        client_ca: credentials.client_ca.clone(),
        durability: match db.durability.as_deref() {
            Some("sync") => Some(wire::Durability::Sync),
            Some("lag") => Some(wire::Durability::Lag),
            _ => None,
        },
        pitr_retention_days: plan_retention_days(&org.plan_id),
        config_version: u64::try_from(db.config_version).unwrap_or(0),
        history_starts_at_ms: db.history_starts_at,
        encryption: db
            .encryption
            .as_ref()
            .map(|e| atoll_types::node::DatabaseEncryption {
                cipher: e.cipher.clone(),
                verifier: e.verifier.clone(),
            }),
    }
}

/// What every database configuration of an organization carries of the organization: the
/// public keys of its key sets (JWKS) and its client-certificate CA.
/// Shared: every configuration pushed for the organization's databases holds the same.
#[derive(Debug, Clone, Default)]
pub struct OrgCredentials {
    pub external_keys: Arc<[ExternalKey]>,
    /// PEM certificate.
    pub client_ca: Option<Arc<str>>,
}

/// The organization's [`OrgCredentials`] as the store holds them.
pub async fn org_credentials(store: &Store, org_id: &str) -> Result<OrgCredentials, ApiError> {
    Ok(OrgCredentials {
        external_keys: org_external_keys(store, org_id).await?.into(),
        client_ca: store
            .org_client_ca(org_id)
            .await?
            .map(|ca| ca.certificate.into()),
    })
}

/// The public keys of an organization's key sets (JWKS), as its databases' configurations
/// carry them.
pub async fn org_external_keys(store: &Store, org_id: &str) -> Result<Vec<ExternalKey>, ApiError> {
    let mut keys = Vec::new();
    for set in store.org_key_sets(org_id).await? {
        match serde_json::from_str::<Vec<Jwk>>(&set.keys) {
            Ok(jwks) => keys.extend(jwks.into_iter().map(|jwk| ExternalKey {
                set: set.name.clone(),
                jwk,
            })),
            Err(error) => {
                tracing::error!(%error, org = %org_id, key_set = %set.name, "a stored key set cannot be read: its keys are not installed")
            }
        }
    }
    Ok(keys)
}

/// [`node_config`] with the organization's credentials read from the store.
pub async fn database_config(
    store: &Store,
    db: &Database,
    group: &Group,
    org: &Organization,
) -> Result<DatabaseConfig, ApiError> {
    let credentials = org_credentials(store, &org.id).await?;
    Ok(node_config(db, group, org, &credentials))
}

/// Days of point-in-time history a plan keeps, as Turso's plans do (free 1 day, then 10,
/// 30 and 90); `None` for a plan of the operator's own, which gets the node's
/// `--pitr-retention-days`.
pub fn plan_retention_days(plan_id: &str) -> Option<u32> {
    match plan_id {
        "starter" | "free" => Some(1),
        "developer" => Some(10),
        "scaler" => Some(30),
        "pro" => Some(90),
        _ => None,
    }
}

/// Sends the current configuration of every database of a group to its node (after the
/// group's key, archive state or organization changed).
pub async fn push_group_databases(
    data_plane: &DataPlane,
    store: &Store,
    group: &Group,
) -> Result<(), ApiError> {
    let org = store
        .org_by_id(&group.org_id)
        .await?
        .ok_or_else(|| ApiError::Internal("group without organization".into()))?;
    let credentials = org_credentials(store, &org.id).await?;
    for db in store.databases_in_group(&group.id).await? {
        if db.state != DatabaseState::Creating {
            converge(
                data_plane,
                &db.node,
                node_config(&db, group, &org, &credentials),
            )
            .await;
        }
    }
    Ok(())
}

/// Tells a database's node its configuration, which the store already holds (intent
/// first): a node that cannot take it now gets it from the reconciler, which this asks
/// for a pass at once. So an API change is never half-done: it answers per the store.
/// One the node no longer has (deleted meanwhile) needs nothing.
pub async fn converge(data_plane: &DataPlane, node: &str, config: DatabaseConfig) {
    let id = config.id.clone();
    match data_plane.configure(node, config).await {
        Ok(()) | Err(ApiError::NotFound(..)) => {}
        Err(e) => {
            tracing::warn!(error = %e, database = %id, node, "a node did not take a configuration: the reconciler will push it");
            crate::reconciler::request_pass();
        }
    }
}

/// Sends the configuration of every database of an organization (its quota blocks changed).
pub async fn push_org_databases(
    data_plane: &DataPlane,
    store: &Store,
    org: &Organization,
) -> Result<(), ApiError> {
    let credentials = org_credentials(store, &org.id).await?;
    for group in store.list_groups(&org.id).await? {
        for db in store.databases_in_group(&group.id).await? {
            if db.state != DatabaseState::Creating {
                converge(
                    data_plane,
                    &db.node,
                    node_config(&db, &group, org, &credentials),
                )
                .await;
            }
        }
    }
    Ok(())
}
