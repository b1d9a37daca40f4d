//! libSQL's gRPC replication protocol, `wal_log.ReplicationLog`, in its gRPC-web form on
//! the database hosts' own listener (as sqld serves it to embedded replicas). The `libsql`
//! crate uses it for `new_remote_replica` when built without its `sync` feature or told
//! `SyncProtocol::V1`; with `sync`, its default probes `GET /info` and takes the HTTP
//! protocol of [`super::sync_http`] instead.
//!
//! Hand-framed rather than through tonic: four unary or server-streaming calls over
//! HTTP/1.1, whose gRPC-web framing is a 5-byte prefix per message and a last frame of
//! trailers; the messages are `prost` structs written from `replication_log.proto`. That
//! keeps a second HTTP stack (tonic's hyper 0.14 or its own router) out of the build and
//! the calls on the data plane's one listener, host routing and middleware.
//!
//! - `Hello`: the log's id (the database's id, which never changes: frame numbers never
//!   rewind), a session token (per process), the stored head.
//! - `BatchLogEntries` / `LogEntries`: frames from `next_offset` on (at most 1,024), read
//!   from the stored log, in libSQL's frame format (24-byte little-endian header: frame
//!   number, checksum, page, database size after a commit; then the page). A replica at the
//!   head first waits (bounded) for the commits made before it asked.
//! - `Snapshot`: the whole database as of the stored head, one frame per page, all numbered
//!   with that head, the last one a commit: sent when a replica is new (offset 0), when its
//!   frames are no longer kept, or when it is ahead of the log (it was made elsewhere).
//! - A transfer starts the database's history anew (`transfer_history`): offsets up to its
//!   start get `NEED_SNAPSHOT`, and every call answers UNAVAILABLE while the node starts it.
//! - `proxy.Proxy` (writes sent through the replica) is not served: UNIMPLEMENTED with
//!   what to use instead.
//!
//! Errors are trailers-only responses: HTTP 200 with `grpc-status` and `grpc-message`.

use super::log::{self, Frames};
use crate::auth::{authenticate, check_client_address, unix_now};
use crate::database::{Database, PAGE_SIZE};
use crate::error::DataError;
use crate::namespace::database_label;
use crate::DataPlaneState;
use atoll_storage::segment::Frame;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use std::sync::{Arc, OnceLock};

/// The most frames one `BatchLogEntries` answers (sqld's `MAX_FRAMES_PER_BATCH`).
const MAX_BATCH_FRAMES: u64 = 1024;
/// Requests are a few bytes; anything larger is not a replication call.
const MAX_REQUEST_BYTES: usize = 64 * 1024;

pub fn routes() -> Router<Arc<DataPlaneState>> {
    Router::new()
        .route("/wal_log.ReplicationLog/{method}", post(replication_log))
        .route("/proxy.Proxy/{method}", post(proxy))
}

#[derive(Clone, PartialEq, prost::Message)]
struct HelloResponse {
    #[prost(string, tag = "1")]
    generation_id: String,
    #[prost(uint64, tag = "2")]
    generation_start_index: u64,
    #[prost(string, tag = "3")]
    log_id: String,
    #[prost(bytes = "vec", tag = "4")]
    session_token: Vec<u8>,
    #[prost(uint64, optional, tag = "5")]
    current_replication_index: Option<u64>,
    #[prost(message, optional, tag = "6")]
    config: Option<ReplicaConfig>,
}

