//! Groups: `/v1/organizations/{org}/groups…`, and the same routes un-prefixed
//! (`/v1/groups…`) for the caller's personal organization, as the Turso CLI calls them.

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::{LenientJson, Query};
use crate::data_plane::push_group_databases;
use crate::database_tokens::{
    group_with_key, mint, new_signing_key, rotate_group_keys, Subject, TokenQuery,
};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_meta::{Entity, GroupChanges, NewGroup, StoreError};
use atoll_types::databases::{CreateDatabaseTokenRequest, DatabaseToken};

use atoll_types::audit::AuditCode;
use atoll_types::groups::{
    CreateGroupRequest, FailoverReport, FailoverRequest, Group, GroupConfiguration, GroupList,
    GroupResponse, RenameGroupRequest, TransferGroupRequest, UpdateGroupConfiguration,
};
use atoll_types::{Empty, ErrorCode, Role};
use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;
use serde_json::json;
use std::collections::HashMap;

pub fn routes() -> Vec<Route> {
    let mut routes = Vec::new();
    for prefix in ["/v1/organizations/{org}", "/v1"] {
        let groups = format!("{prefix}/groups");
        let group = format!("{prefix}/groups/{{group}}");
        routes.extend([
            Route::new(
                Method::GET,
                groups.clone(),
                Action::ListGroups,
                "List groups",
                list,
            )
            .response::<GroupList>(),
            Route::new(
                Method::POST,
                groups,
                Action::CreateGroup,
                "Create a group in a location",
                create,
            )
            .request::<CreateGroupRequest>()
            .response::<GroupResponse>(),
            Route::new(
                Method::GET,
                group.clone(),
                Action::ReadGroup,
                "Retrieve a group",
                retrieve,
            )
            .response::<GroupResponse>(),
            Route::new(
                Method::DELETE,
                group.clone(),
                Action::DeleteGroup,
                "Delete a group and all its databases",
                delete,
            )
            .response::<GroupResponse>(),
            Route::new(
                Method::GET,
                format!("{group}/configuration"),
                Action::ReadGroup,
                "Group configuration",
                configuration,
            )
            .response::<GroupConfiguration>(),
            Route::new(
                Method::PATCH,
                format!("{group}/configuration"),
                Action::ConfigureGroup,
                "Update group configuration",
                configure,
            )
            .request::<UpdateGroupConfiguration>()
            .response::<GroupConfiguration>(),
            Route::new(
                Method::POST,
                format!("{group}/transfer"),
                Action::TransferGroup,
                "Move a group to another organization",
                transfer,
            )
            .request::<TransferGroupRequest>()
            .response::<Group>(),
            Route::new(
                Method::POST,
                format!("{group}/unarchive"),
                Action::ConfigureGroup,
                "Bring an archived group back",
                unarchive,
            )
            .response::<GroupResponse>(),
            Route::new(
                Method::POST,
                format!("{group}/rename"),
                Action::ConfigureGroup,
                "Rename a group",
                rename,
            )
            .request::<RenameGroupRequest>()
            .response::<GroupResponse>(),
            Route::new(
                Method::POST,
                format!("{group}/update"),
                Action::ConfigureGroup,
                "Update the group's databases to the latest engine",
                update,
            )
            .response::<Empty>(),
            Route::new(
                Method::POST,
                format!("{group}/locations/{{location}}"),
                Action::ConfigureGroup,
                "Add a location to a group",
                add_location,
            )
            .response::<GroupResponse>(),
            Route::new(
                Method::DELETE,
                format!("{group}/locations/{{location}}"),
                Action::ConfigureGroup,
                "Remove a location from a group",
                remove_location,
            )
            .response::<GroupResponse>(),
            Route::new(
                Method::GET,
                format!("{group}/locations/{{location}}/wait"),
                Action::ReadGroup,
                "Wait until the group serves in a location",
                wait_location,
            )
            .response::<Empty>(),
            Route::new(
                Method::POST,
                format!("{group}/failover"),
                Action::FailOverGroup,
                "Make a location the group's primary: databases move there, or are taken over from a lost node (Atoll extension)",
                failover,
            )
            .request::<FailoverRequest>()
            .response::<FailoverReport>(),
            Route::new(
                Method::POST,
                format!("{group}/auth/tokens"),
                Action::MintGroupToken,
                "Mint a database token valid for every database of the group",
                create_token,
            )
            .request::<CreateDatabaseTokenRequest>()
            .response::<DatabaseToken>()
            .query(&["expiration", "authorization"]),
            Route::new(
                Method::POST,
                format!("{group}/auth/rotate"),
                Action::RotateGroupCredentials,
                "Rotate the group's signing key: every group token stops working",
                rotate,
            )
            .response::<Empty>(),
        ]);
    }
    routes
}

