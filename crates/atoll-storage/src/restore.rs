//! Rebuilding a database from object storage: the newest generation at or before the
//! target, then the log's transactions after it, each segment verified, applied page by
//! page onto a staging file. A missing or damaged object stops the restore with an error
//! naming it and the frame where the log broke; nothing partial is ever installed.

use super::segment::Segment;
use super::shipper::{LogState, Manifest};
use super::{keys, now_ms, Storage};
use crate::error::StorageError;
use crate::PAGE_SIZE;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// Which state of the database to rebuild.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Everything stored.
    Latest,
    /// The last transaction committed at or before this instant (ms since the epoch).
    Time(i64),
    /// Exactly the state after this frame, which must end a transaction (replicas ask for
    /// a state by its frame number).
    Frame(u64),
}

/// One generation, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationInfo {
    pub start: u64,
    pub created_ms: i64,
    pub bytes: u64,
}

/// One segment, as listed (from its key alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub key: String,
    pub first: u64,
    pub last: u64,
    pub first_ms: i64,
    pub last_ms: i64,
    pub bytes: u64,
}

/// Everything stored of one database.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub generations: Vec<GenerationInfo>,
    pub segments: Vec<SegmentInfo>,
    pub bytes: u64,
    /// Where its current history starts, when a transfer started it anew.
    pub history: Option<super::history::History>,
}

impl Catalog {
    /// What is stored of database `id`'s current history: a transfer starts it anew
    /// (`super::history`), and nothing from before is ever read through this.
    pub async fn load(storage: &Storage, id: &str) -> Result<Catalog, StorageError> {
        let mut catalog = Catalog::load_everything(storage, id).await?;
        let history = super::history::History::load(storage, id).await?;
        if let Some(history) = &history {
            history.leave_out_older(&mut catalog);
        }
        catalog.history = history;
        Ok(catalog)
    }

    /// Everything stored of database `id`, the histories before a transfer included (for
    /// retention, which deletes them).
    pub async fn load_everything(storage: &Storage, id: &str) -> Result<Catalog, StorageError> {
        let mut catalog = Catalog::default();
        for object in storage.list(&keys::generations(id)).await? {
            catalog.bytes += object.size;
            if !object.key.ends_with("/manifest.json") {
                continue;
            }
            // Only a generation whose manifest exists is whole: the manifest goes last.
            if let Some((start, created_ms)) = keys::parse_generation(&object.key) {
                catalog.generations.push(GenerationInfo {
                    start,
                    created_ms,
                    bytes: 0,
                });
            }
        }
        for object in storage.list(&keys::generations(id)).await? {
            if let Some((start, created_ms)) = keys::parse_generation(&object.key) {
                if object.key.ends_with("/snapshot.db") {
                    if let Some(g) = catalog
                        .generations
                        .iter_mut()
                        .find(|g| g.start == start && g.created_ms == created_ms)
                    {
                        g.bytes = object.size;
                    }
                }
            }
        }
        for object in storage.list(&keys::log(id)).await? {
            catalog.bytes += object.size;
            if let Some((first, last, first_ms, last_ms)) = keys::parse_segment(&object.key) {
                catalog.segments.push(SegmentInfo {
                    key: object.key,
                    first,
                    last,
                    first_ms,
                    last_ms,
                    bytes: object.size,
                });
            }
        }
        catalog.generations.sort_by_key(|g| (g.created_ms, g.start));
        catalog.segments.sort_by_key(|s| (s.first, s.last));
        Ok(catalog)
    }

    pub fn is_empty(&self) -> bool {
        self.generations.is_empty()
    }

    /// The restorable window, `(from, to)` in ms: from the oldest generation (or the
    /// retention bound, whichever is later) to the last stored commit.
    pub fn window(&self, retention_days: Option<u32>) -> Option<(i64, i64)> {
        let oldest = self.generations.first()?.created_ms;
        let newest_generation = self.generations.last()?.created_ms;
        let last_commit = self.segments.iter().map(|s| s.last_ms).max().unwrap_or(0);
        let from = match retention_days {
            Some(days) if days > 0 => oldest.max(now_ms() - i64::from(days) * 86_400_000),
            _ => oldest,
        };
        Some((
            from.min(newest_generation),
            last_commit.max(newest_generation),
        ))
    }

    /// The segments that continue the log from frame `after`, in order, tolerating
    /// overlaps (a segment shipped again after a crash holds the same frames).
    pub fn chain_after(&self, after: u64) -> Vec<&SegmentInfo> {
        let mut chain = Vec::new();
        let mut head = after;
        loop {
            let next = self
                .segments
                .iter()
                .filter(|s| s.first <= head + 1 && s.last > head)
                .max_by_key(|s| s.last);
            match next {
                Some(segment) => {
                    head = segment.last;
                    chain.push(segment);
                }
                None => return chain,
            }
        }
    }
}

