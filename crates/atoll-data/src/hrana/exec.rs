//! Running Hrana statements, batches and sequences on a connection under Atoll's rules:
//! parameter binding, the database's block flags, the caller's write and ATTACH rights,
//! and the size limit. Everything here is synchronous and runs on blocking threads.
//!
//! Results come in two layers: `Err(HranaError)` aborts the whole request (protocol
//! errors, permission refusals), while an `Outcome` that is `Err(proto::Error)` is the
//! statement's own failure, reported to the client as a Hrana error.

use super::statement::{quote_literal, AttachRequest, StatementKind};
use super::values::{hrana_value, response_size, SqlArg};
use super::{HranaError, SqlStore, Version};
use crate::auth::DbAccess;
use crate::database::{Database, PAGE_SIZE};
use crate::error::DataError;
use crate::node::Node;
use crate::sandbox::{CancelToken, Control, Interruption, Mode, SandboxedConnection};
use crate::write_lock::WaitScope;
use atoll_types::node::DatabaseConfig;
use fallible_streaming_iterator::FallibleStreamingIterator;
use libsql_hrana::proto;
use rusqlite::{CachedStatement, Connection, ErrorCode, Statement, StatementStatus};
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A statement's own result: its value, or the Hrana error to report for it.
pub(crate) type Outcome<T> = Result<T, proto::Error>;

/// Rows a single request may return (beyond it, `RESPONSE_TOO_LARGE`), so one query
/// cannot exhaust the node's memory. Cursors stream and are not limited.
const MAX_RESPONSE_BYTES: usize = 10 * 1024 * 1024;

/// SQLite's own ceiling for `max_page_count`, restored when a database loses its limit.
const UNLIMITED_PAGES: u64 = 4_294_967_294;

/// Who runs statements on which database, in which protocol version.
#[derive(Clone)]
pub(crate) struct Caller {
    pub node: Arc<Node>,
    pub db: Arc<Database>,
    pub access: DbAccess,
    /// The customer's key of an encrypted database, checked against its verifier.
    pub key: Option<Arc<atoll_storage::encryption::EncryptionKey>>,
    pub version: Version,
    /// Raised when the request's client goes away: its running statement is interrupted.
    pub cancel: Option<CancelToken>,
}

impl Caller {
    /// The sandbox mode of this caller's connections.
    pub(crate) fn mode(&self) -> Mode {
        if self.access.write {
            Mode::ReadWrite
        } else {
            Mode::ReadOnly
        }
    }
}

/// One program run (one stream request) on a connection, under the database
/// configuration read when it started.
pub(crate) struct Run<'a> {
    caller: &'a Caller,
    client: &'a ClientConnection,
    conn: &'a Connection,
    control: &'a Control,
    config: Arc<DatabaseConfig>,
    response_budget: Cell<usize>,
    statement_timeout: Duration,
    /// Writers on this thread wait for this database's lock, and are seen waiting.
    _waiting: WaitScope,
    /// How long a statement may wait for another connection's lock.
    busy_wait: Duration,
}

/// What a statement did, besides its rows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StmtStats {
    pub affected_row_count: u64,
    pub last_insert_rowid: Option<i64>,
    pub rows_read: u64,
    pub rows_written: u64,
    pub query_duration_ms: f64,
}

/// Receives the columns and rows of a statement, so one executor serves collected
/// results and streamed cursors alike. An error stops the statement and becomes its error.
pub(crate) trait RowSink {
    fn columns(&mut self, cols: Vec<proto::Col>) -> Outcome<()>;
    fn row(&mut self, values: Vec<proto::Value>) -> Outcome<()>;
}

/// Receives a batch step by step.
pub(crate) trait BatchSink: RowSink {
    fn begin_step(&mut self, step: usize);
    fn end_step(&mut self, step: usize, outcome: Outcome<StmtStats>);
    fn skip_step(&mut self, step: usize);
    /// Whether nobody listens any more (the remaining steps are not run).
    fn is_closed(&self) -> bool {
        false
    }
}

/// A prepared statement that passed the permission checks.
struct Admitted<'a> {
    stmt: Prepared<'a>,
    kind: StatementKind,
}

/// A prepared statement: from the connection's statement cache (a single-statement text,
/// the common case: clients send the same few texts again and again) or prepared for this
/// run only (one statement of a multi-statement text, or a rewritten ATTACH).
pub(crate) enum Prepared<'a> {
    Cached(CachedStatement<'a>),
    Once(Statement<'a>),
}

impl<'a> std::ops::Deref for Prepared<'a> {
    type Target = Statement<'a>;

    fn deref(&self) -> &Statement<'a> {
        match self {
            Prepared::Cached(stmt) => stmt,
            Prepared::Once(stmt) => stmt,
        }
    }
}

impl<'a> std::ops::DerefMut for Prepared<'a> {
    fn deref_mut(&mut self) -> &mut Statement<'a> {
        match self {
            Prepared::Cached(stmt) => stmt,
            Prepared::Once(stmt) => stmt,
        }
    }
}

/// Prepared statements kept per open connection. A pooled connection keeps them while it
/// waits for its next client, so a hot database's statements are compiled once.
pub const STATEMENT_CACHE_CAPACITY: usize = 32;

