//! The tenant SQL sandbox: every connection that runs a tenant's SQL is opened here, with
//! SQLite's authorizer and per-connection settings (never text matching) deciding what the
//! SQL may do. Whatever path brings the SQL — Hrana over HTTP or WebSocket, `/v1/execute`,
//! dump seeds, the shell (which speaks Hrana) — it runs on a connection from
//! [`open`], so these rules hold everywhere. `docs/SECURITY.md` ("The SQL sandbox") is the
//! same list for readers who are not reading code.
//!
//! The rules, each with its reason:
//!
//! - **Pragmas are allow-listed** ([`pragma_verdict`]): a pragma that changes an engine-wide
//!   setting (`hard_heap_limit`, `soft_heap_limit`, `threads`, `temp_store_directory`) would
//!   let one tenant break every other tenant and the metadata store, which share the
//!   process; pragmas that change how the file is stored (`journal_mode`, `synchronous`,
//!   `page_size`, `max_page_count`, `wal_checkpoint`, …) belong to Atoll, which backs the
//!   file up, enforces its size limit and serves it; `writable_schema` and a written
//!   `schema_version` corrupt the file. Read-only tokens get a smaller list: nothing that
//!   writes (`optimize`, `user_version = …`).
//! - **ATTACH opens only what the node resolved** ([`Control::approve_attach`]): a tenant
//!   names another database; the node checks the token's `p.roa` and the target's
//!   `allow_attach`, and approves exactly one read-only URI for exactly one statement. Any
//!   other file name (a path, `meta.db`, an empty name for a temporary database) makes the
//!   statement a no-op or an error, so a text that slips past the executor's parser still
//!   opens nothing. `VACUUM INTO '<file>'` is an ATTACH underneath and so is refused too;
//!   plain `VACUUM` attaches an empty name and is allowed while it runs.
//! - **No extensions, no dangerous functions**: `load_extension` and `fts3_tokenizer` are
//!   refused (extension loading is also off at the C level); virtual tables only of the
//!   modules listed in [`VIRTUAL_TABLE_MODULES`].
//! - **Defensive mode** (`SQLITE_DBCONFIG_DEFENSIVE`): no `writable_schema`, no writes to
//!   shadow tables or `sqlite_dbpage`: a tenant cannot corrupt the file Atoll must serve,
//!   back up and restore. The one exception is loading a dump into a new file, which is
//!   checked whole (`quick_check`) before it is installed, as an uploaded file is.
//! - **Per-connection limits**: one string or blob (`SQLITE_LIMIT_LENGTH`) and one SQL text
//!   are bounded so `randomblob(900000000)` fails with `SQLITE_TOOBIG` instead of taking
//!   the machine's memory; no helper threads per statement; the temporary database (temp
//!   tables, `CREATE TEMP …`) is capped by its own `max_page_count`.
//! - **Read-only tokens cannot write**: their connections run with `query_only`, so not
//!   even `BEGIN IMMEDIATE` (which takes the write lock) or `PRAGMA optimize` (which writes
//!   `sqlite_stat1`) gets through, whatever the statement's text looks like. Read-only and
//!   read-write connections are pooled apart (`pool::ConnectionPool`).
//! - **Statements end** ([`Control::arm`]): a per-statement deadline, the client's
//!   cancellation (it went away) and the node's shutdown interrupt a running statement
//!   through the progress handler.

use crate::error::DataError;
use rusqlite::config::DbConfig;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization, TransactionOperation};
use rusqlite::limits::Limit;
use rusqlite::Connection;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a connection's SQL may do. Fixed when the connection opens: prepared statements
/// are cached per connection, so the rules they were checked under must not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// A full-access token.
    ReadWrite,
    /// A read-only token: `query_only`, the smaller pragma list.
    ReadOnly,
    /// Loading an SQL dump into a new database: like `ReadWrite`, but no ATTACH at all,
    /// and transaction statements are reported to the loader (which runs the dump in one
    /// transaction of its own) instead of run.
    DumpLoader,
}

