//! The web console: static files under `/console/`, compiled into the binary.
//!
//! The console is a page and a few JavaScript modules that call the public API (`/v1…`,
//! with the session cookie of `crate::auth::session`) and the data plane (Hrana, with a
//! short-lived database token), exactly as a script could: nothing here reads the store or
//! decides who may do what. These routes serve files only, the same to everyone, so they
//! sit outside the route table and its policy; the API routes the pages call are all in it.
//!
//! Every answer carries a strict Content-Security-Policy (scripts and styles from this
//! origin only, no inline code, no framing) and the usual hardening headers.

use axum::extract::Path;
use axum::http::header::{
    ACCEPT, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// Where the console lives.
pub const CONSOLE_PATH: &str = "/console/";

/// The files of the console: name, content type, bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("assets/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/api.js"),
    ),
    (
        "ui.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/ui.js"),
    ),
    (
        "charts.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/charts.js"),
    ),
    (
        "pages.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/pages.js"),
    ),
    (
        "sql.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/sql.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/style.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("assets/favicon.svg"),
    ),
];

/// The policy for every console answer. `connect-src` allows any http(s) origin because
/// the SQL editor talks to the data plane, whose nodes live at URLs the operator chose
/// (another port, another host); the API answers only same-origin requests with the
/// cookie, and scripts can only come from here.
const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self' http: https:; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(root))
        .route(
            "/console",
            get(|| async { redirect(CONSOLE_PATH, StatusCode::PERMANENT_REDIRECT) }),
        )
        .route("/console/", get(|| async { asset("index.html") }))
        .route(
            "/console/{file}",
            get(|Path(file): Path<String>| async move { asset(&file) }),
        )
}

/// `/`: browsers go to the console; API clients get the API's JSON 404 (nothing lives
/// at the root of the API).
async fn root(headers: HeaderMap) -> Response {
    let wants_html = headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"));
    if wants_html {
        redirect(CONSOLE_PATH, StatusCode::SEE_OTHER)
    } else {
        crate::error::ApiError::NotFound(
            atoll_types::ErrorCode::RouteNotFound,
            "no such route; see /openapi.json (the web console is at /console/)".into(),
        )
        .into_response()
    }
}

fn redirect(to: &'static str, status: StatusCode) -> Response {
    with_security_headers((status, [(LOCATION, HeaderValue::from_static(to))]).into_response())
}

fn asset(name: &str) -> Response {
    let response = match ASSETS.iter().find(|(file, ..)| *file == name) {
        Some((_, content_type, bytes)) => (
            [
                (CONTENT_TYPE, HeaderValue::from_static(content_type)),
                // Small files, served from memory: always revalidate, so an upgraded
                // binary never runs with a cached script of the old one.
                (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ],
            *bytes,
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            [(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )],
            "no such file in the console",
        )
            .into_response(),
    };
    with_security_headers(response)
}

fn with_security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        HeaderName::from_static("permissions-policy"),
        HeaderValue::from_static("camera=(), microphone=(), geolocation=(), payment=()"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_served_with_its_type() {
        for (name, content_type, bytes) in ASSETS {
            assert!(!bytes.is_empty(), "{name} is empty");
            let response = asset(name);
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.headers()[CONTENT_TYPE], *content_type);
            assert!(response.headers().contains_key(CONTENT_SECURITY_POLICY));
        }
        assert_eq!(asset("../Cargo.toml").status(), StatusCode::NOT_FOUND);
    }
}
