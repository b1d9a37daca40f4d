//! The v3 routes: `/v3/organizations/{orgId}/databases…` and `…/groups…`, which name the
//! organization, groups and databases by id (the turso CLI's `--v3-api` mode, and SDKs
//! that keep ids). The access extractor turns the ids into names
//! (`auth::policy::names_of_v3_ids`), so each route is authorized exactly as its v1 twin,
//! and the handlers are the v1 ones wherever the bodies agree. What v3 adds:
//!
//! - a database shows its allow rules (`allow_rules_config`), v3 having no configuration
//!   route;
//! - the list filters by `group_id` and `parent_db_id`, and `?deleted=true` lists the
//!   restorable deleted databases, a page at a time like the live list;
//! - `POST …/databases/{dbId}/restore` restores a deleted database by id.

use super::{databases, groups, Route};
use crate::auth::{Access, Action};
use crate::body::{parse_lenient, LenientJson, Query};
use crate::database_tokens::TokenQuery;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_types::databases::{
    CreateDatabaseTokenRequest, DatabaseToken, DeletedDatabase, Pagination, RestorableDatabase,
};
use atoll_types::groups::{GroupList, GroupResponse};
use atoll_types::v3::{
    AllowRulesConfig, CreateDatabaseRequestV3, DatabaseListV3, DatabaseResponseV3, DatabaseV3,
    ListedDatabase, RestoreDatabaseRequest,
};
use atoll_types::ErrorCode;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method};
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;
use std::collections::HashMap;

pub fn routes() -> Vec<Route> {
    let org = "/v3/organizations/{orgId}";
    let db = format!("{org}/databases/{{dbId}}");
    let group = format!("{org}/groups/{{groupId}}");
    vec![
        Route::new(
            Method::GET,
            format!("{org}/databases"),
            Action::ListDatabases,
            "List databases (group_id, parent_db_id; cursor pages); ?deleted=true: the restorable deleted ones",
            list,
        )
        .response::<DatabaseListV3>()
        .query(&["group_id", "parent_db_id", "limit", "cursor", "deleted"]),
        Route::new(
            Method::POST,
            format!("{org}/databases"),
            Action::CreateDatabase,
            "Create a database in a group given by id",
            create,
        )
        .request::<CreateDatabaseRequestV3>()
        .response::<DatabaseResponseV3>(),
        Route::new(
            Method::GET,
            db.clone(),
            Action::ReadDatabase,
            "Retrieve a database by id, with its allow rules",
            retrieve,
        )
        .response::<DatabaseResponseV3>(),
        Route::new(
            Method::DELETE,
            db.clone(),
            Action::DeleteDatabase,
            "Delete a database by id",
            delete,
        )
        .response::<DeletedDatabase>(),
        Route::new(
            Method::POST,
            format!("{db}/auth/tokens"),
            Action::MintDatabaseToken,
            "Mint a database token",
            create_token,
        )
        .request::<CreateDatabaseTokenRequest>()
        .response::<DatabaseToken>()
        .query(&["expiration", "authorization"]),
        Route::new(
            Method::POST,
            format!("{db}/restore"),
            Action::RestoreDatabase,
            "Restore a deleted database by id (paid plans, within 5 days)",
            restore,
        )
        .request::<RestoreDatabaseRequest>()
        .response::<DatabaseResponseV3>(),
        Route::new(
            Method::GET,
            format!("{org}/groups"),
            Action::ListGroups,
            "List groups",
            groups::list,
        )
        .response::<GroupList>(),
        Route::new(
            Method::GET,
            group.clone(),
            Action::ReadGroup,
            "Retrieve a group by id",
            groups::retrieve,
        )
        .response::<GroupResponse>(),
        Route::new(
            Method::POST,
            format!("{group}/auth/tokens"),
            Action::MintGroupToken,
            "Mint a group token",
            groups::create_token,
        )
        .request::<CreateDatabaseTokenRequest>()
        .response::<DatabaseToken>()
        .query(&["expiration", "authorization"]),
    ]
}

