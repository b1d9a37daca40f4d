//! Databases: `/v1/organizations/{org}/databases…`, and the same routes un-prefixed
//! (`/v1/databases…`) for the caller's personal organization, as the Turso CLI calls them.
//! Group tokens live with the groups (`groups.rs`).
//!
//! Here: the route table, listing, reading, deleting, transferring, tokens and restores;
//! `create.rs` (`POST …/databases`), `dumps.rs` (uploads that seed creates), `configure.rs`
//! (`…/configuration`, and pushing a configuration to the node), `instances.rs`.

mod configure;
pub(crate) mod create;
mod dumps;
pub(crate) mod encryption;
mod instances;

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::{LenientJson, Query};
use crate::database_tokens::{group_with_key, mint, rotate_database_key, Subject, TokenQuery};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_meta::{Database, DatabaseChanges, DatabaseFilter, DatabaseState, StoreError};
use atoll_types::audit::AuditCode;
use atoll_types::databases::{
    CreateDatabaseRequest, CreateDatabaseResponse, CreateDatabaseTokenRequest,
    DatabaseConfiguration, DatabaseList, DatabaseResponse, DatabaseToken, DeletedDatabase,
    DeletedDatabaseList, DumpUploaded, EncryptionKeyRotated, InstanceList, InstanceResponse,
    Pagination, RestorableDatabase, RotateEncryptionKeyRequest, TransferDatabaseRequest,
    UpdateDatabaseConfiguration,
};
use atoll_types::{Empty, ErrorCode, Role};
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;

use configure::{configuration, configure, push_config};
pub(super) use create::create;
use dumps::upload_dump;
use instances::{instance, instances};

pub fn routes() -> Vec<Route> {
    let mut routes = Vec::new();
    for prefix in ["/v1/organizations/{org}", "/v1"] {
        let dbs = format!("{prefix}/databases");
        let db = format!("{prefix}/databases/{{db}}");
        routes.extend([
            Route::new(
                Method::GET,
                dbs.clone(),
                Action::ListDatabases,
                "List databases (filters group, parent; cursor pagination)",
                list,
            )
            .response::<DatabaseList>()
            .query(&["group", "parent", "limit", "cursor"]),
            Route::new(
                Method::POST,
                dbs.clone(),
                Action::CreateDatabase,
                "Create a database; answers once it serves queries",
                create,
            )
            .request::<CreateDatabaseRequest>()
            .response::<CreateDatabaseResponse>(),
            Route::new(
                Method::POST,
                format!("{dbs}/dumps"),
                Action::UploadDump,
                "Upload an SQL dump (multipart `file`) to seed a database from",
                upload_dump,
            )
            // Dumps are far larger than JSON bodies: the handler holds them to
            // `max_dump_bytes` itself.
            .without_json_body_limit()
            .response::<DumpUploaded>(),
            Route::new(
                Method::GET,
                db.clone(),
                Action::ReadDatabase,
                "Retrieve a database",
                retrieve,
            )
            .response::<DatabaseResponse>(),
            Route::new(
                Method::DELETE,
                db.clone(),
                Action::DeleteDatabase,
                "Delete a database and its data",
                delete,
            )
            .response::<DeletedDatabase>(),
            Route::new(
                Method::GET,
                format!("{db}/configuration"),
                Action::ReadDatabase,
                "Database configuration",
                configuration,
            )
            .response::<DatabaseConfiguration>(),
            Route::new(
                Method::PATCH,
                format!("{db}/configuration"),
                Action::ConfigureDatabase,
                "Update database configuration",
                configure,
            )
            .request::<UpdateDatabaseConfiguration>()
            .response::<DatabaseConfiguration>(),
            Route::new(
                Method::GET,
                format!("{db}/instances"),
                Action::ReadDatabase,
                "List the database's instances",
                instances,
            )
            .response::<InstanceList>(),
            Route::new(
                Method::GET,
                format!("{db}/instances/{{instance}}"),
                Action::ReadDatabase,
                "Retrieve one instance",
                instance,
            )
            .response::<InstanceResponse>(),
            Route::new(
                Method::POST,
                format!("{db}/wakeup"),
                Action::ConfigureDatabase,
                "Wake a database (databases never sleep on Atoll)",
                wakeup,
            )
            .response::<Empty>(),
            Route::new(
                Method::POST,
                format!("{db}/update"),
                Action::ConfigureDatabase,
                "Update the database to the latest engine (it always runs it)",
                update,
            )
            .response::<Empty>(),
            Route::new(
                Method::POST,
                format!("{db}/transfer"),
                Action::TransferDatabase,
                "Move a database to another organization",
                transfer,
            )
            .request::<TransferDatabaseRequest>()
            .response::<DatabaseResponse>(),
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
                format!("{db}/auth/rotate"),
                Action::RotateDatabaseCredentials,
                "Rotate the database's signing key: every token it signed stops working",
                rotate,
            )
            .response::<Empty>(),
            Route::new(
                Method::POST,
                format!("{db}/encryption/rotate"),
                Action::RotateDatabaseEncryptionKey,
                "Re-encrypt a database under a new customer key (Atoll's; the current key is needed)",
                encryption::rotate,
            )
            .request::<RotateEncryptionKeyRequest>()
            .response::<EncryptionKeyRotated>(),
            Route::new(
                Method::GET,
                format!("{prefix}/deleted-databases"),
                Action::ListDeletedDatabases,
                "Deleted databases that can still be restored (paid plans)",
                list_deleted,
            )
            .response::<DeletedDatabaseList>(),
            Route::new(
                Method::POST,
                format!("{prefix}/deleted-databases/{{id}}/restore"),
                Action::RestoreDatabase,
                "Restore a deleted database by its id (paid plans, within 5 days)",
                restore,
            )
            .response::<DatabaseResponse>(),
        ]);
    }
    routes
}

