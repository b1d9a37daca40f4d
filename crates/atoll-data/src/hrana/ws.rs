//! Hrana over WebSocket on `GET /` (subprotocols `hrana3`, `hrana2`, `hrana1`; JSON text
//! frames), what the Python client's `libsql://` URLs and the TypeScript client's `ws://`
//! URLs use.
//!
//! The database comes from the upgrade request (like every data-plane route); the token
//! comes in the first `hello` message. A connection hosts any number of streams (each a
//! database connection, opened with `open_stream`), shares its stored SQL texts among
//! them, and may run one cursor per stream. Requests are answered in order. A protocol
//! violation closes the socket; a statement's failure or a refused permission is a
//! `response_error`.

use super::cursor::{check_cursor, run_cursor, JsonCursorEntry, CURSOR_BUFFER};
use super::exec::{hrana_error, Caller, ClientConnection, Outcome, Run};
use super::open_limit::Permit;
use super::sql_store::MAX_WS_STORED_SQL;
use super::{blocking, HranaError, SqlStore, Version};
use crate::auth::{authenticate, unix_now, DbAccess};
use crate::database::Database;
use crate::error::DataError;
use crate::jwt::JwtError;
use crate::namespace::database_label;
use crate::DataPlaneState;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use libsql_hrana::proto;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// How often a session looks at its idle streams (a write lock to give up, the idle
/// timeout).
const SESSION_TICK: Duration = Duration::from_secs(1);

/// Subprotocols in the server's order of preference.
const SUBPROTOCOLS: [&str; 3] = ["hrana3", "hrana2", "hrana1"];

