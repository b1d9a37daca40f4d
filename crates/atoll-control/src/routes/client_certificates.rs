//! TLS client certificates for databases: `POST …/databases/{db}/auth/certificates`
//! (and `/v1/databases/{db}/auth/certificates` for the personal organization). The turso
//! CLI names no route for them; the scope `db:mint-token` covers "a database token or TLS
//! client certificate", so issuing one takes what minting a token takes.
//!
//! Each organization has its own certificate authority (ECDSA P-256), created with its
//! first certificate; its private key is sealed in the store like the signing keys, its
//! certificate travels to the nodes in each database's configuration. A certificate names
//! its database, its rights and the database's current key id in one DNS name
//! (`atoll_data::auth::certificate_name`), so rotating the database's (or its group's)
//! credentials ends its certificates as it ends its tokens. Certificates are short-lived
//! (a day by default, 30 days at most): there is no revocation list.

use super::Route;
use crate::audit;
use crate::auth::{Access, Action};
use crate::body::Query;
use crate::database_tokens::TokenQuery;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_meta::ClientCa;
use atoll_types::audit::AuditCode;
use atoll_types::client_certificates::DatabaseCertificate;
use atoll_types::ErrorCode;
use axum::extract::State;
use axum::http::Method;
use axum::Json;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use serde_json::json;
use time::{Duration, OffsetDateTime};

/// A certificate's life when `expiration` is not given.
const DEFAULT_LIFETIME_SECS: u64 = 24 * 3600;
/// The longest life a certificate may have.
const MAX_LIFETIME_SECS: u64 = 30 * 24 * 3600;

pub fn routes() -> Vec<Route> {
    ["/v1/organizations/{org}", "/v1"]
        .into_iter()
        .map(|prefix| {
            Route::new(
                Method::POST,
                format!("{prefix}/databases/{{db}}/auth/certificates"),
                Action::MintDatabaseToken,
                "Issue a short-lived TLS client certificate for the database (an alternative to a token on TLS listeners)",
                issue,
            )
            .response::<DatabaseCertificate>()
            .query(&["expiration", "authorization"])
        })
        .collect()
}

fn ca_params(org_id: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Atoll");
    name.push(DnType::CommonName, format!("Atoll client CA {org_id}"));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = OffsetDateTime::now_utc() - Duration::hours(1);
    params.not_after = OffsetDateTime::now_utc() + Duration::days(3650);
    params
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(format!("client certificates: {e}"))
}

/// The organization's CA, created (and pushed to its databases) on first use.
async fn org_ca(state: &AppState, org: &atoll_meta::Organization) -> ApiResult<ClientCa> {
    if let Some(ca) = state.store.org_client_ca(&org.id).await? {
        return Ok(ca);
    }
    let key = KeyPair::generate().map_err(internal)?;
    let certificate = ca_params(&org.id).self_signed(&key).map_err(internal)?;
    let ca = state
        .store
        .ensure_org_client_ca(
            &org.id,
            ClientCa {
                certificate: certificate.pem(),
                private_key: key.serialize_pem(),
            },
        )
        .await?;
    crate::data_plane::push_org_databases(&state.data_plane, &state.store, org).await?;
    Ok(ca)
}

async fn issue(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<TokenQuery>,
) -> ApiResult<Json<DatabaseCertificate>> {
    let db = access.database();
    let lifetime = match query.expiration.as_deref() {
        None | Some("") | Some("default") => DEFAULT_LIFETIME_SECS,
        Some(text) => match atoll_types::expiration::parse_expiration(text) {
            Ok(Some(seconds)) if seconds > 0 && seconds <= MAX_LIFETIME_SECS => seconds,
            Ok(_) => {
                return Err(ApiError::Invalid(
                    ErrorCode::InvalidExpiration,
                    "a client certificate lives at most 30 days (30d); there is no revocation list, so it cannot be `never`".into(),
                ))
            }
            Err(_) => {
                return Err(ApiError::Invalid(
                    ErrorCode::InvalidExpiration,
                    "Invalid expiration format".into(),
                ))
            }
        },
    };
    let (write, authorization) = match query.authorization.as_deref() {
        None | Some("") | Some("full-access") => (true, "full-access"),
        Some("read-only") => (false, "read-only"),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "invalid authorization {other:?}: use full-access or read-only"
            )))
        }
    };
    let org = access.org();
    let ca = org_ca(&state, org).await?;
    let ca_key = KeyPair::from_pem(&ca.private_key).map_err(internal)?;
    // The issuer as rcgen needs it: the same name and key as the stored certificate, so
    // what it signs chains to that certificate.
    let issuer = ca_params(&org.id).self_signed(&ca_key).map_err(internal)?;

    let name = atoll_data::auth::certificate_name(write, &db.key_id, &db.id);
    let mut params = CertificateParams::default();
    let mut subject = DistinguishedName::new();
    subject.push(DnType::OrganizationName, org.slug.clone());
    subject.push(DnType::CommonName, db.name.clone());
    params.distinguished_name = subject;
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().map_err(internal)?)];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let now = OffsetDateTime::now_utc();
    let not_after = now + Duration::seconds(i64::try_from(lifetime).unwrap_or(i64::MAX));
    params.not_before = now - Duration::minutes(1);
    params.not_after = not_after;
    let key = KeyPair::generate().map_err(internal)?;
    let certificate = params.signed_by(&key, &issuer, &ca_key).map_err(internal)?;
    audit::record(
        &state,
        &access,
        &db.org_id,
        AuditCode::DbTokenCreate,
        format!(
            "issued a {authorization} client certificate for database {}",
            db.name
        ),
        json!({"database": db.name, "group": access.group().name, "authorization": authorization, "certificate": true}),
    )
    .await;
    Ok(Json(DatabaseCertificate {
        certificate: certificate.pem(),
        private_key: key.serialize_pem(),
        ca_certificate: ca.certificate,
        expires_at: crate::wire::rfc3339(not_after.unix_timestamp() * 1000),
        authorization: authorization.to_string(),
    }))
}