/// `metadata.DatabaseConfig`, the fields a replica uses.
#[derive(Clone, PartialEq, prost::Message)]
struct ReplicaConfig {
    #[prost(bool, tag = "1")]
    block_reads: bool,
    #[prost(bool, tag = "2")]
    block_writes: bool,
    #[prost(string, optional, tag = "3")]
    block_reason: Option<String>,
    #[prost(uint64, tag = "4")]
    max_db_pages: u64,
    #[prost(bool, tag = "9")]
    allow_attach: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LogOffset {
    #[prost(uint64, tag = "1")]
    next_offset: u64,
    #[prost(int32, optional, tag = "2")]
    wal_flavor: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RpcFrame {
    #[prost(bytes = "vec", tag = "1")]
    data: Vec<u8>,
    #[prost(int64, optional, tag = "2")]
    timestamp: Option<i64>,
    #[prost(uint64, optional, tag = "3")]
    durable_frame_no: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RpcFrames {
    #[prost(message, repeated, tag = "1")]
    frames: Vec<RpcFrame>,
}

/// A gRPC status other than OK.
struct GrpcError(u16, String);

impl From<DataError> for GrpcError {
    fn from(e: DataError) -> Self {
        let code = match &e {
            DataError::UnknownDatabase(_)
            | DataError::UnknownDatabaseForToken(_)
            | DataError::NoDatabase(_) => {
                return GrpcError(9, "NAMESPACE_DOESNT_EXIST".into());
            }
            DataError::Unauthorized(_) => 16,
            DataError::Forbidden(_) => 7,
            DataError::BadRequest(_) | DataError::TooLarge(_) => 3,
            DataError::Unavailable(_) | DataError::Conflict(_) => 9,
            DataError::Timeout(_) => 4,
            DataError::TooManyRequests(..) => 8,
            DataError::Storage(_) | DataError::Recovering(..) => 14,
            DataError::Internal(_) => 13,
            DataError::Encryption(refusal, _) => match refusal {
                crate::error::EncryptionRefusal::KeyRequired => 16,
                crate::error::EncryptionRefusal::KeyInvalid => 7,
                crate::error::EncryptionRefusal::KeyMalformed
                | crate::error::EncryptionRefusal::NotAvailable => 3,
            },
        };
        if let DataError::Internal(cause) | DataError::Storage(cause) = &e {
            tracing::error!(%cause, "replication call failed");
        }
        GrpcError(code, e.to_string())
    }
}

impl IntoResponse for GrpcError {
    fn into_response(self) -> Response {
        let mut response = grpc_response(Body::empty());
        let headers = response.headers_mut();
        headers.insert("grpc-status", HeaderValue::from(self.0));
        headers.insert(
            "grpc-message",
            HeaderValue::from_str(&percent_encode(&self.1))
                .unwrap_or(HeaderValue::from_static("error")),
        );
        response
    }
}

fn grpc_response(body: Body) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc-web+proto"),
    );
    response
}

/// gRPC's `grpc-message` encoding: printable ASCII except `%` as is, the rest `%XX`.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..0x7f).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// One gRPC-web message frame.
fn message_frame(message: &impl prost::Message, out: &mut Vec<u8>) {
    let len = message.encoded_len();
    out.reserve(5 + len);
    out.push(0);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    message.encode(out).expect("a Vec grows");
}

/// The last frame: the trailers of a call that succeeded.
fn ok_trailers(out: &mut Vec<u8>) {
    const TRAILERS: &[u8] = b"grpc-status:0\r\n";
    out.push(0x80);
    out.extend_from_slice(&(TRAILERS.len() as u32).to_be_bytes());
    out.extend_from_slice(TRAILERS);
}

/// The request's one message, from its gRPC(-web) framing.
fn request_message<M: prost::Message + Default>(body: &[u8]) -> Result<M, GrpcError> {
    if body.len() > MAX_REQUEST_BYTES {
        return Err(GrpcError(3, "request too large".into()));
    }
    if body.is_empty() {
        return Ok(M::default());
    }
    if body.len() < 5 || body[0] != 0 {
        return Err(GrpcError(
            3,
            "expected one uncompressed gRPC message".into(),
        ));
    }
    let len = u32::from_be_bytes(body[1..5].try_into().expect("4 bytes")) as usize;
    let message = body
        .get(5..5 + len)
        .ok_or_else(|| GrpcError(3, "truncated gRPC message".into()))?;
    M::decode(message).map_err(|e| GrpcError(3, format!("malformed message: {e}")))
}

/// The session token of this process: it changes when the node restarts, which tells a
/// replica to say hello again.
fn session_token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| uuid::Uuid::new_v4().to_string())
}

