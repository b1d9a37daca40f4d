//! The crash journal: which tenant statement was running when the engine took the process
//! down, so that the same statement is refused for that database instead of crashing the
//! node again.
//!
//! The engine is C and runs in the node's process; a memory-safety bug reachable from SQL
//! (`vendor/README.md` lists the ones found so far) ends the process for every tenant. The
//! supervisor (`atoll`'s `supervisor`) starts the node again within seconds; this journal
//! makes sure one tenant cannot do it twice with the same statement:
//!
//! - **Before** a tenant statement is prepared and run, [`CrashJournal::running`] writes
//!   the database and the statement's [`fingerprint`] into a slot of its own in
//!   `<data-dir>/crash-journal/slots`, mapped into memory ([`mapped`]: a store, no system
//!   call, no fsync: a process that dies leaves the file's pages in the page cache, and only
//!   a crash of the whole machine loses them, when nothing is left to protect). Dropping
//!   the returned [`Running`] empties the slot.
//! - **When the process dies of a signal** (abort from a corrupted heap, a segmentation
//!   fault, …), a signal handler ([`signal`]) marks the slot of the thread that died as
//!   the culprit, with one store, the only thing it does before the default action.
//! - **At the next start**, [`CrashJournal::open`] reads the slots: every culprit becomes a
//!   refused statement (database + fingerprint), kept in `refused.json` beside the slots,
//!   logged and counted in `/metrics`. A statement only *in flight* at a crash (another
//!   thread's) is logged as a suspect but not refused: a process killed from outside
//!   (SIGKILL, the OOM killer) names no culprit, and refusing innocent statements that
//!   happened to run beside the real one would hand the attacker a way to block others.
//! - A database whose statements crashed the node [`MAX_CRASHES_PER_DATABASE`] times is
//!   refused any statement: changing a literal or a space in a statement changes its
//!   fingerprint, and a tenant who keeps finding new ones must not keep crashing the node.
//!   An operator clears a refusal by removing its line from `refused.json` (OPERATIONS.md).

mod mapped;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod signal;

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

/// Slots in the journal: statements that may run at once in one process (SQL threads,
/// the async workers' inline reads, blocking tasks). One beyond this runs unjournaled.
const SLOTS: u32 = 4096;
const SLOT_BYTES: u64 = 128;

/// A slot's first byte.
const EMPTY: u8 = 0;
const RUNNING: u8 = 1;
/// Written by the signal handler into the slot of the thread that died.
pub(crate) const CULPRIT: u8 = 2;

/// Layout of a slot: state (1), fingerprint (8), database id length (1), database id (64),
/// excerpt length (1), excerpt of the statement for the operator (53).
const DB_ID_AT: usize = 10;
const DB_ID_MAX: usize = 64;
const EXCERPT_AT: usize = DB_ID_AT + DB_ID_MAX + 1;
const EXCERPT_MAX: usize = SLOT_BYTES as usize - EXCERPT_AT;

/// A test hook, read at start: a statement of exactly this text aborts the process the way
/// a corrupted heap does (SIGABRT on the thread that runs it, after it is journaled), so
/// the supervisor and the journal can be tested end to end without a real engine bug.
/// Never set it in production.
pub const ABORT_ON_SQL: &str = "ATOLL_TEST_ABORT_ON_SQL";

/// The excerpt journaled for a statement of an encrypted database.
const SEALED_EXCERPT: &str = "(a statement of an encrypted database)";

/// Crashes attributed to one database after which it runs no statement at all.
pub const MAX_CRASHES_PER_DATABASE: usize = 3;

/// A statement refused because it crashed the node before.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefusedStatement {
    pub database: String,
    /// [`fingerprint`] in hex.
    pub fingerprint: String,
    /// The statement's first characters, for the operator.
    pub excerpt: String,
    /// When the crash was found (milliseconds since the epoch).
    pub found_at_ms: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct RefusedFile {
    statements: Vec<RefusedStatement>,
}

pub struct CrashJournal {
    /// The test hook [`ABORT_ON_SQL`]: the statement that aborts the process.
    abort_on: Option<String>,
    slots: mapped::MappedSlots,
    free: Mutex<Vec<u32>>,
    refused: RwLock<Refused>,
    refused_path: PathBuf,
}

