//! Database tokens (data-plane credentials): signing keys per database and per group, and
//! minting. Rotating a key means every token it signed stops working as soon as the node
//! has the new configuration.

use crate::auth::{Access, Action};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_data::jwt::{self, Claims, Namespaces, Permissions};
use atoll_meta::{Database, DatabaseChanges, Group};
use atoll_types::databases::CreateDatabaseTokenRequest;
use atoll_types::ErrorCode;
use serde::Deserialize;

/// A new signing key: `(secret, key id)`.
pub fn new_signing_key() -> (String, String) {
    let key = jwt::generate_key();
    let kid = uuid::Uuid::new_v4().simple().to_string();
    (jwt::encode_key(&key.to_bytes()), kid)
}

/// The group with a signing key, giving it its first one when it has none.
pub async fn group_with_key(state: &AppState, group: Group) -> ApiResult<Group> {
    if !group.signing_key.is_empty() {
        return Ok(group);
    }
    let (secret, kid) = new_signing_key();
    Ok(state
        .store
        .ensure_group_key(&group.id, &secret, &kid)
        .await?)
}

/// Gives the database a new signing key: every token it signed stops working as soon as
/// its node has the new configuration (the caller pushes it).
pub async fn rotate_database_key(state: &AppState, database_id: &str) -> ApiResult<Database> {
    let changes = DatabaseChanges {
        signing_key: Some(new_signing_key()),
        ..Default::default()
    };
    Ok(state.store.update_database(database_id, changes).await?)
}

/// Gives the group, and each of its databases, a new signing key: no token signed for the
/// group or any of its databases works once the nodes have the new configuration (the
/// caller pushes it).
pub async fn rotate_group_keys(state: &AppState, group: &Group) -> ApiResult<Group> {
    let (secret, kid) = new_signing_key();
    let rotated = state.store.set_group_key(&group.id, &secret, &kid).await?;
    for db in state.store.databases_in_group(&group.id).await? {
        rotate_database_key(state, &db.id).await?;
    }
    Ok(rotated)
}

/// `?expiration=…&authorization=…` of the token routes.
#[derive(Debug, Deserialize)]
pub struct TokenQuery {
    pub expiration: Option<String>,
    pub authorization: Option<String>,
}

/// What the token covers.
pub enum Subject<'a> {
    Database(&'a str),
    Group(&'a str),
}

/// Validates the request and signs a token for `subject` with `(secret, kid)`.
pub async fn mint(
    state: &AppState,
    access: &Access,
    subject: Subject<'_>,
    signing: (&str, &str),
    query: &TokenQuery,
    body: &CreateDatabaseTokenRequest,
) -> ApiResult<String> {
    let now = unix_now();
    let exp = match query.expiration.as_deref() {
        None => None,
        Some(text) => atoll_types::expiration::parse_expiration(text)
            .map_err(|_| {
                ApiError::Invalid(
                    ErrorCode::InvalidExpiration,
                    "Invalid expiration format".into(),
                )
            })?
            .map(|seconds| now.saturating_add(i64::try_from(seconds).unwrap_or(i64::MAX))),
    };
    let rights = match query.authorization.as_deref() {
        None | Some("") | Some("full-access") => "rw",
        Some("read-only") => "ro",
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "invalid authorization {other:?}: use full-access or read-only"
            )))
        }
    };
    // Attach permissions name databases; the token carries their ids, so a database
    // created later under a reused name is not covered. A token may only attach what its
    // minter could read: a group-scoped minter, databases of its own group (another
    // group's answers 403, as `GET` of that database would).
    let org = access.org();
    let mut attach = Vec::new();
    let names = body
        .permissions
        .as_ref()
        .and_then(|p| p.read_attach.as_ref())
        .map(|r| r.databases.clone())
        .unwrap_or_default();
    for name in names {
        let target =
            state
                .store
                .database_by_name(&org.id, &name)
                .await?
                .ok_or_else(|| {
                    ApiError::Invalid(
                ErrorCode::DatabaseNotFound,
                format!("read_attach: could not find database with name {name}: record not found"),
            )
                })?;
        let group = state
            .store
            .group_by_id(&target.group_id)
            .await?
            .ok_or_else(|| ApiError::Internal("database without a group".into()))?;
        access
            .require_in_group(Action::ReadDatabase, &group)
            .map_err(|e| match e {
                ApiError::Forbidden(why) => {
                    ApiError::Forbidden(format!("read_attach: database {name}: {why}"))
                }
                other => other,
            })?;
        attach.push(target.id);
    }
    let (id, gid) = match subject {
        Subject::Database(id) => (Some(id.to_string()), None),
        Subject::Group(id) => (None, Some(id.to_string())),
    };
    let claims = Claims {
        a: rights.to_string(),
        id,
        gid,
        p: if attach.is_empty() {
            None
        } else {
            Some(Permissions {
                roa: Some(Namespaces { ns: attach }),
            })
        },

        iat: now,
        exp,
    };
    let key = jwt::decode_signing_key(signing.0)
        .ok_or_else(|| ApiError::Internal("stored signing key is unreadable".into()))?;
    Ok(jwt::sign(&claims, &key, signing.1))
}

fn unix_now() -> i64 {
    atoll_meta::now_millis() / 1000
}