/// The sandbox's limits, from the node's configuration (`atoll dev --help`).
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// How long one statement may run before it is interrupted.
    pub statement_timeout: Duration,
    /// How long loading one SQL dump (a `dump` seed) may take in all.
    pub dump_load_timeout: Duration,
    /// The largest string or blob a statement may make or read (`SQLITE_LIMIT_LENGTH`).
    pub max_value_bytes: usize,
    /// The largest SQL text of one statement (`SQLITE_LIMIT_SQL_LENGTH`).
    pub max_sql_bytes: usize,
    /// The most the temporary database of one connection may hold.
    pub max_temp_bytes: u64,
    /// The most of the engine's heap one statement may take (its sorts, windows, grouping
    /// keys, values; `--max-statement-memory`): past it the statement fails.
    pub max_statement_memory: u64,
    /// An interactive transaction holding the write lock while another writer waits is
    /// rolled back after this long (`TRANSACTION_TIMEOUT`, as sqld).
    pub transaction_timeout: Duration,
    /// How long a writer waits for the write lock before `SQLITE_BUSY`. Longer than
    /// `transaction_timeout`, so a waiting writer outlasts a holder that is rolled back.
    pub busy_timeout: Duration,
    /// SQLite's page cache of each connection, in bytes (`--page-cache-size`): the memory a
    /// connection holds besides its statements (`database::CONNECTION_PRAGMAS`).
    pub page_cache_bytes: u64,
    /// Idle connections the node keeps open for reuse, over all its databases: by default
    /// what the warm set's file descriptors allow (`--warm-files`, `warm_set`), lower with
    /// `--max-idle-connections`.
    pub max_idle_connections: usize,
    /// Bytes of memory the idle connections may hold together (`--warm-memory`,
    /// `warm_set`): each counted at its page cache, schema and statements plus a fixed part.
    pub warm_memory_bytes: u64,
    /// The most CPU time a database's last open may have cost for a read to open it on the
    /// async worker that received it (`hrana::http`, "A cold open on the worker" in
    /// PERFORMANCE.md; `crate::open_cost`). The inline read budget by default
    /// (`hrana::INLINE_BUDGET`, 500 µs): an open above it parses a schema too large to hold
    /// a worker for.
    pub inline_open_cpu: Duration,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        let warm = crate::warm_set::WarmBudget::of_machine();
        SandboxSettings {
            statement_timeout: Duration::from_secs(30),
            dump_load_timeout: Duration::from_secs(600),
            max_value_bytes: 32 * 1024 * 1024,
            max_sql_bytes: 16 * 1024 * 1024,
            max_temp_bytes: 256 * 1024 * 1024,
            max_statement_memory: 512 * 1024 * 1024,
            transaction_timeout: Duration::from_secs(5),
            busy_timeout: Duration::from_secs(10),
            page_cache_bytes: 512 * 1024,
            max_idle_connections: warm.max_connections(),
            warm_memory_bytes: warm.memory_bytes,
            inline_open_cpu: crate::hrana::INLINE_BUDGET,
        }
    }
}

/// Why a running statement was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    Deadline(Duration),
    ClientGone,
    Shutdown,
    /// The statement needed more of the engine's heap than its budget (in bytes).
    OutOfMemoryBudget(u64),
}

impl Interruption {
    pub fn message(self) -> String {
        match self {
            Interruption::Deadline(limit) => format!(
                "the statement ran longer than {} and was interrupted (the node's --statement-timeout)",
                crate::sandbox::human_duration(limit)
            ),
            Interruption::ClientGone => {
                "the statement was interrupted: its client went away".to_string()
            }
            Interruption::OutOfMemoryBudget(limit) => format!(
                "the statement needed more than {} MiB of memory and was stopped (the node's --max-statement-memory)",
                limit >> 20
            ),
            Interruption::Shutdown => {
                "the statement was interrupted: the server is shutting down".to_string()
            }
        }
    }
}

pub(crate) fn human_duration(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// A flag the async side of a request raises when its client goes away (the request's
/// future is dropped), read by the progress handler of the statement it started.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// A guard that cancels the token when dropped, unless [`CancelOnDrop::disarm`]ed:
    /// hold it in the request's future.
    pub fn cancel_on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(Some(self.clone()))
    }
}

pub struct CancelOnDrop(Option<CancelToken>);

impl CancelOnDrop {
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(token) = self.0.take() {
            token.cancel();
        }
    }
}

/// What the authorizer and the progress handler of one connection consult, shared with
/// the executor that runs statements on it.
pub struct Control {
    mode: Mode,
    /// The engine heap each statement may take ([`SandboxSettings::max_statement_memory`]).
    statement_memory: u64,
    shutdown: Arc<AtomicBool>,
    state: Mutex<ControlState>,
}

