//! `POST /v1/auth/login`, `POST /v1/auth/invalidate`, `GET /v1/auth/validate`,
//! `GET /v1/auth/api-tokens/validate`.

use super::Route;
use crate::auth::secrets::verify_password;
use crate::auth::{Access, Action};
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::login_throttle::Refusal;
use crate::server::{mint_login_token, AppState, LOGIN_TOKEN_LIFETIME_MS};
use atoll_types::tokens::{LoginTokensInvalidated, TokenValidation};
use atoll_types::users::{LoginRequest, LoginResponse};
use axum::extract::{ConnectInfo, State};
use axum::http::Method;
use axum::Json;

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::POST,
            "/v1/auth/login",
            Action::Login,
            "Log in with username and password; answers a 7-day login token",
            login,
        )
        .request::<LoginRequest>()
        .response::<LoginResponse>(),
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

async fn login(
    State(state): State<AppState>,
    peer: Option<axum::Extension<ConnectInfo<std::net::SocketAddr>>>,
    LenientJson(body): LenientJson<LoginRequest>,
) -> ApiResult<Json<LoginResponse>> {
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
    let token = mint_login_token(&state, &user.id).await?;
    Ok(Json(LoginResponse {
        token,
        username: user.username,
        expires_at: (atoll_meta::now_millis() + LOGIN_TOKEN_LIFETIME_MS) / 1000,
    }))
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
