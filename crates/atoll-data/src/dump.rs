//! SQL dumps: loading one into a database (seed `dump`), and writing one (`GET /dump`).
//!
//! The format is `sqlite3 .dump`'s, so a dump from either loads into the other:
//! `PRAGMA foreign_keys=OFF;`, `BEGIN TRANSACTION;`, each table's `CREATE TABLE` followed by
//! its rows as `INSERT INTO "t" VALUES(…);`, `sqlite_sequence`, then indexes, triggers and
//! views, then `COMMIT;`.

use crate::error::DataError;
use crate::sandbox::{Control, Interruption, SandboxedConnection, TransactionStatement};
use rusqlite::types::ValueRef;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// Runs an SQL dump in one transaction: all of it, or nothing, on a connection of the
/// sandbox's `DumpLoader` mode (a dump is tenant SQL: no ATTACH, allow-listed pragmas, the
/// sandbox's limits), then checks the database it made ([`check_after_load`]), within
/// `timeout` in all. The `BEGIN TRANSACTION;` / `COMMIT;` statements `sqlite3 .dump`
/// writes are skipped (the load is its own transaction) — the authorizer tells which
/// statements they are, not their text, so `COMMIT` hidden behind a comment cannot end
/// the load's transaction; a `ROLLBACK` (what `sqlite3` writes after a dump that hit
/// errors) refuses the dump. An error leaves the file to be thrown away (the caller
/// builds it in a staging directory).
pub fn load_dump(
    sandboxed: &mut SandboxedConnection,
    sql: &str,
    timeout: Duration,
) -> Result<(), DataError> {
    let control = Arc::clone(&sandboxed.control);
    control.arm(timeout, None);
    let loaded = load_in_transaction(&mut sandboxed.conn, &control, sql);
    if let Err(e) = loaded {
        return Err(match control.disarm() {
            Some(why) => {
                DataError::BadRequest(format!("the dump failed to load: {}", why.message()))
            }
            None => e,
        });
    }
    let checked = check_after_load(&sandboxed.conn, &control);
    match (checked, control.disarm()) {
        (_, Some(Interruption::Deadline(limit))) => Err(DataError::BadRequest(format!(
            "the database the dump made could not be checked within {} (a dump's deadline, for loading it and checking what it made), so it was not created: checking runs its own SQL (CHECK constraints, generated columns, index expressions) on every row; make that SQL cheaper",
            crate::sandbox::human_duration(limit)
        ))),
        (_, Some(why)) => Err(DataError::BadRequest(format!(
            "the dump failed to load: {}",
            why.message()
        ))),
        (Ok(()), None) => Ok(()),
        (Err(detail), None) => Err(DataError::BadRequest(format!(
            "the database the dump made fails its check ({}); it was not created",
            snippet(&detail)
        ))),
    }
}

/// Checks the database a dump just made, as an upload is checked: `PRAGMA
/// integrity_check`, on the loader's own connection, so under the load's deadline, the
/// node's shutdown and the sandbox's limits and rules — the check runs the file's SQL
/// (CHECK constraints, generated columns, index expressions), which is the tenant's. The
/// dump may have written the schema (`writable_schema`, how `sqlite3 .dump` recreates
/// virtual tables): the schema is read again from the file first, so it must still parse.
/// `Err(detail)`: what is wrong with it.
fn check_after_load(conn: &rusqlite::Connection, control: &Control) -> Result<(), String> {
    control
        .trusted(|| conn.execute_batch("PRAGMA writable_schema = RESET"))
        .map_err(|e| e.to_string())?;
    let verdict: Result<Vec<String>, rusqlite::Error> = conn
        .prepare("PRAGMA integrity_check(5)")
        .and_then(|mut stmt| stmt.query_map([], |row| row.get::<_, String>(0))?.collect());
    match verdict {
        Ok(lines) if lines == ["ok"] => Ok(()),
        Ok(lines) => Err(lines.join("; ")),
        Err(e) => Err(control.take_refusal().unwrap_or_else(|| e.to_string())),
    }
}

