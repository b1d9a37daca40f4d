//! `atoll db shell NAME [SQL]`: SQL over the data plane.
//!
//! - Interactive when stdin is a terminal and no SQL is given: line editing and history
//!   (`shell_history` in the config directory), statements spanning lines until a `;`
//!   completes them, dot-commands.
//! - One-shot otherwise: the SQL argument, or everything piped in. Complete statements are
//!   sent in batches (at most [`BATCH_STATEMENTS`] statements or [`BATCH_BYTES`] of SQL per
//!   request, never a whole dump in one), each batch stopping at its first failure. All
//!   requests share one session, so a dump's `BEGIN TRANSACTION; … COMMIT;` is one
//!   transaction across batches, and a failure rolls it back. Large inputs show progress by
//!   bytes read.

use super::client::{CliError, Client};
use super::config::config_dir;
use super::data_plane::{failure_of, DataPlane};
use super::progress::Progress;
use super::sql_session::{SessionError, SqlSession};
use super::statements;
use clap::ValueEnum;
use libsql_hrana::proto::{StmtResult, Value};
use reqwest::Method;
use std::io::{BufRead, IsTerminal, Write};

/// Most statements sent in one request.
pub const BATCH_STATEMENTS: usize = 500;
/// Most SQL text sent in one request (a single larger statement still goes alone).
pub const BATCH_BYTES: usize = 1 << 20;
/// Piped input at least this large shows progress.
const PROGRESS_FROM_BYTES: u64 = 256 << 10;

/// How query results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Aligned columns under a header.
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// A JSON array of objects, one per row.
    Json,
    /// One `column = value` line per column, rows separated by a blank line.
    Line,
    /// Values separated by `|`, no header.
    List,
}

pub struct ShellOptions {
    pub name: String,
    pub sql: Option<String>,
    pub mode: Mode,
    pub verbose: bool,
    /// The key of an encrypted database (base64).
    pub encryption_key: Option<String>,
}

pub async fn run(client: &Client, options: ShellOptions) -> Result<(), CliError> {
    let plane = DataPlane::open(client, &options.name)
        .await?
        .with_encryption_key(options.encryption_key.clone());
    let mut shell = Shell {
        plane: &plane,
        session: SqlSession::new(&plane),
        mode: options.mode,
        verbose: options.verbose,
        batch: Vec::new(),
        batch_bytes: 0,
        statements_sent: 0,
        quit: false,
    };
    let result = match options.sql {
        Some(sql) => {
            let total = Some(sql.len() as u64);
            shell.run_script(sql.as_bytes(), total).await
        }
        None if std::io::stdin().is_terminal() => shell.interactive().await,
        None => {
            let total = stdin_size();
            let stdin = std::io::stdin();
            shell.run_script(stdin.lock(), total).await
        }
    };
    shell.session.close().await;
    result
}

/// The size of piped input when it is a regular file (`< dump.sql`), for the progress bar.
fn stdin_size() -> Option<u64> {
    std::fs::metadata("/dev/stdin")
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

struct Shell<'a> {
    plane: &'a DataPlane<'a>,
    session: SqlSession<'a>,
    mode: Mode,
    verbose: bool,
    /// Complete statements not sent yet.
    batch: Vec<String>,
    batch_bytes: usize,
    /// Statements sent so far (to number the one that fails).
    statements_sent: usize,
    quit: bool,
}

