//! Cursors: a batch's results as a sequence of entries (`step_begin`, `row`…, `step_end`
//! or `step_error`, and a final `error` if the batch fails as a whole), streamed to the
//! client while the batch runs. Used by `/v3/cursor` and by WebSocket cursors.

use super::exec::{
    hrana_error, BatchSink, Caller, ClientConnection, Outcome, RowSink, Run, StmtStats,
};
use super::{HranaError, SqlStore};
use libsql_hrana::proto;
use serde::{Serialize, Serializer};

/// Entries buffered ahead of a slow reader before the batch waits.
pub(crate) const CURSOR_BUFFER: usize = 64;

/// Turns batch progress into cursor entries and hands each to `emit`, which answers
/// whether anybody still listens.
pub(crate) struct CursorSink<F: FnMut(proto::CursorEntry) -> bool> {
    emit: F,
    step: u32,
    closed: bool,
}

impl<F: FnMut(proto::CursorEntry) -> bool> CursorSink<F> {
    pub(crate) fn new(emit: F) -> CursorSink<F> {
        CursorSink {
            emit,
            step: 0,
            closed: false,
        }
    }

    fn send(&mut self, entry: proto::CursorEntry) -> Outcome<()> {
        if !self.closed && !(self.emit)(entry) {
            self.closed = true;
        }
        if self.closed {
            // Stops the statement; nobody will see this error.
            Err(hrana_error("CURSOR_CLOSED", "The cursor was closed"))
        } else {
            Ok(())
        }
    }
}

impl<F: FnMut(proto::CursorEntry) -> bool> RowSink for CursorSink<F> {
    fn columns(&mut self, cols: Vec<proto::Col>) -> Outcome<()> {
        let step = self.step;
        self.send(proto::CursorEntry::StepBegin(proto::StepBeginEntry {
            step,
            cols,
        }))
    }

    fn row(&mut self, values: Vec<proto::Value>) -> Outcome<()> {
        self.send(proto::CursorEntry::Row {
            row: proto::Row { values },
        })
    }
}

impl<F: FnMut(proto::CursorEntry) -> bool> BatchSink for CursorSink<F> {
    fn begin_step(&mut self, step: usize) {
        self.step = u32::try_from(step).unwrap_or(u32::MAX);
    }

    fn end_step(&mut self, _step: usize, outcome: Outcome<StmtStats>) {
        let entry = match outcome {
            Ok(stats) => proto::CursorEntry::StepEnd(proto::StepEndEntry {
                affected_row_count: stats.affected_row_count,
                last_insert_rowid: stats.last_insert_rowid,
            }),
            Err(error) => proto::CursorEntry::StepError(proto::StepErrorEntry {
                step: self.step,
                error,
            }),
        };
        let _ = self.send(entry);
    }

    fn skip_step(&mut self, _step: usize) {}

    fn is_closed(&self) -> bool {
        self.closed
    }
}

/// A cursor entry as JSON. `libsql-hrana` writes `step_end`'s `last_insert_rowid` as a
/// number, but clients read it as a decimal string (like every 64-bit integer in Hrana's
/// JSON).
pub(crate) struct JsonCursorEntry(pub proto::CursorEntry);

impl Serialize for JsonCursorEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(tag = "type", rename = "step_end")]
        struct StepEnd {
            affected_row_count: u64,
            last_insert_rowid: Option<String>,
        }
        match &self.0 {
            proto::CursorEntry::StepEnd(end) => StepEnd {
                affected_row_count: end.affected_row_count,
                last_insert_rowid: end.last_insert_rowid.map(|rowid| rowid.to_string()),
            }
            .serialize(serializer),
            entry => entry.serialize(serializer),
        }
    }
}

/// Runs a batch as a cursor. A failure of the whole batch becomes the final `error`
/// entry and is also returned, so the caller can drop the stream as after any failed
/// request.
pub(crate) fn run_cursor(
    caller: &Caller,
    conn: &ClientConnection,
    batch: &proto::Batch,
    sqls: &SqlStore,
    emit: impl FnMut(proto::CursorEntry) -> bool,
) -> Result<(), HranaError> {
    let mut sink = CursorSink::new(emit);
    let result = Run::start(caller, conn).and_then(|run| run.run_batch(batch, sqls, &mut sink));
    if let Err(error) = &result {
        let _ = sink.send(proto::CursorEntry::Error {
            error: error.to_hrana_error(),
        });
    }
    result
}

/// Checks a cursor's batch before it starts: protocol rules and permissions, so these
/// failures still answer with an HTTP status instead of an `error` entry.
pub(crate) fn check_cursor(
    caller: &Caller,
    conn: &ClientConnection,
    batch: &proto::Batch,
    sqls: &SqlStore,
) -> Result<(), HranaError> {
    Run::start(caller, conn)?.authorize_batch(batch, sqls)
}
