//! Authentication: from `Authorization: Bearer …` (or the web console's session cookie,
//! see [`super::session`]) to a [`Principal`].

use super::secrets::{hash_secret, looks_like_token};
use super::session::{cookie_session, CookieSession};
use crate::error::ApiError;
use crate::state::AppState;
use atoll_meta::{ApiToken, TokenKind, TokenRestriction, User};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::HeaderValue;

/// A caller whose token checked out: the user and the token they used.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user: User,
    pub token: ApiToken,
}

impl Principal {
    /// Login tokens and (deprecated) unrestricted API tokens act for the user in every
    /// organization; only they may manage the user's own credentials or create
    /// organizations.
    pub fn is_user_level(&self) -> bool {
        matches!(self.token.restriction, TokenRestriction::Unrestricted)
    }

    pub fn is_login(&self) -> bool {
        self.token.kind == TokenKind::Login
    }
}

/// Reads and checks the bearer token: from `Authorization`, or else from the console's
/// session cookie when the request may use it (see [`super::session`]). Every failure is a
/// 401 that says what was wrong, except a cookie on a request that could be forged (403).
pub async fn authenticate(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    let (bearer, from_cookie) = match parts.headers.get(AUTHORIZATION) {
        Some(header) => (bearer_of(header)?, false),
        None => match cookie_session(&parts.headers) {
            CookieSession::Usable(token) => (token, true),
            CookieSession::Refused(why) => return Err(ApiError::Forbidden(why.to_string())),
            CookieSession::Absent => {
                return Err(ApiError::Unauthenticated(
                    "missing Authorization header: send `Authorization: Bearer <token>`".into(),
                ))
            }
        },
    };
    if !looks_like_token(bearer) {
        return Err(ApiError::Unauthenticated("malformed token".into()));
    }
    let secret_hash = hash_secret(bearer);
    let credential = state
        .store
        .credential_by_secret_hash(&secret_hash)
        .await?
        .ok_or_else(|| ApiError::Unauthenticated("invalid token".into()))?;
    let token = credential.token;
    // The console's cookie only ever holds a login token; an API token there was not put
    // there by this server.
    if from_cookie && token.kind != TokenKind::Login {
        return Err(ApiError::Unauthenticated(
            "the session cookie holds no login session: log in again".into(),
        ));
    }
    if token.revoked_at.is_some() {
        return Err(ApiError::Unauthenticated("token has been revoked".into()));
    }
    if token
        .expires_at
        .is_some_and(|exp| exp <= atoll_meta::now_millis())
    {
        return Err(ApiError::Unauthenticated("token has expired".into()));
    }
    if let Err(e) = state.store.touch_token(&secret_hash, &token).await {
        // Losing a last-used stamp is no reason to refuse the request.
        tracing::warn!(error = %e, "could not record token use");
    }
    Ok(Principal {
        user: credential.user,
        token,
    })
}

fn bearer_of(header: &HeaderValue) -> Result<&str, ApiError> {
    let value = header
        .to_str()
        .map_err(|_| ApiError::Unauthenticated("malformed Authorization header".into()))?;
    value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .ok_or_else(|| {
            ApiError::Unauthenticated(
                "malformed Authorization header: expected `Bearer <token>`".into(),
            )
        })
}
