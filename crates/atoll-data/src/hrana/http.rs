//! Hrana over HTTP, versions 2 and 3: `POST /v2/pipeline`, `/v3/pipeline`, `/v3/cursor`
//! (JSON) and `/v3-protobuf/pipeline`, `/v3-protobuf/cursor` (protobuf).
//!
//! A pipeline is a list of stream requests run in order on the stream its baton names
//! (or on a new one), each answered by one result. Before any of them runs, every
//! statement in the pipeline is checked against the caller's rights, so a refused
//! request changes nothing.

use super::cursor::{check_cursor, run_cursor, JsonCursorEntry, CURSOR_BUFFER};
use super::exec::{Caller, ClientConnection, Outcome, Run};
use super::stream::HttpStream;
use super::{blocking, Encoding, HranaBody, HranaError, Version};
use crate::auth::{DbRequest, KeyedDbRequest};
use crate::error::DataError;
use crate::node::Node;
use crate::sandbox::{CancelToken, SandboxedConnection};
use crate::DataPlaneState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use libsql_hrana::proto;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often idle streams are checked for expiry.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

pub(super) async fn pipeline_v2(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(request): KeyedDbRequest,
    HranaBody(body): HranaBody,
) -> Response {
    respond(
        pipeline(state, request, body, Version::Hrana2, Encoding::Json).await,
        Encoding::Json,
    )
}

pub(super) async fn pipeline_v3(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(request): KeyedDbRequest,
    HranaBody(body): HranaBody,
) -> Response {
    respond(
        pipeline(state, request, body, Version::Hrana3, Encoding::Json).await,
        Encoding::Json,
    )
}

pub(super) async fn pipeline_v3_protobuf(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(request): KeyedDbRequest,
    HranaBody(body): HranaBody,
) -> Response {
    respond(
        pipeline(state, request, body, Version::Hrana3, Encoding::Protobuf).await,
        Encoding::Protobuf,
    )
}

pub(super) async fn cursor_v3(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(request): KeyedDbRequest,
    HranaBody(body): HranaBody,
) -> Response {
    respond(
        cursor(state, request, body, Encoding::Json).await,
        Encoding::Json,
    )
}

pub(super) async fn cursor_v3_protobuf(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(request): KeyedDbRequest,
    HranaBody(body): HranaBody,
) -> Response {
    respond(
        cursor(state, request, body, Encoding::Protobuf).await,
        Encoding::Protobuf,
    )
}

fn respond(result: Result<Response, HranaError>, encoding: Encoding) -> Response {
    result.unwrap_or_else(|error| error.into_response(encoding))
}