#[derive(Deserialize)]
struct ListQueryV3 {
    group_id: Option<String>,
    parent_db_id: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
    #[serde(default)]
    deleted: bool,
}

async fn list(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<ListQueryV3>,
) -> ApiResult<Json<DatabaseListV3>> {
    if query.deleted {
        return list_deleted(&state, &access, &query).await;
    }
    let group = match &query.group_id {
        Some(id) => Some(group_name(&state, &access, id).await?),
        None => None,
    };
    let Json(live) = databases::list(
        State(state),
        access,
        Query(databases::ListQuery {
            group,
            parent: query.parent_db_id,
            limit: query.limit,
            cursor: query.cursor,
        }),
    )
    .await?;
    Ok(Json(DatabaseListV3 {
        databases: live
            .databases
            .into_iter()
            .map(ListedDatabase::Live)
            .collect(),
        pagination: live.pagination,
    }))
}

/// The name of the organization's group `id`, or the 404 of an unknown group.
async fn group_name(state: &AppState, access: &Access, id: &str) -> ApiResult<String> {
    state
        .store
        .group_by_id(id)
        .await?
        .filter(|g| g.org_id == access.org().id)
        .map(|g| g.name)
        .ok_or_else(|| ApiError::NotFound(ErrorCode::GroupNotFound, "group not found".into()))
}

/// Restorable deleted databases, oldest name first, `limit` at a time: the cursor is the
/// last id of the page (ids, unlike names, are unique among deleted databases).
async fn list_deleted(
    state: &AppState,
    access: &Access,
    query: &ListQueryV3,
) -> ApiResult<Json<DatabaseListV3>> {
    access.require(Action::ListDeletedDatabases)?;
    let org = access.org();
    let groups = state.store.list_groups(&org.id).await?;
    let after = match &query.cursor {
        Some(cursor) => Some(
            URL_SAFE_NO_PAD
                .decode(cursor)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| ApiError::invalid("invalid cursor"))?,
        ),
        None => None,
    };
    let group_id = match &query.group_id {
        Some(id) => Some(
            groups
                .iter()
                .find(|g| &g.id == id)
                .map(|g| g.id.clone())
                .ok_or_else(|| {
                    ApiError::NotFound(ErrorCode::GroupNotFound, "group not found".into())
                })?,
        ),
        None => None,
    };
    let mut deleted: Vec<_> = state
        .store
        .deleted_databases(&org.id)
        .await?
        .into_iter()
        .filter(|db| group_id.as_ref().is_none_or(|g| &db.group_id == g))
        .filter(|db| access.pinned_group_id().is_none_or(|g| db.group_id == g))
        .collect();
    deleted.sort_by(|a, b| a.id.cmp(&b.id));
    let mut page: Vec<_> = deleted
        .into_iter()
        .filter(|db| after.as_ref().is_none_or(|after| &db.id > after))
        .collect();
    let mut next = None;
    if let Some(limit) = query.limit {
        if !(1..=10_000).contains(&limit) {
            return Err(ApiError::invalid("limit must be between 1 and 10000"));
        }
        if page.len() as i64 > limit {
            page.truncate(limit as usize);
            next = page
                .last()
                .map(|db| URL_SAFE_NO_PAD.encode(db.id.as_bytes()));
        }
    }
    let databases = page
        .into_iter()
        .filter_map(|db| {
            let deleted_at = db.deleted_at?;
            Some(ListedDatabase::Deleted(RestorableDatabase {
                group: groups
                    .iter()
                    .find(|g| g.id == db.group_id)
                    .map(|g| g.name.clone())
                    .unwrap_or_default(),
                name: db.name,
                db_id: db.id,
                deleted_at: wire::rfc3339(deleted_at),
                restorable_until: wire::rfc3339(deleted_at + crate::jobs::RESTORE_WINDOW_MS),
            }))
        })
        .collect();
    Ok(Json(DatabaseListV3 {
        databases,
        pagination: Pagination { next },
    }))
}

