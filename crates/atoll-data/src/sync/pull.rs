//! `POST /pull-updates`: a Turso Sync client's pull, from the database's stored log.
//!
//! A revision is a position in the log (a global frame number at the end of a
//! transaction, written in decimal). A client with no revision gets every page of the
//! database as of the stored head (its bootstrap); a client with one gets the pages
//! written after it, waiting first (at most its long-poll timeout) when there is nothing
//! newer. A revision the log cannot be compared with (retention removed its frames, it is
//! ahead of the log or from before a transfer, it is not a number) gets every page, which
//! is a correct answer for any base: the client ends up with exactly the database.
//!
//! A bootstrap's pages come from a consistent copy of the live file (one read
//! transaction, its position read from the WAL index), used once that position is stored;
//! otherwise, and for the whole-database answers to old revisions, from the database
//! rebuilt out of the stored log.
//!
//! The checks are those of every route that reads a database: its token (a read-only one
//! may pull), IP allow list and the refusal of `x-turso-encryption-key` ([`DbRequest`]),
//! its state, `block_reads`, a transfer's new history; the whole-database answers are
//! rebuilt under the node's bound on concurrent rebuilds and streamed from the
//! organization's share of the SQL threads. Every byte sent is metered as bytes synced.

use super::proto::{self, PullRequest};
use super::{live_copy, pages};
use crate::auth::DbRequest;
use crate::database::Database;
use crate::error::DataError;
use crate::replication::log::{self, Frames};
use crate::transfer_history as history;
use crate::DataPlaneState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use prost::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a pull waits for something newer, whatever the client asks.
const MAX_LONG_POLL: Duration = Duration::from_secs(30);

/// More frames than this after the client's revision and the whole database is sent
/// instead of the changes, which are read into memory to keep the newest image of each
/// page: 4,096 frames, 16 MiB of pages per pull at most.
const MAX_INCREMENTAL_FRAMES: u64 = 4_096;

/// The content type of requests and answers.
const PROTOBUF: &str = "application/protobuf";

pub async fn pull_updates(
    State(state): State<Arc<DataPlaneState>>,
    req: DbRequest,
    body: Bytes,
) -> Result<Response, DataError> {
    req.db.ensure_queryable()?;
    req.db.ensure_readable()?;
    let request = PullRequest::decode(body.as_ref()).map_err(|e| {
        DataError::BadRequest(format!(
            "the pull-updates body is not a protobuf PullUpdatesReqProtoBody: {e}"
        ))
    })?;
    refuse_unsupported(&request)?;
    let storage = state.node.storage().cloned().ok_or_else(log::no_storage)?;
    history::ensure_started(&req.db)?;
    let mut head = log::wait_for_commits(&req.db)
        .await
        .ok_or_else(log::no_storage)?;
    let Some(from) = comparable_revision(&req.db, &request.client_revision, head) else {
        return whole_database(&state, &req.db, head).await;
    };
    if from == head && request.long_poll_timeout_ms > 0 {
        let wait =
            Duration::from_millis(u64::from(request.long_poll_timeout_ms)).min(MAX_LONG_POLL);
        head = wait_for_newer(&req.db, from, wait).await;
    }
    if from == head {
        // Nothing newer: the header alone (the client reads no pages and keeps its base).
        let mut out = Vec::new();
        proto::put(&pages::header(head, 0), &mut out);
        return Ok(answer(&state, &req.db, out));
    }
    if head - from > MAX_INCREMENTAL_FRAMES {
        return whole_database(&state, &req.db, head).await;
    }
    match log::read_frames(&storage.storage, req.db.id(), from + 1, head).await? {
        Frames::Found(frames) if frames.last().is_some_and(|f| f.frame_no == head) => {
            Ok(answer(&state, &req.db, pages::changed_pages(head, &frames)))
        }
        // Retention removed the frames after the client's revision: all pages instead.
        Frames::Found(_) | Frames::Gone => whole_database(&state, &req.db, head).await,
    }
}

/// What the 0.7 clients can ask for but Atoll does not serve: an honest refusal (400)
/// rather than an answer the client would misread.
fn refuse_unsupported(request: &PullRequest) -> Result<(), DataError> {
    if request.stream_kind != proto::STREAM_PAGES {
        return Err(DataError::BadRequest(
            "Atoll serves page streams only, not MVCC logical logs: open the client without logicalMvccPull".into(),
        ));
    }
    if !request.server_pages_selector.is_empty()
        || !request.server_query_selector.is_empty()
        || !request.client_pages.is_empty()
        || !request.server_revision.is_empty()
    {
        return Err(DataError::BadRequest(
            "pulling selected pages (partialSyncExperimental, pullBytesThreshold) is not implemented by Atoll: open the client without them".into(),
        ));
    }
    Ok(())
}