#[derive(Default)]
struct ControlState {
    /// Atoll's own statements (the size limit, the dump writer): not tenant SQL.
    trusted: bool,
    /// The one ATTACH file name the node resolved for the statement being prepared.
    approved_attach: Option<String>,
    /// A plain `VACUUM` is running (it attaches a temporary database by an empty name).
    vacuum_running: bool,
    /// Why the authorizer last refused something (read and cleared by the executor).
    refusal: Option<String>,
    /// The transaction statement last prepared (`DumpLoader` only).
    transaction: Option<TransactionStatement>,
    deadline: Option<(Instant, Duration)>,
    cancel: Option<CancelToken>,
    interrupted: Option<Interruption>,
    /// A budget of running time for everything until it is lifted ([`Control::within_budget`]).
    budget: Option<RunningBudget>,
    /// The budget ran out.
    over_budget: bool,
    /// What opening the connection's database cost, forgotten by a statement that may grow
    /// its schema ([`Control::watch_open_cost`]).
    open_cost: Option<Arc<crate::open_cost::OpenCost>>,
}

/// What [`Control::within_budget`] allows: CPU time of the thread that runs the work, and
/// a longer stretch of wall-clock time for work that waits rather than computes (pages
/// read from a disk).
#[derive(Debug, Clone, Copy)]
struct RunningBudget {
    cpu: Duration,
    cpu_at_start: Duration,
    wall_until: Instant,
}

impl RunningBudget {
    fn spent(&self) -> bool {
        Instant::now() >= self.wall_until
            || crate::thread_clock::cpu_time().saturating_sub(self.cpu_at_start) >= self.cpu
    }
}

/// A transaction statement found in a dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatement {
    Begin,
    /// `COMMIT` / `END`.
    Commit,
    Rollback,
}

impl Control {
    fn lock(&self) -> std::sync::MutexGuard<'_, ControlState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Runs Atoll's own SQL on a tenant connection, outside the tenant rules.
    pub fn trusted<T>(&self, work: impl FnOnce() -> T) -> T {
        self.lock().trusted = true;
        let result = work();
        self.lock().trusted = false;
        result
    }

    /// Lets the statement prepared by `work` attach exactly `uri` (resolved by the node).
    pub fn approve_attach<T>(&self, uri: &str, work: impl FnOnce() -> T) -> T {
        self.lock().approved_attach = Some(uri.to_string());
        let result = work();
        self.lock().approved_attach = None;
        result
    }

    /// Lets a plain `VACUUM` attach its temporary database while `work` runs it.
    pub fn vacuum<T>(&self, work: impl FnOnce() -> T) -> T {
        self.lock().vacuum_running = true;
        let result = work();
        self.lock().vacuum_running = false;
        result
    }

    /// Forgets `cost` whenever a statement prepared on this connection may grow the schema
    /// (`crate::open_cost`).
    pub fn watch_open_cost(&self, cost: Arc<crate::open_cost::OpenCost>) {
        self.lock().open_cost = Some(cost);
    }

    /// The reason of the authorizer's last refusal, if any (cleared).
    pub fn take_refusal(&self) -> Option<String> {
        self.lock().refusal.take()
    }

    /// The transaction statement the loader just prepared, if it was one (cleared).
    pub fn take_transaction_statement(&self) -> Option<TransactionStatement> {
        self.lock().transaction.take()
    }

    /// Starts the clock of a statement: it is interrupted after `timeout`, when `cancel` is
    /// raised, or when the node shuts down.
    /// Its memory is budgeted too (until [`Control::disarm`], which must be called on the
    /// same thread: the budget is the thread's).
    pub fn arm(&self, timeout: Duration, cancel: Option<&CancelToken>) {
        let mut state = self.lock();
        state.deadline = Some((Instant::now() + timeout, timeout));
        state.cancel = cancel.cloned();
        state.interrupted = None;
        crate::memory::start_statement_memory_budget(self.statement_memory);
    }

    /// Stops the clock (between statements, a connection waiting for its client is not
    /// running anything).
    pub fn disarm(&self) -> Option<Interruption> {
        let over_memory = crate::memory::end_statement_memory_budget();
        let mut state = self.lock();
        state.deadline = None;
        state.cancel = None;
        let interrupted = state.interrupted.take();
        match interrupted {
            None if over_memory => Some(Interruption::OutOfMemoryBudget(self.statement_memory)),
            interrupted => interrupted,
        }
    }