async fn create(
    State(state): State<AppState>,
    access: Access,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<DatabaseResponseV3>> {
    // The v1 body with the group by name: the same checks, quotas and seeding.
    let mut request: serde_json::Value = parse_lenient(&body)?;
    let group_id = request
        .as_object_mut()
        .and_then(|fields| fields.remove("group_id"));
    if let Some(id) = group_id.as_ref().and_then(|id| id.as_str()) {
        let name = group_name(&state, &access, id).await?;
        request["group"] = serde_json::Value::String(name);
    }
    let v1_body = serde_json::to_vec(&request)
        .map_err(|e| ApiError::Internal(format!("re-encoding a create body: {e}")))?;
    let org_id = access.org().id.clone();
    let created = databases::create(
        State(state.clone()),
        access,
        headers,
        axum::body::Bytes::from(v1_body),
    )
    .await?;
    let db = state
        .store
        .database_by_name(&org_id, &created.database.name)
        .await?
        .ok_or_else(|| ApiError::Internal("a created database is not in the store".into()))?;
    Ok(Json(DatabaseResponseV3 {
        database: database_v3(&state, db).await?,
    }))
}

/// The v1 wire form of `db` with its allow rules.
async fn database_v3(state: &AppState, db: atoll_meta::Database) -> ApiResult<DatabaseV3> {
    let group = state
        .store
        .group_by_id(&db.group_id)
        .await?
        .ok_or_else(|| ApiError::Internal("a database without its group".into()))?;
    let db = databases::with_upload_state(state, db).await?;
    Ok(DatabaseV3 {
        allow_rules_config: AllowRulesConfig {
            allowed_ips: db.allowed_ips.clone(),
            allowed_aws_vpc_ids: Vec::new(),
        },
        database: databases::database_wire(state, &db, &group.name, group.archived),
    })
}

async fn retrieve(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<DatabaseResponseV3>> {
    Ok(Json(DatabaseResponseV3 {
        database: database_v3(&state, access.database().clone()).await?,
    }))
}

async fn delete(state: State<AppState>, access: Access) -> ApiResult<Json<DeletedDatabase>> {
    databases::delete(state, access).await
}

async fn create_token(
    state: State<AppState>,
    access: Access,
    query: Query<TokenQuery>,
    body: LenientJson<CreateDatabaseTokenRequest>,
) -> ApiResult<Json<DatabaseToken>> {
    databases::create_token(state, access, query, body).await
}

async fn restore(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
    LenientJson(request): LenientJson<RestoreDatabaseRequest>,
) -> ApiResult<Json<DatabaseResponseV3>> {
    let id = params["dbId"].clone();
    if let Some(name) = request.name.as_deref().filter(|n| !n.is_empty()) {
        let original = state
            .store
            .database_by_id(&id)
            .await?
            .filter(|db| db.org_id == access.org().id)
            .map(|db| db.name);
        if original.as_deref().is_some_and(|original| original != name) {
            return Err(ApiError::NotAvailable(format!(
                "restoring a database under another name ({name}) is not available: restore \
                 it as {}, then copy it (`seed: {{\"type\": \"database\"}}`)",
                original.unwrap_or_default()
            )));
        }
    }
    let restored = databases::restore(
        State(state.clone()),
        access,
        Path(HashMap::from([("id".to_string(), id.clone())])),
    )
    .await?;
    let db = state
        .store
        .database_by_id(&restored.database.db_id)
        .await?
        .ok_or_else(|| ApiError::Internal("a restored database is not in the store".into()))?;
    Ok(Json(DatabaseResponseV3 {
        database: database_v3(&state, db).await?,
    }))
}
