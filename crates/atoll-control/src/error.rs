//! The control plane's one error type and its mapping to HTTP statuses.

use atoll_meta::{Entity, StoreError};
use atoll_types::{ErrorBody, ErrorCode};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// What `Retry-After` says when a data node cannot be reached: about the time a node
/// takes to restart.
pub const NODE_RETRY_AFTER_SECS: u64 = 5;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing, malformed, unknown, expired or revoked credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// A known principal without the right.
    #[error("{0}")]
    Forbidden(String),
    /// A feature of paid plans, asked for by an organization on the free plan.
    #[error("{0}")]
    PaidPlanRequired(String),
    /// Too many attempts; the number is the seconds to wait (`Retry-After`).
    #[error("{0}")]
    TooManyRequests(String, u64),
    #[error("{1}")]
    NotFound(ErrorCode, String),
    #[error("{1}")]
    Invalid(ErrorCode, String),
    #[error("{1}")]
    Conflict(ErrorCode, String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The request body did not arrive in time.
    #[error("{0}")]
    RequestTimeout(String),
    /// The plan's quota is reached (402: the way out is a bigger plan).
    #[error("{0}")]
    QuotaExceeded(String),
    /// Something this server does not offer.
    #[error("{0}")]
    NotAvailable(String),
    /// A part of the hosted service a self-hosted server cannot honour: a 4xx, so the
    /// turso CLI shows the message instead of retrying or blaming the server.
    #[error("{0}")]
    NotOnSelfHosted(String),
    /// The path exists, the method does not; the router adds `Allow`.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// A data node failed.
    #[error("data plane error: {0}")]
    Upstream(String),
    /// The data node a request needs cannot be reached now: 503 with `Retry-After`. The
    /// client may retry; nothing of the request was kept.
    #[error("data node unavailable: {0}")]
    NodeUnavailable(String),
    /// The metadata store cannot be reached: 503 with `Retry-After`, the store named.
    #[error("metadata store unreachable: {0}")]
    StoreUnavailable(String),
    /// A failure of ours. The cause is logged where it happens, never sent.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::Invalid(ErrorCode::InvalidRequest, message.into())
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::PaidPlanRequired(_) => StatusCode::FORBIDDEN,
            ApiError::TooManyRequests(..) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotFound(..) => StatusCode::NOT_FOUND,
            ApiError::Invalid(..) => StatusCode::BAD_REQUEST,
            ApiError::Conflict(..) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::QuotaExceeded(_) => StatusCode::PAYMENT_REQUIRED,
            ApiError::NotAvailable(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::NotOnSelfHosted(_) => StatusCode::BAD_REQUEST,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Upstream(_) => StatusCode::BAD_GATEWAY,
            ApiError::NodeUnavailable(_) | ApiError::StoreUnavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Unauthenticated(_) => ErrorCode::Unauthorized,
            ApiError::Forbidden(_) => ErrorCode::Forbidden,
            ApiError::PaidPlanRequired(_) => ErrorCode::FeatureNotAvailableForStarterPlan,
            ApiError::TooManyRequests(..) => ErrorCode::TooManyRequests,
            ApiError::NotFound(code, _)
            | ApiError::Invalid(code, _)
            | ApiError::Conflict(code, _) => *code,
            ApiError::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            ApiError::RequestTimeout(_) => ErrorCode::RequestTimeout,
            ApiError::QuotaExceeded(_) => ErrorCode::QuotaExceeded,
            ApiError::NotAvailable(_) => ErrorCode::NotAvailable,
            ApiError::NotOnSelfHosted(_) => ErrorCode::NotAvailableOnSelfHosted,
            ApiError::MethodNotAllowed(_) => ErrorCode::MethodNotAllowed,
            ApiError::Upstream(_) | ApiError::NodeUnavailable(_) => ErrorCode::DataPlane,
            ApiError::StoreUnavailable(_) => ErrorCode::StoreUnavailable,
            ApiError::Internal(_) => ErrorCode::Internal,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = match &self {
            ApiError::Internal(cause) => {
                tracing::error!(%cause, "request failed");
                "internal error: the server could not complete the request; see its log".to_string()
            }
            ApiError::Upstream(cause) => {
                tracing::error!(%cause, "data plane request failed");
                "the database's data node could not complete the request; see the server log"
                    .to_string()
            }
            ApiError::NodeUnavailable(cause) => {
                tracing::warn!(%cause, "data node unavailable");
                "the database's data node cannot be reached right now: retry shortly".to_string()
            }
            ApiError::StoreUnavailable(cause) => {
                tracing::error!(%cause, "metadata store unreachable");
                "the metadata store (PostgreSQL) cannot be reached right now: retry shortly"
                    .to_string()
            }
            other => other.to_string(),
        };
        let body = ErrorBody {
            error: message,
            code: self.code().as_str().to_string(),
        };
        let mut response = (self.status(), Json(body)).into_response();
        let retry_after = match &self {
            ApiError::TooManyRequests(_, seconds) => Some(*seconds),
            ApiError::NodeUnavailable(_) | ApiError::StoreUnavailable(_) => {
                Some(NODE_RETRY_AFTER_SECS)
            }
            _ => None,
        };
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    }
}

impl From<StoreError> for ApiError {
    /// The generic mapping; handlers that know the resource's name say more.
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::NotFound(entity) => {
                let code = match entity {
                    Entity::User => ErrorCode::UserNotFound,
                    Entity::Organization => ErrorCode::OrganizationNotFound,
                    Entity::Member => ErrorCode::MemberNotFound,
                    Entity::Invite => ErrorCode::InviteNotFound,
                    Entity::Group => ErrorCode::GroupNotFound,
                    Entity::Token => ErrorCode::TokenNotFound,
                    Entity::Database => ErrorCode::DatabaseNotFound,
                    Entity::Dump => ErrorCode::DumpNotFound,
                };
                ApiError::NotFound(code, format!("{entity} not found"))
            }
            StoreError::AlreadyExists(entity) => {
                let code = match entity {
                    Entity::User => ErrorCode::UserAlreadyExists,
                    Entity::Organization => ErrorCode::OrganizationAlreadyExists,
                    Entity::Member => ErrorCode::MemberAlreadyExists,
                    Entity::Invite | Entity::Token => ErrorCode::TokenAlreadyExists,
                    Entity::Group => ErrorCode::GroupAlreadyExists,
                    Entity::Database | Entity::Dump => ErrorCode::DatabaseAlreadyExists,
                };
                ApiError::Conflict(code, format!("{entity} already exists"))
            }
            StoreError::LastOwner => ApiError::Conflict(
                ErrorCode::LastOwner,
                "an organization needs at least one owner: promote another member to owner first"
                    .to_string(),
            ),
            StoreError::Duplicate(what) => {
                ApiError::Internal(format!("unexpected duplicate: {what}"))
            }
            StoreError::Unavailable(cause) => ApiError::Internal(cause),
            StoreError::Unreachable(cause) => ApiError::StoreUnavailable(cause),
            // A signing key this process cannot open (another replica runs with a key it
            // lacks): the operator's problem, logged by the store, never the caller's.
            StoreError::Secrets(cause) => ApiError::Internal(cause.to_string()),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