#[derive(Default)]
struct Refused {
    statements: HashSet<(String, u64)>,
    crashes_by_database: HashMap<String, usize>,
}

/// What the journal found at start.
#[derive(Debug, Default)]
pub struct Findings {
    /// Statements that crashed the previous process (now refused).
    pub culprits: Vec<RefusedStatement>,
    /// Statements that were running when it ended otherwise (logged only).
    pub in_flight: Vec<RefusedStatement>,
}

/// A statement in the journal; dropping it empties its slot.
pub struct Running<'a> {
    journal: &'a CrashJournal,
    slot: Option<u32>,
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    outer: signal::Current,
}

/// The journal's key for work an organization asks for outside its databases' statements
/// (loading a dump into a new database, checking a file it uploads or pushes): a crash
/// there is refused for the whole organization, not one database (a new database would
/// get around it).
pub fn organization_key(org_id: &str) -> String {
    format!("org:{org_id}")
}

/// What the journal records for the check of a file an organization supplied.
pub const FILE_CHECK: &str = "PRAGMA integrity_check of a file the organization supplied";

/// A statement's fingerprint: FNV-1a (64 bits, stable across builds and versions) of its
/// text with ASCII letters in lower case and runs of white space made one space. The same
/// statement sent again, reformatted or with other keyword case, has the same fingerprint;
/// another literal does not (that is what [`MAX_CRASHES_PER_DATABASE`] is for). Not a
/// cryptographic hash: it names a statement within one database's own refusals, where a
/// collision only refuses the colliding statement of that same database.
pub fn fingerprint(sql: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut space = false;
    for byte in sql.trim().bytes() {
        if byte.is_ascii_whitespace() {
            space = true;
            continue;
        }
        if space {
            hash = (hash ^ u64::from(b' ')).wrapping_mul(PRIME);
            space = false;
        }
        hash = (hash ^ u64::from(byte.to_ascii_lowercase())).wrapping_mul(PRIME);
    }
    hash
}

impl CrashJournal {
    /// Opens the journal in `data_dir/crash-journal`, takes what the previous process left
    /// in it, and empties it.
    pub fn open(data_dir: &Path) -> std::io::Result<(CrashJournal, Findings)> {
        let dir = data_dir.join("crash-journal");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("slots");
        let slots = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let size = u64::from(SLOTS) * SLOT_BYTES;
        let mut previous = vec![0u8; size as usize];
        let length = slots.metadata()?.len().min(size) as usize;
        slots.read_exact_at(&mut previous[..length], 0)?;
        slots.set_len(0)?;
        slots.set_len(size)?;
        let slots = mapped::MappedSlots::map(slots, size as usize)?;

        let now = now_ms();
        let mut findings = Findings::default();
        for slot in previous.chunks_exact(SLOT_BYTES as usize) {
            let Some(entry) = decode(slot, now) else {
                continue;
            };
            if slot[0] == CULPRIT {
                findings.culprits.push(entry);
            } else {
                findings.in_flight.push(entry);
            }
        }

        let refused_path = dir.join("refused.json");
        let mut file: RefusedFile = match std::fs::read(&refused_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|error| {
                tracing::error!(%error, path = %refused_path.display(), "the crash journal's refusals cannot be read; starting without them");
                RefusedFile::default()
            }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => RefusedFile::default(),
            Err(error) => return Err(error),
        };
        if !findings.culprits.is_empty() {
            file.statements.extend(findings.culprits.iter().cloned());
            let temporary = dir.join("refused.json.tmp");
            std::fs::write(
                &temporary,
                serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?,
            )?;
            File::open(&temporary)?.sync_all()?;
            std::fs::rename(&temporary, &refused_path)?;
        }
        let mut refused = Refused::default();
        for statement in &file.statements {
            let Ok(fingerprint) = u64::from_str_radix(&statement.fingerprint, 16) else {
                continue;
            };
            refused
                .statements
                .insert((statement.database.clone(), fingerprint));
            *refused
                .crashes_by_database
                .entry(statement.database.clone())
                .or_insert(0) += 1;
        }
        for culprit in &findings.culprits {
            tracing::error!(
                database = %culprit.database,
                fingerprint = %culprit.fingerprint,
                statement = %culprit.excerpt,
                "a tenant statement crashed the previous process: it is refused on this database from now on"
            );
            metrics::counter!("atoll_crashes_attributed_total").increment(1);
        }
        for suspect in &findings.in_flight {
            tracing::warn!(
                database = %suspect.database,
                fingerprint = %suspect.fingerprint,
                statement = %suspect.excerpt,
                "this statement was running when the previous process ended"
            );
        }
        metrics::gauge!("atoll_refused_statement_fingerprints").set(file.statements.len() as f64);

        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        signal::install();

        Ok((
            CrashJournal {
                abort_on: std::env::var(ABORT_ON_SQL)
                    .ok()
                    .filter(|sql| !sql.is_empty()),
                slots,
                free: Mutex::new((0..SLOTS).rev().collect()),
                refused: RwLock::new(refused),
                refused_path,
            },
            findings,
        ))
    }