fn group_name_error(e: String) -> ApiError {
    ApiError::Invalid(ErrorCode::InvalidName, e)
}

fn invalid_location(code: &str) -> ApiError {
    ApiError::Invalid(
        ErrorCode::InvalidLocation,
        format!("invalid location: {code}"),
    )
}

fn group_exists(e: StoreError) -> ApiError {
    match e {
        // The OpenAPI document's words exactly: clients match on them.
        StoreError::AlreadyExists(_) => ApiError::Conflict(
            ErrorCode::GroupAlreadyExists,
            "group already exists".to_string(),
        ),
        StoreError::NotFound(_) => {
            ApiError::NotFound(ErrorCode::GroupNotFound, "group not found".into())
        }
        other => other.into(),
    }
}

pub(super) async fn list(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<GroupList>> {
    let groups = state.store.list_groups(&access.org().id).await?;
    // A group-scoped token sees its own group only.
    let pinned = access.pinned_group_id();
    let groups = groups
        .iter()
        .filter(|g| pinned.is_none_or(|id| id == g.id))
        .map(wire::group)
        .collect();
    Ok(Json(GroupList { groups }))
}

async fn create(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<CreateGroupRequest>,
) -> ApiResult<Json<GroupResponse>> {
    atoll_types::names::validate_resource_name("group", &body.name).map_err(group_name_error)?;
    if state.config.location(&body.location).is_none() {
        return Err(invalid_location(&body.location));
    }
    crate::quotas::check_group(&state, access.org()).await?;
    crate::quotas::check_location(&state, access.org(), &body.location).await?;
    let group = state
        .store
        .create_group(
            &access.org().id,
            NewGroup {
                name: body.name.clone(),
                location: body.location,
                version: state.config.group_version.clone(),
            },
        )
        .await
        .map_err(group_exists)?;
    audit::record(
        &state,
        &access,
        &group.org_id,
        AuditCode::GroupCreate,
        format!("created group {} in {}", group.name, group.primary_location),
        json!({"group": group.name, "location": group.primary_location}),
    )
    .await;
    Ok(Json(GroupResponse {
        group: wire::group(&group),
    }))
}

pub(super) async fn retrieve(access: Access) -> Json<GroupResponse> {
    Json(GroupResponse {
        group: wire::group(access.group()),
    })
}

async fn delete(State(state): State<AppState>, access: Access) -> ApiResult<Json<GroupResponse>> {
    let group = access.group();
    if group.delete_protection {
        return Err(ApiError::Conflict(
            ErrorCode::DeleteProtected,
            format!(
                "group {} has delete protection on: turn it off in its configuration first",
                group.name
            ),
        ));
    }
    // The store forgets the databases with their group; then their nodes drop the files.
    let databases = state.store.databases_in_group(&group.id).await?;
    let deleted = state.store.delete_group(&group.id).await?;
    state
        .data_plane
        .drop_forgotten(&state.store, &databases)
        .await;
    audit::record(
        &state,
        &access,
        &access.org().id,
        AuditCode::GroupDelete,
        format!("deleted group {} and its databases", deleted.name),
        json!({"group": deleted.name}),
    )
    .await;

    Ok(Json(GroupResponse {
        group: wire::group(&deleted),
    }))
}

async fn configuration(access: Access) -> Json<GroupConfiguration> {
    Json(GroupConfiguration {
        delete_protection: access.group().delete_protection,
    })
}

async fn configure(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<UpdateGroupConfiguration>,
) -> ApiResult<Json<GroupConfiguration>> {
    let changes = GroupChanges {
        delete_protection: body.delete_protection,
        ..Default::default()
    };
    let group = state
        .store
        .update_group(&access.group().id, changes)
        .await?;
    if group.delete_protection != access.group().delete_protection {
        let (code, verb) = if group.delete_protection {
            (AuditCode::GroupProtect, "turned on")
        } else {
            (AuditCode::GroupUnprotect, "turned off")
        };
        audit::record(
            &state,
            &access,
            &access.org().id,
            code,
            format!("{verb} delete protection of group {}", group.name),
            json!({"group": group.name}),
        )
        .await;
    }
    Ok(Json(GroupConfiguration {
        delete_protection: group.delete_protection,
    }))
}

async fn transfer(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<TransferGroupRequest>,
) -> ApiResult<Json<Group>> {
    let group = access.group();
    let user = &access.principal.user;
    // The receiving organization must be one where the caller may create groups; one they
    // cannot see is "not found", as everywhere.
    let not_found = || {
        ApiError::NotFound(
            ErrorCode::OrganizationNotFound,
            format!("organization {} not found", body.organization),
        )
    };
    let (target, role) = state
        .store
        .org_with_role(&body.organization, &user.id)
        .await?
        .ok_or_else(not_found)?;
    let role = role.ok_or_else(not_found)?;
    if role < Role::Member {
        return Err(ApiError::Forbidden(
            "transferring a group needs the member role or higher in the receiving organization"
                .into(),
        ));
    }
    if target.id == access.org().id {
        return Err(ApiError::invalid(
            "the group already belongs to this organization",
        ));
    }
    crate::quotas::check_group(&state, &target).await?;
    let database_taken = || {
        ApiError::Conflict(
            ErrorCode::DatabaseAlreadyExists,
            format!(
                "organization {} already has a database named like one of group {}",
                target.slug, group.name
            ),
        )
    };
    // Checked here as well as by the store, so the usual refusals change nothing.
    if state
        .store
        .group_by_name(&target.id, &group.name)
        .await?
        .is_some()
    {
        return Err(group_exists(StoreError::AlreadyExists(Entity::Group)));
    }
    for db in state.store.databases_in_group(&group.id).await? {
        // A transfer vacuums each database to start its history anew (needs its rows).
        crate::routes::databases::create::not_for_encrypted(
            &db,
            "a transfer to another organization",
        )?;
        if state
            .store
            .database_by_name(&target.id, &db.name)
            .await?
            .is_some()
        {
            return Err(database_taken());
        }
    }
    // The new owner decides who holds credentials: the group and each of its databases
    // get new keys before they move, so no database or group token minted by the old
    // owner survives, whatever happens next. Turso keeps old tokens working for a
    // transition period; Atoll deliberately does not (docs/API.md, deviations).
    let rotated = match rotate_group_keys(&state, group).await {
        Ok(rotated) => rotated,
        Err(e) => {
            // Some keys may be new already: their nodes learn them from the next pass.
            crate::reconciler::request_pass();
            return Err(e);
        }
    };
    let moved = match state.store.transfer_group(&group.id, &target.id).await {
        Ok(moved) => moved,
        // The store failed around the commit (PostgreSQL restarting, a connection ended):
        // the transfer may be done all the same. The store's answer, once it gives one,
        // decides: done (answered as such) or not (it stays, with its new keys).
        Err(e @ StoreError::Unreachable(_)) => {
            match super::read_back(&group.id, || state.store.group_by_id(&group.id))
                .await
                .flatten()
            {
                Some(now) if now.org_id == target.id => {
                    tracing::warn!(group = %group.id, error = %e, "a group transfer whose commit failed was done: answered as such");
                    now
                }
                _ => {
                    tracing::warn!(group = %group.id, error = %e, "a group transfer whose commit failed was not done, or not known to be");
                    // Its nodes learn whichever it is (and the new keys) from the next pass.
                    crate::reconciler::request_pass();
                    return Err(e.into());
                }
            }
        }
        Err(e) => {
            // It stays, with new keys: its nodes must learn them all the same.
            if let Err(push) = push_group_databases(&state.data_plane, &state.store, &rotated).await
            {
                tracing::warn!(error = %push, group = %group.id, "could not push rotated keys after a failed transfer");
                crate::reconciler::request_pass();
            }
            return Err(match e {
                StoreError::AlreadyExists(Entity::Database) => database_taken(),
                other => group_exists(other),
            });
        }
    };
    // Its databases answer under their new hostnames, with their new keys, from now on
    // (the transfer is done: a push that fails is the reconciler's, not a failed request).
    if let Err(e) = push_group_databases(&state.data_plane, &state.store, &moved).await {
        tracing::warn!(error = %e, group = %moved.id, "could not push a transferred group's databases: the reconciler will");
        crate::reconciler::request_pass();
    }
    let source = access.org();
    audit::record(
        &state,
        &access,
        &source.id,
        AuditCode::GroupTransfer,
        format!(
            "transferred group {} to {}: its database and group tokens stopped working",
            moved.name, target.slug
        ),
        json!({"group": moved.name, "to": target.slug}),
    )
    .await;
    audit::record(
        &state,
        &access,
        &target.id,
        AuditCode::GroupTransfer,
        format!("received group {} from {}", moved.name, source.slug),
        json!({"group": moved.name, "from": source.slug}),
    )
    .await;
    Ok(Json(wire::group(&moved)))
}

async fn unarchive(
    State(state): State<AppState>,
    access: Access,
) -> ApiResult<Json<GroupResponse>> {
    let changes = GroupChanges {
        archived: Some(false),
        ..Default::default()
    };
    let group = state
        .store
        .update_group(&access.group().id, changes)
        .await?;
    push_group_databases(&state.data_plane, &state.store, &group).await?;
    audit::record(
        &state,
        &access,
        &access.org().id,
        AuditCode::GroupUnarchive,
        format!("unarchived group {}", group.name),
        json!({"group": group.name}),
    )
    .await;
    Ok(Json(GroupResponse {
        group: wire::group(&group),
    }))
}

pub(super) async fn create_token(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<TokenQuery>,
    LenientJson(body): LenientJson<CreateDatabaseTokenRequest>,
) -> ApiResult<Json<DatabaseToken>> {
    let group = group_with_key(&state, access.group().clone()).await?;
    if group.key_id != access.group().key_id {
        // The group just got its first key: its databases must learn it.
        push_group_databases(&state.data_plane, &state.store, &group).await?;
    }
    let jwt = mint(
        &state,
        &access,
        Subject::Group(&group.id),
        (&group.signing_key, &group.key_id),
        &query,
        &body,
    )
    .await?;
    let authorization = query.authorization.as_deref().unwrap_or("full-access");
    audit::record(
        &state,
        &access,
        &access.org().id,
        AuditCode::GroupTokenCreate,
        format!(
            "created a {authorization} database token for group {}",
            group.name
        ),
        json!({"group": group.name, "authorization": authorization}),
    )
    .await;
    Ok(Json(DatabaseToken { jwt }))
}

async fn rotate(State(state): State<AppState>, access: Access) -> ApiResult<Json<Empty>> {
    let (secret, kid) = new_signing_key();
    let group = state
        .store
        .set_group_key(&access.group().id, &secret, &kid)
        .await?;
    push_group_databases(&state.data_plane, &state.store, &group).await?;
    audit::record(
        &state,
        &access,
        &access.org().id,
        AuditCode::GroupRotateCreds,
        format!(
            "rotated the signing key of group {}: its group tokens stopped working",
            group.name
        ),
        json!({"group": group.name}),
    )
    .await;
    Ok(Json(Empty {}))
}

/// `POST …/groups/{g}/failover`: see `crate::failover`. Answers 200 with what moved and
/// what did not (a database left behind is retried by asking again).
async fn failover(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<FailoverRequest>,
) -> ApiResult<Json<FailoverReport>> {
    if state.config.location(&body.location).is_none() {
        return Err(invalid_location(&body.location));
    }
    let (group, report) = state
        .data_plane
        .fail_over_group(&state.store, access.group(), &body.location, body.force)
        .await?;
    audit::record(
        &state,
        &access,
        &access.org().id,
        AuditCode::GroupFailover,
        format!(
            "made {} the primary location of group {}",
            body.location, group.name
        ),
        json!({
            "group": group.name,
            "location": body.location,
            "force": body.force,
            "moved": report.moved.iter().map(|m| &m.name).collect::<Vec<_>>(),
            "failed": report.failed.iter().map(|f| &f.name).collect::<Vec<_>>(),
        }),
    )
    .await;
    Ok(Json(FailoverReport {
        group: wire::group(&group),
        moved: report.moved,
        failed: report.failed,
    }))
}

async fn rename(
    State(state): State<AppState>,
    access: Access,
    LenientJson(body): LenientJson<RenameGroupRequest>,
) -> ApiResult<Json<GroupResponse>> {
    atoll_types::names::validate_resource_name("group", &body.name).map_err(group_name_error)?;
    let changes = GroupChanges {
        name: Some(body.name.clone()),
        ..Default::default()
    };
    let group = state
        .store
        .update_group(&access.group().id, changes)
        .await
        .map_err(group_exists)?;
    let previous = &access.group().name;
    if group.name != *previous {
        audit::record(
            &state,
            &access,
            &access.org().id,
            AuditCode::GroupRename,
            format!("renamed group {previous} to {}", group.name),
            json!({"group": group.name, "previous_name": previous}),
        )
        .await;
    }
    Ok(Json(GroupResponse {
        group: wire::group(&group),
    }))
}

/// Atoll ships one engine build, so every database already runs the latest: nothing to do.
async fn update(_access: Access) -> Json<Empty> {
    Json(Empty {})
}

async fn add_location(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<GroupResponse>> {
    let code = &params["location"];
    if state.config.location(code).is_none() {
        return Err(invalid_location(code));
    }
    let group = access.group();
    if group.locations.contains(code) {
        return Ok(Json(GroupResponse {
            group: wire::group(group),
        }));
    }
    crate::quotas::check_location(&state, access.org(), code).await?;
    state
        .data_plane
        .check_replica_location(&state.store, code)
        .await?;
    let mut locations = group.locations.clone();
    locations.push(code.clone());
    let message = format!("added location {code} to group {}", group.name);
    set_locations(
        &state,
        &access,
        locations,
        AuditCode::GroupLocationAdd,
        message,
        code,
    )
    .await
}

async fn remove_location(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<GroupResponse>> {
    let code = &params["location"];
    if state.config.location(code).is_none() {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidLocation,
            "Invalid location code".into(),
        ));
    }
    let group = access.group();
    if *code == group.primary_location {
        return Err(ApiError::Invalid(
            ErrorCode::PrimaryLocation,
            format!(
                "{code} is the primary location of group {}; it cannot be removed",
                group.name
            ),
        ));
    }
    if !group.locations.contains(code) {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidLocation,
            format!("group {} is not in location {code}", group.name),
        ));
    }
    let locations = group
        .locations
        .iter()
        .filter(|l| *l != code)
        .cloned()
        .collect();
    let message = format!("removed location {code} from group {}", group.name);
    set_locations(
        &state,
        &access,
        locations,
        AuditCode::GroupLocationRm,
        message,
        code,
    )
    .await
}

