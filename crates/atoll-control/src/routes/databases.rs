//! Databases: `/v1/organizations/{org}/databases…`, and the same routes un-prefixed
//! (`/v1/databases…`) for the caller's personal organization, as the Turso CLI calls them.
//! Group tokens live with the groups (`groups.rs`).

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::{parse_lenient, LenientJson, Query};
use crate::database_tokens::{
    group_with_key, mint, new_signing_key, rotate_database_key, Subject, TokenQuery,
};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_http::body::BodyReadTimeout;
use atoll_meta::{
    Database, DatabaseChanges, DatabaseFilter, DatabaseInsert, DatabaseState, StoreError,
};
use atoll_types::audit::AuditCode;
use atoll_types::databases::{
    CreateDatabaseRequest, CreateDatabaseResponse, CreateDatabaseTokenRequest, CreatedDatabase,
    DatabaseConfiguration, DatabaseList, DatabaseResponse, DatabaseToken, DeletedDatabase,
    DeletedDatabaseList, DumpUploaded, InstanceList, InstanceResponse, Pagination,
    RestorableDatabase, TransferDatabaseRequest, UpdateDatabaseConfiguration,
};
use atoll_types::node::{CreateDatabase, Seed};
use atoll_types::{Empty, ErrorCode, Role};
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, Method};
use axum::{Extension, Json};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

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

