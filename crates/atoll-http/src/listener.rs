//! Serving a router on a TCP listener with slow-client protection, in plain HTTP or over
//! TLS; used by the control plane, the database hosts and the node admin API.
//!
//! `axum::serve` has no header read timeout, so a client that opens connections and
//! sends half a request line keeps each one forever. Here every connection is served by
//! hyper's HTTP/1 server with `header_read_timeout`: a client gets that long to deliver
//! a request's headers (the first request's, and each later one on a kept-alive
//! connection), else the connection is closed. Over TLS the handshake gets the same time,
//! on the connection's own task, so slow handshakes never hold up `accept`. The client's
//! address is recorded as `ConnectInfo<SocketAddr>` for rate limits and IP allow lists.
//!
//! Fair shares (docs/DESIGN.md, "Blast radius"): a listener may cap the connections one
//! client address holds at once ([`Listener::with_max_connections_per_address`]); a
//! connection beyond the cap is closed as soon as it is accepted, so one address cannot
//! take every file descriptor of the process (a slowloris of half-sent headers once made
//! both ports time out for everyone). IPv6 clients are counted by their /64, which one
//! client usually holds whole. The process's own open-files limit is raised to its hard
//! limit at start ([`raise_open_files_limit`]).

use crate::self_wake::repoll_on_self_wake;
use crate::tls::{ClientCertificate, ServerTls};
use axum::extract::{ConnectInfo, Request};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tower::ServiceExt;

/// How long a client may take to send a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The per-address cap's bounds when it is not set: an eighth of the open-files limit,
/// within these.
const MIN_DEFAULT_CONNECTIONS_PER_ADDRESS: u64 = 64;
const MAX_DEFAULT_CONNECTIONS_PER_ADDRESS: u64 = 4096;
/// How often, at most, a listener logs that it refuses connections (each refusal is also
/// logged at debug level and counted in `atoll_connections_refused_total`).
const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// A bound socket and how its connections are secured: plain HTTP (`From<TcpListener>`)
/// or TLS.
pub struct Listener {
    tcp: tokio::net::TcpListener,
    tls: Option<ServerTls>,
    /// Connections one client address may hold at once; 0: no cap.
    max_connections_per_address: usize,
}

impl Listener {
    /// A listener without a per-address cap (internal listeners: the node admin API,
    /// metrics); the public ones add [`Listener::with_max_connections_per_address`].
    pub fn new(tcp: tokio::net::TcpListener, tls: Option<ServerTls>) -> Listener {
        Listener {
            tcp,
            tls,
            max_connections_per_address: 0,
        }
    }

    /// Caps the connections one client address (an IPv6 client: its /64) holds at once;
    /// beyond it, a new connection is closed as soon as it is accepted. 0: no cap.
    pub fn with_max_connections_per_address(mut self, max: usize) -> Listener {
        self.max_connections_per_address = max;
        self
    }
}

impl From<tokio::net::TcpListener> for Listener {
    fn from(tcp: tokio::net::TcpListener) -> Listener {
        Listener::new(tcp, None)
    }
}

/// The per-address cap when none is set (`--max-connections-per-ip`): an eighth of the
/// process's open-files limit, at least 64 and at most 4,096 (4,096 with the usual hard
/// limits of 524,288 or more, once [`raise_open_files_limit`] has run; 128 where the limit
/// stays at 1,024).
pub fn default_max_connections_per_address() -> usize {
    let limit = open_files_limit().unwrap_or(u64::MAX);
    (limit / 8).clamp(
        MIN_DEFAULT_CONNECTIONS_PER_ADDRESS,
        MAX_DEFAULT_CONNECTIONS_PER_ADDRESS,
    ) as usize
}

/// Gives file descriptors back when the process has none left; answers `false` once it
/// never can again (what it frees is gone), and is then forgotten.
type DescriptorHook = Box<dyn Fn() -> bool + Send + Sync>;

static OUT_OF_DESCRIPTORS: Mutex<Vec<DescriptorHook>> = Mutex::new(Vec::new());

/// Registers what gives descriptors back when `accept` fails for lack of them (a data
/// node's warm set closes idle database connections: `atoll_data`'s `ConnectionPool::shed`).
/// Without it a node whose warm set filled the open-files limit would refuse every new
/// client until connections went unused for long enough to be closed.
pub fn on_out_of_descriptors(hook: impl Fn() -> bool + Send + Sync + 'static) {
    OUT_OF_DESCRIPTORS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Box::new(hook));
}

fn out_of_descriptors() {
    OUT_OF_DESCRIPTORS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|hook| hook());
}

