//! Getting a whole database out: `GET /info` and `GET /export/{generation}` (the SQLite
//! file, as `turso db export` and libSQL's synced databases fetch it) and `GET /dump`
//! (SQL text, as `turso db shell <db> .dump` fetches it).
//!
//! Both are consistent snapshots taken while writers go on, streamed from a blocking
//! thread without holding the database in memory.

use crate::auth::{DbRequest, KeyedDbRequest};
use crate::database::Database;
use crate::dump::{self, DumpOptions};
use crate::error::DataError;
use crate::node::Node;
use crate::sandbox::Mode;
use crate::DataPlaneState;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use std::io::{Read, Write};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Generation 1 is the live file. With object storage, `GET /info` answers the generation
/// embedded replicas start from instead (`replication::sync_http`), and
/// `GET /export/{g}` for `g ≥ 2` is that state, rebuilt from the log.
pub const CURRENT_GENERATION: u64 = crate::replication::sync_http::LIVE_GENERATION;

/// Bytes handed to the response at a time.
const STREAM_CHUNK: usize = 64 << 10;

pub fn routes() -> Router<Arc<DataPlaneState>> {
    Router::new()
        .route("/info", get(info))
        .route("/export/{generation}", get(export))
        .route("/dump", get(dump_sql))
}

/// `GET /info` → `{"current_generation": g}`: 1 (the live file) on a node without object
/// storage, else the generation of the stored head.
async fn info(KeyedDbRequest(req): KeyedDbRequest) -> Result<Json<serde_json::Value>, DataError> {
    req.db.ensure_queryable()?;
    let generation = crate::replication::sync_http::current_generation(&req.db)
        .await?
        .unwrap_or(CURRENT_GENERATION);
    Ok(Json(json!({ "current_generation": generation })))
}