async fn pipeline(
    state: Arc<DataPlaneState>,
    request: DbRequest,
    body: Bytes,
    version: Version,
    encoding: Encoding,
) -> Result<Response, HranaError> {
    request.db.ensure_queryable()?;
    let body: proto::PipelineReqBody = decode(&body, encoding)?;
    if request.db.is_replica()
        && (body.baton.is_some()
            || !matches!(body.requests.last(), Some(proto::StreamRequest::Close(_))))
    {
        // A stream that outlives the request holds a connection to one copy: the
        // primary's, which takes writes.
        return Ok(crate::replication::routing::to_primary());
    }
    // A replica answers a client that saw index N (a `replication_index` it sends back)
    // only once it applied N, waiting a little; otherwise the primary answers.
    let replica = if request.db.is_replica() {
        state.node.replicas.get(request.db.id())
    } else {
        None
    };
    if let Some(replica) = &replica {
        let wanted = wanted_replication_index(&body.requests);
        if wanted > replica.applied() && !replica.wait_applied(wanted).await {
            return Ok(crate::replication::routing::to_primary());
        }
    }
    // What the replica had applied before it read: its results show at least that state.
    let applied = replica.map(|r| r.applied());
    let cancel = CancelToken::new();
    // The client going away interrupts the statement it is waiting for.
    let _cancel_on_drop = cancel.cancel_on_drop();
    let caller = Caller {
        node: Arc::clone(&state.node),
        db: request.db,
        access: request.access,
        key: request.key,
        version,
        cancel: Some(cancel),
    };
    if let Some(served) = serve_inline(&caller, &body) {
        return Ok(encode(
            &proto::PipelineRespBody {
                baton: None,
                base_url: None,
                results: served?,
            },
            encoding,
        ));
    }
    start_sweeper(&state);
    let stream_state = Arc::clone(&state);
    // One trip to an SQL thread per request: taking a pooled connection (which may
    // open one) happens there too. The SQL thread owns the stream to the end, even if
    // this request is abandoned.
    let db = Arc::clone(&caller.db);
    let close_after = body.baton.is_none() && runs_one_whole_transaction(&body.requests);
    let served = blocking(&state.node, &db, move || {
        let mut lease = open_stream(&stream_state, &caller, body.baton.as_deref())?;
        if caller.db.is_replica() && !reads_only(&caller, lease.stream(), &body.requests)? {
            lease.discard(&caller.node);
            return Ok(None);
        }
        run_leased_pipeline(&caller, lease, body.requests, close_after).map(Some)
    })
    .await??;
    let Some((baton, mut results)) = served else {
        return Ok(crate::replication::routing::to_primary());
    };
    if let Some(applied) = applied {
        stamp_replication_index(&mut results, applied);
    }
    Ok(encode(
        &proto::PipelineRespBody {
            baton,
            base_url: None,
            results,
        },
        encoding,
    ))
}

/// How much CPU time a read may use on the async worker that received it (`serve_inline`),
/// and by default what a database's last open may have cost to be opened there too
/// (`SandboxSettings::inline_open_cpu`).
pub(crate) const INLINE_BUDGET: Duration = Duration::from_micros(500);
/// How long by the clock it may hold the worker: a read that waits (pages from a disk)
/// rather than computes. Far above [`INLINE_BUDGET`] because the clock also runs while
/// the worker waits for a core, which on a busy node takes milliseconds.
const INLINE_WALL_LIMIT: Duration = Duration::from_millis(20);
/// After one of a database's reads ran over [`INLINE_BUDGET`], its requests go to the SQL
/// threads for this long.
const INLINE_PAUSE: Duration = Duration::from_secs(10);
/// The longest SQL text read on the worker: parsing happens before the budget is armed
/// (the statement is prepared to learn whether it only reads), and a point read is short.
const INLINE_MAX_SQL_BYTES: usize = 4096;
/// A database with no idle connection is opened on the worker only if its last open cost
/// at most `SandboxSettings::inline_open_cpu` (`crate::open_cost`: the schema it parses),
/// and its WAL is at most this long (a first open reads all of it into the WAL index: a
/// few hundred microseconds per MiB).
const INLINE_OPEN_MAX_WAL_BYTES: u64 = 1 << 20;

