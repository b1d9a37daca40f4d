//! The error body every failure answers with, and the stable machine-readable codes.

use serde::{Deserialize, Serialize};

/// `{"error": "<human message>", "code": "<stable_code>"}`.
///
/// The Turso CLI prints `error`; scripts should branch on `code`, which never changes
/// once released.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default)]
    pub code: String,
}

/// Stable error codes. Adding one is fine; renaming one breaks scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// No credentials, or credentials that are malformed, unknown, expired or revoked.
    Unauthorized,
    /// A known principal without the right to do this.
    Forbidden,
    /// The request body or a parameter is not valid.
    InvalidRequest,
    InvalidName,
    InvalidRole,
    InvalidScope,
    InvalidLocation,
    InvalidExpiration,
    InvalidSize,
    InvalidSeed,
    OrganizationNotFound,
    UserNotFound,
    MemberNotFound,
    InviteNotFound,
    GroupNotFound,
    LocationNotFound,
    TokenNotFound,
    DatabaseNotFound,
    DumpNotFound,
    /// The dump was uploaded too long ago: upload it again.
    DumpExpired,
    RouteNotFound,
    /// The path exists but not with this method (`Allow` lists the methods it has).
    MethodNotAllowed,
    OrganizationAlreadyExists,
    UserAlreadyExists,
    MemberAlreadyExists,
    GroupAlreadyExists,
    TokenAlreadyExists,
    DatabaseAlreadyExists,
    /// An `Idempotency-Key` reused with a different request.
    IdempotencyKeyReused,
    LocationAlreadyInGroup,
    /// The last owner of an organization cannot be removed or demoted.
    LastOwner,
    /// A resource with `delete_protection` on cannot be deleted.
    DeleteProtected,
    /// A quarantined database cannot be purged before its retention is over.
    QuarantineRetention,
    /// The metadata store cannot be reached: retry after `Retry-After` seconds.
    StoreUnavailable,
    /// Personal organizations cannot be deleted and have no members to manage.
    PersonalOrganization,
    /// The group's primary location cannot be removed from it.
    PrimaryLocation,
    /// The data plane could not do what was asked (node unreachable, bad seed file).
    DataPlane,
    /// A feature of paid plans asked for by an organization on the free (`starter`) plan.
    FeatureNotAvailableForStarterPlan,
    /// A feature this server does not offer (for example multi-factor authentication).
    NotAvailable,
    /// A feature of the hosted Turso service that a self-hosted server cannot honour
    /// (payment provider, legacy per-database instances, AWS migration).
    NotAvailableOnSelfHosted,
    /// Encryption at rest with a client-provided key (`remote_encryption`) was asked for;
    /// this server cannot provide it and refuses rather than store the data in the clear.
    EncryptionNotAvailable,
    /// A `remote_encryption` cipher this server does not support (the AEGIS family, or an
    /// unknown name); the message lists the supported ones.
    EncryptionCipherNotSupported,
    /// A `remote_encryption` key that is not base64 or not the length its cipher needs.
    EncryptionKeyMalformed,
    PayloadTooLarge,
    /// The client took too long to send its request body.
    RequestTimeout,
    /// Too many attempts: wait for `Retry-After` seconds.
    TooManyRequests,
    /// The organization's plan allows no more of this.
    QuotaExceeded,
    InvalidCredentials,
    /// No key set (JWKS) of that name in the organization.
    JwksNotFound,
    /// A key set that cannot be used: not a JWKS, private keys in it, weak or unknown keys,
    /// or its URL could not be fetched.
    InvalidJwks,
    /// A key set URL the operator does not allow (`--jwks-allowed-urls`), or one that
    /// resolves to a private address.
    JwksUrlNotAllowed,
    /// The organization holds as many key sets as it may.
    TooManyJwks,
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::InvalidRequest => "invalid_request",
            Self::InvalidName => "invalid_name",
            Self::InvalidRole => "invalid_role",
            Self::InvalidScope => "invalid_scope",
            Self::InvalidLocation => "invalid_location",
            Self::InvalidExpiration => "invalid_expiration",
            Self::InvalidSize => "invalid_size",
            Self::InvalidSeed => "invalid_seed",
            Self::OrganizationNotFound => "organization_not_found",
            Self::UserNotFound => "user_not_found",
            Self::MemberNotFound => "member_not_found",
            Self::InviteNotFound => "invite_not_found",
            Self::GroupNotFound => "group_not_found",
            Self::LocationNotFound => "location_not_found",
            Self::TokenNotFound => "token_not_found",
            Self::DatabaseNotFound => "database_not_found",
            Self::DumpNotFound => "dump_not_found",
            Self::DumpExpired => "dump_expired",
            Self::RouteNotFound => "route_not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::OrganizationAlreadyExists => "organization_already_exists",
            Self::UserAlreadyExists => "user_already_exists",
            Self::MemberAlreadyExists => "member_already_exists",
            Self::GroupAlreadyExists => "group_already_exists",
            Self::TokenAlreadyExists => "token_already_exists",
            Self::DatabaseAlreadyExists => "database_already_exists",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::LocationAlreadyInGroup => "location_already_in_group",
            Self::LastOwner => "last_owner",
            Self::DeleteProtected => "delete_protected",
            Self::QuarantineRetention => "quarantine_retention",
            Self::StoreUnavailable => "store_unavailable",
            Self::PersonalOrganization => "personal_organization",
            Self::PrimaryLocation => "primary_location",
            Self::FeatureNotAvailableForStarterPlan => "feature_not_available_for_starter_plan",
            Self::NotAvailable => "not_available",
            Self::NotAvailableOnSelfHosted => "not_available_on_self_hosted",
            Self::EncryptionNotAvailable => "encryption_not_available",
            Self::EncryptionCipherNotSupported => "encryption_cipher_not_supported",
            Self::EncryptionKeyMalformed => "encryption_key_malformed",
            Self::DataPlane => "data_plane_error",
            Self::PayloadTooLarge => "payload_too_large",
            Self::RequestTimeout => "request_timeout",
            Self::TooManyRequests => "too_many_requests",
            Self::QuotaExceeded => "quota_exceeded",
            Self::InvalidCredentials => "invalid_credentials",
            Self::JwksNotFound => "jwks_not_found",
            Self::InvalidJwks => "invalid_jwks",
            Self::JwksUrlNotAllowed => "jwks_url_not_allowed",
            Self::TooManyJwks => "too_many_jwks",
            Self::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