/// The database and the caller's access: the database as every data-plane route finds it
/// (path prefix, `x-namespace`, Host), else the namespace the client names in
/// `x-namespace-bin`; the token from `x-authorization` (what the client sends) or
/// `Authorization`.
fn authorize(state: &DataPlaneState, parts: &Parts) -> Result<Arc<Database>, GrpcError> {
    // The namespace the client derives from the URL's first host label is only a
    // fallback: a path prefix, `x-namespace` or a database host name says it exactly.
    let label = match database_label(parts, &state.db_domain) {
        Some(label) => label,
        None => parts
            .headers
            .get("x-namespace-bin")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD_NO_PAD
                    .decode(value.trim_end_matches('='))
                    .ok()
            })
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| GrpcError(9, "NAMESPACE_DOESNT_EXIST".into()))?,
    };
    let db = state
        .node
        .by_label(&label)
        .ok_or_else(|| GrpcError(9, "NAMESPACE_DOESNT_EXIST".into()))?;
    db.ensure_confirmed()?;
    check_client_address(&db, parts)?;
    crate::encryption::plain_only(&db, &parts.headers, "replication over gRPC")?;
    let header = parts
        .headers
        .get("x-authorization")
        .or_else(|| parts.headers.get(axum::http::header::AUTHORIZATION))
        .ok_or_else(|| {
            GrpcError::from(DataError::Unauthorized(
                "Authorization header expected but missing".into(),
            ))
        })?;
    authenticate(&db, header.to_str().unwrap_or(""), unix_now())?;
    db.ensure_queryable()?;
    db.ensure_readable()?;
    crate::transfer_history::ensure_started(&db)?;
    Ok(db)
}

/// A replica that said hello to another process must say hello again.
fn check_session(parts: &Parts) -> Result<(), GrpcError> {
    match parts.headers.get("x-session-token") {
        Some(token) if token.as_bytes() != session_token().as_bytes() => {
            Err(GrpcError(9, "NO_HELLO".into()))
        }
        _ => Ok(()),
    }
}

async fn proxy() -> Response {
    GrpcError(
        12,
        "writes through an embedded replica over gRPC are not served: write through the server (libsql: the default sync protocol, or a remote connection)".into(),
    )
    .into_response()
}

