//! Admission: the middleware in front of every plane's routes. It refuses a request whose
//! client is over its rate limit (429 with `Retry-After`, counted in
//! `atoll_rate_limited_total{plane}`), tells the body extractors how long they may wait
//! ([`BodyReadTimeout`]), and counts a refused credential (401) against its address
//! ([`RateLimits::credential_refused`]).
//!
//! The planes differ in how a request is keyed and in the error body they answer; each
//! says so by implementing [`Admission`] for the state it passes to [`admit`].

use crate::body::BodyReadTimeout;
use crate::rate_limit::{address_of, client_of, Client, RateLimits};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use std::time::Duration;

/// What a plane's admission layer needs to know.
pub trait Admission: Clone + Send + Sync + 'static {
    /// The plane's `plane` label in `atoll_rate_limited_total` (`api`, `data`).
    const PLANE: &'static str;

    /// The plane's rate limits.
    fn rate_limits(&self) -> &RateLimits;

    /// How long a request body may take to arrive.
    fn body_read_timeout(&self) -> Duration;

    /// Replaces the peer address of a request a trusted peer forwarded with its client's,
    /// before the request is keyed. Default: nothing.
    fn adopt_forwarded_address(&self, _request: &mut Request) {}

    /// Who `request` is charged to. Default: its `Authorization` header, else its address.
    fn client(&self, request: &Request) -> Client {
        client_of(request)
    }

    /// The plane's 429, with `Retry-After: retry_after_secs`.
    fn too_many_requests(&self, retry_after_secs: u64) -> Response;
}

/// The admission middleware (`axum::middleware::from_fn_with_state(plane, admit::<P>)`).
pub async fn admit<P: Admission>(
    State(plane): State<P>,
    mut request: Request,
    next: Next,
) -> Response {
    plane.adopt_forwarded_address(&mut request);
    let address = address_of(&request);
    if let Err(seconds) = plane.rate_limits().check(plane.client(&request), address) {
        ::metrics::counter!("atoll_rate_limited_total", "plane" => P::PLANE).increment(1);
        return plane.too_many_requests(seconds);
    }
    request
        .extensions_mut()
        .insert(BodyReadTimeout(plane.body_read_timeout()));
    let response = next.run(request).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        plane.rate_limits().credential_refused(address);
    }
    response
}
