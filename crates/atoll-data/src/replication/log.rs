//! Reading a database's stored log for replicas: frames from any frame number on, and the
//! database as of any transaction still in the log.
//!
//! Replicas pull in small batches (the `libsql` crate asks for 128 frames at a time) while
//! segments hold up to 8 MiB of frames, so decoded segments are kept in a node-wide cache
//! bounded in bytes, and each database's listing of its log is kept until a replica asks
//! for a frame past it.

use crate::database::{Database, PAGE_SIZE};
use crate::error::DataError;
use crate::node::Node;
use atoll_storage::restore::{self, Catalog, Target};
use atoll_storage::segment::{Frame, Segment};
use atoll_storage::Storage;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Decoded segments kept in memory, node-wide.
const SEGMENT_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Exports and snapshots rebuilt at once, node-wide: each reads a whole database from
/// object storage into a temporary file, so clients asking for many cannot multiply that.
const CONCURRENT_REBUILDS: usize = 4;

/// The longest a sync waits for commits made before it to be stored.
const COMMIT_WAIT: Duration = Duration::from_secs(5);

/// The last frame stored in object storage: what replicas can be given.
pub fn durable_head(db: &Database) -> Option<u64> {
    db.log().map(|log| log.state().durable_frame_no)
}

/// Waits, at most [`COMMIT_WAIT`], until every commit made before this call is stored, so
/// that a sync sees what was acknowledged before it began (the shipper would store it
/// within `--durability-lag` anyway; this only makes it sooner). Answers the durable head.
/// When object storage does not answer in time the replica gets what is stored.
pub async fn wait_for_commits(db: &Arc<Database>) -> Option<u64> {
    let log = Arc::clone(db.log()?);
    let status = log.status();
    if status.pending_commits > 0 || status.lag_ms > 0 {
        let waiting = Arc::clone(&log);
        let waited = tokio::task::spawn_blocking(move || waiting.wait_durable(COMMIT_WAIT)).await;
        if let Ok(Err(e)) = waited {
            tracing::debug!(database_id = %db.id(), error = %e, "sync serves the stored log only");
        }
    }
    Some(log.state().durable_frame_no)
}

/// The last frame of database `id`'s log found in object storage, listing it again when
/// the listing kept from before ends earlier than `at_least` (what a replica holds);
/// `None` when no segment of the log is listed. A replica's pulls serve no further.
pub async fn stored_head(
    storage: &Storage,
    id: &str,
    at_least: u64,
) -> Result<Option<u64>, DataError> {
    let catalog = catalog(storage, id, at_least, false).await?;
    Ok(catalog.segments.iter().map(|s| s.last).max())
}

/// What reading frames can find.
pub enum Frames {
    /// Frames `first..` in order, without gaps (fewer than asked when the log ends sooner).
    Found(Vec<Frame>),
    /// The frames asked for are no longer in the log (retention removed them).
    Gone,
}

/// Frames `first..=last` of database `id` from its stored log.
pub async fn read_frames(
    storage: &Storage,
    id: &str,
    first: u64,
    last: u64,
) -> Result<Frames, DataError> {
    debug_assert!(first >= 1 && last >= first);
    for attempt in 0..2 {
        let catalog = catalog(storage, id, last, attempt > 0).await?;
        let chain = catalog.chain_after(first - 1);
        if chain.first().is_none_or(|s| s.first > first) {
            if attempt == 0 {
                continue;
            }
            return Ok(Frames::Gone);
        }
        let mut out: Vec<Frame> = Vec::new();
        let mut missing = false;
        for info in chain {
            let next = out.last().map_or(first, |f| f.frame_no + 1);
            if next > last {
                break;
            }
            let Some(segment) = segment(storage, id, &info.key).await? else {
                missing = true;
                break;
            };
            for frame in &segment.frames {
                if frame.frame_no < next {
                    continue;
                }
                if frame.frame_no > last {
                    break;
                }
                let expected = out.last().map_or(first, |f| f.frame_no + 1);
                if frame.frame_no != expected {
                    return Err(DataError::Storage(format!(
                        "the log of database {id} is missing frame {expected} (object {})",
                        info.key
                    )));
                }
                out.push(frame.clone());
            }
        }
        if missing {
            // Retention removed a segment since the listing: list again once.
            continue;
        }
        return Ok(Frames::Found(out));
    }
    Ok(Frames::Gone)
}

