//! How much the node keeps warm: the budget of its idle connections, from the machine.
//!
//! A node serves far more databases than it can keep open, so most requests to a rarely
//! used database open it (a cold open), and the warm set — the idle connections the pool
//! keeps (`pool`) — decides how often that happens. A fixed count (512 until issue 31)
//! turned most requests spread over 2,000 databases into cold opens on a machine that
//! had memory and file descriptors for all of them. The set is bounded instead by what
//! it costs:
//! - **memory**: each idle connection counts its engine heap (page cache, schema,
//!   statements: `memory::HeapReading`) plus a measured fixed part
//!   (`memory::CONNECTION_OVERHEAD_BYTES`); by default a sixteenth of the machine's memory
//!   (or of the cgroup's limit when lower) — 1.5 GiB on a 24 GiB machine;
//! - **open files**: an idle connection holds up to [`FILES_PER_IDLE_CONNECTION`] file
//!   descriptors; by default three quarters of the process's open-files limit go to the
//!   warm set, the rest (at least [`RESERVED_FILES`] when the limit allows, never less
//!   than half) to sockets, uploads, object storage and connections in use. The warm set is
//!   the one holder of descriptors that can give them back at once, so it yields when the
//!   process runs short, whoever took them: a cold open that fails short of descriptors,
//!   or an `accept` that does, closes an eighth of the idle connections
//!   (`ConnectionPool::shed`) and the open is tried again. Three quarters rather than the
//!   half it was (PERFORMANCE.md, "The warm set's default share of open files"): requests
//!   spread uniformly over 10,000 databases were ~1.2× faster at 64 clients (1.4–1.6×
//!   before the engine's smaller lookaside made a cold open cheaper), and once a
//!   database's own state at rest shrank (~2 KiB less each) the extra warm connections
//!   no longer pushed a node of 100,000 databases past 800 MiB at rest.
//!
//! Both are node settings (`--warm-memory`, `--warm-files`, OPERATIONS.md); the least
//! recently used connection goes first, within the fair shares of `pool`.

/// File descriptors one idle connection may hold: the database file and its WAL. Its WAL
/// index is in the process's memory, not a `-shm` file (`atoll_storage::wal_index`); it
/// was three before (PERFORMANCE.md, "The WAL index in the node's memory").
pub const FILES_PER_IDLE_CONNECTION: u64 = 2;
/// The share of the machine's memory the warm set may hold by default (1/16).
const MEMORY_DIVISOR: u64 = 16;
/// The share of the open-files limit the warm set may hold by default (3/4).
const FILES_SHARE: (u64, u64) = (3, 4);
/// Descriptors left to the rest of the process (sockets, uploads, object storage,
/// connections in use) when the limit allows: with a small limit three quarters would
/// leave too few, and the warm set gets half instead.
const RESERVED_FILES: u64 = 4096;
/// Descriptors the process must have free for a cold open to be worth trying (the
/// database, its WAL, a temporary file), with some to spare.
const DESCRIPTOR_HEADROOM: usize = 8;
/// When the machine's memory cannot be read.
const FALLBACK_MEMORY: u64 = 4 << 30;
/// When the open-files limit cannot be read (the usual soft limit).
const FALLBACK_FILES: u64 = 1024;

/// What the warm set may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmBudget {
    /// Bytes of memory its idle connections may hold together.
    pub memory_bytes: u64,
    /// File descriptors its idle connections may hold together.
    pub files: u64,
}

impl WarmBudget {
    /// The defaults for this machine.
    pub fn of_machine() -> WarmBudget {
        WarmBudget {
            memory_bytes: machine_memory() / MEMORY_DIVISOR,
            files: warm_files(open_files_limit()),
        }
    }

    /// The idle connections its file descriptors allow.
    pub fn max_connections(&self) -> usize {
        usize::try_from(self.files / FILES_PER_IDLE_CONNECTION)
            .unwrap_or(usize::MAX)
            .max(1)
    }
}

/// The warm set's share of an open-files limit of `limit`: [`FILES_SHARE`] of it, but no
/// more than leaves [`RESERVED_FILES`] to the rest, and never less than half.
fn warm_files(limit: u64) -> u64 {
    (limit / FILES_SHARE.1 * FILES_SHARE.0)
        .min(limit.saturating_sub(RESERVED_FILES))
        .max(limit / 2)
}

/// The machine's memory, or its cgroup's limit when that is lower (a container).
fn machine_memory() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.trim().strip_suffix("kB"))
                .and_then(|kib| kib.trim().parse::<u64>().ok())
        })
        .map_or(FALLBACK_MEMORY, |kib| kib * 1024);
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|limit| limit.trim().parse::<u64>().ok());
    cgroup.map_or(total, |limit| limit.min(total))
}

/// Whether the process has fewer than [`DESCRIPTOR_HEADROOM`] file descriptors free. A
/// failed open cannot say why (SQLite reports `SQLITE_CANTOPEN` and gives back what it had
/// opened), so this asks the kernel directly, by opening that many at once. A database
/// whose file fails to open for its own reasons (missing, corrupt) never reads as short.
pub fn short_of_descriptors() -> bool {
    let mut probes = Vec::with_capacity(DESCRIPTOR_HEADROOM);
    for _ in 0..DESCRIPTOR_HEADROOM {
        match std::fs::File::open("/dev/null") {
            Ok(probe) => probes.push(probe),
            Err(error) => return matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)),
        }
    }
    false
}

/// The process's soft limit of open files.
fn open_files_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            limits
                .lines()
                .find_map(|line| line.strip_prefix("Max open files"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|soft| soft.parse::<u64>().ok())
        })
        .unwrap_or(FALLBACK_FILES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_defaults_are_read_and_leave_room() {
        let budget = WarmBudget::of_machine();
        assert!(budget.memory_bytes >= 16 << 20, "{budget:?}");
        assert!(budget.files >= 16, "{budget:?}");
        assert!(budget.files < open_files_limit(), "{budget:?}");
        assert_eq!(
            budget.max_connections() as u64,
            budget.files / FILES_PER_IDLE_CONNECTION
        );
    }

    #[test]
    fn the_warm_set_takes_three_quarters_of_the_files_and_leaves_the_rest_enough() {
        // A large limit: three quarters, the rest far more than the reserve.
        assert_eq!(warm_files(20_000), 15_000);
        assert_eq!(warm_files(1 << 20), 786_432);
        // Three quarters would leave less than the reserve: the reserve is kept...
        assert_eq!(warm_files(12_000), 12_000 - RESERVED_FILES);
        // ...but the warm set never gets less than half.
        assert_eq!(warm_files(8_192), 4_096);
        assert_eq!(warm_files(1_024), 512);
        assert_eq!(warm_files(0), 0);
    }

    #[test]
    fn a_process_with_descriptors_to_spare_is_not_short_of_them() {
        assert!(!short_of_descriptors());
    }
}
