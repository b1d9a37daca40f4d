//! An organization's key sets (JWKS) for end users' JWTs from its own auth provider:
//! `/v2/organizations/{org}/jwks…` and `…/jwks-template` (the turso CLI's `org jwks`).
//!
//! A registered key set lets whoever holds its private keys query every database of the
//! organization the claims name, so registering and removing one takes an admin; the
//! keys reach the data nodes inside each database's configuration.

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::{LenientJson, Query};
use crate::data_plane::push_org_databases;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_meta::{KeySetPut, OrgKeySet};
use atoll_types::audit::AuditCode;
use atoll_types::jwks::{
    JwksEntry, JwksList, JwksSaved, JwksTemplate, JwksTemplateRequest, SaveJwksRequest,
};
use atoll_types::node::Jwk;
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
            "/v2/organizations/{org}/jwks",
            Action::ReadJwks,
            "List the organization's key sets (JWKS) of its own auth providers",
            list,
        )
        .response::<JwksList>(),
        Route::new(
            Method::PUT,
            "/v2/organizations/{org}/jwks/{name}",
            Action::ManageJwks,
            "Register or replace a key set: fetched from `jwks_url` (a URL the operator allows) or given inline in `jwks`",
            save,
        )
        .request::<SaveJwksRequest>()
        .response::<JwksSaved>(),
        Route::new(
            Method::DELETE,
            "/v2/organizations/{org}/jwks/{name}",
            Action::ManageJwks,
            "Remove a key set: tokens signed by its keys stop working",
            remove,
        ),
        Route::new(
            Method::GET,
            "/v2/organizations/{org}/jwks-template",
            Action::ReadJwks,
            "The claims an auth provider must put in end users' JWTs for a database or a group (in the query or, as the turso CLI sends it, a JSON body)",
            template,
        )
        .query(&["database", "group", "scope"])
        .response::<JwksTemplate>(),
    ]
}

fn entry(set: &OrgKeySet) -> JwksEntry {
    let keys: Vec<Jwk> = serde_json::from_str(&set.keys).unwrap_or_default();
    JwksEntry {
        jwks_name: set.name.clone(),
        jwks_url: set.url.clone().unwrap_or_default(),
        key_ids: keys.into_iter().map(|k| k.kid).collect(),
        refreshed_at: wire::rfc3339(set.refreshed_at),
        last_error: set.last_error.clone(),
    }
}

async fn list(State(state): State<AppState>, access: Access) -> ApiResult<Json<JwksList>> {
    let sets = state.store.org_key_sets(&access.org().id).await?;
    Ok(Json(JwksList {
        jwks: sets.iter().map(entry).collect(),
    }))
}

fn invalid(message: String) -> ApiError {
    ApiError::Invalid(ErrorCode::InvalidJwks, message)
}

async fn save(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
    LenientJson(body): LenientJson<SaveJwksRequest>,
) -> ApiResult<Json<JwksSaved>> {
    let name = &params["name"];
    atoll_types::names::validate_resource_name("key set", name)
        .map_err(|e| ApiError::Invalid(ErrorCode::InvalidName, e))?;
    let settings = &state.config.jwks;
    let url = body
        .jwks_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty());
    let inline = body.jwks.as_ref().filter(|v| !v.is_null());
    let (url, keys) = match (url, inline) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "give either jwks_url or an inline jwks, not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::invalid(
                "give jwks_url (the auth provider's JWKS address) or an inline jwks ({\"keys\": [...]})",
            ))
        }
        (None, Some(document)) => {
            let bytes = serde_json::to_vec(document).unwrap_or_default();
            if bytes.len() > settings.max_bytes {
                return Err(invalid(format!(
                    "the key set is larger than {} bytes",
                    settings.max_bytes
                )));
            }
            let keys = atoll_data::external_jwt::parse_key_set(&bytes).map_err(invalid)?;
            (None, keys)
        }
        (Some(text), None) => {
            let url = crate::jwks::check_url(settings, text)?;
            let keys = crate::jwks::fetch(settings, &url).await.map_err(|e| {
                if e.contains("not a public address") {
                    ApiError::Invalid(ErrorCode::JwksUrlNotAllowed, e)
                } else {
                    invalid(format!("cannot use the key set at {url}: {e}"))
                }
            })?;
            (Some(url.to_string()), keys)
        }
    };
    let stored = serde_json::to_string(&keys).map_err(|e| ApiError::Internal(e.to_string()))?;
    let org = access.org();
    match state
        .store
        .put_org_key_set(&org.id, name, url.as_deref(), &stored, settings.max_per_org)
        .await?
    {
        KeySetPut::Created | KeySetPut::Replaced => {}
        KeySetPut::LimitReached => {
            return Err(ApiError::Invalid(
                ErrorCode::TooManyJwks,
                format!(
                "organization {} already has {} key sets, the most it may have: remove one first",
                org.slug, settings.max_per_org
            ),
            ))
        }
    }
    push_org_databases(&state.data_plane, &state.store, org).await?;
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::OrgJwksSave,
        format!("saved key set {name}"),
        json!({"name": name, "url": url, "keys": keys.len()}),
    )
    .await;
    let saved = state
        .store
        .org_key_sets(&org.id)
        .await?
        .into_iter()
        .find(|s| s.name == *name)
        .ok_or_else(|| ApiError::Internal("a key set vanished after its save".into()))?;
    Ok(Json(JwksSaved {
        jwks: entry(&saved),
    }))
}

async fn remove(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<Empty>> {
    let name = &params["name"];
    let org = access.org();
    if !state.store.delete_org_key_set(&org.id, name).await? {
        return Err(ApiError::NotFound(
            ErrorCode::JwksNotFound,
            format!("could not find key set {name}"),
        ));
    }
    push_org_databases(&state.data_plane, &state.store, org).await?;
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::OrgJwksRm,
        format!("removed key set {name}"),
        json!({"name": name}),
    )
    .await;
    Ok(Json(Empty {}))
}

async fn template(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<JwksTemplateRequest>,
    LenientJson(body): LenientJson<JwksTemplateRequest>,
) -> ApiResult<Json<JwksTemplate>> {
    let pick = |a: Option<String>, b: Option<String>| {
        a.or(b)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let database = pick(body.database, query.database);
    let group = pick(body.group, query.group);
    let scope = pick(body.scope, query.scope);
    if body.permissions.as_ref().is_some_and(|p| !p.is_empty()) {
        return Err(ApiError::NotAvailable(
            "fine-grained (table-level) permissions are not available on this server: use --scope full-access or read-only".into(),
        ));
    }
    let a = match scope.as_deref() {
        None | Some("full-access") => "rw",
        Some("read-only") => "ro",
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "invalid scope {other:?}: use full-access or read-only"
            )))
        }
    };
    let org = access.org();
    let template = match (database, group) {
        (Some(name), None) => {
            let db = state
                .store
                .database_by_name(&org.id, &name)
                .await?
                .ok_or_else(|| crate::auth::policy::database_not_found(&name))?;
            json!({"a": a, "id": db.id})
        }
        (None, Some(name)) => {
            let group = state
                .store
                .group_by_name(&org.id, &name)
                .await?
                .ok_or_else(|| {
                    ApiError::NotFound(ErrorCode::GroupNotFound, "group not found".into())
                })?;
            json!({"a": a, "gid": group.id})
        }
        _ => return Err(ApiError::invalid("name exactly one of database or group")),
    };
    Ok(Json(JwksTemplate { template }))
}
