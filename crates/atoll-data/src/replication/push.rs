//! Offline writes pushed by libSQL's synced databases: `POST /sync/{generation}/{start}/{end}[/{baton}]`
//! with the client's own WAL frames (24-byte header, then the page), as the Rust `libsql`
//! crate sends them from `Database::sync()` when it has written locally
//! (`Builder::new_synced_database` without `remote_writes`). `docs/DATA-PLANE.md`
//! ("Offline writes") has the rules; in short:
//!
//! - **Numbering.** A client's frame `k` of generation `g` is frame `g − 2 + k` of the log
//!   (`sync_http`). A push is accepted only on top of the head it was written on: its first
//!   frame must be the frame right after the database's committed head. Anything written
//!   on the server meanwhile makes it a conflict (`{"status": "conflict"}`), never a merge:
//!   page images written elsewhere cannot be merged with other writers' transactions.
//! - **Exact frames.** The frames go into the database's WAL one for one, so the log numbers
//!   them exactly as the client does and its later pulls line up. The transactions of one
//!   request become one transaction here (a push is atomic: readers never see half of it).
//! - **Batons.** The client sends at most 128 frames a request and may split a transaction;
//!   frames after the last commit frame wait here, under a baton the client sends back,
//!   until the commit frame arrives. They are answered as received (`max_frame_no` = the
//!   last frame sent) — which is what the client needs to go on — and kept in memory,
//!   bounded per push and per node, dropped when idle.
//! - **Validation before anyone sees it.** The database as it would be after the push is
//!   built in a scratch copy and held to the upload's rules
//!   (`upload::validate::check_database_file_within`: page size, WAL mode, encoding, no
//!   auto-vacuum, length agreeing with the header, `PRAGMA integrity_check`, so an index
//!   that disagrees with its table is refused too), and to the database's size limit. The
//!   check runs the database's own SQL (CHECK constraints, generated columns, index
//!   expressions) and is bounded like a statement (`upload::validate::CheckBounds`: the
//!   node's statement timeout per 64 MiB, the client going away, shutdown). Only then are the frames written, under the write lock, after
//!   checking again that nothing committed meanwhile.

use crate::database::{Database, PAGE_SIZE};
use crate::error::DataError;
use crate::upload::validate::CheckBounds;
use crate::DataPlaneState;
use atoll_storage::encryption::EncryptionKey;
use atoll_storage::shipper::{internal_connection, DatabaseLog};
use atoll_storage::wal_insert::{WalInsert, WalInsertError};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A WAL frame as libSQL's client sends it: 24-byte header, then the page.
pub const FRAME_BYTES: usize = 24 + PAGE_SIZE as usize;

/// The most frames one push may leave waiting for their commit frame (a transaction this
/// large is buffered whole before it is checked): 64 MiB of pages.
const MAX_PENDING_BYTES: usize = 64 * 1024 * 1024;
/// All pushes waiting for commit frames on a node, together.
const MAX_NODE_PENDING_BYTES: usize = 256 * 1024 * 1024;
/// A push that sent nothing for this long is dropped with what it buffered.
const PENDING_IDLE: Duration = Duration::from_secs(60);
/// How long applying a push waits for the database's write lock.
const WRITE_LOCK_WAIT: Duration = Duration::from_secs(5);

/// Frames received but not yet applied (a transaction whose commit frame is still to come),
/// one push per database at most.
#[derive(Default)]
pub struct PendingPushes {
    inner: Mutex<HashMap<String, Pending>>,
}

struct Pending {
    baton: String,
    generation: u64,
    /// The client's number of the first buffered frame.
    first: u64,
    frames: Vec<u8>,
    touched: Instant,
}

impl Pending {
    fn next(&self) -> u64 {
        self.first + (self.frames.len() / FRAME_BYTES) as u64
    }
}

impl PendingPushes {
    pub fn new() -> PendingPushes {
        PendingPushes::default()
    }

    /// Bytes buffered on this node (for tests and metrics).
    pub fn buffered_bytes(&self) -> usize {
        lock(&self.inner).values().map(|p| p.frames.len()).sum()
    }
}

/// What a push request gets back (HTTP 200 with this JSON; the client reads `status`,
/// `generation`, `max_frame_no` and `baton`).
#[derive(Debug, serde::Serialize)]
pub struct PushAnswer {
    pub status: &'static str,
    pub generation: u64,
    pub max_frame_no: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baton: Option<String>,
}

