//! `GET …/databases/{db}/instances[/{instance}]`: the primary and its replicas.

use crate::auth::Access;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_meta::Database;
use atoll_types::databases::{InstanceList, InstanceResponse};
use atoll_types::ErrorCode;
use axum::extract::{Path, State};
use axum::Json;
use std::collections::HashMap;

/// Every instance of `db`: the primary, then a replica in each other location of its
/// group (`crate::data_plane::replicas`), with how far each replica is.
pub(super) async fn instances_of(
    state: &AppState,
    db: &Database,
) -> ApiResult<Vec<atoll_types::databases::Instance>> {
    let primary = atoll_types::databases::Instance {
        uuid: db.id.clone(),
        name: db.location.clone(),
        kind: "primary".to_string(),
        region: db.location.clone(),
        hostname: state.data_plane.hostname(&db.node, &db.label),
        http_url: state.data_plane.http_url(&db.node, &db.label),
        replication_index: None,
        lag_ms: None,
    };
    let Some(group) = state.store.group_by_id(&db.group_id).await? else {
        return Ok(vec![primary]);
    };
    if group.locations.len() < 2 {
        return Ok(vec![primary]);
    }
    let records = state.store.nodes().await?;
    let mut out = vec![primary];
    for place in crate::data_plane::replicas::instances_of(db, &group.locations, &records)
        .into_iter()
        .filter(|p| !p.primary)
    {
        let status = state.data_plane.replica_status(&place.node, &db.id).await;
        out.push(atoll_types::databases::Instance {
            uuid: crate::data_plane::replicas::replica_uuid(&db.id, &place.location),
            name: place.location.clone(),
            kind: "replica".to_string(),
            region: place.location.clone(),
            hostname: state.data_plane.hostname(&place.node, &db.label),
            http_url: state.data_plane.http_url(&place.node, &db.label),
            replication_index: status.as_ref().map(|s| s.frame_no),
            lag_ms: status.as_ref().map(|s| s.lag_ms),
        });
    }
    Ok(out)
}

pub(super) async fn instances(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<InstanceList>> {
    Ok(Json(InstanceList {
        instances: instances_of(&state, access.database()).await?,
    }))
}

pub(super) async fn instance(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<InstanceResponse>> {
    let db = access.database();
    let name = &params["instance"];
    instances_of(&state, db)
        .await?
        .into_iter()
        .find(|i| i.name == *name || i.uuid == *name)
        .map(|instance| Json(InstanceResponse { instance }))
        .ok_or_else(|| {
            ApiError::NotFound(
                ErrorCode::DatabaseNotFound,
                format!("could not find instance {name} of database {}", db.name),
            )
        })
}
