//! `atoll fuzz-sql` (hidden): a SQL fuzzer through the tenant sandbox, to find the next
//! crash of the engine (C, in the node's process) before a tenant does.
//!
//! Each *case* is a fresh database file opened exactly as the node opens a full-access
//! tenant's connection (`atoll_data::sandbox::open` in `Mode::ReadWrite`, Atoll's
//! connection pragmas, a 1 s statement deadline), then 20–60 statements from the grammar
//! in [`grammar`], each armed with the deadline as the node arms it. Errors are expected
//! and only counted: what matters is that the process survives.
//!
//! Before a statement runs it is appended to `<work-dir>/current-case.sql` with one plain
//! `write` (no buffering, no fsync: if the process dies, the kernel still has it), one
//! statement per line; each case starts by truncating the file. When the process dies of a
//! signal, that file is the case that killed it: `scripts/fuzz-sql.sh` keeps it in
//! `fuzz/sql-crashes/`, and `tests/sql_crash_corpus.rs` replays every file there through
//! a real node.

mod grammar;

use anyhow::{Context, Result};
use atoll_data::sandbox::{self, Mode, SandboxSettings, SandboxedConnection};
use clap::Args;
use grammar::{Function, Generator, SchemaRow, Statement, SCHEMA_QUERY};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct FuzzSqlArgs {
    /// Seed of the statement generator (default: a random one, printed first). The same
    /// seed generates the same cases again.
    #[arg(long)]
    seed: Option<u64>,
    /// How long to fuzz, in seconds.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Stop after this many cases (fresh databases) even if time is left.
    #[arg(long)]
    cases: Option<u64>,
    /// Where each case's database and `current-case.sql` are written (default: a new
    /// temporary directory, removed at the end).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Print each statement's error to stderr (to tune the grammar: errors that only the
    /// parser sees reach none of the engine's execution).
    #[arg(long)]
    print_errors: bool,
    /// Instead of fuzzing, run the statements of this file (a kept case: one statement a
    /// line, `--` comments) on a fresh database opened as a case's, printing each one's
    /// outcome: to reproduce and shrink a crash.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["seed", "cases"])]
    replay: Option<PathBuf>,
    /// Each statement's budget of the engine's heap, in bytes (the node's
    /// `--max-statement-memory`). A small one (a few MiB) makes the engine's out-of-memory
    /// paths, which a tenant reaches at will by sizing its statement, run all the time.
    #[arg(long, default_value_t = SandboxSettings::default().max_statement_memory)]
    statement_memory: u64,
}

/// The deadline of each statement: the node's is 30 s (`--statement-timeout`); a short one
/// keeps the statements per second up and still lets every statement run far.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(1);

/// A statement still running this long after its 1 s deadline did not stop when the
/// progress handler said so (a hang): the run ends with [`HANG_EXIT_CODE`].
const HANG_AFTER: Duration = Duration::from_secs(60);

/// The exit code of a run that found a hang (a crash is a signal).
const HANG_EXIT_CODE: i32 = 3;

/// The node's own connection settings: cases are opened as the node opens a database.
use atoll_data::database::configure_connection;

/// Each case's database has a size limit (as a database created with `size_limit`), which
/// also bounds the disk a case can fill.
const SIZE_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// A case whose WAL grows past this ends early (with object storage on, only the shipper
/// checkpoints, and the fuzzer has no shipper).
const MAX_WAL_BYTES: u64 = 1024 * 1024 * 1024;

/// The file the running case is written to.
pub const CURRENT_CASE: &str = "current-case.sql";

/// A copy of the case whose statement ran longest past its deadline (over 3 s).
const SLOWEST_CASE: &str = "slowest-case.sql";

/// A copy of the case whose statement raised the process's peak memory most (by at least
/// [`HUNGRY_MIB`]).
const HUNGRIEST_CASE: &str = "hungriest-case.sql";

/// A statement that raises the peak resident memory by this much is reported.
const HUNGRY_MIB: u64 = 256;

pub async fn fuzz_sql(args: FuzzSqlArgs) -> Result<()> {
    tokio::task::spawn_blocking(move || run(args)).await?
}

#[derive(Default)]
struct Totals {
    cases: u64,
    statements: u64,
    errors: u64,
    timeouts: u64,
    rows: u64,
    /// The statement that took longest (past its deadline, it did not stop at once).
    slowest: (Duration, String),
    /// The process's peak resident memory so far, MiB.
    peak_mib: u64,
    /// The statement that raised the peak most, and by how many MiB.
    hungriest: (u64, String),
}

