//! Database tokens on the data plane: the [`DbRequest`] extractor finds the database and
//! checks the bearer token against the keys installed for it (its own and its group's).
//! It refuses encrypted databases (`crate::encryption`); the routes that serve them take
//! a [`KeyedDbRequest`], which checks the customer's key instead.

use crate::database::Database;
use crate::error::DataError;
use crate::jwt::JwtError;
use crate::namespace::database_label;
use crate::DataPlaneState;
use atoll_types::allowed_ips::ip_matches;
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
    /// The customer's key, checked, for an encrypted database (only a
    /// [`KeyedDbRequest`] has one).
    pub key: Option<Arc<atoll_storage::encryption::EncryptionKey>>,
}

/// A request for one database on a route that serves encrypted databases: the same checks
/// as [`DbRequest`], and the key an encrypted database needs.
pub struct KeyedDbRequest(pub DbRequest);

impl FromRequestParts<Arc<DataPlaneState>> for DbRequest {
    type Rejection = DataError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<DataPlaneState>,
    ) -> Result<Self, DataError> {
        extract(parts, state, false).await
    }
}

impl FromRequestParts<Arc<DataPlaneState>> for KeyedDbRequest {
    type Rejection = DataError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<DataPlaneState>,
    ) -> Result<Self, DataError> {
        extract(parts, state, true).await.map(KeyedDbRequest)
    }
}

async fn extract(
    parts: &mut Parts,
    state: &Arc<DataPlaneState>,
    keyed: bool,
) -> Result<DbRequest, DataError> {
    let label = database_label(parts, &state.db_domain).ok_or_else(|| {
        DataError::NoDatabase(format!(
            "cannot tell which database this is for: use the host <db>-<org>.{}, the x-namespace header, or the path prefix /db/<db>-<org>/",
            state.db_domain
        ))
    })?;
    let db = state
        .node
        .by_label(&label)
        .or_else(|| {
            // A replica serving a read (`replication::routing::serve_on_replica`).
            parts
                .extensions
                .get::<crate::replication::routing::OnReplica>()
                .map(|replica| Arc::clone(&replica.0.db))
        })
        .ok_or_else(|| DataError::UnknownDatabaseForToken(label.clone()))?;
    // Before its credentials: a node that cannot confirm the database's keys must not
    // judge a token by the old ones (`crate::convergence`).
    db.ensure_confirmed()?;
    check_client_address(&db, parts)?;
    let key = if keyed {
        crate::encryption::request_key(&db, &parts.headers)?
    } else {
        crate::encryption::plain_only(&db, &parts.headers, parts.uri.path())?;
        None
    };
    // A token when one is sent; otherwise the TLS client certificate, if any.
    let access = match (
        parts.headers.get(axum::http::header::AUTHORIZATION),
        parts.extensions.get::<atoll_http::tls::ClientCertificate>(),
    ) {
        (Some(header), _) => authenticate(&db, header.to_str().unwrap_or(""), unix_now())?,
        (None, Some(certificate)) => authenticate_certificate(&db, &certificate.0, unix_now())?,
        (None, None) => {
            return Err(DataError::Unauthorized(
                "Authorization header expected but missing".into(),
            ))
        }
    };
    Ok(DbRequest { db, access, key })
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
    let token = token.trim();
    let config = db.config();
    let claims = match db.verify_token(token, now) {
        Ok(claims) => claims,
        // Not signed by the database's or its group's key: it may be an end user's token
        // from the organization's own auth provider (its key sets, `external_jwt`). Only
        // keys of this database's organization are installed on it, so a token of another
        // organization's provider fits none.
        Err(JwtError::Invalid | JwtError::NotForThisDatabase)
            if crate::external_jwt::could_verify(token, &config.external_keys) =>
        {
            crate::external_jwt::verify(token, &config.external_keys, now)
                .map_err(|e| DataError::Unauthorized(e.to_string()))?
        }
        Err(e @ (JwtError::Invalid | JwtError::Expired | JwtError::NotForThisDatabase)) => {
            return Err(DataError::Unauthorized(e.to_string()))
        }
    };
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

/// The subject name a client certificate for a database carries (a DNS name in its
/// subject alternative names): its rights, the database's current key id (so rotating the
/// database's credentials, or its group's, ends its certificates too) and its id. The
/// control plane issues them (`atoll-control/src/client_certificates.rs`).
pub fn certificate_name(write: bool, key_id: &str, database_id: &str) -> String {
    let rights = if write { "rw" } else { "ro" };
    format!("{rights}.{key_id}.{database_id}.db.atoll.invalid")
}

/// Checks a TLS client certificate (DER; the handshake proved the client holds its key)
/// against the database's organization's CA: it must be issued by that CA, valid now, for
/// client authentication, and name this database under its current key.
pub fn authenticate_certificate(
    db: &Database,
    certificate: &[u8],
    now: i64,
) -> Result<DbAccess, DataError> {
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let config = db.config();
    let invalid = |why: &str| DataError::Unauthorized(format!("the client certificate {why}"));
    let Some(ca_pem) = config.client_ca.as_deref() else {
        return Err(invalid(
            "is not accepted: this database's organization has issued none",
        ));
    };
    let ca = rustls::pki_types::pem::PemObject::from_pem_slice(ca_pem.as_bytes())
        .map_err(|_| DataError::Internal("unreadable client CA in the configuration".into()))?;
    let ca: CertificateDer<'_> = ca;
    let anchor = webpki::anchor_from_trusted_cert(&ca)
        .map_err(|_| DataError::Internal("unusable client CA in the configuration".into()))?;
    let leaf = CertificateDer::from(certificate);
    let leaf = webpki::EndEntityCert::try_from(&leaf).map_err(|_| invalid("cannot be read"))?;
    let algorithms: &[&dyn rustls::pki_types::SignatureVerificationAlgorithm] = &[
        webpki::ring::ECDSA_P256_SHA256,
        webpki::ring::ECDSA_P256_SHA384,
        webpki::ring::ECDSA_P384_SHA384,
        webpki::ring::ED25519,
    ];
    let time = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        u64::try_from(now).unwrap_or(0),
    ));
    leaf.verify_for_usage(
        algorithms,
        &[anchor],
        &[],
        time,
        webpki::KeyUsage::client_auth(),
        None,
        None,
    )
    .map_err(|e| match e {
        webpki::Error::CertExpired { .. } => invalid("has expired"),
        webpki::Error::CertNotValidYet { .. } => invalid("is not valid yet"),
        _ => invalid("is not issued by this database's organization"),
    })?;
    let Some(key_id) = config.keys.first().map(|k| k.kid.as_str()) else {
        return Err(invalid("is not accepted: the database has no key"));
    };
    for write in [true, false] {
        let name = certificate_name(write, key_id, &config.id);
        let Ok(name) = ServerName::try_from(name.as_str()) else {
            continue;
        };
        if leaf.verify_is_valid_for_subject_name(&name).is_ok() {
            return Ok(DbAccess {
                write,
                attach: Vec::new(),
            });
        }
    }
    // Issued by this organization for another database (or before a rotation): as a
    // token of another database, this one is not revealed.
    Err(DataError::UnknownDatabaseForToken(config.label.clone()))
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