/// Rebuilds database `db` as of frame `frame` (the end of a transaction) from object
/// storage into a fresh staging file; the caller removes the directory it is in.
pub async fn state_at(node: &Node, db: &Database, frame: u64) -> Result<PathBuf, DataError> {
    static REBUILDS: tokio::sync::Semaphore =
        tokio::sync::Semaphore::const_new(CONCURRENT_REBUILDS);
    let storage = node.storage().ok_or_else(no_storage)?;
    let _permit = REBUILDS
        .acquire()
        .await
        .map_err(|e| DataError::Internal(e.to_string()))?;
    let dir = node.staging_dir(&format!(
        "{}-export-{:016x}",
        db.id(),
        rand::random::<u64>()
    ))?;
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("data");
    match restore::restore_to_file(&storage.storage, db.id(), Target::Frame(frame), None, &file)
        .await
    {
        Ok(_) => Ok(file),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e.into())
        }
    }
}

pub fn no_storage() -> DataError {
    DataError::Conflict(
        "embedded replicas sync from the database's log in object storage, and this node has none (--storage-url)".into(),
    )
}

type CatalogCache = Mutex<HashMap<String, Arc<Catalog>>>;

/// The listing of a database's log, listed again when it ends before `through` (or when
/// `fresh` is asked for).
async fn catalog(
    storage: &Storage,
    id: &str,
    through: u64,
    fresh: bool,
) -> Result<Arc<Catalog>, DataError> {
    static CACHE: OnceLock<CatalogCache> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let key = format!("{}|{id}", storage.url());
    if !fresh {
        let cached = lock(cache).get(&key).cloned();
        if let Some(catalog) = cached {
            let end = catalog.segments.iter().map(|s| s.last).max().unwrap_or(0);
            if end >= through {
                return Ok(catalog);
            }
        }
    }
    let catalog = Arc::new(Catalog::load(storage, id).await?);
    let mut cache = lock(cache);
    if cache.len() > 10_000 {
        cache.clear();
    }
    cache.insert(key, Arc::clone(&catalog));
    Ok(catalog)
}

#[derive(Default)]
struct SegmentCache {
    entries: VecDeque<(String, Arc<Segment>, usize)>,
    bytes: usize,
}

/// A decoded, verified segment; `None` when the object is gone.
async fn segment(
    storage: &Storage,
    id: &str,
    key: &str,
) -> Result<Option<Arc<Segment>>, DataError> {
    static CACHE: OnceLock<Mutex<SegmentCache>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let cache_key = format!("{}|{key}", storage.url());
    {
        let mut cache = lock(cache);
        if let Some(at) = cache.entries.iter().position(|(k, _, _)| *k == cache_key) {
            let entry = cache.entries.remove(at).expect("present");
            let segment = Arc::clone(&entry.1);
            cache.entries.push_back(entry);
            return Ok(Some(segment));
        }
    }
    let Some(bytes) = storage.get(key).await? else {
        return Ok(None);
    };
    let size = bytes.len();
    let (id, object) = (id.to_string(), key.to_string());
    let segment = tokio::task::spawn_blocking(move || {
        Segment::decode(&bytes, &id, PAGE_SIZE as usize)
            .map_err(|why| DataError::Storage(format!("object {object} is damaged: {why}")))
    })
    .await
    .map_err(|e| DataError::Internal(e.to_string()))??;
    let segment = Arc::new(segment);
    let mut cache = lock(cache);
    cache.bytes += size;
    cache
        .entries
        .push_back((cache_key, Arc::clone(&segment), size));
    while cache.bytes > SEGMENT_CACHE_BYTES && cache.entries.len() > 1 {
        if let Some((_, _, size)) = cache.entries.pop_front() {
            cache.bytes -= size;
        }
    }
    Ok(Some(segment))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