fn load_in_transaction(
    conn: &mut rusqlite::Connection,
    control: &Control,
    sql: &str,
) -> Result<(), DataError> {
    let started = std::time::Instant::now();
    tracing::info!(bytes = sql.len(), "dump load started");
    let tx = conn.transaction()?;
    let mut statements = Statements::new(&tx, control, sql);
    let mut count = 0usize;
    loop {
        let failed = |e: rusqlite::Error, at: String| {
            let reason = control.take_refusal().unwrap_or_else(|| e.to_string());
            DataError::BadRequest(format!("the dump failed to load {at}: {reason}"))
        };
        let mut stmt = match statements.next() {
            Ok(Some(stmt)) => stmt,
            Ok(None) => break,
            // A statement that does not prepare (a syntax error, a missing table): it is
            // the next one, counted from 1 as users count the statements of a file.
            Err(rusqlite::Error::SqlInputError { msg, sql, .. }) => {
                return Err(DataError::BadRequest(format!(
                    "the dump failed to load at statement {} ({}): {msg}",
                    count + 1,
                    snippet(&sql)
                )))
            }
            Err(e) => return Err(failed(e, format!("at statement {}", count + 1))),
        };
        count += 1;
        if count.is_multiple_of(PROGRESS_EVERY) {
            tracing::info!(
                statements = count,
                bytes_read = statements.position(),
                bytes = sql.len(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "dump load in progress"
            );
        }
        match control.take_transaction_statement() {
            Some(TransactionStatement::Begin | TransactionStatement::Commit) => continue,
            Some(TransactionStatement::Rollback) => {
                return Err(DataError::BadRequest(format!(
                    "the dump ends its transaction with ROLLBACK at statement {count}: sqlite3 writes that when the source database had errors, so the dump is incomplete"
                )))
            }
            None => {}
        }
        let mut rows = stmt.raw_query();
        loop {
            match rows.next() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    drop(rows);
                    let text = stmt.expanded_sql().unwrap_or_default();
                    return Err(failed(
                        e,
                        format!("at statement {count} ({})", snippet(&text)),
                    ));
                }
            }
        }
    }
    // Whatever the dump did, the load's own transaction must still be the one open.
    if tx.is_autocommit() {
        return Err(DataError::BadRequest(
            "the dump ended the load's transaction; it was not loaded".into(),
        ));
    }
    tx.commit()?;
    tracing::info!(
        statements = count,
        bytes = sql.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "dump loaded"
    );
    Ok(())
}

/// A progress line every this many statements of a dump.
const PROGRESS_EVERY: usize = 50_000;

/// The first window of text a statement is prepared from; doubled until it holds the
/// whole statement.
const FIRST_WINDOW: usize = 4096;

/// The statements of a dump, one at a time, each prepared once (the authorizer sees it
/// then, as for any tenant statement).
///
/// `rusqlite::Batch` hands SQLite the whole rest of the text for every statement, and
/// SQLite copies what it is handed before parsing: quadratic, minutes for a 10 MB dump.
/// Here each statement is prepared from a window of the text that starts where it does.
/// A statement that ends (its `;`) before the window does is the statement SQLite would
/// have parsed from the whole text — its tokenizer reads left to right, so the cut after
/// it changes nothing. One that reaches the window's end, or fails to parse, may have
/// been cut: it is prepared again from a window twice as large, up to the whole rest,
/// whose answer is final. Where the length of what a statement consumed cannot be known
/// (a statement with parameters: its expanded text differs), the rest of the dump is read
/// as `rusqlite::Batch` does.
struct Statements<'conn, 'sql> {
    conn: &'conn rusqlite::Connection,
    control: &'conn Control,
    sql: &'sql str,
    position: usize,
    fallback: Option<rusqlite::Batch<'conn, 'sql>>,
}

impl<'conn, 'sql> Statements<'conn, 'sql> {
    fn new(conn: &'conn rusqlite::Connection, control: &'conn Control, sql: &'sql str) -> Self {
        Statements {
            conn,
            control,
            sql,
            position: 0,
            fallback: None,
        }
    }

    /// Bytes of the dump read so far.
    fn position(&self) -> usize {
        self.position
    }