pub(super) async fn upgrade(
    State(state): State<Arc<DataPlaneState>>,
    request: Request,
) -> Response {
    let (mut parts, _body) = request.into_parts();
    let wants_websocket = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.eq_ignore_ascii_case("websocket"));
    if !wants_websocket {
        return StatusCode::NOT_FOUND.into_response();
    }
    let Some(label) = database_label(&parts, &state.db_domain) else {
        return DataError::NoDatabase(format!(
            "cannot tell which database this is for: use the host <db>-<org>.{}, the x-namespace header, or the path prefix /db/<db>-<org>/",
            state.db_domain
        ))
        .into_response();
    };
    let Some(db) = state.node.by_label(&label) else {
        return DataError::UnknownDatabase(label).into_response();
    };
    if let Err(error) = crate::auth::check_client_address(&db, &parts) {
        return error.into_response();
    }
    // An encrypted database's key comes with the upgrade request, as with every HTTP
    // request (`x-turso-encryption-key`), and lives as long as the socket.
    let key = match crate::encryption::request_key(&db, &parts.headers) {
        Ok(key) => key,
        Err(error) => return error.into_response(),
    };
    if let Err(error) = db.ensure_queryable() {
        return error.into_response();
    }
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &state).await {
        Ok(upgrade) => upgrade.protocols(SUBPROTOCOLS),
        Err(rejection) => return rejection.into_response(),
    };
    let version = match upgrade.selected_protocol().and_then(|p| p.to_str().ok()) {
        Some("hrana3") => Version::Hrana3,
        Some("hrana2") => Version::Hrana2,
        Some("hrana1") => Version::Hrana1,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                "Hrana over WebSocket needs one of the subprotocols hrana3, hrana2 or hrana1",
            )
                .into_response()
        }
    };
    upgrade.on_upgrade(move |socket| Session::new(state, db, key, version).serve(socket))
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ClientMsg {
    Hello {
        #[serde(default)]
        jwt: Option<String>,
    },
    Request {
        request_id: i32,
        request: WsRequest,
    },
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WsRequest {
    OpenStream {
        stream_id: i32,
    },
    CloseStream {
        stream_id: i32,
    },
    Execute {
        stream_id: i32,
        stmt: proto::Stmt,
    },
    Batch {
        stream_id: i32,
        batch: proto::Batch,
    },
    OpenCursor {
        stream_id: i32,
        cursor_id: i32,
        batch: proto::Batch,
    },
    CloseCursor {
        cursor_id: i32,
    },
    FetchCursor {
        cursor_id: i32,
        max_count: u32,
    },
    Sequence {
        stream_id: i32,
        #[serde(default)]
        sql: Option<String>,
        #[serde(default)]
        sql_id: Option<i32>,
    },
    Describe {
        stream_id: i32,
        #[serde(default)]
        sql: Option<String>,
        #[serde(default)]
        sql_id: Option<i32>,
    },
    StoreSql {
        sql_id: i32,
        sql: String,
    },
    CloseSql {
        sql_id: i32,
    },
    GetAutocommit {
        stream_id: i32,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ServerMsg {
    HelloOk {},
    HelloError {
        error: proto::Error,
    },
    ResponseOk {
        request_id: i32,
        response: WsResponse,
    },
    ResponseError {
        request_id: i32,
        error: proto::Error,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WsResponse {
    OpenStream {},
    CloseStream {},
    Execute {
        result: proto::StmtResult,
    },
    Batch {
        result: proto::BatchResult,
    },
    OpenCursor {},
    CloseCursor {},
    FetchCursor {
        entries: Vec<JsonCursorEntry>,
        done: bool,
    },
    Sequence {},
    Describe {
        result: proto::DescribeResult,
    },
    StoreSql {},
    CloseSql {},
    GetAutocommit {
        is_autocommit: bool,
    },
}

/// What to do after a client message.
enum Reply {
    Send(ServerMsg),
    /// Send the message, then close the socket (a failed `hello`).
    SendAndClose(ServerMsg),
    /// Close the socket: the client broke the protocol.
    Close {
        code: u16,
        reason: String,
    },
}

enum WsStream {
    Ready(ClientConnection),
    /// `open_stream` failed: requests get `STREAM_NOT_OPEN` until the stream is closed.
    Failed,
    /// A cursor runs on the stream's connection (and hands it back when closed).
    Cursor(OpenCursor),
}

struct OpenCursor {
    id: i32,
    entries: mpsc::Receiver<proto::CursorEntry>,
    /// Answers the cursor's connection when its batch has ended.
    producer: oneshot::Receiver<ClientConnection>,
    /// Its place among the open cursors, until it is closed.
    _permit: Permit,
}

struct Session {
    state: Arc<DataPlaneState>,
    db: Arc<Database>,
    /// An encrypted database's key, checked at the upgrade and again at every stream's
    /// opening (a rotation ends it).
    key: Option<Arc<atoll_storage::encryption::EncryptionKey>>,
    version: Version,
    /// Set by a successful `hello`.
    access: Option<DbAccess>,
    /// The token of the last successful `hello`: checked again before every request, so
    /// an expired token, a rotated key or a database that went away ends the session's
    /// rights at once, as it does over HTTP.
    jwt: Option<String>,
    streams: HashMap<i32, WsStream>,
    /// The places among the node's open streams held by this session's open streams.
    stream_permits: HashMap<i32, Permit>,
    sqls: SqlStore,
    /// Open cursors and their streams; `None` for a cursor that failed to open.
    cursors: HashMap<i32, Option<i32>>,
}

impl Session {
    fn new(
        state: Arc<DataPlaneState>,
        db: Arc<Database>,
        key: Option<Arc<atoll_storage::encryption::EncryptionKey>>,
        version: Version,
    ) -> Session {
        Session {
            state,
            db,
            key,
            version,
            access: None,
            jwt: None,
            streams: HashMap::new(),
            stream_permits: HashMap::new(),
            sqls: SqlStore::new(MAX_WS_STORED_SQL),
            cursors: HashMap::new(),
        }
    }

    async fn serve(mut self, mut socket: WebSocket) {
        let idle_timeout = self.state.limits.websocket_idle_timeout;
        let mut ticks = tokio::time::interval(SESSION_TICK);
        let mut last_message = Instant::now();
        loop {
            let message = tokio::select! {
                received = socket.recv() => match received {
                    Some(Ok(message)) => message,
                    _ => break,
                },
                _ = ticks.tick() => {
                    // A silent client would otherwise hold its streams (connections,
                    // maybe a write transaction) for as long as the TCP connection lives.
                    if last_message.elapsed() >= idle_timeout {
                        let frame = CloseFrame {
                            code: close_code::AWAY,
                            reason: "Idle timeout: no message from the client".into(),
                        };
                        let _ = socket.send(Message::Close(Some(frame))).await;
                        break;
                    }
                    self.yield_write_locks().await;
                    continue;
                }
            };
            last_message = Instant::now();
            let reply = match message {
                Message::Text(text) => self.handle(text.as_str()).await,
                Message::Binary(_) => Reply::Close {
                    code: close_code::UNSUPPORTED,
                    reason: "Received a binary WebSocket message, which is not supported in this encoding"
                        .into(),
                },
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            let (message, close) = match reply {
                Reply::Send(message) => (Some(message), None),
                Reply::SendAndClose(message) => (
                    Some(message),
                    Some((close_code::POLICY, "Authentication failed".to_string())),
                ),
                Reply::Close { code, reason } => (None, Some((code, reason))),
            };
            if let Some(message) = message {
                let Ok(text) = serde_json::to_string(&message) else {
                    break;
                };
                if socket.send(Message::Text(text.into())).await.is_err() {
                    break;
                }
            }
            if let Some((code, reason)) = close {
                let frame = CloseFrame {
                    code,
                    reason: close_reason(&reason).into(),
                };
                let _ = socket.send(Message::Close(Some(frame))).await;
                break;
            }
        }
        self.close_all().await;
    }

    async fn handle(&mut self, text: &str) -> Reply {
        let message: ClientMsg = match serde_json::from_str(text) {
            Ok(message) => message,
            Err(e) => {
                return Reply::Close {
                    code: close_code::INVALID,
                    reason: format!("Cannot deserialize client message from JSON: {e}"),
                }
            }
        };
        let (request_id, request) = match message {
            ClientMsg::Hello { jwt } => return self.hello(jwt),
            ClientMsg::Request {
                request_id,
                request,
            } => (request_id, request),
        };
        if self.access.is_none() {
            return Reply::Close {
                code: close_code::POLICY,
                reason: "Received a request before hello message".into(),
            };
        }
        if let Err(error) = self.recheck_credentials() {
            // Every request fails until a `hello` with a token that works.
            return Reply::Send(ServerMsg::ResponseError { request_id, error });
        }
        match self.request(request).await {
            Ok(Ok(response)) => Reply::Send(ServerMsg::ResponseOk {
                request_id,
                response,
            }),
            Ok(Err(error)) => Reply::Send(ServerMsg::ResponseError { request_id, error }),
            Err(HranaError::Protocol(reason)) => Reply::Close {
                code: close_code::POLICY,
                reason,
            },
            Err(error) => Reply::Send(ServerMsg::ResponseError {
                request_id,
                error: error.to_hrana_error(),
            }),
        }
    }

    fn hello(&mut self, jwt: Option<String>) -> Reply {
        if self.access.is_some() && self.version < Version::Hrana2 {
            return Reply::Close {
                code: close_code::POLICY,
                reason:
                    "Repeated hello message is only supported in protocol version hrana2 and higher"
                        .into(),
            };
        }
        let authenticated = match &jwt {
            Some(jwt) => authenticate(&self.db, &format!("Bearer {jwt}"), unix_now())
                .map_err(|error| hrana_error(hello_error_code(&error), error.to_string())),
            None => Err(hrana_error(
                "AUTH_JWT_MISSING",
                "Unauthorized: `a token is required in the hello message`",
            )),
        };
        match authenticated {
            Ok(access) => {
                self.access = Some(access);
                self.jwt = jwt;
                Reply::Send(ServerMsg::HelloOk {})
            }
            Err(error) => {
                // Later requests must not run on the old credentials.
                self.access = None;
                self.jwt = None;
                Reply::SendAndClose(ServerMsg::HelloError { error })
            }
        }
    }

    /// Checks the session's token again (expiry, the database's current keys) and the
    /// database's state, as every HTTP request is checked.
    fn recheck_credentials(&mut self) -> Result<(), proto::Error> {
        let Some(jwt) = &self.jwt else {
            return Err(hrana_error("AUTH_FAILED", "Unauthorized: no token"));
        };
        let access = authenticate(&self.db, &format!("Bearer {jwt}"), unix_now())
            .map_err(|error| hrana_error(hello_error_code(&error), error.to_string()))?;
        if Some(&access) != self.access.as_ref() {
            // A configuration change cannot widen a token's rights, but stay exact.
            self.access = Some(access);
        }
        self.db
            .ensure_queryable()
            .map_err(|error| HranaError::from(error).to_hrana_error())
    }

    /// Rolls back the transactions of idle streams that hold the write lock while
    /// another writer waits (`write_lock`); their next request is told
    /// `TRANSACTION_TIMEOUT`.
    async fn yield_write_locks(&mut self) {
        let timeout = self.state.node.sandbox().transaction_timeout;
        let due: Vec<i32> = self
            .streams
            .iter()
            .filter_map(|(id, stream)| match stream {
                WsStream::Ready(conn) if conn.may_have_to_yield(&self.db, timeout) => Some(*id),
                _ => None,
            })
            .collect();
        for stream_id in due {
            let Some(WsStream::Ready(conn)) = self.streams.remove(&stream_id) else {
                continue;
            };
            let db = Arc::clone(&self.db);
            let yielded = blocking(&self.state.node, &self.db, move || {
                conn.yield_write_lock_if_due(&db, timeout);
                conn
            })
            .await;
            // If the SQL thread died with it, the stream is failed.
            let stream = match yielded {
                Ok(conn) => WsStream::Ready(conn),
                Err(_) => WsStream::Failed,
            };
            self.streams.insert(stream_id, stream);
        }
    }

    async fn request(&mut self, request: WsRequest) -> Result<Outcome<WsResponse>, HranaError> {
        match request {
            WsRequest::OpenStream { stream_id } => self.open_stream(stream_id).await,
            WsRequest::CloseStream { stream_id } => {
                let stream = self
                    .streams
                    .remove(&stream_id)
                    .ok_or_else(|| stream_not_found(stream_id))?;
                self.stream_permits.remove(&stream_id);
                if let WsStream::Cursor(cursor) = &stream {
                    self.cursors.remove(&cursor.id);
                }
                if let Some(conn) = stop_stream(stream).await {
                    self.give_back(conn);
                }
                Ok(Ok(WsResponse::CloseStream {}))
            }
            WsRequest::Execute { stream_id, stmt } => {
                let sql = self
                    .sqls
                    .resolve(stmt.sql.as_deref(), stmt.sql_id, self.version)?
                    .to_string();
                if let Some(served) = self.read_inline(stream_id, &stmt, &sql) {
                    return served
                        .map(|outcome| outcome.map(|result| WsResponse::Execute { result }));
                }
                self.with_connection(stream_id, move |run| {
                    run.authorize(&sql)?;
                    Ok(run
                        .execute(&stmt, &sql)?
                        .map(|result| WsResponse::Execute { result }))
                })
                .await
            }
            WsRequest::Batch { stream_id, batch } => {
                let batch = self.inline_texts(batch)?;
                self.with_connection(stream_id, move |run| {
                    let no_texts = SqlStore::new(0);
                    run.authorize_batch(&batch, &no_texts)?;
                    let result = run.batch(&batch, &no_texts)?;
                    Ok(Ok(WsResponse::Batch { result }))
                })
                .await
            }
            WsRequest::Sequence {
                stream_id,
                sql,
                sql_id,
            } => {
                self.require(Version::Hrana2, "The `sequence` request")?;
                let sql = self
                    .sqls
                    .resolve(sql.as_deref(), sql_id, self.version)?
                    .to_string();
                self.with_connection(stream_id, move |run| {
                    run.authorize(&sql)?;
                    Ok(run.sequence(&sql)?.map(|()| WsResponse::Sequence {}))
                })
                .await
            }
            WsRequest::Describe {
                stream_id,
                sql,
                sql_id,
            } => {
                self.require(Version::Hrana2, "The `describe` request")?;
                let sql = self
                    .sqls
                    .resolve(sql.as_deref(), sql_id, self.version)?
                    .to_string();
                self.with_connection(stream_id, move |run| {
                    Ok(run
                        .describe(&sql)
                        .map(|result| WsResponse::Describe { result }))
                })
                .await
            }
            WsRequest::StoreSql { sql_id, sql } => {
                self.require(Version::Hrana2, "The `store_sql` request")?;
                Ok(self
                    .sqls
                    .store(sql_id, sql)?
                    .map(|()| WsResponse::StoreSql {}))
            }
            WsRequest::CloseSql { sql_id } => {
                self.require(Version::Hrana2, "The `close_sql` request")?;
                self.sqls.close(sql_id);
                Ok(Ok(WsResponse::CloseSql {}))
            }
            WsRequest::GetAutocommit { stream_id } => {
                self.require(Version::Hrana3, "The `get_autocommit` request")?;
                self.with_connection(stream_id, |run| {
                    Ok(Ok(WsResponse::GetAutocommit {
                        is_autocommit: run.is_autocommit(),
                    }))
                })
                .await
            }
            WsRequest::OpenCursor {
                stream_id,
                cursor_id,
                batch,
            } => {
                self.require(Version::Hrana3, "The `open_cursor` request")?;
                self.open_cursor(stream_id, cursor_id, batch).await
            }
            WsRequest::FetchCursor {
                cursor_id,
                max_count,
            } => {
                self.require(Version::Hrana3, "The `fetch_cursor` request")?;
                self.fetch_cursor(cursor_id, max_count).await
            }
            WsRequest::CloseCursor { cursor_id } => {
                self.require(Version::Hrana3, "The `close_cursor` request")?;
                let stream_id = self
                    .cursors
                    .remove(&cursor_id)
                    .ok_or_else(|| cursor_not_found(cursor_id))?;
                if let Some(stream_id) = stream_id {
                    if let Some(WsStream::Cursor(cursor)) = self.streams.remove(&stream_id) {
                        let stream = match stop_cursor(cursor).await {
                            Some(conn) => WsStream::Ready(conn),
                            None => WsStream::Failed,
                        };
                        self.streams.insert(stream_id, stream);
                    }
                }
                Ok(Ok(WsResponse::CloseCursor {}))
            }
        }
    }

    async fn open_stream(&mut self, stream_id: i32) -> Result<Outcome<WsResponse>, HranaError> {
        if self.streams.contains_key(&stream_id) {
            return Err(HranaError::Protocol(format!(
                "Stream {stream_id} already exists"
            )));
        }
        // Failed streams keep their ids until closed: bound what one socket can hold.
        let most = ids_per_socket(self.state.limits.max_streams_per_database);
        if self.streams.len() >= most {
            return Err(HranaError::Protocol(format!(
                "Too many streams on this connection (limit {most})"
            )));
        }
        let permit = match super::stream::acquire_stream_permit(&self.state, &self.db) {
            Ok(permit) => permit,
            Err(refused) => {
                self.streams.insert(stream_id, WsStream::Failed);
                return Ok(Err(hrana_error(
                    "STREAM_NOT_OPEN",
                    format!("Stream {stream_id} has failed to open: {}", refused.message),
                )));
            }
        };
        let node = Arc::clone(&self.state.node);
        let db = Arc::clone(&self.db);
        let mode = self.caller().mode();
        let key = self.key.clone();
        if let Some(conn) = self.idle_connection(mode) {
            self.streams.insert(stream_id, WsStream::Ready(conn));
            self.stream_permits.insert(stream_id, permit);
            return Ok(Ok(WsResponse::OpenStream {}));
        }
        let opened = blocking(&self.state.node, &self.db, move || {
            db.ensure_queryable()?;
            if let Some(key) = &key {
                crate::encryption::still_the_key(&db, key)?;
            }
            ClientConnection::checkout(&node, &db, mode, key.as_deref())
        })
        .await?;
        match opened {
            Ok(conn) => {
                self.streams.insert(stream_id, WsStream::Ready(conn));
                self.stream_permits.insert(stream_id, permit);
                Ok(Ok(WsResponse::OpenStream {}))
            }
            Err(error) => {
                // The id stays taken until the client closes it.
                self.streams.insert(stream_id, WsStream::Failed);
                Ok(Err(hrana_error(
                    "STREAM_NOT_OPEN",
                    format!("Stream {stream_id} has failed to open: {error}"),
                )))
            }
        }
    }

    async fn open_cursor(
        &mut self,
        stream_id: i32,
        cursor_id: i32,
        batch: proto::Batch,
    ) -> Result<Outcome<WsResponse>, HranaError> {
        if self.cursors.contains_key(&cursor_id) {
            return Err(HranaError::Protocol(format!(
                "Cursor {cursor_id} already exists"
            )));
        }
        // Failed cursors keep their ids until closed: bound what one socket can hold.
        let most = ids_per_socket(self.state.limits.max_cursors_per_database);
        if self.cursors.len() >= most {
            return Err(HranaError::Protocol(format!(
                "Too many cursors on this connection (limit {most})"
            )));
        }
        // Until it opens, the cursor id is taken by a failed cursor.
        self.cursors.insert(cursor_id, None);
        let config = self.db.config();
        let permit = match self
            .state
            .open_cursors
            .acquire(self.db.id(), &config.org_id)
        {
            Ok(permit) => permit,
            Err(refused) => {
                return Ok(Err(hrana_error(
                    "CURSOR_NOT_OPEN",
                    format!("Cursor {cursor_id} has failed to open: {}", refused.message),
                )))
            }
        };
        let batch = self.inline_texts(batch)?;
        let caller = self.caller();
        let conn = match self.take_connection(stream_id)? {
            Ok(conn) => conn,
            Err(error) => return Ok(Err(error)),
        };
        let (conn, batch, checked) = blocking(&self.state.node, &self.db, move || {
            let (conn, ready) = conn.for_caller(&caller);
            if let Err(error) = ready {
                return (conn, batch, Ok(Err(error)));
            }
            let checked = check_cursor(&caller, &conn, &batch, &SqlStore::new(0));
            (conn, batch, checked.map(Ok))
        })
        .await?;
        match checked {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                self.streams.insert(stream_id, WsStream::Ready(conn));
                return Ok(Err(error));
            }
            Err(error) => {
                self.streams.insert(stream_id, WsStream::Ready(conn));
                return Err(error);
            }
        }
        let caller = self.caller();
        let (entries_tx, entries) = mpsc::channel(CURSOR_BUFFER);
        let (done, producer) = oneshot::channel();
        self.state.node.sql().spawn_for(&config.org_id, move || {
            // A failure ends the cursor with an `error` entry; the stream stays usable.
            let _ = run_cursor(&caller, &conn, &batch, &SqlStore::new(0), |entry| {
                entries_tx.blocking_send(entry).is_ok()
            });
            let _ = done.send(conn);
        });
        self.streams.insert(
            stream_id,
            WsStream::Cursor(OpenCursor {
                id: cursor_id,
                entries,
                producer,
                _permit: permit,
            }),
        );
        self.cursors.insert(cursor_id, Some(stream_id));
        Ok(Ok(WsResponse::OpenCursor {}))
    }

    async fn fetch_cursor(
        &mut self,
        cursor_id: i32,
        max_count: u32,
    ) -> Result<Outcome<WsResponse>, HranaError> {
        let stream_id = match self.cursors.get(&cursor_id) {
            None => return Err(cursor_not_found(cursor_id)),
            Some(None) => {
                return Ok(Err(hrana_error(
                    "CURSOR_NOT_OPEN",
                    format!("Cursor {cursor_id} has failed to open"),
                )))
            }
            Some(Some(stream_id)) => *stream_id,
        };
        let Some(WsStream::Cursor(cursor)) = self.streams.get_mut(&stream_id) else {
            return Ok(Err(hrana_error(
                "CURSOR_NOT_OPEN",
                format!("Cursor {cursor_id} has failed to open"),
            )));
        };
        let mut entries = Vec::new();
        let mut done = false;
        while entries.len() < max_count as usize {
            match cursor.entries.recv().await {
                Some(entry) => entries.push(JsonCursorEntry(entry)),
                None => {
                    done = true;
                    break;
                }
            }
        }
        Ok(Ok(WsResponse::FetchCursor { entries, done }))
    }

    /// Runs `work` on a stream's connection, on a blocking thread.
    async fn with_connection<T: Send + 'static>(
        &mut self,
        stream_id: i32,
        work: impl FnOnce(&Run<'_>) -> Result<Outcome<T>, HranaError> + Send + 'static,
    ) -> Result<Outcome<T>, HranaError> {
        let conn = match self.take_connection(stream_id)? {
            Ok(conn) => conn,
            Err(error) => return Ok(Err(error)),
        };
        let caller = self.caller();
        // If the task dies, the stream stays failed.
        let (conn, outcome) = blocking(&self.state.node, &self.db, move || {
            let (conn, ready) = conn.for_caller(&caller);
            if let Err(error) = ready {
                return (conn, Ok(Err(error)));
            }
            let outcome = Run::start(&caller, &conn).and_then(|run| work(&run));
            (conn, outcome)
        })
        .await?;
        self.streams.insert(stream_id, WsStream::Ready(conn));
        outcome
    }

    /// Takes a ready stream's connection out (the stream counts as failed until it is
    /// put back).
    fn take_connection(&mut self, stream_id: i32) -> Result<Outcome<ClientConnection>, HranaError> {
        // The database may have been archived since the stream opened.
        self.db.ensure_queryable()?;
        let stream = self
            .streams
            .get_mut(&stream_id)
            .ok_or_else(|| stream_not_found(stream_id))?;
        match std::mem::replace(stream, WsStream::Failed) {
            WsStream::Ready(conn) => Ok(Ok(conn)),
            WsStream::Failed => Ok(Err(hrana_error(
                "STREAM_NOT_OPEN",
                format!("Stream {stream_id} has failed to open"),
            ))),
            cursor @ WsStream::Cursor(_) => {
                *stream = cursor;
                Err(HranaError::Protocol(format!(
                    "Stream {stream_id} has an open cursor"
                )))
            }
        }
    }

    /// Replaces stored SQL ids in a batch by their texts, so the batch can run off the
    /// session.
    fn inline_texts(&self, mut batch: proto::Batch) -> Result<proto::Batch, HranaError> {
        for step in &mut batch.steps {
            let sql = self
                .sqls
                .resolve(step.stmt.sql.as_deref(), step.stmt.sql_id, self.version)?
                .to_string();
            step.stmt.sql = Some(sql);
            step.stmt.sql_id = None;
        }
        Ok(batch)
    }

    fn caller(&self) -> Caller {
        Caller {
            node: Arc::clone(&self.state.node),
            db: Arc::clone(&self.db),
            access: self.access.clone().unwrap_or(DbAccess {
                write: false,
                attach: Vec::new(),
            }),
            key: self.key.clone(),
            version: self.version,
            // A statement is bounded by its deadline; the socket is not watched while
            // one runs.
            cancel: None,
        }
    }

    fn require(&self, version: Version, what: &str) -> Result<(), HranaError> {
        if self.version < version {
            return Err(HranaError::Protocol(format!(
                "{what} is only supported in protocol version {version} and higher"
            )));
        }
        Ok(())
    }

    /// Hands a connection back to the pool, here on the async worker: what has to be
    /// closed instead (a connection inside a transaction, those the pool evicts) is closed
    /// on an SQL thread (`ClientConnection::give_back_on_worker`).
    fn give_back(&self, conn: ClientConnection) {
        conn.give_back_on_worker(&self.state.node, self.db.id());
    }

    /// Whether the async worker may serve this database at all: its reads are not kept off
    /// the workers, and it can be queried now (otherwise an SQL thread answers, with the
    /// error when there is one).
    fn worker_may_serve(&self) -> bool {
        self.db.inline_allowed() && self.db.ensure_queryable().is_ok()
    }

    /// A stream's connection taken from the pool's idle ones on the async worker, as an
    /// HTTP read takes one (`http::serve_inline`): no trip to an SQL thread and back for
    /// the `open_stream` every `execute` of `@libsql/client` starts with. `None` (open it on
    /// an SQL thread): the database is encrypted (its key is checked there), its reads are
    /// kept off the workers, or it has no idle connection of the caller's mode.
    fn idle_connection(&self, mode: crate::sandbox::Mode) -> Option<ClientConnection> {
        if self.key.is_some() || !self.worker_may_serve() {
            return None;
        }
        let conn = self.state.node.pool.checkout_idle(&self.db, mode)?;
        Some(ClientConnection::new(conn))
    }

    /// A stream's `execute` of one statement that only reads, run on the async worker
    /// within the inline budget (`http::read_inline`): the stream must be ready, outside a
    /// transaction, and opened for the caller's current rights. `None`: run it on an SQL
    /// thread as any other request.
    fn read_inline(
        &self,
        stream_id: i32,
        stmt: &proto::Stmt,
        sql: &str,
    ) -> Option<Result<Outcome<proto::StmtResult>, HranaError>> {
        if self.db.is_replica() || !self.worker_may_serve() {
            return None;
        }
        let Some(WsStream::Ready(conn)) = self.streams.get(&stream_id) else {
            return None;
        };
        let caller = self.caller();
        if conn.mode() != caller.mode() || !conn.is_autocommit() {
            return None;
        }
        super::http::read_inline(&caller, conn, stmt, sql)
    }

    /// Gives every connection back when the socket ends.
    async fn close_all(&mut self) {
        for (_, stream) in std::mem::take(&mut self.streams) {
            if let Some(conn) = stop_stream(stream).await {
                self.give_back(conn);
            }
        }
    }
}

/// Ends whatever runs on a stream and answers its connection, if it still has one.
async fn stop_stream(stream: WsStream) -> Option<ClientConnection> {
    match stream {
        WsStream::Ready(conn) => Some(conn),
        WsStream::Failed => None,
        WsStream::Cursor(cursor) => stop_cursor(cursor).await,
    }
}

/// Stops a cursor (its batch ends at the next entry it cannot deliver) and answers the
/// connection it ran on.
async fn stop_cursor(cursor: OpenCursor) -> Option<ClientConnection> {
    drop(cursor.entries);
    cursor.producer.await.ok()
}

/// Stream or cursor ids one socket may hold, open or failed (failed ones hold no
/// resources but memory): the per-database cap of open ones, and room for failures.
fn ids_per_socket(open_per_database: usize) -> usize {
    open_per_database.max(1024)
}

fn stream_not_found(stream_id: i32) -> HranaError {
    HranaError::Protocol(format!("Stream {stream_id} not found"))
}

fn cursor_not_found(cursor_id: i32) -> HranaError {
    HranaError::Protocol(format!("Cursor {cursor_id} not found"))
}

fn hello_error_code(error: &DataError) -> &'static str {
    match error {
        DataError::Unauthorized(message) if *message == JwtError::Expired.to_string() => {
            "AUTH_JWT_EXPIRED"
        }
        DataError::Unauthorized(message)
            if *message == JwtError::Invalid.to_string()
                || *message == JwtError::NotForThisDatabase.to_string() =>
        {
            "AUTH_JWT_INVALID"
        }
        _ => "AUTH_FAILED",
    }
}

/// Close reasons must fit in a control frame (123 bytes).
fn close_reason(reason: &str) -> String {
    let mut end = reason.len().min(120);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_string()
}
