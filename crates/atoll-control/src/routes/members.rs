//! Members of an organization: `/v1/organizations/{org}/members…`.

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_meta::{OrgKind, StoreError};
use atoll_types::audit::AuditCode;
use atoll_types::members::{
    AddMemberRequest, MemberAdded, MemberList, MemberRemoved, MemberResponse, UpdateMemberRequest,
};
use atoll_types::{ErrorCode, Role};
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;
use serde_json::json;
use std::collections::HashMap;

const MEMBERS: &str = "/v1/organizations/{org}/members";
const MEMBER: &str = "/v1/organizations/{org}/members/{username}";

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            MEMBERS,
            Action::ReadMembers,
            "List members",
            list,
        )
        .response::<MemberList>(),
        Route::new(
            Method::POST,
            MEMBERS,
            Action::ManageMembers,
            "Add an existing user as a member",
            add,
        )
        .request::<AddMemberRequest>()
        .response::<MemberAdded>(),
        Route::new(
            Method::POST,
            MEMBER,
            Action::ManageMembers,
            "Add an existing user as a member (TypeScript SDK form)",
            add_by_path,
        )
        .request::<AddMemberRequest>()
        .response::<MemberAdded>(),
        Route::new(
            Method::GET,
            MEMBER,
            Action::ReadMembers,
            "Retrieve a member",
            retrieve,
        )
        .response::<MemberResponse>(),
        Route::new(
            Method::PATCH,
            MEMBER,
            Action::ManageMembers,
            "Change a member's role",
            update_role,
        )
        .request::<UpdateMemberRequest>()
        .response::<MemberResponse>(),
        Route::new(
            Method::DELETE,
            MEMBER,
            Action::RemoveMember,
            "Remove a member (or leave)",
            remove,
        )
        .response::<MemberRemoved>(),
    ]
}

pub(crate) fn parse_role(text: Option<&str>) -> ApiResult<Role> {
    match text {
        None | Some("") => Ok(Role::Member),
        Some(text) => Role::parse(text)
            .ok_or_else(|| ApiError::Invalid(ErrorCode::InvalidRole, "invalid role".into())),
    }
}

/// Only owners hand out or take away the owner role.
pub(crate) fn check_can_grant(access: &Access, role: Role) -> ApiResult<()> {
    if role == Role::Owner && access.role() != Role::Owner {
        return Err(ApiError::Forbidden(
            "only owners can make someone an owner".into(),
        ));
    }
    Ok(())
}

fn ensure_team(access: &Access) -> ApiResult<()> {
    if access.org().kind == OrgKind::Personal {
        return Err(ApiError::Invalid(
            ErrorCode::PersonalOrganization,
            "a personal organization has no other members: create a team organization".into(),
        ));
    }
    Ok(())
}

async fn list(State(state): State<AppState>, access: Access) -> ApiResult<Json<MemberList>> {
    let members = state.store.list_members(&access.org().id).await?;
    Ok(Json(MemberList {
        members: members.iter().map(wire::member).collect(),
    }))
}

async fn add(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<AddMemberRequest>,
) -> ApiResult<Json<MemberAdded>> {
    let username = body
        .username
        .clone()
        .or(body.member.clone())
        .unwrap_or_default();
    add_member(&state, &access, &username, body.role.as_deref()).await
}

async fn add_by_path(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
    LenientJson(body): LenientJson<AddMemberRequest>,
) -> ApiResult<Json<MemberAdded>> {
    let username = params.get("username").cloned().unwrap_or_default();
    add_member(&state, &access, &username, body.role.as_deref()).await
}