    /// Runs `work` (statements that only read) with a budget of running time: `cpu` of the
    /// calling thread's own CPU time, `wall` of the clock's. A statement still running when
    /// either is spent is interrupted. Answers whether that happened, in which case the
    /// caller runs the work again elsewhere (checked every `PROGRESS_INTERVAL`
    /// virtual-machine steps, so short statements rarely look). CPU time, not the clock,
    /// is the budget proper: on a busy node a thread waits for a core for longer than a
    /// point select runs, and a wall-clock budget of 500 µs interrupted reads that had
    /// done a few microseconds of work (PERFORMANCE.md, "The inline budget in CPU time").
    pub fn within_budget<T>(
        &self,
        cpu: Duration,
        wall: Duration,
        work: impl FnOnce() -> T,
    ) -> (T, bool) {
        {
            let mut state = self.lock();
            state.budget = Some(RunningBudget {
                cpu,
                cpu_at_start: crate::thread_clock::cpu_time(),
                wall_until: Instant::now() + wall,
            });
            state.over_budget = false;
        }
        crate::memory::start_statement_memory_budget(self.statement_memory);
        let result = work();
        // Over its memory, the work is run again elsewhere too, where the statement's
        // own budget stops it with the error that says why.
        let over_memory = crate::memory::end_statement_memory_budget();
        let mut state = self.lock();
        state.budget = None;
        state.over_budget |= over_memory;
        (result, std::mem::take(&mut state.over_budget))
    }

    /// Why the running statement should stop now, if it should.
    fn should_interrupt(&self) -> bool {
        let mut state = self.lock();
        if let Some(budget) = state.budget {
            if budget.spent() {
                state.over_budget = true;
                state.interrupted = Some(Interruption::Deadline(budget.cpu));
                return true;
            }
        }
        let why = if self.shutdown.load(Ordering::Relaxed) {
            Some(Interruption::Shutdown)
        } else if state.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            Some(Interruption::ClientGone)
        } else {
            match state.deadline {
                Some((at, limit)) if Instant::now() >= at => Some(Interruption::Deadline(limit)),
                _ => None,
            }
        };
        if why.is_some() {
            state.interrupted = why;
        }
        why.is_some()
    }

    fn authorize(&self, context: AuthContext<'_>) -> Authorization {
        let mut state = self.lock();
        if grows_schema(&context.action) {
            if let Some(cost) = &state.open_cost {
                cost.forget();
            }
        }
        if state.trusted {
            return Authorization::Allow;
        }
        let verdict = match context.action {
            AuthAction::Pragma {
                pragma_name,
                pragma_value,
            } => pragma_verdict(self.mode, pragma_name, pragma_value),
            AuthAction::Attach { filename } => {
                let approved = state.approved_attach.as_deref() == Some(filename);
                if approved || (filename.is_empty() && state.vacuum_running) {
                    Verdict::Allow
                } else if self.mode == Mode::DumpLoader {
                    Verdict::Deny("ATTACH is not allowed in a dump".into())
                } else {
                    // A no-op rather than an error: the executor rewrites the ATTACHes it
                    // understands and reports refusals itself; anything else (an ATTACH
                    // inside a multi-statement text, a file path, VACUUM INTO) opens
                    // nothing.
                    Verdict::Ignore(format!(
                        "ATTACH {filename:?} is not allowed: attach another database of your organization by its name, with a token that may read it"
                    ))
                }
            }
            AuthAction::Function { function_name } => {
                let name = function_name.to_ascii_lowercase();
                if DENIED_FUNCTIONS.contains(&name.as_str()) {
                    Verdict::Deny(format!(
                        "the function {function_name}() is not allowed: it reaches outside the database"
                    ))
                } else {
                    Verdict::Allow
                }
            }
            AuthAction::CreateVtable { module_name, .. }
            | AuthAction::DropVtable { module_name, .. } => {
                if VIRTUAL_TABLE_MODULES.contains(&module_name.to_ascii_lowercase().as_str()) {
                    Verdict::Allow
                } else {
                    Verdict::Deny(format!(
                        "virtual tables of module {module_name} are not allowed (allowed: {})",
                        VIRTUAL_TABLE_MODULES.join(", ")
                    ))
                }
            }
            AuthAction::Transaction { operation } if self.mode == Mode::DumpLoader => {
                state.transaction = Some(match operation {
                    TransactionOperation::Begin => TransactionStatement::Begin,
                    TransactionOperation::Rollback => TransactionStatement::Rollback,
                    // rusqlite names only BEGIN, RELEASE and ROLLBACK; SQLite's third
                    // transaction operation is COMMIT (also written END).
                    _ => TransactionStatement::Commit,
                });
                Verdict::Allow
            }
            // Codes this build does not know: refuse rather than guess.
            AuthAction::Unknown { code, .. } => {
                Verdict::Deny(format!("operation {code} is not allowed"))
            }
            _ => Verdict::Allow,
        };
        match verdict {
            Verdict::Allow => Authorization::Allow,
            Verdict::Ignore(reason) => {
                state.refusal = Some(reason);
                Authorization::Ignore
            }
            Verdict::Deny(reason) => {
                state.refusal = Some(reason);
                Authorization::Deny
            }
        }
    }
}