/// What a restore produced.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The last frame applied, and its checksum: a database rebuilt in place continues its
    /// log after it.
    pub frame_no: u64,
    pub checksum: u64,
    /// Commit time of the last transaction applied (or the generation's time).
    pub commit_ms: i64,
    pub generation: GenerationInfo,
}

impl Restored {
    /// The log state of a database that now holds exactly this file: its log goes on
    /// after the restored frame, and (being a new file) starts with a snapshot... unless
    /// it is the same database's own state, which its existing log already holds.
    pub fn continuing_state(&self) -> LogState {
        LogState {
            durable_frame_no: self.frame_no,
            durable_checksum: self.checksum,
            last_commit_ms: self.commit_ms,
            wal: None,
            generation_start: self.generation.start,
            generation_created_ms: self.generation.created_ms,
            bytes_since_snapshot: 0,
            needs_snapshot: false,
            file_epoch: 0,
            history_start: 0,
            history_since_ms: 0,
        }
    }
}

/// Rebuilds database `id` as of `target` into the file `dest` (which must not exist).
/// The result passed `PRAGMA quick_check`.
pub async fn restore_to_file(
    storage: &Storage,
    id: &str,
    target: Target,
    retention_days: Option<u32>,
    dest: &Path,
) -> Result<Restored, StorageError> {
    let catalog = Catalog::load(storage, id).await?;
    if catalog.is_empty() {
        return Err(StorageError::BadRequest(format!(
            "database {id} has no backup in object storage yet"
        )));
    }
    if let Target::Time(at) = target {
        let (from, to) = catalog.window(retention_days).expect("not empty");
        if let Some(history) = catalog.history.as_ref().filter(|h| at < h.created_ms) {
            return Err(history.refuse_before(at));
        }
        if at < from || at > now_ms() {
            return Err(StorageError::BadRequest(format!(
                "{} is outside the restorable window of the database: from {} to now (last write {})",
                rfc3339(at),
                rfc3339(from),
                rfc3339(to)
            )));
        }
    }
    let generation = match target {
        Target::Latest => catalog.generations.last(),
        Target::Time(at) => catalog
            .generations
            .iter()
            .rev()
            .find(|g| g.created_ms <= at),
        Target::Frame(frame) => catalog.generations.iter().rev().find(|g| g.start <= frame),
    }
    .cloned()
    .ok_or_else(|| {
        StorageError::BadRequest(format!(
            "no generation of database {id} precedes the requested time"
        ))
    })?;

    let dir = keys::generation(id, generation.start, generation.created_ms);
    let manifest: Manifest = {
        let key = format!("{dir}manifest.json");
        let bytes = storage
            .get(&key)
            .await?
            .ok_or_else(|| StorageError::ObjectStorage(format!("object {key} is missing")))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            StorageError::ObjectStorage(format!("object {key} is not a manifest: {e}"))
        })?
    };
    let snapshot_key = format!("{dir}snapshot.db");
    let hasher = std::sync::Arc::new(std::sync::Mutex::new(Sha256::new()));
    let hashing = std::sync::Arc::clone(&hasher);
    let bytes = storage
        .get_to_file(&snapshot_key, dest, move |chunk| {
            hashing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .update(chunk)
        })
        .await?;
    let digest = super::hex(
        &std::mem::take(&mut *hasher.lock().unwrap_or_else(|p| p.into_inner())).finalize(),
    );
    if digest != manifest.sha256 || bytes != manifest.bytes {
        let _ = std::fs::remove_file(dest);
        return Err(StorageError::ObjectStorage(format!(
            "object {snapshot_key} is corrupt: its SHA-256 or size does not match its manifest"
        )));
    }

    // Later generations of the same start (an upload, a rebuild) replaced the file: the
    // log after this generation's start belongs to it only until the next one.
    let next_generation_ms = catalog
        .generations
        .iter()
        .find(|g| g.created_ms > generation.created_ms)
        .map(|g| g.created_ms);
    let (limit_ms, limit_frame) = match target {
        Target::Latest => (next_generation_ms.unwrap_or(i64::MAX), u64::MAX),
        Target::Time(at) => (at, u64::MAX),
        Target::Frame(frame) => (i64::MAX, frame),
    };

    let mut restored = Restored {
        frame_no: manifest.start,
        checksum: manifest.start_checksum,
        commit_ms: generation.created_ms,
        generation: generation.clone(),
    };
    let result = apply_log(
        storage,
        id,
        &catalog,
        dest,
        limit_ms,
        limit_frame,
        &mut restored,
    )
    .await
    .and_then(|()| match target {
        Target::Frame(frame) if restored.frame_no != frame => Err(StorageError::BadRequest(format!(
            "frame {frame} of database {id} does not end a transaction in its stored log (the nearest state is frame {})",
            restored.frame_no
        ))),
        _ => Ok(()),
    });
    if let Err(e) = result {
        let _ = std::fs::remove_file(dest);
        return Err(e);
    }
    let check = dest.to_path_buf();
    tokio::task::spawn_blocking(move || check_restored(&check))
        .await
        .map_err(|e| StorageError::Internal(e.to_string()))?
        .inspect_err(|_| {
            let _ = std::fs::remove_file(dest);
        })?;
    Ok(restored)
}