impl<'a> Run<'a> {
    /// Starts a run: reads the configuration and applies its size limit, which a previous
    /// request (or the database's new configuration) may have changed.
    pub(crate) fn start(
        caller: &'a Caller,
        client: &'a ClientConnection,
    ) -> Result<Run<'a>, HranaError> {
        Run::start_waiting(caller, client, caller.node.sandbox().busy_timeout)
    }

    /// As [`Run::start`], waiting at most `busy_wait` for a lock held by another
    /// connection (zero: fail at once with `SQLITE_BUSY`).
    pub(crate) fn start_waiting(
        caller: &'a Caller,
        client: &'a ClientConnection,
        busy_wait: Duration,
    ) -> Result<Run<'a>, HranaError> {
        let conn = &client.sandboxed.conn;
        let control = &*client.sandboxed.control;
        let config = caller.db.config();
        apply_page_limit(&client.sandboxed, &config)?;
        let settings = caller.node.sandbox();
        Ok(Run {
            caller,
            client,
            conn,
            control,
            config,
            response_budget: Cell::new(MAX_RESPONSE_BYTES),
            statement_timeout: settings.statement_timeout,
            _waiting: WaitScope::enter(caller.db.write_lock(), busy_wait),
            busy_wait,
        })
    }

    /// `execute`: one statement with its rows.
    pub(crate) fn execute(
        &self,
        stmt: &proto::Stmt,
        sql: &str,
    ) -> Result<Outcome<proto::StmtResult>, HranaError> {
        let mut collector = ResultCollector::new(&self.response_budget);
        let commits_before = self.commit_count();
        let outcome = self.run_statement(sql, stmt, &mut collector)?;
        Ok(outcome.map(|stats| {
            let mut result = collector.finish(stats);
            result.replication_index = self.replication_index_since(commits_before);
            result
        }))
    }

    /// Commits of the database so far, any connection's (`None`: it has no log).
    fn commit_count(&self) -> Option<u64> {
        self.caller.db.log().map(|log| log.commit_count())
    }

    /// The `replication_index` of a result: the frame number of the database's last
    /// commit when something committed since `before` (the statement's own commit, or a
    /// later one: the index says "at least this state"). `None` for a statement that
    /// committed nothing, which spares reads the look at the WAL index; a replica's reads
    /// carry the frame the replica applied (`hrana::http`).
    fn replication_index_since(&self, before: Option<u64>) -> Option<u64> {
        let log = self.caller.db.log()?;
        if Some(log.commit_count()) == before {
            return None;
        }
        log.committed_head()
    }

    /// `batch`: steps with conditions, each result or error in its slot.
    pub(crate) fn batch(
        &self,
        batch: &proto::Batch,
        sqls: &SqlStore,
    ) -> Result<proto::BatchResult, HranaError> {
        let mut collector = BatchCollector::new(&self.response_budget, batch.steps.len());
        let commits_before = self.commit_count();
        self.run_batch(batch, sqls, &mut collector)?;
        let mut result = collector.finish();
        result.replication_index = self.replication_index_since(commits_before);
        Ok(result)
    }

    /// Runs a batch into any sink (a collected result or a cursor).
    pub(crate) fn run_batch(
        &self,
        batch: &proto::Batch,
        sqls: &SqlStore,
        sink: &mut impl BatchSink,
    ) -> Result<(), HranaError> {
        let texts = self.batch_texts(batch, sqls)?;
        let mut succeeded = Vec::with_capacity(batch.steps.len());
        for (index, (step, sql)) in batch.steps.iter().zip(texts).enumerate() {
            if sink.is_closed() {
                break;
            }
            let runs = match &step.condition {
                Some(condition) => self.evaluate(condition, &succeeded),
                None => true,
            };
            if !runs {
                sink.skip_step(index);
                succeeded.push(false);
                continue;
            }
            sink.begin_step(index);
            let outcome = self.run_statement(sql, &step.stmt, sink)?;
            succeeded.push(outcome.is_ok());
            sink.end_step(index, outcome);
        }
        Ok(())
    }

    /// The SQL text of each step, after checking the protocol rules of the batch (known
    /// SQL ids, conditions that only look back).
    pub(crate) fn batch_texts<'b>(
        &self,
        batch: &'b proto::Batch,
        sqls: &'b SqlStore,
    ) -> Result<Vec<&'b str>, HranaError> {
        batch
            .steps
            .iter()
            .enumerate()
            .map(|(index, step)| {
                if let Some(condition) = &step.condition {
                    check_condition(condition, index)?;
                }
                sqls.resolve(
                    step.stmt.sql.as_deref(),
                    step.stmt.sql_id,
                    self.caller.version,
                )
            })
            .collect()
    }

    /// `sequence`: every statement of the text in turn, without arguments or rows,
    /// stopping at the first failure.
    pub(crate) fn sequence(&self, sql: &str) -> Result<Outcome<()>, HranaError> {
        let _running = match self.journal(sql) {
            Ok(running) => running,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let commits_before = self.sync_log().map(|log| log.commit_count());
        let outcome = self.sequence_inner(sql)?;
        Ok(outcome.and_then(|()| self.durable_since(commits_before)))
    }

    /// The database's log when its commits are acknowledged only once stored (`sync`).
    fn sync_log(&self) -> Option<&Arc<atoll_storage::shipper::DatabaseLog>> {
        let storage = self.caller.node.storage()?;
        if storage.durability(&self.config) != atoll_types::node::Durability::Sync {
            return None;
        }
        self.caller.db.log()
    }

    /// In `sync` mode, after a statement that committed (an autocommit write, a `COMMIT`):
    /// waits until object storage has the commit, else fails the statement with
    /// `DURABILITY_UNAVAILABLE` (the commit is in the node's WAL; its outcome is unknown to
    /// the client, as with any failure after a commit was sent).
    fn durable_since(&self, commits_before: Option<u64>) -> Outcome<()> {
        let (Some(before), Some(log)) = (commits_before, self.sync_log()) else {
            return Ok(());
        };
        if log.commit_count() == before {
            return Ok(());
        }
        let timeout = self
            .caller
            .node
            .storage()
            .map_or(Duration::from_secs(10), |s| s.settings.sync_timeout);
        log.wait_durable(timeout)
            .map_err(|e| hrana_error("DURABILITY_UNAVAILABLE", e.to_string()))
    }

    fn sequence_inner(&self, sql: &str) -> Result<Outcome<()>, HranaError> {
        let no_arguments = proto::Stmt::new("", false);
        let mut statements = rusqlite::Batch::new(self.conn, sql);
        loop {
            // Each statement is prepared after the previous one ran: it may use its tables.
            self.control.take_refusal();
            let stmt = match statements.next() {
                Ok(Some(stmt)) => stmt,
                Ok(None) => return Ok(Ok(())),
                Err(e) => return Ok(Err(self.prepare_error(e))),
            };
            let text = stmt.expanded_sql().unwrap_or_default();
            // The authorizer compiled a raw ATTACH to nothing: run the rewritten one, which
            // opens the file the node resolved for the named database, instead.
            let stmt = if StatementKind::of(&text) == StatementKind::Attach {
                match self.prepare_attach(&text)? {
                    Ok(rewritten) => rewritten,
                    Err(error) => return Ok(Err(error)),
                }
            } else {
                Prepared::Once(stmt)
            };
            if let Err(error) = self.run_prepared(stmt, &text, &no_arguments, &mut DiscardRows)? {
                return Ok(Err(error));
            }
        }
    }

    /// `describe`: parameters and columns of a statement, without running it.
    pub(crate) fn describe(&self, sql: &str) -> Outcome<proto::DescribeResult> {
        // Never from the statement cache: a cached statement describes the columns of
        // the schema it was compiled under until it runs again.
        let _running = self.journal(sql)?;
        let (stmt, text) = self.prepare_uncached(sql)?;
        let kind = StatementKind::of(&text);
        Ok(proto::DescribeResult {
            params: (1..=stmt.parameter_count())
                .map(|index| proto::DescribeParam {
                    name: stmt.parameter_name(index).map(str::to_string),
                })
                .collect(),
            cols: stmt
                .columns()
                .iter()
                .map(|col| proto::DescribeCol {
                    name: col.name().to_string(),
                    decltype: col.decl_type().map(str::to_string),
                })
                .collect(),
            is_explain: kind == StatementKind::Explain,
            is_readonly: stmt.readonly(),
        })
    }

    /// Refuses the whole request if any statement of `sql` is not allowed to this caller,
    /// before anything runs. Statements that do not prepare yet (they may need tables an
    /// earlier statement creates) are checked again when they run.
    pub(crate) fn authorize(&self, sql: &str) -> Result<(), HranaError> {
        if StatementKind::of(sql) == StatementKind::Attach {
            // Its permission checks refuse the whole request; a statement-level failure
            // is reported when it runs.
            if let Ok(stmt) = self.prepare_attach(sql)? {
                let _ = self.admit(stmt, sql)?;
            }
            return Ok(());
        }
        if let Some(stmt) = self.prepare_single_cached(sql) {
            // Back to the cache when dropped, for the run that follows.
            let _ = self.admit(Prepared::Cached(stmt), sql)?;
            return Ok(());
        }
        let mut statements = rusqlite::Batch::new(self.conn, sql);
        while let Ok(Some(stmt)) = statements.next() {
            // A statement-level failure here is reported when the statement runs.
            let text = stmt.expanded_sql().unwrap_or_default();
            if StatementKind::of(&text) == StatementKind::Attach {
                // Its permission checks refuse the whole request.
                if let Ok(rewritten) = self.prepare_attach(&text)? {
                    let _ = self.admit(rewritten, &text)?;
                }
                continue;
            }
            let _ = self.admit(Prepared::Once(stmt), &text)?;
        }
        Ok(())
    }

    /// [`Run::authorize`] for every step of a batch.
    pub(crate) fn authorize_batch(
        &self,
        batch: &proto::Batch,
        sqls: &SqlStore,
    ) -> Result<(), HranaError> {
        for sql in self.batch_texts(batch, sqls)? {
            self.authorize(sql)?;
        }
        Ok(())
    }

    pub(crate) fn is_autocommit(&self) -> bool {
        self.conn.is_autocommit()
    }

    fn run_statement(
        &self,
        sql: &str,
        stmt: &proto::Stmt,
        sink: &mut dyn RowSink,
    ) -> Result<Outcome<StmtStats>, HranaError> {
        if !stmt.args.is_empty() && !stmt.named_args.is_empty() {
            return Ok(Err(hrana_error(
                "ARGS_BOTH_POSITIONAL_AND_NAMED",
                "Specifying both positional and named arguments is not supported",
            )));
        }
        // From preparing on: the engine's parser runs tenant text too.
        let _running = match self.journal(sql) {
            Ok(running) => running,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let commits_before = self.sync_log().map(|log| log.commit_count());
        let outcome = match self.prepare_one(sql)? {
            Ok((prepared, text)) => self.run_prepared(prepared, &text, stmt, sink)?,
            Err(error) => Err(error),
        };
        if self.conn.is_autocommit() {
            self.caller.db.write_lock().note_released();
        }
        let outcome = outcome.and_then(|stats| self.durable_since(commits_before).map(|()| stats));
        if let Ok(stats) = &outcome {
            // The statement's text, not its arguments: statistics must not collect data.
            self.caller.node.meters.record_query(
                &self.config.id,
                sql,
                stats.rows_read,
                stats.rows_written,
            );
        }
        Ok(outcome)
    }

    /// Journals `sql` while it is prepared and run (`crate::crash_journal`), or refuses it
    /// when it crashed the node before.
    fn journal(&self, sql: &str) -> Outcome<crate::crash_journal::Running<'a>> {
        let journal = self.caller.node.crash_journal();
        let running = if self.config.encryption.is_some() {
            journal.running_sealed(&self.config.id, sql)
        } else {
            journal.running(&self.config.id, sql)
        };
        running.map_err(|message| hrana_error("STATEMENT_REFUSED", message))
    }

    /// Prepares the only statement of `sql`, with its text.
    fn prepare_one<'s>(
        &self,
        sql: &'s str,
    ) -> Result<Outcome<(Prepared<'a>, Cow<'s, str>)>, HranaError> {
        if StatementKind::of(sql) == StatementKind::Attach {
            return Ok(self
                .prepare_attach(sql)?
                .map(|stmt| (stmt, Cow::Borrowed(sql))));
        }
        if let Some(stmt) = self.prepare_single_cached(sql) {
            return Ok(Ok((Prepared::Cached(stmt), Cow::Borrowed(sql))));
        }
        Ok(self.prepare_uncached(sql))
    }

    /// Prepares the only statement of `sql` outside the statement cache. The general
    /// path, which also finds the exact error: no statement, more than one, or the
    /// engine's own.
    fn prepare_uncached<'s>(&self, sql: &'s str) -> Outcome<(Prepared<'a>, Cow<'s, str>)> {
        self.control.take_refusal();
        let mut statements = rusqlite::Batch::new(self.conn, sql);
        let first = match statements.next() {
            Ok(Some(stmt)) => stmt,
            Ok(None) => {
                return Err(hrana_error(
                    "SQL_NO_STATEMENT",
                    "SQL string does not contain any statement",
                ))
            }
            Err(e) => return Err(self.prepare_error(e)),
        };
        // Anything but comments after the first statement (even text that fails to
        // prepare) is a second statement.
        if !matches!(statements.next(), Ok(None)) {
            return Err(hrana_error(
                "SQL_MANY_STATEMENTS",
                "SQL string contains more than one statement",
            ));
        }
        let text = first.expanded_sql().unwrap_or_default();
        Ok((Prepared::Once(first), Cow::Owned(text)))
    }

    /// The statement of `sql` from the connection's cache, when `sql` is certainly one
    /// statement: no `;` but a final one (SQLite ends a statement only at a `;` or at the
    /// end of the text), and not starting with a comment (a text of comments only holds no
    /// statement). Anything else, or a statement that fails to prepare, goes the general
    /// way, which says exactly what is wrong.
    fn prepare_single_cached(&self, sql: &str) -> Option<CachedStatement<'a>> {
        let trimmed = sql.trim();
        let body = trimmed.strip_suffix(';').unwrap_or(trimmed);
        if body.is_empty()
            || body.contains(';')
            || trimmed.starts_with("--")
            || trimmed.starts_with("/*")
        {
            return None;
        }
        // A pragma does its work when it is *prepared* (flag pragmas such as
        // `foreign_keys` set the flag while compiling): a cached one would do nothing when
        // it runs, so pragmas are always prepared afresh. An ATTACH is rewritten first. An
        // EXPLAIN is never cached either: the engine lists a cached EXPLAIN's program again
        // after the schema it names changed, reading a dropped table freed under it (a
        // SIGSEGV the SQL fuzzer found: `EXPLAIN INSERT INTO t …; DROP TABLE t;` and the
        // EXPLAIN again).
        if matches!(
            StatementKind::of(trimmed),
            StatementKind::Pragma | StatementKind::Attach | StatementKind::Explain
        ) {
            return None;
        }
        self.control.take_refusal();
        self.conn.prepare_cached(trimmed).ok()
    }

    fn run_prepared(
        &self,
        stmt: Prepared<'a>,
        text: &str,
        request: &proto::Stmt,
        sink: &mut dyn RowSink,
    ) -> Result<Outcome<StmtStats>, HranaError> {
        if self.client.timed_out.take() {
            return Ok(Err(hrana_error(
                "TRANSACTION_TIMEOUT",
                format!(
                    "Transaction timed out: it held the write lock for more than {} while another writer waited, and was rolled back",
                    crate::sandbox::human_duration(self.caller.node.sandbox().transaction_timeout)
                ),
            )));
        }
        let mut admitted = match self.admit(stmt, text)? {
            Ok(admitted) => admitted,
            Err(error) => return Ok(Err(error)),
        };
        if self.is_blocked(&admitted) {
            return Ok(Err(hrana_error("BLOCKED", self.blocked_message())));
        }
        if let Some(refusal) = self.unshipped_refusal(&admitted) {
            return Ok(Err(refusal));
        }
        if admitted.kind.alters_connection() {
            self.client.altered.set(true);
        }
        if let Err(error) = bind_arguments(&mut admitted.stmt, admitted.kind, request)? {
            return Ok(Err(error));
        }
        // One writer outside a transaction at a time goes to SQLite; the others wait
        // their turn here, holding no snapshot (`WriteLockWatch::take_turn`).
        let _turn = (self.conn.is_autocommit() && writes(admitted.kind, &admitted.stmt))
            .then(|| self.caller.db.write_lock().take_turn(self.busy_wait));
        self.control
            .arm(self.statement_timeout, self.caller.cancel.as_ref());
        let want_rows = request.want_rows.unwrap_or(true);
        let outcome = if admitted.kind == StatementKind::Vacuum {
            self.control
                .vacuum(|| self.step(&mut admitted, want_rows, sink))
        } else {
            self.step(&mut admitted, want_rows, sink)
        };
        let outcome = match (outcome, self.control.disarm()) {
            (Err(error), Some(why)) if error.code == "SQLITE_INTERRUPT" => {
                Err(hrana_error("SQLITE_INTERRUPT", why.message()))
            }
            // The engine's "out of memory" is the statement's budget here, not the node's.
            (Err(error), Some(why @ Interruption::OutOfMemoryBudget(_))) => {
                Err(hrana_error(&error.code, why.message()))
            }
            (outcome, _) => outcome,
        };
        self.client.note_transaction_state();
        if admitted.kind == StatementKind::Pragma {
            // Cached statements were compiled under the settings this pragma may just have
            // changed (SQLite expires them for flag pragmas, not for every pragma): forget
            // them all.
            self.conn.flush_prepared_statement_cache();
        }
        Ok(outcome)
    }

    /// Classifies a statement (`text` is its SQL) and checks the caller may run it; an
    /// ATTACH comes back rewritten to open its target read-only.
    fn admit(&self, stmt: Prepared<'a>, text: &str) -> Result<Outcome<Admitted<'a>>, HranaError> {
        let kind = StatementKind::of(text);
        if kind == StatementKind::VacuumInto {
            // The authorizer refuses its file too; this says why, for the whole request.
            return Err(DataError::Forbidden(
                "VACUUM INTO is not allowed: it would write a file on the server".into(),
            )
            .into());
        }
        if writes(kind, &stmt) && !self.caller.access.write {
            return Err(DataError::Forbidden(format!(
                "Current session doesn't have Write permission to namespace {}",
                self.config.label
            ))
            .into());
        }
        Ok(Ok(Admitted { stmt, kind }))
    }

    /// Prepares `ATTACH '<database name>' AS alias` as an ATTACH of the file of that
    /// database, read-only, once the caller's right to it is checked. The authorizer lets
    /// exactly that file be attached, by exactly this statement.
    fn prepare_attach(&self, sql: &str) -> Result<Outcome<Prepared<'a>>, HranaError> {
        let Some(request) = AttachRequest::parse(sql) else {
            return Ok(Err(hrana_error(
                "SQL_PARSE_ERROR",
                "SQL string could not be parsed: ATTACH takes the form ATTACH DATABASE '<database name>' AS <alias>",
            )));
        };
        let target = match self.attach_target(&request.name)? {
            Ok(target) => target,
            Err(error) => return Ok(Err(error)),
        };
        let uri = read_only_uri(&target);
        let rewritten = format!(
            "ATTACH DATABASE {} AS {}",
            quote_literal(&uri),
            request.alias
        );
        self.control.take_refusal();
        let prepared = self
            .control
            .approve_attach(&uri, || self.conn.prepare(&rewritten));
        Ok(match prepared {
            Ok(stmt) => Ok(Prepared::Once(stmt)),
            Err(e) => Err(self.prepare_error(e)),
        })
    }

    /// The Hrana error of a statement that failed to prepare: the sandbox's reason when
    /// its authorizer refused it.
    fn prepare_error(&self, error: rusqlite::Error) -> proto::Error {
        // Refusals are cleared before every prepare: one that is there now made this
        // prepare fail (SQLite reports some, such as a refused function, as plain
        // errors rather than SQLITE_AUTH).
        match self.control.take_refusal() {
            Some(reason) => hrana_error("SQLITE_AUTH", format!("Not authorized: {reason}")),
            None => sql_input_error(error),
        }
    }

    /// The file of the database `name` (of the same organization) the caller may attach.
    fn attach_target(&self, name: &str) -> Result<Outcome<std::path::PathBuf>, HranaError> {
        let denied = || {
            HranaError::from(DataError::Forbidden(format!(
                "Current session doesn't have AttachRead permission to namespace {name}"
            )))
        };
        // Labels are `<db>-<org>`; the organization part is what follows this
        // database's own name.
        let org = self
            .config
            .label
            .strip_prefix(&format!("{}-", self.config.name))
            .ok_or_else(denied)?;
        let target = self
            .caller
            .node
            .by_label(&format!("{name}-{org}"))
            .ok_or_else(denied)?;
        let target_config = target.config();
        if !self.caller.access.attach.contains(&target_config.id) {
            return Err(denied());
        }
        if !target_config.allow_attach {
            return Err(
                DataError::Forbidden(format!("Namespace `{name}` doesn't allow attach")).into(),
            );
        }
        target.ensure_queryable()?;
        // Attaching must not become a way around the target's own read block.
        if target_config.block_reads {
            return Ok(Err(hrana_error("BLOCKED", "Operation was blocked")));
        }
        std::path::absolute(target.file_path())
            .map(Ok)
            .map_err(|e| DataError::from(e).into())
    }

    /// sqld's text, with the reason when there is one (a quota, rather than a switch).
    fn blocked_message(&self) -> String {
        match &self.config.block_reason {
            Some(reason) => format!("Operation was blocked: {reason}"),
            None => "Operation was blocked".to_string(),
        }
    }

    /// `lag` mode bounds what a lost disk can lose: once a commit has waited longer than
    /// `--max-unshipped` for object storage (unreachable, or far behind), writes are
    /// refused with `DURABILITY_UNAVAILABLE` until it has caught up; reads go on.
    fn unshipped_refusal(&self, admitted: &Admitted<'_>) -> Option<proto::Error> {
        let storage = self.caller.node.storage()?;
        let log = self.caller.db.log()?;
        let bound = storage.settings.max_unshipped;
        if !writes(admitted.kind, &admitted.stmt) || !log.unshipped_longer_than(bound) {
            return None;
        }
        Some(hrana_error(
            "DURABILITY_UNAVAILABLE",
            format!(
                "object storage has not taken this database's commits for over {} s: writes are refused until it has (reads go on)",
                bound.as_secs()
            ),
        ))
    }

    fn is_blocked(&self, admitted: &Admitted<'_>) -> bool {
        if self.config.block_reads {
            !matches!(
                admitted.kind,
                StatementKind::TransactionControl | StatementKind::Attach | StatementKind::Detach
            )
        } else if self.config.block_writes {
            writes(admitted.kind, &admitted.stmt)
        } else {
            false
        }
    }

    fn step(
        &self,
        admitted: &mut Admitted<'a>,
        want_rows: bool,
        sink: &mut dyn RowSink,
    ) -> Outcome<StmtStats> {
        let stmt = &mut admitted.stmt;
        // A cached statement's counters add up over all its runs: zero them so usage
        // counts this run only.
        stmt.reset_status(StatementStatus::RowsRead);
        stmt.reset_status(StatementStatus::RowsWritten);
        let started = Instant::now();
        let first = {
            let mut rows = stmt.raw_query();
            // The columns are read after the first step: a cached statement whose schema
            // changed (ALTER TABLE … ADD) is compiled again by that step, and until then
            // still describes the old columns.
            let first = match rows.next() {
                Ok(row) => row.is_some(),
                Err(error) => {
                    drop(rows);
                    // As sqld, which describes the columns before it steps: a cursor's
                    // `step_begin` comes before the error of a statement that fails as it
                    // runs (the Rust client's `query()` answers, its first `next()` fails).
                    sink.columns(columns_of(stmt))?;
                    return Err(sqlite_error(error));
                }
            };
            // Without a row the finished query has let go of its statement: its columns
            // are read from the statement itself, below.
            if let Some(stmt) = rows.as_ref().filter(|_| first) {
                let column_count = stmt.column_count();
                sink.columns(columns_of(stmt))?;
                let mut row = rows.get();
                while let Some(current) = row {
                    if want_rows {
                        let values = (0..column_count)
                            .map(|index| {
                                current
                                    .get_ref(index)
                                    .map_or(proto::Value::Null, hrana_value)
                            })
                            .collect();
                        sink.row(values)?;
                    }
                    row = rows.next().map_err(sqlite_error)?;
                }
            }
            first
        };
        if !first {
            // An empty result still names its columns (clients read a description, or a
            // row's shape, from it); the step above compiled the statement again if its
            // schema had changed, so they are the current ones.
            sink.columns(columns_of(stmt))?;
        }
        let query_duration_ms = started.elapsed().as_micros() as f64 / 1000.0;
        let counter = |status| u64::try_from(stmt.get_status(status)).unwrap_or(0);
        // Every statement that ran is metered, whichever protocol brought it.
        self.caller.node.meters.record_statement(
            &self.config.id,
            counter(StatementStatus::RowsRead),
            counter(StatementStatus::RowsWritten),
        );
        Ok(StmtStats {
            affected_row_count: if admitted.kind.counts_changes() {
                self.conn.changes()
            } else {
                0
            },
            last_insert_rowid: (admitted.kind == StatementKind::Insert)
                .then(|| self.conn.last_insert_rowid()),
            rows_read: counter(StatementStatus::RowsRead),
            rows_written: counter(StatementStatus::RowsWritten),
            query_duration_ms,
        })
    }

    fn evaluate(&self, condition: &proto::BatchCond, succeeded: &[bool]) -> bool {
        let step_succeeded = |step: u32| succeeded.get(step as usize).copied().unwrap_or(false);
        match condition {
            proto::BatchCond::Ok { step } => step_succeeded(*step),
            // As in sqld: a skipped step counts as failed.
            proto::BatchCond::Error { step } => !step_succeeded(*step),
            proto::BatchCond::Not { cond } => !self.evaluate(cond, succeeded),
            proto::BatchCond::And(list) => list.conds.iter().all(|c| self.evaluate(c, succeeded)),
            proto::BatchCond::Or(list) => list.conds.iter().any(|c| self.evaluate(c, succeeded)),
            proto::BatchCond::IsAutocommit {} => self.conn.is_autocommit(),
            proto::BatchCond::None => false,
        }
    }
}