pub(super) fn database_wire(
    state: &AppState,
    db: &Database,
    group_name: &str,
    archived: bool,
) -> atoll_types::databases::Database {
    atoll_types::databases::Database {
        name: db.name.clone(),
        db_id: db.id.clone(),
        hostname: state.data_plane.hostname(&db.node, &db.label),
        block_reads: db.block_reads,
        block_writes: db.block_writes,
        allow_attach: db.allow_attach,
        regions: vec![db.location.clone()],
        primary_region: db.location.clone(),
        kind: "logical".to_string(),
        version: state.config.group_version.clone(),
        group: group_name.to_string(),
        is_schema: false,
        schema: String::new(),
        sleeping: false,
        archived,
        delete_protection: db.delete_protection,
        parent: db
            .parent
            .as_ref()
            .map(|(id, name, at)| atoll_types::databases::DatabaseParent {
                id: id.clone(),
                name: name.clone(),
                branched_at: wire::rfc3339(*at),
            }),
        state: match db.state {
            DatabaseState::AwaitingUpload => "awaiting_upload",
            DatabaseState::Creating => "creating",
            DatabaseState::Active => "active",
        }
        .to_string(),
        http_url: state.data_plane.http_url(&db.node, &db.label),
        encryption_cipher: db.encryption.as_ref().map(|e| e.cipher.clone()),
    }
}

#[derive(Deserialize, Default)]
pub(super) struct ListQuery {
    pub(super) group: Option<String>,
    pub(super) parent: Option<String>,
    pub(super) limit: Option<i64>,
    pub(super) cursor: Option<String>,
}

