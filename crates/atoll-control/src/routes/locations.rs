//! Locations: `/v1/locations`, `/v1/locations/{location}`, `/v2/organizations/{org}/locations`
//! (personal: `/v2/locations`) and `/v1/closest-region`.
//!
//! The catalog is the operator's (`--locations`); every organization sees all of it.

use super::Route;
use crate::auth::{Access, Action};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_types::locations::{
    ClosestRegion, LocationDetail, LocationMap, LocationResponse, LocationSummary,
    LocationsByPlatform,
};
use atoll_types::ErrorCode;
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;
use std::collections::BTreeMap;

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            "/v1/locations",
            Action::ReadLocations,
            "Every location: {code: description}",
            list,
        )
        .response::<LocationMap>(),
        Route::new(
            Method::GET,
            "/v1/locations/{location}",
            Action::ReadLocations,
            "One location and the others, nearest first",
            retrieve,
        )
        .response::<LocationResponse>(),
        Route::new(
            Method::GET,
            "/v2/organizations/{org}/locations",
            Action::ReadOrganizationLocations,
            "Locations grouped by platform",
            by_platform,
        )
        .response::<LocationsByPlatform>(),
        Route::new(
            Method::GET,
            "/v2/locations",
            Action::ReadOrganizationLocations,
            "Locations grouped by platform (personal organization)",
            by_platform,
        )
        .response::<LocationsByPlatform>(),
        Route::new(
            Method::GET,
            "/v1/closest-region",
            Action::ClosestRegion,
            "The location of this server (no credentials needed)",
            closest,
        )
        .response::<ClosestRegion>(),
    ]
}

async fn list(State(state): State<AppState>, _access: Access) -> Json<LocationMap> {
    let locations = state
        .config
        .locations
        .iter()
        .map(|l| (l.code.clone(), l.description.clone()))
        .collect();
    Json(LocationMap { locations })
}

async fn retrieve(
    State(state): State<AppState>,
    _access: Access,
    Path(code): Path<String>,
) -> ApiResult<Json<LocationResponse>> {
    let location = state.config.location(&code).ok_or_else(|| {
        ApiError::NotFound(
            ErrorCode::LocationNotFound,
            format!("location {code} not found"),
        )
    })?;
    // Atoll has no geography: "nearest" is the catalog order, this server's own first.
    let server = &state.config.server_location;
    let mut others: Vec<_> = state
        .config
        .locations
        .iter()
        .filter(|l| l.code != code)
        .collect();
    others.sort_by_key(|l| (&l.code != server, l.code.clone()));
    Ok(Json(LocationResponse {
        location: LocationDetail {
            code: location.code.clone(),
            description: location.description.clone(),
            closest: others
                .into_iter()
                .map(|l| LocationSummary {
                    code: l.code.clone(),
                    description: l.description.clone(),
                })
                .collect(),
        },
    }))
}

async fn by_platform(State(state): State<AppState>, _access: Access) -> Json<LocationsByPlatform> {
    let mut locations: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for l in &state.config.locations {
        locations
            .entry(l.platform.clone())
            .or_default()
            .insert(l.code.clone(), l.description.clone());
    }
    Json(LocationsByPlatform { locations })
}

async fn closest(State(state): State<AppState>) -> Json<ClosestRegion> {
    let code = state.config.server_location.clone();
    Json(ClosestRegion {
        server: code.clone(),
        client: code,
    })
}