/// Whether running the statement may change the database. Transaction control, ATTACH and
/// EXPLAIN never do, whatever SQLite says (`BEGIN IMMEDIATE` counts as a write for it).
fn writes(kind: StatementKind, stmt: &Statement<'_>) -> bool {
    !kind.is_always_read() && !stmt.readonly()
}

/// `is_autocommit` is taken on every protocol version, though sqld takes it from Hrana 3
/// on only: Turso's sync clients (`@tursodatabase/sync`) push their changes as a
/// `/v2/pipeline` batch whose steps run on `not is_autocommit`, which Turso's servers
/// accept (docs/DATA-PLANE.md, "Turso Sync").
fn check_condition(condition: &proto::BatchCond, step: usize) -> Result<(), HranaError> {
    let check_reference = |referenced: u32| {
        if (referenced as usize) < step {
            Ok(())
        } else {
            Err(HranaError::Protocol(
                "Invalid reference to step in a batch condition".into(),
            ))
        }
    };
    match condition {
        proto::BatchCond::None => Err(HranaError::Protocol("BatchCond type not recognized".into())),
        proto::BatchCond::Ok { step } | proto::BatchCond::Error { step } => check_reference(*step),
        proto::BatchCond::Not { cond } => check_condition(cond, step),
        proto::BatchCond::And(list) | proto::BatchCond::Or(list) => list
            .conds
            .iter()
            .try_for_each(|cond| check_condition(cond, step)),
        proto::BatchCond::IsAutocommit {} => Ok(()),
    }
}