/// The process's open-files soft limit; `None`: unlimited.
pub fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Raises the process's open-files soft limit to its hard limit, and answers the limit in
/// force after (`None`: unlimited). Every connection and every open database file takes a
/// descriptor, and the usual soft limit of 1,024 is reached by a thousand idle clients.
/// Where the hard limit is unlimited or above what the system allows (macOS caps
/// descriptors at `kern.maxfilesperproc`), the highest of a few lower figures that the
/// system takes. Warns when the limit stays below 4,096.
pub fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let before = getrlimit(Resource::Nofile);
    let below_current = |wanted: Option<u64>| match (wanted, before.current) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(wanted), Some(current)) => wanted <= current,
    };
    let hard = before.maximum;
    let candidates = [hard, Some(1 << 20), Some(65_536), Some(10_240)]
        .into_iter()
        .map(|wanted| match (wanted, hard) {
            (Some(wanted), Some(hard)) => Some(wanted.min(hard)),
            (wanted, _) => wanted,
        });
    let mut limit = before.current;
    for wanted in candidates {
        if below_current(wanted) {
            break;
        }
        let raised = Rlimit {
            current: wanted,
            maximum: hard,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = wanted;
            break;
        }
    }
    if limit != before.current {
        tracing::info!(
            from = before.current,
            to = limit,
            "raised the open-files limit to the hard limit"
        );
    }
    if limit.is_some_and(|limit| limit < 4096) {
        tracing::warn!(
            limit,
            "the open-files limit is low: every connection and every open database takes a descriptor; raise the hard limit (systemd: LimitNOFILE=, Docker: --ulimit nofile=)"
        );
    }
    limit
}

/// The connections each client address holds on one listener.
struct AddressCounts {
    max: usize,
    counts: Mutex<HashMap<IpAddr, usize>>,
    last_warning: Mutex<Option<Instant>>,
}

/// One admitted connection's place; dropping it frees the place.
struct AddressSlot {
    counts: Arc<AddressCounts>,
    address: IpAddr,
}

impl AddressCounts {
    fn new(max: usize) -> Arc<AddressCounts> {
        Arc::new(AddressCounts {
            max,
            counts: Mutex::new(HashMap::new()),
            last_warning: Mutex::new(None),
        })
    }