pub(super) async fn list(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<ListQuery>,
) -> ApiResult<Json<DatabaseList>> {
    let org = access.org();
    let groups = state.store.list_groups(&org.id).await?;
    let mut filter = DatabaseFilter {
        parent_id: query.parent.clone(),
        ..Default::default()
    };
    if let Some(name) = &query.group {
        let group = groups.iter().find(|g| &g.name == name).ok_or_else(|| {
            ApiError::NotFound(ErrorCode::GroupNotFound, "group not found".into())
        })?;
        filter.group_id = Some(group.id.clone());
    }
    // A group-scoped token lists its own group only.
    if let Some(pinned) = access.pinned_group_id() {
        if filter.group_id.as_deref().is_some_and(|g| g != pinned) {
            return Ok(Json(DatabaseList {
                databases: vec![],
                pagination: Pagination { next: None },
            }));
        }
        filter.group_id = Some(pinned.to_string());
    }
    if let Some(limit) = query.limit {
        if !(1..=10_000).contains(&limit) {
            return Err(ApiError::invalid("limit must be between 1 and 10000"));
        }
        // One more than asked tells whether another page follows.
        filter.limit = Some(limit + 1);
    }
    if let Some(cursor) = &query.cursor {
        let decoded = URL_SAFE_NO_PAD
            .decode(cursor)
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        filter.after_name = Some(decoded.ok_or_else(|| ApiError::invalid("invalid cursor"))?);
    }
    let mut databases = Vec::new();
    for db in state.store.list_databases(&org.id, filter).await? {
        match with_upload_state(&state, db).await {
            Ok(db) => databases.push(db),
            // Deleted since the page was read (the upload-state update found no row): no
            // longer part of the answer, and no reason to fail the whole list.
            Err(ApiError::NotFound(..)) => {}
            Err(e) => return Err(e),
        }
    }

    let mut next = None;
    if let Some(limit) = query.limit {
        if databases.len() as i64 > limit {
            databases.truncate(limit as usize);
            next = databases
                .last()
                .map(|d| URL_SAFE_NO_PAD.encode(d.name.as_bytes()));
        }
    }
    let databases = databases
        .iter()
        .filter(|d| d.state != DatabaseState::Creating)
        .map(|d| {
            let group = groups.iter().find(|g| g.id == d.group_id);
            database_wire(
                &state,
                d,
                group.map_or("", |g| g.name.as_str()),
                group.is_some_and(|g| g.archived),
            )
        })
        .collect();
    Ok(Json(DatabaseList {
        databases,
        pagination: Pagination { next },
    }))
}

pub(super) async fn retrieve(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<DatabaseResponse>> {
    let group = access.group();
    let db = with_upload_state(&state, access.database().clone()).await?;
    let mut database = database_wire(&state, &db, &group.name, group.archived);
    if db.state == DatabaseState::Active && db.deleted_at.is_none() && !group.archived {
        database.state = served_state(&state, &db).await.to_string();
    }
    Ok(Json(DatabaseResponse { database }))
}

/// What the database's node says of it, so the API never calls `active` a database that
/// cannot be served: `recovering` while its node rebuilds it from object storage (a lost
/// or damaged file), `unavailable` while its node does not answer (asked with a short
/// timeout: a GET never hangs on a dead node).
async fn served_state(state: &AppState, db: &Database) -> &'static str {
    let asked = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        state.data_plane.stats(&db.node, &db.id),
    )
    .await;
    match asked {
        Ok(Ok(stats)) if stats.recovering => "recovering",
        Ok(Ok(_)) => "active",
        Ok(Err(e)) => {
            tracing::warn!(database = %db.id, node = %db.node, error = %e, "database reported unavailable: its node does not serve it");
            "unavailable"
        }
        Err(_) => "unavailable",
    }
}

/// The record, with `awaiting_upload` brought up to date: uploads land on the node, which
/// activates the database there; the store learns it here.
pub(super) async fn with_upload_state(state: &AppState, db: Database) -> ApiResult<Database> {
    if db.state != DatabaseState::AwaitingUpload {
        return Ok(db);
    }
    match state.data_plane.stats(&db.node, &db.id).await {
        Ok(stats) if stats.state == Some(atoll_types::node::DatabaseState::Active) => Ok(state
            .store
            .update_database(
                &db.id,
                DatabaseChanges {
                    state: Some(DatabaseState::Active),
                    ..Default::default()
                },
            )
            .await?),
        Ok(_) => Ok(db),
        Err(e) => {
            tracing::warn!(error = %e, database = %db.id, "could not ask the node whether an upload landed");
            Ok(db)
        }
    }
}