/// Binds `args` by position or `named_args` by name (with or without the `:`, `@` or `$`
/// sigil); every parameter needs a value, except in EXPLAIN.
fn bind_arguments(
    stmt: &mut Statement<'_>,
    kind: StatementKind,
    request: &proto::Stmt,
) -> Result<Outcome<()>, HranaError> {
    let count = stmt.parameter_count();
    let may_leave_unbound = kind == StatementKind::Explain;
    let invalid = |detail: String| {
        Ok(Err(hrana_error(
            "ARGS_INVALID",
            format!("Arguments do not match SQL parameters: {detail}"),
        )))
    };
    if request.named_args.is_empty() {
        let given = request.args.len();
        if given > count {
            return invalid(format!(
                "{given} arguments were given, but the statement has {count} parameters"
            ));
        }
        for (index, value) in request.args.iter().enumerate() {
            if let Err(e) = stmt.raw_bind_parameter(index + 1, SqlArg::new(value)?) {
                return Ok(Err(sqlite_error(e)));
            }
        }
        if given < count && !may_leave_unbound {
            return invalid(format!(
                "the statement has {count} parameters, but {given} arguments were given"
            ));
        }
        return Ok(Ok(()));
    }
    let by_name: HashMap<&str, &proto::Value> = request
        .named_args
        .iter()
        .map(|arg| (arg.name.as_str(), &arg.value))
        .collect();
    for index in 1..=count {
        let name = stmt.parameter_name(index).map(str::to_string);
        let value = name.as_deref().and_then(|name| {
            by_name.get(name).copied().or_else(|| {
                name.strip_prefix(|c| matches!(c, ':' | '@' | '$'))
                    .and_then(|bare| by_name.get(bare).copied())
            })
        });
        match (value, name) {
            (Some(value), _) => {
                if let Err(e) = stmt.raw_bind_parameter(index, SqlArg::new(value)?) {
                    return Ok(Err(sqlite_error(e)));
                }
            }
            (None, _) if may_leave_unbound => {}
            (None, Some(name)) => return invalid(format!("no value for parameter {name}")),
            (None, None) => {
                return invalid(format!(
                    "parameter {index} is positional, but only named arguments were given"
                ))
            }
        }
    }
    Ok(Ok(()))
}

