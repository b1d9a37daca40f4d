//! Reading a request body whole within the body read timeout, for the extractors of both
//! planes (the control plane's JSON bodies, the database hosts' Hrana bodies). Each plane
//! answers a [`BodyReadError`] with its own error body.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use std::time::Duration;

/// How long a request body may take to arrive; the admission layer
/// ([`crate::admission::admit`]) sets it on every request for the extractors that read
/// bodies.
#[derive(Debug, Clone, Copy)]
pub struct BodyReadTimeout(pub Duration);

/// When no [`BodyReadTimeout`] was set (a router built without the admission layer).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

impl BodyReadTimeout {
    /// The timeout set on `request`, else [`DEFAULT_BODY_READ_TIMEOUT`].
    pub fn of(request: &Request) -> Duration {
        request
            .extensions()
            .get::<BodyReadTimeout>()
            .map_or(DEFAULT_BODY_READ_TIMEOUT, |t| t.0)
    }
}

/// Why a request body could not be read.
#[derive(Debug)]
pub enum BodyReadError {
    /// It did not arrive in full within this long (the planes answer 408).
    TimedOut(Duration),
    /// It is larger than the route's `DefaultBodyLimit` (413).
    TooLarge,
    /// The client stopped sending, or sent something that cannot be read (400).
    Unreadable(BytesRejection),
}

impl std::fmt::Display for BodyReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyReadError::TimedOut(timeout) => write!(
                f,
                "the request body did not arrive within {} seconds",
                timeout.as_secs()
            ),
            BodyReadError::TooLarge => f.write_str("the request body is too large"),
            BodyReadError::Unreadable(rejection) => {
                write!(f, "cannot read the request body: {rejection}")
            }
        }
    }
}

impl std::error::Error for BodyReadError {}

/// The whole body of `request`, within its [`BodyReadTimeout`].
pub async fn read_body<S: Send + Sync>(
    request: Request,
    state: &S,
) -> Result<Bytes, BodyReadError> {
    let timeout = BodyReadTimeout::of(&request);
    // A client trickling its body byte by byte must not hold the request forever.
    let read = tokio::time::timeout(timeout, Bytes::from_request(request, state))
        .await
        .map_err(|_| BodyReadError::TimedOut(timeout))?;
    read.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            BodyReadError::TooLarge
        } else {
            BodyReadError::Unreadable(rejection)
        }
    })
}