/// Parses `size_limit`: bytes, or with a unit.
fn size_limit(text: &str) -> ApiResult<Option<i64>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let bytes = atoll_types::sizes::parse_size(text)
        .map_err(|e| ApiError::Invalid(ErrorCode::InvalidSize, e))?;
    if bytes < 4096 {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidSize,
            "size_limit must be at least 4096 bytes (one page)".into(),
        ));
    }
    i64::try_from(bytes)
        .map(Some)
        .map_err(|_| ApiError::Invalid(ErrorCode::InvalidSize, "size_limit is too large".into()))
}

use crate::jobs::RESTORE_WINDOW_MS;

/// Paid plans keep deleted databases restorable; the free plan deletes at once.
fn restore_enabled(org: &atoll_meta::Organization) -> bool {
    !crate::config::ControlConfig::is_free_plan(&org.plan_id)
}

pub(super) async fn delete(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<DeletedDatabase>> {
    let db = access.database();
    if db.delete_protection {
        return Err(ApiError::Conflict(
            ErrorCode::DeleteProtected,
            format!(
                "database {} has delete protection on: turn it off in its configuration first",
                db.name
            ),
        ));
    }
    if restore_enabled(access.org()) && db.state != DatabaseState::AwaitingUpload {
        // Kept, refusing queries, until it is restored or its window ends.
        let deleted = state.store.soft_delete_database(&db.id).await?;
        push_config(&state, &deleted, access.group(), access.org()).await;
        audit::record(
            &state,
            &access,
            &db.org_id,
            AuditCode::DbDelete,
            format!(
                "deleted database {} (restorable for 5 days, id {})",
                db.name, db.id
            ),
            json!({"database": db.name, "group": access.group().name, "id": db.id, "restorable": true}),
        )
        .await;
        return Ok(Json(DeletedDatabase {
            database: db.name.clone(),
        }));
    }

    state.store.delete_database(&db.id).await?;
    state
        .data_plane
        .drop_forgotten(&state.store, std::slice::from_ref(db))
        .await;
    audit::record(
        &state,
        &access,
        &db.org_id,
        AuditCode::DbDelete,
        format!("deleted database {}", db.name),
        json!({"database": db.name, "group": access.group().name, "id": db.id, "restorable": false}),
    )
    .await;
    Ok(Json(DeletedDatabase {
        database: db.name.clone(),
    }))
}

/// Atoll ships one engine build, so every database already runs the latest: nothing to do.
async fn update(_access: Access) -> Json<Empty> {
    Json(Empty {})
}

/// Databases on Atoll never sleep; archived ones come back with their group.
async fn wakeup(access: Access) -> ApiResult<Json<Empty>> {
    if access.group().archived {
        return Err(ApiError::Conflict(
            ErrorCode::InvalidRequest,
            format!(
                "database {} is archived with group {}: unarchive the group",
                access.database().name,
                access.group().name
            ),
        ));
    }
    Ok(Json(Empty {}))
}

async fn transfer(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<TransferDatabaseRequest>,
) -> ApiResult<Json<DatabaseResponse>> {
    let db = access.database();
    // A transfer vacuums the database to start its history anew, which needs its rows.
    create::not_for_encrypted(db, "a transfer to another organization")?;
    let slug = body
        .org
        .or(body.organization)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::invalid("`org` (the receiving organization) is required"))?;
    let user = &access.principal.user;
    let not_found = || {
        ApiError::NotFound(
            ErrorCode::OrganizationNotFound,
            format!("organization {slug} not found"),
        )
    };
    let (target, role) = state
        .store
        .org_with_role(&slug, &user.id)
        .await?
        .ok_or_else(not_found)?;
    if role.ok_or_else(not_found)? < Role::Member {
        return Err(ApiError::Forbidden(
            "transferring a database needs the member role or higher in the receiving organization"
                .into(),
        ));
    }
    if target.id == db.org_id {
        return Err(ApiError::invalid(
            "the database already belongs to this organization",
        ));
    }
    crate::quotas::check_database(&state, &target).await?;
    // It lands in the receiving organization's group of the same name.
    let group_name = &access.group().name;
    let group = state
        .store
        .group_by_name(&target.id, group_name)
        .await?
        .ok_or_else(|| {
            ApiError::Invalid(
                ErrorCode::GroupNotFound,
                format!(
                    "organization {slug} has no group named {group_name} to receive the database"
                ),
            )
        })?;
    if group.primary_location != access.group().primary_location {
        return Err(ApiError::invalid(format!(
            "group {group_name} of {slug} is in another location"
        )));
    }
    let exists = || {
        ApiError::Conflict(
            ErrorCode::DatabaseAlreadyExists,
            format!("database with name {} already exists in {slug}", db.name),
        )
    };
    // Checked here as well as by the store, so the usual refusal changes nothing.
    if state
        .store
        .database_by_name(&target.id, &db.name)
        .await?
        .is_some()
    {
        return Err(exists());
    }
    let group = group_with_key(&state, group).await?;
    // The new owner decides who holds credentials: the database gets a new key before it
    // moves, so no token minted by the old owner survives, whatever happens next. (The
    // group tokens of its old group already do not cover it in its new group.)
    let rotated = match rotate_database_key(&state, &db.id).await {
        Ok(rotated) => rotated,
        Err(e) => {
            // The new key may have committed though its answer was lost: its node learns
            // it from the next pass.
            crate::reconciler::request_pass();
            return Err(e);
        }
    };
    let moved = match state
        .store
        .move_database(
            &db.id,
            &target.id,
            &group.id,
            &format!("{}-{}", db.name, target.slug),
        )
        .await
    {
        Ok(moved) => moved,
        // The store failed around the commit (PostgreSQL restarting, a connection ended):
        // the transfer may be done all the same. The store's answer, once it gives one,
        // decides: done (answered as such) or not (it stays, with its new key).
        Err(e @ StoreError::Unreachable(_)) => {
            match super::read_back(&db.id, || state.store.database_by_id(&db.id))
                .await
                .flatten()
            {
                Some(now) if now.org_id == target.id => {
                    tracing::warn!(database = %db.id, error = %e, "a transfer whose commit failed was done: answered as such");
                    now
                }
                Some(now) => {
                    tracing::warn!(database = %db.id, error = %e, "a transfer whose commit failed was not done");
                    push_config(&state, &now, access.group(), access.org()).await;
                    return Err(e.into());
                }
                None => {
                    // Whichever it is, the reconciler brings its node to it.
                    crate::reconciler::request_pass();
                    return Err(e.into());
                }
            }
        }
        Err(e) => {
            // It stays, with its new key: its node must learn that key all the same.
            push_config(&state, &rotated, access.group(), access.org()).await;
            return Err(match e {
                StoreError::AlreadyExists(_) => exists(),
                other => other.into(),
            });
        }
    };
    push_config(&state, &moved, &group, &target).await;
    let source = access.org();
    audit::record(
        &state,
        &access,
        &source.id,
        AuditCode::DbTransfer,
        format!(
            "transferred database {} to {}: its tokens stopped working",
            db.name, target.slug
        ),
        json!({"database": db.name, "group": group_name, "to": target.slug}),
    )
    .await;
    audit::record(
        &state,
        &access,
        &target.id,
        AuditCode::DbTransfer,
        format!("received database {} from {}", db.name, source.slug),
        json!({"database": db.name, "group": group.name, "from": source.slug}),
    )
    .await;
    Ok(Json(DatabaseResponse {
        database: database_wire(&state, &moved, &group.name, group.archived),
    }))
}