pub(super) async fn create(
    State(state): State<AppState>,
    access: Access,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<CreateDatabaseResponse>> {
    let request: CreateDatabaseRequest = parse_lenient(&body)?;
    let org = access.org().clone();
    let idempotency_key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let fingerprint = {
        let value: serde_json::Value = parse_lenient(&body)?;
        let digest = Sha256::digest(value.to_string().as_bytes());
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    if let Some(key) = &idempotency_key {
        if let Some((stored, response)) = state.store.idempotent_response(&org.id, key).await? {
            if stored != fingerprint {
                return Err(ApiError::Conflict(
                    ErrorCode::IdempotencyKeyReused,
                    "this Idempotency-Key was used for a different request".into(),
                ));
            }
            let response =
                serde_json::from_str(&response).map_err(|e| ApiError::Internal(e.to_string()))?;
            return Ok(Json(response));
        }
    }

    atoll_types::names::validate_resource_name("database", &request.name)
        .map_err(|e| ApiError::Invalid(ErrorCode::InvalidName, e))?;
    if request
        .remote_encryption
        .as_ref()
        .is_some_and(asks_for_encryption)
    {
        return Err(encryption_not_available());
    }
    let limit = size_limit(request.size_limit.as_deref().unwrap_or(""))?;
    let group_name = request
        .group
        .clone()
        .filter(|g| !g.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let group = state
        .store
        .group_by_name(&org.id, &group_name)
        .await?
        .ok_or_else(|| ApiError::Invalid(ErrorCode::GroupNotFound, "group not found".into()))?;
    access.check_group(&group)?;
    if let Some(location) = request.location.as_deref().filter(|l| !l.is_empty()) {
        if !group.locations.iter().any(|l| l == location) {
            return Err(ApiError::Invalid(
                ErrorCode::InvalidLocation,
                format!(
                    "invalid location: {location} (group {} is in {})",
                    group.name,
                    group.locations.join(", ")
                ),
            ));
        }
    }
    let group = group_with_key(&state, group).await?;
    // A create that cannot reach its node (refused, timed out) is undone there and tried
    // on another node of the location that answers: placement passes the first over now.
    let mut tried: Vec<String> = Vec::new();
    let mut unreachable = None;
    let (record, dump_id) = loop {
        let node = state
            .data_plane
            .place(&state.store, &group.primary_location)
            .await?;
        if tried.contains(&node) {
            return Err(unreachable.unwrap_or_else(|| {
                ApiError::NodeUnavailable(format!("data node {node} did not answer"))
            }));
        }
        match create_on(&state, &access, &request, &group, limit, &node).await {
            Ok(created) => break created,
            Err(e @ ApiError::NodeUnavailable(_)) => {
                tracing::warn!(node = %node, error = %e, "a create could not reach its node: trying another node of the location");
                tried.push(node);
                unreachable = Some(e);
            }
            Err(e) => return Err(e),
        }
    };
    if let Some(id) = dump_id {
        // A dump seeds one database: forgetting it now frees the organization's allowance
        // (a failed create keeps it, to be fixed and retried until it expires).
        if let Err(e) = state.store.delete_dump(&org.id, &id).await {
            tracing::warn!(error = %e, dump = %id, "could not delete a used dump; it expires on its own");
        }
    }
    let mut data = json!({"database": record.name, "group": group.name});
    if let Some(seed) = &request.seed {
        data["seed"] = json!(seed.kind);
    }
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::DbCreate,
        format!("created database {} in group {}", record.name, group.name),
        data,
    )
    .await;
    let response = CreateDatabaseResponse {
        database: CreatedDatabase {
            db_id: record.id.clone(),
            hostname: state.data_plane.hostname(&record.node, &record.label),
            name: record.name,
        },
    };
    if let Some(key) = idempotency_key {
        let text =
            serde_json::to_string(&response).map_err(|e| ApiError::Internal(e.to_string()))?;
        state
            .store
            .remember_response(&org.id, &key, &fingerprint, &text)
            .await?;
        if let Some((_, stored)) = state.store.idempotent_response(&org.id, &key).await? {
            return Ok(Json(
                serde_json::from_str(&stored).map_err(|e| ApiError::Internal(e.to_string()))?,
            ));
        }
    }
    Ok(Json(response))
}

/// Creates database `request` on `node`: recorded as `creating`, created on the node,
/// then recorded in its final state; answers the record and the dump it used. Whatever
/// fails after the record is written is undone ([`undo_create`]), so a failed create
/// leaves nothing: no record, no files.
async fn create_on(
    state: &AppState,
    access: &Access,
    request: &CreateDatabaseRequest,
    group: &atoll_meta::Group,
    limit: Option<i64>,
    node: &str,
) -> ApiResult<(Database, Option<String>)> {
    let org = access.org().clone();
    let PlannedSeed {
        seed,
        parent,
        dump_id,
    } = seed_for(state, access, request, node).await?;
    let (signing_key, key_id) = new_signing_key();
    let final_state = if seed == Seed::Upload {
        DatabaseState::AwaitingUpload
    } else {
        DatabaseState::Active
    };
    let label = format!("{}-{}", request.name, org.slug);
    let record = Database {
        id: uuid::Uuid::new_v4().to_string(),
        org_id: org.id.clone(),
        group_id: group.id.clone(),
        name: request.name.clone(),
        label,
        state: DatabaseState::Creating,
        location: group.primary_location.clone(),
        node: node.to_string(),
        size_limit: limit,
        block_reads: false,
        block_writes: false,
        delete_protection: false,
        allow_attach: false,
        allowed_ips: vec![],
        parent,
        signing_key,
        key_id,
        created_at: 0,
        deleted_at: None,
        config_version: 1,
        durability: None,
        history_starts_at: None,
    };

    // Recorded as `creating` first: a crash before the node has it leaves a record the
    // next start removes, never a database the store does not know. A taken name and the
    // plan's limit are checked by the insert itself, so two concurrent creates cannot
    // both pass either.
    let plan_limit = crate::quotas::database_limit(state, &org);
    let inserted = match state
        .store
        .insert_database_within(record.clone(), plan_limit)
        .await
    {
        Ok(inserted) => inserted,
        Err(StoreError::AlreadyExists(_)) => {
            return Err(ApiError::Conflict(
                ErrorCode::DatabaseAlreadyExists,
                format!("database with name {} already exists", request.name),
            ))
        }
        // The connection ended around the commit: the record may be there all the same.
        Err(e @ StoreError::Unreachable(_)) => {
            undo_create(state, &record).await;
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    let record = match inserted {
        DatabaseInsert::Inserted(record) => *record,
        DatabaseInsert::LimitReached => {
            return Err(crate::quotas::database_limit_reached(
                &org,
                plan_limit.unwrap_or_default(),
            ))
        }
    };
    let mut config =
        match crate::data_plane::database_config(&state.store, &record, group, &org).await {
            Ok(config) => config,
            Err(e) => {
                undo_create(state, &record).await;
                return Err(e);
            }
        };
    config.state = match final_state {
        DatabaseState::AwaitingUpload => atoll_types::node::DatabaseState::AwaitingUpload,
        _ => config.state,
    };
    if let Err(e) = state
        .data_plane
        .create_database(node, CreateDatabase { config, seed })
        .await
    {
        if let ApiError::NodeUnavailable(_) = e {
            state.data_plane.note_unanswered(node);
        }
        // Nothing half-created stays behind: a node that timed out may have created it.
        undo_create(state, &record).await;
        return Err(e);
    }
    match state
        .store
        .update_database(
            &record.id,
            DatabaseChanges {
                state: Some(final_state),
                ..Default::default()
            },
        )
        .await
    {
        Ok(record) => Ok((record, dump_id)),
        // The store failed (PostgreSQL restarting, a connection ended): the database is on
        // its node but not recorded as created, unless the commit landed and only its
        // answer was lost, which the undo finds out.
        Err(e) => match undo_create(state, &record).await {
            Some(finished) => Ok((finished, dump_id)),
            None => Err(e.into()),
        },
    }
}

/// How long a request waits for the store to take back a failed create before answering;
/// the undo goes on in its task meanwhile.
const UNDO_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Undoes a create whose `creating` record the store holds: forgets the record (with a
/// tombstone, so the reconciler deletes whatever the node keeps), then deletes its copy on
/// the node. The store may be failing right now (that may be why the create failed), so
/// the undo retries in a task of its own until the store answers, for up to
/// `--creating-grace-secs` (after which the reconciler removes the record anyway); the
/// request waits [`UNDO_WAIT`] at most for the store's part. A record that is no longer
/// `creating` was finished after all (a commit whose answer was lost): answered, kept.
async fn undo_create(state: &AppState, record: &Database) -> Option<Database> {
    let (decided, decision) = tokio::sync::oneshot::channel();
    let (store, data_plane) = (
        state.store.clone(),
        std::sync::Arc::clone(&state.data_plane),
    );
    let patience = state.config.creating_grace;
    let id = record.id.clone();
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let mut delay = std::time::Duration::from_millis(100);
        let mut decided = Some(decided);
        let forgotten = loop {
            let outcome = match store.database_by_id(&id).await {
                Ok(Some(db)) if db.state != DatabaseState::Creating => Ok(Some(db)),
                Ok(Some(_)) => match store.delete_database(&id).await {
                    Ok(db) => break Some(db),
                    Err(StoreError::NotFound(_)) => Ok(None),
                    Err(e) => Err(e),
                },
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(finished) => {
                    if let Some(decided) = decided.take() {
                        let _ = decided.send(finished);
                    }
                    break None;
                }
                Err(e) if started.elapsed() < patience => {
                    tracing::warn!(database = %id, error = %e, "cannot undo a failed create yet: retrying");
                }
                Err(e) => {
                    tracing::error!(database = %id, error = %e, "could not undo a failed create: the reconciler removes it past --creating-grace-secs");
                    break None;
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(2));
        };
        if let Some(db) = forgotten {
            if let Some(decided) = decided.take() {
                let _ = decided.send(None);
            }
            tracing::warn!(database = %db.id, node = %db.node, "undid a failed create");
            data_plane.drop_forgotten(&store, &[db]).await;
        }
    });
    match tokio::time::timeout(UNDO_WAIT, decision).await {
        Ok(Ok(finished)) => finished,
        _ => None,
    }
}

/// Whether a create's `remote_encryption` asks for anything: `null`, `{}` and empty
/// fields ask for nothing; any key or cipher does.
fn asks_for_encryption(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Null => false,
        serde_json::Value::String(text) => !text.is_empty(),
        serde_json::Value::Object(fields) => fields.values().any(asks_for_encryption),
        _ => true,
    }
}

/// Refused, never ignored: a user who asked for encryption must not believe they have it.
pub(crate) fn encryption_not_available() -> ApiError {
    ApiError::Invalid(
        ErrorCode::EncryptionNotAvailable,
        "encryption at rest with a client-provided key (remote_encryption) is not available on this server: \
         its libSQL is built without cipher support, so the database would be stored unencrypted. \
         Create it without remote_encryption, or encrypt the disk that holds the data directory"
            .into(),
    )
}

/// What a create request seeds its database with.
struct PlannedSeed {
    seed: Seed,
    /// The database copied, for a `database` seed: `(id, name, branched at)`.
    parent: Option<(String, String, i64)>,
    /// The dump used, for a `dump` seed: deleted once the database exists.
    dump_id: Option<String>,
}

impl PlannedSeed {
    fn just(seed: Seed) -> PlannedSeed {
        PlannedSeed {
            seed,
            parent: None,
            dump_id: None,
        }
    }
}

/// The node seed, the parent record and the dump used for a create request. A copy is
/// of a database the caller could read itself: one of the organization (the only place
/// names are looked up), and of the pinned group for a group-scoped token.
async fn seed_for(
    state: &AppState,
    access: &Access,
    request: &CreateDatabaseRequest,
    node: &str,
) -> ApiResult<PlannedSeed> {
    let org_id = &access.org().id;
    let Some(seed) = &request.seed else {
        return Ok(PlannedSeed::just(Seed::Empty));
    };
    match seed.kind.as_str() {
        "database_upload" => Ok(PlannedSeed::just(Seed::Upload)),
        "database" => {
            let timestamp_ms = match seed.timestamp.as_deref().filter(|t| !t.is_empty()) {
                Some(text) => Some(super::backups::parse_timestamp(text).map_err(|_| {
                    ApiError::Invalid(
                        ErrorCode::InvalidSeed,
                        format!("seed timestamp {text:?} is not an RFC 3339 instant like 2026-11-24T12:00:00Z"),
                    )
                })?),
                None => None,
            };
            let source_name = seed
                .name
                .clone()
                .or_else(|| seed.value.clone())
                .unwrap_or_default();
            if source_name.is_empty() {
                return Err(ApiError::Invalid(
                    ErrorCode::InvalidSeed,
                    "seed `database` needs the source database's `name`".into(),
                ));
            }
            let source = state
                .store
                .database_by_name(org_id, &source_name)
                .await?
                .ok_or_else(|| {
                    ApiError::Invalid(
                        ErrorCode::InvalidSeed,
                        format!(
                            "could not find database with name {source_name}: record not found"
                        ),
                    )
                })?;
            // Before anything else about the source is told: a token that may not read it
            // learns only what `GET` of it would answer (403, another group).
            let source_group = state
                .store
                .group_by_id(&source.group_id)
                .await?
                .ok_or_else(|| ApiError::Internal("database without a group".into()))?;
            access
                .require_in_group(Action::ReadDatabase, &source_group)
                .map_err(|e| match e {
                    ApiError::Forbidden(why) => ApiError::Forbidden(format!(
                        "seed: cannot copy database {source_name}: {why}"
                    )),
                    other => other,
                })?;
            if source.state != DatabaseState::Active {
                return Err(ApiError::Invalid(
                    ErrorCode::InvalidSeed,
                    format!("database {source_name} has no data to copy yet"),
                ));
            }
            if let Some(at) = timestamp_ms {
                super::backups::check_history(&source, at, ErrorCode::InvalidSeed)?;
                // From object storage: on any node, whatever holds the source now.
                return Ok(PlannedSeed {
                    seed: Seed::PointInTime {
                        source_id: source.id.clone(),
                        timestamp_ms: Some(at),
                        history_starts_at_ms: source.history_starts_at,
                    },
                    parent: Some((source.id, source.name, at)),
                    dump_id: None,
                });
            }
            if source.node != node {
                return Err(ApiError::Invalid(
                    ErrorCode::InvalidSeed,
                    format!("database {source_name} lives in another location: create the copy in a group in {}", source.location),
                ));
            }
            Ok(PlannedSeed {
                seed: Seed::Copy {
                    source_id: source.id.clone(),
                },
                parent: Some((source.id, source.name, atoll_meta::now_millis())),
                dump_id: None,
            })
        }
        "dump" => {
            let url = seed.url.clone().unwrap_or_default();
            let id = url
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            let hours = state.config.dump_lifetime.as_secs() / 3600;
            let dump = state.store.dump(org_id, &id).await?.ok_or_else(|| {
                ApiError::Invalid(
                    ErrorCode::DumpNotFound,
                    format!("dump {url:?} not found: dumps are kept {hours} h after upload and until a database is created from them; upload it (again) with POST /v1/organizations/{{org}}/databases/dumps"),
                )
            })?;
            if dump_expired(state, dump.created_at, atoll_meta::now_millis()) {
                return Err(ApiError::Invalid(
                    ErrorCode::DumpExpired,
                    format!("dump {url:?} expired: dumps are kept {hours} h after upload; upload it again"),
                ));
            }
            Ok(PlannedSeed {
                seed: Seed::Dump { sql: dump.sql },
                parent: None,
                dump_id: Some(id),
            })
        }
        other => Err(ApiError::Invalid(
            ErrorCode::InvalidSeed,
            format!("unknown seed type {other:?}: use database_upload, database or dump"),
        )),
    }
}

async fn upload_dump(
    State(state): State<AppState>,
    access: Access,
    Extension(BodyReadTimeout(idle)): Extension<BodyReadTimeout>,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<DumpUploaded>> {
    // Rejected here rather than by axum, whose answer is text/plain.
    let mut multipart = multipart
        .map_err(|e| ApiError::invalid(format!("expected a multipart/form-data body: {e}")))?;
    let org = access.org();
    let now = atoll_meta::now_millis();
    let pending = state
        .store
        .pending_dumps(&org.id, now - dump_lifetime_ms(&state))
        .await?;
    let limits = (
        state.config.max_dumps_per_org,
        state.config.max_dump_bytes_per_org,
    );
    if pending.count >= limits.0 {
        return Err(too_many_dumps(
            &state,
            &pending,
            now,
            format!(
                "organization {} already holds {} dumps",
                org.slug, pending.count
            ),
        ));
    }
    let mut sql = None;
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| ApiError::invalid(format!("invalid multipart body: {e}")))?
    {
        if field.name() == Some("file") {
            let mut bytes = Vec::new();
            // Read piece by piece: a dump over the limit is refused as soon as it is, and a
            // client that stops sending is let go after the body timeout.
            loop {
                let chunk = tokio::time::timeout(idle, field.chunk())
                    .await
                    .map_err(|_| crate::body::body_timed_out(idle))?
                    .map_err(|e| ApiError::invalid(format!("cannot read the dump: {e}")))?;
                let Some(chunk) = chunk else {
                    break;
                };
                let size = bytes.len() + chunk.len();
                let allowed = state
                    .config
                    .max_dump_bytes
                    .min(usize::try_from(limits.1).unwrap_or(usize::MAX));
                if size > allowed {
                    return Err(ApiError::PayloadTooLarge(format!(
                        "the dump is larger than {allowed} bytes"
                    )));
                }
                if pending.bytes.saturating_add(size as u64) > limits.1 {
                    return Err(too_many_dumps(
                        &state,
                        &pending,
                        now,
                        format!(
                            "organization {}'s dumps would take more than {} bytes",
                            org.slug, limits.1
                        ),
                    ));
                }
                bytes.extend_from_slice(&chunk);
            }
            let text = String::from_utf8(bytes)
                .map_err(|_| ApiError::invalid("the dump is not UTF-8 text"))?;
            sql = Some(text);
        }
    }
    let sql = sql
        .ok_or_else(|| ApiError::invalid("multipart field `file` with the SQL dump is missing"))?;
    if sql.trim().is_empty() {
        return Err(ApiError::invalid("the dump is empty"));
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    state.store.insert_dump(&id, &org.id, sql).await?;
    audit::record(
        &state,
        &access,
        &org.id,
        AuditCode::DbDumpUpload,
        "uploaded an SQL dump to seed databases from",
        json!({"dump": id}),
    )
    .await;
    Ok(Json(DumpUploaded {
        dump_url: format!(
            "{}/v1/organizations/{}/databases/dumps/{id}",
            state.config.public_url, org.slug
        ),
    }))
}

/// Milliseconds an uploaded dump stays usable.
fn dump_lifetime_ms(state: &AppState) -> i64 {
    i64::try_from(state.config.dump_lifetime.as_millis()).unwrap_or(i64::MAX)
}

fn dump_expired(state: &AppState, created_at: i64, now: i64) -> bool {
    created_at.saturating_add(dump_lifetime_ms(state)) <= now
}

/// An organization at its dump allowance waits until its oldest dump expires (or uses
/// its dumps: a create deletes the dump it used).
fn too_many_dumps(
    state: &AppState,
    pending: &atoll_meta::PendingDumps,
    now: i64,
    why: String,
) -> ApiError {
    let frees_at = pending
        .oldest_created_at
        .map_or(now, |at| at.saturating_add(dump_lifetime_ms(state)));
    let wait = u64::try_from((frees_at - now).max(0) / 1000 + 1).unwrap_or(1);
    ApiError::TooManyRequests(
        format!(
            "{why}: an organization may hold {} dumps and {} bytes of dumps at once; \
             create databases from them (which deletes them) or wait until the oldest expires",
            state.config.max_dumps_per_org, state.config.max_dump_bytes_per_org
        ),
        wait,
    )
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

/// Pushes `db`'s configuration, as the store holds it, to its node after a change the
/// store has recorded. The change is done whatever happens here: a store that fails to
/// read the configuration (a blip) or a node that does not take it leaves the push to the
/// reconciler, asked for a pass now, and the request answers as done.
async fn push_config(
    state: &AppState,
    db: &Database,
    group: &atoll_meta::Group,
    org: &atoll_meta::Organization,
) {
    match crate::data_plane::database_config(&state.store, db, group, org).await {
        Ok(config) => crate::data_plane::converge(&state.data_plane, &db.node, config).await,
        Err(e) => {
            tracing::warn!(database = %db.id, error = %e, "cannot read a changed configuration to push: the reconciler will");
            crate::reconciler::request_pass();
        }
    }
}

fn configuration_of(db: &Database) -> DatabaseConfiguration {
    DatabaseConfiguration {
        size_limit: db.size_limit.map(|l| l.to_string()).unwrap_or_default(),
        allow_attach: db.allow_attach,
        block_reads: db.block_reads,
        block_writes: db.block_writes,
        delete_protection: db.delete_protection,
        allowed_ips: db.allowed_ips.clone(),
        allowed_aws_vpc_ids: vec![],
        durability: db.durability.clone().unwrap_or_else(|| "default".into()),
    }
}

async fn configuration(access: Access) -> Json<DatabaseConfiguration> {
    Json(configuration_of(access.database()))
}

async fn configure(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<UpdateDatabaseConfiguration>,
) -> ApiResult<Json<DatabaseConfiguration>> {
    let db = access.database();
    let size_limit = match body.size_limit.as_deref() {
        None => None,
        Some(text) => Some(size_limit(text)?),
    };
    if let Some(ips) = &body.allowed_ips {
        for ip in ips {
            if !valid_ip_or_cidr(ip) {
                return Err(ApiError::invalid(format!(
                    "allowed_ips: {ip:?} is not an IP address or CIDR range"
                )));
            }
        }
    }
    if body
        .allowed_aws_vpc_ids
        .as_ref()
        .is_some_and(|ids| !ids.is_empty())
    {
        return Err(ApiError::NotAvailable(
            "AWS VPC endpoints do not exist on Atoll: allowed_aws_vpc_ids must be empty".into(),
        ));
    }
    let durability = match body.durability.as_deref() {
        None => None,
        Some("lag" | "sync") => body.durability.clone().map(Some),
        Some("default") => Some(None),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "durability: {other:?} is not lag, sync or default"
            )))
        }
    };
    // What the audit log says was set, besides delete protection.
    let mut settings = serde_json::Map::new();
    if let Some(mode) = &body.durability {
        settings.insert("durability".into(), json!(mode));
    }
    if let Some(text) = &body.size_limit {
        settings.insert("size_limit".into(), json!(text));
    }
    for (name, value) in [
        ("allow_attach", body.allow_attach),
        ("block_reads", body.block_reads),
        ("block_writes", body.block_writes),
    ] {
        if let Some(value) = value {
            settings.insert(name.into(), json!(value));
        }
    }
    if let Some(ips) = &body.allowed_ips {
        settings.insert("allowed_ips".into(), json!(ips));
    }
    let changes = DatabaseChanges {
        size_limit,
        block_reads: body.block_reads,
        block_writes: body.block_writes,
        delete_protection: body.delete_protection,
        allow_attach: body.allow_attach,
        allowed_ips: body.allowed_ips,
        durability,
        ..Default::default()
    };
    let updated = state.store.update_database(&db.id, changes).await?;
    push_config(&state, &updated, access.group(), access.org()).await;
    let group = &access.group().name;
    if updated.delete_protection != db.delete_protection {
        let (code, verb) = if updated.delete_protection {
            (AuditCode::DbProtect, "turned on")
        } else {
            (AuditCode::DbUnprotect, "turned off")
        };
        audit::record(
            &state,
            &access,
            &db.org_id,
            code,
            format!("{verb} delete protection of database {}", db.name),
            json!({"database": db.name, "group": group}),
        )
        .await;
    }
    if !settings.is_empty() {
        let names = settings.keys().cloned().collect::<Vec<_>>().join(", ");
        audit::record(
            &state,
            &access,
            &db.org_id,
            AuditCode::DbConfigure,
            format!(
                "changed the configuration of database {} ({names})",
                db.name
            ),
            json!({"database": db.name, "group": group, "configuration": settings}),
        )
        .await;
    }
    Ok(Json(configuration_of(&updated)))
}

fn valid_ip_or_cidr(text: &str) -> bool {
    let (ip, prefix) = text
        .split_once('/')
        .map_or((text, None), |(ip, p)| (ip, Some(p)));
    let Ok(addr) = ip.parse::<std::net::IpAddr>() else {
        return false;
    };
    match prefix {
        None => true,
        Some(p) => p
            .parse::<u8>()
            .is_ok_and(|bits| bits <= if addr.is_ipv4() { 32 } else { 128 }),
    }
}

/// Every instance of `db`: the primary, then a replica in each other location of its
/// group (`crate::data_plane::replicas`), with how far each replica is.
async fn instances_of(
    state: &AppState,
    db: &Database,
) -> ApiResult<Vec<atoll_types::databases::Instance>> {
    let primary = atoll_types::databases::Instance {
        uuid: db.id.clone(),
        name: db.location.clone(),
        kind: "primary".to_string(),
        region: db.location.clone(),
        hostname: state.data_plane.hostname(&db.node, &db.label),
        http_url: state.data_plane.http_url(&db.node, &db.label),
        replication_index: None,
        lag_ms: None,
    };
    let Some(group) = state.store.group_by_id(&db.group_id).await? else {
        return Ok(vec![primary]);
    };
    if group.locations.len() < 2 {
        return Ok(vec![primary]);
    }
    let records = state.store.nodes().await?;
    let mut out = vec![primary];
    for place in crate::data_plane::replicas::instances_of(db, &group.locations, &records)
        .into_iter()
        .filter(|p| !p.primary)
    {
        let status = state.data_plane.replica_status(&place.node, &db.id).await;
        out.push(atoll_types::databases::Instance {
            uuid: crate::data_plane::replicas::replica_uuid(&db.id, &place.location),
            name: place.location.clone(),
            kind: "replica".to_string(),
            region: place.location.clone(),
            hostname: state.data_plane.hostname(&place.node, &db.label),
            http_url: state.data_plane.http_url(&place.node, &db.label),
            replication_index: status.as_ref().map(|s| s.frame_no),
            lag_ms: status.as_ref().map(|s| s.lag_ms),
        });
    }
    Ok(out)
}

async fn instances(State(state): State<AppState>, access: Access) -> ApiResult<Json<InstanceList>> {
    Ok(Json(InstanceList {
        instances: instances_of(&state, access.database()).await?,
    }))
}

async fn instance(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<InstanceResponse>> {
    let db = access.database();
    let name = &params["instance"];
    instances_of(&state, db)
        .await?
        .into_iter()
        .find(|i| i.name == *name || i.uuid == *name)
        .map(|instance| Json(InstanceResponse { instance }))
        .ok_or_else(|| {
            ApiError::NotFound(
                ErrorCode::DatabaseNotFound,
                format!("could not find instance {name} of database {}", db.name),
            )
        })
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
    let rotated = rotate_database_key(&state, &db.id).await?;
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
