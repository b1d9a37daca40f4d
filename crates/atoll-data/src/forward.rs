//! Stable database endpoints (docs/STORAGE.md, "The reconciler", rule 7): every node of a
//! location answers for every database of the location. A request for a database this node
//! does not hold is forwarded to the node that does — found by asking the control plane
//! (`GET /v1/internal/routes/{label}`, cached for a few seconds) — so a database keeps its
//! URL when it moves between nodes, and DNS (or a load balancer) can point a location's
//! name at all of its nodes.
//!
//! Forwarding is one hop: a forwarded request carries [`FORWARDED_BY`] and is never
//! forwarded again (the holder answers, or says the database is not there). The hop also
//! carries the client's address and the node secret ([`FORWARD_SECRET`]), so the holder
//! rate-limits the client, not the forwarding node. HTTP requests stream both ways; a
//! WebSocket upgrade is forwarded and then spliced byte for byte.

use crate::error::DataError;
use crate::DataPlaneState;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// Set on a forwarded request: the forwarding node's name. Never forwarded again.
pub const FORWARDED_BY: &str = "x-atoll-forwarded-by";
/// The node secret, proving the hop comes from a node (so [`CLIENT_ADDRESS`] is believed).
pub const FORWARD_SECRET: &str = "x-atoll-forward-secret";
/// The address of the client the forwarding node served.
pub const CLIENT_ADDRESS: &str = "x-atoll-client-address";

/// How long a database's holder is remembered; a move makes it stale, and the old
/// holder's "not here" answer drops it at once.
const ROUTE_TTL: Duration = Duration::from_secs(5);
/// Routes remembered at most. Unknown labels are remembered too (as unknown, for the same
/// few seconds): a client sending requests for made-up databases costs the control plane
/// one question per label and TTL, not one per request.
const MAX_ROUTES: usize = 10_000;

/// Hop-by-hop headers, which belong to one connection and are never forwarded (RFC 9110
/// §7.6.1), apart from the WebSocket upgrade's own.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

pub struct Forwarder {
    node_name: String,
    control_planes: Vec<String>,
    secret: String,
    secret_digest: [u8; 32],
    client: reqwest::Client,
    routes: Mutex<HashMap<String, (Option<String>, Instant)>>,
}