/// The client's revision as a position the changes can be read after, if it is one:
/// a number, within the database's current history, not past the stored head.
fn comparable_revision(db: &Database, revision: &str, head: u64) -> Option<u64> {
    if revision.is_empty() {
        return None;
    }
    revision
        .parse::<u64>()
        .ok()
        .filter(|&r| r >= history::first_frame(db) && r <= head)
}

/// Waits until the stored head passes `after` (a commit made and stored), at most `wait`;
/// answers the stored head.
async fn wait_for_newer(db: &Arc<Database>, after: u64, wait: Duration) -> u64 {
    let Some(database_log) = db.log().cloned() else {
        return after;
    };
    let deadline = Instant::now() + wait;
    loop {
        let signal = database_log.commit_signal().notified();
        tokio::pin!(signal);
        signal.as_mut().enable();
        let head = log::wait_for_commits(db).await.unwrap_or(after);
        let now = Instant::now();
        if head > after || now >= deadline {
            return head;
        }
        let _ = tokio::time::timeout(deadline - now, signal).await;
    }
}

/// Every page of the database, from a copy of the live file when its position is stored
/// (at or after `head`), else rebuilt from the stored log as of `head`; streamed from one
/// of the node's SQL threads (the organization's fair share).
async fn whole_database(
    state: &Arc<DataPlaneState>,
    db: &Arc<Database>,
    head: u64,
) -> Result<Response, DataError> {
    if head == 0 {
        // Nothing stored yet: an empty database.
        let mut out = Vec::new();
        proto::put(&pages::header(0, 0), &mut out);
        return Ok(answer(state, db, out));
    }
    let node = Arc::clone(&state.node);
    let copied_db = Arc::clone(db);
    let (revision, body) = stream_pages(state, db, move || {
        Ok(match live_copy::take(&node, &copied_db)? {
            Some(copy) => {
                let revision = copy.revision;
                (Some(copy), revision)
            }
            None => (None, 0),
        })
    })
    .await?;
    // A pull serves only what object storage has (a lost disk must not take back what a
    // client holds): the copy is used once its position is stored.
    if revision >= head && log::wait_for_commits(db).await.unwrap_or(0) >= revision {
        return Ok(protobuf(body));
    }
    drop(body);
    let file = log::state_at(&state.node, db, head).await?;
    let dir = file.parent().map(std::path::Path::to_path_buf);
    let (_, body) = stream_pages(state, db, move || {
        let opened = std::fs::File::open(&file);
        // Unlinked while open: the copy goes away when the download ends.
        if let Some(dir) = &dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        Ok((Some(Rebuilt(opened?)), head))
    })
    .await?;
    Ok(protobuf(body))
}

/// A database file as of a known revision, to send page by page.
trait PageSource: Send + 'static {
    fn file(&mut self) -> &mut std::fs::File;
}

impl PageSource for live_copy::LiveCopy {
    fn file(&mut self) -> &mut std::fs::File {
        &mut self.file
    }
}

struct Rebuilt(std::fs::File);

impl PageSource for Rebuilt {
    fn file(&mut self) -> &mut std::fs::File {
        &mut self.0
    }
}

/// Streams every page of the copy `open` makes (none when it makes none), metered as
/// bytes synced; answers the copy's revision with the body.
async fn stream_pages<C: PageSource>(
    state: &Arc<DataPlaneState>,
    db: &Arc<Database>,
    open: impl FnOnce() -> Result<(Option<C>, u64), DataError> + Send + 'static,
) -> Result<(u64, Body), DataError> {
    let node = Arc::clone(&state.node);
    let id = db.id().to_string();
    crate::export::stream_from_blocking(
        &state.node,
        db,
        move || {
            let (copy, revision) = open()?;
            Ok(((copy, revision), revision))
        },
        move |(copy, revision), out| {
            let Some(mut copy) = copy else {
                return Ok(());
            };
            let written = pages::write_state(copy.file(), revision, out)?;
            node.meters.record_synced(&id, written);
            Ok(())
        },
    )
    .await
}

fn protobuf(body: Body) -> Response {
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROTOBUF));
    response
}

/// An answer built in memory, metered as bytes synced.
fn answer(state: &DataPlaneState, db: &Database, body: Vec<u8>) -> Response {
    state.node.meters.record_synced(db.id(), body.len() as u64);
    protobuf(Body::from(body))
}
