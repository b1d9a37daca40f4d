//! Atoll's HTTP plumbing: what the control plane's API, the database hosts and the node
//! admin API share, written once.
//!
//! | module | what it owns |
//! |---|---|
//! | [`listener`] | serving a router on a TCP socket: hyper HTTP/1 with a header read timeout, plain or TLS, a per-address connection cap, graceful shutdown, the open-files limit |
//! | [`tls`] | rustls on ring, the certificate re-read when its files change, client certificates |
//! | [`rate_limit`] | token buckets per credential or address |
//! | [`admission`] | the middleware every plane puts in front of its routes: rate limits (429 with `Retry-After`) and the body read timeout |
//! | [`body`] | reading a request body whole within that timeout |
//! | [`metrics`] | the Prometheus recorder, `/metrics`, and the per-request counters |
//! | [`self_wake`] | a connection's task polled again in place when it wakes itself (one context switch less per request) |
//!
//! What differs between planes (how a request is keyed, the error body of a refusal) is a
//! parameter ([`admission::Admission`], [`body::BodyReadError`]); this crate depends on no
//! other Atoll crate.

pub mod admission;
pub mod body;
pub mod listener;
pub mod metrics;
pub mod rate_limit;
pub mod self_wake;
pub mod tls;