/// One request's frames, already checked to be whole frames of the right size.
pub struct PushRequest {
    pub generation: u64,
    pub start: u64,
    pub baton: Option<String>,
    pub frames: axum::body::Bytes,
}

/// Takes one push request: buffers its frames, and applies every complete transaction
/// buffered so far. An encrypted database's frames arrive plain (the replica holds the
/// key, and sends it) and are sealed with `key` before anything is written.
pub async fn receive(
    state: &Arc<DataPlaneState>,
    db: &Arc<Database>,
    request: PushRequest,
    key: Option<Arc<EncryptionKey>>,
) -> Result<PushAnswer, DataError> {
    let log = Arc::clone(db.log().ok_or_else(super::log::no_storage)?);
    check_frames(db, &request.frames)?;
    let base = request.generation - 2;
    let count = (request.frames.len() / FRAME_BYTES) as u64;
    let last_sent = request.start + count - 1;
    let head = committed_head(&log).await?;
    if base > head {
        return Err(DataError::Conflict(format!(
            "generation {} is newer than the database (its newest is {}): this replica was made from another server or a lost history; delete its files and sync again",
            request.generation,
            head + 2
        )));
    }
    let answer = |status, max_frame_no, baton| PushAnswer {
        status,
        generation: request.generation,
        max_frame_no,
        baton,
    };

    // Buffer the frames after what is pending under the client's baton, or start a push.
    let buffered = {
        let mut pushes = lock(&state.pushes.inner);
        pushes.retain(|_, p| p.touched.elapsed() < PENDING_IDLE);
        // (first, next) of the push this request continues, if it does.
        let continued = pushes
            .get(db.id())
            .filter(|p| {
                request.baton.as_deref() == Some(p.baton.as_str())
                    && p.generation == request.generation
            })
            .map(|p| (p.first, p.next()));
        let (resumes_from, expected) = continued.unwrap_or((head - base + 1, head - base + 1));
        if request.start > expected {
            // The client believes the server has frames it does not (a push whose pending
            // frames were dropped, a server that restarted meanwhile): it sends again from
            // the frame after the database's head.
            pushes.remove(db.id());
            return Ok(answer("ok", head - base, None));
        }
        if request.start < resumes_from {
            if continued.is_some() {
                return Ok(answer("conflict", head - base, None));
            }
            // Behind the head: checked below, outside the lock.
            None
        } else {
            Some(buffer(
                &mut pushes,
                db.id(),
                &request,
                continued.is_some(),
                base,
            )?)
        }
    };
    let (complete, expected_head, baton) = match buffered {
        Some(Buffered::Waiting(baton)) => return Ok(answer("ok", last_sent, Some(baton))),
        Some(Buffered::Complete(complete, expected_head, baton)) => {
            (complete, expected_head, baton)
        }
        None => {
            // Frames the database may hold already: a push applied whose answer was lost,
            // sent again. The same pages at the same places are acknowledged (those up to
            // the head; the client then sends the rest again); anything else conflicts.
            return Ok(
                match already_applied(state, db, base, &request, head, key.as_deref()).await? {
                    Some(last) => answer("ok", last, None),
                    None => answer("conflict", head - base, None),
                },
            );
        }
    };
    let node = Arc::clone(&state.node);
    let target = Arc::clone(db);
    // A client that goes away stops the check of what it pushed (the write that follows a
    // passed check is never cut short).
    let cancel = crate::sandbox::CancelToken::new();
    let cancel_on_drop = cancel.cancel_on_drop();
    let bounds =
        CheckBounds::for_node(&node, Some(cancel)).from_organization(&target.config().org_id);
    let applied = tokio::task::spawn_blocking(move || {
        apply(
            &node,
            &target,
            complete,
            expected_head,
            &bounds,
            key.as_deref(),
        )
    })
    .await
    .map_err(|e| DataError::Internal(e.to_string()));
    cancel_on_drop.disarm();
    let applied = applied?;
    match applied {
        Ok(()) => Ok(answer("ok", last_sent, baton)),
        Err(Refused::Conflict(head)) => {
            lock(&state.pushes.inner).remove(db.id());
            Ok(answer("conflict", head.saturating_sub(base), None))
        }
        Err(Refused::Error(e)) => {
            lock(&state.pushes.inner).remove(db.id());
            Err(e)
        }
    }
}

