//! Organizations: `/v1/organizations`, `/v2/organizations`, `/v1/organizations/{org}`.

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::{LenientJson, Query};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_meta::{OrgKind, TokenRestriction};
use atoll_types::audit::AuditCode;
use atoll_types::organizations::{
    CreateOrganizationRequest, CreateOrganizationResponse, DeleteOrganizationResponse,
    Organization, OrganizationList, OrganizationResponse, UpdateOrganizationRequest,
};
use atoll_types::ErrorCode;
use axum::extract::State;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            "/v1/organizations",
            Action::ListOrganizations,
            "Organizations of the caller: a bare array (the spec), or {organizations} for the TypeScript SDK",
            list_v1,
        )
        .response_list::<Organization>(),
        Route::new(Method::GET, "/v2/organizations", Action::ListOrganizations, "Organizations of the caller", list_v2)
            .response::<OrganizationList>(),
        Route::new(Method::POST, "/v1/organizations", Action::CreateOrganization, "Create a team organization", create)
            .request::<CreateOrganizationRequest>()
            .response::<CreateOrganizationResponse>()
            .query(&["dry_run"]),
        Route::new(Method::GET, "/v1/organizations/{org}", Action::ReadOrganization, "Retrieve an organization", retrieve)
            .response::<OrganizationResponse>(),
        Route::new(Method::PATCH, "/v1/organizations/{org}", Action::UpdateOrganization, "Update overages and require_mfa", update)
            .request::<UpdateOrganizationRequest>()
            .response::<OrganizationResponse>(),
        Route::new(Method::DELETE, "/v1/organizations/{org}", Action::DeleteOrganization, "Delete a team organization and everything in it", delete)
            .response::<DeleteOrganizationResponse>(),
    ]
}

/// The organizations the caller's token may see: all of the user's for login and
/// unrestricted tokens, the one organization of a scoped token.
async fn visible_organizations(state: &AppState, access: &Access) -> ApiResult<Vec<Organization>> {
    let memberships = state.store.orgs_of_user(&access.principal.user.id).await?;
    let only = match &access.principal.token.restriction {
        TokenRestriction::Unrestricted => None,
        TokenRestriction::Organization { org_id } | TokenRestriction::Group { org_id, .. } => {
            Some(org_id)
        }
    };
    Ok(memberships
        .iter()
        .filter(|m| only.is_none_or(|id| &m.organization.id == id))
        .map(|m| wire::organization(&m.organization))
        .collect())
}

/// The spec documents a bare array; the official TypeScript SDK reads
/// `response.organizations` and would see an empty list. It identifies itself with the
/// User-Agent `@tursodatabase/api`, so that caller gets the object form (as does anyone
/// asking with `?format=object`).
async fn list_v1(
    State(state): State<AppState>,
    access: Access,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> ApiResult<Response> {
    let organizations = visible_organizations(&state, &access).await?;
    let from_ts_sdk = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ua| ua.starts_with("@tursodatabase/api"));
    if from_ts_sdk || query.format.as_deref() == Some("object") {
        Ok(Json(OrganizationList { organizations }).into_response())
    } else {
        Ok(Json(organizations).into_response())
    }
}

#[derive(Deserialize)]
struct ListQuery {
    format: Option<String>,
}

async fn list_v2(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<OrganizationList>> {
    Ok(Json(OrganizationList {
        organizations: visible_organizations(&state, &access).await?,
    }))
}

#[derive(Deserialize)]
struct CreateQuery {
    dry_run: Option<bool>,
}

async fn create(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<CreateQuery>,
    LenientJson(body): LenientJson<CreateOrganizationRequest>,
) -> ApiResult<Json<CreateOrganizationResponse>> {
    let name = body.name.trim().to_string();
    if name.is_empty() || name.len() > 100 {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidName,
            "organization name must be 1 to 100 characters".into(),
        ));
    }
    let slug = body
        .slug
        .unwrap_or_else(|| atoll_types::names::slug_from_name(&name));
    atoll_types::names::validate_slug("organization slug", &slug)
        .map_err(|e| ApiError::Invalid(ErrorCode::InvalidName, e))?;
    let taken = || {
        ApiError::Conflict(
            ErrorCode::OrganizationAlreadyExists,
            format!("organization name {slug} already exists"),
        )
    };
    if query.dry_run.unwrap_or(false) {
        // The Turso CLI asks first, then creates: answer what the real call would.
        if state.store.org_by_slug(&slug).await?.is_some()
            || state.store.user_by_username(&slug).await?.is_some()
        {
            return Err(taken());
        }
        let preview = atoll_meta::Organization {
            id: String::new(),
            slug,
            name,
            kind: OrgKind::Team,
            overages: false,
            require_mfa: false,
            blocked_reads: false,
            blocked_writes: false,
            plan_id: state.config.default_plan.clone(),
            plan_timeline: "monthly".into(),
            created_at: atoll_meta::now_millis(),
        };
        return Ok(Json(CreateOrganizationResponse {
            org: wire::organization(&preview),
        }));
    }
    let org = state
        .store
        .create_team_org(
            &access.principal.user.id,
            &slug,
            &name,
            Some(&state.config.default_plan),
            // The same first group a personal organization gets, so `db create` works at once.
            Some(atoll_meta::NewGroup {
                name: "default".to_string(),
                location: state.config.server_location.clone(),
                version: state.config.group_version.clone(),
            }),
        )
        .await
        .map_err(|e| match e {
            atoll_meta::StoreError::AlreadyExists(_) => taken(),
            other => other.into(),
        })?;
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::OrgCreate,
        format!("created organization {}", org.slug),
        json!({"organization": org.slug, "name": org.name}),
    )
    .await;
    Ok(Json(CreateOrganizationResponse {
        org: wire::organization(&org),
    }))
}

async fn retrieve(access: Access) -> Json<OrganizationResponse> {
    Json(OrganizationResponse {
        organization: wire::organization(access.org()),
    })
}

async fn update(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<UpdateOrganizationRequest>,
) -> ApiResult<Json<OrganizationResponse>> {
    if body.require_mfa == Some(true) {
        return Err(ApiError::NotAvailable(
            "multi-factor authentication is not available on Atoll, so require_mfa cannot be enabled".into(),
        ));
    }
    let before = access.org();
    let org = state
        .store
        .update_org(&before.id, body.overages, body.require_mfa)
        .await?;
    // Overages decide whether a quota blocks: re-decide now, not at the next collection.
    crate::quotas::enforce_consumption(&state, &org.id).await?;
    let org = state.store.org_by_id(&org.id).await?.unwrap_or(org);
    if org.overages != before.overages {
        let state_word = if org.overages { "on" } else { "off" };
        audit::record(
            &state,
            &access,
            &org.id,
            AuditCode::OrgSetOverages,
            format!("turned overages {state_word}"),
            json!({"overages": org.overages}),
        )
        .await;
    }
    Ok(Json(OrganizationResponse {
        organization: wire::organization(&org),
    }))
}

async fn delete(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<DeleteOrganizationResponse>> {
    let org = access.org();
    if org.kind == OrgKind::Personal {
        return Err(ApiError::Invalid(
            ErrorCode::PersonalOrganization,
            "a personal organization cannot be deleted".into(),
        ));
    }
    let databases = state.store.databases_in_org(&org.id).await?;
    // Its audit log goes with it, so an `org-delete` entry would have nowhere to live.
    state.store.delete_org(&org.id).await?;
    state
        .data_plane
        .drop_forgotten(&state.store, &databases)
        .await;

    Ok(Json(DeleteOrganizationResponse {
        organization: org.slug.clone(),
    }))
}