/// The most common request — one statement that only reads, then `close`, on no stream —
/// answered on the async worker that received it, when the database has an idle pooled
/// connection: no trip to an SQL thread and back, which on a small machine is most of a
/// point select's time (docs/PERFORMANCE.md). Tenant SQL still runs in its sandbox; what
/// keeps a worker from being held is a budget: a statement still running after
/// [`INLINE_BUDGET`] of the worker's CPU time (or [`INLINE_WALL_LIMIT`] by the clock) is
/// interrupted, its result thrown away (it only read, and an
/// interrupted statement is not metered), and the request runs on an SQL thread as any
/// other; the database's reads then stay off the workers for [`INLINE_PAUSE`]. A lock held
/// by another connection is not waited for here either (`SQLITE_BUSY` sends the request
/// to an SQL thread, where it waits as usual). `None`: serve it the usual way.
///
/// A database with no idle connection is opened here too, when opening it is known to be
/// cheap ([`open_inline`]): a first query after a while then costs its open, not also two
/// trips between threads (PERFORMANCE.md, "A cold open on the worker").
fn serve_inline(
    caller: &Caller,
    body: &proto::PipelineReqBody,
) -> Option<Result<Vec<proto::StreamResult>, HranaError>> {
    if body.baton.is_some() || caller.db.is_replica() || !caller.db.inline_allowed() {
        return None;
    }
    let [proto::StreamRequest::Execute(execute), proto::StreamRequest::Close(_)] =
        body.requests.as_slice()
    else {
        return None;
    };
    let sql = execute
        .stmt
        .sql
        .as_deref()
        .filter(|sql| sql.len() <= INLINE_MAX_SQL_BYTES)?;
    let conn = match caller.node.pool.checkout_idle(&caller.db, caller.mode()) {
        Some(conn) => conn,
        None => open_inline(caller)?,
    };
    let conn = ClientConnection::new(conn);
    let served = read_inline(caller, &conn, &execute.stmt, sql);
    conn.give_back_on_worker(&caller.node, caller.db.id());
    Some(served?.map(|outcome| {
        let execute = match outcome {
            Ok(result) => proto::StreamResult::Ok {
                response: proto::StreamResponse::Execute(proto::ExecuteStreamResp { result }),
            },
            Err(error) => proto::StreamResult::Error { error },
        };
        vec![
            execute,
            proto::StreamResult::Ok {
                response: proto::StreamResponse::Close(proto::CloseStreamResp {}),
            },
        ]
    }))
}

/// One statement on `conn` (autocommit, the caller's sandbox mode) run on this async
/// worker if it only reads, within [`INLINE_BUDGET`] of the worker's CPU time (or
/// [`INLINE_WALL_LIMIT`] by the clock) and without waiting for another connection's lock
/// ([`serve_inline`] says why). `None`: it may write, is too long to parse here, ran over
/// its budget (interrupted, its result thrown away, the database's reads kept off the
/// workers for [`INLINE_PAUSE`]) or met a lock — run it on an SQL thread. Shared by the
/// HTTP pipeline and the WebSocket sessions (`ws`, a stream's `execute`).
pub(super) fn read_inline(
    caller: &Caller,
    conn: &ClientConnection,
    stmt: &proto::Stmt,
    sql: &str,
) -> Option<Result<Outcome<proto::StmtResult>, HranaError>> {
    if sql.len() > INLINE_MAX_SQL_BYTES || !conn.is_read_only(sql) {
        return None;
    }
    let (outcome, overran) = conn.within_budget(INLINE_BUDGET, INLINE_WALL_LIMIT, || {
        let run = Run::start_waiting(caller, conn, Duration::ZERO)?;
        run.authorize(sql)?;
        run.execute(stmt, sql)
    });
    if overran {
        metrics::counter!("atoll_sql_inline_overruns_total").increment(1);
        caller.db.pause_inline(INLINE_PAUSE);
    }
    match outcome {
        _ if overran => None,
        Ok(Err(error)) if error.code == "SQLITE_BUSY" => None,
        served => {
            metrics::counter!("atoll_sql_inline_reads_total").increment(1);
            Some(served)
        }
    }
}

/// A new connection to the caller's database, opened on this async worker, when that is
/// known to be cheap: the database is not encrypted (its key is applied on an SQL thread),
/// its last open cost at most the node's `inline_open_cpu` with no statement since
/// that may have grown its schema (`crate::open_cost`), and its WAL, which a first open
/// reads whole, is at most [`INLINE_OPEN_MAX_WAL_BYTES`]. An open that still costs more
/// (a schema replaced under it by an upload) pauses the database's inline reads as an
/// overrunning read does. One worker opens at a time (`ConnectionPool::open_on_worker`).
/// A failed open is left to the SQL thread, which reports it (or closes idle connections
/// to free descriptors and tries again).
fn open_inline(caller: &Caller) -> Option<SandboxedConnection> {
    let db = &caller.db;
    let budget = caller.node.sandbox().inline_open_cpu;
    if caller.key.is_some()
        || !db.opens_within(budget)
        || db.wal_bytes() > INLINE_OPEN_MAX_WAL_BYTES
    {
        return None;
    }
    let conn = caller.node.pool.open_on_worker(db, caller.mode())?;
    if !db.opens_within(budget) {
        metrics::counter!("atoll_sql_inline_overruns_total").increment(1);
        db.pause_inline(INLINE_PAUSE);
    }
    metrics::counter!("atoll_sql_inline_opens_total").increment(1);
    Some(conn)
}

