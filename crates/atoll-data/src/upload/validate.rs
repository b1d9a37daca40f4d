//! Validation of a SQLite file a tenant supplied (an upload, the database a push would
//! make): its format, then `PRAGMA integrity_check` and the file's own SQL run in the
//! sandbox, bounded like a statement ([`CheckBounds`]).

use crate::database::PAGE_SIZE;
use crate::error::DataError;
use crate::node::Node;
use crate::sandbox::{CancelToken, Interruption, Mode, SandboxSettings};
use std::io::Read;
use std::path::Path as FsPath;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Files get one statement timeout of checking for every this many bytes (at least one):
/// `PRAGMA integrity_check` reads a database of tenant size in well under a second, and a
/// large file must not fail for its size alone.
pub const CHECK_BYTES_PER_TIMEOUT: u64 = 64 << 20;

/// How often (in virtual-machine instructions) a check looks whether it must stop. Finer
/// than a statement's: the check spends a few instructions per row, and one row's CHECK
/// constraint may be slow.
const CHECK_PROGRESS_INTERVAL: i32 = 1_000;

/// What bounds a check of a file a tenant supplied (an upload, the database a push would
/// make). The check runs the file's own SQL on every row — CHECK constraints, generated
/// columns, index expressions — so it is held to what a tenant's statement is held to: a
/// connection of the sandbox (its limits and rules, read-only), a deadline derived from
/// the node's statement timeout ([`CheckBounds::deadline`]), its client going away, and
/// the node shutting down.
#[derive(Clone)]
pub struct CheckBounds {
    settings: SandboxSettings,
    cancel: Option<CancelToken>,
    node: Option<Arc<Node>>,
    /// The organization the file is from, for the node's crash journal.
    org_id: Option<String>,
}

impl CheckBounds {
    /// A check `node` runs for a request whose client may go away (`cancel`).
    pub fn for_node(node: &Arc<Node>, cancel: Option<CancelToken>) -> CheckBounds {
        CheckBounds {
            settings: node.sandbox().clone(),
            cancel,
            node: Some(Arc::clone(node)),
            org_id: None,
        }
    }

    /// The check is of a file `org_id` supplied: it runs under the node's crash journal
    /// (`crate::crash_journal`), so a file whose check crashed the node is not checked again
    /// for that organization.
    pub fn from_organization(mut self, org_id: &str) -> CheckBounds {
        self.org_id = Some(org_id.to_string());
        self
    }

    /// A check outside a node (tests, the fuzz target): `settings` only.
    pub fn standalone(settings: SandboxSettings) -> CheckBounds {
        CheckBounds {
            settings,
            cancel: None,
            node: None,
            org_id: None,
        }
    }

    /// How long checking a file of `bytes` may take: the node's statement timeout for
    /// every started [`CHECK_BYTES_PER_TIMEOUT`].
    pub fn deadline(&self, bytes: u64) -> Duration {
        let parts = bytes.div_ceil(CHECK_BYTES_PER_TIMEOUT).max(1);
        self.settings
            .statement_timeout
            .saturating_mul(u32::try_from(parts).unwrap_or(u32::MAX))
    }
}

/// [`check_database_file_within`] with the default settings and nothing else to stop it.
pub fn check_database_file(path: &FsPath) -> Result<(), DataError> {
    check_database_file_within(path, &CheckBounds::standalone(SandboxSettings::default()))
}

/// Checks that the SQLite file at `path` is one Atoll can serve as it is: page size 4096,
/// WAL mode, no auto-vacuum, UTF-8, complete (length agrees with its header) and intact
/// (`PRAGMA integrity_check`, within `bounds`). A problem with the file is a `BadRequest`
/// saying what to do, as is a check that ran out of time; an I/O failure reading it is
/// `Internal`.
///
/// These are the requirements the Turso CLI checks locally before an upload; the header is
/// checked first so the usual mistakes are answered without reading the whole file.
pub fn check_database_file_within(path: &FsPath, bounds: &CheckBounds) -> Result<(), DataError> {
    check_file_format(path)?;
    match integrity_check(path, bounds, "the file", None)? {
        Ok(()) => Ok(()),
        Err(detail) => Err(DataError::BadRequest(format!(
            "the file is corrupt ({detail}): repair it (sqlite3 old.db .recover | sqlite3 new.db) and upload the repaired copy"
        ))),
    }
}

