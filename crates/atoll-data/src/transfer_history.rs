//! What a node serves of a transferred database's history while the new one is being
//! started (docs/STORAGE.md, "Transfers start the history anew"): the record and the
//! deletion of the old history are the durable log's (`atoll_storage::history`); here are
//! the gates on a [`Database`] and the start a transfer asks a [`Node`] for.

use crate::database::Database;
use crate::error::DataError;
use crate::node::Node;
use atoll_storage::history::History;
use atoll_storage::Storage;

/// Seconds a client is told to wait while a new history is being started.
const RETRY_AFTER_SECS: u64 = 5;

/// Whether `db`'s configuration asks for a history its log has not started yet.
pub fn pending(db: &Database) -> bool {
    db.log().is_some_and(|log| log.history_pending())
}

/// The first frame of `db`'s current history: frames up to it, and states before it, are
/// never served (0: its history starts at its creation).
pub fn first_frame(db: &Database) -> u64 {
    db.log().map_or(0, |log| log.state().history_start)
}

/// Refuses what serves `db`'s stored history or its file (sync, exports, copies,
/// restores, backups listings) while a transfer's new history is being started.
pub fn ensure_started(db: &Database) -> Result<(), DataError> {
    if !pending(db) {
        return Ok(());
    }
    Err(DataError::Recovering(
        format!(
            "database {} was transferred and its history is being started anew (nothing from before the transfer is served); try again shortly",
            db.config().name
        ),
        RETRY_AFTER_SECS,
    ))
}

/// Starts the history `db`'s configuration asks for now, rather than at the shipper's
/// next round, so a transfer answers once it is done. A failure is logged: the shipper's
/// rounds try again, and the database's history is refused meanwhile. On a blocking
/// thread.
pub(crate) fn start_if_asked(node: &Node, db: &Database) {
    let (Some(log), Some(storage)) = (db.log(), node.storage()) else {
        return;
    };
    if !log.history_pending() {
        return;
    }
    let result = storage
        .runtime()
        .and_then(|runtime| Ok(log.ship_round(&storage.context(&runtime))?));
    match result {
        Ok(()) if !log.history_pending() => {}
        Ok(()) => {
            tracing::warn!(database_id = %db.id(), "the new history of a transferred database is not started yet: retrying")
        }
        Err(e) => {
            tracing::warn!(database_id = %db.id(), error = %e, "the new history of a transferred database is not started yet: retrying")
        }
    }
}

/// Refuses a point-in-time seed of database `id` whose history starts at `since_ms` (its
/// store's `history_starts_at`) as of `timestamp_ms` (`None`: its latest state) when
/// that instant is before the history, or while object storage does not hold that
/// history yet.
pub(crate) async fn check_seed(
    storage: &Storage,
    id: &str,
    since_ms: i64,
    timestamp_ms: Option<i64>,
) -> Result<(), DataError> {
    if let Some(at) = timestamp_ms.filter(|&at| at < since_ms) {
        return Err(before_history(at, since_ms));
    }
    match History::load(storage, id).await? {
        Some(history) if history.since_ms >= since_ms => match timestamp_ms {
            Some(at) if at < history.created_ms => Err(history.refuse_before(at).into()),
            _ => Ok(()),
        },
        _ => Err(DataError::Recovering(
            "the source database was transferred and its history is being started anew; try again shortly".into(),
            RETRY_AFTER_SECS,
        )),
    }
}

/// The refusal of a state from before the history (of a copy, a restore).
pub fn before_history(at_ms: i64, since_ms: i64) -> DataError {
    DataError::BadRequest(format!(
        "{} is before the database's history: it starts at its transfer to this organization, at {}",
        atoll_storage::restore::rfc3339(at_ms),
        atoll_storage::restore::rfc3339(since_ms)
    ))
}
