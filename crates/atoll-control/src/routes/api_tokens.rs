//! The caller's platform API tokens: `/v1/auth/api-tokens…` and the CLI's
//! `/v2/auth/api-tokens/{name}`.

use super::Route;
use crate::audit;
use crate::auth::secrets::{new_token_id, PlainToken};
use crate::auth::{Access, Action};
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_meta::{NewToken, TokenKind, TokenListing, TokenRestriction};
use atoll_types::audit::AuditCode;
use atoll_types::tokens::{
    ApiTokenList, ApiTokenRevoked, CreateApiTokenRequest, CreatedApiTokenV1, CreatedApiTokenV2,
    CreatedApiTokenValue,
};
use atoll_types::{ErrorCode, Role};
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;
use serde_json::json;

const UNRESTRICTED_DEPRECATION: &str = "unrestricted API tokens are deprecated and will be removed: \
     mint organization-scoped tokens (`organization`) or group-scoped tokens (`organization`, `group`, `scopes`)";

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            "/v1/auth/api-tokens",
            Action::ListOwnApiTokens,
            "List the caller's API tokens",
            list,
        )
        .response::<ApiTokenList>(),
        Route::new(
            Method::POST,
            "/v1/auth/api-tokens/{name}",
            Action::CreateApiToken,
            "Mint an API token (flat answer)",
            create_v1,
        )
        .request::<CreateApiTokenRequest>()
        .response::<CreatedApiTokenV1>(),
        Route::new(
            Method::POST,
            "/v2/auth/api-tokens/{name}",
            Action::CreateApiToken,
            "Mint an API token (nested answer, Turso CLI)",
            create_v2,
        )
        .request::<CreateApiTokenRequest>()
        .response::<CreatedApiTokenV2>(),
        Route::new(
            Method::DELETE,
            "/v1/auth/api-tokens/{name}",
            Action::RevokeOwnApiToken,
            "Revoke one of the caller's API tokens by name",
            revoke,
        )
        .response::<ApiTokenRevoked>(),
    ]
}

async fn list(State(state): State<AppState>, access: Access) -> ApiResult<Json<ApiTokenList>> {
    let tokens = state
        .store
        .list_user_tokens(&access.principal.user.id)
        .await?;
    Ok(Json(ApiTokenList {
        tokens: tokens.iter().map(|t| wire::api_token(t, false)).collect(),
    }))
}

async fn create_v1(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    LenientJson(body): LenientJson<CreateApiTokenRequest>,
) -> ApiResult<Json<CreatedApiTokenV1>> {
    let (listing, secret) = mint(&state, &access, name, body).await?;
    let deprecation = deprecation(&listing);
    Ok(Json(CreatedApiTokenV1 {
        name: listing.token.name,
        id: listing.token.id,
        token: secret,
        deprecation,
    }))
}

async fn create_v2(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    LenientJson(body): LenientJson<CreateApiTokenRequest>,
) -> ApiResult<Json<CreatedApiTokenV2>> {
    let (listing, secret) = mint(&state, &access, name, body).await?;
    let deprecation = deprecation(&listing);
    Ok(Json(CreatedApiTokenV2 {
        token: CreatedApiTokenValue {
            name: listing.token.name,
            id: listing.token.id,
            value: secret,
        },
        deprecation,
    }))
}

fn deprecation(listing: &TokenListing) -> Option<String> {
    matches!(listing.token.restriction, TokenRestriction::Unrestricted)
        .then(|| UNRESTRICTED_DEPRECATION.to_string())
}