async fn add_member(
    state: &AppState,
    access: &Access,
    username: &str,
    role: Option<&str>,
) -> ApiResult<Json<MemberAdded>> {
    ensure_team(access)?;
    if username.is_empty() {
        return Err(ApiError::invalid("`username` is required"));
    }
    let role = parse_role(role)?;
    check_can_grant(access, role)?;
    let org = access.org();
    let user = state
        .store
        .user_by_username(username)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(
                ErrorCode::UserNotFound,
                format!("could not find user {username}"),
            )
        })?;
    let member = state
        .store
        .add_member(&org.id, &user.id, role)
        .await
        .map_err(|e| match e {
            StoreError::AlreadyExists(_) => ApiError::Conflict(
                ErrorCode::MemberAlreadyExists,
                format!(
                    "user {username} is already a member of organization {}",
                    org.slug
                ),
            ),
            other => other.into(),
        })?;
    audit::record(
        state,
        access,
        &org.id,
        AuditCode::OrgMemberAdd,
        format!("added {} as {}", member.username, member.role),
        json!({"username": member.username, "role": member.role}),
    )
    .await;
    Ok(Json(MemberAdded {
        member: member.username,
        role: member.role,
    }))
}

/// How a route says that the user of its path is no member: each route has its own
/// words in the OpenAPI document, and clients match on them.
#[derive(Clone, Copy)]
enum MissingMember {
    /// `GET …/members/{username}`: "could not find member".
    Retrieve,
    /// `PATCH …/members/{username}`: "could not find user <username>".
    UpdateRole,
    /// `DELETE …/members/{username}`: "user <username> is not a member of org <org>".
    Remove,
}

/// The member named in the path, or the spec's 404 for the route.
async fn find_member(
    state: &AppState,
    access: &Access,
    username: &str,
    missing: MissingMember,
) -> ApiResult<atoll_meta::Member> {
    let org = access.org();
    let not_member = || {
        let message = match missing {
            MissingMember::Retrieve => "could not find member".to_string(),
            MissingMember::UpdateRole => format!("could not find user {username}"),
            MissingMember::Remove => {
                format!("user {username} is not a member of org {}", org.slug)
            }
        };
        ApiError::NotFound(ErrorCode::MemberNotFound, message)
    };
    let user = state
        .store
        .user_by_username(username)
        .await?
        .ok_or_else(not_member)?;
    state
        .store
        .member(&org.id, &user.id)
        .await
        .map_err(|e| match e {
            StoreError::NotFound(_) => not_member(),
            other => other.into(),
        })
}

async fn retrieve(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<MemberResponse>> {
    let member = find_member(
        &state,
        &access,
        &params["username"],
        MissingMember::Retrieve,
    )
    .await?;
    Ok(Json(MemberResponse {
        member: wire::member(&member),
    }))
}

async fn update_role(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
    LenientJson(body): LenientJson<UpdateMemberRequest>,
) -> ApiResult<Json<MemberResponse>> {
    let role = Role::parse(&body.role)
        .ok_or_else(|| ApiError::Invalid(ErrorCode::InvalidRole, "invalid role".into()))?;
    let member = find_member(
        &state,
        &access,
        &params["username"],
        MissingMember::UpdateRole,
    )
    .await?;
    check_can_grant(&access, role)?;
    check_can_grant(&access, member.role)?;
    let previous = member.role;
    let member = state
        .store
        .set_member_role(&access.org().id, &member.user_id, role)
        .await?;
    if member.role != previous {
        audit::record(
            &state,
            &access,
            &access.org().id,
            AuditCode::OrgMemberRoleUpdate,
            format!(
                "changed the role of {} from {previous} to {}",
                member.username, member.role
            ),
            json!({"username": member.username, "role": member.role, "previous_role": previous}),
        )
        .await;
    }
    Ok(Json(MemberResponse {
        member: wire::member(&member),
    }))
}

async fn remove(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<MemberRemoved>> {
    let member = find_member(&state, &access, &params["username"], MissingMember::Remove).await?;
    let leaving = member.user_id == access.principal.user.id;
    if !leaving {
        access.require(Action::ManageMembers)?;
        check_can_grant(&access, member.role)?;
    }
    state
        .store
        .remove_member(&access.org().id, &member.user_id)
        .await?;
    let (code, message) = if leaving {
        (
            AuditCode::OrgMemberLeave,
            "left the organization".to_string(),
        )
    } else {
        (
            AuditCode::OrgMemberRm,
            format!("removed {} from the organization", member.username),
        )
    };
    audit::record(
        &state,
        &access,
        &access.org().id,
        code,
        message,
        json!({"username": member.username, "role": member.role}),
    )
    .await;
    Ok(Json(MemberRemoved {
        member: member.username,
    }))
}