fn run(args: FuzzSqlArgs) -> Result<()> {
    let seed = args.seed.unwrap_or_else(|| rand::thread_rng().gen());
    let temp;
    let work_dir = match args.work_dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            dir
        }
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let case_file = work_dir.join(CURRENT_CASE);
    if let Some(file) = &args.replay {
        return replay(file, &work_dir, args.statement_memory);
    }
    println!(
        "fuzz-sql: seed {seed} (again: atoll fuzz-sql --seed {seed}); the running case is in {}",
        case_file.display()
    );
    let _ = std::io::stdout().flush();

    let settings = SandboxSettings {
        statement_timeout: STATEMENT_TIMEOUT,
        max_statement_memory: args.statement_memory,
        ..SandboxSettings::default()
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    let functions: Arc<[Function]> = list_functions(&work_dir, &settings, &shutdown)?.into();
    println!(
        "fuzz-sql: {} functions of the engine (PRAGMA function_list)",
        functions.len()
    );

    let progress = work_dir.join("progress.txt");
    let _ = std::fs::remove_file(work_dir.join(SLOWEST_CASE));
    let _ = std::fs::remove_file(work_dir.join(HUNGRIEST_CASE));
    let watchdog = Watchdog::start(case_file.clone());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.duration);
    let mut totals = Totals::default();
    while Instant::now() < deadline && args.cases.is_none_or(|max| totals.cases < max) {
        let case = Case {
            seed,
            number: totals.cases,
            work_dir: &work_dir,
            case_file: &case_file,
            settings: &settings,
            shutdown: &shutdown,
            functions: Arc::clone(&functions),
            watchdog: &watchdog,
            print_errors: args.print_errors,
        };
        case.run(&mut totals, deadline)?;
        totals.cases += 1;
        // The statements of the cases done, for `scripts/fuzz-sql.sh` when a later case
        // kills the process (one small write per case).
        let _ = std::fs::write(&progress, totals.statements.to_string());
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "fuzz-sql: seed={seed} cases={} statements={} errors={} timeouts={} rows={} seconds={seconds:.1} statements/s={:.1} rss_mib={} peak_rss_mib={}",
        totals.cases,
        totals.statements,
        totals.errors,
        totals.timeouts,
        totals.rows,
        totals.statements as f64 / seconds.max(0.001),
        rss_mib(),
        proc_status_mib("VmHWM:"),
    );
    if totals.hungriest.0 >= HUNGRY_MIB {
        println!(
            "fuzz-sql: hungriest statement raised the peak memory by {} MiB (its case: {}): {}",
            totals.hungriest.0,
            work_dir.join(HUNGRIEST_CASE).display(),
            totals.hungriest.1
        );
    }
    if totals.slowest.0 > STATEMENT_TIMEOUT * 3 {
        // Not a failure: a statement the progress handler stopped late.
        println!(
            "fuzz-sql: slowest statement {:.1} s (deadline {} s; its case: {}): {}",
            totals.slowest.0.as_secs_f64(),
            STATEMENT_TIMEOUT.as_secs(),
            work_dir.join(SLOWEST_CASE).display(),
            totals.slowest.1
        );
    }
    remove_case_files(&work_dir);
    Ok(())
}

/// Opens a case's database as the node opens a full-access tenant's connection
/// (`Database::open_connection`), with a size limit; `storage`: as with object storage.
fn open_case(
    db: &Path,
    settings: &SandboxSettings,
    shutdown: &Arc<AtomicBool>,
    storage: bool,
) -> Result<SandboxedConnection> {
    sandbox::open(
        db,
        sandbox::IfMissing::Create,
        Mode::ReadWrite,
        settings,
        shutdown,
        None,
        |conn| {
            configure_connection(conn, settings.page_cache_bytes, storage)?;
            let pages = (SIZE_LIMIT_BYTES / atoll_data::database::PAGE_SIZE).max(1);
            conn.pragma_update(None, "max_page_count", pages)?;
            Ok(())
        },
    )
    .context("opening the case's database in the sandbox")
}

fn remove_case_files(work_dir: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(work_dir.join(format!("case.db{suffix}")));
    }
}