/// Stores the group's new locations and records the change.
async fn set_locations(
    state: &AppState,
    access: &Access,
    locations: Vec<String>,
    code: AuditCode,
    message: String,
    location: &str,
) -> ApiResult<Json<GroupResponse>> {
    let changes = GroupChanges {
        locations: Some(locations),
        ..Default::default()
    };
    let group = state
        .store
        .update_group(&access.group().id, changes)
        .await?;
    // Replicas are placed (or dropped) by the next pass: ask for one now.
    crate::reconciler::request_pass();
    audit::record(
        state,
        access,
        &access.org().id,
        code,
        message,
        json!({"group": group.name, "location": location}),
    )
    .await;
    Ok(Json(GroupResponse {
        group: wire::group(&group),
    }))
}

/// Answers once every database of the group has a replica in `location` that caught up
/// with its primary (at most [`LOCATION_WAIT`]; then 503, to be asked again), or at once
/// when the location is the primary's. 400 when the group is not in that location.
async fn wait_location(
    State(state): State<AppState>,
    access: Access,
    Path(params): Path<HashMap<String, String>>,
) -> ApiResult<Json<Empty>> {
    let code = &params["location"];
    let group = access.group();
    if !group.locations.contains(code) {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidLocation,
            format!("group {} is not in location {code}", group.name),
        ));
    }
    let deadline = tokio::time::Instant::now() + LOCATION_WAIT;
    // What each primary had committed when asked: a replica's own idea of its primary's
    // head dates from its last contact (none yet, just after its node restarted), so
    // "caught up" is measured against this instead.
    let mut heads: HashMap<String, Option<u64>> = HashMap::new();
    loop {
        let records = state.store.nodes().await?;
        let mut waiting = 0usize;
        for db in state.store.databases_in_group(&group.id).await? {
            if db.state != atoll_meta::DatabaseState::Active {
                continue;
            }
            for place in crate::data_plane::replicas::instances_of(&db, &group.locations, &records)
            {
                if place.primary || place.location != *code {
                    continue;
                }
                let head = match heads.get(&db.id) {
                    Some(head) => *head,
                    None => {
                        let head = state
                            .data_plane
                            .stats(&db.node, &db.id)
                            .await
                            .ok()
                            .and_then(|stats| stats.head_frame_no);
                        heads.insert(db.id.clone(), head);
                        head
                    }
                };
                let caught_up = state
                    .data_plane
                    .replica_status(&place.node, &db.id)
                    .await
                    .is_some_and(|s| {
                        // The primary did not answer: the replica's last report is all
                        // there is, and only once it heard from the primary at all.
                        let target = head.unwrap_or(s.primary_frame_no);
                        s.ready && s.frame_no >= target && (head.is_some() || s.last_contact_ms > 0)
                    });
                if !caught_up {
                    waiting += 1;
                }
            }
        }
        if waiting == 0 {
            return Ok(Json(Empty {}));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::NodeUnavailable(format!(
                "{waiting} replica(s) of group {} in {code} are not caught up yet; ask again",
                group.name
            )));
        }
        crate::reconciler::request_pass();
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The longest `…/locations/{location}/wait` waits for replicas before answering 503.
const LOCATION_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