async fn replication_log(
    State(state): State<Arc<DataPlaneState>>,
    Path(method): Path<String>,
    request: axum::extract::Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(body) => body,
        Err(_) => return GrpcError(3, "request too large".into()).into_response(),
    };
    let result = match method.as_str() {
        "Hello" => hello(&state, &parts).await,
        "BatchLogEntries" => log_entries(&state, &parts, &body, true).await,
        "LogEntries" => log_entries(&state, &parts, &body, false).await,
        "Snapshot" => snapshot(&state, &parts, &body).await,
        other => Err(GrpcError(12, format!("unknown method {other}"))),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn hello(state: &DataPlaneState, parts: &Parts) -> Result<Response, GrpcError> {
    let db = authorize(state, parts)?;
    let head = log::wait_for_commits(&db)
        .await
        .ok_or_else(|| GrpcError::from(log::no_storage()))?;
    let config = db.config();
    let hello = HelloResponse {
        generation_id: config.id.clone(),
        generation_start_index: 0,
        log_id: config.id.clone(),
        session_token: session_token().as_bytes().to_vec(),
        current_replication_index: Some(head),
        config: Some(ReplicaConfig {
            block_reads: config.block_reads,
            block_writes: config.block_writes,
            block_reason: config.block_reason.clone(),
            max_db_pages: config.size_limit.map_or(0, |bytes| bytes / PAGE_SIZE),
            allow_attach: config.allow_attach,
        }),
    };
    let mut out = Vec::new();
    message_frame(&hello, &mut out);
    ok_trailers(&mut out);
    Ok(grpc_response(Body::from(out)))
}

async fn log_entries(
    state: &DataPlaneState,
    parts: &Parts,
    body: &Bytes,
    batch: bool,
) -> Result<Response, GrpcError> {
    let db = authorize(state, parts)?;
    check_session(parts)?;
    let offset: LogOffset = request_message(body)?;
    if offset.wal_flavor == Some(1) {
        return Err(GrpcError(3, "only the SQLite WAL flavor is served".into()));
    }
    let storage = state
        .node
        .storage()
        .cloned()
        .ok_or_else(|| GrpcError::from(log::no_storage()))?;
    let need_snapshot = || GrpcError(9, "NEED_SNAPSHOT".into());
    let first = offset.next_offset;
    // Frames up to the start of the current owner's history (a transfer started it anew)
    // are never served: the replica starts again from a snapshot.
    if first == 0 || first <= crate::transfer_history::first_frame(&db) {
        return Err(need_snapshot());
    }
    let mut head = log::durable_head(&db).ok_or_else(|| GrpcError::from(log::no_storage()))?;
    if first > head {
        head = log::wait_for_commits(&db).await.unwrap_or(head);
    }
    if first > head + 1 {
        // Ahead of the log: made from another server or a lost history.
        return Err(need_snapshot());
    }
    let frames = if first > head {
        Vec::new()
    } else {
        let last = (first + MAX_BATCH_FRAMES - 1).min(head);
        match log::read_frames(&storage.storage, db.id(), first, last).await? {
            Frames::Found(frames) => frames,
            Frames::Gone => return Err(need_snapshot()),
        }
    };
    let bytes: u64 = frames.iter().map(|f| f.page.len() as u64 + 24).sum();
    state.node.meters.record_synced(db.id(), bytes);
    let frames: Vec<RpcFrame> = frames.iter().map(|f| rpc_frame(f, head)).collect();
    let mut out = Vec::new();
    if batch {
        message_frame(&RpcFrames { frames }, &mut out);
    } else {
        for frame in &frames {
            message_frame(frame, &mut out);
        }
    }
    ok_trailers(&mut out);
    Ok(grpc_response(Body::from(out)))
}

/// libSQL's frame: a 24-byte little-endian header (frame number, checksum, page number,
/// database size after the commit or 0) and the page.
fn rpc_frame(frame: &Frame, durable: u64) -> RpcFrame {
    let mut data = Vec::with_capacity(24 + frame.page.len());
    data.extend_from_slice(&frame.frame_no.to_le_bytes());
    data.extend_from_slice(&frame.checksum.to_le_bytes());
    data.extend_from_slice(&frame.page_no.to_le_bytes());
    data.extend_from_slice(&frame.size_after.to_le_bytes());
    data.extend_from_slice(&frame.page);
    RpcFrame {
        data,
        timestamp: None,
        durable_frame_no: Some(durable),
    }
}

async fn snapshot(
    state: &DataPlaneState,
    parts: &Parts,
    body: &Bytes,
) -> Result<Response, GrpcError> {
    let db = authorize(state, parts)?;
    check_session(parts)?;
    let _offset: LogOffset = request_message(body)?;
    let head = log::wait_for_commits(&db)
        .await
        .ok_or_else(|| GrpcError::from(log::no_storage()))?;
    let file = log::state_at(&state.node, &db, head).await?;
    let len = std::fs::metadata(&file).map_err(DataError::from)?.len();
    state.node.meters.record_synced(db.id(), len);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let dir = file.parent().map(std::path::Path::to_path_buf);
        let opened = std::fs::File::open(&file);
        if let Some(dir) = &dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        let result = (|| -> std::io::Result<()> {
            let mut source = opened?;
            let pages = (len / PAGE_SIZE) as u32;
            let mut page = vec![0u8; PAGE_SIZE as usize];
            let mut out = Vec::with_capacity(1 << 20);
            for page_no in 1..=pages {
                source.read_exact(&mut page)?;
                let frame = Frame {
                    frame_no: head,
                    checksum: 0,
                    page_no,
                    size_after: if page_no == pages { pages } else { 0 },
                    page: std::mem::take(&mut page),
                };
                message_frame(&rpc_frame(&frame, head), &mut out);
                page = frame.page;
                if out.len() >= 1 << 20
                    && tx
                        .blocking_send(Ok(Bytes::from(std::mem::take(&mut out))))
                        .is_err()
                {
                    return Ok(());
                }
            }
            ok_trailers(&mut out);
            let _ = tx.blocking_send(Ok(Bytes::from(out)));
            Ok(())
        })();
        if let Err(e) = result {
            tracing::warn!(error = %e, "snapshot stream failed half-way; cutting it off");
            let _ = tx.blocking_send(Err(e));
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(grpc_response(Body::from_stream(stream)))
}