/// What buffering a request's frames left.
enum Buffered {
    /// Frames after the last commit frame wait under this baton.
    Waiting(String),
    /// Whole transactions to apply on top of this frame, and the baton of what still waits.
    Complete(Vec<u8>, u64, Option<String>),
}

/// Appends the request's frames to the push it continues (`continues`) or to a new one,
/// and takes out the complete transactions.
fn buffer(
    pushes: &mut HashMap<String, Pending>,
    db_id: &str,
    request: &PushRequest,
    continues: bool,
    base: u64,
) -> Result<Buffered, DataError> {
    let mut pending = match pushes.remove(db_id) {
        Some(pending) if continues => pending,
        _ => Pending {
            baton: uuid::Uuid::new_v4().simple().to_string(),
            generation: request.generation,
            first: request.start,
            frames: Vec::new(),
            touched: Instant::now(),
        },
    };
    // A request sent again (its answer was lost) replaces what it sent the first time.
    pending
        .frames
        .truncate(((request.start - pending.first) as usize) * FRAME_BYTES);
    let others: usize = pushes.values().map(|p| p.frames.len()).sum();
    if pending.frames.len() + request.frames.len() > MAX_PENDING_BYTES {
        return Err(DataError::TooLarge(format!(
            "a pushed transaction may hold at most {} MiB of pages: write it through the server instead (remote_writes), or in smaller transactions",
            MAX_PENDING_BYTES >> 20
        )));
    }
    if others + pending.frames.len() + request.frames.len() > MAX_NODE_PENDING_BYTES {
        return Err(DataError::TooManyRequests(
            "too many pushes are waiting for their commit frames on this node; try again shortly"
                .into(),
            1,
        ));
    }
    pending.frames.extend_from_slice(&request.frames);
    pending.touched = Instant::now();
    let Some(end) = last_commit(&pending.frames) else {
        let baton = pending.baton.clone();
        pushes.insert(db_id.to_string(), pending);
        return Ok(Buffered::Waiting(baton));
    };
    let rest = pending.frames.split_off(end);
    let complete = std::mem::replace(&mut pending.frames, rest);
    let expected_head = base + pending.first - 1;
    pending.first += (complete.len() / FRAME_BYTES) as u64;
    let baton = (!pending.frames.is_empty()).then(|| pending.baton.clone());
    if baton.is_some() {
        pushes.insert(db_id.to_string(), pending);
    }
    Ok(Buffered::Complete(complete, expected_head, baton))
}

/// In the client's numbering, the last of the pushed frames the database already holds at
/// the same places, page for page, up to its head; `None` when any differs (or is no
/// longer kept).
async fn already_applied(
    state: &DataPlaneState,
    db: &Arc<Database>,
    base: u64,
    request: &PushRequest,
    head: u64,
    key: Option<&EncryptionKey>,
) -> Result<Option<u64>, DataError> {
    let storage = state
        .node
        .storage()
        .cloned()
        .ok_or_else(super::log::no_storage)?;
    let count = (request.frames.len() / FRAME_BYTES) as u64;
    let first = base + request.start;
    let last = (first + count - 1).min(head);
    let stored = super::log::wait_for_commits(db).await.unwrap_or(0);
    if last > stored {
        return Ok(None);
    }
    let mut held = match super::log::read_frames(&storage.storage, db.id(), first, last).await? {
        super::log::Frames::Found(frames) => frames,
        super::log::Frames::Gone => return Ok(None),
    };
    if let Some(key) = key {
        // Stored sealed: compared in the clear, as the replica sent them.
        let cipher = key.page_cipher();
        for frame in &mut held {
            if cipher.open(frame.page_no, &mut frame.page).is_err() {
                return Ok(None);
            }
        }
    }
    let same = held.len() as u64 == last - first + 1
        && held
            .iter()
            .zip(request.frames.chunks(FRAME_BYTES))
            .all(|(held, sent)| held.page_no == header(sent).0 && held.page[..] == sent[24..]);
    Ok(same.then_some(last - base))
}

async fn committed_head(log: &Arc<DatabaseLog>) -> Result<u64, DataError> {
    let log = Arc::clone(log);
    tokio::task::spawn_blocking(move || current_head(&log))
        .await
        .map_err(|e| DataError::Internal(e.to_string()))?
}