/// `--replay`: the statements of `file`, one by one, with their outcomes.
fn replay(file: &Path, work_dir: &Path, statement_memory: u64) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let storage = text.contains("wal_autocheckpoint = 0");
    let settings = SandboxSettings {
        statement_timeout: STATEMENT_TIMEOUT,
        max_statement_memory: statement_memory,
        ..SandboxSettings::default()
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    remove_case_files(work_dir);
    let sandboxed = open_case(&work_dir.join("case.db"), &settings, &shutdown, storage)?;
    let mut count = 0;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("--") {
            continue;
        }
        count += 1;
        let sql: String = line.chars().take(200).collect();
        println!("{count}: {sql}");
        let _ = std::io::stdout().flush();
        let statement = Statement {
            sql: line.trim_end_matches(';').to_string(),
            vacuum: line.trim_end_matches(';').eq_ignore_ascii_case("VACUUM"),
            changes_schema: false,
            // As the node: pragmas and EXPLAIN are prepared afresh.
            pragma: ["PRAGMA", "EXPLAIN"]
                .iter()
                .any(|kind| line.to_ascii_uppercase().starts_with(kind)),
        };
        let mut shown = Vec::new();
        let started = Instant::now();
        let outcome = run_statement(&sandboxed, &statement, |row| {
            if shown.len() < 3 {
                let values: Vec<String> = (0..row.as_ref().column_count())
                    .map(|i| match row.get_ref(i) {
                        Ok(value) => {
                            let text = format!("{value:?}");
                            text.chars().take(80).collect()
                        }
                        Err(e) => format!("<{e}>"),
                    })
                    .collect();
                shown.push(values.join(" | "));
            }
        });
        for row in &shown {
            println!("   row: {row}");
        }
        match outcome {
            Outcome::Rows(rows) => println!("   ok, {rows} rows"),
            Outcome::Error(message) => println!("   error: {message}"),
            Outcome::Timeout => println!("   interrupted at its deadline"),
        }
        println!(
            "   ({:.3} s, RSS {} MiB)",
            started.elapsed().as_secs_f64(),
            rss_mib()
        );
    }
    drop(sandboxed);
    remove_case_files(work_dir);
    println!(
        "fuzz-sql: replayed {count} statements of {}: the process survived",
        file.display()
    );
    Ok(())
}

/// The process's resident memory, MiB (0 where `/proc` is not there): what a leak in the
/// engine would show (every case's connection is closed, so it should stay flat).
fn rss_mib() -> u64 {
    proc_status_mib("VmRSS:")
}

/// A `/proc/self/status` figure in kB, as MiB.
fn proc_status_mib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib / 1024)
}

/// The engine's functions, read on a trusted connection.
fn list_functions(
    work_dir: &Path,
    settings: &SandboxSettings,
    shutdown: &Arc<AtomicBool>,
) -> Result<Vec<Function>> {
    let path = work_dir.join("functions.db");
    let sandboxed = sandbox::open(
        &path,
        sandbox::IfMissing::Create,
        Mode::ReadWrite,
        settings,
        shutdown,
        None,
        |_| Ok(()),
    )?;
    let functions = sandboxed
        .control
        .trusted(|| -> rusqlite::Result<Vec<Function>> {
            let mut stmt = sandboxed.conn.prepare(
            "SELECT DISTINCT name, narg, type FROM pragma_function_list ORDER BY name, narg, type",
        )?;
            let rows = stmt.query_map([], |row| {
                let kind: String = row.get(2)?;
                Ok(Function {
                    name: row.get(0)?,
                    narg: row.get(1)?,
                    kind: kind.chars().next().unwrap_or('s'),
                })
            })?;
            rows.collect()
        })?;
    drop(sandboxed);
    let _ = std::fs::remove_file(&path);
    anyhow::ensure!(
        !functions.is_empty(),
        "PRAGMA function_list listed no function"
    );
    Ok(functions)
}

/// Ends the process when one statement outlives its deadline by [`HANG_AFTER`].
struct Watchdog {
    base: Instant,
    /// When the running statement started (ms after `base`, plus one); 0 when none runs.
    running_since: Arc<AtomicU64>,
}

impl Watchdog {
    fn start(case_file: PathBuf) -> Watchdog {
        let base = Instant::now();
        let running_since = Arc::new(AtomicU64::new(0));
        let watched = Arc::clone(&running_since);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let since = watched.load(Ordering::Relaxed);
            if since == 0 {
                continue;
            }
            let running = base
                .elapsed()
                .saturating_sub(Duration::from_millis(since - 1));
            if running > HANG_AFTER {
                eprintln!(
                    "fuzz-sql: HANG: a statement has run for {} s despite its {} s deadline (the progress handler did not stop it); it is the last line of {}",
                    running.as_secs(),
                    STATEMENT_TIMEOUT.as_secs(),
                    case_file.display()
                );
                std::process::exit(HANG_EXIT_CODE);
            }
        });
        Watchdog {
            base,
            running_since,
        }
    }

    fn begin(&self) {
        let now = self.base.elapsed().as_millis() as u64 + 1;
        self.running_since.store(now, Ordering::Relaxed);
    }

    fn end(&self) {
        self.running_since.store(0, Ordering::Relaxed);
    }
}