/// Sets `max_page_count` from the configuration's size limit.
/// `BEGIN IMMEDIATE` or `BEGIN EXCLUSIVE`: SQLite calls them read-only, but they take the
/// write lock.
fn takes_write_lock(sql: &str) -> bool {
    let text = sql.trim_start();
    if !text
        .get(..5)
        .is_some_and(|head| head.eq_ignore_ascii_case("BEGIN"))
    {
        return false;
    }
    let text = text.to_ascii_uppercase();
    text.contains("IMMEDIATE") || text.contains("EXCLUSIVE")
}

fn apply_page_limit(
    sandboxed: &SandboxedConnection,
    config: &DatabaseConfig,
) -> Result<(), HranaError> {
    let pages = config
        .size_limit
        .map_or(UNLIMITED_PAGES, |limit| (limit / PAGE_SIZE).max(1));
    // Set at the start of every request whose database's limit changed since it was last
    // set on this connection; otherwise the pragma (a read transaction of its own) is
    // skipped. The engine keeps a larger bound than asked when the file is already
    // larger: that one is set again at every request until the file fits.
    if sandboxed.max_pages.get() == Some(pages) {
        return Ok(());
    }
    let conn = &sandboxed.conn;
    let in_force: u64 = sandboxed
        .control
        .trusted(|| {
            conn.prepare_cached(&format!("PRAGMA max_page_count = {pages}"))
                .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
        })
        .map_err(|e| HranaError::Data(e.into()))?;
    sandboxed
        .max_pages
        .set((in_force == pages).then_some(pages));
    Ok(())
}

