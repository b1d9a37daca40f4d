//! The data nodes' own calls to the control plane, `/v1/internal/…`, authenticated with the
//! node secret ([`NodeCaller`]); see `crate::node_registry`.

use super::Route;
use crate::auth::node::NodeCaller;
use crate::auth::Action;
use crate::body::LenientJson;
use crate::error::ApiResult;
use crate::state::AppState;
use atoll_types::node::{
    DatabaseRoute, DesiredState, Heartbeat, HeartbeatAccepted, HeldDatabaseIds, PlacedDatabases,
};
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::POST,
            "/v1/internal/nodes/heartbeat",
            Action::NodeHeartbeat,
            "A data node registers itself and says it is alive (node secret)",
            heartbeat,
        )
        .request::<Heartbeat>()
        .response::<HeartbeatAccepted>(),
        Route::new(
            Method::GET,
            "/v1/internal/routes/{label}",
            Action::ResolveDatabaseRoute,
            "Which node holds the database with this hostname label, for a node forwarding a request (node secret)",
            route,
        )
        .response::<DatabaseRoute>(),
        Route::new(
            Method::GET,
            "/v1/internal/nodes/{node}/databases",
            Action::ReadNodePlacement,
            "The databases the store places on a node, for a node regaining its write lease (node secret)",
            placed,
        )
        .response::<PlacedDatabases>(),
        Route::new(
            Method::POST,
            "/v1/internal/nodes/{node}/desired-state",
            Action::ReadNodePlacement,
            "What the store wants of the databases a node holds, for a node that starts or reconnects: it serves them only once it has applied this (node secret)",
            desired_state,
        )
        .request::<HeldDatabaseIds>(),
    ]
}

async fn desired_state(
    State(state): State<AppState>,
    _node: NodeCaller,
    Path(node): Path<String>,
    LenientJson(held): LenientJson<HeldDatabaseIds>,
) -> ApiResult<Json<DesiredState>> {
    Ok(Json(
        state
            .data_plane
            .desired_state(&state.store, &node, &held.ids)
            .await?,
    ))
}

async fn placed(
    State(state): State<AppState>,
    _node: NodeCaller,
    Path(node): Path<String>,
) -> ApiResult<Json<PlacedDatabases>> {
    Ok(Json(state.data_plane.placed_on(&state.store, &node).await?))
}

async fn heartbeat(
    State(state): State<AppState>,
    _node: NodeCaller,
    LenientJson(beat): LenientJson<Heartbeat>,
) -> ApiResult<Json<HeartbeatAccepted>> {
    Ok(Json(state.data_plane.heartbeat(&state.store, beat).await?))
}

async fn route(
    State(state): State<AppState>,
    _node: NodeCaller,
    Path(label): Path<String>,
) -> ApiResult<Json<DatabaseRoute>> {
    Ok(Json(state.data_plane.route(&state.store, &label).await?))
}
