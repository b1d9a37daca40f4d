//! `POST /v1/auth/login`, `POST /v1/auth/invalidate`, `GET /v1/auth/validate`,
//! `GET /v1/auth/api-tokens/validate`, and the web console's `POST`/`DELETE
//! /v1/auth/session` (a login token in an `HttpOnly` cookie: see `crate::auth::session`).

use super::Route;
use crate::auth::login_tokens::{mint_login_token, LOGIN_TOKEN_LIFETIME_MS};
use crate::auth::secrets::{hash_secret, looks_like_token, verify_password};
use crate::auth::session;
use crate::auth::{Access, Action};
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::login_throttle::Refusal;
use crate::state::AppState;
use atoll_types::tokens::{LoginTokensInvalidated, TokenValidation};
use atoll_types::users::{LoginRequest, LoginResponse, SessionStarted};
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::header::{CACHE_CONTROL, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use axum::response::IntoResponse;
use axum::Json;

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::POST,
            "/v1/auth/login",
            Action::Login,
            "Log in with username and password; answers a 7-day login token (403 for a browser request from another site)",
            login,
        )
        .request::<LoginRequest>()
        .response::<LoginResponse>(),
        Route::new(
            Method::POST,
            "/v1/auth/session",
            Action::Login,
            "Log in for the web console: the 7-day login token goes in an HttpOnly, SameSite=Strict cookie (never in the body); requests then authenticate with the cookie and the X-Atoll-CSRF header. A request from another site (Sec-Fetch-Site, or an Origin other than the server) is refused with 403",
            start_session,
        )
        .request::<LoginRequest>()
        .response::<SessionStarted>(),
        Route::new(
            Method::DELETE,
            "/v1/auth/session",
            Action::EndSession,
            "Log out of the web console: revokes the cookie's login token (with the X-Atoll-CSRF header) and clears the cookie",
            end_session,
        ),
        Route::new(
            Method::POST,
            "/v1/auth/invalidate",
            Action::InvalidateLoginTokens,
            "Log out everywhere: revoke every login token of the caller (API tokens stay)",
            invalidate,
        )
        .response::<LoginTokensInvalidated>(),
        Route::new(
            Method::GET,
            "/v1/auth/validate",
            Action::ValidateToken,
            "Check the bearer token; `exp` is -1 when it never expires",
            validate,
        )
        .response::<TokenValidation>(),
        Route::new(
            Method::GET,
            "/v1/auth/api-tokens/validate",
            Action::ValidateToken,
            "Check the bearer token (TypeScript SDK form)",
            validate,
        )
        .response::<TokenValidation>(),
    ]
}

/// A login request no other site could have started in the browser (login CSRF: see
/// [`session::login_refusal`]). It is checked before the body is read and before any
/// password, so a forged login is refused whatever it carries and counts as no failure.
struct NotFromAnotherSite;

impl FromRequestParts<AppState> for NotFromAnotherSite {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match session::login_refusal(
            &parts.headers,
            parts.uri.authority(),
            &state.config.public_url,
        ) {
            Some(why) => Err(ApiError::Forbidden(why.to_string())),
            None => Ok(NotFromAnotherSite),
        }
    }
}

async fn login(
    State(state): State<AppState>,
    _: NotFromAnotherSite,
    peer: Option<axum::Extension<ConnectInfo<std::net::SocketAddr>>>,
    LenientJson(body): LenientJson<LoginRequest>,
) -> ApiResult<Json<LoginResponse>> {
    let (user, token) = log_in(&state, peer, body).await?;
    Ok(Json(LoginResponse {
        token,
        username: user.username,
        expires_at: (atoll_meta::now_millis() + LOGIN_TOKEN_LIFETIME_MS) / 1000,
    }))
}

/// The console's login: the same check and the same login token as `login`, handed to
/// the browser as a cookie that its scripts cannot read.
async fn start_session(
    State(state): State<AppState>,
    _: NotFromAnotherSite,
    peer: Option<axum::Extension<ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    LenientJson(body): LenientJson<LoginRequest>,
) -> ApiResult<impl IntoResponse> {
    let (user, token) = log_in(&state, peer, body).await?;
    let secure = served_over_tls(&state, &headers);
    let cookie = session::start_cookie(&token, LOGIN_TOKEN_LIFETIME_MS / 1000, secure);
    Ok((
        [
            (SET_COOKIE, cookie),
            (CACHE_CONTROL, "no-store".to_string()),
        ],
        Json(SessionStarted {
            username: user.username,
            expires_at: (atoll_meta::now_millis() + LOGIN_TOKEN_LIFETIME_MS) / 1000,
        }),
    ))
}