/// The last committed frame of the database, as the log numbers frames.
fn current_head(log: &DatabaseLog) -> Result<u64, DataError> {
    match log.committed_head() {
        Some(head) => Ok(head),
        None => Ok(log.head()?),
    }
}

/// Checks each frame on its own: a page number, and a database size within the limit.
fn check_frames(db: &Database, frames: &[u8]) -> Result<(), DataError> {
    let max_pages = db
        .config()
        .size_limit
        .map_or(u64::from(u32::MAX), |limit| (limit / PAGE_SIZE).max(1));
    for (i, frame) in frames.chunks(FRAME_BYTES).enumerate() {
        let (page_no, size_after) = header(frame);
        if page_no == 0 {
            return Err(DataError::BadRequest(format!(
                "pushed frame {i} of the request names page 0: pages count from 1"
            )));
        }
        if u64::from(page_no.max(size_after)) > max_pages {
            return Err(DataError::TooLarge(format!(
                "the pushed frames grow the database past its size limit ({} pages of {PAGE_SIZE} bytes)",
                max_pages
            )));
        }
    }
    Ok(())
}

fn header(frame: &[u8]) -> (u32, u32) {
    let word =
        |at: usize| u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]);
    (word(0), word(4))
}

/// The byte length of the frames up to and including the last commit frame, if any.
fn last_commit(frames: &[u8]) -> Option<usize> {
    frames
        .chunks(FRAME_BYTES)
        .rposition(|frame| header(frame).1 != 0)
        .map(|i| (i + 1) * FRAME_BYTES)
}

enum Refused {
    /// The database's head moved away from the one the push was written on.
    Conflict(u64),
    Error(DataError),
}

impl From<DataError> for Refused {
    fn from(e: DataError) -> Self {
        Refused::Error(e)
    }
}

impl From<rusqlite::Error> for Refused {
    fn from(e: rusqlite::Error) -> Self {
        Refused::Error(e.into())
    }
}

impl From<atoll_storage::StorageError> for Refused {
    fn from(e: atoll_storage::StorageError) -> Self {
        Refused::Error(e.into())
    }
}

/// Applies whole transactions pushed on top of frame `expected_head`: checks the database
/// they make in a scratch copy, then writes them into the WAL as one transaction. Runs on
/// a blocking thread.
fn apply(
    node: &crate::node::Node,
    db: &Arc<Database>,
    mut frames: Vec<u8>,
    expected_head: u64,
    bounds: &CheckBounds,
    key: Option<&EncryptionKey>,
) -> Result<(), Refused> {
    let log = Arc::clone(db.log().ok_or_else(super::log::no_storage)?);
    if let Some(key) = key {
        let cipher = key.page_cipher();
        for frame in frames.chunks_mut(FRAME_BYTES) {
            let page_no = header(frame).0;
            cipher.seal(page_no, &mut frame[24..]).map_err(|_| {
                Refused::Error(DataError::Internal(
                    "a pushed page could not be sealed".into(),
                ))
            })?;
        }
    }
    let frames = &frames[..];
    let size_after = frames
        .chunks(FRAME_BYTES)
        .map(|f| header(f).1)
        .rfind(|&size| size != 0)
        .expect("complete transactions end with a commit frame");
    check_candidate(
        node,
        db,
        &log,
        frames,
        size_after,
        expected_head,
        bounds,
        key,
    )?;
    write_frames(db, &log, frames, size_after, expected_head)?;
    tracing::info!(
        database_id = %db.id(),
        frames = frames.len() / FRAME_BYTES,
        "applied frames pushed by an offline replica"
    );
    let durability = node
        .storage()
        .map(|s| (s.durability(&db.config()), s.settings.sync_timeout));
    if let Some((atoll_types::node::Durability::Sync, timeout)) = durability {
        log.wait_durable(timeout)?;
    }
    Ok(())
}

