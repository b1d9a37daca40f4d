//! Database tokens on the data plane: the [`DbRequest`] extractor finds the database and
//! checks the bearer token against the keys installed for it (its own and its group's).

use crate::database::Database;
use crate::error::DataError;
use crate::jwt::JwtError;
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
            .ok_or_else(|| DataError::UnknownDatabaseForToken(label.clone()))?;
        check_client_address(&db, parts)?;
        refuse_encryption_key(&parts.headers)?;
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
    let claims = db.verify_token(token.trim(), now).map_err(|e| match e {
        JwtError::Invalid | JwtError::Expired | JwtError::NotForThisDatabase => {
            DataError::Unauthorized(e.to_string())
        }
    })?;
    let config = db.config();
    // A token signed by one of this database's keys names it (`id`) or its group (`gid`).
    let covers = match (&claims.id, &claims.gid) {
        (Some(id), _) => *id == config.id,
        (None, Some(gid)) => *gid == config.group_id,
        (None, None) => false,
    };
    if !covers {
        return Err(DataError::UnknownDatabaseForToken(config.label.clone()));
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

/// Turso clients send `x-turso-encryption-key` to reach a database encrypted at rest with
/// the client's key. This build of libSQL has no cipher support, so Atoll never holds
/// such a database: say so, on every route, rather than ignore the key and serve (or
/// store) plain data the client believes encrypted.
pub fn refuse_encryption_key(headers: &axum::http::HeaderMap) -> Result<(), DataError> {
    if headers.contains_key("x-turso-encryption-key") {
        return Err(DataError::BadRequest(
            "encryption at rest with a client-provided key (x-turso-encryption-key) is not available on this server: send requests and uploads without it".into(),
        ));
    }
    Ok(())
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The database's IP allow list: a request from elsewhere is refused (403) before its
/// token is even looked at. Without a known peer address (a test harness serving without
/// connection info) the list cannot be checked and the request is refused too.
pub fn check_client_address(db: &Database, parts: &Parts) -> Result<(), DataError> {
    let config = db.config();
    if config.allowed_ips.is_empty() {
        return Ok(());
    }
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    match peer {
        Some(ip) if config.allowed_ips.iter().any(|rule| ip_matches(ip, rule)) => Ok(()),
        Some(ip) => Err(DataError::Forbidden(format!(
            "address {ip} is not allowed to reach database {}",
            config.name
        ))),
        None => Err(DataError::Forbidden(format!(
            "database {} only accepts listed addresses",
            config.name
        ))),
    }
}

/// `ip` is `rule` (an address) or inside it (a CIDR range).
pub fn ip_matches(ip: std::net::IpAddr, rule: &str) -> bool {
    use std::net::IpAddr;
    let (address, bits) = match rule.split_once('/') {
        Some((a, b)) => (a, b.parse::<u32>().ok()),
        None => (rule, None),
    };
    let Ok(network) = address.trim().parse::<IpAddr>() else {
        return false;
    };
    let ip = match (ip, network) {
        // An IPv4 client may show up as an IPv4-mapped IPv6 address.
        (IpAddr::V6(v6), IpAddr::V4(_)) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        _ => ip,
    };
    match (ip, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let bits = bits.unwrap_or(32).min(32);
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let bits = bits.unwrap_or(128).min(128);
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::ip_matches;

    #[test]
    fn addresses_and_ranges() {
        let ip = |s: &str| s.parse().unwrap();
        assert!(ip_matches(ip("203.0.113.7"), "203.0.113.7"));
        assert!(!ip_matches(ip("203.0.113.8"), "203.0.113.7"));
        assert!(ip_matches(ip("10.1.2.3"), "10.0.0.0/8"));
        assert!(!ip_matches(ip("11.1.2.3"), "10.0.0.0/8"));
        assert!(ip_matches(ip("::ffff:127.0.0.1"), "127.0.0.0/8"));
        assert!(ip_matches(ip("2001:db8::1"), "2001:db8::/32"));
        assert!(!ip_matches(ip("2001:db9::1"), "2001:db8::/32"));
        assert!(ip_matches(ip("1.2.3.4"), "0.0.0.0/0"));
        assert!(!ip_matches(ip("1.2.3.4"), "garbage"));
    }
}
