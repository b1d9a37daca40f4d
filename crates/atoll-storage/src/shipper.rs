//! Each database's log: its WAL shipped to object storage as segments, snapshots that
//! start generations, the checkpoints only the shipper runs, and the waits of `sync`
//! commits. `docs/STORAGE.md` explains the rules; the comments here say where each is kept.
//!
//! A round ([`DatabaseLog::ship_round`]) runs on a blocking thread, one at a time per
//! database, and reaches object storage through the runtime's handle. Its state
//! ([`LogState`]) is written to `log.json` beside the database after every stored object,
//! so a restarted node goes on where the last round stopped.

use super::segment::{frame_checksum, Frame, Segment};
use super::wal::{self, WalPosition};
use super::{keys, now_ms, Storage, StorageSettings};
use crate::backlog::Backlog;
use crate::error::StorageError;
use crate::PAGE_SIZE;
use bytes::Bytes;
use rusqlite::config::DbConfig;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What `log.json` holds: how far the log is durable, where in the WAL that is, and the
/// current generation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LogState {
    /// The last frame stored in object storage (0: none yet).
    pub durable_frame_no: u64,
    /// Its rolling checksum, from which the next segment starts.
    pub durable_checksum: u64,
    /// Commit time of the last stored transaction (ms since the epoch).
    pub last_commit_ms: i64,
    /// Where in the WAL the durable frames end; `None` before the first read.
    pub wal: Option<WalPosition>,
    /// The current generation's snapshot: as of `generation_start`, taken at `generation_created_ms`.
    pub generation_start: u64,
    pub generation_created_ms: i64,
    /// Page bytes shipped since that snapshot (a new generation is cut past a bound).
    pub bytes_since_snapshot: u64,
    /// The file was replaced (created, uploaded, rebuilt) since the last snapshot: the next
    /// round takes one before it ships any frame.
    pub needs_snapshot: bool,
    /// Raised each time the file is replaced outside SQLite (an upload): the log's frame
    /// numbers go on, but what they apply to changed, so a replica that sees a new epoch
    /// starts again from the snapshot taken after it (`replication::follow`).
    #[serde(default)]
    pub file_epoch: u64,
    /// The first frame of the current owner's history, and the transfer it starts at (ms):
    /// a transfer starts the history anew (`super::history`) and nothing up to this frame
    /// is served. Both 0: the history starts at the creation.
    #[serde(default)]
    pub history_start: u64,
    #[serde(default)]
    pub history_since_ms: i64,
}

/// The waits of `sync` commits: a waiter takes a ticket after its commit; a round that
/// read the WAL after ticket `n` was taken completes every ticket up to `n`.
#[derive(Default)]
struct SyncWaits {
    requested: u64,
    completed: u64,
    failed: Option<(u64, String)>,
}

/// What the node reports about a database's log (stats, usage, `atoll db backups`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogStatus {
    pub durable_frame_no: u64,
    pub last_commit_ms: i64,
    /// Commits not yet stored, and how long the oldest of them has waited.
    pub pending_commits: u64,
    pub lag_ms: u64,
    /// The last round's failure, if it failed.
    pub last_error: Option<String>,
}

pub struct DatabaseLog {
    id: String,
    file: PathBuf,
    /// One round at a time.
    round: Mutex<()>,
    state: Mutex<LogState>,
    /// Commit times recorded by the commit hook of every connection that writes, oldest
    /// first, taken by the round that ships those commits (`take_commit_times`).
    commit_times: Mutex<VecDeque<i64>>,
    /// Commits seen by the hooks; the executor compares it around a statement to know
    /// whether the statement committed.
    commits: AtomicU64,
    /// When the oldest commit not yet shipped happened.
    dirty_since: Mutex<Option<Instant>>,
    sync: Mutex<SyncWaits>,
    sync_done: Condvar,
    last_error: Mutex<Option<String>>,
    /// The node's logs with work: marked when this one gets some, which wakes the node's
    /// shipper loop when it should not wait for its tick (a `sync` commit, a snapshot).
    backlog: Arc<Backlog>,
    /// A new generation was asked for (`start_generation`): the next round cuts one.
    generation_asked: std::sync::atomic::AtomicBool,
    /// The history the database's configuration asks for starts then (ms; a transfer,
    /// `super::history`): a round starts it unless `history_since_ms` is there already.
    history_asked: std::sync::atomic::AtomicI64,
    /// Not before this instant after a start of a history failed.
    history_retry_at: Mutex<Option<Instant>>,
    /// Bytes stored since retention last counted what the database takes.
    stored_since_count: AtomicU64,
    /// Handed over to another node (a move): every commit is turned into a rollback by
    /// the commit hook, so no write lands after the frame it was handed over at — not
    /// even one that waited for the write lock since before the hand-over.
    fenced: std::sync::atomic::AtomicBool,
    /// The node's lease on writing: without it, commits are refused as when fenced
    /// (another node may hold the database since a failover).
    lease: Arc<crate::lease::Lease>,
    /// Where replicas' reads of the unstored tail of the WAL got to (`read_tail`). Boxed:
    /// only a primary with replicas has one, and a node holds 100,000 logs.
    tail: Mutex<Option<Box<TailCursor>>>,
    /// Raised by every commit (just before it lands: readers of the tail look again a
    /// moment later if they find nothing yet).
    commit_signal: tokio::sync::Notify,
}