/// A stream taken by one request. Dropped without being released (the request failed,
/// panicked or was abandoned), the stream is forgotten and its connection closed.
struct Lease {
    state: Arc<DataPlaneState>,
    stream: Option<Box<HttpStream>>,
}

impl Lease {
    fn stream(&mut self) -> &mut HttpStream {
        self.stream
            .as_mut()
            .expect("a lease holds its stream until it ends")
    }

    /// Keeps the stream for the next request; answers its baton (`None` once closed).
    fn release(mut self) -> Option<String> {
        let stream = self.stream.take()?;
        self.state.streams.release(stream)
    }

    /// Drops the stream after a failed request, handing its connection back.
    fn discard(mut self, node: &Node) {
        if let Some(mut stream) = self.stream.take() {
            self.state.streams.remove(stream.id());
            if let Some(conn) = stream.conn.take() {
                conn.give_back(node, stream.db_id());
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take() {
            self.state.streams.remove(stream.id());
        }
    }
}

/// The stream a request continues (by its baton) or a new one. Blocks (a new stream takes
/// a pooled connection, or opens one): call it on a blocking thread, after
/// [`start_sweeper`].
fn open_stream(
    state: &Arc<DataPlaneState>,
    caller: &Caller,
    baton: Option<&str>,
) -> Result<Lease, HranaError> {
    let db_id = caller.db.id();
    let stream = match baton {
        Some(baton) => state.streams.acquire(baton, db_id)?,
        None => {
            let permit = super::stream::acquire_stream_permit(state, &caller.db)
                .map_err(|refused| too_many_open(refused, super::IDLE_TIMEOUT))?;
            let conn = ClientConnection::checkout(
                &caller.node,
                &caller.db,
                caller.mode(),
                caller.key.as_deref(),
            )?;
            state.streams.create(db_id, conn, permit)
        }
    };
    Ok(Lease {
        state: Arc::clone(state),
        stream: Some(stream),
    })
}

/// A refused stream or cursor: 429 (what sqld answers when it throttles), with the time
/// after which idle streams will have expired.
fn too_many_open(refused: super::LimitReached, wait: Duration) -> HranaError {
    DataError::TooManyRequests(refused.message, wait.as_secs().max(1)).into()
}

/// Expires idle streams in the background, for as long as the node serves.
fn start_sweeper(state: &Arc<DataPlaneState>) {
    if !state.streams.claim_sweeper() {
        return;
    }
    let state = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
        loop {
            ticks.tick().await;
            let Some(state) = state.upgrade() else {
                return;
            };
            let node = Arc::clone(&state.node);
            let swept = Arc::clone(&state);
            // Rolling back and closing connections touch files: off the async threads.
            state.node.sql().spawn(move || {
                let expired = swept.streams.sweep(Instant::now());
                for (db_id, conn) in expired {
                    conn.give_back(&node, &db_id);
                }
                swept
                    .streams
                    .yield_write_locks(&node, node.sandbox().transaction_timeout);
            });
        }
    });
}