    fn next(&mut self) -> rusqlite::Result<Option<rusqlite::Statement<'conn>>> {
        if let Some(batch) = &mut self.fallback {
            self.control.take_refusal();
            self.control.take_transaction_statement();
            return batch.next();
        }
        let mut window = FIRST_WINDOW;
        while self.position < self.sql.len() {
            let rest = &self.sql[self.position..];
            let end = char_boundary_at_or_before(rest, window);
            let whole = end == rest.len();
            // What the authorizer saw of earlier statements, or of an attempt on a window
            // too small, must not be read as this one's.
            self.forget_authorizer_notes();
            let stmt = match self.conn.prepare(&rest[..end]) {
                Ok(stmt) => stmt,
                Err(e) if whole => return Err(e),
                Err(_) => {
                    window = window.saturating_mul(2);
                    continue;
                }
            };
            // The text the statement consumed from where it was asked to start (`None`
            // for a window of nothing but spaces and comments). Without parameters SQLite
            // gives it back as it was, so it must be exactly the start of the window.
            let text = stmt.expanded_sql();
            let consumed = match &text {
                Some(text)
                    if stmt.parameter_count() == 0
                        && !text.is_empty()
                        && rest[..end].starts_with(text.as_str()) =>
                {
                    Some(text.len())
                }
                _ => None,
            };
            match (consumed, text.is_none()) {
                (Some(length), _) if length < end || whole => {
                    self.position += length;
                    return Ok(Some(stmt));
                }
                (None, true) if whole => {
                    self.position = self.sql.len();
                    return Ok(None);
                }
                (None, false) => {
                    // A statement whose length is not known (its parameters' expansion
                    // hides it): the rest is read as Batch reads it, from it on.
                    drop(stmt);
                    self.forget_authorizer_notes();
                    let mut batch = rusqlite::Batch::new(self.conn, rest);
                    let first = batch.next();
                    self.position = self.sql.len();
                    self.fallback = Some(batch);
                    return first;
                }
                // Cut by the window, or nothing but spaces and comments so far.
                _ => window = window.saturating_mul(2),
            }
        }
        Ok(None)
    }

    fn forget_authorizer_notes(&self) {
        self.control.take_refusal();
        self.control.take_transaction_statement();
    }
}

/// The largest char boundary of `text` at or before `at` (at least one character).
fn char_boundary_at_or_before(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    let mut end = at;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    if end == 0 {
        text.char_indices().nth(1).map_or(text.len(), |(i, _)| i)
    } else {
        end
    }
}

/// Makes sure the file a dump was loaded into still opens, with a schema that parses,
/// once the loader's connection is closed. [`load_dump`] checked the database whole
/// (bounded: the check runs tenant SQL); this reads only the schema, so it runs no SQL of
/// the file's.
pub fn check_loaded(file: &std::path::Path) -> Result<(), DataError> {
    let conn = rusqlite::Connection::open(file)?;
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))
        .map_err(|e| {
            DataError::BadRequest(format!(
                "the dump left a damaged database ({e}); it was not created"
            ))
        })
}

/// Checks a file rebuilt from object storage (`atoll_storage::restore`): `PRAGMA quick_check`.
/// Unbounded, unlike the checks of files tenants send: a rebuild must not fail for time.
pub fn check_restored(file: &std::path::Path) -> Result<(), DataError> {
    let conn = rusqlite::Connection::open(file)?;
    let check: Result<String, _> = conn.query_row("PRAGMA quick_check", [], |row| row.get(0));
    match check {
        Ok(result) if result == "ok" => Ok(()),
        Ok(result) => Err(DataError::BadRequest(format!(
            "the restored database is damaged ({})",
            snippet(&result)
        ))),
        Err(e) => Err(DataError::BadRequest(format!(
            "the restored database is damaged ({e})"
        ))),
    }
}

/// The start of a statement, for error messages that must not echo a whole dump: on one
/// line, every run of whitespace (a dump's newlines and indentation) one space.
fn snippet(sql: &str) -> String {
    let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match sql.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &sql[..at]),
        None => sql.to_string(),
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpOptions {
    /// Write the rowid of every row of a rowid table without an `INTEGER PRIMARY KEY`
    /// (sqld's `?preserve_row_ids=true`, `sqlite3 .dump --preserve-rowids`): other tables
    /// may refer to those rowids, which a plain reload renumbers.
    pub preserve_row_ids: bool,
}