struct Case<'a> {
    seed: u64,
    number: u64,
    work_dir: &'a Path,
    case_file: &'a Path,
    settings: &'a SandboxSettings,
    shutdown: &'a Arc<AtomicBool>,
    functions: Arc<[Function]>,
    watchdog: &'a Watchdog,
    print_errors: bool,
}

/// What one statement did.
enum Outcome {
    Rows(u64),
    Error(String),
    Timeout,
}

impl Case<'_> {
    fn run(self, totals: &mut Totals, deadline: Instant) -> Result<()> {
        let db = self.work_dir.join("case.db");
        remove_case_files(self.work_dir);
        // The case's own generator: case n of a seed is the same whatever ran before it.
        let case_seed = self
            .seed
            .wrapping_add(self.number.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut rng = StdRng::seed_from_u64(case_seed);
        // Half the cases as a node with object storage opens them (only the shipper
        // checkpoints), half without.
        let storage = rng.gen_bool(0.5);
        let mut log = File::create(self.case_file)
            .with_context(|| format!("creating {}", self.case_file.display()))?;
        log.write_all(
            format!(
                "-- atoll fuzz-sql --seed {}: case {} ({})\n",
                self.seed,
                self.number,
                if storage {
                    "object storage: wal_autocheckpoint = 0"
                } else {
                    "no object storage"
                }
            )
            .as_bytes(),
        )?;
        let sandboxed = open_case(&db, self.settings, self.shutdown, storage)?;
        let mut generator = Generator::new(rng, Arc::clone(&self.functions));
        let count = generator.statements_per_case();
        let setup = generator.rng().gen_range(2..6);
        let mut history: Vec<Statement> = Vec::new();
        let wal = self.work_dir.join("case.db-wal");
        for n in 0..count {
            if Instant::now() >= deadline {
                break;
            }
            // Now and then an earlier statement again: cached statements run after the
            // schema they were prepared for has changed.
            let statement = if n < setup {
                generator.setup_statement()
            } else if !history.is_empty() && generator_chance(&mut generator, 0.05) {
                history[generator_index(&mut generator, history.len())].clone()
            } else {
                generator.statement()
            };
            self.execute(&sandboxed, &mut log, &statement, totals)?;
            if statement.changes_schema {
                let schema = Statement {
                    sql: SCHEMA_QUERY.to_string(),
                    vacuum: false,
                    changes_schema: false,
                    pragma: false,
                };
                let rows = self.read_schema(&sandboxed, &mut log, &schema, totals)?;
                generator.set_schema(grammar::schema_from_rows(rows));
            }
            history.push(statement);
            if std::fs::metadata(&wal).is_ok_and(|m| m.len() > MAX_WAL_BYTES) {
                break;
            }
        }
        drop(sandboxed);
        Ok(())
    }

    /// Logs `statement` and runs it as the node does: prepared (cached unless a pragma or
    /// an EXPLAIN), the deadline armed, every row and value read.
    fn execute(
        &self,
        sandboxed: &SandboxedConnection,
        log: &mut File,
        statement: &Statement,
        totals: &mut Totals,
    ) -> Result<()> {
        log.write_all(format!("{};\n", statement.sql).as_bytes())
            .context("writing the running case")?;
        totals.statements += 1;
        self.watchdog.begin();
        let started = Instant::now();
        let outcome = run_statement(sandboxed, statement, |_| {});
        let took = started.elapsed();
        self.watchdog.end();
        // The process's peak memory only grows: a statement that raised it by much is one
        // that makes the engine hold that much (a tenant could do it on a node).
        let peak = proc_status_mib("VmHWM:");
        let grew = peak.saturating_sub(totals.peak_mib);
        totals.peak_mib = totals.peak_mib.max(peak);
        if grew > totals.hungriest.0 {
            let sql: String = statement.sql.chars().take(300).collect();
            totals.hungriest = (grew, sql);
            if grew >= HUNGRY_MIB {
                let _ = std::fs::copy(self.case_file, self.work_dir.join(HUNGRIEST_CASE));
            }
        }
        if took > totals.slowest.0 {
            let sql: String = statement.sql.chars().take(300).collect();
            totals.slowest = (took, sql);
            if took > STATEMENT_TIMEOUT * 3 {
                // The case so far, to replay: the statement ran far past its deadline.
                let _ = std::fs::copy(self.case_file, self.work_dir.join(SLOWEST_CASE));
            }
        }
        match outcome {
            Outcome::Rows(rows) => totals.rows += rows,
            Outcome::Error(message) => {
                totals.errors += 1;
                if self.print_errors {
                    let sql: String = statement.sql.chars().take(160).collect();
                    eprintln!("error: {message}\n    in: {sql}");
                }
            }
            Outcome::Timeout => {
                totals.errors += 1;
                totals.timeouts += 1;
            }
        }
        Ok(())
    }

    /// Runs [`SCHEMA_QUERY`] (logged, as every statement) and answers its rows.
    fn read_schema(
        &self,
        sandboxed: &SandboxedConnection,
        log: &mut File,
        statement: &Statement,
        totals: &mut Totals,
    ) -> Result<Vec<SchemaRow>> {
        log.write_all(format!("{};\n", statement.sql).as_bytes())
            .context("writing the running case")?;
        totals.statements += 1;
        let mut rows = Vec::new();
        self.watchdog.begin();
        let outcome = run_statement(sandboxed, statement, |row| {
            let text = |i: usize| -> Option<String> {
                match row.get_ref(i).ok()? {
                    rusqlite::types::ValueRef::Text(t) => {
                        Some(String::from_utf8_lossy(t).into_owned())
                    }
                    _ => None,
                }
            };
            rows.push(SchemaRow {
                database: text(0).unwrap_or_default(),
                kind: text(1).unwrap_or_default(),
                name: text(2).unwrap_or_default(),
                table: text(3).unwrap_or_default(),
                sql: text(4),
                column: text(5),
                column_type: text(6),
                hidden: row.get(7).unwrap_or(0),
            });
        });
        self.watchdog.end();
        match outcome {
            Outcome::Rows(n) => totals.rows += n,
            // The schema of a case that just broke it: work from what was known.
            Outcome::Error(_) | Outcome::Timeout => {
                totals.errors += 1;
                rows.clear();
            }
        }
        Ok(rows)
    }
}