/// Runs a pipeline, then keeps the stream (answering its next baton) or, if the pipeline
/// failed, drops it.
/// Whether a request on a new stream is one batch that begins a transaction and ends it
/// (`BEGIN …` first, `COMMIT`/`END` last), without `close`: what the Turso Sync client
/// pushes (`crate::sync`), never continuing the stream afterwards. Such a stream is
/// closed once the batch ran and left no transaction open ([`run_leased_pipeline`])
/// rather than left to expire idle ([`super::IDLE_TIMEOUT`]): kept, a client pushing
/// often would hold a connection and a place among the database's and organization's
/// open streams for 10 s per push, and run into their caps. The answer's baton is then
/// `null`, which Hrana clients take as a stream the server closed (a client that does send
/// another request opens a new stream).
fn runs_one_whole_transaction(requests: &[proto::StreamRequest]) -> bool {
    let [proto::StreamRequest::Batch(batch)] = requests else {
        return false;
    };
    let statement = |step: Option<&proto::BatchStep>| {
        step.and_then(|step| step.stmt.sql.as_deref())
            .map(|sql| sql.trim().trim_end_matches(';').trim().to_ascii_uppercase())
            .unwrap_or_default()
    };
    let (first, last) = (
        statement(batch.batch.steps.first()),
        statement(batch.batch.steps.last()),
    );
    batch.batch.steps.len() >= 2
        && (first == "BEGIN" || first.starts_with("BEGIN "))
        && (last == "COMMIT"
            || last == "END"
            || last.starts_with("COMMIT ")
            || last.starts_with("END "))
}

fn run_leased_pipeline(
    caller: &Caller,
    mut lease: Lease,
    requests: Vec<proto::StreamRequest>,
    close_after: bool,
) -> Result<(Option<String>, Vec<proto::StreamResult>), HranaError> {
    match run_pipeline(caller, lease.stream(), requests) {
        Ok(results) => {
            let stream = lease.stream();
            if close_after && stream.conn.as_ref().is_some_and(|c| c.is_autocommit()) {
                if let Some(conn) = stream.conn.take() {
                    conn.give_back(&caller.node, stream.db_id());
                }
            }
            Ok((lease.release(), results))
        }
        Err(error) => {
            lease.discard(&caller.node);
            Err(error)
        }
    }
}

fn run_pipeline(
    caller: &Caller,
    stream: &mut HttpStream,
    requests: Vec<proto::StreamRequest>,
) -> Result<Vec<proto::StreamResult>, HranaError> {
    authorize_pipeline(caller, stream, &requests)?;
    requests
        .into_iter()
        .map(|request| {
            Ok(match run_request(caller, stream, request)? {
                Ok(response) => proto::StreamResult::Ok { response },
                Err(error) => proto::StreamResult::Error { error },
            })
        })
        .collect()
}

/// Checks every statement of the pipeline before any runs, following the SQL texts the
/// pipeline itself stores and closes.
fn authorize_pipeline(
    caller: &Caller,
    stream: &HttpStream,
    requests: &[proto::StreamRequest],
) -> Result<(), HranaError> {
    let Some(conn) = &stream.conn else {
        return Ok(());
    };
    let run = Run::start(caller, conn)?;
    for_each_statement(caller, stream, requests, |sql| run.authorize(sql))
}

/// The largest `replication_index` the pipeline's statements and batches carry: the
/// newest state its client already saw (0: none).
fn wanted_replication_index(requests: &[proto::StreamRequest]) -> u64 {
    requests
        .iter()
        .flat_map(|request| match request {
            proto::StreamRequest::Execute(execute) => vec![execute.stmt.replication_index],
            proto::StreamRequest::Batch(batch) => std::iter::once(batch.batch.replication_index)
                .chain(batch.batch.steps.iter().map(|s| s.stmt.replication_index))
                .collect(),
            proto::StreamRequest::Sequence(sequence) => vec![sequence.replication_index],
            proto::StreamRequest::Describe(describe) => vec![describe.replication_index],
            _ => Vec::new(),
        })
        .flatten()
        .max()
        .unwrap_or(0)
}