/// A URI that opens `path` read-only, for ATTACH.
fn read_only_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3F"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?mode=ro");
    uri
}

pub(crate) fn hrana_error(code: &str, message: impl Into<String>) -> proto::Error {
    proto::Error {
        message: message.into(),
        code: code.to_string(),
    }
}

/// The Hrana error for an SQLite failure: `SQL_INPUT_ERROR` when SQLite points at the
/// offending text, else `SQLITE_<primary code>` (a generic error is `SQLITE_UNKNOWN`).
pub(crate) fn sqlite_error(error: rusqlite::Error) -> proto::Error {
    match error {
        rusqlite::Error::SqlInputError { msg, offset, .. } => hrana_error(
            "SQL_INPUT_ERROR",
            format!("SQL input error: {msg} (at offset {offset})"),
        ),
        // Only Atoll's commit hook refuses commits: the node lost the database's write
        // lease, or the database is moving (docs/STORAGE.md, "Failover").
        rusqlite::Error::SqliteFailure(error, _)
            if error.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_COMMITHOOK =>
        {
            hrana_error(
                "WRITE_NOT_APPLIED",
                "the write was not applied: this node does not hold the database's write lease now (it lost contact with the control plane, or the database is moving to another node); nothing was committed, and retrying the transaction will work once the database's node holds its lease again (usually within seconds)",
            )
        }
        rusqlite::Error::SqliteFailure(error, message) => hrana_error(
            sqlite_code(error.code),
            format!(
                "SQLite error: {}",
                message.unwrap_or_else(|| error.to_string())
            ),
        ),
        other => hrana_error("SQLITE_UNKNOWN", format!("SQLite error: {other}")),
    }
}

