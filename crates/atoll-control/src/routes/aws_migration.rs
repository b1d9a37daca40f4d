//! A group's migration to AWS: `GET …/groups/{group}/aws/migration/info`, `POST
//! …/aws/migration/start` and `…/abort` (`turso group aws-migration`). A self-hosted group
//! lives where its operator runs it: there is never a migration, so the status is `none`,
//! aborting has nothing to abort (200), and starting one is a clear 400
//! `not_available_on_self_hosted`.

use super::Route;
use crate::auth::{Access, Action};
use crate::error::ApiError;
use atoll_types::hosted::AwsMigrationInfo;
use atoll_types::Empty;
use axum::http::Method;
use axum::Json;

pub fn routes() -> Vec<Route> {
    let mut routes = Vec::new();
    for prefix in ["/v1/organizations/{org}", "/v1"] {
        let migration = format!("{prefix}/groups/{{group}}/aws/migration");
        routes.extend([
            Route::new(
                Method::GET,
                format!("{migration}/info"),
                Action::ReadGroup,
                "The group's AWS migration: always `none` on a self-hosted server",
                info,
            )
            .response::<AwsMigrationInfo>(),
            Route::new(
                Method::POST,
                format!("{migration}/start"),
                Action::MigrateGroupToAws,
                "Not available on a self-hosted server (400)",
                start,
            ),
            Route::new(
                Method::POST,
                format!("{migration}/abort"),
                Action::MigrateGroupToAws,
                "Nothing to abort: succeeds",
                abort,
            ),
        ]);
    }
    routes
}

async fn info(_access: Access) -> Json<AwsMigrationInfo> {
    Json(AwsMigrationInfo {
        status: "none".to_string(),
        comment: "a self-hosted server does not migrate groups to AWS".to_string(),
    })
}

async fn start(access: Access) -> ApiError {
    ApiError::NotOnSelfHosted(format!(
        "migrating group {} to AWS is not available on a self-hosted server: its locations \
         are the operator's nodes",
        access.group().name
    ))
}

async fn abort(_access: Access) -> Json<Empty> {
    Json(Empty {})
}