fn generator_chance(generator: &mut Generator, p: f64) -> bool {
    generator.rng().gen_bool(p)
}

fn generator_index(generator: &mut Generator, len: usize) -> usize {
    generator.rng().gen_range(0..len)
}

/// Prepares, arms and steps `statement` to its end, reading every column of every row
/// (and handing each row to `each`).
fn run_statement(
    sandboxed: &SandboxedConnection,
    statement: &Statement,
    mut each: impl FnMut(&rusqlite::Row<'_>),
) -> Outcome {
    let conn = &sandboxed.conn;
    let control = &sandboxed.control;
    control.take_refusal();
    let prepared = if statement.pragma {
        conn.prepare(&statement.sql).map(Prepared::Once)
    } else {
        conn.prepare_cached(&statement.sql).map(Prepared::Cached)
    };
    let mut prepared = match prepared {
        Ok(p) => p,
        Err(e) => return Outcome::Error(e.to_string()),
    };
    control.arm(STATEMENT_TIMEOUT, None);
    let mut step = |prepared: &mut Prepared<'_>| -> rusqlite::Result<u64> {
        let stmt = prepared.stmt();
        let mut rows = stmt.raw_query();
        let mut count = 0u64;
        let mut described = false;
        while let Some(row) = rows.next()? {
            let columns = row.as_ref().column_count();
            for i in 0..columns {
                // Every value as a client reads it: text and blobs copied out.
                match row.get_ref(i)? {
                    rusqlite::types::ValueRef::Text(t) => {
                        std::hint::black_box(t.len());
                    }
                    rusqlite::types::ValueRef::Blob(b) => {
                        std::hint::black_box(b.len());
                    }
                    other => {
                        std::hint::black_box(other);
                    }
                }
            }
            if !described {
                // Names and declared types, read after the first step as the node does.
                std::hint::black_box(row.as_ref().columns().len());
                described = true;
            }
            each(row);
            count += 1;
        }
        Ok(count)
    };
    let result = if statement.vacuum {
        control.vacuum(|| step(&mut prepared))
    } else {
        step(&mut prepared)
    };
    let interrupted = control.disarm();
    if statement.pragma {
        // As the node: a pragma may change what cached statements were compiled under.
        drop(prepared);
        conn.flush_prepared_statement_cache();
    }
    match result {
        Ok(rows) => Outcome::Rows(rows),
        Err(_) if interrupted.is_some() => Outcome::Timeout,
        Err(e) => Outcome::Error(e.to_string()),
    }
}

enum Prepared<'c> {
    Once(rusqlite::Statement<'c>),
    Cached(rusqlite::CachedStatement<'c>),
}

impl<'c> Prepared<'c> {
    fn stmt(&mut self) -> &mut rusqlite::Statement<'c> {
        match self {
            Prepared::Once(stmt) => stmt,
            Prepared::Cached(stmt) => stmt,
        }
    }
}