pub(super) async fn create_token(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<TokenQuery>,
    LenientJson(body): LenientJson<CreateDatabaseTokenRequest>,
) -> ApiResult<Json<DatabaseToken>> {
    let db = access.database();
    let jwt = mint(
        &state,
        &access,
        Subject::Database(&db.id),
        (&db.signing_key, &db.key_id),
        &query,
        &body,
    )
    .await?;
    let authorization = query.authorization.as_deref().unwrap_or("full-access");
    audit::record(
        &state,
        &access,
        &db.org_id,
        AuditCode::DbTokenCreate,
        format!(
            "created a {authorization} database token for database {}",
            db.name
        ),
        json!({"database": db.name, "group": access.group().name, "authorization": authorization}),
    )
    .await;
    Ok(Json(DatabaseToken { jwt }))
}

async fn rotate(State(state): State<AppState>, access: Access) -> ApiResult<Json<Empty>> {
    let db = access.database();
    let updated = rotate_database_key(&state, &db.id).await?;
    push_config(&state, &updated, access.group(), access.org()).await;
    audit::record(
        &state,
        &access,
        &db.org_id,
        AuditCode::DbRotateCreds,
        format!(
            "rotated the signing key of database {}: its tokens stopped working",
            db.name
        ),
        json!({"database": db.name, "group": access.group().name}),
    )
    .await;
    Ok(Json(Empty {}))
}

