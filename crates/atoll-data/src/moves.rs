//! Moving a database between nodes through object storage (docs/STORAGE.md, "Moves and
//! drains"). The control plane drives four idempotent steps, each a node admin call:
//!
//! 1. **hand-over** on the old holder: the database stops serving, SQLite's write lock is
//!    taken (a writer mid-transaction finishes first), everything committed is stored, and
//!    the node answers the last stored frame. Nothing can commit after it.
//! 2. **adopt** on the new holder: rebuilt from object storage up to at least that frame,
//!    kept handed over (serving nothing) — `node_storage::adopt`.
//! 3. the store places the database on the new node (one conditional update), then
//!    **resume** there: it serves and joins the node's index.
//! 4. **release** on the old holder: its local copy goes; its history stays in object
//!    storage, which the new holder now continues.
//!
//! A copy that is handed over says since when, so a control plane that died between two
//! steps leaves nothing stuck: the reconciler resumes a handed-over copy the store still
//! places on its node (the move was abandoned) and releases one the store places
//! elsewhere (the move was done), once the copy is older than any move can take.

use crate::database::HAND_OVER_MARKER;
use crate::error::DataError;
use crate::node::Node;
use atoll_storage::now_ms;
use atoll_storage::shipper::internal_connection;
use atoll_types::node::HandedOver;
use std::time::Duration;

/// How long the hand-over waits for a writer that holds the database's write lock.
const WRITER_WAIT: Duration = Duration::from_secs(30);

/// Step 1 on the old holder. Runs on a blocking thread. Asking again answers the same
/// frame (the lock is still held, nothing committed since).
pub fn hand_over(node: &Node, id: &str) -> Result<HandedOver, DataError> {
    let db = node
        .by_id(id)
        .ok_or_else(|| DataError::UnknownDatabase(id.to_string()))?;
    let storage = node.storage().cloned().ok_or_else(|| {
        DataError::BadRequest(
            "this node has no object storage (--storage-url): its databases cannot move".into(),
        )
    })?;
    let log = db
        .log()
        .cloned()
        .ok_or_else(|| DataError::Internal("the database has no log".into()))?;
    if db.needs_rebuild() {
        return Err(DataError::Recovering(
            format!("database {id} is being rebuilt; move it once it is"),
            5,
        ));
    }
    if db.handed_over_at().is_some() {
        return Ok(HandedOver {
            frame_no: log.state().durable_frame_no,
        });
    }
    let runtime = storage.runtime()?;
    // A first round outside the lock takes any snapshot owed (it needs the lock itself).
    log.ship_round(&storage.context(&runtime))?;

    let at = now_ms();
    // From here new requests are refused; the marker keeps it so across a restart.
    std::fs::write(db.dir().join(HAND_OVER_MARKER), at.to_string())?;
    db.set_handed_over(at, None);
    let undo = |e: DataError| {
        let _ = std::fs::remove_file(db.dir().join(HAND_OVER_MARKER));
        db.clear_handed_over();
        e
    };
    let lock = if db.file_path().exists() {
        let conn = internal_connection(&db.file_path()).map_err(|e| undo(e.into()))?;
        conn.busy_timeout(Duration::from_millis(100))
            .map_err(|e| undo(DataError::from(e)))?;
        // Waiting is announced as any writer's is, so an interactive transaction left
        // idle with the lock is rolled back past the transaction timeout (`write_lock`).
        let deadline = std::time::Instant::now() + WRITER_WAIT;
        loop {
            match conn.execute_batch("BEGIN IMMEDIATE") {
                Ok(()) => break,
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(undo(DataError::Unavailable(format!(
                        "database {id} stayed busy for {} s; it was not handed over: {e}",
                        WRITER_WAIT.as_secs()
                    ))));
                }
                Err(_) => db.write_lock().note_waiting(),
            }
        }
        Some(conn)
    } else {
        // Awaiting its upload: no file, nothing to lock (uploads are refused meanwhile).
        None
    };
    // Every commit made before the lock was taken is stored before the answer.
    let shipped = log.ship_round(&storage.context(&runtime));
    if let Err(e) = shipped {
        drop(lock);
        return Err(undo(e.into()));
    }
    let status = log.status();
    if status.pending_commits > 0 {
        drop(lock);
        return Err(undo(DataError::Storage(format!(
            "{} commits of database {id} are not stored yet; it was not handed over",
            status.pending_commits
        ))));
    }
    db.set_handed_over(at, lock);
    tracing::info!(database_id = %id, frame_no = status.durable_frame_no, "database handed over");
    Ok(HandedOver {
        frame_no: status.durable_frame_no,
    })
}

/// Serves a handed-over database again: on the new holder once the store places it
/// there (step 3), or on the old one when the move is abandoned. It (re)joins the node's
/// index. Serving already is fine.
pub fn resume(node: &Node, id: &str) -> Result<(), DataError> {
    let db = node
        .by_id(id)
        .ok_or_else(|| DataError::UnknownDatabase(id.to_string()))?;
    if db.handed_over_at().is_none() {
        return Ok(());
    }
    match std::fs::remove_file(db.dir().join(HAND_OVER_MARKER)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    atoll_storage::sync_dir(db.dir())?;
    db.clear_handed_over();
    if let Some(storage) = node.storage() {
        storage.config_changed(id);
    }
    tracing::info!(database_id = %id, "database serving (resumed after a hand-over)");
    Ok(())
}

/// Removes the local copy of a handed-over database (step 4, or an adoption that was not
/// completed). Its history in object storage stays: another node continues it. A database
/// that serves is refused: only a delete removes one of those. Gone already is fine.
pub fn release(node: &Node, id: &str) -> Result<(), DataError> {
    let Some(db) = node.by_id(id) else {
        return Ok(());
    };
    if db.handed_over_at().is_none() {
        return Err(DataError::Conflict(format!(
            "database {id} serves on this node; only a handed-over copy is released"
        )));
    }
    let db = node.detach(id)?;
    // Still fenced: a request in flight that holds this copy, or a writer that waited for
    // its write lock since before the hand-over, gets an error, never a commit into
    // files about to go. The lock goes with the last reference.
    let trash = node.data_dir().join("dbs").join(format!(".deleting-{id}"));
    if db.dir().exists() {
        std::fs::rename(db.dir(), &trash)?;
        std::fs::remove_dir_all(&trash)?;
    }
    tracing::info!(database_id = %id, "handed-over copy released");
    Ok(())
}

/// How long a move may take at most (hand-over, adoption, resume): a handed-over copy older
/// than this belongs to a move its control plane abandoned.
pub const MOVE_TIMEOUT: Duration = Duration::from_secs(300);

/// Whether a copy handed over at `at` (ms) is past [`MOVE_TIMEOUT`] at `now` (ms).
pub fn abandoned(at: i64, now: i64) -> bool {
    now - at > MOVE_TIMEOUT.as_millis() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_over_is_abandoned_only_after_the_move_timeout() {
        assert!(!abandoned(1_000, 1_000 + 300_000));
        assert!(abandoned(1_000, 1_001 + 300_000));
    }
}