impl Forwarder {
    /// A forwarder for node `node_name`, asking `control_planes` (in order) with the node
    /// secret.
    pub fn new(
        node_name: &str,
        control_planes: Vec<String>,
        secret: &str,
    ) -> Result<Forwarder, DataError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| DataError::Internal(e.to_string()))?;
        Ok(Forwarder {
            node_name: node_name.to_string(),
            control_planes,
            secret: secret.to_string(),
            secret_digest: Sha256::digest(secret.as_bytes()).into(),
            client,
            routes: Mutex::new(HashMap::new()),
        })
    }

    /// Whether a request's [`FORWARD_SECRET`] is the node secret (constant time).
    pub fn trusts(&self, headers: &HeaderMap) -> bool {
        let Some(presented) = headers.get(FORWARD_SECRET) else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(digest.ct_eq(&self.secret_digest))
    }

    /// The database listener of the node holding `label`, or `None` when no database has
    /// that label.
    async fn holder(&self, label: &str) -> Result<Option<String>, DataError> {
        if let Some((url, at)) = self.lock().get(label) {
            if at.elapsed() < ROUTE_TTL {
                return Ok(url.clone());
            }
        }
        let mut errors = Vec::new();
        for base in &self.control_planes {
            let base = base.trim_end_matches('/');
            let answer = self
                .client
                .get(format!("{base}/v1/internal/routes/{label}"))
                .bearer_auth(&self.secret)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            match answer {
                Ok(response) if response.status() == StatusCode::NOT_FOUND => {
                    self.remember(label, None);
                    return Ok(None);
                }
                Ok(response) if response.status().is_success() => {
                    let route: atoll_types::node::DatabaseRoute = response
                        .json()
                        .await
                        .map_err(|e| DataError::Internal(format!("bad route answer: {e}")))?;
                    self.remember(label, Some(route.url.clone()));
                    return Ok(Some(route.url));
                }
                Ok(response) => errors.push(format!("{base}: {}", response.status())),
                Err(e) => errors.push(format!("{base}: {e}")),
            }
        }
        Err(DataError::Recovering(
            format!(
                "this node does not hold the database and cannot ask the control plane where it is ({}); try again shortly",
                errors.join("; ")
            ),
            2,
        ))
    }

    fn remember(&self, label: &str, url: Option<String>) {
        let mut routes = self.lock();
        if routes.len() >= MAX_ROUTES {
            routes.retain(|_, (_, at)| at.elapsed() < ROUTE_TTL);
            if routes.len() >= MAX_ROUTES {
                routes.clear();
            }
        }
        routes.insert(label.to_string(), (url, Instant::now()));
    }

    fn forget(&self, label: &str) {
        self.lock().remove(label);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Option<String>, Instant)>> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A GET to another node's internal route, with the node secret.
    pub(crate) async fn internal_get(
        &self,
        url: &str,
        timeout: Duration,
    ) -> Result<reqwest::Response, reqwest::Error> {
        self.client
            .get(url)
            .header(FORWARD_SECRET, &self.secret)
            .header(FORWARDED_BY, &self.node_name)
            .timeout(timeout)
            .send()
            .await
    }

    /// Sends `request` (for database `label`) to `base`, the holder's database listener.
    pub(crate) async fn forward(
        &self,
        base: &str,
        label: &str,
        mut request: Request,
    ) -> Result<Response, DataError> {
        let upgrade = request
            .headers()
            .get(header::UPGRADE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
        let on_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
        let client_address = atoll_http::rate_limit::address_of(&request);
        let (parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let mut headers = HeaderMap::new();
        for (name, value) in &parts.headers {
            if HOP_BY_HOP.contains(&name.as_str()) || name == header::HOST {
                continue;
            }
            if !upgrade && name == header::UPGRADE {
                continue;
            }
            headers.append(name.clone(), value.clone());
        }
        if upgrade {
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
        // The holder finds the database by this, whatever host or path prefix was used.
        headers.insert(
            HeaderName::from_static("x-namespace"),
            HeaderValue::from_str(label).map_err(|e| DataError::BadRequest(e.to_string()))?,
        );
        headers.insert(
            HeaderName::from_static(FORWARDED_BY),
            HeaderValue::from_str(&self.node_name)
                .map_err(|e| DataError::Internal(e.to_string()))?,
        );
        headers.insert(
            HeaderName::from_static(FORWARD_SECRET),
            HeaderValue::from_str(&self.secret).map_err(|e| DataError::Internal(e.to_string()))?,
        );
        if let Some(address) = client_address {
            headers.insert(
                HeaderName::from_static(CLIENT_ADDRESS),
                HeaderValue::from_str(&address.to_string())
                    .map_err(|e| DataError::Internal(e.to_string()))?,
            );
        }
        let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes())
            .map_err(|e| DataError::BadRequest(e.to_string()))?;
        let outgoing = self
            .client
            .request(method, &url)
            .headers(headers)
            .body(reqwest::Body::wrap_stream(body.into_data_stream()));
        let answer = outgoing.send().await.map_err(|e| {
            self.forget(label);
            DataError::Recovering(
                format!("the node holding this database did not answer ({e}); try again shortly"),
                2,
            )
        })?;
        let status = answer.status();
        if status == StatusCode::NOT_FOUND || status == StatusCode::SERVICE_UNAVAILABLE {
            // Moved away, or moving: ask again next time.
            self.forget(label);
        }
        let mut response = Response::builder().status(status.as_u16());
        for (name, value) in answer.headers() {
            if HOP_BY_HOP.contains(&name.as_str()) {
                continue;
            }
            response = response.header(name.as_str(), value.as_bytes());
        }
        if let (Some(on_upgrade), StatusCode::SWITCHING_PROTOCOLS) = (on_upgrade, status) {
            response = response
                .header(header::CONNECTION, "upgrade")
                .header(header::UPGRADE, "websocket");
            tokio::spawn(async move {
                let (theirs, ours) = match (answer.upgrade().await, on_upgrade.await) {
                    (Ok(theirs), Ok(ours)) => (theirs, ours),
                    (Err(e), _) => {
                        tracing::debug!(error = %e, "forwarded WebSocket not upgraded by its holder");
                        return;
                    }
                    (_, Err(e)) => {
                        tracing::debug!(error = %e, "forwarded WebSocket not upgraded by its client");
                        return;
                    }
                };
                let mut theirs = theirs;
                let mut ours = hyper_util::rt::TokioIo::new(ours);
                let _ = tokio::io::copy_bidirectional(&mut ours, &mut theirs).await;
            });
            return response
                .body(Body::empty())
                .map_err(|e| DataError::Internal(e.to_string()));
        }
        response
            .body(Body::from_stream(answer.bytes_stream()))
            .map_err(|e| DataError::Internal(e.to_string()))
    }
}

/// The client address a trusted forwarded request names, for the rate limits.
pub(crate) fn forwarded_client(state: &DataPlaneState, headers: &HeaderMap) -> Option<IpAddr> {
    let forwarder = state.forwarder.as_ref()?;
    if !forwarder.trusts(headers) {
        return None;
    }
    headers
        .get(CLIENT_ADDRESS)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Forwards a request for a database this node does not hold to the node that does.
pub(crate) async fn forward_elsewhere(
    axum::extract::State(state): axum::extract::State<Arc<DataPlaneState>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(forwarder) = state.forwarder.as_ref() else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let label = crate::namespace::database_label(&parts, &state.db_domain);
    let request = Request::from_parts(parts, body);
    let Some(label) = label else {
        return next.run(request).await;
    };
    if request.headers().contains_key(FORWARDED_BY) {
        if !forwarder.trusts(request.headers()) {
            return next.run(request).await;
        }
        // Forwarded by a replica: say which frame the answer reflects, so the replica
        // answers its client only once it holds that frame (reads its own writes).
        let held = request
            .headers()
            .contains_key(crate::replication::routing::WANT_FRAME_NO)
            .then(|| state.node.by_label(&label))
            .flatten();
        let mut response = next.run(request).await;
        if let Some(db) = held {
            if let Some(head) = crate::replication::routing::head_after_request(&db).await {
                response.headers_mut().insert(
                    crate::replication::follow::FRAME_NO_HEADER,
                    HeaderValue::from(head),
                );
            }
        }
        return response;
    }
    if state.node.by_label(&label).is_some() {
        return next.run(request).await;
    }
    if let Some(replica) = state.node.replicas.serving(&label) {
        return crate::replication::routing::serve_on_replica(
            forwarder, replica, &label, request, next,
        )
        .await;
    }
    match forwarder.holder(&label).await {
        Ok(Some(url)) => match forwarder.forward(&url, &label, request).await {
            Ok(response) => response,
            Err(e) => e.into_response(),
        },
        // No such database anywhere: answered here, as any unknown database is.
        Ok(None) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

/// Replaces the peer address of a trusted forwarded request with its client's.
pub(crate) fn adopt_client_address(state: &DataPlaneState, request: &mut Request) {
    if let Some(address) = forwarded_client(state, request.headers()) {
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(SocketAddr::new(address, 0)));
    }
}