/// Whether a statement doing `action` may make the schema the next open parses larger
/// (what `crate::open_cost` learns): objects of the file's schema created or altered, and
/// `ANALYZE`, whose statistics are loaded with the schema. Temporary objects are not in
/// the file.
fn grows_schema(action: &AuthAction<'_>) -> bool {
    matches!(
        action,
        AuthAction::CreateTable { .. }
            | AuthAction::CreateIndex { .. }
            | AuthAction::CreateView { .. }
            | AuthAction::CreateTrigger { .. }
            | AuthAction::CreateVtable { .. }
            | AuthAction::AlterTable { .. }
            | AuthAction::Analyze { .. }
    )
}

enum Verdict {
    Allow,
    /// The statement compiles, without the refused part (SQLITE_IGNORE).
    Ignore(String),
    /// The statement fails to prepare (`not authorized`).
    Deny(String),
}

/// Functions no tenant statement may call, even from a view or trigger.
const DENIED_FUNCTIONS: &[&str] = &["load_extension", "fts3_tokenizer"];

/// Modules of `CREATE VIRTUAL TABLE` a tenant may use: full-text search and spatial
/// indexes. Others (`sqlite_dbpage`, `dbstat`, …) expose the file's pages.
pub const VIRTUAL_TABLE_MODULES: &[&str] =
    &["fts3", "fts4", "fts5", "rtree", "rtree_i32", "geopoly"];

/// Pragmas that only report (with or without an argument naming a table, index or
/// check): every token may run them.
const REPORTING_PRAGMAS: &[&str] = &[
    "collation_list",
    "compile_options",
    "data_version",
    "foreign_key_check",
    "foreign_key_list",
    "freelist_count",
    "function_list",
    "index_info",
    "index_list",
    "index_xinfo",
    "integrity_check",
    "module_list",
    "page_count",
    "pragma_list",
    "quick_check",
    "table_info",
    "table_list",
    "table_xinfo",
];

/// Settings every token may read (a pragma without a value) but only the listed ones below
/// may set.
const READABLE_SETTINGS: &[&str] = &[
    "analysis_limit",
    "application_id",
    "auto_vacuum",
    "automatic_index",
    "busy_timeout",
    "cache_size",
    "cache_spill",
    "cell_size_check",
    "defer_foreign_keys",
    "encoding",
    "foreign_keys",
    "hard_heap_limit",
    "journal_mode",
    "journal_size_limit",
    "legacy_alter_table",
    "locking_mode",
    "max_page_count",
    "mmap_size",
    "page_size",
    "query_only",
    "recursive_triggers",
    "reverse_unordered_selects",
    "schema_version",
    "secure_delete",
    "soft_heap_limit",
    "synchronous",
    "temp_store",
    "threads",
    "trusted_schema",
    "user_version",
    "wal_autocheckpoint",
];

/// Settings of the connection itself (they end with it, and a connection whose settings
/// changed is never reused by another client): every token may set them.
const SESSION_SETTINGS: &[&str] = &[
    "analysis_limit",
    "automatic_index",
    "case_sensitive_like",
    "defer_foreign_keys",
    "foreign_keys",
    "recursive_triggers",
    "reverse_unordered_selects",
];

/// Pragmas that write the database when given a value: full-access tokens only.
const WRITING_PRAGMAS: &[&str] = &["application_id", "legacy_alter_table", "user_version"];

/// Pragmas that write the database even without a value: full-access tokens only.
const WRITING_COMMANDS: &[&str] = &["incremental_vacuum", "optimize"];

/// Settings that reach beyond the connection to the whole process, and why that is fatal.
const ENGINE_WIDE: &[&str] = &[
    "hard_heap_limit",
    "soft_heap_limit",
    "threads",
    "temp_store_directory",
    "data_store_directory",
];