/// Gives a replica's results the frame it had applied before it read.
fn stamp_replication_index(results: &mut [proto::StreamResult], applied: u64) {
    for result in results {
        match result {
            proto::StreamResult::Ok {
                response: proto::StreamResponse::Execute(execute),
            } => execute.result.replication_index = Some(applied),
            proto::StreamResult::Ok {
                response: proto::StreamResponse::Batch(batch),
            } => batch.result.replication_index = Some(applied),
            _ => {}
        }
    }
}

/// Whether every statement of the pipeline only reads (a replica serves it itself).
fn reads_only(
    caller: &Caller,
    stream: &HttpStream,
    requests: &[proto::StreamRequest],
) -> Result<bool, HranaError> {
    let Some(conn) = &stream.conn else {
        return Ok(false);
    };
    let mut only_reads = true;
    for_each_statement(caller, stream, requests, |sql| {
        only_reads = only_reads && conn.is_read_only(sql);
        Ok(())
    })?;
    Ok(only_reads)
}

/// Calls `check` with the SQL text of every statement the pipeline runs, following the
/// texts it stores and closes, up to its `close`.
fn for_each_statement(
    caller: &Caller,
    stream: &HttpStream,
    requests: &[proto::StreamRequest],
    mut check: impl FnMut(&str) -> Result<(), HranaError>,
) -> Result<(), HranaError> {
    // Texts stored (`Some`) or closed (`None`) earlier in this pipeline.
    let mut changed: HashMap<i32, Option<&str>> = HashMap::new();
    let text = |sql: &Option<String>, sql_id: Option<i32>, changed: &HashMap<i32, Option<&str>>| {
        match (sql.as_deref(), sql_id) {
            (Some(sql), None) => Some(sql.to_string()),
            (None, Some(id)) => match changed.get(&id) {
                Some(text) => text.map(str::to_string),
                None => stream
                    .sqls
                    .resolve(None, Some(id), caller.version)
                    .ok()
                    .map(str::to_string),
            },
            // Reported as a protocol error when the request runs.
            _ => None,
        }
    };
    for request in requests {
        match request {
            proto::StreamRequest::StoreSql(store) => {
                changed.insert(store.sql_id, Some(&store.sql));
            }
            proto::StreamRequest::CloseSql(close) => {
                changed.insert(close.sql_id, None);
            }
            proto::StreamRequest::Execute(execute) => {
                if let Some(sql) = text(&execute.stmt.sql, execute.stmt.sql_id, &changed) {
                    check(&sql)?;
                }
            }
            proto::StreamRequest::Batch(batch) => {
                for step in &batch.batch.steps {
                    if let Some(sql) = text(&step.stmt.sql, step.stmt.sql_id, &changed) {
                        check(&sql)?;
                    }
                }
            }
            proto::StreamRequest::Sequence(sequence) => {
                if let Some(sql) = text(&sequence.sql, sequence.sql_id, &changed) {
                    check(&sql)?;
                }
            }
            // Nothing runs after the stream is closed.
            proto::StreamRequest::Close(_) => break,
            proto::StreamRequest::Describe(_)
            | proto::StreamRequest::GetAutocommit(_)
            | proto::StreamRequest::None => {}
        }
    }
    Ok(())
}