/// The Hrana error for a statement that failed to *prepare*. A generic `SQLITE_ERROR`
/// there is always a fault of the SQL text (unknown table or column, syntax), so it is
/// `SQL_INPUT_ERROR`, as libSQL clients expect, even when SQLite names no offset: sqld
/// decides by the offset alone, and SQLite 3.45 records none for "no such table", which
/// sqld therefore answers as `SQLITE_UNKNOWN` (docs/DATA-PLANE.md, "Error codes").
/// Failures while a statement *runs* keep their SQLite code.
pub(crate) fn sql_input_error(error: rusqlite::Error) -> proto::Error {
    match error {
        rusqlite::Error::SqliteFailure(failure, message) if failure.code == ErrorCode::Unknown => {
            hrana_error(
                "SQL_INPUT_ERROR",
                format!(
                    "SQL input error: {}",
                    message.unwrap_or_else(|| failure.to_string())
                ),
            )
        }
        other => sqlite_error(other),
    }
}

fn sqlite_code(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::InternalMalfunction => "SQLITE_INTERNAL",
        ErrorCode::PermissionDenied => "SQLITE_PERM",
        ErrorCode::OperationAborted => "SQLITE_ABORT",
        ErrorCode::DatabaseBusy => "SQLITE_BUSY",
        ErrorCode::DatabaseLocked => "SQLITE_LOCKED",
        ErrorCode::OutOfMemory => "SQLITE_NOMEM",
        ErrorCode::ReadOnly => "SQLITE_READONLY",
        ErrorCode::OperationInterrupted => "SQLITE_INTERRUPT",
        ErrorCode::SystemIoFailure => "SQLITE_IOERR",
        ErrorCode::DatabaseCorrupt => "SQLITE_CORRUPT",
        ErrorCode::NotFound => "SQLITE_NOTFOUND",
        ErrorCode::DiskFull => "SQLITE_FULL",
        ErrorCode::CannotOpen => "SQLITE_CANTOPEN",
        ErrorCode::FileLockingProtocolFailed => "SQLITE_PROTOCOL",
        ErrorCode::SchemaChanged => "SQLITE_SCHEMA",
        ErrorCode::TooBig => "SQLITE_TOOBIG",
        ErrorCode::ConstraintViolation => "SQLITE_CONSTRAINT",
        ErrorCode::TypeMismatch => "SQLITE_MISMATCH",
        ErrorCode::ApiMisuse => "SQLITE_MISUSE",
        ErrorCode::NoLargeFileSupport => "SQLITE_NOLFS",
        ErrorCode::AuthorizationForStatementDenied => "SQLITE_AUTH",
        ErrorCode::ParameterOutOfRange => "SQLITE_RANGE",
        ErrorCode::NotADatabase => "SQLITE_NOTADB",
        _ => "SQLITE_UNKNOWN",
    }
}

/// A pooled connection lent to a client. It goes back to the pool only as the client
/// found it: outside a transaction, and without changed settings, temporary objects or
/// attached databases (which the next client, maybe with other rights, must not inherit);
/// otherwise it is closed, which also rolls back what the client left open.
pub(crate) struct ClientConnection {
    sandboxed: SandboxedConnection,
    altered: Cell<bool>,
    /// Since when the connection holds the database's write lock (a write transaction is
    /// open), as of its last statement.
    writing_since: Cell<Option<Instant>>,
    /// Its transaction was rolled back to free the write lock (`write_lock`); the next
    /// statement is told so.
    timed_out: Cell<bool>,
}