fn pragma_verdict(mode: Mode, name: &str, value: Option<&str>) -> Verdict {
    let name = name.to_ascii_lowercase();
    let name = name.as_str();
    let writes = mode != Mode::ReadOnly;
    let allowed = if REPORTING_PRAGMAS.contains(&name) {
        true
    } else if name == "writable_schema" && mode == Mode::DumpLoader {
        // How `sqlite3 .dump` recreates virtual tables; see `open`.
        true
    } else if WRITING_COMMANDS.contains(&name)
        || (WRITING_PRAGMAS.contains(&name) && value.is_some())
    {
        writes
    } else if value.is_none() {
        READABLE_SETTINGS.contains(&name)
    } else {
        SESSION_SETTINGS.contains(&name)
    };
    if allowed {
        return Verdict::Allow;
    }
    let why = if ENGINE_WIDE.contains(&name) {
        "it changes a setting of the whole server, shared by every database"
    } else if ["writable_schema", "schema_version"].contains(&name) {
        "it can corrupt the database file"
    } else if WRITING_PRAGMAS.contains(&name) || WRITING_COMMANDS.contains(&name) {
        "it writes to the database and this token is read-only"
    } else if name == "query_only" {
        "the connection's read-only state follows the token"
    } else if name == "database_list" {
        "it reveals the server's file layout; databases are named, never located"
    } else if READABLE_SETTINGS.contains(&name) || name.starts_with("wal_") {
        "Atoll manages how the database is stored (journal, page size, size limit, checkpoints, memory)"
    } else {
        "it is not on Atoll's list of pragmas tenants may run (docs/SECURITY.md)"
    };
    Verdict::Deny(format!("PRAGMA {name} is not allowed: {why}"))
}

/// A tenant connection: the SQLite connection, and the controls its authorizer and
/// progress handler share with the executor.
pub struct SandboxedConnection {
    pub conn: Connection,
    pub control: Arc<Control>,
    /// What it holds of the engine's heap, for the warm set's budget (`pool`).
    pub(crate) heap: crate::memory::HeapReading,
    /// The bound of the database's pages last set on it and in force as asked (`None`:
    /// none yet, or the engine kept a larger one because the file was larger), so that a
    /// request sets it again only when the database's size limit changed
    /// (`hrana::exec::apply_page_limit`).
    pub(crate) max_pages: std::cell::Cell<Option<u64>>,
}

/// How often (in virtual-machine instructions) a running statement checks whether it must
/// stop. Small enough to stop within milliseconds, large enough to cost nothing: one check
/// (a lock and a clock read) per thousand instructions. It was 10,000 until the SQL fuzzer
/// found statements whose instructions each work on 32 MiB values, which ran 36 s past a
/// 1 s deadline between two checks.
const PROGRESS_INTERVAL: i32 = 1_000;

/// What opening a file that is not there does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfMissing {
    /// Creates an empty database.
    Create,
    /// Fails (`SQLITE_CANTOPEN`): never an empty database in place of a lost one. Asking
    /// the engine not to create the file, rather than looking for it first, saves a cold
    /// open a `stat` of its path.
    Fail,
}

/// Opens `path` for tenant SQL under `mode`'s rules; an encrypted database with its `key`.
/// `setup` runs first, trusted (Atoll's connection pragmas).
pub fn open(
    path: &Path,
    if_missing: IfMissing,
    mode: Mode,
    settings: &SandboxSettings,
    shutdown: &Arc<AtomicBool>,
    key: Option<&atoll_storage::encryption::EncryptionKey>,
    setup: impl FnOnce(&Connection) -> rusqlite::Result<()>,
) -> Result<SandboxedConnection, DataError> {
    let flags = match if_missing {
        IfMissing::Create => rusqlite::OpenFlags::default(),
        IfMissing::Fail => rusqlite::OpenFlags::default() - rusqlite::OpenFlags::SQLITE_OPEN_CREATE,
    };
    let conn = match key {
        Some(key) => atoll_storage::encryption::open(path, flags, key)?,
        None => Connection::open_with_flags_and_vfs(path, flags, atoll_storage::wal_index::VFS)?,
    };
    // A dump loads into a new file that is checked whole before it is installed (as an
    // upload is), and `sqlite3 .dump` writes virtual tables through `writable_schema`:
    // there, and only there, the schema may be written.
    conn.set_db_config(
        DbConfig::SQLITE_DBCONFIG_DEFENSIVE,
        mode != Mode::DumpLoader,
    )?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, false)?;
    set_limit(&conn, Limit::SQLITE_LIMIT_LENGTH, settings.max_value_bytes);
    set_limit(
        &conn,
        Limit::SQLITE_LIMIT_SQL_LENGTH,
        settings.max_sql_bytes,
    );
    conn.set_limit(Limit::SQLITE_LIMIT_WORKER_THREADS, 0);
    setup(&conn)?;
    let temp_pages = (settings.max_temp_bytes / crate::database::PAGE_SIZE).max(1);
    crate::engine::limit_temporary_database(&conn, temp_pages);
    if mode == Mode::ReadOnly {
        conn.pragma_update(None, "query_only", true)?;
    }
    crate::write_lock::install_busy_handler(&conn)?;
    let control = Arc::new(Control {
        mode,
        statement_memory: settings.max_statement_memory,
        shutdown: Arc::clone(shutdown),
        state: Mutex::new(ControlState::default()),
    });
    let for_authorizer = Arc::clone(&control);
    conn.authorizer(Some(move |context: AuthContext<'_>| {
        for_authorizer.authorize(context)
    }));
    let for_progress = Arc::clone(&control);
    conn.progress_handler(
        PROGRESS_INTERVAL,
        Some(move || for_progress.should_interrupt()),
    );
    Ok(SandboxedConnection {
        conn,
        control,
        heap: Default::default(),
        max_pages: std::cell::Cell::new(None),
    })
}

