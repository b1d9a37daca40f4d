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
//!
//! A node holding a replica of the database answers from the replica's copy and the
//! stored log, as of the position it holds that is stored; a revision past it goes to the
//! primary, so a client never goes back (`pull_on_replica`).

use super::proto::{self, PullRequest};
use super::{live_copy, pages};
use crate::auth::DbRequest;
use crate::database::Database;
use crate::error::DataError;
use crate::replication::follow::Replica;
use crate::replication::log::{self, Frames};
use crate::replication::routing::{to_primary, OnReplica};
use crate::transfer_history as history;
use crate::DataPlaneState;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use prost::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a pull waits for something newer, whatever the client asks.
const MAX_LONG_POLL: Duration = Duration::from_secs(30);
/// How soon a long poll woken by a commit looks again while the commit is not visible yet.
const RECHECK: Duration = Duration::from_millis(20);

/// The longest a replica's bootstrap waits for the frame its copy is at to be stored.
const STORED_WAIT: Duration = Duration::from_secs(5);

/// How often a replica asks object storage whether a frame it applied is
/// stored yet.
const STORED_POLL: Duration = Duration::from_millis(250);

/// More frames than this after the client's revision and the whole database is sent
/// instead of the changes, which are read into memory to keep the newest image of each
/// page: 4,096 frames, 16 MiB of pages per pull at most.
const MAX_INCREMENTAL_FRAMES: u64 = 4_096;

/// The content type of requests and answers.
const PROTOBUF: &str = "application/protobuf";

pub(crate) async fn pull_updates(
    State(state): State<Arc<DataPlaneState>>,
    on_replica: Option<Extension<OnReplica>>,
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
    if let Some(Extension(OnReplica(replica))) = on_replica {
        return pull_on_replica(&state, replica, &request).await;
    }
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

/// A pull sent to a node holding a replica of the database, answered from the replica's
/// copy and the stored log as the primary answers it, as of the position both have: the
/// frame the replica applied, at most the last one stored (a client must never hold a
/// position a primary that lost its disk would not come back to). What the replica cannot
/// answer that way goes to the primary ([`to_primary`]), which answers as always: a
/// revision past that position (the client pulled from the primary or another replica
/// further on: it must not be taken back), a log nothing of which is listed yet, a long
/// poll nothing arrives for. So a client pulling from any of them only ever moves forward.
async fn pull_on_replica(
    state: &Arc<DataPlaneState>,
    replica: Arc<Replica>,
    request: &PullRequest,
) -> Result<Response, DataError> {
    let storage = state.node.storage().cloned().ok_or_else(log::no_storage)?;
    let db = Arc::clone(&replica.db);
    let servable = |applied: u64| {
        let storage = Arc::clone(&storage);
        let id = db.id().to_string();
        async move {
            let stored = log::stored_head(&storage.storage, &id, applied).await?;
            Ok::<_, DataError>(stored.map(|stored| stored.min(applied)))
        }
    };
    let Some(mut head) = servable(replica.applied()).await? else {
        return Ok(to_primary());
    };
    let revision = &request.client_revision;
    let from = if revision.is_empty() {
        None
    } else {
        match revision.parse::<u64>() {
            Ok(from) if from > head => return Ok(to_primary()),
            Ok(from) => Some(from),
            // Not a position: every page, as the primary answers it.
            Err(_) => None,
        }
    };
    let Some(from) = from else {
        return whole_database_on_replica(state, &replica, head).await;
    };
    if from == head && request.long_poll_timeout_ms > 0 {
        let wait =
            Duration::from_millis(u64::from(request.long_poll_timeout_ms)).min(MAX_LONG_POLL);
        let deadline = Instant::now() + wait;
        let mut applied = replica.watch_applied();
        while head == from {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if *applied.borrow_and_update() > head {
                // Applied here; stored maybe not yet: the listing is asked again shortly.
                tokio::time::sleep(STORED_POLL.min(deadline - now)).await;
            } else if tokio::time::timeout(deadline - now, applied.changed())
                .await
                .is_ok_and(|changed| changed.is_err())
            {
                break;
            }
            head = servable(replica.applied()).await?.unwrap_or(head).max(head);
        }
    }
    if from == head {
        let mut out = Vec::new();
        proto::put(&pages::header(head, 0), &mut out);
        return Ok(answer(state, &db, out));
    }
    if head - from > MAX_INCREMENTAL_FRAMES {
        return whole_database_on_replica(state, &replica, head).await;
    }
    match log::read_frames(&storage.storage, db.id(), from + 1, head).await? {
        Frames::Found(frames) if frames.last().is_some_and(|f| f.frame_no == head) => {
            Ok(answer(state, &db, pages::changed_pages(head, &frames)))
        }
        // Retention removed the frames after the client's revision (or the revision is
        // from before a transfer's new history): all pages instead.
        Frames::Found(_) | Frames::Gone => whole_database_on_replica(state, &replica, head).await,
    }
}

/// Every page of the database as of `head` or later: the replica's own copy, once the
/// frame it is at is stored (waited for a few seconds, as the primary waits for its
/// commits), else rebuilt from the stored log as of `head`.
async fn whole_database_on_replica(
    state: &Arc<DataPlaneState>,
    replica: &Arc<Replica>,
    mut head: u64,
) -> Result<Response, DataError> {
    let db = &replica.db;
    let storage = state.node.storage().cloned().ok_or_else(log::no_storage)?;
    let node = Arc::clone(&state.node);
    let copied = Arc::clone(replica);
    let (revision, body) = stream_pages(state, db, move || {
        let copy = live_copy::take_replica(&node, &copied)?;
        let revision = copy.revision;
        Ok((Some(copy), revision))
    })
    .await?;
    let deadline = Instant::now() + STORED_WAIT;
    while head < revision && Instant::now() < deadline {
        tokio::time::sleep(STORED_POLL).await;
        let stored = log::stored_head(&storage.storage, db.id(), revision).await?;
        head = stored.unwrap_or(head).max(head);
    }
    if head >= revision {
        return Ok(protobuf(body));
    }
    drop(body);
    rebuilt_database(state, db, head).await
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
    let mut signalled = false;
    loop {
        let signal = database_log.commit_signal().notified();
        tokio::pin!(signal);
        signal.as_mut().enable();
        let head = log::wait_for_commits(db).await.unwrap_or(after);
        let now = Instant::now();
        if head > after || now >= deadline {
            return head;
        }
        // The signal comes from the commit hook, before the commit's frames are in the
        // WAL: a look right after it can still find nothing to store, and the commit sends
        // no second signal. Once signalled, look again every `RECHECK` (a poll that waited
        // for the next signal instead slept through its whole timeout: a CI run caught it).
        let nap = if signalled {
            RECHECK.min(deadline - now)
        } else {
            deadline - now
        };
        signalled |= tokio::time::timeout(nap, signal).await.is_ok();
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
    rebuilt_database(state, db, head).await
}

/// Every page of the database rebuilt from the stored log as of `head`.
async fn rebuilt_database(
    state: &Arc<DataPlaneState>,
    db: &Arc<Database>,
    head: u64,
) -> Result<Response, DataError> {
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