impl ClientConnection {
    /// Whether every statement of `sql` only reads (SQLite's own verdict, with
    /// `BEGIN IMMEDIATE`/`EXCLUSIVE`, which take the write lock, counted as writes). A
    /// statement that does not prepare counts as a write: the primary reports its error.
    pub(crate) fn is_read_only(&self, sql: &str) -> bool {
        let conn = &self.sandboxed.conn;
        // One statement (the usual case) through the statement cache: the statement the
        // run then executes is the one compiled here.
        match conn.prepare_cached(sql) {
            Ok(stmt) => return stmt.readonly() && !takes_write_lock(sql),
            Err(rusqlite::Error::MultipleStatement) => {}
            Err(_) => return false,
        }
        let mut statements = rusqlite::Batch::new(conn, sql);
        loop {
            match statements.next() {
                Ok(Some(stmt)) => {
                    let text = stmt.expanded_sql().unwrap_or_default();
                    if !stmt.readonly() || takes_write_lock(&text) {
                        return false;
                    }
                }
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    }

    pub(crate) fn new(sandboxed: SandboxedConnection) -> ClientConnection {
        ClientConnection {
            sandboxed,
            altered: Cell::new(false),
            writing_since: Cell::new(None),
            timed_out: Cell::new(false),
        }
    }

    pub(crate) fn checkout(
        node: &Node,
        db: &Database,
        mode: Mode,
        key: Option<&atoll_storage::encryption::EncryptionKey>,
    ) -> Result<ClientConnection, DataError> {
        node.pool.checkout(db, mode, key).map(ClientConnection::new)
    }

    pub(crate) fn is_autocommit(&self) -> bool {
        self.sandboxed.conn.is_autocommit()
    }

    /// Runs `work` with a budget of running time (see [`Control::within_budget`]).
    pub(crate) fn within_budget<T>(
        &self,
        cpu: Duration,
        wall: Duration,
        work: impl FnOnce() -> T,
    ) -> (T, bool) {
        self.sandboxed.control.within_budget(cpu, wall, work)
    }

    pub(crate) fn mode(&self) -> Mode {
        self.sandboxed.control.mode()
    }

    /// This connection, or one of the caller's sandbox mode if the caller's rights changed
    /// since it was opened (a WebSocket `hello` with another token). Inside a transaction
    /// the connection cannot be swapped: the error says so, and the old one comes back.
    pub(crate) fn for_caller(self, caller: &Caller) -> (ClientConnection, Outcome<()>) {
        let mode = caller.mode();
        if self.mode() == mode {
            return (self, Ok(()));
        }
        if !self.is_autocommit() {
            return (
                self,
                Err(hrana_error(
                    "TRANSACTION_BUSY",
                    "the token changed while a transaction is open on this stream: finish it first, or open a new stream",
                )),
            );
        }
        match ClientConnection::checkout(&caller.node, &caller.db, mode, caller.key.as_deref()) {
            Ok(fresh) => {
                self.give_back(&caller.node, caller.db.id());
                (fresh, Ok(()))
            }
            Err(error) => (self, Err(HranaError::from(error).to_hrana_error())),
        }
    }

    /// Whether [`ClientConnection::yield_write_lock_if_due`] may have work to do (no SQL:
    /// for a session's periodic look).
    pub(crate) fn may_have_to_yield(&self, db: &Database, timeout: Duration) -> bool {
        self.writing_since
            .get()
            .is_some_and(|since| db.write_lock().must_yield(since, timeout))
    }

    /// Records whether the last statement left a write transaction open.
    fn note_transaction_state(&self) {
        let writing = self
            .sandboxed
            .conn
            .transaction_state(Some(rusqlite::DatabaseName::Main))
            .is_ok_and(|state| state == rusqlite::TransactionState::Write);
        match (writing, self.writing_since.get()) {
            (true, None) => self.writing_since.set(Some(Instant::now())),
            (false, Some(_)) => self.writing_since.set(None),
            _ => {}
        }
    }

    /// Rolls back the transaction of this idle connection if it has held the write lock
    /// for longer than `timeout` while another writer waits (sqld's `TRANSACTION_TIMEOUT`).
    /// Answers whether it did.
    pub(crate) fn yield_write_lock_if_due(&self, db: &Database, timeout: Duration) -> bool {
        let Some(since) = self.writing_since.get() else {
            return false;
        };
        if self.is_autocommit() || !db.write_lock().must_yield(since, timeout) {
            return false;
        }
        let rolled_back = self
            .sandboxed
            .control
            .trusted(|| self.sandboxed.conn.execute_batch("ROLLBACK"));
        if let Err(error) = rolled_back {
            tracing::warn!(%error, database = db.id(), "cannot roll back a transaction that held the write lock");
            return false;
        }
        tracing::info!(
            database = db.id(),
            held_for_ms = since.elapsed().as_millis() as u64,
            "rolled back a transaction that held the write lock while another writer waited"
        );
        self.writing_since.set(None);
        self.timed_out.set(true);
        true
    }

    /// Returns the connection to the pool if it can be reused, else closes it (also when
    /// its database is gone).
    pub(crate) fn give_back(self, node: &Node, db_id: &str) {
        if !self.altered.get() {
            if let Some(db) = node.by_id(db_id) {
                node.pool.checkin(&db, self.sandboxed);
            }
        }
    }

    /// [`ClientConnection::give_back`] on an async worker, where nothing may block: what
    /// is closed instead (this connection, or those the pool evicts to make room for it)
    /// is closed on an SQL thread, since closing may checkpoint.
    pub(crate) fn give_back_on_worker(self, node: &Node, db_id: &str) {
        let closed = match node.by_id(db_id) {
            Some(db) if !self.altered.get() => {
                node.pool.checkin_keeping_closed(&db, self.sandboxed)
            }
            _ => vec![self.sandboxed],
        };
        if !closed.is_empty() {
            node.sql().spawn(move || drop(closed));
        }
    }
}

/// A statement's columns, as Hrana describes them.
fn columns_of(stmt: &Statement<'_>) -> Vec<proto::Col> {
    stmt.columns()
        .iter()
        .map(|col| proto::Col {
            name: Some(col.name().to_string()),
            decltype: col.decl_type().map(str::to_string),
        })
        .collect()
}

/// Collects one statement's columns and rows within the response budget.
struct ResultCollector<'b> {
    budget: &'b Cell<usize>,
    cols: Vec<proto::Col>,
    rows: Vec<proto::Row>,
}

impl<'b> ResultCollector<'b> {
    fn new(budget: &'b Cell<usize>) -> ResultCollector<'b> {
        ResultCollector {
            budget,
            cols: Vec::new(),
            rows: Vec::new(),
        }
    }

    fn finish(&mut self, stats: StmtStats) -> proto::StmtResult {
        proto::StmtResult {
            cols: std::mem::take(&mut self.cols),
            rows: std::mem::take(&mut self.rows),
            affected_row_count: stats.affected_row_count,
            last_insert_rowid: stats.last_insert_rowid,
            replication_index: None,
            rows_read: stats.rows_read,
            rows_written: stats.rows_written,
            query_duration_ms: stats.query_duration_ms,
        }
    }
}

impl RowSink for ResultCollector<'_> {
    fn columns(&mut self, cols: Vec<proto::Col>) -> Outcome<()> {
        self.cols = cols;
        self.rows.clear();
        Ok(())
    }

    fn row(&mut self, values: Vec<proto::Value>) -> Outcome<()> {
        let size: usize = values.iter().map(response_size).sum();
        let remaining = self.budget.get();
        if size > remaining {
            return Err(hrana_error("RESPONSE_TOO_LARGE", "Response is too large"));
        }
        self.budget.set(remaining - size);
        self.rows.push(proto::Row { values });
        Ok(())
    }
}

/// Collects a batch into a `BatchResult`.
struct BatchCollector<'b> {
    current: ResultCollector<'b>,
    result: proto::BatchResult,
}

impl<'b> BatchCollector<'b> {
    fn new(budget: &'b Cell<usize>, steps: usize) -> BatchCollector<'b> {
        BatchCollector {
            current: ResultCollector::new(budget),
            result: proto::BatchResult {
                step_results: Vec::with_capacity(steps),
                step_errors: Vec::with_capacity(steps),
                replication_index: None,
            },
        }
    }

    fn finish(self) -> proto::BatchResult {
        self.result
    }
}

impl RowSink for BatchCollector<'_> {
    fn columns(&mut self, cols: Vec<proto::Col>) -> Outcome<()> {
        self.current.columns(cols)
    }

    fn row(&mut self, values: Vec<proto::Value>) -> Outcome<()> {
        self.current.row(values)
    }
}

impl BatchSink for BatchCollector<'_> {
    fn begin_step(&mut self, _step: usize) {
        self.current.cols.clear();
        self.current.rows.clear();
    }

    fn end_step(&mut self, _step: usize, outcome: Outcome<StmtStats>) {
        let (result, error) = match outcome {
            Ok(stats) => (Some(self.current.finish(stats)), None),
            Err(error) => (None, Some(error)),
        };
        self.result.step_results.push(result);
        self.result.step_errors.push(error);
    }

    fn skip_step(&mut self, _step: usize) {
        self.result.step_results.push(None);
        self.result.step_errors.push(None);
    }
}

/// For `sequence`, whose rows nobody wants.
struct DiscardRows;

impl RowSink for DiscardRows {
    fn columns(&mut self, _cols: Vec<proto::Col>) -> Outcome<()> {
        Ok(())
    }

    fn row(&mut self, _values: Vec<proto::Value>) -> Outcome<()> {
        Ok(())
    }
}
