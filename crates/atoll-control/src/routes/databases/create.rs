//! `POST …/databases`: a database created on a node that answers, seeded from nothing,
//! an upload, another database (a point in time) or a dump; undone whole when it fails.

use super::dumps::dump_expired;
use super::size_limit;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::parse_lenient;
use crate::database_tokens::{group_with_key, new_signing_key};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_meta::{Database, DatabaseChanges, DatabaseInsert, DatabaseState, StoreError};
use atoll_storage::encryption::{Cipher, EncryptionKey, Verifier};
use atoll_types::audit::AuditCode;
use atoll_types::databases::{CreateDatabaseRequest, CreateDatabaseResponse, CreatedDatabase};
use atoll_types::node::{CreateDatabase, Seed};
use atoll_types::ErrorCode;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde_json::json;
use sha2::{Digest, Sha256};

pub(crate) async fn create(
    State(state): State<AppState>,
    access: Access,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<CreateDatabaseResponse>> {
    let request: CreateDatabaseRequest = parse_lenient(&body)?;
    let org = access.org().clone();
    let idempotency = Idempotency::of(&headers, &body)?;
    if let Some(response) = idempotency.replay(&state, &org.id).await? {
        return Ok(Json(response));
    }
    let limit = validate(&request)?;
    let encryption = requested_encryption(&request)?;
    let group = target_group(&state, &access, &request).await?;
    let (record, dump_id) = create_where_answered(
        &state,
        &access,
        &request,
        &group,
        limit,
        encryption.as_ref(),
    )
    .await?;
    if let Some(id) = dump_id {
        // A dump seeds one database: forgetting it now frees the organization's allowance
        // (a failed create keeps it, to be fixed and retried until it expires).
        if let Err(e) = state.store.delete_dump(&org.id, &id).await {
            tracing::warn!(error = %e, dump = %id, "could not delete a used dump; it expires on its own");
        }
    }
    let mut data = json!({"database": record.name, "group": group.name});
    if let Some(encryption) = &record.encryption {
        // The cipher only: the key is never recorded anywhere.
        data["encryption_cipher"] = json!(encryption.cipher);
    }
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
    idempotency
        .remember(&state, &org.id, response)
        .await
        .map(Json)
}

/// A create's `Idempotency-Key` (when it has one) and the fingerprint of its body.
struct Idempotency {
    key: Option<String>,
    fingerprint: String,
}

impl Idempotency {
    fn of(headers: &HeaderMap, body: &[u8]) -> ApiResult<Idempotency> {
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let value: serde_json::Value = parse_lenient(body)?;
        let digest = Sha256::digest(value.to_string().as_bytes());
        let fingerprint = digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        Ok(Idempotency { key, fingerprint })
    }

    /// The answer an earlier request with this key got; the key reused for another body
    /// is refused.
    async fn replay(
        &self,
        state: &AppState,
        org_id: &str,
    ) -> ApiResult<Option<CreateDatabaseResponse>> {
        let Some(key) = &self.key else {
            return Ok(None);
        };
        let Some((stored, response)) = state.store.idempotent_response(org_id, key).await? else {
            return Ok(None);
        };
        if stored != self.fingerprint {
            return Err(ApiError::Conflict(
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key was used for a different request".into(),
            ));
        }
        let response =
            serde_json::from_str(&response).map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(Some(response))
    }

    /// Stores `response` under the key and answers what the store holds for it (the
    /// first of two requests sent at once with one key wins).
    async fn remember(
        self,
        state: &AppState,
        org_id: &str,
        response: CreateDatabaseResponse,
    ) -> ApiResult<CreateDatabaseResponse> {
        let Some(key) = self.key else {
            return Ok(response);
        };
        let text =
            serde_json::to_string(&response).map_err(|e| ApiError::Internal(e.to_string()))?;
        state
            .store
            .remember_response(org_id, &key, &self.fingerprint, &text)
            .await?;
        if let Some((_, stored)) = state.store.idempotent_response(org_id, &key).await? {
            return serde_json::from_str(&stored).map_err(|e| ApiError::Internal(e.to_string()));
        }
        Ok(response)
    }
}

/// Checks what a create asks for without the store: its name; answers its size limit.
fn validate(request: &CreateDatabaseRequest) -> ApiResult<Option<i64>> {
    atoll_types::names::validate_resource_name("database", &request.name)
        .map_err(|e| ApiError::Invalid(ErrorCode::InvalidName, e))?;
    size_limit(request.size_limit.as_deref().unwrap_or(""))
}

/// Refuses `what` for encrypted database `db`: what needs its rows without its key (a
/// copy into a database encrypted otherwise or not at all, an in-place restore through
/// SQL, a transfer's vacuum) is not available for encrypted databases yet.
pub(crate) fn not_for_encrypted(db: &Database, what: &str) -> ApiResult<()> {
    if db.encryption.is_none() {
        return Ok(());
    }
    Err(ApiError::Invalid(
        ErrorCode::EncryptionNotAvailable,
        format!(
            "{what} is not available for encrypted databases yet (database {} is encrypted with its customer's key; docs/ENCRYPTION.md)",
            db.name
        ),
    ))
}

/// A copy (now or at a point in time) of an encrypted database is encrypted with the
/// source's key and cipher — its pages are copied as they are, without the key on the
/// node — and a copy of a plain database is plain: what a copy asks for must say so.
/// (To change the copy's key: rotate it afterwards.)
fn copy_encryption(source: &Database, requested: Option<&RequestedEncryption>) -> ApiResult<()> {
    let name = &source.name;
    match (&source.encryption, requested) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(ApiError::Invalid(
            ErrorCode::EncryptionNotAvailable,
            format!("database {name} is not encrypted: an encrypted copy of it is not available yet (create an encrypted database and load the rows through a client)"),
        )),
        (Some(_), None) => Err(ApiError::Invalid(
            ErrorCode::EncryptionKeyMalformed,
            format!("database {name} is encrypted with its customer's key, and so is a copy of it, under the same key: send remote_encryption with that key"),
        )),
        (Some(stored), Some(requested)) => {
            if stored.cipher != requested.cipher.name() {
                return Err(ApiError::Invalid(
                    ErrorCode::EncryptionCipherNotSupported,
                    format!(
                        "a copy of database {name} keeps its cipher, {}: rotate the copy's key afterwards to change it",
                        stored.cipher
                    ),
                ));
            }
            let verifier = Verifier::from_hex(&stored.verifier).ok_or_else(|| {
                ApiError::Internal(format!("database {} has a malformed key verifier", source.id))
            })?;
            if !requested.key.matches(&source.id, &verifier) {
                return Err(ApiError::Forbidden(format!(
                    "remote_encryption.encryption_key is not the key of database {name}: a copy keeps its source's key (rotate the copy's key afterwards)"
                )));
            }
            Ok(())
        }
    }
}

