//! Replica routing: a request for a database this node holds a replica of is served from
//! the copy when it only reads, and forwarded to the primary otherwise; after a forwarded
//! write the replica waits (bounded) for the frame the primary reported, so a client reads
//! its own writes.

use super::follow::{Replica, FRAME_NO_HEADER};
use crate::database::Database;
use crate::error::DataError;
use crate::forward::Forwarder;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Set by a replica on a request it forwards: the primary answers with [`FRAME_NO_HEADER`].
pub const WANT_FRAME_NO: &str = "x-atoll-want-frame-no";

/// Largest pipeline body a replica holds to try it itself before forwarding it.
const MAX_PIPELINE_BYTES: usize = 32 * 1024 * 1024;

/// On a request a replica tries to serve itself: the replica (the request's database).
#[derive(Clone)]
pub(crate) struct OnReplica(pub Arc<Replica>);

/// Left by a handler on its answer when the replica cannot serve the request (a write, an
/// interactive stream): the request goes to the primary instead.
#[derive(Clone, Copy)]
pub(crate) struct ToPrimary;

/// The answer of a handler that leaves a request to the primary.
pub(crate) fn to_primary() -> Response {
    let mut response = StatusCode::MISDIRECTED_REQUEST.into_response();
    response.extensions_mut().insert(ToPrimary);
    response
}

/// A request for a database this node holds a replica of: a pipeline that only reads
/// and closes its stream, and a Turso Sync pull (`crate::sync::pull`), are answered here
/// when they can be; everything else goes to the primary.
pub(crate) async fn serve_on_replica(
    forwarder: &Forwarder,
    replica: Arc<Replica>,
    label: &str,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path();
    let local = request.method() == axum::http::Method::POST
        && [
            "/v2/pipeline",
            "/v3/pipeline",
            "/v3-protobuf/pipeline",
            "/pull-updates",
        ]
        .iter()
        .any(|p| path.ends_with(p));
    if !local {
        return forward_to_primary(forwarder, &replica, label, request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PIPELINE_BYTES).await else {
        return DataError::TooLarge("the request body is too large".into()).into_response();
    };
    // What forwarding needs, kept aside (the body is shared, not copied); the request
    // itself is rebuilt only when the replica leaves it to the primary.
    let (method, uri, version, headers) = (
        parts.method.clone(),
        parts.uri.clone(),
        parts.version,
        parts.headers.clone(),
    );
    let client_address = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .copied();
    let mut local =
        axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes.clone()));
    local
        .extensions_mut()
        .insert(OnReplica(Arc::clone(&replica)));
    let response = next.run(local).await;
    if response.extensions().get::<ToPrimary>().is_none() {
        return response;
    }
    let mut again = axum::extract::Request::new(axum::body::Body::from(bytes));
    *again.method_mut() = method;
    *again.uri_mut() = uri;
    *again.version_mut() = version;
    *again.headers_mut() = headers;
    if let Some(info) = client_address {
        again.extensions_mut().insert(info);
    }
    forward_to_primary(forwarder, &replica, label, again).await
}

async fn forward_to_primary(
    forwarder: &Forwarder,
    replica: &Replica,
    label: &str,
    mut request: axum::extract::Request,
) -> Response {
    request
        .headers_mut()
        .insert(WANT_FRAME_NO, HeaderValue::from_static("1"));
    match forwarder
        .forward(&replica.primary_url(), label, request)
        .await
    {
        Ok(response) => {
            let frame_no = response
                .headers()
                .get(FRAME_NO_HEADER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(frame_no) = frame_no {
                if !replica.wait_applied(frame_no).await {
                    tracing::debug!(database_id = %replica.db.id(), frame_no, "replica answered before applying the client's write");
                }
            }
            response
        }
        Err(e) => e.into_response(),
    }
}

/// The primary's last committed frame, for the answer to a request a replica forwarded.
pub(crate) async fn head_after_request(db: &Arc<Database>) -> Option<u64> {
    let log = Arc::clone(db.log()?);
    tokio::task::spawn_blocking(move || log.head().ok())
        .await
        .ok()
        .flatten()
}