fn run_request(
    caller: &Caller,
    stream: &mut HttpStream,
    request: proto::StreamRequest,
) -> Result<Outcome<proto::StreamResponse>, HranaError> {
    use proto::StreamResponse as Response;
    Ok(match request {
        proto::StreamRequest::None => {
            return Err(HranaError::Protocol(
                "StreamRequest type not recognized".into(),
            ))
        }
        proto::StreamRequest::Close(_) => {
            if let Some(conn) = stream.conn.take() {
                conn.give_back(&caller.node, stream.db_id());
            }
            Ok(Response::Close(proto::CloseStreamResp {}))
        }
        proto::StreamRequest::Execute(request) => {
            let sql = stream.sqls.resolve(
                request.stmt.sql.as_deref(),
                request.stmt.sql_id,
                caller.version,
            )?;
            Run::start(caller, open_connection(stream)?)?
                .execute(&request.stmt, sql)?
                .map(|result| Response::Execute(proto::ExecuteStreamResp { result }))
        }
        proto::StreamRequest::Batch(request) => {
            let result = Run::start(caller, open_connection(stream)?)?
                .batch(&request.batch, &stream.sqls)?;
            Ok(Response::Batch(proto::BatchStreamResp { result }))
        }
        proto::StreamRequest::Sequence(request) => {
            let sql =
                stream
                    .sqls
                    .resolve(request.sql.as_deref(), request.sql_id, caller.version)?;
            Run::start(caller, open_connection(stream)?)?
                .sequence(sql)?
                .map(|()| Response::Sequence(proto::SequenceStreamResp {}))
        }
        proto::StreamRequest::Describe(request) => {
            let sql =
                stream
                    .sqls
                    .resolve(request.sql.as_deref(), request.sql_id, caller.version)?;
            Run::start(caller, open_connection(stream)?)?
                .describe(sql)
                .map(|result| Response::Describe(proto::DescribeStreamResp { result }))
        }
        proto::StreamRequest::StoreSql(request) => stream
            .sqls
            .store(request.sql_id, request.sql)?
            .map(|()| Response::StoreSql(proto::StoreSqlStreamResp {})),
        proto::StreamRequest::CloseSql(request) => {
            stream.sqls.close(request.sql_id);
            Ok(Response::CloseSql(proto::CloseSqlStreamResp {}))
        }
        proto::StreamRequest::GetAutocommit(_) => {
            if caller.version < Version::Hrana3 {
                return Err(HranaError::Protocol(
                    "The `get_autocommit` request is only supported in protocol version hrana3 and higher"
                        .into(),
                ));
            }
            let is_autocommit = open_connection(stream)?.is_autocommit();
            Ok(Response::GetAutocommit(proto::GetAutocommitStreamResp {
                is_autocommit,
            }))
        }
    })
}

fn open_connection(stream: &HttpStream) -> Result<&ClientConnection, HranaError> {
    stream
        .conn
        .as_ref()
        .ok_or_else(|| HranaError::Protocol("Stream for this baton was closed".into()))
}

/// `/v3/cursor`: runs a batch and streams its entries; the first line (or message) holds
/// the baton.
async fn cursor(
    state: Arc<DataPlaneState>,
    request: DbRequest,
    body: Bytes,
    encoding: Encoding,
) -> Result<Response, HranaError> {
    request.db.ensure_queryable()?;
    let body: proto::CursorReqBody = decode(&body, encoding)?;
    let cancel = CancelToken::new();
    // Until the response starts, the request's future; then the response body's stream.
    let cancel_on_drop = cancel.cancel_on_drop();
    let caller = Caller {
        node: Arc::clone(&state.node),
        db: request.db,
        access: request.access,
        key: request.key,
        version: Version::Hrana3,
        cancel: Some(cancel),
    };
    // Held while the batch runs: a slow reader keeps a blocking thread busy.
    let cursor_permit = state
        .open_cursors
        .acquire(caller.db.id(), &caller.db.config().org_id)
        .map_err(|refused| too_many_open(refused, Duration::from_secs(1)))?;
    start_sweeper(&state);
    let batch = body.batch;
    let (stream_state, baton) = (Arc::clone(&state), body.baton);
    // Checked before the response starts, so refusals still get their HTTP status.
    let db = Arc::clone(&caller.db);
    let (caller, lease, batch) = blocking(&state.node, &db, move || {
        let mut lease = open_stream(&stream_state, &caller, baton.as_deref())?;
        let stream = lease.stream();
        let checked = open_connection(stream)
            .and_then(|conn| check_cursor(&caller, conn, &batch, &stream.sqls));
        match checked {
            Ok(()) => Ok((caller, lease, batch)),
            Err(error) => {
                lease.discard(&caller.node);
                Err(error)
            }
        }
    })
    .await??;

    let head = proto::CursorRespBody {
        baton: lease
            .stream
            .as_ref()
            .map(|stream| state.streams.baton(stream)),
        base_url: None,
    };
    let head = match encoding {
        Encoding::Json => json_line(&head),
        Encoding::Protobuf => Bytes::from(prost::Message::encode_length_delimited_to_vec(&head)),
    };
    let (entries_tx, mut entries_rx) = tokio::sync::mpsc::channel::<Bytes>(CURSOR_BUFFER);
    let tenant = caller.db.config();
    state.node.sql().spawn_for(&tenant.org_id, move || {
        produce_cursor(&caller, lease, &batch, encoding, entries_tx);
        drop(cursor_permit);
    });
    let entries = futures_util::stream::poll_fn(move |cx| {
        // Dropped with the body when the client goes away.
        let _ = &cancel_on_drop;
        entries_rx.poll_recv(cx)
    });
    let body = futures_util::stream::once(async move { head })
        .chain(entries)
        .map(Ok::<_, Infallible>);
    let content_type = match encoding {
        Encoding::Json => "text/plain",
        Encoding::Protobuf => "application/octet-stream",
    };
    Ok((
        [(header::CONTENT_TYPE, content_type)],
        Body::from_stream(body),
    )
        .into_response())
}