    /// Where refusals are kept (operators clear them there).
    pub fn refused_path(&self) -> &Path {
        &self.refused_path
    }

    /// Refuses `sql` on `database` when it, or too many of the database's statements,
    /// crashed the node before; otherwise journals it until the answer is dropped.
    pub fn running(&self, database: &str, sql: &str) -> Result<Running<'_>, String> {
        self.journal(database, sql, sql.trim())
    }

    /// [`CrashJournal::running`] for a database encrypted with its customer's key: the
    /// slot (a file on the node's disk) holds the statement's fingerprint but no excerpt,
    /// since a statement's literals are the tenant's data (docs/ENCRYPTION.md).
    pub fn running_sealed(&self, database: &str, sql: &str) -> Result<Running<'_>, String> {
        self.journal(database, sql, SEALED_EXCERPT)
    }

    fn journal(&self, database: &str, sql: &str, excerpt: &str) -> Result<Running<'_>, String> {
        let fingerprint = fingerprint(sql);
        {
            let refused = self.refused.read().unwrap_or_else(|p| p.into_inner());
            let crashes = refused
                .crashes_by_database
                .get(database)
                .copied()
                .unwrap_or(0);
            if crashes >= MAX_CRASHES_PER_DATABASE {
                metrics::counter!("atoll_crash_refused_statements_total").increment(1);
                return Err(format!(
                    "statements of this database crashed the server {crashes} times: the database runs no statement until an operator clears it (crash journal)"
                ));
            }
            // Nearly always empty: no copy of the id for the look-up then.
            if !refused.statements.is_empty()
                && refused
                    .statements
                    .contains(&(database.to_string(), fingerprint))
            {
                metrics::counter!("atoll_crash_refused_statements_total").increment(1);
                return Err(format!(
                    "this statement crashed the server before and is refused on this database (crash journal, fingerprint {fingerprint:016x})"
                ));
            }
        }
        let slot = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        if let Some(slot) = slot {
            let mut bytes = [0u8; SLOT_BYTES as usize];
            bytes[0] = RUNNING;
            bytes[1..9].copy_from_slice(&fingerprint.to_le_bytes());
            let id = truncate(database, DB_ID_MAX);
            bytes[9] = id.len() as u8;
            bytes[DB_ID_AT..DB_ID_AT + id.len()].copy_from_slice(id.as_bytes());
            let excerpt = truncate(excerpt, EXCERPT_MAX - 1);
            bytes[EXCERPT_AT - 1] = excerpt.len() as u8;
            bytes[EXCERPT_AT..EXCERPT_AT + excerpt.len()].copy_from_slice(excerpt.as_bytes());
            self.slots.write(offset(slot), &bytes);
        }
        let running = Running {
            journal: self,
            slot,
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            outer: slot.map_or_else(signal::Current::none, |slot| {
                signal::Current::enter(self.slots.address(offset(slot)))
            }),
        };
        if self.abort_on.as_deref() == Some(sql) {
            tracing::error!("{ABORT_ON_SQL}: aborting the process on this statement");
            std::process::abort();
        }
        Ok(running)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        self.outer.leave();
        if let Some(slot) = self.slot {
            // The whole slot, not only its state: nothing of a finished statement (its
            // fingerprint, its excerpt) stays on the disk.
            const EMPTY_SLOT: [u8; SLOT_BYTES as usize] = [EMPTY; SLOT_BYTES as usize];
            self.journal.slots.write(offset(slot), &EMPTY_SLOT);
            self.journal
                .free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(slot);
        }
    }
}

