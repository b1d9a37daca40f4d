//! Invites: `/v2/organizations/{org}/invites…` (spec, TypeScript SDK) and the Turso CLI's
//! `/v1/organizations/{org}/invite` and `/v1/organizations/{org}/invites…`.
//! The invited user accepts with `POST /v1/user/invites/{org}/accept` (see `user`).

use super::members::{check_can_grant, parse_role};
use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_meta::{Invitee, OrgKind, StoreError};
use atoll_types::audit::AuditCode;
use atoll_types::members::{
    CreateInviteRequest, InviteCreated, InviteCreatedResponse, InviteList, LegacyInviteList,
};
use atoll_types::{Empty, ErrorCode};
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;
use serde_json::json;
use std::collections::HashMap;

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            "/v2/organizations/{org}/invites",
            Action::ReadInvites,
            "List pending invites",
            list,
        )
        .response::<InviteList>(),
        Route::new(
            Method::POST,
            "/v2/organizations/{org}/invites",
            Action::ManageInvites,
            "Invite by email or username",
            create,
        )
        .request::<CreateInviteRequest>()
        .response::<InviteCreatedResponse>(),
        Route::new(
            Method::DELETE,
            "/v2/organizations/{org}/invites/{email}",
            Action::ManageInvites,
            "Delete a pending invite",
            delete,
        )
        .response::<Empty>(),
        Route::new(
            Method::POST,
            "/v1/organizations/{org}/invite",
            Action::ManageInvites,
            "Invite by email (Turso CLI form)",
            create,
        )
        .request::<CreateInviteRequest>()
        .response::<InviteCreatedResponse>(),
        Route::new(
            Method::GET,
            "/v1/organizations/{org}/invites",
            Action::ReadInvites,
            "List pending invites (Turso CLI form, PascalCase)",
            list_legacy,
        )
        .response::<LegacyInviteList>(),
        Route::new(
            Method::DELETE,
            "/v1/organizations/{org}/invites/{email}",
            Action::ManageInvites,
            "Delete a pending invite (Turso CLI form)",
            delete,
        )
        .response::<Empty>(),
    ]
}

async fn list(State(state): State<AppState>, access: Access) -> ApiResult<Json<InviteList>> {
    let invites = state.store.list_invites(&access.org().id).await?;
    Ok(Json(InviteList {
        invites: invites.iter().map(wire::invite).collect(),
    }))
}

async fn list_legacy(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<LegacyInviteList>> {
    let invites = state.store.list_invites(&access.org().id).await?;
    Ok(Json(LegacyInviteList {
        invites: invites.iter().map(wire::legacy_invite).collect(),
    }))
}

async fn create(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<CreateInviteRequest>,
) -> ApiResult<Json<InviteCreatedResponse>> {
    let org = access.org();
    if org.kind == OrgKind::Personal {
        return Err(ApiError::Invalid(
            ErrorCode::PersonalOrganization,
            "invites are for team organizations: create one with POST /v1/organizations".into(),
        ));
    }
    let email = body
        .email
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.trim().to_string());
    let username = body
        .username
        .filter(|u| !u.trim().is_empty())
        .map(|u| u.trim().to_string());
    let invitee = match (email, username) {
        (Some(email), None) if email.contains('@') => Invitee::Email(email),
        (Some(_), None) => return Err(ApiError::invalid("`email` must be an email address")),
        (None, Some(username)) => Invitee::Username(username),
        _ => {
            return Err(ApiError::invalid(
                "give exactly one of `email` and `username`",
            ))
        }
    };
    let role = parse_role(body.role.as_deref())?;
    check_can_grant(&access, role)?;
    // Someone who already belongs to the organization needs no invite.
    let existing = match &invitee {
        Invitee::Username(username) => state.store.user_by_username(username).await?,
        Invitee::Email(_) => None,
    };
    if let Some(user) = existing {
        if state.store.member(&org.id, &user.id).await.is_ok() {
            return Err(ApiError::Conflict(
                ErrorCode::MemberAlreadyExists,
                format!(
                    "user {} is already a member of organization {}",
                    user.username, org.slug
                ),
            ));
        }
    }
    let invite = state
        .store
        .create_invite(&org.id, invitee, role, &access.principal.user.id)
        .await?;
    let (address, data) = if invite.email.is_empty() {
        (
            invite.username.clone(),
            json!({"username": invite.username, "role": invite.role}),
        )
    } else {
        (
            invite.email.clone(),
            json!({"email": invite.email, "role": invite.role}),
        )
    };
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::OrgInviteCreate,
        format!("invited {address} as {}", invite.role),
        data,
    )
    .await;
    Ok(Json(InviteCreatedResponse {
        invited: InviteCreated {
            email: invite.email,
            username: invite.username,
            role: invite.role,
            organization: org.slug.clone(),
        },
    }))
}

async fn delete(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<Empty>> {
    let address = &params["email"];
    state
        .store
        .delete_invite(&access.org().id, address)
        .await
        .map_err(|e| match e {
            StoreError::NotFound(_) => {
                ApiError::NotFound(ErrorCode::InviteNotFound, "invite not found".into())
            }
            other => other.into(),
        })?;
    audit::record(
        &state,
        &access,
        &access.org().id,
        AuditCode::OrgInviteRm,
        format!("deleted the invite of {address}"),
        json!({"invite": address}),
    )
    .await;
    Ok(Json(Empty {}))
}