/// `GET /export/{generation}`: the database file. An encrypted database's (with its key)
/// is copied as ciphertext and decrypted page by page on its way out: the client — who
/// holds the key — gets a plain SQLite file, and no plain copy touches the node's disk.
async fn export(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(req): KeyedDbRequest,
    Path(generation): Path<String>,
) -> Result<Response, DataError> {
    req.db.ensure_queryable()?;
    req.db.ensure_readable()?;
    // Until a transfer's new history is started, the file may still hold the old owner's
    // deleted rows in its free pages (`transfer_history`).
    crate::transfer_history::ensure_started(&req.db)?;
    if let Some(number) = generation
        .parse::<u64>()
        .ok()
        .filter(|&g| g != CURRENT_GENERATION && req.db.log().is_some())
    {
        return export_generation(&state, &req, number).await;
    }
    if generation.parse::<u64>().ok() != Some(CURRENT_GENERATION) {
        return Ok((
            StatusCode::NOT_FOUND,
            Json(json!({
                "error": format!(
                    "generation {generation} does not exist: the current generation is {CURRENT_GENERATION} (GET /info)"
                )
            })),
        )
            .into_response());
    }
    let node = Arc::clone(&state.node);
    let db = Arc::clone(&req.db);
    let key = req.key.clone();
    let (len, body) = stream_from_blocking(
        &state.node,
        &req.db,
        move || {
            let snapshot = match &key {
                Some(_) => sealed_snapshot(&db)?,
                None => snapshot(&node, &db)?,
            };
            let len = snapshot.file.metadata()?.len();
            Ok(((snapshot, key), len))
        },
        |(mut snapshot, key), out| {
            match key {
                Some(key) => copy_decrypting(&mut snapshot.file, &key.page_cipher(), out)?,
                None => copy(&mut snapshot.file, out)?,
            }
            Ok(())
        },
    )
    .await?;
    // Counted when the export starts: a client that hangs up early still cost the copy.
    state.node.meters.record_synced(req.db.id(), len);
    let name = req.db.config().name.clone();
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    // Database names are lowercase letters, digits and dashes; anything else is left out.
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{name}.db\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// `GET /export/{g}` for a generation rebuilt from the log (embedded replicas start there).
async fn export_generation(
    state: &Arc<DataPlaneState>,
    req: &DbRequest,
    generation: u64,
) -> Result<Response, DataError> {
    let file =
        match crate::replication::sync_http::generation_file(state, &req.db, generation).await? {
            Ok(file) => file,
            Err(why) => {
                return Ok((StatusCode::NOT_FOUND, Json(json!({ "error": why }))).into_response());
            }
        };
    let dir = file.parent().map(FsPath::to_path_buf);
    let key = req.key.clone();
    let (len, body) = stream_from_blocking(
        &state.node,
        &req.db,
        move || {
            let opened = std::fs::File::open(&file);
            // Unlinked while open: the copy goes away when the download ends.
            if let Some(dir) = &dir {
                let _ = std::fs::remove_dir_all(dir);
            }
            let opened = opened?;
            let len = opened.metadata()?.len();
            Ok(((opened, key), len))
        },
        // Rebuilt from the log without the key: an encrypted database's pages are
        // decrypted on their way out.
        |(mut file, key), out| match key {
            Some(key) => copy_decrypting(&mut file, &key.page_cipher(), out),
            None => copy(&mut file, out),
        },
    )
    .await?;
    state.node.meters.record_synced(req.db.id(), len);
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    Ok(response)
}

#[derive(serde::Deserialize)]
struct DumpQuery {
    #[serde(default)]
    preserve_row_ids: bool,
}

/// `GET /dump[?preserve_row_ids=true]`: SQL text that recreates the database.
/// An encrypted database's dump is read with its key (`KeyedDbRequest`) and streamed as it
/// is written: no copy of it touches the node's disk.
async fn dump_sql(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(req): KeyedDbRequest,
    Query(query): Query<DumpQuery>,
) -> Result<Response, DataError> {
    req.db.ensure_queryable()?;
    req.db.ensure_readable()?;
    let options = DumpOptions {
        preserve_row_ids: query.preserve_row_ids,
    };
    let node = Arc::clone(&state.node);
    let db = Arc::clone(&req.db);
    let key = req.key.clone();
    let ((), body) = stream_from_blocking(
        &state.node,
        &req.db,
        move || {
            let conn = node.pool.checkout(&db, Mode::ReadOnly, key.as_deref())?;
            Ok(((node, db, conn), ()))
        },
        move |(node, db, conn), out| {
            // Atoll's own statements (reading the schema and every table), not tenant SQL.
            let result = conn
                .control
                .trusted(|| dump::write_dump(&conn.conn, out, options));
            node.pool.checkin(&db, conn);
            result
        },
    )
    .await?;
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Ok(response)
}

/// A consistent copy of a database in a temporary file, deleted once read.
struct Snapshot {
    file: std::fs::File,
    /// Still to delete when dropped (where an open file cannot be deleted).
    path: Option<PathBuf>,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Copies the database with SQLite's online backup in a single step: one read transaction,
/// so the copy is the database as of one commit, and writers are not held up meanwhile
/// (WAL). A copy in small steps would restart whenever a writer commits in between and
/// might never finish on a busy database.
fn snapshot(node: &Node, db: &Database) -> Result<Snapshot, DataError> {
    scratch_copy(db, |path| {
        let source = node.pool.checkout(db, Mode::ReadOnly, None)?;
        let result = backup_into(&source.conn, path);
        node.pool.checkin(db, source);
        result
    })
}

/// [`snapshot`] of an encrypted database without its key: its pages copied as they are
/// (ciphertext).
fn sealed_snapshot(db: &Database) -> Result<Snapshot, DataError> {
    db.ensure_held()?;
    scratch_copy(db, |path| {
        crate::encryption::copy_sealed_pages(&db.file_path(), path)
    })
}

/// A copy of `db` made by `copy` into a scratch file beside it, opened and unlinked.
fn scratch_copy(
    db: &Database,
    copy: impl FnOnce(&FsPath) -> Result<(), DataError>,
) -> Result<Snapshot, DataError> {
    let path = db
        .dir()
        .join(format!(".export-{}", uuid::Uuid::new_v4().simple()));
    if let Err(e) = copy(&path) {
        remove_with_journal(&path);
        return Err(e);
    }
    let file = std::fs::File::open(&path)?;
    // Unlinked while open, the file goes away by itself when the download ends, however it
    // ends, or if the process dies first. Only where unlinking an open file is refused is
    // it kept until then.
    let path = match std::fs::remove_file(&path) {
        Ok(()) => None,
        Err(_) => Some(path),
    };
    Ok(Snapshot { file, path })
}

/// Copies an encrypted database's file to `out`, each page decrypted with `cipher`: a
/// plain SQLite file (its pages still reserve the bytes that held their nonces and tags,
/// which SQLite leaves alone). A page that fails its tag stops the copy, which the client
/// sees as a broken transfer.
fn copy_decrypting(
    from: &mut impl Read,
    cipher: &atoll_storage::encryption::page::PageCipher,
    out: &mut dyn Write,
) -> Result<(), DataError> {
    let mut page = vec![0u8; crate::database::PAGE_SIZE as usize];
    let mut pgno: u32 = 0;
    loop {
        match from.read_exact(&mut page) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        pgno += 1;
        // SQLite never writes the page holding the lock bytes (at 1 GiB): it stays as is.
        if u64::from(pgno - 1) * crate::database::PAGE_SIZE != LOCK_BYTE_OFFSET {
            cipher.open(pgno, &mut page).map_err(|_| {
                DataError::Internal(format!(
                    "page {pgno} of the export failed its authentication tag"
                ))
            })?;
        }
        out.write_all(&page)?;
    }
}

/// Where SQLite's lock bytes are: the page at this offset holds no data.
const LOCK_BYTE_OFFSET: u64 = 0x4000_0000;

pub(crate) fn backup_into(source: &rusqlite::Connection, path: &FsPath) -> Result<(), DataError> {
    let mut target = rusqlite::Connection::open(path)?;
    // A scratch copy: no rollback journal to write, nothing to fsync.
    target.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")?;
    {
        let backup = rusqlite::backup::Backup::new(source, &mut target)?;
        let mut attempts = 0;
        loop {
            match backup.step(-1)? {
                rusqlite::backup::StepResult::Done => break,
                // A writer holding the source in an exclusive lock: a later try will do.
                _ if attempts < 100 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    return Err(DataError::Internal(
                        "the database stayed locked throughout the export".into(),
                    ))
                }
            }
        }
    }
    target
        .close()
        .map_err(|(_, e)| DataError::Internal(e.to_string()))?;
    Ok(())
}

fn remove_with_journal(path: &FsPath) {
    let _ = std::fs::remove_file(path);
    let mut journal = path.as_os_str().to_owned();
    journal.push("-journal");
    let _ = std::fs::remove_file(PathBuf::from(journal));
}

fn copy(from: &mut impl Read, out: &mut dyn Write) -> Result<(), DataError> {
    let mut buf = vec![0u8; STREAM_CHUNK];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.write_all(&buf[..n])?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A response body fed from one of the node's SQL threads (a tenant's download must not
/// hold the blocking pool the platform needs). `prepare` runs there first: its failure
/// still becomes the response's status, and its `M` (a length, say) goes into the headers.
/// Then `produce` writes the body; a failure there can only cut the body off, so the
/// client sees a broken transfer rather than a complete-looking one.
pub(crate) async fn stream_from_blocking<S, M, P, F>(
    node: &Node,
    tenant: &Database,
    prepare: P,
    produce: F,
) -> Result<(M, Body), DataError>
where
    S: Send + 'static,
    M: Send + 'static,
    P: FnOnce() -> Result<(S, M), DataError> + Send + 'static,
    F: FnOnce(S, &mut dyn Write) -> Result<(), DataError> + Send + 'static,
{
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    node.sql().spawn_for(&tenant.config().org_id, move || {
        let (state, meta) = match prepare() {
            Ok(prepared) => prepared,
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        if ready_tx.send(Ok(meta)).is_err() {
            return;
        }
        let mut out = ChannelWriter {
            tx,
            buf: Vec::with_capacity(STREAM_CHUNK),
            closed: false,
        };
        let result = produce(state, &mut out).and_then(|()| Ok(out.flush()?));
        if let Err(e) = result {
            if out.closed {
                tracing::debug!("client left before the end of the stream");
            } else {
                tracing::warn!(error = %e, "stream failed half-way; cutting the response off");
                let _ = out
                    .tx
                    .blocking_send(Err(std::io::Error::other(e.to_string())));
            }
        }
    });
    let meta = ready_rx
        .await
        .map_err(|_| DataError::Internal("the export thread stopped".into()))??;
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    Ok((meta, Body::from_stream(stream)))
}

/// Buffers writes into chunks for the response channel; blocks while the client is slow.
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
    /// The response was dropped: the client went away.
    closed: bool,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(STREAM_CHUNK),
        ));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            self.closed = true;
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= STREAM_CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}
