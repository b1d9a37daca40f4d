//! The process's heap: memory a finished burst freed goes back to the operating system, and
//! each tenant statement gets a budget of the engine's heap.
//!
//! glibc's allocator keeps what threads free in their arenas for reuse: after 64
//! concurrent clients the node stayed at the burst's peak resident memory for good, though
//! the connections and buffers behind it were gone (PERFORMANCE.md, "Memory after a
//! burst"). `malloc_trim` gives the free pages of every arena back. It takes the arenas'
//! locks while it walks them, so it runs only after the idle sweeper closed connections,
//! that is when a burst has ended, never per request; and the thresholds glibc would
//! otherwise raise on its own are pinned at start ([`pin_allocator_thresholds`]). This
//! module, `engine`, `atoll_storage::wal_insert` and `atoll_storage::encryption::engine`
//! hold the workspace's only `unsafe` (with the engine's per-statement memory budget and a
//! connection's heap below, other calls into the engine).
#![allow(unsafe_code)]

/// The free memory glibc may keep at the top of an arena before it gives it back: its
/// default, 128 KiB, as a fixed value.
const TRIM_THRESHOLD: libc::c_int = 128 * 1024;

/// Pins glibc's trim threshold at [`TRIM_THRESHOLD`], once, before the process starts its
/// threads. Left alone, glibc raises it (and the size above which allocations get their
/// own mapping) every time a large block is freed, up to 64 MiB; and `malloc_trim` never
/// shrinks the top of a thread's arena, only the main one's. After a burst, each arena
/// then kept up to the largest buffer freed twice over (object storage and upload buffers
/// of 1–8 MiB): 78–95 MiB of resident memory at rest where the heap held under 2 MiB,
/// against 34 MiB with the threshold pinned and no loss of throughput (PERFORMANCE.md,
/// "Memory after a burst: the allocator's thresholds").
pub fn pin_allocator_thresholds() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` takes two integers and changes the allocator's parameters under
    // its own lock; called before other threads exist, with a documented parameter.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Returns the allocator's free memory to the system (glibc; elsewhere nothing to do).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer and touches only the allocator's own free
    // lists, under the allocator's locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

// The engine's per-statement memory budget (an Atoll patch of the engine: `vendor/README.md`).
extern "C" {
    fn atoll_memory_budget_start(limit: i64);
    fn atoll_memory_budget_stop() -> libc::c_int;
}

/// Gives the statement about to run on this thread at most `limit` bytes of the engine's
/// heap beyond what the thread holds now: past that, its allocations fail (SQLITE_NOMEM).
/// SQLite bounds only the whole process's memory; one tenant's sort over large keys took
/// gigabytes from every tenant (docs/SECURITY.md, "Fair shares"). The node runs one
/// statement at a time per SQL thread and no engine helper threads, so a budget per
/// thread is a budget per statement. Ended by [`end_statement_memory_budget`] on the same
/// thread.
pub fn start_statement_memory_budget(limit: u64) {
    // SAFETY: sets three thread-local integers of the engine; no pointers.
    unsafe { atoll_memory_budget_start(i64::try_from(limit).unwrap_or(i64::MAX)) }
}

/// Ends this thread's budget; answers whether an allocation was refused for it.
pub fn end_statement_memory_budget() -> bool {
    // SAFETY: reads and clears the same thread-local integers.
    unsafe { atoll_memory_budget_stop() != 0 }
}

/// The engine's heap one connection holds: its page cache, its schema and its prepared
/// statements (`sqlite3_db_status`), the part of an idle connection's cost that depends on
/// what ran on it. The warm set (`pool`) adds the fixed part, [`CONNECTION_OVERHEAD_BYTES`].
///
/// The engine counts schema and statements by walking every table, index, trigger and
/// prepared statement as if freeing them: too dear for every check-in of a connection (it
/// is on every request's path), so those two are read on the first check-in and then
/// every [`FULL_READING_EVERY`]th; the page cache (which grows with what is read) every
/// time.
#[derive(Debug, Default)]
pub struct HeapReading {
    schema_and_statements: u64,
    checkins: u32,
}

/// How often a connection's schema and statements are counted again (check-ins).
const FULL_READING_EVERY: u32 = 64;

impl HeapReading {
    /// The connection's heap now, in bytes.
    pub fn bytes(&mut self, conn: &rusqlite::Connection) -> u64 {
        use rusqlite::ffi;
        if self.checkins.is_multiple_of(FULL_READING_EVERY) {
            self.schema_and_statements = db_status(conn, ffi::SQLITE_DBSTATUS_SCHEMA_USED)
                + db_status(conn, ffi::SQLITE_DBSTATUS_STMT_USED);
        }
        self.checkins = self.checkins.wrapping_add(1);
        db_status(conn, ffi::SQLITE_DBSTATUS_CACHE_USED) + self.schema_and_statements
    }
}

fn db_status(conn: &rusqlite::Connection, op: std::ffi::c_int) -> u64 {
    let (mut current, mut highwater) = (0, 0);
    // SAFETY: the handle is the open connection `conn` borrows; the engine writes two
    // integers we own and reads nothing else (reset flag 0).
    let rc = unsafe {
        rusqlite::ffi::sqlite3_db_status(conn.handle(), op, &mut current, &mut highwater, 0)
    };
    if rc == rusqlite::ffi::SQLITE_OK {
        u64::try_from(current).unwrap_or(0)
    } else {
        0
    }
}

/// What an idle connection holds besides its [`HeapReading`]: the engine's
/// connection object and its lookaside (~14 KiB, `vendor/README.md`), the functions and
/// virtual table modules every connection registers, the Rust side (sandbox control,
/// statement cache entries) and the kernel's share (open files, the shared-memory mapping
/// of its WAL index). Measured with `atoll bench --only spread` (PERFORMANCE.md, "Many
/// tenants at once", "A smaller lookaside"): 3,333 idle connections to small databases
/// gave back 65–66 KiB of resident memory each when closed, of which ~31 KiB was their
/// heap; rounded up. Since FTS and R*Tree are registered on first use ("Fewer statements
/// per cold open") 5,000 gave back 57–59 KiB each against 62 KiB counted: the bound still
/// holds, with room.
pub const CONNECTION_OVERHEAD_BYTES: u64 = 40 * 1024;
