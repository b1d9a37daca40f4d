//! Hrana, the libSQL client protocol: over HTTP (versions 1, 2 and 3; JSON and protobuf)
//! and over WebSocket (`hrana1`, `hrana2`, `hrana3`, JSON).
//!
//! | routes | module |
//! |---|---|
//! | `GET /v2`, `/v3`, `/v3-protobuf`; `POST /v2/pipeline`, `/v3/pipeline`, `/v3/cursor`, `/v3-protobuf/pipeline`, `/v3-protobuf/cursor` | `http.rs` (streams and batons in `stream.rs`) |
//! | `GET /v1`; `POST /v1/execute`, `/v1/batch` | `v1.rs` |
//! | `GET /` with a WebSocket upgrade | `ws.rs` |
//!
//! Statements run in `exec.rs` (binding, results, block flags, write and ATTACH rights),
//! cursors in `cursor.rs`. All SQLite work happens on the node's SQL threads, on
//! connections of the sandbox (`crate::sandbox`).
//!
//! Errors have three layers, as in sqld: a statement's failure is a Hrana `Error` inside
//! a successful response; a broken protocol rule fails the whole HTTP request with 400
//! `text/plain` (an expired stream with 400 and a JSON `STREAM_EXPIRED` error); and the
//! data plane's own refusals (tokens, permissions) are [`DataError`] responses.

mod cursor;
mod exec;
mod http;
mod inspect;
mod open_limit;
mod sql_store;
mod statement;
mod stream;
mod v1;
mod values;
mod ws;

pub use exec::STATEMENT_CACHE_CAPACITY;
pub(crate) use http::INLINE_BUDGET;
pub use inspect::{inspect_request, RequestKind};
pub use open_limit::{LimitReached, OpenLimit, Permit};
pub use stream::{StreamRegistry, EXPIRED_MEMORY, IDLE_TIMEOUT};

use crate::error::DataError;
use crate::DataPlaneState;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use libsql_hrana::proto;
use sql_store::SqlStore;
use std::sync::Arc;

/// Largest request body: statements with their arguments (blobs included).
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

pub fn routes() -> Router<Arc<DataPlaneState>> {
    Router::new()
        .route("/v1", get(greeting))
        .route("/v2", get(greeting))
        .route("/v3", get(greeting))
        .route("/v3-protobuf", get(greeting))
        .route("/v1/execute", post(v1::execute))
        .route("/v1/batch", post(v1::batch))
        .route("/v2/pipeline", post(http::pipeline_v2))
        .route("/v3/pipeline", post(http::pipeline_v3))
        .route("/v3/cursor", post(http::cursor_v3))
        .route("/v3-protobuf/pipeline", post(http::pipeline_v3_protobuf))
        .route("/v3-protobuf/cursor", post(http::cursor_v3_protobuf))
        .route("/", get(ws::upgrade))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
}

/// A Hrana request body, at most [`MAX_REQUEST_BYTES`], arriving within the body timeout
/// (`DataLimits::body_read_timeout`). Refusals use the data plane's
/// JSON error shape (413 `{"error": …}`), not axum's plain-text rejections.
pub(crate) struct HranaBody(pub(crate) axum::body::Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for HranaBody {
    type Rejection = DataError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, DataError> {
        use atoll_http::body::BodyReadError;
        match atoll_http::body::read_body(req, state).await {
            Ok(bytes) => Ok(HranaBody(bytes)),
            Err(e @ BodyReadError::TimedOut(_)) => Err(DataError::Timeout(e.to_string())),
            Err(BodyReadError::TooLarge) => Err(DataError::TooLarge(format!(
                "the request body is larger than {MAX_REQUEST_BYTES} bytes"
            ))),
            Err(e @ BodyReadError::Unreadable(_)) => Err(DataError::BadRequest(e.to_string())),
        }
    }
}

/// Clients probe these paths to learn which versions a server speaks.
async fn greeting() -> &'static str {
    "Hello, this is HTTP API v2 (Hrana over HTTP)"
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Version {
    Hrana1,
    Hrana2,
    Hrana3,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::Hrana1 => "hrana1",
            Version::Hrana2 => "hrana2",
            Version::Hrana3 => "hrana3",
        })
    }
}

/// The wire encoding of a Hrana-over-HTTP body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Protobuf,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::Protobuf => "application/x-protobuf",
        }
    }
}

