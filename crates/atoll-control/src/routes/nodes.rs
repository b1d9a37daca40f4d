//! The data nodes as instance administrators see them: `/v1/admin/nodes`,
//! `/v1/admin/quarantine…`.

use super::Route;
use crate::auth::{Access, Action};
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_types::node as node_wire;
use atoll_types::nodes::{
    DrainReport, NodeSummary, NodeUndrained, NodesResponse, PurgeQuarantineRequest,
    PurgeQuarantineResponse, QuarantineResponse, QuarantinedDatabase,
};
use atoll_types::ErrorCode;
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            "/v1/admin/nodes",
            Action::ReadNodes,
            "The data nodes: location, databases, health (instance administrators)",
            list_nodes,
        )
        .response::<NodesResponse>(),
        Route::new(
            Method::POST,
            "/v1/admin/nodes/{node}/drain",
            Action::DrainNode,
            "Drain a data node: it takes no new databases and its databases move to the other nodes of its location, through object storage (instance administrators)",
            drain_node,
        )
        .response::<DrainReport>(),
        Route::new(
            Method::DELETE,
            "/v1/admin/nodes/{node}/drain",
            Action::DrainNode,
            "Stop draining a data node: it takes new databases again (instance administrators)",
            undrain_node,
        )
        .response::<NodeUndrained>(),
        Route::new(
            Method::GET,
            "/v1/admin/quarantine",
            Action::ReadQuarantine,
            "Databases the nodes hold that the metadata store does not know, kept aside (instance administrators)",
            list_quarantine,
        )
        .response::<QuarantineResponse>(),
        Route::new(
            Method::POST,
            "/v1/admin/quarantine/purge",
            Action::PurgeQuarantine,
            "Remove quarantined databases whose retention is over, or one of them (instance administrators)",
            purge_quarantine,
        )
        .request::<PurgeQuarantineRequest>()
        .response::<PurgeQuarantineResponse>(),
    ]
}

async fn list_nodes(
    State(state): State<AppState>,
    _access: Access,
) -> ApiResult<Json<NodesResponse>> {
    state.data_plane.refresh_nodes(&state.store).await?;
    let records = state.store.nodes().await?;
    let counts = state.store.database_counts_by_node().await?;
    let now = atoll_meta::now_millis();
    let nodes = state
        .data_plane
        .node_infos(&state.config.server_location)
        .into_iter()
        .map(|info| {
            let record = records.iter().find(|r| r.name == info.name);
            NodeSummary {
                databases: counts.get(&info.name).copied().unwrap_or(0),
                last_seen_at: record.map(|r| crate::wire::rfc3339(r.last_seen_at)),
                // The node inside this process answers whenever the server does.
                healthy: record.is_none_or(|r| r.is_healthy(now)),
                last_heartbeat_at: record
                    .filter(|r| r.heartbeat_at > 0)
                    .map(|r| crate::wire::rfc3339(r.heartbeat_at)),
                draining: record.is_some_and(|r| r.draining),
                capacity: record.map_or(0, |r| r.capacity),
                name: info.name,
                location: info.location,
                http_url: info.http_url,
            }
        })
        .collect();
    Ok(Json(NodesResponse { nodes }))
}

async fn drain_node(
    State(state): State<AppState>,
    _access: Access,
    Path(node): Path<String>,
) -> ApiResult<Json<DrainReport>> {
    state.data_plane.refresh_nodes(&state.store).await?;
    let report = state.data_plane.drain(&state.store, &node).await?;
    tracing::info!(node = %node, moved = report.moved.len(), failed = report.failed.len(), "node drained");
    Ok(Json(report))
}

async fn undrain_node(
    State(state): State<AppState>,
    _access: Access,
    Path(node): Path<String>,
) -> ApiResult<Json<NodeUndrained>> {
    if state.data_plane.is_in_process() {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidRequest,
            "this server runs one data node in process (atoll dev): it is never drained".into(),
        ));
    }
    if !state.store.set_node_draining(&node, false).await? {
        return Err(ApiError::NotFound(
            ErrorCode::RouteNotFound,
            format!("no data node is named {node}"),
        ));
    }
    Ok(Json(NodeUndrained { node }))
}

fn quarantined(node: &str, entry: node_wire::QuarantinedDatabase) -> QuarantinedDatabase {
    QuarantinedDatabase {
        node: node.to_string(),
        id: entry.id,
        name: entry.name,
        org_id: entry.org_id,
        label: entry.label,
        quarantined_at: crate::wire::rfc3339(entry.quarantined_at),
        bytes: entry.bytes,
        purgeable: entry.purgeable,
    }
}

async fn list_quarantine(
    State(state): State<AppState>,
    _access: Access,
) -> ApiResult<Json<QuarantineResponse>> {
    let mut response = QuarantineResponse::default();
    for node in state.data_plane.node_names() {
        match state.data_plane.quarantined(&node).await {
            Ok(entries) => response
                .databases
                .extend(entries.into_iter().map(|e| quarantined(&node, e))),
            Err(e) => {
                tracing::warn!(node = %node, error = %e, "cannot list a node's quarantine");
                response.unreachable_nodes.push(node);
            }
        }
    }
    Ok(Json(response))
}

async fn purge_quarantine(
    State(state): State<AppState>,
    _access: Access,
    LenientJson(body): LenientJson<PurgeQuarantineRequest>,
) -> ApiResult<Json<PurgeQuarantineResponse>> {
    let mut response = PurgeQuarantineResponse::default();
    let mut found = false;
    for node in state.data_plane.node_names() {
        let entries = match state.data_plane.quarantined(&node).await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(node = %node, error = %e, "cannot purge a node's quarantine");
                response.unreachable_nodes.push(node);
                continue;
            }
        };
        for entry in entries {
            let chosen = match &body.id {
                Some(id) => *id == entry.id,
                None => entry.purgeable,
            };
            if !chosen {
                continue;
            }
            found = true;
            let purged = state
                .data_plane
                .purge_quarantined(&node, &entry.id)
                .await
                .map_err(|e| match e {
                    ApiError::Conflict(_, message) => {
                        ApiError::Conflict(ErrorCode::QuarantineRetention, message)
                    }
                    other => other,
                })?;
            tracing::warn!(node = %node, database = %purged.id, "purged a quarantined database on an administrator's order");
            response.purged.push(quarantined(&node, purged));
        }
    }
    if let (Some(id), false) = (&body.id, found) {
        return Err(ApiError::NotFound(
            ErrorCode::DatabaseNotFound,
            format!("no node holds a quarantined database {id}"),
        ));
    }
    Ok(Json(response))
}
