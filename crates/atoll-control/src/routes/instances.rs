//! Legacy per-database instances: `POST …/databases/{db}/instances`,
//! `DELETE …/databases/{db}/instances/{instance}` and `GET …/instances/{instance}/wait`,
//! which the turso CLI still calls for databases outside groups (`turso db replicate`,
//! `turso db destroy --instance`). Listing instances lives with the databases
//! (`databases.rs`).
//!
//! On Atoll every database belongs to a group and is placed where its group is, so a
//! location is added to or removed from the group, never to one database: creating or
//! deleting an instance is a clear 400 `not_available_on_self_hosted` that names the group
//! command (never a 5xx, on which the CLI would offer other locations); waiting for an
//! instance that exists succeeds at once (instances are ready when they are listed).

use super::Route;
use crate::auth::{Access, Action};
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use atoll_types::hosted::CreateInstanceRequest;
use atoll_types::{Empty, ErrorCode};
use axum::extract::Path;
use axum::http::Method;
use axum::Json;
use std::collections::HashMap;

pub fn routes() -> Vec<Route> {
    let mut routes = Vec::new();
    for prefix in ["/v1/organizations/{org}", "/v1"] {
        let instances = format!("{prefix}/databases/{{db}}/instances");
        routes.extend([
            Route::new(
                Method::POST,
                instances.clone(),
                Action::ConfigureDatabase,
                "Legacy: not available (400); add the location to the database's group",
                create,
            )
            .request::<CreateInstanceRequest>(),
            Route::new(
                Method::DELETE,
                format!("{instances}/{{instance}}"),
                Action::ConfigureDatabase,
                "Legacy: not available (400); remove the location from the database's group",
                delete,
            ),
            Route::new(
                Method::GET,
                format!("{instances}/{{instance}}/wait"),
                Action::ReadDatabase,
                "Wait for an instance to be ready: at once, as listed instances are",
                wait,
            ),
        ]);
    }
    routes
}

async fn create(
    access: Access,
    LenientJson(request): LenientJson<CreateInstanceRequest>,
) -> ApiError {
    let group = &access.group().name;
    let location = if request.location.is_empty() {
        "LOCATION"
    } else {
        &request.location
    };
    ApiError::NotOnSelfHosted(format!(
        "instances of a single database are not available on a self-hosted server: \
         database {} is replicated with its group {group}; add the location to the group \
         (`turso group locations add {group} {location}`, or POST …/groups/{group}/locations/{location})",
        access.database().name
    ))
}

async fn delete(
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<Empty>> {
    let instance = existing_instance(&access, &params["instance"])?;
    let group = &access.group().name;
    Err(ApiError::NotOnSelfHosted(format!(
        "instances of a single database are not available on a self-hosted server: \
         instance {instance} of database {} is its group's; remove the location from group \
         {group} (`turso group locations remove {group} {instance}`), or destroy the database",
        access.database().name
    )))
}

async fn wait(
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<Empty>> {
    existing_instance(&access, &params["instance"])?;
    Ok(Json(Empty {}))
}

/// The instance named in the path (by location or id, as `GET …/instances/{instance}`
/// finds it), or the turso CLI's known 404.
fn existing_instance<'a>(access: &Access, name: &'a str) -> ApiResult<&'a str> {
    let db = access.database();
    if name == db.location || name == db.id {
        Ok(name)
    } else {
        Err(ApiError::NotFound(
            ErrorCode::DatabaseNotFound,
            format!("could not find instance {name} of database {}", db.name),
        ))
    }
}