/// Validates the request, works out the token's restriction and stores it.
async fn mint(
    state: &AppState,
    access: &Access,
    name: String,
    body: CreateApiTokenRequest,
) -> ApiResult<(TokenListing, String)> {
    if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control() || c == '/') {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidName,
            "token name must be 1 to 64 printable characters".into(),
        ));
    }
    let user = &access.principal.user;
    let expires_at = match body.expiration.as_deref() {
        None => None,
        Some(text) => atoll_types::expiration::parse_expiration(text)
            .map_err(|e| ApiError::Invalid(ErrorCode::InvalidExpiration, e.to_string()))?
            .map(|seconds| {
                atoll_meta::now_millis().saturating_add(
                    i64::try_from(seconds)
                        .unwrap_or(i64::MAX / 2)
                        .saturating_mul(1000),
                )
            }),
    };
    let has_scopes = body.scopes.as_ref().is_some_and(|s| !s.is_empty());
    let restriction = match (body.organization.as_deref(), body.group.as_deref()) {
        (None, None) if !has_scopes => TokenRestriction::Unrestricted,
        (None, _) => {
            return Err(ApiError::invalid(
                "`group` and `scopes` need `organization`",
            ));
        }
        (Some(slug), group) => {
            let not_found = || {
                ApiError::NotFound(
                    ErrorCode::OrganizationNotFound,
                    format!("organization {slug} not found"),
                )
            };
            let (org, role) = state
                .store
                .org_with_role(slug, &user.id)
                .await?
                .ok_or_else(not_found)?;
            let role = role.ok_or_else(not_found)?;
            match group {
                None if has_scopes => return Err(ApiError::invalid("`scopes` need a `group`")),
                None => TokenRestriction::Organization { org_id: org.id },
                Some(group_name) => {
                    if role < Role::Admin {
                        return Err(ApiError::Forbidden(
                            "minting a group-scoped token needs the admin or owner role".into(),
                        ));
                    }
                    let requested = body.scopes.unwrap_or_default();
                    if requested.is_empty() {
                        return Err(ApiError::Invalid(
                            ErrorCode::InvalidScope,
                            "a group-scoped token needs at least one scope".into(),
                        ));
                    }
                    let scopes =
                        atoll_types::scopes::expand_scopes(&requested).map_err(|unknown| {
                            ApiError::Invalid(
                                ErrorCode::InvalidScope,
                                format!("unknown scope `{unknown}`"),
                            )
                        })?;
                    let group = state
                        .store
                        .group_by_name(&org.id, group_name)
                        .await?
                        .ok_or_else(|| {
                            ApiError::NotFound(
                                ErrorCode::GroupNotFound,
                                format!("group {group_name} not found"),
                            )
                        })?;
                    TokenRestriction::Group {
                        org_id: org.id,
                        group_id: group.id,
                        scopes,
                    }
                }
            }
        }
    };
    let secret = PlainToken::generate();
    let listing = state
        .store
        .insert_token(NewToken {
            id: new_token_id(),
            user_id: user.id.clone(),
            name: name.clone(),
            kind: TokenKind::Api,
            secret_hash: secret.hashed(),
            restriction,
            expires_at,
        })
        .await
        .map_err(|e| match e {
            atoll_meta::StoreError::AlreadyExists(_) => ApiError::Conflict(
                ErrorCode::TokenAlreadyExists,
                format!("a token named {name} already exists"),
            ),
            other => other.into(),
        })?;
    if let Some(org_id) = audit_org_id(state, access, &listing.token.restriction).await {
        let mut data = json!({"name": listing.token.name, "id": listing.token.id});
        let mut message = format!("created API token {}", listing.token.name);
        if let (Some(group), TokenRestriction::Group { scopes, .. }) =
            (&listing.group_name, &listing.token.restriction)
        {
            data["group"] = json!(group);
            data["scopes"] = json!(scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>());
            message.push_str(&format!(" for group {group}"));
        }
        audit::record(
            state,
            access,
            &org_id,
            AuditCode::UserTokenCreate,
            message,
            data,
        )
        .await;
    }
    Ok((listing, secret.reveal()))
}

/// The organization whose audit log records a token: the one it is restricted to, or the
/// user's personal organization for an unrestricted token.
async fn audit_org_id(
    state: &AppState,
    access: &Access,
    restriction: &TokenRestriction,
) -> Option<String> {
    match restriction {
        TokenRestriction::Organization { org_id } | TokenRestriction::Group { org_id, .. } => {
            Some(org_id.clone())
        }
        TokenRestriction::Unrestricted => {
            match state
                .store
                .org_by_slug(&access.principal.user.username)
                .await
            {
                Ok(personal) => personal.map(|org| org.id),
                Err(error) => {
                    tracing::error!(%error, "could not find the personal organization to audit a token in");
                    None
                }
            }
        }
    }
}

async fn revoke(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
) -> ApiResult<Json<ApiTokenRevoked>> {
    let revoked = state
        .store
        .revoke_user_token(&access.principal.user.id, &name)
        .await
        .map_err(|e| match e {
            atoll_meta::StoreError::NotFound(_) => {
                ApiError::NotFound(ErrorCode::TokenNotFound, format!("token {name} not found"))
            }
            other => other.into(),
        })?;
    if let Some(org_id) = audit_org_id(&state, &access, &revoked.restriction).await {
        audit::record(
            &state,
            &access,
            &org_id,
            AuditCode::UserTokenRevoke,
            format!("revoked API token {name}"),
            json!({"name": name, "id": revoked.id}),
        )
        .await;
    }
    Ok(Json(ApiTokenRevoked { token: name }))
}
