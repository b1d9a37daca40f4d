//! `GET`/`PATCH …/databases/{db}/configuration`, and pushing a database's configuration
//! to its node after any change.

use super::size_limit;
use crate::audit;
use crate::auth::Access;
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_meta::{Database, DatabaseChanges};
use atoll_types::allowed_ips;
use atoll_types::audit::AuditCode;
use atoll_types::databases::{DatabaseConfiguration, UpdateDatabaseConfiguration};
use axum::extract::State;
use axum::Json;
use serde_json::json;

/// Pushes `db`'s configuration, as the store holds it, to its node after a change the
/// store has recorded. The change is done whatever happens here: a store that fails to
/// read the configuration (a blip) or a node that does not take it leaves the push to the
/// reconciler, asked for a pass now, and the request answers as done.
pub(super) async fn push_config(
    state: &AppState,
    db: &Database,
    group: &atoll_meta::Group,
    org: &atoll_meta::Organization,
) {
    match crate::data_plane::database_config(&state.store, db, group, org).await {
        Ok(config) => crate::data_plane::converge(&state.data_plane, &db.node, config).await,
        Err(e) => {
            tracing::warn!(database = %db.id, error = %e, "cannot read a changed configuration to push: the reconciler will");
            crate::reconciler::request_pass();
        }
    }
}

pub(super) fn configuration_of(db: &Database) -> DatabaseConfiguration {
    DatabaseConfiguration {
        size_limit: db.size_limit.map(|l| l.to_string()).unwrap_or_default(),
        allow_attach: db.allow_attach,
        block_reads: db.block_reads,
        block_writes: db.block_writes,
        delete_protection: db.delete_protection,
        allowed_ips: db.allowed_ips.clone(),
        allowed_aws_vpc_ids: vec![],
        durability: db.durability.clone().unwrap_or_else(|| "default".into()),
    }
}

pub(super) async fn configuration(access: Access) -> Json<DatabaseConfiguration> {
    Json(configuration_of(access.database()))
}

pub(super) async fn configure(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<UpdateDatabaseConfiguration>,
) -> ApiResult<Json<DatabaseConfiguration>> {
    let db = access.database();
    let size_limit = match body.size_limit.as_deref() {
        None => None,
        Some(text) => Some(size_limit(text)?),
    };
    if let Some(ips) = &body.allowed_ips {
        for ip in ips {
            if !allowed_ips::is_valid_rule(ip) {
                return Err(ApiError::invalid(format!(
                    "allowed_ips: {ip:?} is not an IP address or CIDR range"
                )));
            }
        }
    }
    if body
        .allowed_aws_vpc_ids
        .as_ref()
        .is_some_and(|ids| !ids.is_empty())
    {
        return Err(ApiError::NotAvailable(
            "AWS VPC endpoints do not exist on Atoll: allowed_aws_vpc_ids must be empty".into(),
        ));
    }
    let durability = match body.durability.as_deref() {
        None => None,
        Some("lag" | "sync") => body.durability.clone().map(Some),
        Some("default") => Some(None),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "durability: {other:?} is not lag, sync or default"
            )))
        }
    };
    // What the audit log says was set, besides delete protection.
    let mut settings = serde_json::Map::new();
    if let Some(mode) = &body.durability {
        settings.insert("durability".into(), json!(mode));
    }
    if let Some(text) = &body.size_limit {
        settings.insert("size_limit".into(), json!(text));
    }
    for (name, value) in [
        ("allow_attach", body.allow_attach),
        ("block_reads", body.block_reads),
        ("block_writes", body.block_writes),
    ] {
        if let Some(value) = value {
            settings.insert(name.into(), json!(value));
        }
    }
    if let Some(ips) = &body.allowed_ips {
        settings.insert("allowed_ips".into(), json!(ips));
    }
    let changes = DatabaseChanges {
        size_limit,
        block_reads: body.block_reads,
        block_writes: body.block_writes,
        delete_protection: body.delete_protection,
        allow_attach: body.allow_attach,
        allowed_ips: body.allowed_ips,
        durability,
        ..Default::default()
    };
    let updated = state.store.update_database(&db.id, changes).await?;
    push_config(&state, &updated, access.group(), access.org()).await;
    let group = &access.group().name;
    if updated.delete_protection != db.delete_protection {
        let (code, verb) = if updated.delete_protection {
            (AuditCode::DbProtect, "turned on")
        } else {
            (AuditCode::DbUnprotect, "turned off")
        };
        audit::record(
            &state,
            &access,
            &db.org_id,
            code,
            format!("{verb} delete protection of database {}", db.name),
            json!({"database": db.name, "group": group}),
        )
        .await;
    }
    if !settings.is_empty() {
        let names = settings.keys().cloned().collect::<Vec<_>>().join(", ");
        audit::record(
            &state,
            &access,
            &db.org_id,
            AuditCode::DbConfigure,
            format!(
                "changed the configuration of database {} ({names})",
                db.name
            ),
            json!({"database": db.name, "group": group, "configuration": settings}),
        )
        .await;
    }
    Ok(Json(configuration_of(&updated)))
}