/// The console's logout. The browser forgets the cookie whatever happens; the login token
/// it held is revoked only on a request that may use the cookie (the CSRF header, same
/// site), so another site cannot end a session (it could not, anyway: `SameSite=Strict`).
async fn end_session(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> ApiResult<impl IntoResponse> {
    if let session::CookieSession::Usable(token) = session::cookie_session(&headers) {
        if looks_like_token(token) && state.store.revoke_login_token(&hash_secret(token)).await? {
            tracing::info!("ended a console session");
        }
    }
    Ok((
        [(
            SET_COOKIE,
            session::end_cookie(served_over_tls(&state, &headers)),
        )],
        Json(atoll_types::Empty {}),
    ))
}

/// Whether the browser reached the API over TLS: the server's own TLS (its public URL is
/// `https://…`), or a TLS-terminating proxy that says so in `X-Forwarded-Proto`. Session
/// cookies are then `Secure`. Trusting the header costs nothing: a client that lies gets a
/// cookie its browser will not send over plain HTTP, which only harms itself.
fn served_over_tls(state: &AppState, headers: &HeaderMap) -> bool {
    state.config.public_url.starts_with("https://")
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

/// Checks a username and password and mints a login token; throttles guessing.
async fn log_in(
    state: &AppState,
    peer: Option<axum::Extension<ConnectInfo<std::net::SocketAddr>>>,
    body: LoginRequest,
) -> ApiResult<(atoll_meta::User, String)> {
    let refused = || ApiError::Unauthenticated("invalid username or password".into());
    // Password guessing is slowed per username *and client address*, before any hash is
    // checked: a guesser slows itself, never the user logging in from elsewhere.
    let address = peer.map(|axum::Extension(ConnectInfo(addr))| addr.ip());
    let now = std::time::Instant::now();
    if let Err(refusal) = state.login_throttle.check(&body.username, address, now) {
        let wait = refusal.seconds();
        let message = match refusal {
            Refusal::Pair(_) => format!(
                "too many failed logins for {} from this address: try again in {wait} s",
                body.username
            ),
            Refusal::Address(_) => {
                format!("too many failed logins from this address: try again in {wait} s")
            }
        };
        return Err(ApiError::TooManyRequests(message, wait));
    }
    let user = state.store.user_by_username(&body.username).await?;
    // Verify against a dummy hash when the user is unknown, so the answer takes as long
    // either way and does not reveal which usernames exist.
    let hash = user.as_ref().map(|u| u.password_hash.clone());
    let password = body.password;
    let ok = tokio::task::spawn_blocking(move || match hash {
        Some(hash) => verify_password(&password, &hash),
        None => {
            verify_password(&password, dummy_hash());
            false
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    let Some(user) = user.filter(|_| ok) else {
        state.login_throttle.failed(&body.username, address, now);
        return Err(refused());
    };
    state.login_throttle.succeeded(&body.username, address);
    let token = mint_login_token(&state.store, &user.id).await?;
    Ok((user, token))
}

/// An Argon2id hash of a random password nobody knows.
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| {
        crate::auth::secrets::hash_password(&crate::auth::secrets::generate_password())
            .unwrap_or_default()
    })
}

async fn validate(access: Access) -> Json<TokenValidation> {
    let exp = access.principal.token.expires_at.map_or(-1, |ms| ms / 1000);
    Json(TokenValidation { exp })
}

/// `turso auth logout --all`: every session of the caller ends, this one included. API
/// tokens are credentials of their own, revoked one by one; an API token cannot call this
/// (see the policy table).
async fn invalidate(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<LoginTokensInvalidated>> {
    let user = &access.principal.user;
    let (valid_from_ms, revoked) = state.store.revoke_login_tokens(&user.id).await?;
    tracing::info!(user = %user.username, revoked, "revoked every login token of a user");
    Ok(Json(LoginTokensInvalidated {
        valid_from: valid_from_ms / 1000,
    }))
}