/// A failure of a whole Hrana request (statement failures are [`proto::Error`] values).
#[derive(Debug)]
pub(crate) enum HranaError {
    /// The client broke a protocol rule; the stream, if any, is dropped.
    Protocol(String),
    /// The baton names a stream that expired while idle.
    StreamExpired,
    /// The data plane refused or failed the request (permissions, availability, internal).
    Data(DataError),
}

impl From<DataError> for HranaError {
    fn from(error: DataError) -> HranaError {
        HranaError::Data(error)
    }
}

impl HranaError {
    pub(crate) fn into_response(self, encoding: Encoding) -> Response {
        match self {
            HranaError::Protocol(message) => (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "text/plain")],
                message,
            )
                .into_response(),
            // Clients turn exactly this shape (a typed error, not plain text) into a
            // `STREAM_EXPIRED` error their users can handle.
            HranaError::StreamExpired => {
                let error = HranaError::StreamExpired.to_hrana_error();
                let body = match encoding {
                    Encoding::Json => serde_json::to_vec(&error).unwrap_or_default(),
                    Encoding::Protobuf => prost::Message::encode_to_vec(&error),
                };
                (
                    StatusCode::BAD_REQUEST,
                    [(header::CONTENT_TYPE, encoding.content_type())],
                    body,
                )
                    .into_response()
            }
            HranaError::Data(error) => error.into_response(),
        }
    }

    /// The error as a Hrana `Error`, where the protocol carries it in a message (cursor
    /// `error` entries, WebSocket responses).
    pub(crate) fn to_hrana_error(&self) -> proto::Error {
        let (code, message) = match self {
            HranaError::Protocol(message) => ("PROTOCOL_ERROR", message.clone()),
            HranaError::StreamExpired => (
                "STREAM_EXPIRED",
                "The stream has expired due to inactivity".to_string(),
            ),
            HranaError::Data(error) => (data_error_code(error), error.to_string()),
        };
        exec::hrana_error(code, message)
    }
}

fn data_error_code(error: &DataError) -> &'static str {
    match error {
        DataError::Unauthorized(_) => "AUTH_FAILED",
        DataError::Forbidden(_) => "FORBIDDEN",
        DataError::NoDatabase(_)
        | DataError::UnknownDatabase(_)
        | DataError::UnknownDatabaseForToken(_) => "NAMESPACE_DOESNT_EXIST",
        DataError::Unavailable(_) => "DATABASE_UNAVAILABLE",
        DataError::TooLarge(_) => "RESPONSE_TOO_LARGE",
        DataError::Timeout(_) => "TIMEOUT",
        DataError::TooManyRequests(..) => "TOO_MANY_REQUESTS",
        DataError::BadRequest(_) | DataError::Conflict(_) => "BAD_REQUEST",
        DataError::Storage(_) => "DURABILITY_UNAVAILABLE",
        DataError::Recovering(..) => "DATABASE_UNAVAILABLE",
        DataError::Internal(_) => "INTERNAL_ERROR",
        DataError::Encryption(refusal, _) => refusal.code(),
    }
}

/// Runs tenant SQL work for database `db` on the node's SQL threads (`sql_pool`), in its
/// organization's turn, never on tokio's blocking pool, which the platform needs to keep
/// answering.
async fn blocking<T: Send + 'static>(
    node: &crate::node::Node,
    db: &crate::database::Database,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, HranaError> {
    let tenant = db.config();
    node.sql()
        .run_for(&tenant.org_id, work)
        .await
        .map_err(HranaError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn expired_streams_answer_a_typed_error() {
        let response = HranaError::StreamExpired.into_response(Encoding::Json);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
            serde_json::json!({
                "message": "The stream has expired due to inactivity",
                "code": "STREAM_EXPIRED"
            })
        );

        let response = HranaError::StreamExpired.into_response(Encoding::Protobuf);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/x-protobuf"
        );
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let error = <proto::Error as prost::Message>::decode(body).unwrap();
        assert_eq!(error.code, "STREAM_EXPIRED");
    }

    #[tokio::test]
    async fn protocol_errors_are_plain_text() {
        let response =
            HranaError::Protocol("Received an invalid baton".into()).into_response(Encoding::Json);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/plain");
    }
}