/// The checks of [`check_database_file_within`] that read only the file's header and
/// length.
pub(crate) fn check_file_format(path: &FsPath) -> Result<(), DataError> {
    let bad = |reason: String| DataError::BadRequest(reason);
    let len = std::fs::metadata(path)?.len();
    if len == 0 {
        return Err(bad("the file is empty".into()));
    }
    let mut header = [0u8; 100];
    let mut file = std::fs::File::open(path)?;
    let mut filled = 0;
    while filled < header.len() {
        match file.read(&mut header[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    drop(file);
    let header = &header[..filled];

    if !header.starts_with(b"SQLite format 3\0") {
        let text = String::from_utf8_lossy(header).to_ascii_uppercase();
        let hint = if ["PRAGMA", "BEGIN", "CREATE", "INSERT"]
            .iter()
            .any(|kw| text.trim_start().starts_with(kw))
        {
            " (this looks like an SQL dump: create the database from it with seed type dump instead)"
        } else {
            ""
        };
        return Err(bad(format!(
            "the file is not an SQLite database: it does not start with the header \"SQLite format 3\"{hint}"
        )));
    }
    if header.len() < 100 {
        return Err(bad(format!(
            "the file is {len} bytes, too short for an SQLite database: the upload is truncated"
        )));
    }
    let u16_at = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
    let u32_at = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };

    let page_size = match u16_at(16) {
        1 => 65536,
        n => u64::from(n),
    };
    if page_size != PAGE_SIZE {
        return Err(bad(format!(
            "the database page size is {page_size} bytes, Atoll needs {PAGE_SIZE}: run PRAGMA journal_mode=DELETE; PRAGMA page_size={PAGE_SIZE}; VACUUM; PRAGMA journal_mode=WAL; on it, then upload it again"
        )));
    }
    if header[18] != 2 || header[19] != 2 {
        return Err(bad(
            "the file is not in WAL journal mode: run PRAGMA journal_mode=WAL and checkpoint it (PRAGMA wal_checkpoint(TRUNCATE)), then upload it again".into(),
        ));
    }
    // Offset 52 is the largest root page for auto-vacuum; non-zero means auto-vacuum is on
    // (offset 64 tells which kind).
    if u32_at(52) != 0 {
        let kind = if u32_at(64) != 0 {
            "INCREMENTAL"
        } else {
            "FULL"
        };
        return Err(bad(format!(
            "the file has auto_vacuum={kind}, Atoll needs auto_vacuum=NONE: run PRAGMA auto_vacuum=NONE; VACUUM; on it, then upload it again"
        )));
    }
    // 0 is a database that never had a schema: SQLite will use UTF-8.
    match u32_at(56) {
        0 | 1 => {}
        encoding => {
            let name = match encoding {
                2 => "UTF-16le".to_string(),
                3 => "UTF-16be".to_string(),
                other => format!("unknown ({other})"),
            };
            return Err(bad(format!(
                "the file's text encoding is {name}, Atoll needs UTF-8: copy it into a UTF-8 database (sqlite3 old.db .dump | sqlite3 new.db), then upload that"
            )));
        }
    }
    if len % PAGE_SIZE != 0 {
        return Err(bad(format!(
            "the file is {len} bytes, not a whole number of {PAGE_SIZE}-byte pages: the upload is truncated, or the file is damaged"
        )));
    }
    // The header's page count is valid when its "version-valid-for" number (offset 92)
    // matches the change counter (offset 24); SQLite has always written both since 3.7.0.
    let header_pages = u64::from(u32_at(28));
    if u32_at(92) == u32_at(24) && header_pages != 0 && header_pages != len / PAGE_SIZE {
        return Err(bad(format!(
            "the file holds {} pages but its header says {header_pages}: it is truncated, or was copied while it was written — checkpoint it (PRAGMA wal_checkpoint(TRUNCATE)) and copy it again",
            len / PAGE_SIZE
        )));
    }

    Ok(())
}

/// Runs `PRAGMA integrity_check` on the file at `path` within `bounds`. `Ok(Err(detail))`:
/// the file is damaged; `Err`: the check was stopped, or the file's SQL failed — the error
/// says why, naming the file as `what` — or it could not start.
///
/// `integrity_check` rather than `quick_check`: it also finds indexes that disagree with
/// their tables (a pushed page can drop a row from a UNIQUE index, and the database then
/// answers and refuses writes wrongly). It costs more — about ten times `quick_check` on a
/// table with two indexes (1 M rows, 164 MB: 2.2 s against 0.19 s) — which the deadline
/// covers.
/// An encrypted file (a pushed replica's candidate) is checked through its `key`.
pub(crate) fn integrity_check(
    path: &FsPath,
    bounds: &CheckBounds,
    what: &str,
    key: Option<&atoll_storage::encryption::EncryptionKey>,
) -> Result<Result<(), String>, DataError> {
    let deadline = bounds.deadline(std::fs::metadata(path)?.len());
    let _running = match (&bounds.node, &bounds.org_id) {
        (Some(node), Some(org_id)) => Some(
            node.crash_journal()
                .running(
                    &crate::crash_journal::organization_key(org_id),
                    crate::crash_journal::FILE_CHECK,
                )
                .map_err(DataError::Forbidden)?,
        ),
        _ => None,
    };
    // The sandbox's connection: its value and SQL length limits bound what one row's SQL
    // may build, its authorizer the functions it may call, and `query_only` keeps the
    // file being judged as it is. Its statement clock is replaced by the check's own
    // (below): the check must also see the node shutting down.
    let sandboxed = crate::sandbox::open(
        path,
        crate::sandbox::IfMissing::Fail,
        Mode::ReadOnly,
        &bounds.settings,
        &Arc::new(std::sync::atomic::AtomicBool::new(false)),
        key,
        |_| Ok(()),
    )?;
    let watch = std::panic::AssertUnwindSafe(CheckWatch {
        until: Instant::now() + deadline,
        deadline,
        cancel: bounds.cancel.clone(),
        node: bounds.node.clone(),
        stopped: Arc::default(),
    });
    let stopped = Arc::clone(&watch.stopped);
    sandboxed
        .conn
        .progress_handler(CHECK_PROGRESS_INTERVAL, Some(move || watch.should_stop()));
    crate::memory::start_statement_memory_budget(bounds.settings.max_statement_memory);
    let verdict: Result<Vec<String>, rusqlite::Error> = sandboxed
        .conn
        .prepare("PRAGMA integrity_check(5)")
        .and_then(|mut stmt| stmt.query_map([], |row| row.get::<_, String>(0))?.collect());
    let over_memory = crate::memory::end_statement_memory_budget();
    let refusal = sandboxed.control.take_refusal();
    drop(sandboxed);
    let stopped = stopped
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .or(over_memory.then_some(Interruption::OutOfMemoryBudget(
            bounds.settings.max_statement_memory,
        )));
    if let Some(why) = stopped {
        return Err(check_stopped(why, what, &bounds.settings));
    }
    match verdict {
        Ok(lines) if lines == ["ok"] => Ok(Ok(())),
        Ok(lines) => Ok(Err(format!("integrity_check: {}", lines.join("; ")))),
        Err(e) if is_damage(&e) => Ok(Err(e.to_string())),
        // The file's SQL failed (a value over the node's limits, a refused function):
        // every write would fail the same way.
        Err(e) => Err(DataError::BadRequest(format!(
            "{what} could not be checked, so it was refused: its own SQL (CHECK constraints, generated columns, index expressions) failed on a row: {}",
            refusal.unwrap_or_else(|| e.to_string())
        ))),
    }
}

/// Whether SQLite failed on the file's bytes (rather than on its SQL).
fn is_damage(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    matches!(e.sqlite_error_code(), Some(DatabaseCorrupt | NotADatabase))
}

/// The progress handler of a check: whether it must stop now, and why.
struct CheckWatch {
    until: Instant,
    deadline: Duration,
    cancel: Option<CancelToken>,
    node: Option<Arc<Node>>,
    stopped: Arc<Mutex<Option<Interruption>>>,
}

impl CheckWatch {
    fn should_stop(&self) -> bool {
        let why = if self.node.as_ref().is_some_and(|n| n.is_shutting_down()) {
            Some(Interruption::Shutdown)
        } else if self.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            Some(Interruption::ClientGone)
        } else if Instant::now() >= self.until {
            Some(Interruption::Deadline(self.deadline))
        } else {
            None
        };
        if why.is_some() {
            *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = why;
        }
        why.is_some()
    }
}

/// The answer to a check that was stopped before it ended.
fn check_stopped(why: Interruption, what: &str, settings: &SandboxSettings) -> DataError {
    use crate::sandbox::human_duration;
    match why {
        Interruption::Deadline(limit) => DataError::BadRequest(format!(
            "{what} could not be checked within {}, so it was refused: checking runs its own SQL (CHECK constraints, generated columns, index expressions) on every row, and may take the node's statement timeout ({}, --statement-timeout) for every {} MiB of the database; make that SQL cheaper",
            human_duration(limit),
            human_duration(settings.statement_timeout),
            CHECK_BYTES_PER_TIMEOUT >> 20
        )),
        Interruption::ClientGone => DataError::BadRequest(format!(
            "the check of {what} was interrupted: its client went away"
        )),
        Interruption::Shutdown => DataError::Unavailable(format!(
            "the check of {what} was interrupted: the server is shutting down; send it again"
        )),
        Interruption::OutOfMemoryBudget(limit) => DataError::BadRequest(format!(
            "{what} could not be checked, so it was refused: its own SQL (CHECK constraints, generated columns, index expressions) needed more than {} MiB of memory on a row (the node's --max-statement-memory)",
            limit >> 20
        )),
    }
}
