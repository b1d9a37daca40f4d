//! What opening a database's file cost the last time, in CPU time: whether the next open
//! may run on the async worker that received a read (`hrana::http`, "A cold open on the
//! worker") instead of a trip to an SQL thread and back.
//!
//! Opening costs what the engine does before the first statement: opening the file, reading
//! the WAL into the in-memory WAL index (`atoll_storage::wal_index`) and parsing the schema.
//! The first two are bounded by sizes a caller can read without opening (the WAL's length);
//! the schema is not, and a tenant's schema can be large enough that parsing it takes
//! milliseconds, which on an async worker would stall every client that worker serves. So
//! the cost is learned: measured at every open, wherever it runs, and an open is tried on a
//! worker only when the last one was cheap. A statement that may grow the schema (any
//! `CREATE` or `ALTER`, seen by the sandbox's authorizer when it is prepared) makes the cost
//! unknown again, so the next open runs on an SQL thread and is measured there.
//!
//! A file replaced whole (an upload, a restore, a rebuild) keeps the cost learned from the
//! old file until its first open: if that open turns out expensive on a worker, it is the
//! only one (the cost is measured again, and the database's reads are paused off the
//! workers, `Database::pause_inline`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The cost nobody measured yet, or that a schema change made stale.
const UNKNOWN: u32 = u32::MAX;

/// CPU microseconds of a database's last open, shared by the database and the sandbox
/// control of each of its connections (whose authorizer forgets it on a schema change).
#[derive(Debug)]
pub struct OpenCost(AtomicU32);

impl Default for OpenCost {
    fn default() -> Self {
        OpenCost(AtomicU32::new(UNKNOWN))
    }
}

impl OpenCost {
    /// An open just cost `cpu` of its thread's CPU time.
    pub fn record(&self, cpu: Duration) {
        let micros = u32::try_from(cpu.as_micros()).unwrap_or(UNKNOWN - 1);
        self.0.store(micros.min(UNKNOWN - 1), Ordering::Relaxed);
    }

    /// The schema may have grown: the next open is measured before any is trusted.
    pub fn forget(&self) {
        self.0.store(UNKNOWN, Ordering::Relaxed);
    }

    /// The last open cost at most `budget` (and a schema change did not follow it).
    pub fn within(&self, budget: Duration) -> bool {
        let micros = self.0.load(Ordering::Relaxed);
        micros != UNKNOWN && u128::from(micros) <= budget.as_micros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_is_cheap_only_once_measured_and_until_the_schema_may_have_grown() {
        let budget = Duration::from_micros(500);
        let cost = OpenCost::default();
        assert!(!cost.within(budget), "never measured");
        cost.record(Duration::from_micros(120));
        assert!(cost.within(budget));
        cost.forget();
        assert!(!cost.within(budget), "a CREATE or ALTER followed");
        cost.record(Duration::from_millis(3));
        assert!(!cost.within(budget), "a large schema");
        cost.record(Duration::from_secs(u64::from(u32::MAX)));
        assert!(!cost.within(Duration::from_secs(60)));
    }
}