/// Where a database's log keeps its [`LogState`]: beside its file.
fn state_path(file: &Path) -> PathBuf {
    file.with_file_name("log.json")
}

/// The frames of the WAL after the stored head, read once for every replica: the cursor
/// moves forward as new transactions commit, and the last few MiB stay buffered.
struct TailCursor {
    /// The last frame read, its rolling checksum, and where in the WAL the next begins.
    frame_no: u64,
    checksum: u64,
    position: Option<WalPosition>,
    buffer: VecDeque<Frame>,
    buffer_bytes: usize,
}

/// Bytes of tail frames kept for replicas that are a little behind.
const TAIL_BUFFER_BYTES: usize = 32 * 1024 * 1024;

/// What a replica asking for frames after some frame gets from the primary's WAL.
#[derive(Debug)]
pub enum TailRead {
    /// Whole transactions after the frame asked for (none when it is the head), and the
    /// head: the last committed frame.
    Frames { frames: Vec<Frame>, head: u64 },
    /// Those frames left the WAL (checkpointed) or the buffer: they are in object storage
    /// up to `durable`.
    Stored { durable: u64, head: u64 },
    /// The file was replaced and its snapshot is not stored yet: ask again shortly.
    SnapshotPending,
}

impl DatabaseLog {
    /// The log of the database whose file is `file`, from its `log.json` (a database
    /// without one, or with one that cannot be read, starts with a snapshot).
    pub fn open(
        id: &str,
        file: &Path,
        backlog: Arc<Backlog>,
        lease: Arc<crate::lease::Lease>,
    ) -> DatabaseLog {
        let state = match std::fs::read(state_path(file)) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(database_id = id, error = %e, "unreadable log.json: starting a new generation");
                LogState {
                    needs_snapshot: true,
                    ..LogState::default()
                }
            }),
            Err(_) => LogState {
                needs_snapshot: true,
                ..LogState::default()
            },
        };
        let dirty = state.needs_snapshot.then(Instant::now);
        if dirty.is_some() {
            backlog.mark(id);
        }
        DatabaseLog {
            id: id.to_string(),
            file: file.to_path_buf(),
            round: Mutex::new(()),
            state: Mutex::new(state),
            commit_times: Mutex::default(),
            commits: AtomicU64::new(0),
            dirty_since: Mutex::new(dirty),
            sync: Mutex::default(),
            sync_done: Condvar::new(),
            last_error: Mutex::default(),
            backlog,
            generation_asked: std::sync::atomic::AtomicBool::new(false),
            history_asked: std::sync::atomic::AtomicI64::new(0),
            history_retry_at: Mutex::new(None),
            stored_since_count: AtomicU64::new(0),
            fenced: std::sync::atomic::AtomicBool::new(false),
            lease,
            tail: Mutex::new(None),
            commit_signal: tokio::sync::Notify::new(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn state(&self) -> LogState {
        lock(&self.state).clone()
    }

    /// Fences the log (a hand-over) or lifts the fence (resumed).
    pub fn set_fenced(&self, fenced: bool) {
        self.fenced.store(fenced, Ordering::SeqCst);
    }

    /// Whether commits must be refused: the commit hook rolls them back. A handed-over
    /// copy is fenced, and so is every database of a node whose write lease ran out.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst) || !self.lease.holds()
    }

    /// Called by the commit hook of every connection that writes the database, just before
    /// SQLite commits (the write lock is held, so hooks run in commit order).
    pub fn record_commit(&self) {
        lock(&self.commit_times).push_back(now_ms());
        self.commits.fetch_add(1, Ordering::Release);
        let mut dirty = lock(&self.dirty_since);
        if dirty.is_none() {
            *dirty = Some(Instant::now());
            self.backlog.mark(&self.id);
        }
        self.commit_signal.notify_waiters();
    }

    /// Notified at every commit (replicas waiting for frames).
    pub fn commit_signal(&self) -> &tokio::sync::Notify {
        &self.commit_signal
    }

    /// Whole transactions committed after frame `after`, read from the WAL (the frames
    /// object storage may not have yet), at most about `max_bytes` of pages (always at
    /// least one transaction). Frames are numbered as the shipper will number them.
    pub fn read_tail(&self, after: u64, max_bytes: usize) -> Result<TailRead, StorageError> {
        if lock(&self.state).needs_snapshot {
            return Ok(TailRead::SnapshotPending);
        }
        let mut tail = lock(&self.tail);
        self.advance_tail(&mut tail)?;
        let cursor = tail.as_ref().expect("advanced");
        let head = cursor.frame_no;
        if after >= head {
            return Ok(TailRead::Frames {
                frames: Vec::new(),
                head,
            });
        }
        let first_buffered = cursor.buffer.front().map_or(head + 1, |f| f.frame_no);
        if after + 1 < first_buffered {
            return Ok(TailRead::Stored {
                durable: lock(&self.state).durable_frame_no,
                head,
            });
        }
        let skip = (after + 1 - first_buffered) as usize;
        let mut frames = Vec::new();
        let mut bytes = 0usize;
        let mut end_of_last_commit = 0usize;
        for frame in cursor.buffer.iter().skip(skip) {
            bytes += frame.page.len();
            frames.push(frame.clone());
            if frame.size_after != 0 {
                end_of_last_commit = frames.len();
                if bytes >= max_bytes {
                    break;
                }
            }
        }
        frames.truncate(end_of_last_commit);
        Ok(TailRead::Frames { frames, head })
    }

    /// The last committed frame (what the WAL holds after the stored head).
    pub fn head(&self) -> Result<u64, StorageError> {
        let mut tail = lock(&self.tail);
        self.advance_tail(&mut tail)?;
        Ok(tail.as_ref().map_or(0, |cursor| cursor.frame_no))
    }

    /// Reads what was committed since the cursor last read. When the WAL was restarted
    /// (everything in it had been stored and checkpointed), the cursor starts again from
    /// the shipper's own position, with the shipper held still meanwhile.
    fn advance_tail(&self, tail: &mut Option<Box<TailCursor>>) -> Result<(), StorageError> {
        let path = wal_path(&self.file);
        for attempt in 0..2 {
            if tail.is_none() || attempt > 0 {
                let _round = lock(&self.round);
                let state = lock(&self.state).clone();
                *tail = Some(Box::new(TailCursor {
                    frame_no: state.durable_frame_no,
                    checksum: state.durable_checksum,
                    position: state.wal,
                    buffer: VecDeque::new(),
                    buffer_bytes: 0,
                }));
            }
            let cursor = tail.as_mut().expect("set above");
            loop {
                let read =
                    wal::read_committed(&path, cursor.position, PAGE_SIZE as usize, 4 << 20)?;
                if read.reset && attempt == 0 && cursor.position.is_some() {
                    break;
                }
                if read.frames.is_empty() {
                    cursor.position = Some(read.position);
                    return Ok(());
                }
                for frame in read.frames {
                    cursor.frame_no += 1;
                    cursor.checksum = frame_checksum(
                        cursor.checksum,
                        frame.page_no,
                        frame.size_after,
                        &frame.page,
                    );
                    cursor.buffer_bytes += frame.page.len();
                    cursor.buffer.push_back(Frame {
                        frame_no: cursor.frame_no,
                        checksum: cursor.checksum,
                        page_no: frame.page_no,
                        size_after: frame.size_after,
                        page: frame.page,
                    });
                }
                cursor.position = Some(read.position);
                while cursor.buffer_bytes > TAIL_BUFFER_BYTES {
                    let Some(dropped) = cursor.buffer.pop_front() else {
                        break;
                    };
                    cursor.buffer_bytes -= dropped.page.len();
                }
            }
        }
        Ok(())
    }

    /// The epoch of the file (see [`LogState::file_epoch`]).
    pub fn file_epoch(&self) -> u64 {
        lock(&self.state).file_epoch
    }

    /// Bytes stored since the last count (`take_stored_since_count` resets it).
    pub fn stored_since_count(&self) -> u64 {
        self.stored_since_count.load(Ordering::Relaxed)
    }

    pub fn take_stored_since_count(&self) -> u64 {
        self.stored_since_count.swap(0, Ordering::Relaxed)
    }

    /// Commits seen so far (compared around a statement).
    pub fn commit_count(&self) -> u64 {
        self.commits.load(Ordering::Acquire)
    }

    /// The frame number of the last commit in the WAL, as the shipper numbers frames: the
    /// `replication_index` of a result that committed. Cheap (the WAL index header, no
    /// frame read): the stored head plus the WAL's committed frames past the shipper's
    /// position, or all of them when the WAL was restarted since (a restart happens only
    /// once everything in it was stored). The shipper's state is read on both sides of the
    /// index, so a round that moved meanwhile is never mixed with the index of another.
    /// `None` when no connection of the process has the database open (its index lives
    /// in the process's memory, `wal_index`): [`DatabaseLog::head`] reads the WAL instead.
    pub fn committed_head(&self) -> Option<u64> {
        let position = |state: &LogState| (state.durable_frame_no, state.wal);
        for _ in 0..3 {
            let before = position(&lock(&self.state));
            let (salts, committed) = wal::committed_in_index(&self.file)?;
            if position(&lock(&self.state)) != before {
                continue;
            }
            let (durable, wal) = before;
            return Some(match wal {
                Some(shipped) if shipped.salts == salts => {
                    durable + committed.saturating_sub(shipped.frames)
                }
                _ => durable + committed,
            });
        }
        None
    }

    /// Replaces the whole state (a database installed from object storage).
    pub fn reset(&self, state: LogState) -> Result<(), StorageError> {
        let _round = lock(&self.round);
        self.persist(&state)?;
        *lock(&self.state) = state;
        *lock(&self.dirty_since) = Some(Instant::now());
        lock(&self.commit_times).clear();
        self.backlog.mark(&self.id);
        Ok(())
    }

    /// The database's file is about to be replaced outside SQLite (an upload): the next
    /// round starts a generation with it before shipping anything. Written to `log.json`
    /// before the file moves, so a crash in between still snapshots the new file.
    pub fn expect_new_file(&self) -> Result<(), StorageError> {
        let _round = lock(&self.round);
        let mut state = lock(&self.state).clone();
        state.needs_snapshot = true;
        state.file_epoch += 1;
        self.persist(&state)?;
        *lock(&self.state) = state;
        *lock(&self.dirty_since) = Some(Instant::now());
        self.backlog.mark_and_wake(&self.id);
        Ok(())
    }

    /// Asks the next round for a new generation (a snapshot at the head of the log), as
    /// the shipper cuts by itself when the log since the last one is long.
    pub fn start_generation(&self) {
        self.generation_asked.store(true, Ordering::Release);
        self.backlog.mark_and_wake(&self.id);
    }

    /// The database's configuration says its history starts at `since_ms` (a transfer,
    /// `super::history`): unless the log's history starts there already, the next round
    /// starts a new one, and [`DatabaseLog::history_pending`] says so meanwhile.
    pub fn ask_history(&self, since_ms: i64) {
        let before = self.history_asked.fetch_max(since_ms, Ordering::AcqRel);
        if since_ms > before {
            *lock(&self.history_retry_at) = None;
        }
        if self.history_pending() {
            self.backlog.mark_and_wake(&self.id);
        }
    }

    /// Whether the history asked for is not started yet: nothing of the stored history
    /// may be served meanwhile.
    pub fn history_pending(&self) -> bool {
        self.history_asked.load(Ordering::Acquire) > lock(&self.state).history_since_ms
    }

    /// Whether a round should start the history asked for now.
    fn history_due(&self) -> bool {
        self.history_pending() && lock(&self.history_retry_at).is_none_or(|at| Instant::now() >= at)
    }

    /// Whether a `sync` commit waits for a round.
    pub fn sync_pending(&self) -> bool {
        let sync = lock(&self.sync);
        sync.requested > sync.completed
    }

    /// Whether a generation was asked for and not cut yet.
    pub fn generation_pending(&self) -> bool {
        self.generation_asked.load(Ordering::Acquire) || lock(&self.state).needs_snapshot
    }

    /// Whether a round is due: a snapshot is owed, a `sync` commit waits, or the oldest
    /// unshipped commit has waited `lag`.
    pub fn due(&self, lag: Duration) -> bool {
        if lock(&self.state).needs_snapshot
            || self.generation_asked.load(Ordering::Acquire)
            || self.history_due()
        {
            // A database awaiting its upload has no file to snapshot yet.
            return self.file.exists();
        }
        {
            let sync = lock(&self.sync);
            if sync.requested > sync.completed {
                return true;
            }
        }
        lock(&self.dirty_since).is_some_and(|since| since.elapsed() >= lag)
    }

    /// Whether the log has work for the shipper, due now or later: commits not shipped, a
    /// snapshot or history owed, a `sync` wait. A log without is not visited by the
    /// node's shipper loop until it gets some ([`Backlog`]).
    pub fn has_work(&self) -> bool {
        lock(&self.dirty_since).is_some()
            || lock(&self.state).needs_snapshot
            || self.generation_asked.load(Ordering::Acquire)
            || self.history_pending()
            || self.sync_pending()
    }

    /// Whether the oldest commit not yet shipped has waited longer than `bound`.
    pub fn unshipped_longer_than(&self, bound: Duration) -> bool {
        lock(&self.dirty_since).is_some_and(|since| since.elapsed() > bound)
    }

    pub fn status(&self) -> LogStatus {
        let state = lock(&self.state);
        let pending = lock(&self.commit_times).len() as u64;
        let lag_ms = match *lock(&self.dirty_since) {
            Some(since) if self.file.exists() => since.elapsed().as_millis() as u64,
            _ => 0,
        };
        LogStatus {
            durable_frame_no: state.durable_frame_no,
            last_commit_ms: state.last_commit_ms,
            pending_commits: pending,
            lag_ms,
            last_error: lock(&self.last_error).clone(),
        }
    }

    /// Waits until everything committed before this call is stored (`sync` mode), at most
    /// `timeout`. Commits of concurrent callers share one round (group commit).
    pub fn wait_durable(&self, timeout: Duration) -> Result<(), StorageError> {
        let deadline = Instant::now() + timeout;
        let mut sync = lock(&self.sync);
        sync.requested += 1;
        let ticket = sync.requested;
        self.backlog.mark_and_wake(&self.id);
        loop {
            if sync.completed >= ticket {
                return Ok(());
            }
            if let Some((through, why)) = &sync.failed {
                if *through >= ticket {
                    return Err(StorageError::ObjectStorage(format!(
                        "the commit is in the node's WAL but could not be stored durably ({why}); treat its outcome as unknown"
                    )));
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StorageError::ObjectStorage(format!(
                    "the commit is in the node's WAL but was not stored durably within {} s; treat its outcome as unknown",
                    timeout.as_secs()
                )));
            }
            sync = self
                .sync_done
                .wait_timeout(sync, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn persist(&self, state: &LogState) -> Result<(), StorageError> {
        // Derived rather than kept: one path less per database in memory.
        let state_path = state_path(&self.file);
        let tmp = state_path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(state).map_err(|e| StorageError::Internal(e.to_string()))?;
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, &state_path)?;
        Ok(())
    }

    /// One round: a snapshot if one is owed, every committed frame shipped, a checkpoint
    /// when the WAL is long, a new generation when the log since the last one is long.
    /// Runs on a blocking thread.
    pub fn ship_round(&self, ctx: &ShipContext<'_>) -> Result<(), StorageError> {
        let _round = lock(&self.round);
        let ticket = lock(&self.sync).requested;
        let result = self.round_inner(ctx);
        {
            let mut sync = lock(&self.sync);
            match &result {
                Ok(()) => {
                    sync.completed = sync.completed.max(ticket);
                    if sync.failed.as_ref().is_some_and(|(t, _)| *t <= ticket) {
                        sync.failed = None;
                    }
                }
                Err(e) => sync.failed = Some((ticket, e.to_string())),
            }
        }
        self.sync_done.notify_all();
        *lock(&self.last_error) = result.as_ref().err().map(|e| e.to_string());
        result
    }

    fn round_inner(&self, ctx: &ShipContext<'_>) -> Result<(), StorageError> {
        let mut state = lock(&self.state).clone();
        if !self.file.exists() {
            // Awaiting its upload: nothing to ship yet, and nothing behind.
            *lock(&self.dirty_since) = None;
            return Ok(());
        }
        if state.needs_snapshot {
            self.snapshot(ctx, &mut state, true)?;
        }
        self.ship_all(ctx, &mut state)?;
        if self.history_due() {
            let since_ms = self.history_asked.load(Ordering::Acquire);
            if let Err(e) = self.start_history(ctx, &mut state, since_ms) {
                // Its history is refused meanwhile; commits go on being shipped.
                tracing::warn!(database_id = %self.id, error = %e, "cannot start the new history of a transferred database yet; retrying");
                *lock(&self.history_retry_at) = Some(Instant::now() + super::history::RETRY);
                state = lock(&self.state).clone();
            }
        }
        let wal_frames = state.wal.map_or(0, |w| w.frames);
        if wal_frames >= ctx.settings.checkpoint_frames {
            self.checkpoint(ctx, &mut state)?;
        }
        let file_bytes = std::fs::metadata(&self.file).map(|m| m.len()).unwrap_or(0);
        let bound = file_bytes.clamp(64 * 1024 * 1024, 1024 * 1024 * 1024);
        if state.bytes_since_snapshot > bound || self.generation_asked.swap(false, Ordering::AcqRel)
        {
            self.snapshot(ctx, &mut state, false)?;
        }
        Ok(())
    }

    /// Ships every committed transaction in the WAL after the durable position.
    fn ship_all(&self, ctx: &ShipContext<'_>, state: &mut LogState) -> Result<(), StorageError> {
        loop {
            let read_at = now_ms();
            let read = wal::read_committed(
                &wal_path(&self.file),
                state.wal,
                PAGE_SIZE as usize,
                ctx.settings.segment_max_bytes,
            )?;
            if read.frames.is_empty() {
                if read.reset || state.wal.is_none() {
                    state.wal = Some(read.position);
                    self.commit_state(state)?;
                }
                // Caught up: commit times left over from before this read belong to
                // commits that never reached the WAL (a commit that failed).
                let mut times = lock(&self.commit_times);
                while times.front().is_some_and(|&t| t < read_at - 2000) {
                    times.pop_front();
                }
                if times.is_empty() {
                    *lock(&self.dirty_since) = None;
                }
                return Ok(());
            }
            self.ship_frames(ctx, state, read.frames, read.position)?;
        }
    }

    fn ship_frames(
        &self,
        ctx: &ShipContext<'_>,
        state: &mut LogState,
        wal_frames: Vec<wal::WalFrame>,
        position: WalPosition,
    ) -> Result<(), StorageError> {
        let commit_count = wal_frames.iter().filter(|f| f.size_after != 0).count();
        let times = self.take_commit_times(commit_count, state.last_commit_ms);
        let first = state.durable_frame_no + 1;
        let mut running = state.durable_checksum;
        let mut frames = Vec::with_capacity(wal_frames.len());
        let mut commits = Vec::with_capacity(commit_count);
        let mut bytes = 0u64;
        for (offset, frame) in wal_frames.into_iter().enumerate() {
            let frame_no = first + offset as u64;
            running = frame_checksum(running, frame.page_no, frame.size_after, &frame.page);
            if frame.size_after != 0 {
                commits.push((frame_no, times[commits.len()]));
            }
            bytes += frame.page.len() as u64;
            frames.push(Frame {
                frame_no,
                checksum: running,
                page_no: frame.page_no,
                size_after: frame.size_after,
                page: frame.page,
            });
        }
        let last = first + frames.len() as u64 - 1;
        let segment = Segment {
            database_id: self.id.clone(),
            first,
            last,
            previous_checksum: state.durable_checksum,
            commits,
            frames,
        };
        let first_ms = segment.commits.first().map_or(0, |c| c.1);
        let last_ms = segment.commits.last().map_or(0, |c| c.1);
        let key = keys::segment(&self.id, first, last, first_ms, last_ms);
        let encoded = Bytes::from(segment.encode());
        let encoded_len = encoded.len() as u64;
        ctx.block_on(ctx.storage.put(&key, encoded))?;
        metrics::counter!("atoll_storage_segments_total").increment(1);
        metrics::counter!("atoll_storage_log_bytes_total").increment(encoded_len);
        self.stored_since_count
            .fetch_add(encoded_len, Ordering::Relaxed);
        state.durable_frame_no = last;
        state.durable_checksum = running;
        state.last_commit_ms = last_ms;
        state.wal = Some(position);
        state.bytes_since_snapshot += bytes;
        self.commit_state(state)
    }

    /// The commit times of the next `count` shipped transactions: recorded by the commit
    /// hooks, in order; a commit without a record (a connection without the hook) gets
    /// the time it was read. Never earlier than the last shipped commit.
    fn take_commit_times(&self, count: usize, not_before: i64) -> Vec<i64> {
        let now = now_ms();
        let mut recorded = lock(&self.commit_times);
        let mut out = Vec::with_capacity(count);
        let mut floor = not_before;
        for _ in 0..count {
            let t = recorded.pop_front().unwrap_or(now).max(floor);
            floor = t;
            out.push(t);
        }
        out
    }

    fn commit_state(&self, state: &LogState) -> Result<(), StorageError> {
        self.persist(state)?;
        *lock(&self.state) = state.clone();
        Ok(())
    }

    /// Checkpoints the WAL into the database file. Only frames already stored may be
    /// checkpointed (a reset WAL would lose the rest), so the tail is shipped while the
    /// write lock is held; a PASSIVE checkpoint on a second connection then copies what
    /// readers allow, and the next writer restarts the WAL once all of it was copied.
    fn checkpoint(&self, ctx: &ShipContext<'_>, state: &mut LogState) -> Result<(), StorageError> {
        let writer = internal_connection(&self.file)?;
        if let Err(e) = writer.execute_batch("BEGIN IMMEDIATE") {
            // A tenant's transaction holds the lock: next round.
            tracing::debug!(database_id = %self.id, error = %e, "checkpoint postponed");
            return Ok(());
        }
        let result = (|| {
            self.ship_all(ctx, state)?;
            let checkpointer = internal_connection(&self.file)?;
            // Schema-free, so it also runs on an encrypted database without its key.
            crate::encryption::engine::checkpoint(
                &checkpointer,
                rusqlite::ffi::SQLITE_CHECKPOINT_PASSIVE,
            )?;
            Ok(())
        })();
        let _ = writer.execute_batch("ROLLBACK");
        result
    }

    /// Starts the history a transfer asked for (`super::history`), everything committed so
    /// far being stored: the live database vacuumed (no free page or free space carries a
    /// deleted row on), a generation of it, the history's start recorded in object
    /// storage (from then on nothing before it is read), then the old history deleted.
    fn start_history(
        &self,
        ctx: &ShipContext<'_>,
        state: &mut LogState,
        since_ms: i64,
    ) -> Result<(), StorageError> {
        if self.is_fenced() {
            return Err(StorageError::Unavailable(
                "this copy of the database may not write (handed over, or without the node's write lease)".into(),
            ));
        }
        let conn = internal_connection(&self.file)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.execute_batch("VACUUM")?;
        drop(conn);
        // Its frames are shipped as the log (replicas apply them like any transaction),
        // then the snapshot is taken at the head after them.
        self.snapshot(ctx, state, false)?;
        let history = super::history::History {
            start: state.generation_start,
            created_ms: state.generation_created_ms,
            since_ms,
        };
        ctx.block_on(history.store(ctx.storage, &self.id))?;
        state.history_start = history.start;
        state.history_since_ms = since_ms;
        self.commit_state(state)?;
        tracing::info!(database_id = %self.id, start = history.start, "a transferred database's history starts anew");
        // Never read again (`Catalog::load` leaves it out); retention deletes what this
        // could not.
        if let Err(e) = ctx.block_on(super::history::delete_older(
            ctx.storage,
            &self.id,
            &history,
        )) {
            tracing::warn!(database_id = %self.id, error = %e, "the history before a transfer is left for retention to delete");
        }
        Ok(())
    }

    /// Starts a generation: a consistent copy of the file as of the durable head, stored
    /// before anything relies on it (its manifest last). With `absorb`, frames in the WAL
    /// since the file was replaced are part of the snapshot, not shipped as log.
    fn snapshot(
        &self,
        ctx: &ShipContext<'_>,
        state: &mut LogState,
        absorb: bool,
    ) -> Result<(), StorageError> {
        let writer = internal_connection(&self.file)?;
        writer.busy_timeout(Duration::from_secs(5))?;
        writer.execute_batch("BEGIN IMMEDIATE").map_err(|e| {
            StorageError::Unavailable(format!("snapshot postponed, the database is busy: {e}"))
        })?;
        let reader = internal_connection(&self.file)?;
        let pinned = (|| {
            if absorb {
                let read = wal::read_committed(
                    &wal_path(&self.file),
                    state.wal,
                    PAGE_SIZE as usize,
                    usize::MAX,
                )?;
                state.wal = Some(read.position);
                lock(&self.commit_times).clear();
            } else {
                self.ship_all(ctx, state)?;
            }
            reader.execute_batch("BEGIN")?;
            // A read that starts the transaction without loading the schema (ciphertext
            // to this connection when the database is encrypted).
            reader.query_row("PRAGMA schema_version", [], |_| Ok(()))?;
            Ok::<i64, StorageError>(now_ms().max(state.last_commit_ms))
        })();
        let _ = writer.execute_batch("ROLLBACK");
        drop(writer);
        let created_ms = pinned?;
        let tmp = self.file.with_file_name("snapshot.tmp");
        let _ = std::fs::remove_file(&tmp);
        let copied = reader.backup(rusqlite::DatabaseName::Main, &tmp, None);
        let _ = reader.execute_batch("COMMIT");
        drop(reader);
        let result = (|| {
            copied?;
            let bytes = store_generation(ctx, &self.id, &tmp, created_ms, state)?;
            self.stored_since_count.fetch_add(bytes, Ordering::Relaxed);
            self.commit_state(state)
        })();
        let _ = std::fs::remove_file(&tmp);
        result
    }
}

/// Stores `file` (a consistent copy of database `id` as of `state`'s durable frame) as a
/// new generation taken at `created_ms`, snapshot first and manifest last, and records it
/// in `state`.
pub(crate) fn store_generation(
    ctx: &ShipContext<'_>,
    id: &str,
    file: &Path,
    created_ms: i64,
    state: &mut LogState,
) -> Result<u64, StorageError> {
    let (sha256, bytes) = file_sha256(file)?;
    let start = state.durable_frame_no;
    let dir = keys::generation(id, start, created_ms);
    ctx.block_on(ctx.storage.put_file(&format!("{dir}snapshot.db"), file))?;
    let manifest = Manifest {
        database_id: id.to_string(),
        start,
        start_checksum: state.durable_checksum,
        created_ms,
        bytes,
        pages: bytes / PAGE_SIZE,
        sha256,
        atoll_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let json =
        serde_json::to_vec_pretty(&manifest).map_err(|e| StorageError::Internal(e.to_string()))?;
    ctx.block_on(
        ctx.storage
            .put(&format!("{dir}manifest.json"), Bytes::from(json)),
    )?;
    state.generation_start = start;
    state.generation_created_ms = created_ms;
    state.bytes_since_snapshot = 0;
    state.needs_snapshot = false;
    if state.last_commit_ms == 0 {
        state.last_commit_ms = created_ms;
    }
    tracing::info!(database_id = %id, start, bytes, "generation stored");
    Ok(bytes)
}

/// The first generation of a new database, from its file before anyone can write it:
/// the database is restorable from its first instant. Writes `log.json` beside `file`.
pub fn first_generation(ctx: &ShipContext<'_>, id: &str, file: &Path) -> Result<(), StorageError> {
    let mut state = LogState::default();
    store_generation(ctx, id, file, now_ms(), &mut state)?;
    let bytes = serde_json::to_vec(&state).map_err(|e| StorageError::Internal(e.to_string()))?;
    std::fs::write(state_path(file), bytes)?;
    Ok(())
}

/// A generation's `manifest.json`, written after its snapshot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub database_id: String,
    /// The snapshot is the database as of this frame (0: before any).
    pub start: u64,
    pub start_checksum: u64,
    pub created_ms: i64,
    pub bytes: u64,
    pub pages: u64,
    /// Hex SHA-256 of `snapshot.db`, checked on every restore.
    pub sha256: String,
    pub atoll_version: String,
}

/// What a round needs besides the log: the store, the settings, and the runtime to reach
/// the store from a blocking thread.
pub struct ShipContext<'a> {
    pub storage: &'a Storage,
    pub settings: &'a StorageSettings,
    pub runtime: &'a tokio::runtime::Handle,
}

impl ShipContext<'_> {
    fn block_on<T>(&self, future: impl std::future::Future<Output = T>) -> T {
        self.runtime.block_on(future)
    }
}

pub fn wal_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push("-wal");
    file.with_file_name(name)
}

/// A connection of Atoll's own to a database file: never checkpoints by itself, neither
/// automatically nor when it closes (only the shipper checkpoints, after shipping).
pub fn internal_connection(file: &Path) -> Result<rusqlite::Connection, StorageError> {
    let conn = rusqlite::Connection::open(file)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")?;
    Ok(conn)
}

pub(crate) fn file_sha256(path: &Path) -> Result<(String, u64), StorageError> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1024 * 1024];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((super::hex(&hasher.finalize()), total))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