/// What a create's `remote_encryption` asks for: the cipher and the key (checked against
/// the cipher, kept as the client sent it, base64, for the node).
struct RequestedEncryption {
    cipher: Cipher,
    key: EncryptionKey,
    text: zeroize::Zeroizing<String>,
}

/// The create's `remote_encryption` (Turso's `{encryption_key, encryption_cipher}`):
/// `None` when it asks for nothing (`null`, `{}`, empty fields). The cipher defaults to
/// `aes256gcm`; a cipher this server cannot do is refused by name, never ignored.
fn requested_encryption(request: &CreateDatabaseRequest) -> ApiResult<Option<RequestedEncryption>> {
    let Some(value) = request
        .remote_encryption
        .as_ref()
        .filter(|v| asks_for_encryption(v))
    else {
        return Ok(None);
    };
    let malformed = |why: &str| {
        ApiError::Invalid(
            ErrorCode::EncryptionKeyMalformed,
            format!("remote_encryption: {why}"),
        )
    };
    let serde_json::Value::Object(fields) = value else {
        return Err(malformed(
            "expected an object {\"encryption_key\": <base64>, \"encryption_cipher\": <name>}",
        ));
    };
    let field = |name: &str| match fields.get(name) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(text)) if text.is_empty() => Ok(None),
        Some(serde_json::Value::String(text)) => Ok(Some(text.as_str())),
        Some(_) => Err(malformed(&format!("{name} must be a string"))),
    };
    let cipher = match field("encryption_cipher")? {
        Some(name) => Cipher::from_name(name).map_err(|e| {
            ApiError::Invalid(ErrorCode::EncryptionCipherNotSupported, e.to_string())
        })?,
        None => Cipher::Aes256Gcm,
    };
    let text = field("encryption_key")?.ok_or_else(|| {
        malformed("encryption_key (the key, base64) is required to create an encrypted database")
    })?;
    let key = EncryptionKey::from_base64(cipher, text).map_err(|e| malformed(&e.to_string()))?;
    Ok(Some(RequestedEncryption {
        cipher,
        key,
        text: zeroize::Zeroizing::new(text.to_string()),
    }))
}