impl Shell<'_> {
    /// One-shot mode: runs `input` to its end, stopping at the first error.
    async fn run_script(
        &mut self,
        mut input: impl BufRead,
        total: Option<u64>,
    ) -> Result<(), CliError> {
        let mut progress = match total {
            Some(total) if total >= PROGRESS_FROM_BYTES => {
                Some(Progress::new("Running SQL", Some(total)))
            }
            _ => None,
        };
        let mut pending = String::new();
        let mut line = String::new();
        let mut read = 0u64;
        let result = async {
            loop {
                line.clear();
                let n = input
                    .read_line(&mut line)
                    .map_err(|e| CliError::local(format!("cannot read the SQL input: {e}"), ""))?;
                if n == 0 {
                    break;
                }
                read += n as u64;
                if progress.is_none() && total.is_none() && read >= PROGRESS_FROM_BYTES {
                    // A pipe: its size is unknown until it ends, so progress shows once the
                    // input has proved large.
                    progress = Some(Progress::new("Running SQL", None));
                }
                if let Some(progress) = &progress {
                    progress.set_position(read);
                }
                if statements::split(&pending).rest_is_blank && line.trim_start().starts_with('.') {
                    self.flush().await?;
                    pending.clear();
                    self.dot_command(line.trim()).await?;
                    if self.quit {
                        return Ok(());
                    }
                    continue;
                }
                pending.push_str(&line);
                if line.contains(';') {
                    let split = statements::split(&pending);
                    let rest = split.rest;
                    for statement in split.statements {
                        self.queue(statement.to_string()).await?;
                    }
                    pending.drain(..rest);
                }
            }
            // Text after the last `;`: a statement without one (`db shell shop "select 1"`).
            let split = statements::split(&pending);
            let rest = split.rest;
            let rest_is_blank = split.rest_is_blank;
            for statement in split.statements {
                self.queue(statement.to_string()).await?;
            }
            if !rest_is_blank {
                self.queue(pending[rest..].trim().to_string()).await?;
            }
            self.flush().await
        }
        .await;
        if let Some(progress) = &progress {
            match &result {
                Ok(()) => progress.finish(read),
                Err(_) => progress.abandon(),
            }
        }
        result
    }

    async fn queue(&mut self, statement: String) -> Result<(), CliError> {
        if !self.batch.is_empty()
            && (self.batch.len() >= BATCH_STATEMENTS
                || self.batch_bytes + statement.len() > BATCH_BYTES)
        {
            self.flush().await?;
        }
        self.batch_bytes += statement.len();
        self.batch.push(statement);
        Ok(())
    }

    /// Sends the queued statements as one request and prints what they return.
    async fn flush(&mut self) -> Result<(), CliError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let bytes = std::mem::replace(&mut self.batch_bytes, 0);
        let first = self.statements_sent + 1;
        let sqls: Vec<&str> = batch.iter().map(String::as_str).collect();
        let answer = self.session.run_batch(&sqls).await;
        if self.verbose {
            eprintln!(
                "request {}: statements {first}-{} ({bytes} bytes)",
                self.session.requests_sent,
                first + batch.len() - 1
            );
        }
        match answer {
            Ok(results) => {
                self.statements_sent += batch.len();
                let mut out = std::io::stdout().lock();
                for result in &results {
                    if !result.cols.is_empty() {
                        print_result(&mut out, result, self.mode);
                    }
                }
                Ok(())
            }
            Err(SessionError::Request(e)) => Err(e),
            Err(SessionError::Statement(e)) => {
                let number = first + e.index;
                let rolled_back = if self.session.in_transaction() {
                    "; the open transaction was rolled back"
                } else {
                    ""
                };
                self.session.close().await;
                Err(CliError {
                    message: format!(
                        "statement {number} failed: {}, in `{}`{rolled_back}",
                        e.reason(),
                        batch
                            .get(e.index)
                            .map(|sql| snippet(sql))
                            .unwrap_or_default()
                    ),
                    code: e.code,
                    hint: String::new(),
                })
            }
        }
    }

    async fn interactive(&mut self) -> Result<(), CliError> {
        use rustyline::error::ReadlineError;
        let mut editor = rustyline::DefaultEditor::new()
            .map_err(|e| CliError::local(format!("cannot start the line editor: {e}"), ""))?;
        let history = config_dir().ok().map(|dir| dir.join("shell_history"));
        if let Some(history) = &history {
            if let Some(dir) = history.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = editor.load_history(history);
        }
        eprintln!(
            "Connected to {} at {}.\nEnter \".help\" for usage hints; statements end with \";\".",
            self.plane.name,
            self.plane.url("")
        );
        let mut buffer = String::new();
        loop {
            let prompt = if buffer.trim().is_empty() {
                format!("{}> ", self.plane.name)
            } else {
                format!(
                    "{}...> ",
                    " ".repeat(self.plane.name.len().saturating_sub(3))
                )
            };
            let line = match editor.readline(&prompt) {
                Ok(line) => line,
                Err(ReadlineError::Interrupted) => {
                    buffer.clear();
                    continue;
                }
                Err(ReadlineError::Eof) => break,
                Err(e) => {
                    return Err(CliError::local(format!("cannot read input: {e}"), ""));
                }
            };
            if buffer.trim().is_empty() && line.trim_start().starts_with('.') {
                let _ = editor.add_history_entry(line.trim());
                if let Err(e) = self.dot_command(line.trim()).await {
                    eprintln!("{e}");
                }
                if self.quit {
                    break;
                }
                continue;
            }
            buffer.push_str(&line);
            buffer.push('\n');
            let split = statements::split(&buffer);
            if split.statements.is_empty() || !split.rest_is_blank {
                if split.statements.is_empty() && split.rest_is_blank {
                    buffer.clear();
                }
                continue;
            }
            let _ = editor.add_history_entry(buffer.trim());
            let statements: Vec<String> = split.statements.iter().map(|s| s.to_string()).collect();
            buffer.clear();
            for statement in statements {
                match self.session.run_statement(&statement).await {
                    Ok(result) => {
                        if !result.cols.is_empty() {
                            print_result(&mut std::io::stdout().lock(), &result, self.mode);
                        }
                    }
                    Err(SessionError::Statement(e)) => {
                        eprintln!("Error: {} ({})", e.reason(), e.code);
                        break;
                    }
                    Err(SessionError::Request(e)) => {
                        eprintln!("{e}");
                        break;
                    }
                }
            }
        }
        if let Some(history) = &history {
            let _ = editor.save_history(history);
        }
        Ok(())
    }

    async fn dot_command(&mut self, line: &str) -> Result<(), CliError> {
        let mut words = line.split_whitespace();
        let command = words.next().unwrap_or_default();
        let argument = words.next();
        match command {
            ".quit" | ".exit" | ".q" => {
                self.quit = true;
                Ok(())
            }
            ".help" => {
                println!("{HELP}");
                Ok(())
            }
            ".mode" => match argument {
                None => {
                    println!("current output mode: {}", mode_name(self.mode));
                    Ok(())
                }
                Some(name) => match Mode::from_str(name, true) {
                    Ok(mode) => {
                        self.mode = mode;
                        Ok(())
                    }
                    Err(_) => Err(CliError::local(
                        format!("unknown mode {name:?}"),
                        "use one of table, csv, json, line, list",
                    )),
                },
            },
            ".tables" => {
                let result = self
                    .query(
                        "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name",
                        Vec::new(),
                    )
                    .await?;
                let mut out = std::io::stdout().lock();
                for row in &result.rows {
                    let _ = writeln!(out, "{}", text_of(&row.values[0], ""));
                }
                Ok(())
            }
            ".schema" => {
                let (filter, args) = match argument {
                    Some(table) => (
                        " AND (name = ?1 OR tbl_name = ?1)",
                        vec![Value::Text {
                            value: table.into(),
                        }],
                    ),
                    None => ("", Vec::new()),
                };
                let result = self
                    .query(
                        &format!("SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'{filter} ORDER BY rowid"),
                        args,
                    )
                    .await?;
                let mut out = std::io::stdout().lock();
                for row in &result.rows {
                    let _ = writeln!(out, "{};", text_of(&row.values[0], ""));
                }
                Ok(())
            }
            ".dump" => self.dump().await,
            other => Err(CliError::local(
                format!("unknown command {other}"),
                "enter .help for the list",
            )),
        }
    }

    async fn query(&mut self, sql: &str, args: Vec<Value>) -> Result<StmtResult, CliError> {
        match self.session.execute(sql, args).await {
            Ok(result) => Ok(result),
            Err(SessionError::Request(e)) => Err(e),
            Err(SessionError::Statement(e)) => Err(CliError {
                message: e.reason(),
                code: e.code,
                hint: String::new(),
            }),
        }
    }

    /// `.dump`: the SQL text from the data plane's `GET /dump`, streamed to stdout.
    async fn dump(&mut self) -> Result<(), CliError> {
        let mut response = self
            .plane
            .send("dump", self.plane.request(Method::GET, "dump").await?)
            .await?;
        if !response.status().is_success() {
            return Err(failure_of("dump", response).await);
        }
        let mut out = std::io::stdout().lock();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => out
                    .write_all(&chunk)
                    .map_err(|e| CliError::local(format!("cannot write the dump: {e}"), ""))?,
                Ok(None) => break,
                Err(e) => return Err(self.plane.unreachable("finish the dump", &e)),
            }
        }
        out.flush()
            .map_err(|e| CliError::local(format!("cannot write the dump: {e}"), ""))
    }
}

