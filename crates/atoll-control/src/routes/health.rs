//! `GET /health`: 200 once the server accepts requests and its store answers; 503
//! `store_unavailable` (with `Retry-After`), naming the metadata store, when it does not.

use super::Route;
use crate::auth::Action;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::State;
use axum::http::Method;
use axum::Json;
use serde::Serialize;

#[derive(Serialize, utoipa::ToSchema)]
pub struct Health {
    status: &'static str,
    version: &'static str,
}

pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::GET,
        "/health",
        Action::Health,
        "Readiness: 200 when the server and its store answer, 503 naming the metadata store when it cannot be reached",
        health,
    )
    .response::<Health>()]
}

async fn health(State(state): State<AppState>) -> ApiResult<Json<Health>> {
    // A cheap read proves the metadata store is reachable, not just the listener.
    state.store.org_by_slug("").await?;
    Ok(Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    }))
}