    /// A place for a connection from `peer`, unless its address holds the most already.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<AddressSlot> {
        let address = counted_address(peer);
        let mut counts = self.lock();
        let count = counts.entry(address).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            counts: Arc::clone(self),
            address,
        })
    }

    fn refused(&self, peer: SocketAddr) {
        ::metrics::counter!("atoll_connections_refused_total").increment(1);
        tracing::debug!(%peer, max = self.max, "connection refused: its address holds the most connections already");
        let mut last = self.last_warning.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|at| at.elapsed() >= REFUSAL_WARNING_INTERVAL) {
            *last = Some(Instant::now());
            tracing::warn!(
                address = %counted_address(peer.ip()),
                max = self.max,
                "refusing connections from an address that holds the most it may (--max-connections-per-ip; behind a reverse proxy every client has the proxy's address)"
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock();
        if let Some(count) = counts.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

/// The address a client is counted by: IPv4 as is (also when mapped into IPv6), IPv6 by
/// its /64 prefix (a single host or home network is usually given a /64 whole).
fn counted_address(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

/// Serves `app` until `shutdown` resolves, then lets open requests finish.
pub async fn serve_router(
    listener: impl Into<Listener>,
    app: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let Listener {
        tcp: listener,
        tls,
        max_connections_per_address,
    } = listener.into();
    let per_address =
        (max_connections_per_address > 0).then(|| AddressCounts::new(max_connections_per_address));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    if rustix::io::Errno::from_io_error(&error)
                        .is_some_and(|e| e == rustix::io::Errno::MFILE || e == rustix::io::Errno::NFILE)
                    {
                        out_of_descriptors();
                    }
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
            // Reaps finished connections so the set does not grow with the server's age.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        // Held for as long as the connection is served.
        let slot = match &per_address {
            None => None,
            Some(per_address) => match per_address.admit(peer.ip()) {
                Some(slot) => Some(slot),
                None => {
                    per_address.refused(peer);
                    drop(socket);
                    continue;
                }
            },
        };
        let _ = socket.set_nodelay(true);
        let app = app.clone();
        let mut stop = stop_rx.clone();
        match &tls {
            None => {
                connections.spawn(repoll_on_self_wake(async move {
                    let _slot = slot;
                    serve_connection(socket, peer, None, app, header_read_timeout, stop).await
                }));
            }
            Some(tls) => {
                let acceptor = tls.acceptor().clone();
                connections.spawn(repoll_on_self_wake(async move {
                    let _slot = slot;
                    let handshake =
                        tokio::time::timeout(header_read_timeout, acceptor.accept(socket));
                    let stream = tokio::select! {
                        finished = handshake => match finished {
                            Ok(Ok(stream)) => stream,
                            // Scanners, plain HTTP sent to the TLS port, clients that do not
                            // trust the certificate: nothing the server can act on.
                            Ok(Err(error)) => {
                                tracing::debug!(%error, %peer, "TLS handshake failed");
                                return;
                            }
                            Err(_) => return,
                        },
                        _ = stop.wait_for(|stopping| *stopping) => return,
                    };
                    let certificate = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .map(|leaf| ClientCertificate(Arc::new(leaf.to_vec())));
                    serve_connection(stream, peer, certificate, app, header_read_timeout, stop)
                        .await
                }));
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            grace_secs = SHUTDOWN_GRACE.as_secs(),
            "requests still running when the shutdown's grace ended: their connections are closed"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// How long a stopping server lets the requests in flight finish before it closes their
/// connections. Statements in flight are interrupted at once (the node's shutdown flag), so
/// what outlives this is a response its client does not read (a streamed dump, export or
/// cursor) or a long poll; waiting for those kept a stopping node from exiting until its
/// supervisor killed it 10 s after SIGTERM. Shorter than that, so the process ends on its own.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves HTTP/1 (with upgrades: Hrana WebSockets) on one connection until it closes, or
/// until `stop` is set and the request in flight is answered.
async fn serve_connection<Io>(
    io: Io,
    peer: SocketAddr,
    certificate: Option<ClientCertificate>,
    app: Router,
    header_read_timeout: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        if let Some(certificate) = &certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        app.clone().oneshot(request.map(axum::body::Body::new))
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = stop.wait_for(|stopping| *stopping) => {}
    }
    // Finishes the request in flight, then closes.
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn clients_are_counted_by_address_and_ipv6_clients_by_their_64() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let (a, b, c) = (
            ip("2001:db8:1:2:aaaa::1"),
            ip("2001:db8:1:2:bbbb::2"),
            ip("2001:db8:1:3::1"),
        );
        assert_eq!(counted_address(a), counted_address(b));
        assert_ne!(counted_address(a), counted_address(c));
        assert_eq!(counted_address(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        let counts = AddressCounts::new(1);
        let slot = counts.admit(a).unwrap();
        assert!(counts.admit(b).is_none());
        let other = counts.admit(c).unwrap();
        drop(slot);
        assert!(counts.admit(b).is_some());
        drop(other);
        assert!(counts.lock().is_empty());
    }

    #[test]
    fn the_default_cap_is_a_share_of_the_open_files_limit() {
        let limit = raise_open_files_limit();
        let cap = default_max_connections_per_address() as u64;
        assert!((64..=4096).contains(&cap), "{cap}");
        if let Some(limit) = limit {
            assert!(cap <= (limit / 8).max(64), "{cap} of {limit}");
        }
    }

    async fn serve_health(max_per_address: usize, header_timeout: Duration) -> SocketAddr {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let app = Router::new().route("/health", get(|| async { "ok" }));
        let listener = Listener::new(tcp, None).with_max_connections_per_address(max_per_address);
        tokio::spawn(serve_router(
            listener,
            app,
            header_timeout,
            std::future::pending(),
        ));
        addr
    }

    /// `GET /health` on a new connection from `from` (127.0.0.2 is loopback too on Linux).
    async fn health_from(from: [u8; 4], addr: SocketAddr) -> std::io::Result<String> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((from, 0)))?;
        let mut stream = socket.connect(addr).await?;
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer)
    }

    /// Issue 26: one address holding its cap of connections (a slowloris, say) is refused
    /// more, while other addresses are served.
    #[tokio::test]
    async fn an_address_over_its_cap_is_refused_and_others_are_served() {
        let addr = serve_health(2, Duration::from_secs(30)).await;
        let held = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _also_held = tokio::net::TcpStream::connect(addr).await.unwrap();
        // Closed at once, unanswered (an end of stream or a reset).
        let refused =
            tokio::time::timeout(Duration::from_secs(10), health_from([127, 0, 0, 1], addr))
                .await
                .expect("the connection over the cap was not closed at once");
        assert!(refused.map_or(true, |answer| answer.is_empty()));
        let answer = health_from([127, 0, 0, 2], addr).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // A connection that ends gives its place back.
        drop(held);
        let started = Instant::now();
        loop {
            match health_from([127, 0, 0, 1], addr).await {
                Ok(answer) if answer.starts_with("HTTP/1.1 200") => break,
                _ if started.elapsed() < Duration::from_secs(10) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                other => panic!("the closed connection's place was never freed: {other:?}"),
            }
        }
    }

    /// A stopping server closes connections whose request is still running after
    /// [`SHUTDOWN_GRACE`] (a client that does not read its streamed response, a long poll)
    /// instead of waiting for them for ever.
    #[tokio::test]
    async fn a_request_that_never_ends_does_not_hold_the_shutdown() {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let app = Router::new().route(
            "/forever",
            get(|| async {
                std::future::pending::<()>().await;
                "never"
            }),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_router(
            Listener::new(tcp, None),
            app,
            Duration::from_secs(30),
            async move {
                let _ = stopped.await;
            },
        ));
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /forever HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        // The request is in flight once the server has read it; give it a moment.
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.send(()).unwrap();
        tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(30), server)
            .await
            .expect("the server waited for the request that never ends")
            .unwrap()
            .unwrap();
        let mut rest = Vec::new();
        let _ = client.read_to_end(&mut rest).await;
    }

    /// A connection that never sends a byte is closed after the header timeout too, like
    /// one that stalls halfway through its headers.
    #[tokio::test]
    async fn silent_connections_are_closed_after_the_header_timeout() {
        let addr = serve_health(0, Duration::from_secs(1)).await;
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut rest = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(30), silent.read_to_end(&mut rest))
            .await
            .expect("the silent connection was never closed");
        if ended.is_ok() {
            assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
        }
    }
}