fn set_limit(conn: &Connection, limit: Limit, value: usize) {
    conn.set_limit(limit, i32::try_from(value).unwrap_or(i32::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(mode: Mode, name: &str, value: Option<&str>) -> bool {
        matches!(pragma_verdict(mode, name, value), Verdict::Allow)
    }

    /// A read-write tenant connection to a new database in `dir`, set up as the node sets
    /// up its own (`database::configure_connection`).
    fn tenant_connection(
        dir: &tempfile::TempDir,
        settings: &SandboxSettings,
    ) -> SandboxedConnection {
        let shutdown = Arc::new(AtomicBool::new(false));
        open(
            &dir.path().join("data"),
            IfMissing::Create,
            Mode::ReadWrite,
            settings,
            &shutdown,
            None,
            |conn| crate::database::configure_connection(conn, settings.page_cache_bytes, true),
        )
        .unwrap()
    }

    /// A tenant's connection as the node opens it, read back from the engine: the settings
    /// no statement states at each open any more (the engine's defaults, C calls instead
    /// of pragmas) still hold, and the temporary database is bounded but opened only once
    /// something uses it (before, setting its bound opened it at every open).
    #[test]
    fn a_tenant_connection_keeps_its_settings_and_opens_its_bounded_temporary_database_on_use() {
        let dir = tempfile::tempdir().unwrap();
        let settings = SandboxSettings {
            max_temp_bytes: 1 << 20,
            ..SandboxSettings::default()
        };
        let sandboxed = tenant_connection(&dir, &settings);
        let (conn, control) = (&sandboxed.conn, &sandboxed.control);
        let read = |sql: &str| -> i64 {
            control
                .trusted(|| conn.query_row(sql, [], |row| row.get(0)))
                .unwrap()
        };
        let databases = || -> Vec<String> {
            control.trusted(|| {
                let mut list = conn.prepare("PRAGMA database_list").unwrap();
                let names = list.query_map([], |row| row.get(1)).unwrap();
                names.collect::<Result<_, _>>().unwrap()
            })
        };
        let journal: String = control
            .trusted(|| conn.query_row("PRAGMA journal_mode", [], |row| row.get(0)))
            .unwrap();
        assert_eq!(journal, "wal");
        assert_eq!(read("PRAGMA mmap_size"), 0);
        assert_eq!(read("PRAGMA synchronous"), 1);
        assert_eq!(read("PRAGMA journal_size_limit"), 64 << 20);
        assert_eq!(read("PRAGMA wal_autocheckpoint"), 0);
        assert_eq!(databases(), ["main"]);

        conn.execute_batch("CREATE TEMP TABLE scratch (x)").unwrap();
        assert_eq!(databases(), ["main", "temp"]);
        assert_eq!(read("PRAGMA temp.max_page_count"), (1 << 20) / 4096);
    }

    /// What an open cost is forgotten as soon as a statement that may grow the schema is
    /// prepared (even if it never runs): the next open is measured before one is trusted
    /// on an async worker. Reads, writes of rows and temporary objects keep it.
    #[test]
    fn a_statement_that_may_grow_the_schema_forgets_what_opening_cost() {
        let dir = tempfile::tempdir().unwrap();
        let sandboxed = tenant_connection(&dir, &SandboxSettings::default());
        let cost = Arc::new(crate::open_cost::OpenCost::default());
        sandboxed.control.watch_open_cost(Arc::clone(&cost));
        let budget = Duration::from_millis(1);
        let conn = &sandboxed.conn;
        conn.execute_batch("CREATE TABLE t (x)").unwrap();
        for kept in [
            "SELECT * FROM t",
            "INSERT INTO t VALUES (1)",
            "CREATE TEMP TABLE scratch (y)",
            "DROP TABLE scratch",
        ] {
            cost.record(Duration::from_micros(100));
            conn.execute_batch(kept).unwrap();
            assert!(cost.within(budget), "{kept}");
        }
        for grows in [
            "CREATE TABLE u (y)",
            "CREATE INDEX tx ON t (x)",
            "CREATE VIEW v AS SELECT x FROM t",
            "CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END",
            "ALTER TABLE t ADD COLUMN z",
            "ANALYZE",
            "CREATE VIRTUAL TABLE f USING fts5(body)",
        ] {
            cost.record(Duration::from_micros(100));
            drop(conn.prepare(grows).unwrap());
            assert!(!cost.within(budget), "{grows}");
        }
    }

    /// A budget of running time (the inline reads') counts the thread's own CPU time: work
    /// whose thread waited past the budget (slept here, as a worker preempted on a busy
    /// node waits for a core) is not interrupted, work that computes past it is, and work
    /// held past the wall-clock limit is as well.
    #[test]
    fn a_running_budget_counts_the_threads_work_and_not_its_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let sandboxed = tenant_connection(&dir, &SandboxSettings::default());
        let (conn, control) = (&sandboxed.conn, &sandboxed.control);
        // A few thousand engine steps: the budget is looked at, the work is microseconds.
        let short =
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000) \
                     SELECT count(*) FROM c";
        let count = || conn.query_row(short, [], |row| row.get::<_, i64>(0));
        let waited_then_counted = || {
            std::thread::sleep(Duration::from_millis(100));
            count()
        };

        let (counted, overran) = control.within_budget(
            Duration::from_millis(50),
            Duration::from_secs(30),
            waited_then_counted,
        );
        assert!(!overran, "waiting was counted as work");
        assert_eq!(counted.unwrap(), 2000);

        let endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                       SELECT count(*) FROM c";
        let (counted, overran) =
            control.within_budget(Duration::from_millis(5), Duration::from_secs(30), || {
                conn.query_row(endless, [], |row| row.get::<_, i64>(0))
            });
        assert!(overran, "work past its CPU budget ran on");
        assert!(counted.is_err());

        let (counted, overran) = control.within_budget(
            Duration::from_secs(30),
            Duration::from_millis(50),
            waited_then_counted,
        );
        assert!(overran, "work held past the clock's limit ran on");
        assert!(counted.is_err());
        // Outside a budget the same work runs to its end.
        assert_eq!(waited_then_counted().unwrap(), 2000);
    }

    #[test]
    fn engine_wide_pragmas_are_refused_to_everyone() {
        for mode in [Mode::ReadWrite, Mode::ReadOnly, Mode::DumpLoader] {
            for name in ENGINE_WIDE {
                assert!(!verdict(mode, name, Some("100000")), "{name} {mode:?}");
            }
            assert_eq!(
                verdict(mode, "writable_schema", Some("ON")),
                mode == Mode::DumpLoader
            );
            assert!(!verdict(mode, "journal_mode", Some("DELETE")));
            assert!(!verdict(mode, "max_page_count", Some("99999999")));
            assert!(!verdict(mode, "query_only", Some("0")));
            assert!(!verdict(mode, "database_list", None));
            assert!(!verdict(mode, "wal_checkpoint", Some("TRUNCATE")));
            assert!(!verdict(mode, "schema_version", Some("1")));
            // Reads are fine.
            assert!(verdict(mode, "hard_heap_limit", None));
            assert!(verdict(mode, "table_info", Some("t")));
            assert!(verdict(mode, "foreign_keys", Some("off")));
        }
    }

    #[test]
    fn read_only_connections_get_the_smaller_list() {
        assert!(verdict(Mode::ReadWrite, "optimize", None));
        assert!(!verdict(Mode::ReadOnly, "optimize", None));
        assert!(verdict(Mode::ReadWrite, "user_version", Some("3")));
        assert!(!verdict(Mode::ReadOnly, "user_version", Some("3")));
        assert!(verdict(Mode::ReadOnly, "user_version", None));
        assert!(!verdict(Mode::ReadOnly, "incremental_vacuum", Some("10")));
    }

    #[test]
    fn pragma_names_are_compared_without_case() {
        assert!(!verdict(Mode::ReadWrite, "HARD_HEAP_LIMIT", Some("1")));
        assert!(verdict(Mode::ReadWrite, "Table_Info", Some("t")));
    }
}
