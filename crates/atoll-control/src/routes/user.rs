//! The caller's account: `/v1/user`, `/v1/current-user`, and accepting invites
//! (`/v1/user/invites…`).

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_types::audit::AuditCode;
use atoll_types::members::{InviteAccepted, InviteList};
use atoll_types::users::{User, UserResponse};
use atoll_types::ErrorCode;
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;
use serde_json::json;

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            "/v1/user",
            Action::ReadUser,
            "The calling user",
            current_user,
        )
        .response::<UserResponse>(),
        Route::new(
            Method::GET,
            "/v1/current-user",
            Action::ReadUser,
            "The calling user (Turso CLI form)",
            current_user,
        )
        .response::<UserResponse>(),
        Route::new(
            Method::GET,
            "/v1/user/invites",
            Action::ListOwnInvites,
            "Pending invites addressed to the caller",
            list_invites,
        )
        .response::<InviteList>(),
        Route::new(
            Method::POST,
            "/v1/user/invites/{org}/accept",
            Action::AcceptInvite,
            "Accept the pending invite to an organization",
            accept_invite,
        )
        .response::<InviteAccepted>(),
    ]
}

async fn current_user(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<UserResponse>> {
    let user = &access.principal.user;
    let invites = state.store.invites_for_user(&user.id).await?;
    let plan = state
        .store
        .org_by_slug(&user.username)
        .await?
        .map(|o| o.plan_id)
        .unwrap_or_default();
    Ok(Json(UserResponse {
        user: User {
            username: user.username.clone(),
            name: user.name.clone(),
            email: user.email.clone(),
            avatar_url: String::new(),
            plan,
            mfa: false,
            has_pending_invites: !invites.is_empty(),
            admin: user.is_admin,
        },
    }))
}

async fn list_invites(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<InviteList>> {
    let invites = state
        .store
        .invites_for_user(&access.principal.user.id)
        .await?;
    Ok(Json(InviteList {
        invites: invites.iter().map(wire::invite).collect(),
    }))
}

async fn accept_invite(
    State(state): State<AppState>,
    access: Access,
    Path(slug): Path<String>,
) -> ApiResult<Json<InviteAccepted>> {
    let no_invite = || {
        ApiError::NotFound(
            ErrorCode::InviteNotFound,
            format!("no pending invite to organization {slug}"),
        )
    };
    let org = state
        .store
        .org_by_slug(&slug)
        .await?
        .ok_or_else(no_invite)?;
    let role = state
        .store
        .accept_invite(&org.id, &access.principal.user.id)
        .await
        .map_err(|e| match e {
            atoll_meta::StoreError::NotFound(_) => no_invite(),
            atoll_meta::StoreError::AlreadyExists(_) => ApiError::Conflict(
                ErrorCode::MemberAlreadyExists,
                format!("you are already a member of organization {slug}"),
            ),
            other => other.into(),
        })?;
    let username = &access.principal.user.username;
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::OrgMemberAdd,
        format!("{username} accepted the invite and joined as {role}"),
        json!({"username": username, "role": role, "invite": true}),
    )
    .await;
    Ok(Json(InviteAccepted {
        organization: slug,
        role,
    }))
}