/// Writes an SQL dump of `conn`'s main database to `out`, from one read transaction, so it
/// is consistent while writers go on. Errors from `out` (a client that went away) come
/// back as `DataError::Internal`.
pub fn write_dump(
    conn: &rusqlite::Connection,
    out: &mut dyn Write,
    options: DumpOptions,
) -> Result<(), DataError> {
    // Rolled back when dropped: the dump only reads.
    let tx = conn.unchecked_transaction()?;
    out.write_all(b"PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n")?;

    let mut writable_schema = false;
    let tables: Vec<(String, String)> = {
        let mut stmt = tx.prepare(
            "SELECT name, sql FROM sqlite_schema
             WHERE type = 'table' AND sql NOT NULL
             ORDER BY name = 'sqlite_sequence', rowid",
        )?;
        let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    for (name, sql) in &tables {
        if name == "sqlite_sequence" {
            // Created by the first AUTOINCREMENT table; only its rows need restoring.
            out.write_all(b"DELETE FROM sqlite_sequence;\n")?;
        } else if name.starts_with("sqlite_stat") {
            // Creates the statistics tables (ANALYZE of a table without indexes adds no
            // rows) so the rows below have somewhere to go.
            out.write_all(b"ANALYZE sqlite_schema;\n")?;
        } else if name.starts_with("sqlite_") {
            continue;
        } else if starts_with_ignore_case(sql, "CREATE VIRTUAL TABLE") {
            // Creating the virtual table would create its shadow tables too, which are
            // dumped (with their contents) on their own: so only its schema row goes in,
            // as sqlite3 does it.
            if !writable_schema {
                out.write_all(b"PRAGMA writable_schema=ON;\n")?;
                writable_schema = true;
            }
            writeln!(
                out,
                "INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql) VALUES('table',{},{},0,{});",
                text_literal(name),
                text_literal(name),
                text_literal(sql)
            )?;
            continue;
        } else {
            writeln!(out, "{sql};")?;
        }
        dump_rows(&tx, out, name, options)?;
    }

    let mut stmt = tx.prepare(
        "SELECT sql FROM sqlite_schema
         WHERE sql NOT NULL AND type IN ('index', 'trigger', 'view')
         ORDER BY rowid",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let sql: String = row.get(0)?;
        writeln!(out, "{sql};")?;
    }
    if writable_schema {
        out.write_all(b"PRAGMA writable_schema=OFF;\n")?;
    }
    out.write_all(b"COMMIT;\n")?;
    out.flush()?;
    Ok(())
}

fn dump_rows(
    conn: &rusqlite::Connection,
    out: &mut dyn Write,
    table: &str,
    options: DumpOptions,
) -> Result<(), DataError> {
    // Generated columns (hidden 2 and 3) cannot be inserted into; they come back on
    // their own.
    let mut all_columns = 0;
    let mut columns = Vec::new();
    let mut integer_keys = 0;
    let mut keys = 0;
    {
        let mut stmt = conn.prepare("SELECT name, type, pk, hidden FROM pragma_table_xinfo(?1)")?;
        let mut rows = stmt.query([table])?;
        while let Some(row) = rows.next()? {
            all_columns += 1;
            let name: String = row.get(0)?;
            let kind: String = row.get(1)?;
            let pk: i64 = row.get(2)?;
            let hidden: i64 = row.get(3)?;
            if pk > 0 {
                keys += 1;
                if kind.eq_ignore_ascii_case("INTEGER") {
                    integer_keys += 1;
                }
            }
            if hidden == 0 {
                columns.push(name);
            }
        }
    }
    let rowid = if options.preserve_row_ids {
        rowid_column(conn, table, &columns, keys == 1 && integer_keys == 1)?
    } else {
        None
    };

    let mut select = String::from("SELECT ");
    let mut insert = format!("INSERT INTO {}", identifier(table));
    if rowid.is_some() || columns.len() != all_columns {
        let mut names: Vec<String> = rowid.iter().map(|r| r.to_string()).collect();
        names.extend(columns.iter().map(|c| identifier(c)));
        insert.push('(');
        insert.push_str(&names.join(","));
        insert.push(')');
    }
    insert.push_str(" VALUES(");
    let mut selected: Vec<String> = rowid.iter().map(|r| r.to_string()).collect();
    selected.extend(columns.iter().map(|c| identifier(c)));
    select.push_str(&selected.join(","));
    select.push_str(" FROM ");
    select.push_str(&identifier(table));

    let mut stmt = conn.prepare(&select)?;
    let width = stmt.column_count();
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        out.write_all(insert.as_bytes())?;
        for i in 0..width {
            if i > 0 {
                out.write_all(b",")?;
            }
            write_value(out, row.get_ref(i)?)?;
        }
        out.write_all(b");\n")?;
    }
    Ok(())
}

/// The name to read and write a table's rowid by, when it has one that a plain reload
/// would not keep: not for WITHOUT ROWID tables, nor when an `INTEGER PRIMARY KEY` column
/// is the rowid (the column keeps it), nor when columns named `rowid`, `_rowid_` and `oid`
/// hide it.
fn rowid_column(
    conn: &rusqlite::Connection,
    table: &str,
    columns: &[String],
    single_integer_key: bool,
) -> Result<Option<&'static str>, DataError> {
    let without_rowid: bool = conn
        .query_row(
            "SELECT wr FROM pragma_table_list(?1) WHERE schema = 'main'",
            [table],
            |row| row.get(0),
        )
        .unwrap_or(false);
    if without_rowid {
        return Ok(None);
    }
    if single_integer_key {
        // An INTEGER PRIMARY KEY is the rowid, unless declared DESC: then it has an index
        // of its own (origin 'pk').
        let has_pk_index: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_index_list(?1) WHERE origin = 'pk')",
            [table],
            |row| row.get(0),
        )?;
        if !has_pk_index {
            return Ok(None);
        }
    }
    Ok(["rowid", "_rowid_", "oid"]
        .into_iter()
        .find(|name| !columns.iter().any(|c| c.eq_ignore_ascii_case(name))))
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.len() >= prefix.len()
        && text.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// `"name"`, quotes doubled: always quoted, so keywords and odd names need no thought.