fn offset(slot: u32) -> usize {
    slot as usize * SLOT_BYTES as usize
}

/// `text` cut to at most `max` bytes on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn decode(slot: &[u8], now: u64) -> Option<RefusedStatement> {
    if slot[0] != RUNNING && slot[0] != CULPRIT {
        return None;
    }
    let fingerprint = u64::from_le_bytes(slot[1..9].try_into().ok()?);
    let id_length = usize::from(slot[9]).min(DB_ID_MAX);
    let database = String::from_utf8_lossy(&slot[DB_ID_AT..DB_ID_AT + id_length]).into_owned();
    let excerpt_length = usize::from(slot[EXCERPT_AT - 1]).min(EXCERPT_MAX);
    let excerpt =
        String::from_utf8_lossy(&slot[EXCERPT_AT..EXCERPT_AT + excerpt_length]).into_owned();
    Some(RefusedStatement {
        database,
        fingerprint: format!("{fingerprint:016x}"),
        excerpt,
        found_at_ms: now,
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_ignore_case_and_spacing_but_not_literals() {
        assert_eq!(
            fingerprint("SELECT * FROM t WHERE x = 1"),
            fingerprint("  select *\n\tfrom T   where x = 1 ")
        );
        assert_ne!(
            fingerprint("SELECT * FROM t WHERE x = 1"),
            fingerprint("SELECT * FROM t WHERE x = 2")
        );
    }

    #[test]
    fn a_culprit_left_in_the_journal_is_refused_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, findings) = CrashJournal::open(dir.path()).unwrap();
        assert!(findings.culprits.is_empty());
        let crashing = journal.running("db-a", "SELECT crash()").unwrap();
        let beside = journal.running("db-b", "SELECT 1").unwrap();
        // What the signal handler does to the slot of the thread that died.
        journal
            .slots
            .write(offset(crashing.slot.unwrap()), &[CULPRIT]);
        std::mem::forget(crashing);
        std::mem::forget(beside);
        drop(journal);

        let (journal, findings) = CrashJournal::open(dir.path()).unwrap();
        assert_eq!(findings.culprits.len(), 1, "{findings:?}");
        assert_eq!(findings.culprits[0].database, "db-a");
        assert_eq!(findings.culprits[0].excerpt, "SELECT crash()");
        assert_eq!(findings.in_flight.len(), 1);
        let refused = journal.running("db-a", "select   CRASH()").err().unwrap();
        assert!(refused.contains("crashed the server before"), "{refused}");
        // Another database, and the statement that only ran beside it, are not refused.
        assert!(journal.running("db-b", "SELECT crash()").is_ok());
        assert!(journal.running("db-b", "SELECT 1").is_ok());
        drop(journal);

        // The refusal outlives further starts; an emptied slot leaves nothing behind.
        let (journal, findings) = CrashJournal::open(dir.path()).unwrap();
        assert!(findings.culprits.is_empty() && findings.in_flight.is_empty());
        assert!(journal.running("db-a", "SELECT crash()").is_err());
    }

    #[test]
    fn a_database_that_keeps_crashing_the_node_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for attempt in 0..MAX_CRASHES_PER_DATABASE {
            let (journal, _) = CrashJournal::open(dir.path()).unwrap();
            assert!(journal.running("db-a", "SELECT 1").is_ok(), "{attempt}");
            let running = journal
                .running("db-a", &format!("SELECT crash({attempt})"))
                .unwrap();
            journal
                .slots
                .write(offset(running.slot.unwrap()), &[CULPRIT]);
            std::mem::forget(running);
        }
        let (journal, findings) = CrashJournal::open(dir.path()).unwrap();
        assert_eq!(findings.culprits.len(), 1);
        let refused = journal.running("db-a", "SELECT 1").err().unwrap();
        assert!(refused.contains("3 times"), "{refused}");
        assert!(journal.running("db-b", "SELECT 1").is_ok());
    }
}
