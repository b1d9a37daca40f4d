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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::read_body;
    use crate::rate_limit::RateLimit;
    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::response::IntoResponse;
    use axum::routing::post;
    use axum::Router;
    use std::net::SocketAddr;
    use std::sync::Arc;
    use tower::ServiceExt;

    /// A plane that keys every request by its address (one token a minute for each) and
    /// answers 429 with its own body.
    #[derive(Clone)]
    struct TestPlane(Arc<RateLimits>);

    impl Admission for TestPlane {
        const PLANE: &'static str = "test";

        fn rate_limits(&self) -> &RateLimits {
            &self.0
        }

        fn body_read_timeout(&self) -> Duration {
            Duration::from_secs(7)
        }

        fn too_many_requests(&self, retry_after_secs: u64) -> Response {
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", retry_after_secs.to_string())],
                "slow down",
            )
                .into_response()
        }
    }

    fn app(limits: Arc<RateLimits>) -> Router {
        Router::new()
            .route(
                "/timeout",
                post(|request: Request| async move {
                    BodyReadTimeout::of(&request).as_secs().to_string()
                }),
            )
            .route(
                "/echo",
                post(|request: Request| async move {
                    match read_body(request, &()).await {
                        Ok(bytes) => bytes.into_response(),
                        Err(e) => e.to_string().into_response(),
                    }
                }),
            )
            .route("/refuse", post(|| async { StatusCode::UNAUTHORIZED }))
            .layer(axum::middleware::from_fn_with_state(
                TestPlane(limits),
                admit::<TestPlane>,
            ))
    }

    fn request(path: &str, from: [u8; 4], authorization: Option<&str>) -> Request {
        let mut builder = Request::post(path);
        if let Some(value) = authorization {
            builder = builder.header("authorization", value);
        }
        let mut request = builder.body(Body::from("hello")).unwrap();
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((from, 1234))));
        request
    }

    async fn text(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn admitted_requests_read_their_body_within_the_planes_timeout() {
        let app = app(Arc::new(RateLimits::disabled()));
        let response = app
            .clone()
            .oneshot(request("/timeout", [10, 0, 0, 1], None))
            .await
            .unwrap();
        assert_eq!(text(response).await, "7");
        let response = app
            .oneshot(request("/echo", [10, 0, 0, 1], None))
            .await
            .unwrap();
        assert_eq!(text(response).await, "hello");
    }

    #[tokio::test]
    async fn over_the_limit_the_plane_answers_and_refused_credentials_count_against_the_address() {
        let limits = Arc::new(RateLimits::new(
            Some(RateLimit::per_minute(100)),
            Some(RateLimit::per_minute(1)),
        ));
        let app = app(Arc::clone(&limits));
        let first = app
            .clone()
            .oneshot(request("/echo", [10, 0, 0, 1], None))
            .await
            .unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        let second = app
            .clone()
            .oneshot(request("/echo", [10, 0, 0, 1], None))
            .await
            .unwrap();
        assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(second.headers()["retry-after"], "60");
        assert_eq!(text(second).await, "slow down");
        // A made-up credential refused with 401 uses up its address's allowance: the next
        // credential from there is refused before it is looked at, one from elsewhere is not.
        let guess = app
            .clone()
            .oneshot(request("/refuse", [10, 0, 0, 2], Some("Bearer guess-1")))
            .await
            .unwrap();
        assert_eq!(guess.status(), StatusCode::UNAUTHORIZED);
        let next = app
            .clone()
            .oneshot(request("/echo", [10, 0, 0, 2], Some("Bearer guess-2")))
            .await
            .unwrap();
        assert_eq!(next.status(), StatusCode::TOO_MANY_REQUESTS);
        let elsewhere = app
            .oneshot(request("/echo", [10, 0, 0, 3], Some("Bearer guess-2")))
            .await
            .unwrap();
        assert_eq!(elsewhere.status(), StatusCode::OK);
    }
}
