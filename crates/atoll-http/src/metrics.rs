//! Prometheus metrics of every Atoll process (`--metrics-listen`): the API and the database
//! hosts count requests by route template and status, tenant SQL counts statements and
//! rows, the metadata store times its operations. Labels are bounded by construction (route
//! templates, never URLs; no database or organization label), so a node with 100,000
//! databases exposes the same few hundred series as one with ten.
//!
//! The recorder is process-wide (the `metrics` facade); until [`install`] runs, every
//! `counter!`/`histogram!` call is a no-op, which is what tests and embedders get.

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Latency buckets (seconds): from a cached point select to a slow dump load.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// How often the recorder's upkeep runs: what a histogram recorded since is kept sample by
/// sample until then (the exporter's own default, 5 s).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Installs the process's recorder (once; later calls answer the same handle), with its
/// upkeep on a thread of its own.
pub fn install() -> Result<&'static PrometheusHandle, String> {
    install_with_upkeep(UPKEEP_INTERVAL)
}

/// [`install`], its upkeep every `interval`. The exporter keeps every sample a histogram
/// records (~16 bytes each with its bookkeeping, one per HTTP request) until its upkeep
/// folds them into the buckets; `install_recorder` leaves running it to the caller, and a
/// node nobody scraped grew by every request's sample, for ever.
fn install_with_upkeep(interval: Duration) -> Result<&'static PrometheusHandle, String> {
    if let Some(handle) = HANDLE.get() {
        return Ok(handle);
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("duration_seconds".into()), &LATENCY_BUCKETS)
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())?;
    let handle = HANDLE.get_or_init(|| handle);
    std::thread::Builder::new()
        .name("atoll-metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(interval);
            handle.run_upkeep();
        })
        .map_err(|e| format!("cannot start the metrics upkeep thread: {e}"))?;
    Ok(handle)
}

/// The text exposition of every metric, when the recorder is installed.
pub fn render() -> Option<String> {
    HANDLE.get().map(PrometheusHandle::render)
}

/// Serves `GET /metrics` (and nothing else) on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(|| async {
            (
                [(
                    axum::http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                render().unwrap_or_default(),
            )
                .into_response()
        }),
    );
    crate::listener::serve_router(
        listener,
        app,
        crate::listener::DEFAULT_HEADER_READ_TIMEOUT,
        shutdown,
    )
    .await
}

/// Middleware: counts and times each request by plane (`api`, `data`), route template and
/// status class.
pub async fn track_requests(
    State(plane): State<&'static str>,
    request: Request,
    next: Next,
) -> Response {
    if HANDLE.get().is_none() {
        return next.run(request).await;
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |path| path.as_str().to_string());
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(
        "atoll_http_requests_total",
        "plane" => plane, "method" => method, "route" => route.clone(), "status" => status
    )
    .increment(1);
    metrics::histogram!(
        "atoll_http_request_duration_seconds",
        "plane" => plane, "method" => method, "route" => route
    )
    .record(started.elapsed().as_secs_f64());
    response
}

/// A request's method as a label: one of HTTP's own, or `other`. Any token is a method to
/// HTTP, and every label value is a series kept for the life of the process, so each
/// request with a method of its own (no token needed, before any rate limit) grew the
/// node's memory and its `/metrics` page for good.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The process's resident memory, in bytes (`/proc/self/statm`).
    fn resident_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|field| field.parse().ok())
            .expect("resident pages");
        pages * 4096
    }

    /// A histogram recorded into over many upkeep intervals, never scraped, holds about
    /// one interval's samples, not all of them: without the upkeep thread the process grew
    /// by every sample recorded (~16 bytes each, 277 MB here; with it, ~3.5 MB).
    #[test]
    fn a_histogram_nobody_scrapes_keeps_its_memory_bounded() {
        install_with_upkeep(Duration::from_millis(20)).expect("install");
        let histogram = metrics::histogram!("atoll_test_upkeep_duration_seconds");
        let before = resident_bytes();
        let recorded: u64 = 16 << 20;
        for _ in 0..recorded {
            histogram.record(0.001);
        }
        let grown = resident_bytes().saturating_sub(before);
        // The samples' values alone, 8 bytes each.
        let samples = recorded * 8;
        assert!(
            grown < samples / 4,
            "the process grew {grown} bytes over {recorded} samples ({samples} bytes) \
             recorded without a scrape"
        );
    }
}