/// Checks a rebuilt file: `PRAGMA quick_check`. Unbounded, unlike the checks of files
/// tenants send: a rebuild must not fail for time. An encrypted database's rows cannot be
/// read here (no key): its segments' checksums were the check, a damaged page fails its
/// tag at the first keyed read, and what can be read without the key is (the header).
fn check_restored(file: &Path) -> Result<(), StorageError> {
    let conn = rusqlite::Connection::open(file)?;
    if crate::encryption::is_encrypted_file(file)? {
        return conn
            .query_row("PRAGMA schema_version", [], |_| Ok(()))
            .map_err(|e| {
                StorageError::BadRequest(format!("the restored database is damaged ({e})"))
            });
    }
    let check: Result<String, _> = conn.query_row("PRAGMA quick_check", [], |row| row.get(0));
    match check {
        Ok(result) if result == "ok" => Ok(()),
        Ok(result) => Err(StorageError::BadRequest(format!(
            "the restored database is damaged ({})",
            first_words(&result)
        ))),
        Err(e) => Err(StorageError::BadRequest(format!(
            "the restored database is damaged ({e})"
        ))),
    }
}

/// The start of `quick_check`'s report (it lists every problem it finds) on one line.
fn first_words(report: &str) -> String {
    let report = report.split_whitespace().collect::<Vec<_>>().join(" ");
    match report.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &report[..at]),
        None => report,
    }
}

async fn apply_log(
    storage: &Storage,
    id: &str,
    catalog: &Catalog,
    dest: &Path,
    limit_ms: i64,
    limit_frame: u64,
    restored: &mut Restored,
) -> Result<(), StorageError> {
    let mut file = std::fs::OpenOptions::new().write(true).open(dest)?;
    for info in catalog.chain_after(restored.frame_no) {
        if info.first_ms > limit_ms || info.first > limit_frame {
            break;
        }
        let bytes = storage.get(&info.key).await?.ok_or_else(|| {
            StorageError::ObjectStorage(format!("object {} is missing", info.key))
        })?;
        let segment = Segment::decode(&bytes, id, PAGE_SIZE as usize).map_err(|why| {
            StorageError::ObjectStorage(format!("object {} is damaged: {why}", info.key))
        })?;
        // The segment continues the log exactly where it stands (overlaps skip the frames
        // already applied, which must then be the same frames).
        let skip = restored.frame_no + 1 - segment.first;
        let expected_previous = if skip == 0 {
            segment.previous_checksum
        } else {
            segment.frames[skip as usize - 1].checksum
        };
        if expected_previous != restored.checksum {
            return Err(StorageError::ObjectStorage(format!(
                "object {} does not continue the log at frame {}: the checksum chain breaks",
                info.key,
                restored.frame_no + 1
            )));
        }
        let mut pending = Vec::new();
        for frame in segment.frames.iter().skip(skip as usize) {
            pending.push(frame);
            if frame.size_after == 0 {
                continue;
            }
            let commit_ms = segment
                .commits
                .iter()
                .find(|(f, _)| *f == frame.frame_no)
                .map_or(info.last_ms, |c| c.1);
            if commit_ms > limit_ms || frame.frame_no > limit_frame {
                file.sync_all()?;
                return Ok(());
            }
            for page in pending.drain(..) {
                file.seek(SeekFrom::Start(u64::from(page.page_no - 1) * PAGE_SIZE))?;
                file.write_all(&page.page)?;
            }
            file.set_len(u64::from(frame.size_after) * PAGE_SIZE)?;
            restored.frame_no = frame.frame_no;
            restored.checksum = frame.checksum;
            restored.commit_ms = commit_ms;
        }
    }
    // A segment whose frames would continue the log exists beyond a gap: the log is broken,
    // and the state asked for may lie past it.
    if let Some(beyond) = catalog.segments.iter().find(|s| {
        s.first > restored.frame_no + 1 && s.first_ms <= limit_ms && s.first <= limit_frame
    }) {
        return Err(StorageError::ObjectStorage(format!(
            "the log of database {id} is missing frames {} to {} (the next object is {})",
            restored.frame_no + 1,
            beyond.first - 1,
            beyond.key
        )));
    }
    file.sync_all()?;
    Ok(())
}

/// RFC 3339 in UTC with milliseconds, for messages.
pub fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ms} ms"))
}