/// The database after the push, built in a scratch copy of the state at `expected_head`
/// and held to the rules an uploaded file is held to, within `bounds`.
#[allow(clippy::too_many_arguments)]
fn check_candidate(
    node: &crate::node::Node,
    db: &Database,
    log: &DatabaseLog,
    frames: &[u8],
    size_after: u32,
    expected_head: u64,
    bounds: &CheckBounds,
    key: Option<&EncryptionKey>,
) -> Result<(), Refused> {
    let path = db
        .dir()
        .join(format!(".push-{}", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        // The copy is the database at the expected head when no commit happened on
        // either side of it (commits only move the head forward).
        let before = current_head(log)?;
        if before != expected_head {
            return Err(Refused::Conflict(before));
        }
        if key.is_some() {
            // The scratch copy stays sealed: checked through the key, never in the clear
            // on the node's disk.
            crate::encryption::copy_sealed_pages(&db.file_path(), &path)?;
        } else {
            let source = node
                .pool
                .checkout(db, crate::sandbox::Mode::ReadOnly, None)?;
            let copied = crate::export::backup_into(&source.conn, &path);
            node.pool.checkin(db, source);
            copied?;
        }
        let after = current_head(log)?;
        if after != expected_head {
            return Err(Refused::Conflict(after));
        }
        write_pages(&path, frames, size_after)?;
        let unusable = |why: String| {
            Refused::Error(DataError::BadRequest(format!(
                "the pushed frames would leave the database unusable, so none was applied: {why}"
            )))
        };
        crate::upload::validate::check_file_format(&path).map_err(|e| match e {
            DataError::BadRequest(why) => unusable(why),
            other => Refused::Error(other),
        })?;
        let what = "the database the pushed frames make";
        match crate::upload::validate::integrity_check(&path, bounds, what, key)? {
            Ok(()) => Ok(()),
            Err(detail) => Err(unusable(format!("it fails its check ({detail})"))),
        }
    })();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(std::path::PathBuf::from(name));
    }
    result
}

/// Writes the last image of each page into the scratch copy and cuts it to the final size.
fn write_pages(path: &Path, frames: &[u8], size_after: u32) -> Result<(), DataError> {
    use std::io::{Seek, SeekFrom, Write};
    let mut pages: BTreeMap<u32, &[u8]> = BTreeMap::new();
    for frame in frames.chunks(FRAME_BYTES) {
        pages.insert(header(frame).0, &frame[24..]);
    }
    let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
    for (&page_no, page) in pages.range(..=size_after) {
        file.seek(SeekFrom::Start(u64::from(page_no - 1) * PAGE_SIZE))?;
        file.write_all(page)?;
    }
    file.set_len(u64::from(size_after) * PAGE_SIZE)?;
    Ok(())
}

/// Writes the frames into the database's WAL, one for one, as a single transaction (the
/// commit marks of all but the last frame cleared), once nothing else committed since the
/// expected head.
fn write_frames(
    db: &Database,
    log: &DatabaseLog,
    frames: &[u8],
    size_after: u32,
    expected_head: u64,
) -> Result<(), Refused> {
    if log.is_fenced() {
        return Err(Refused::Error(DataError::Unavailable(format!(
            "database {} is not taking writes on this node right now (it is moving, or the node lost its write lease); try again shortly",
            db.config().name
        ))));
    }
    let conn = internal_connection(&db.file_path())?;
    // A read opens the WAL, which insertion needs; one that does not read the schema,
    // which is ciphertext to this connection on an encrypted database.
    conn.query_row("PRAGMA schema_version", [], |_| Ok(()))?;
    let waited = Instant::now();
    let mut insert = loop {
        match WalInsert::begin(&conn) {
            Ok(insert) => break insert,
            Err(e) if e.is_busy() && waited.elapsed() < WRITE_LOCK_WAIT => {
                db.write_lock().note_waiting();
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(Refused::Error(failed(e))),
        }
    };
    let head = current_head(log)?;
    if head != expected_head {
        return Err(Refused::Conflict(head));
    }
    if log.is_fenced() {
        return Err(Refused::Error(DataError::Unavailable(
            "the database stopped taking writes on this node; try again shortly".into(),
        )));
    }
    let total = frames.len() / FRAME_BYTES;
    for (i, frame) in frames.chunks(FRAME_BYTES).enumerate() {
        let commit = if i + 1 == total { size_after } else { 0 };
        insert
            .append(header(frame).0, commit, &frame[24..])
            .map_err(failed)?;
    }
    // As a connection's commit hook would, while the write lock is still held (so commit
    // times stay in commit order); after the commit frame, so that the replicas it wakes
    // find the frames.
    log.record_commit();
    insert.end().map_err(failed)?;
    Ok(())
}

fn failed(e: WalInsertError) -> DataError {
    if e.is_busy() {
        return DataError::Unavailable(format!(
            "the database stayed busy while applying pushed frames ({e}); try again"
        ));
    }
    DataError::Internal(format!("applying pushed frames failed: {e}"))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
