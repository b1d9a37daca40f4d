//! Instance administration: `POST /v1/admin/users`.

use super::Route;
use crate::audit;
use crate::auth::secrets::hash_password_blocking;
use crate::auth::{Access, Action};
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_meta::{NewGroup, NewUser};
use atoll_types::audit::AuditCode;
use atoll_types::organizations::{OrganizationResponse, SetPlanRequest, PLANS};
use atoll_types::users::{CreateUserRequest, User, UserResponse};
use atoll_types::ErrorCode;
use axum::extract::{Path, State};
use serde_json::json;

use axum::http::Method;
use axum::Json;

/// Passwords shorter than this are refused.
const MIN_PASSWORD_LENGTH: usize = 8;

pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::POST,
        "/v1/admin/users",
        Action::CreateUser,
        "Create a user with a personal organization and a default group (instance administrators)",
        create_user,
    )
        .request::<CreateUserRequest>()
    .response::<UserResponse>(),
    Route::new(
        Method::POST,
        "/v1/admin/organizations/{org}/plan",
        Action::SetOrganizationPlan,
        "Set an organization's plan (instance administrators)",
        set_plan,
    )
    .request::<SetPlanRequest>()
    .response::<OrganizationResponse>()]
}

async fn set_plan(
    State(state): State<AppState>,
    access: Access,
    Path(slug): Path<String>,
    LenientJson(body): LenientJson<SetPlanRequest>,
) -> ApiResult<Json<OrganizationResponse>> {
    if !PLANS.contains(&body.plan.as_str()) {
        return Err(ApiError::invalid(format!(
            "unknown plan {:?}: use one of {}",
            body.plan,
            PLANS.join(", ")
        )));
    }
    let org = state.store.org_by_slug(&slug).await?.ok_or_else(|| {
        ApiError::NotFound(
            ErrorCode::OrganizationNotFound,
            format!("organization {slug} not found"),
        )
    })?;
    let previous = org.plan_id;
    let org = state.store.set_org_plan(&org.id, &body.plan).await?;
    crate::quotas::enforce_consumption(&state, &org.id).await?;
    let org = state.store.org_by_id(&org.id).await?.unwrap_or(org);
    if org.plan_id != previous {
        audit::record(
            &state,
            &access,
            &org.id,
            AuditCode::OrgPlanUpdate,
            format!("changed the plan from {previous} to {}", org.plan_id),
            json!({"plan": org.plan_id, "previous_plan": previous}),
        )
        .await;
    }
    Ok(Json(OrganizationResponse {
        organization: crate::wire::organization(&org),
    }))
}

async fn create_user(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<CreateUserRequest>,
) -> ApiResult<Json<UserResponse>> {
    atoll_types::names::validate_username(&body.username)
        .map_err(|e| ApiError::Invalid(ErrorCode::InvalidName, e))?;
    if body.password.chars().count() < MIN_PASSWORD_LENGTH {
        return Err(ApiError::invalid(format!(
            "password must be at least {MIN_PASSWORD_LENGTH} characters"
        )));
    }
    let email = body.email.unwrap_or_default();
    if !email.is_empty() && !email.contains('@') {
        return Err(ApiError::invalid("email must be an email address"));
    }
    let password_hash = hash_password_blocking(body.password).await?;
    let (user, org, _) = state
        .store
        .create_user(
            NewUser {
                username: body.username.clone(),
                email,
                name: body.name.unwrap_or_else(|| body.username.clone()),
                password_hash,
                is_admin: body.admin.unwrap_or(false),
                plan: Some(state.config.default_plan.clone()),
            },
            Some(NewGroup {
                name: "default".to_string(),
                location: state.config.server_location.clone(),
                version: state.config.group_version.clone(),
            }),
        )
        .await
        .map_err(|e| match e {
            atoll_meta::StoreError::AlreadyExists(_) => ApiError::Conflict(
                ErrorCode::UserAlreadyExists,
                format!("username {} is taken", body.username),
            ),
            other => other.into(),
        })?;
    // The new user's personal organization is where their story starts.
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::UserSignup,
        format!("created user {}", user.username),
        json!({"username": user.username}),
    )
    .await;
    Ok(Json(UserResponse {
        user: User {
            username: user.username,
            name: user.name,
            email: user.email,
            avatar_url: String::new(),
            plan: org.plan_id,
            mfa: false,
            has_pending_invites: false,
            admin: user.is_admin,
        },
    }))
}