fn identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// An SQL literal for a value, reading back as the same value of the same type.
fn write_value(out: &mut dyn Write, value: ValueRef<'_>) -> std::io::Result<()> {
    match value {
        ValueRef::Null => out.write_all(b"NULL"),
        ValueRef::Integer(i) => write!(out, "{i}"),
        ValueRef::Real(r) => out.write_all(real_literal(r).as_bytes()),
        ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
            // SQL text stops at a NUL, so text holding one goes as bytes too.
            Ok(text) if !text.contains('\0') => out.write_all(text_literal(text).as_bytes()),
            // SQLite keeps whatever bytes it was given as text; keep them exactly.
            _ => {
                out.write_all(b"CAST(")?;
                write_blob(out, bytes)?;
                out.write_all(b" AS TEXT)")
            }
        },
        ValueRef::Blob(bytes) => write_blob(out, bytes),
    }
}

/// Rust's `Debug` for `f64` is the shortest text that reads back as the same number, and
/// always has a `.` or an exponent, so SQLite reads it as a REAL (`1.0`, not `1`).
fn real_literal(r: f64) -> String {
    if r.is_nan() {
        // SQLite stores NaN as NULL; this is only for completeness.
        "NULL".into()
    } else if r.is_infinite() {
        // Overflows to ±Inf when SQLite reads it, as sqlite3 writes it.
        if r > 0.0 { "1e999" } else { "-1e999" }.into()
    } else {
        format!("{r:?}")
    }
}

fn write_blob(out: &mut dyn Write, bytes: &[u8]) -> std::io::Result<()> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = Vec::with_capacity(bytes.len() * 2 + 3);
    text.extend_from_slice(b"X'");
    for b in bytes {
        text.push(HEX[usize::from(b >> 4)]);
        text.push(HEX[usize::from(b & 15)]);
    }
    text.push(b'\'');
    out.write_all(&text)
}

/// `'text'` with quotes doubled. Line breaks are written as sqlite3 writes them —
/// `replace('a\nb','\n',char(10))` with a marker absent from the text — so every statement
/// stays on one line and tools that read dumps line by line keep `\r\n` intact.
fn text_literal(text: &str) -> String {
    let quoted = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let has_lf = text.contains('\n');
    let has_cr = text.contains('\r');
    if !has_lf && !has_cr {
        return quoted(text);
    }
    let lf_marker = unused_marker(text, "\\n", "\\012");
    let cr_marker = unused_marker(text, "\\r", "\\015");
    let mut body = text.to_string();
    let mut literal = String::new();
    if has_lf {
        body = body.replace('\n', &lf_marker);
        literal.push_str("replace(");
    }
    if has_cr {
        body = body.replace('\r', &cr_marker);
        literal.push_str("replace(");
    }
    literal.push_str(&quoted(&body));
    if has_cr {
        literal.push_str(&format!(",{},char(13))", quoted(&cr_marker)));
    }
    if has_lf {
        literal.push_str(&format!(",{},char(10))", quoted(&lf_marker)));
    }
    literal
}

fn unused_marker(text: &str, first: &str, second: &str) -> String {
    if !text.contains(first) {
        return first.to_string();
    }
    if !text.contains(second) {
        return second.to_string();
    }
    (0..)
        .map(|i| format!("({first}{i})"))
        .find(|marker| !text.contains(marker.as_str()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_literals_quote_and_keep_line_breaks_out_of_the_line() {
        assert_eq!(text_literal("it's"), "'it''s'");
        assert_eq!(text_literal("a\nb"), "replace('a\\nb','\\n',char(10))");
        assert_eq!(
            text_literal("a\r\nb"),
            "replace(replace('a\\r\\nb','\\r',char(13)),'\\n',char(10))"
        );
        assert_eq!(
            text_literal("\\n\n"),
            "replace('\\n\\012','\\012',char(10))"
        );
    }

    #[test]
    fn reals_read_back_as_reals() {
        assert_eq!(real_literal(1.0), "1.0");
        assert_eq!(real_literal(0.1), "0.1");
        assert_eq!(real_literal(1e300), "1e300");
        assert_eq!(real_literal(f64::NEG_INFINITY), "-1e999");
    }
}