/// The group the database goes to (`default` unless named), which the caller may use
/// and which is in the location asked for, with its signing key.
async fn target_group(
    state: &AppState,
    access: &Access,
    request: &CreateDatabaseRequest,
) -> ApiResult<atoll_meta::Group> {
    let group_name = request
        .group
        .clone()
        .filter(|g| !g.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let group = state
        .store
        .group_by_name(&access.org().id, &group_name)
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
    group_with_key(state, group).await
}

/// Creates the database on a node of the group's primary location: one that cannot be
/// reached (refused, timed out) is undone there and the next node that answers is tried
/// (placement passes the first over now). Answers the record and the dump it used.
async fn create_where_answered(
    state: &AppState,
    access: &Access,
    request: &CreateDatabaseRequest,
    group: &atoll_meta::Group,
    limit: Option<i64>,
    encryption: Option<&RequestedEncryption>,
) -> ApiResult<(Database, Option<String>)> {
    let mut tried: Vec<String> = Vec::new();
    let mut unreachable = None;
    loop {
        let node = state
            .data_plane
            .place(&state.store, &group.primary_location)
            .await?;
        if tried.contains(&node) {
            return Err(unreachable.unwrap_or_else(|| {
                ApiError::NodeUnavailable(format!("data node {node} did not answer"))
            }));
        }
        match create_on(state, access, request, group, limit, encryption, &node).await {
            Ok(created) => return Ok(created),
            Err(e @ ApiError::NodeUnavailable(_)) => {
                tracing::warn!(node = %node, error = %e, "a create could not reach its node: trying another node of the location");
                tried.push(node);
                unreachable = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
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
    encryption: Option<&RequestedEncryption>,
    node: &str,
) -> ApiResult<(Database, Option<String>)> {
    let org = access.org().clone();
    let PlannedSeed {
        seed,
        parent,
        dump_id,
    } = seed_for(state, access, request, encryption, node).await?;
    let (signing_key, key_id) = new_signing_key();
    let final_state = if seed == Seed::Upload {
        DatabaseState::AwaitingUpload
    } else {
        DatabaseState::Active
    };
    let label = format!("{}-{}", request.name, org.slug);
    let id = uuid::Uuid::new_v4().to_string();
    let record = Database {
        encryption: encryption.map(|e| atoll_meta::DatabaseEncryption {
            cipher: e.cipher.name().to_string(),
            verifier: e.key.verifier(&id).to_hex(),
        }),
        id,
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
        .create_database(
            node,
            CreateDatabase { config, seed },
            encryption.map(|e| e.text.clone()),
        )
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
    encryption: Option<&RequestedEncryption>,
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
                Some(text) => Some(crate::routes::backups::parse_timestamp(text).map_err(|_| {
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
            copy_encryption(&source, encryption)?;
            if let Some(at) = timestamp_ms {
                crate::routes::backups::check_history(&source, at, ErrorCode::InvalidSeed)?;
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
