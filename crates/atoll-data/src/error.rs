//! Errors of the data plane that fail a whole HTTP request. Bodies follow sqld:
//! `{"error": "<message>"}` (statement-level errors are Hrana results instead, see
//! `hrana`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The request does not say which database it is for.
    #[error("{0}")]
    NoDatabase(String),
    /// No such database on this node (also: a token that does not cover it).
    #[error("Namespace `{0}` doesn't exist")]
    UnknownDatabase(String),
    /// The same, where a token is checked: the database may exist and the token be one of
    /// another database of its group. The answer is the same either way, so it tells no
    /// more than the plain 404, but it names the other cause a user should check.
    #[error("Namespace `{0}` doesn't exist, or the token is not for it (a token of another database or group)")]
    UnknownDatabaseForToken(String),
    #[error("Unauthorized: `{0}`")]
    Unauthorized(String),
    #[error("Authorization forbidden: {0}")]
    Forbidden(String),
    /// The database cannot serve this now (awaiting upload, archived).
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    TooLarge(String),
    /// The client was too slow sending its request (an upload that stalled).
    #[error("{0}")]
    Timeout(String),
    /// Over a rate limit or an open-streams cap; the number is the seconds to wait
    /// (`Retry-After`).
    #[error("{0}")]
    TooManyRequests(String, u64),
    /// Object storage failed, or holds an object that is corrupt or missing: the message
    /// names the object.
    #[error("object storage: {0}")]
    Storage(String),
    /// The database is being rebuilt from object storage; the number is the seconds to
    /// wait (`Retry-After`).
    #[error("{0}")]
    Recovering(String, u64),
    #[error("internal error: {0}")]
    Internal(String),
    /// The customer's key of an encrypted database is missing, malformed or wrong, or the
    /// route cannot serve an encrypted database (`crate::encryption`).
    #[error("{1}")]
    Encryption(EncryptionRefusal, String),
}

/// Why a request about an encrypted database's key is refused; each has its status and
/// its code. The body is a Hrana error as well as sqld's (`{"error", "message", "code"}`),
/// so libSQL clients raise it with its code and message rather than a bare HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncryptionRefusal {
    /// The database is encrypted and the request carries no key: 401.
    KeyRequired,
    /// The key is not base64, or not the length of the database's cipher: 400.
    KeyMalformed,
    /// The key is not the database's: 403.
    KeyInvalid,
    /// A key was sent to a database that is not encrypted, or this route does not serve
    /// encrypted databases yet: 400.
    NotAvailable,
}

impl EncryptionRefusal {
    pub fn code(self) -> &'static str {
        match self {
            EncryptionRefusal::KeyRequired => "ENCRYPTION_KEY_REQUIRED",
            EncryptionRefusal::KeyMalformed => "ENCRYPTION_KEY_MALFORMED",
            EncryptionRefusal::KeyInvalid => "ENCRYPTION_KEY_INVALID",
            EncryptionRefusal::NotAvailable => "ENCRYPTION_NOT_AVAILABLE",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            EncryptionRefusal::KeyRequired => StatusCode::UNAUTHORIZED,
            EncryptionRefusal::KeyMalformed | EncryptionRefusal::NotAvailable => {
                StatusCode::BAD_REQUEST
            }
            EncryptionRefusal::KeyInvalid => StatusCode::FORBIDDEN,
        }
    }
}

impl DataError {
    pub fn status(&self) -> StatusCode {
        match self {
            DataError::NoDatabase(_) | DataError::BadRequest(_) => StatusCode::BAD_REQUEST,
            DataError::UnknownDatabase(_) | DataError::UnknownDatabaseForToken(_) => {
                StatusCode::NOT_FOUND
            }
            DataError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            DataError::Forbidden(_) => StatusCode::FORBIDDEN,
            DataError::Unavailable(_) | DataError::Conflict(_) => StatusCode::CONFLICT,
            DataError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            DataError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            DataError::TooManyRequests(..) => StatusCode::TOO_MANY_REQUESTS,
            DataError::Storage(_) | DataError::Recovering(..) => StatusCode::SERVICE_UNAVAILABLE,
            DataError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            DataError::Encryption(refusal, _) => refusal.status(),
        }
    }
}

impl IntoResponse for DataError {
    fn into_response(self) -> Response {
        if let DataError::Internal(cause) | DataError::Storage(cause) = &self {
            tracing::error!(%cause, "data plane request failed");
        }
        let body = match &self {
            DataError::Encryption(refusal, message) => {
                serde_json::json!({ "error": message, "message": message, "code": refusal.code() })
            }
            _ => serde_json::json!({ "error": self.to_string() }),
        };
        let mut response = (self.status(), Json(body)).into_response();
        if let DataError::TooManyRequests(_, seconds) | DataError::Recovering(_, seconds) = &self {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(*seconds),
            );
        }
        response
    }
}

impl From<rusqlite::Error> for DataError {
    fn from(e: rusqlite::Error) -> Self {
        DataError::Internal(e.to_string())
    }
}

impl From<std::io::Error> for DataError {
    fn from(e: std::io::Error) -> Self {
        DataError::Internal(e.to_string())
    }
}

/// The durable log's errors, as the data plane answered them before the log was a crate of
/// its own (same variants, so the same statuses and messages).
impl From<atoll_storage::StorageError> for DataError {
    fn from(e: atoll_storage::StorageError) -> Self {
        use atoll_storage::StorageError;
        match e {
            StorageError::BadRequest(why) => DataError::BadRequest(why),
            StorageError::Unavailable(why) => DataError::Unavailable(why),
            StorageError::ObjectStorage(why) => DataError::Storage(why),
            StorageError::Internal(why) => DataError::Internal(why),
        }
    }
}
