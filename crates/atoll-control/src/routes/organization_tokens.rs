//! An organization's API tokens: `/v1/organizations/{org}/api-tokens…`. Admins and owners
//! see and revoke every token; members and viewers only their own.

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_meta::StoreError;
use atoll_types::audit::AuditCode;
use atoll_types::tokens::{ApiTokenList, ApiTokenRevoked};
use atoll_types::{ErrorCode, Role};
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;
use serde_json::json;
use std::collections::HashMap;

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            "/v1/organizations/{org}/api-tokens",
            Action::ListOrganizationTokens,
            "List the organization's organization- and group-scoped tokens with their minting user",
            list,
        )
        .response::<ApiTokenList>(),
        Route::new(
            Method::DELETE,
            "/v1/organizations/{org}/api-tokens/{token_id}",
            Action::RevokeOrganizationToken,
            "Revoke an organization's token by id",
            revoke,
        )
        .response::<ApiTokenRevoked>(),
    ]
}

/// `None` for admins and owners (every token); the caller's own id otherwise.
fn minted_by_filter(access: &Access) -> Option<&str> {
    (access.role() < Role::Admin).then_some(access.principal.user.id.as_str())
}

async fn list(State(state): State<AppState>, access: Access) -> ApiResult<Json<ApiTokenList>> {
    let tokens = state
        .store
        .list_org_tokens(&access.org().id, minted_by_filter(&access))
        .await?;
    Ok(Json(ApiTokenList {
        tokens: tokens.iter().map(|t| wire::api_token(t, true)).collect(),
    }))
}

async fn revoke(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<ApiTokenRevoked>> {
    let token_id = &params["token_id"];
    let revoked = state
        .store
        .revoke_org_token(&access.org().id, token_id, minted_by_filter(&access))
        .await
        .map_err(|e| match e {
            StoreError::NotFound(_) => ApiError::NotFound(
                ErrorCode::TokenNotFound,
                format!("token {token_id} not found"),
            ),
            other => other.into(),
        })?;
    audit::record(
        &state,
        &access,
        &access.org().id,
        AuditCode::UserTokenRevoke,
        format!("revoked API token {}", revoked.name),
        json!({"name": revoked.name, "id": revoked.id}),
    )
    .await;
    Ok(Json(ApiTokenRevoked {
        token: token_id.clone(),
    }))
}