/// Runs a cursor's batch, sending encoded entries until it ends or the client leaves,
/// then hands the stream back.
fn produce_cursor(
    caller: &Caller,
    mut lease: Lease,
    batch: &proto::Batch,
    encoding: Encoding,
    entries: tokio::sync::mpsc::Sender<Bytes>,
) {
    // The last entry is held back until the stream is released: a client that acts on
    // it at once (with the baton it already has) then finds the stream ready.
    let mut held_back: Option<Bytes> = None;
    let stream = lease.stream();
    let ran = match &stream.conn {
        Some(conn) => run_cursor(caller, conn, batch, &stream.sqls, |entry| {
            let encoded = match encoding {
                Encoding::Json => json_line(&JsonCursorEntry(entry)),
                Encoding::Protobuf => {
                    Bytes::from(prost::Message::encode_length_delimited_to_vec(&entry))
                }
            };
            match held_back.replace(encoded) {
                Some(previous) => entries.blocking_send(previous).is_ok(),
                None => true,
            }
        }),
        None => Ok(()),
    };
    if ran.is_ok() {
        lease.release();
    } else {
        lease.discard(&caller.node);
    }
    if let Some(last) = held_back {
        let _ = entries.blocking_send(last);
    }
}

fn json_line<T: serde::Serialize>(value: &T) -> Bytes {
    let mut line = serde_json::to_vec(value).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

pub(super) fn decode<T: serde::de::DeserializeOwned + prost::Message + Default>(
    body: &[u8],
    encoding: Encoding,
) -> Result<T, HranaError> {
    match encoding {
        Encoding::Json => serde_json::from_slice(body).map_err(|e| {
            HranaError::Protocol(format!("Cannot deserialize client message from JSON: {e}"))
        }),
        Encoding::Protobuf => T::decode(body).map_err(|e| {
            HranaError::Protocol(format!(
                "Could not decode client message from Protobuf: {e}"
            ))
        }),
    }
}

fn encode<T: serde::Serialize + prost::Message>(body: &T, encoding: Encoding) -> Response {
    let bytes = match encoding {
        Encoding::Json => match serde_json::to_vec(body) {
            Ok(bytes) => bytes,
            Err(e) => {
                return crate::error::DataError::Internal(format!(
                    "cannot encode a Hrana response: {e}"
                ))
                .into_response()
            }
        },
        Encoding::Protobuf => body.encode_to_vec(),
    };
    ([(header::CONTENT_TYPE, encoding.content_type())], bytes).into_response()
}
