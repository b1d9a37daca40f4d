//! `GET /releases/latest`: the turso CLI's update check, which it sends to the server it
//! is pointed at. It answers this server's version, which is older than any turso CLI, so
//! the CLI has nothing to announce (and never a 404 on every command).

use super::Route;
use crate::auth::Action;
use atoll_types::hosted::LatestRelease;
use axum::http::Method;
use axum::Json;

pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::GET,
        "/releases/latest",
        Action::ReadLatestRelease,
        "The turso CLI's update check: this server's version",
        latest,
    )
    .response::<LatestRelease>()]
}

async fn latest() -> Json<LatestRelease> {
    Json(LatestRelease {
        latest: format!("v{}", env!("CARGO_PKG_VERSION")),
    })
}
