//! Database tokens on the data plane: the [`DbRequest`] extractor finds the database and
//! checks the bearer token against the keys installed for it (its own and its group's).

use crate::database::Database;
use crate::error::DataError;
use crate::jwt::{self, JwtError};
use crate::namespace::database_label;
use crate::DataPlaneState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::sync::Arc;

/// What the token allows on this database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbAccess {
    pub write: bool,
    /// Ids of the databases this token may `ATTACH` read-only.
    pub attach: Vec<String>,
}

/// A request for one database, with a token valid for it.
pub struct DbRequest {
    pub db: Arc<Database>,
    pub access: DbAccess,
}

impl FromRequestParts<Arc<DataPlaneState>> for DbRequest {
    type Rejection = DataError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<DataPlaneState>,
    ) -> Result<Self, DataError> {
        let label = database_label(parts, &state.db_domain).ok_or_else(|| {
            DataError::NoDatabase(format!(
                "cannot tell which database this is for: use the host <db>-<org>.{}, the x-namespace header, or the path prefix /db/<db>-<org>/",
                state.db_domain
            ))
        })?;
        let db = state
            .node
            .by_label(&label)
            .ok_or_else(|| DataError::UnknownDatabase(label.clone()))?;
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .ok_or_else(|| {
                DataError::Unauthorized("Authorization header expected but missing".into())
            })?;
        let access = authenticate(&db, header.to_str().unwrap_or(""), unix_now())?;
        Ok(DbRequest { db, access })
    }
}

/// Checks an `Authorization` header value against the database's keys.
pub fn authenticate(db: &Database, header: &str, now: i64) -> Result<DbAccess, DataError> {
    let (scheme, token) = header
        .split_once(' ')
        .ok_or_else(|| DataError::Unauthorized("Authorization header malformed".into()))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(DataError::Unauthorized(
            "unsupported authorization scheme".into(),
        ));
    }
    let claims = jwt::verify(token.trim(), &db.verifying_keys(), now).map_err(|e| match e {
        JwtError::Invalid => DataError::Unauthorized("The JWT is invalid".into()),
        JwtError::Expired => DataError::Unauthorized("The JWT has expired".into()),
    })?;
    let config = db.config();
    // A token signed by one of this database's keys names it (`id`) or its group (`gid`).
    let covers = match (&claims.id, &claims.gid) {
        (Some(id), _) => *id == config.id,
        (None, Some(gid)) => *gid == config.group_id,
        (None, None) => false,
    };
    if !covers {
        return Err(DataError::UnknownDatabase(config.label));
    }
    let write = match claims.a.as_str() {
        "rw" => true,
        "ro" => false,
        _ => return Err(DataError::Unauthorized("The JWT is invalid".into())),
    };
    let attach = claims
        .p
        .and_then(|p| p.roa)
        .map(|roa| roa.ns)
        .unwrap_or_default();
    Ok(DbAccess { write, attach })
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
