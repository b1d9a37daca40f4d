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

use crate::tls::{ClientCertificate, ServerTls};
use axum::extract::{ConnectInfo, Request};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tower::ServiceExt;

/// How long a client may take to send a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A bound socket and how its connections are secured: plain HTTP (`From<TcpListener>`)
/// or TLS.
pub struct Listener {
    tcp: tokio::net::TcpListener,
    tls: Option<ServerTls>,
}

impl Listener {
    pub fn new(tcp: tokio::net::TcpListener, tls: Option<ServerTls>) -> Listener {
        Listener { tcp, tls }
    }
}

impl From<tokio::net::TcpListener> for Listener {
    fn from(tcp: tokio::net::TcpListener) -> Listener {
        Listener { tcp, tls: None }
    }
}

/// Serves `app` until `shutdown` resolves, then lets open requests finish.
pub async fn serve_router(
    listener: impl Into<Listener>,
    app: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let Listener { tcp: listener, tls } = listener.into();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
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
        let _ = socket.set_nodelay(true);
        let app = app.clone();
        let mut stop = stop_rx.clone();
        match &tls {
            None => {
                connections.spawn(serve_connection(
                    socket,
                    peer,
                    None,
                    app,
                    header_read_timeout,
                    stop,
                ));
            }
            Some(tls) => {
                let acceptor = tls.acceptor().clone();
                connections.spawn(async move {
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
                });
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

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
