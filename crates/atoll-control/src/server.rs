//! The HTTP server: the router, middleware, and first-start bootstrap.

use crate::auth::login_tokens::mint_login_token;
use crate::auth::secrets::{generate_password, hash_password_blocking, hash_secret};
use crate::auth::session::CookieSession;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_http::admission::{admit, Admission};
use atoll_http::rate_limit::{address_of, client_of, Client, RateLimits};
use atoll_meta::{NewGroup, NewUser};
use atoll_types::ErrorCode;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::HeaderName;
use axum::response::{IntoResponse, Response};
use axum::Router;
use std::future::Future;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The API's admission (`atoll_http::admission`): a request is keyed by its token or
/// console session ([`client`]), and a refusal is the API's JSON error.
impl Admission for AppState {
    const PLANE: &'static str = "api";

    fn rate_limits(&self) -> &RateLimits {
        &self.rate_limits
    }

    fn body_read_timeout(&self) -> std::time::Duration {
        self.config.body_read_timeout
    }

    fn client(&self, request: &Request) -> Client {
        client(request)
    }

    fn too_many_requests(&self, retry_after_secs: u64) -> Response {
        ApiError::TooManyRequests(
            "too many requests: retry after the number of seconds in Retry-After".to_string(),
            retry_after_secs,
        )
        .into_response()
    }
}

/// Who a request counts against for rate limiting: its bearer token, else a console
/// session cookie that the request may use (the console is a credential like any other,
/// not its user's address), else the address.
fn client(request: &Request) -> Client {
    if request
        .headers()
        .contains_key(axum::http::header::AUTHORIZATION)
    {
        return client_of(request);
    }
    match crate::auth::session::cookie_session(request.headers()) {
        CookieSession::Usable(token) => Client::of(Some(token.as_bytes()), address_of(request)),
        CookieSession::Absent | CookieSession::Refused(_) => client_of(request),
    }
}

pub fn router(state: AppState) -> Router {
    let max_body = state.config.max_body_bytes;
    crate::routes::router()
        .merge(crate::console::router())
        .fallback(|| async {
            ApiError::NotFound(
                ErrorCode::RouteNotFound,
                "no such route; see /openapi.json".into(),
            )
        })
        // axum adds `Allow` (the path's methods) to what this answers.
        .method_not_allowed_fallback(|| async {
            ApiError::MethodNotAllowed(
                "method not allowed on this route: the Allow header lists the methods it has; \
                 see /openapi.json"
                    .into(),
            )
        })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            admit::<AppState>,
        ))
        .layer(axum::middleware::from_fn_with_state(
            "api",
            atoll_http::metrics::track_requests,
        ))
        // One span per request, named by its route template (never the raw URL, which
        // holds names), with the request id; headers (and so tokens) are not recorded.
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request| {
                let route = request
                    .extensions()
                    .get::<MatchedPath>()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_else(|| "unmatched".to_string());
                let id = request
                    .headers()
                    .get(&REQUEST_ID)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                tracing::info_span!("request", method = %request.method(), route, request_id = id)
            }),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone()))
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeRequestUuid))
        .with_state(state)
}

/// Serves the control plane on `listener` (a `TcpListener` for plain HTTP, or an
/// `atoll_http::listener::Listener` with TLS) until `shutdown` resolves.
pub async fn serve(
    listener: impl Into<atoll_http::listener::Listener>,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let collector =
        crate::usage::spawn_collector(state.clone(), state.config.usage_collect_interval);
    let jobs = crate::jobs::spawn(state.clone(), state.config.jobs_interval);
    let reconciler = crate::reconciler::spawn(state.clone(), state.config.reconcile_interval);
    let jwks_refresher =
        crate::jwks::spawn_refresher(state.clone(), state.config.jwks.refresh_interval);
    state.rate_limits.spawn_sweeper();
    let header_read_timeout = state.config.header_read_timeout;
    let served =
        atoll_http::listener::serve_router(listener, router(state), header_read_timeout, shutdown)
            .await;
    collector.abort();
    jobs.abort();
    reconciler.abort();
    jwks_refresher.abort();
    served
}

/// What [`bootstrap_user`] did.
#[derive(Debug)]
pub struct BootstrapOutcome {
    pub username: String,
    /// The generated password, when the user was created just now without one.
    pub generated_password: Option<String>,
    pub created: bool,
    /// A valid login token: the one passed in when it still has a day to live, else new.
    pub token: String,
    pub token_is_new: bool,
}

/// `atoll dev`'s first start: makes sure the instance administrator exists (with a
/// personal organization on `plan`, and a `default` group) and holds a usable login token.
pub async fn bootstrap_user(
    state: &AppState,
    username: &str,
    password: Option<String>,
    existing_token: Option<String>,
    plan: Option<&str>,
) -> ApiResult<BootstrapOutcome> {
    atoll_types::names::validate_username(username)
        .map_err(|e| ApiError::Invalid(ErrorCode::InvalidName, e))?;
    let (user, created, generated_password) = match state.store.user_by_username(username).await? {
        Some(user) => (user, false, None),
        None => {
            let generated = password.is_none().then(generate_password);
            let password = password.or_else(|| generated.clone()).unwrap_or_default();
            let password_hash = hash_password_blocking(password).await?;
            let (user, _, _) = state
                .store
                .create_user(
                    NewUser {
                        username: username.to_string(),
                        email: format!("{username}@localhost"),
                        name: username.to_string(),
                        password_hash,
                        is_admin: true,
                        // The operator's own organization is not held to a plan's quotas
                        // (`None`: the instance's default plan).
                        plan: Some(plan.unwrap_or(&state.config.default_plan).to_string()),
                    },
                    Some(NewGroup {
                        name: "default".to_string(),
                        location: state.config.server_location.clone(),
                        version: state.config.group_version.clone(),
                    }),
                )
                .await?;
            (user, true, generated)
        }
    };

    if let Some(token) = existing_token {
        let token = token.trim().to_string();
        if let Some(credential) = state
            .store
            .credential_by_secret_hash(&hash_secret(&token))
            .await?
        {
            let day = 24 * 3600 * 1000;
            let fresh = credential.token.revoked_at.is_none()
                && credential.user.id == user.id
                && credential
                    .token
                    .expires_at
                    .is_none_or(|exp| exp > atoll_meta::now_millis() + day);
            if fresh {
                return Ok(BootstrapOutcome {
                    username: user.username,
                    generated_password,
                    created,
                    token,
                    token_is_new: false,
                });
            }
        }
    }
    let token = mint_login_token(&state.store, &user.id).await?;
    Ok(BootstrapOutcome {
        username: user.username,
        generated_password,
        created,
        token,
        token_is_new: true,
    })
}