async fn list_deleted(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<DeletedDatabaseList>> {
    let org = access.org();
    let groups = state.store.list_groups(&org.id).await?;
    let databases = state
        .store
        .deleted_databases(&org.id)
        .await?
        .into_iter()
        .filter_map(|db| {
            let deleted_at = db.deleted_at?;
            Some(RestorableDatabase {
                name: db.name,
                db_id: db.id,
                group: groups
                    .iter()
                    .find(|g| g.id == db.group_id)
                    .map(|g| g.name.clone())
                    .unwrap_or_default(),
                deleted_at: wire::rfc3339(deleted_at),
                restorable_until: wire::rfc3339(deleted_at + RESTORE_WINDOW_MS),
            })
        })
        .collect();
    Ok(Json(DeletedDatabaseList { databases }))
}

pub(super) async fn restore(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<DatabaseResponse>> {
    let org = access.org();
    let id = &params["id"];
    let not_found = || {
        ApiError::NotFound(
            ErrorCode::DatabaseNotFound,
            format!("no deleted database with id {id}"),
        )
    };
    let db = state
        .store
        .database_by_id(id)
        .await?
        .filter(|d| d.org_id == org.id && d.deleted_at.is_some())
        .ok_or_else(not_found)?;
    let group = state
        .store
        .group_by_id(&db.group_id)
        .await?
        .ok_or_else(not_found)?;
    access.check_group(&group)?;
    crate::quotas::check_database(&state, org).await?;
    if db
        .deleted_at
        .is_some_and(|at| at + RESTORE_WINDOW_MS < atoll_meta::now_millis())
    {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidRequest,
            format!(
                "database {} was deleted more than 5 days ago and cannot be restored",
                db.name
            ),
        ));
    }
    // Its node may be gone for good: then it comes back on another node, from object
    // storage.
    let db = state
        .data_plane
        .relocate_from_lost_node(&state.store, db)
        .await?;
    let restored = state
        .store
        .restore_database(&db.id)
        .await
        .map_err(|e| match e {
            StoreError::AlreadyExists(_) => ApiError::Conflict(
                ErrorCode::DatabaseAlreadyExists,
                format!(
                    "database with name {} already exists: delete or rename it before restoring",
                    db.name
                ),
            ),
            other => other.into(),
        })?;
    push_config(&state, &restored, &group, org).await;
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::DbRestore,
        format!("restored database {}", restored.name),
        json!({"database": restored.name, "group": group.name, "id": restored.id}),
    )
    .await;
    Ok(Json(DatabaseResponse {
        database: database_wire(&state, &restored, &group.name, group.archived),
    }))
}