const HELP: &str = "\
.dump            Print the database as SQL
.exit, .quit     Leave the shell
.help            Show this help
.mode MODE       Print results as table, csv, json, line or list
.schema [TABLE]  Show the CREATE statements (of TABLE and its indexes and triggers)
.tables          List the tables and views

SQL statements end with \";\" and may span several lines.";

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Table => "table",
        Mode::Csv => "csv",
        Mode::Json => "json",
        Mode::Line => "line",
        Mode::List => "list",
    }
}

/// The start of a statement, for an error line that must not echo a whole INSERT.
fn snippet(sql: &str) -> String {
    let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match sql.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &sql[..at]),
        None => sql,
    }
}

/// A value as text; `null` is what NULL prints as.
fn text_of(value: &Value, null: &str) -> String {
    match value {
        Value::None | Value::Null => null.to_string(),
        Value::Integer { value } => value.to_string(),
        Value::Float { value } => value.to_string(),
        Value::Text { value } => value.to_string(),
        Value::Blob { value } => {
            let hex: String = value.iter().map(|b| format!("{b:02X}")).collect();
            format!("X'{hex}'")
        }
    }
}

fn json_of(value: &Value) -> serde_json::Value {
    match value {
        Value::None | Value::Null => serde_json::Value::Null,
        Value::Integer { value } => (*value).into(),
        Value::Float { value } => serde_json::Number::from_f64(*value)
            .map_or(serde_json::Value::Null, serde_json::Value::Number),
        Value::Text { value } => value.to_string().into(),
        Value::Blob { .. } => text_of(value, "").into(),
    }
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) || text.starts_with(' ') || text.ends_with(' ') {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn print_result(out: &mut impl Write, result: &StmtResult, mode: Mode) {
    let _ = out.write_all(render_result(result, mode).as_bytes());
}

fn render_result(result: &StmtResult, mode: Mode) -> String {
    let names: Vec<String> = result
        .cols
        .iter()
        .enumerate()
        .map(|(i, col)| {
            col.name
                .clone()
                .unwrap_or_else(|| format!("column{}", i + 1))
        })
        .collect();
    let mut out = String::new();
    match mode {
        Mode::Table => {
            let headers: Vec<&str> = names.iter().map(String::as_str).collect();
            let rows: Vec<Vec<String>> = result
                .rows
                .iter()
                .map(|row| row.values.iter().map(|v| text_of(v, "NULL")).collect())
                .collect();
            out.push_str(&super::output::render_table(&headers, &rows));
        }
        Mode::Csv => {
            let header: Vec<String> = names.iter().map(|n| csv_field(n)).collect();
            out.push_str(&header.join(","));
            out.push('\n');
            for row in &result.rows {
                let fields: Vec<String> = row
                    .values
                    .iter()
                    .map(|v| csv_field(&text_of(v, "")))
                    .collect();
                out.push_str(&fields.join(","));
                out.push('\n');
            }
        }
        Mode::Json => {
            // Written by hand: a JSON map would sort the columns by name.
            let key = |name: &String| serde_json::to_string(name).expect("strings serialize");
            out.push('[');
            for (i, row) in result.rows.iter().enumerate() {
                out.push_str(if i == 0 { "\n  {" } else { ",\n  {" });
                for (j, (name, value)) in names.iter().zip(&row.values).enumerate() {
                    if j > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&format!("{}: {}", key(name), json_of(value)));
                }
                out.push('}');
            }
            out.push_str(if result.rows.is_empty() {
                "]\n"
            } else {
                "\n]\n"
            });
        }
        Mode::Line => {
            let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
            for (i, row) in result.rows.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                for (name, value) in names.iter().zip(&row.values) {
                    out.push_str(&format!("{name:>width$} = {}\n", text_of(value, "NULL")));
                }
            }
        }
        Mode::List => {
            for row in &result.rows {
                let fields: Vec<String> = row.values.iter().map(|v| text_of(v, "")).collect();
                out.push_str(&fields.join("|"));
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use libsql_hrana::proto::{Col, Row};

    fn result() -> StmtResult {
        StmtResult {
            cols: vec![
                Col {
                    name: Some("id".into()),
                    decltype: None,
                },
                Col {
                    name: Some("name".into()),
                    decltype: None,
                },
            ],
            rows: vec![
                Row {
                    values: vec![
                        Value::Integer { value: 1 },
                        Value::Text {
                            value: "a, \"b\"".into(),
                        },
                    ],
                },
                Row {
                    values: vec![Value::Integer { value: 22 }, Value::Null],
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn every_mode_renders_rows() {
        assert_eq!(
            render_result(&result(), Mode::Table),
            "id  name\n1   a, \"b\"\n22  NULL\n"
        );
        assert_eq!(
            render_result(&result(), Mode::Csv),
            "id,name\n1,\"a, \"\"b\"\"\"\n22,\n"
        );
        assert_eq!(render_result(&result(), Mode::List), "1|a, \"b\"\n22|\n");
        assert_eq!(
            render_result(&result(), Mode::Line),
            "  id = 1\nname = a, \"b\"\n\n  id = 22\nname = NULL\n"
        );
        let text = render_result(&result(), Mode::Json);
        assert!(text.contains(r#"{"id": 1, "name": "a, \"b\""}"#), "{text}");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{"id": 1, "name": "a, \"b\""}, {"id": 22, "name": null}])
        );
    }
}
