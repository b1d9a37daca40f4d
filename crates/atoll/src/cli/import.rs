//! `atoll db import FILE` and `atoll db create NAME --from-file | --from-dump | --from-db
//! [--wait]`.
//!
//! A file import follows the Turso CLI (create with seed `database_upload`, mint a
//! database token, upload with the chunked protocol) and goes further: the file is checked
//! locally first, a file the server would refuse only for its form (rollback journal, not
//! checkpointed, another page size, auto-vacuum) is fixed in a temporary copy instead of
//! refused, chunks that fail for a passing reason are sent again, and when the import fails
//! after the database was created, the database is deleted so no empty one is left behind.

use super::client::{CliError, Client};
use super::data_plane::{failure_of, DataPlane};
use super::progress::{megabytes, Progress};
use super::sql_session::{SessionError, SqlSession};
use atoll_types::databases::{
    CreateDatabaseRequest, CreateDatabaseResponse, DatabaseResponse, DumpUploaded, Seed,
};
use futures_util::StreamExt;
use reqwest::{Method, StatusCode};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// The page size the data plane serves (and its upload check demands).
const PAGE_SIZE: u64 = 4096;

/// Where a new database's data comes from.
pub enum Source {
    /// An SQLite database file, uploaded.
    File(PathBuf),
    /// An SQL dump, uploaded to the platform API and loaded by the server.
    Dump(PathBuf),
    /// A copy of another database of the organization: as it is now, or as it was at an
    /// instant of its restorable window (RFC 3339).
    Database(String, Option<String>),
}

pub struct CreateOptions {
    pub name: String,
    pub group: Option<String>,
    pub size_limit: Option<String>,
    pub source: Option<Source>,
    pub wait: bool,
    /// `remote_encryption`: the key (base64) and the cipher (the server's default when
    /// `None`).
    pub encryption: Option<(String, Option<String>)>,
}

/// `atoll db import FILE`: the database is named `--name`, else after the file without its
/// extension. A derived name is checked here, so the error can say where it came from
/// (`Orders.db` gives `Orders`, which the server would refuse without saying why).
pub fn import_name(file: &Path, name: Option<String>) -> Result<String, CliError> {
    if let Some(name) = name {
        return Ok(name);
    }
    let Some(stem) = file
        .file_stem()
        .and_then(|stem| stem.to_str())
        .filter(|stem| !stem.is_empty())
    else {
        return Err(CliError::local(
            format!("cannot name a database after {}", file.display()),
            "choose the name with `--name NAME`",
        ));
    };
    atoll_types::names::validate_resource_name("database", stem).map_err(|reason| {
        let suggestion = atoll_types::names::slug_from_name(stem);
        let example = if suggestion.is_empty() {
            "NAME".to_string()
        } else {
            suggestion
        };
        CliError::local(
            format!(
                "the name `{stem}`, taken from the file {}, is not a valid database name: {reason}",
                file.display()
            ),
            format!(
                "choose one with `--name`, like `atoll db import {} --name {example}`",
                file.display()
            ),
        )
    })?;
    Ok(stem.to_string())
}

pub async fn create(client: &Client, options: CreateOptions) -> Result<(), CliError> {
    // Everything that can be checked here is, before the server is asked for anything.
    let (seed, upload) = match &options.source {
        None => (None, None),
        Some(Source::File(path)) => {
            let cipher = match &options.encryption {
                None => None,
                Some((_, cipher)) => Some(
                    atoll_storage::encryption::Cipher::from_name(
                        cipher.as_deref().unwrap_or("aes256gcm"),
                    )
                    .map_err(|e| CliError::local(e.to_string(), "use one of the names listed"))?,
                ),
            };
            let prepared = prepare_file(path, cipher)?;
            (
                Some(Seed {
                    kind: "database_upload".into(),
                    ..Default::default()
                }),
                Some(prepared),
            )
        }
        Some(Source::Dump(path)) => {
            check_dump(path)?;
            let dump_url = upload_dump(client, path).await?;
            (
                Some(Seed {
                    kind: "dump".into(),
                    url: Some(dump_url),
                    ..Default::default()
                }),
                None,
            )
        }
        Some(Source::Database(source, timestamp)) => (
            Some(Seed {
                kind: "database".into(),
                name: Some(source.clone()),
                timestamp: timestamp.clone(),
                ..Default::default()
            }),
            None,
        ),
    };

    // The server loads a dump (or copies a database) while it answers the create, which
    // can take a while for a large one: say so rather than sit silent.
    let loading = match &options.source {
        Some(Source::Dump(path)) => Some(Progress::waiting(&format!(
            "Loading {} into {}",
            path.display(),
            options.name
        ))),
        Some(Source::Database(source, None)) => Some(Progress::waiting(&format!(
            "Copying {source} into {}",
            options.name
        ))),
        Some(Source::Database(source, Some(timestamp))) => Some(Progress::waiting(&format!(
            "Restoring {source} as of {timestamp} into {}",
            options.name
        ))),
        _ => None,
    };
    let created: Result<CreateDatabaseResponse, CliError> = client
        .post(
            client.org_url(&["databases"]),
            &CreateDatabaseRequest {
                name: options.name.clone(),
                group: options.group.clone(),
                size_limit: options.size_limit.clone(),
                seed,
                remote_encryption: options.encryption.as_ref().map(|(key, cipher)| {
                    serde_json::json!({"encryption_key": key, "encryption_cipher": cipher})
                }),
                ..Default::default()
            },
        )
        .await;
    if let Some(loading) = &loading {
        match &created {
            Ok(_) => loading.finish_waiting(),
            Err(_) => loading.abandon(),
        }
    }
    let name = created?.database.name;

    if let Some(prepared) = &upload {
        let uploading = async {
            let key = options.encryption.as_ref().map(|(key, _)| key.clone());
            let plane = DataPlane::open(client, &name)
                .await?
                .with_encryption_key(key);
            upload_file(&plane, prepared, &RetryPolicy::from_env()).await
        };
        // Ctrl-C is a failure like any other: the half-created database goes too.
        let uploaded = tokio::select! {
            result = uploading => result,
            _ = tokio::signal::ctrl_c() => Err(CliError::local("interrupted (Ctrl-C)", "")),
        };
        if let Err(error) = uploaded {
            return Err(delete_after_failure(client, &name, error).await);
        }
    }
    if options.wait {
        let key = options.encryption.as_ref().map(|(key, _)| key.clone());
        wait_until_queryable(client, &name, key).await?;
    }
    // Create answers only `DbId`, `Hostname` and `Name` (the contract); the URL a client
    // can use comes with the database itself.
    let database: DatabaseResponse = client.get(client.org_url(&["databases", &name])).await?;
    let url = super::db::client_url(&database.database.http_url);
    match (&options.source, &upload) {
        (Some(Source::File(path)), Some(prepared)) => println!(
            "Created database {name} from {} ({} uploaded) at {}.",
            path.display(),
            megabytes(prepared.size),
            url
        ),
        (Some(Source::Dump(path)), _) => println!(
            "Created database {name} from the dump {} at {}.",
            path.display(),
            url
        ),
        (Some(Source::Database(source, Some(timestamp))), _) => println!(
            "Created database {name} as {source} was at {timestamp}, at {}.",
            url
        ),
        (Some(Source::Database(source, None)), _) => {
            println!("Created database {name} as a copy of {source} at {}.", url)
        }
        _ => println!("Created database {name} at {}.", url),
    }
    Ok(())
}

/// Deletes a database whose import failed and says so in the error.
async fn delete_after_failure(client: &Client, name: &str, mut error: CliError) -> CliError {
    let deleted: Result<serde_json::Value, CliError> =
        client.delete(client.org_url(&["databases", name])).await;
    match deleted {
        Ok(_) => {
            error.message = format!(
                "{}; the import failed, so database {name} was deleted again",
                error.message
            );
        }
        Err(cleanup) => {
            error.message = format!(
                "{}; the import failed and deleting the half-created database {name} failed too ({})",
                error.message, cleanup.message
            );
            error.hint = format!("delete it with `atoll db destroy {name} --yes`");
        }
    }
    error
}

/// A database file ready to upload: the user's file, or a fixed copy of it.
pub struct PreparedFile {
    pub path: PathBuf,
    pub size: u64,
    /// Holds the copy, deleted with it.
    _copy_dir: Option<tempfile::TempDir>,
}

/// What the file header says, as far as the data plane's upload check cares.
struct Header {
    page_size: u64,
    wal: bool,
    auto_vacuum: bool,
    encoding: u32,
    /// The header's page count, when SQLite marked it valid.
    pages: Option<u64>,
    /// Bytes reserved at the end of every page (an upload into an encrypted database
    /// needs the cipher's).
    reserved: usize,
}

fn read_header(path: &Path) -> Result<Option<Header>, CliError> {
    let mut header = Vec::with_capacity(100);
    std::fs::File::open(path)
        .and_then(|file| file.take(100).read_to_end(&mut header))
        .map_err(|e| CliError::local(format!("cannot read {}: {e}", path.display()), ""))?;
    if header.len() < 100 || !header.starts_with(b"SQLite format 3\0") {
        return Ok(None);
    }
    let u16_at = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
    let u32_at = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    Ok(Some(Header {
        page_size: match u16_at(16) {
            1 => 65536,
            n => u64::from(n),
        },
        wal: header[18] == 2 && header[19] == 2,
        auto_vacuum: u32_at(52) != 0,
        encoding: u32_at(56),
        pages: (u32_at(92) == u32_at(24) && u32_at(28) != 0).then(|| u64::from(u32_at(28))),
        reserved: usize::from(header[20]),
    }))
}

/// Checks a database file before anything is created, and prepares a copy the server will
/// accept when the file itself is fine but not in the form the data plane serves.
///
/// For a database encrypted with `cipher`, the file must also reserve the cipher's bytes
/// at the end of every page (Turso's upload contract; the server seals the pages in
/// place): a copy is prepared with them when it does not.
pub fn prepare_file(
    path: &Path,
    cipher: Option<atoll_storage::encryption::Cipher>,
) -> Result<PreparedFile, CliError> {
    let shown = path.display();
    let metadata = std::fs::metadata(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            CliError::local(format!("could not find file {shown}"), "check the path")
        } else {
            CliError::local(format!("cannot read {shown}: {e}"), "")
        }
    })?;
    if !metadata.is_file() {
        return Err(CliError::local(format!("{shown} is not a file"), ""));
    }
    let Some(header) = read_header(path)? else {
        return Err(not_a_database(path));
    };
    if !matches!(header.encoding, 0 | 1) {
        return Err(CliError::local(
            format!("{shown} stores text as UTF-16; Atoll databases are UTF-8"),
            "copy it into a UTF-8 database (sqlite3 old.db .dump | sqlite3 new.db) and import that",
        ));
    }
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| CliError::local(format!("cannot open {shown}: {e}"), ""))?;
    quick_check(&conn, path)?;

    let wal_path = PathBuf::from(format!("{}-wal", path.display()));
    let wal_pending = std::fs::metadata(&wal_path).is_ok_and(|m| m.len() > 0);
    let mut reasons = Vec::new();
    if !header.wal {
        reasons.push("not in WAL mode".to_string());
    }
    if wal_pending {
        reasons.push(format!(
            "not checkpointed ({} holds changes)",
            wal_path.display()
        ));
    }
    if header.page_size != PAGE_SIZE {
        reasons.push(format!(
            "using {}-byte pages (Atoll serves {PAGE_SIZE})",
            header.page_size
        ));
    }
    if header.auto_vacuum {
        reasons.push("using auto_vacuum".to_string());
    }
    if let Some(cipher) = cipher.filter(|c| header.reserved != c.reserved_bytes()) {
        reasons.push(format!(
            "reserving {} bytes per page (an upload encrypted with {} reserves {})",
            header.reserved,
            cipher.name(),
            cipher.reserved_bytes()
        ));
    }
    if header
        .pages
        .is_some_and(|pages| pages * header.page_size != metadata.len())
    {
        reasons.push("not the size its header says (is it being written?)".to_string());
    }
    if reasons.is_empty() {
        return Ok(PreparedFile {
            path: path.to_path_buf(),
            size: metadata.len(),
            _copy_dir: None,
        });
    }

    eprintln!(
        "{shown} is {}: uploading a prepared copy instead (the file itself is not changed).",
        reasons.join(", ")
    );
    let copy_dir = tempfile::Builder::new()
        .prefix("atoll-import-")
        .tempdir()
        .map_err(|e| CliError::local(format!("cannot create a temporary directory: {e}"), ""))?;
    let copy = copy_dir.path().join("import.db");
    let failed = |e: rusqlite::Error| {
        CliError::local(
            format!("cannot prepare a copy of {shown}: {e}"),
            "make sure the temporary directory has room for a copy (set TMPDIR elsewhere if not)",
        )
    };
    // VACUUM INTO writes a consistent, compacted copy, WAL content included, without
    // touching the original.
    conn.execute("VACUUM INTO ?1", [copy.to_string_lossy().as_ref()])
        .map_err(failed)?;
    drop(conn);
    {
        let conn = rusqlite::Connection::open(&copy).map_err(failed)?;
        let page_size: u64 = conn
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .map_err(failed)?;
        let auto_vacuum: i64 = conn
            .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
            .map_err(failed)?;
        if page_size != PAGE_SIZE || auto_vacuum != 0 {
            // Page size and auto-vacuum only change with a VACUUM outside WAL mode.
            conn.execute_batch(&format!(
                "PRAGMA journal_mode=DELETE; PRAGMA page_size={PAGE_SIZE}; PRAGMA auto_vacuum=NONE; VACUUM;"
            ))
            .map_err(failed)?;
        }
        if let Some(cipher) = cipher {
            // Also a VACUUM outside WAL mode (it keeps the rowids).
            conn.execute_batch("PRAGMA journal_mode=DELETE;")
                .map_err(failed)?;
            atoll_storage::encryption::engine::reserve_for_encryption(&conn, cipher)
                .map_err(failed)?;
        }
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .map_err(failed)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(failed(rusqlite::Error::InvalidQuery));
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(failed)?;
    }
    let size = std::fs::metadata(&copy)
        .map_err(|e| CliError::local(format!("cannot read the prepared copy: {e}"), ""))?
        .len();
    Ok(PreparedFile {
        path: copy,
        size,
        _copy_dir: Some(copy_dir),
    })
}

fn quick_check(conn: &rusqlite::Connection, path: &Path) -> Result<(), CliError> {
    let verdict: Result<Vec<String>, rusqlite::Error> = conn
        .prepare("PRAGMA quick_check(5)")
        .and_then(|mut stmt| stmt.query_map([], |row| row.get::<_, String>(0))?.collect());
    match verdict {
        Ok(lines) if lines == ["ok"] => Ok(()),
        Ok(lines) => Err(CliError::local(
            format!(
                "{} is corrupt (quick_check: {})",
                path.display(),
                lines.join("; ").replace('\n', "; ")
            ),
            "repair it (sqlite3 old.db .recover | sqlite3 new.db) and import the repaired copy",
        )),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::NotADatabase =>
        {
            Err(not_a_database(path))
        }
        Err(e) => Err(CliError::local(
            format!("{} cannot be checked: {e}", path.display()),
            "close any program that has it open and try again",
        )),
    }
}

fn not_a_database(path: &Path) -> CliError {
    if looks_like_sql(path) {
        CliError::local(
            format!(
                "{} is an SQL dump, not an SQLite database file",
                path.display()
            ),
            format!(
                "create the database from it with `atoll db create NAME --from-dump {}`",
                path.display()
            ),
        )
    } else {
        CliError::local(
            format!("{} is not an SQLite database file", path.display()),
            "",
        )
    }
}

fn looks_like_sql(path: &Path) -> bool {
    let mut start = Vec::with_capacity(512);
    if std::fs::File::open(path)
        .and_then(|file| file.take(512).read_to_end(&mut start))
        .is_err()
    {
        return false;
    }
    let text = String::from_utf8_lossy(&start).to_ascii_uppercase();
    let text = text.trim_start();
    ["PRAGMA", "BEGIN", "CREATE", "INSERT", "--"]
        .iter()
        .any(|keyword| text.starts_with(keyword))
}

fn check_dump(path: &Path) -> Result<(), CliError> {
    let shown = path.display();
    let metadata = std::fs::metadata(path)
        .map_err(|e| CliError::local(format!("cannot read {shown}: {e}"), "check the path"))?;
    if metadata.len() == 0 {
        return Err(CliError::local(format!("{shown} is empty"), ""));
    }
    if read_header(path)?.is_some() {
        return Err(CliError::local(
            format!("{shown} is an SQLite database file, not an SQL dump"),
            format!(
                "use `atoll db create NAME --from-file {shown}` (or `atoll db import {shown}`)"
            ),
        ));
    }
    Ok(())
}

/// `POST …/databases/dumps` (multipart `file`, streamed from disk) → the URL of the dump.
async fn upload_dump(client: &Client, path: &Path) -> Result<String, CliError> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| CliError::local(format!("cannot read {}: {e}", path.display()), ""))?;
    let len = file
        .metadata()
        .await
        .map_err(|e| CliError::local(format!("cannot read {}: {e}", path.display()), ""))?
        .len();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dump.sql".into());
    let progress = Progress::new(&format!("Uploading {file_name}"), Some(len));
    let sent = Arc::new(AtomicU64::new(0));
    let counted = {
        let progress = progress.clone();
        let sent = Arc::clone(&sent);
        tokio_util::io::ReaderStream::new(file).inspect(move |piece| {
            if let Ok(bytes) = piece {
                let done =
                    sent.fetch_add(bytes.len() as u64, Ordering::Relaxed) + bytes.len() as u64;
                progress.set_position(done);
            }
        })
    };
    let part =
        reqwest::multipart::Part::stream_with_length(reqwest::Body::wrap_stream(counted), len)
            .file_name(file_name)
            .mime_str("application/sql")
            .expect("valid MIME type");
    let form = reqwest::multipart::Form::new().part("file", part);
    let url = client.org_url(&["databases", "dumps"]);
    let request = client.request(Method::POST, url.clone()).multipart(form);
    match client.send_prepared::<DumpUploaded>(url, request).await {
        Ok(uploaded) => {
            progress.finish(len);
            Ok(uploaded.dump_url)
        }
        Err(e) => {
            progress.abandon();
            Err(e)
        }
    }
}

/// How chunks that fail for a passing reason are retried.
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub retries: u32,
    /// Delay before the first retry; doubled each time, up to `max_delay`.
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// The defaults, or `ATOLL_UPLOAD_RETRIES` and `ATOLL_UPLOAD_RETRY_DELAY_MS` (tests and
    /// impatient scripts make them small).
    pub fn from_env() -> RetryPolicy {
        let number = |key: &str| std::env::var(key).ok().and_then(|v| v.parse::<u64>().ok());
        RetryPolicy {
            retries: number("ATOLL_UPLOAD_RETRIES").map_or(8, |n| n.min(100) as u32),
            base_delay: Duration::from_millis(number("ATOLL_UPLOAD_RETRY_DELAY_MS").unwrap_or(500)),
            max_delay: Duration::from_secs(30),
        }
    }

    fn delay(&self, retry: u32) -> Duration {
        let doubled = self
            .base_delay
            .saturating_mul(1u32.checked_shl(retry.min(20)).unwrap_or(u32::MAX));
        let capped = doubled.min(self.max_delay);
        // A little jitter so many clients retrying at once do not stay in step.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        capped + capped.mul_f64(f64::from(nanos % 1000) / 4000.0)
    }
}

/// Whether a failed request is worth sending again: the server was unreachable, busy, or
/// failed on its side — not a refusal of the request itself.
fn is_transient(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}

#[derive(serde::Deserialize)]
struct UploadStarted {
    chunk_size: u64,
    upload_id: String,
}

/// The chunked upload: start, every chunk (retried), finalize.
pub async fn upload_file(
    plane: &DataPlane<'_>,
    file: &PreparedFile,
    retry: &RetryPolicy,
) -> Result<(), CliError> {
    let started = Instant::now();
    let response = plane
        .send(
            "start the upload",
            plane
                .request(Method::PUT, "v2/upload/start")
                .await?
                .json(&serde_json::json!({ "db_size_bytes": file.size })),
        )
        .await?;
    if !response.status().is_success() {
        return Err(failure_of("the server refused the upload", response).await);
    }
    let UploadStarted {
        chunk_size,
        upload_id,
    } = response
        .json()
        .await
        .map_err(|e| CliError::local(format!("unexpected answer to the upload start: {e}"), ""))?;
    if chunk_size == 0 {
        return Err(CliError::local("the server offered chunks of 0 bytes", ""));
    }
    let label = format!("Uploading {}", plane.name);
    let progress = Progress::new(&label, Some(file.size));
    let chunks = ChunkSender {
        plane,
        path: &file.path,
        upload_id: &upload_id,
        progress: &progress,
        retry,
    };
    let mut confirmed = 0u64;
    for n in 0..file.size.div_ceil(chunk_size) {
        let chunk = Chunk {
            n,
            offset: n * chunk_size,
            len: chunk_size.min(file.size - n * chunk_size),
        };
        if let Err(e) = chunks.send(&chunk, confirmed).await {
            progress.abandon();
            return Err(e);
        }
        confirmed += chunk.len;
        progress.set_position(confirmed);
    }
    // Not retried: once the server has installed the file a second finalize would fail,
    // and the database would be deleted although the import worked.
    let response = plane
        .send(
            "finalize the upload",
            plane
                .request(Method::PUT, &format!("v2/upload/{upload_id}/finalize"))
                .await?
                .header(reqwest::header::CONTENT_TYPE, "application/json"),
        )
        .await;
    let response = match response {
        Ok(response) if response.status().is_success() => response,
        Ok(response) => {
            progress.abandon();
            return Err(failure_of("the server refused the uploaded file", response).await);
        }
        Err(e) => {
            progress.abandon();
            return Err(e);
        }
    };
    drop(response);
    progress.finish(file.size);
    tracing::debug!(elapsed = ?started.elapsed(), "upload done");
    Ok(())
}

/// What every chunk request of one upload shares.
struct ChunkSender<'a> {
    plane: &'a DataPlane<'a>,
    path: &'a Path,
    upload_id: &'a str,
    progress: &'a Progress,
    retry: &'a RetryPolicy,
}

/// Chunk `n`: bytes `offset..offset + len` of the file.
struct Chunk {
    n: u64,
    offset: u64,
    len: u64,
}

impl ChunkSender<'_> {
    /// Sends one chunk, again after a passing failure; `confirmed` bytes before it have
    /// arrived.
    async fn send(&self, chunk: &Chunk, confirmed: u64) -> Result<(), CliError> {
        let ChunkSender {
            plane,
            path,
            upload_id,
            progress,
            retry,
        } = *self;
        let Chunk { n, offset, len } = *chunk;
        let what = format!("upload chunk {n}");
        let mut attempt = 0u32;
        loop {
            // Read from the file again on every attempt, streamed: a chunk is never held whole.
            let mut file = tokio::fs::File::open(path)
                .await
                .map_err(|e| CliError::local(format!("cannot read {}: {e}", path.display()), ""))?;
            file.seek(std::io::SeekFrom::Start(offset))
                .await
                .map_err(|e| CliError::local(format!("cannot read {}: {e}", path.display()), ""))?;
            let sent = Arc::new(AtomicU64::new(0));
            let body = {
                let progress = progress.clone();
                let sent = Arc::clone(&sent);
                tokio_util::io::ReaderStream::new(file.take(len)).inspect(move |piece| {
                    if let Ok(bytes) = piece {
                        let in_chunk = sent.fetch_add(bytes.len() as u64, Ordering::Relaxed)
                            + bytes.len() as u64;
                        progress.set_position(confirmed + in_chunk);
                    }
                })
            };
            let request = plane
                .request(Method::PUT, &format!("v2/upload/{upload_id}/chunk/{n}"))
                .await?
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .header(reqwest::header::CONTENT_LENGTH, len)
                .body(reqwest::Body::wrap_stream(body));
            let outcome = match request.send().await {
                Ok(response) if response.status().is_success() => return Ok(()),
                Ok(response) if is_transient(response.status()) => {
                    let status = response.status();
                    let error = failure_of(&what, response).await;
                    tracing::debug!(%status, "chunk {n} failed: {error}");
                    error
                }
                Ok(response) => return Err(failure_of(&what, response).await),
                Err(e) => plane.unreachable(&what, &e),
            };
            if attempt >= retry.retries {
                let mut error = outcome;
                error.message = format!("{} (after {} attempts)", error.message, attempt + 1);
                return Err(error);
            }
            let delay = retry.delay(attempt);
            attempt += 1;
            eprintln!(
                "{what} failed ({}); retrying in {:.1} s (attempt {} of {})",
                outcome.message,
                delay.as_secs_f64(),
                attempt + 1,
                retry.retries + 1
            );
            progress.set_position(confirmed);
            tokio::time::sleep(delay).await;
        }
    }
}

/// `--wait`: until the database answers a query over the data plane, or a clear timeout.
async fn wait_until_queryable(
    client: &Client,
    name: &str,
    encryption_key: Option<String>,
) -> Result<(), CliError> {
    const TIMEOUT: Duration = Duration::from_secs(60);
    let deadline = Instant::now() + TIMEOUT;
    let mut last_error;
    loop {
        let attempt = async {
            let plane = DataPlane::open(client, name)
                .await?
                .with_encryption_key(encryption_key.clone());
            let mut session = SqlSession::new(&plane);
            let answered = session.execute("SELECT 1", Vec::new()).await;
            session.close().await;
            match answered {
                Ok(_) => Ok(()),
                Err(SessionError::Request(e)) => Err(e),
                Err(SessionError::Statement(e)) => {
                    Err(CliError::local(format!("{} ({})", e.reason(), e.code), ""))
                }
            }
        }
        .await;
        match attempt {
            Ok(()) => return Ok(()),
            Err(e) => last_error = e,
        }
        if Instant::now() >= deadline {
            return Err(CliError::local(
                format!(
                    "database {name} was created but did not answer queries within {} s (last error: {})",
                    TIMEOUT.as_secs(),
                    last_error.message
                ),
                format!("check it with `atoll db show {name}`, then try `atoll db shell {name} \"select 1\"`"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_double_up_to_the_cap() {
        let policy = RetryPolicy {
            retries: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
        };
        // Jitter adds less than a quarter (in whole milliseconds it can round past
        // `low + low / 4`, which made this test fail now and then).
        let within = |d: Duration, low: u64| {
            let low = Duration::from_millis(low);
            d >= low && d <= low.mul_f64(1.25)
        };
        assert!(within(policy.delay(0), 100));
        assert!(within(policy.delay(1), 200));
        assert!(within(policy.delay(2), 350));
        assert!(within(policy.delay(30), 350));
    }

    #[test]
    fn transient_failures_are_the_retryable_ones() {
        for status in [500, 502, 503, 408, 429] {
            assert!(is_transient(StatusCode::from_u16(status).unwrap()));
        }
        for status in [400, 401, 404, 409, 413] {
            assert!(!is_transient(StatusCode::from_u16(status).unwrap()));
        }
    }

    #[test]
    fn rollback_journal_files_are_prepared_as_wal_copies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shop.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "PRAGMA page_size=8192; CREATE TABLE t(x); INSERT INTO t VALUES (1), (2);",
            )
            .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let prepared = prepare_file(&path, None).unwrap();
        assert_ne!(prepared.path, path);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "the original is untouched"
        );
        let header = read_header(&prepared.path).unwrap().unwrap();
        assert!(header.wal);
        assert_eq!(header.page_size, PAGE_SIZE);
        assert_eq!(prepared.size % PAGE_SIZE, 0);
        let conn = rusqlite::Connection::open(&prepared.path).unwrap();
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, 2);
        assert_eq!(import_name(&path, None).unwrap(), "shop");
    }

    #[test]
    fn dumps_and_other_files_are_refused_before_any_request() {
        let dir = tempfile::tempdir().unwrap();
        let dump = dir.path().join("dump.sql");
        std::fs::write(
            &dump,
            "PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\nCOMMIT;\n",
        )
        .unwrap();
        let error = prepare_file(&dump, None).err().unwrap().to_string();
        assert!(
            error.contains("SQL dump") && error.contains("--from-dump"),
            "{error}"
        );
        let other = dir.path().join("notes.txt");
        std::fs::write(&other, "hello").unwrap();
        let error = prepare_file(&other, None).err().unwrap().to_string();
        assert!(error.contains("not an SQLite database"), "{error}");
        let error = prepare_file(&dir.path().join("missing.db"), None)
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("could not find file"), "{error}");
    }
}

/// The upload against a stand-in server whose chunk route fails on purpose, to see retries
/// resend exactly the bytes that were lost.
#[cfg(test)]
mod upload_tests {
    use super::*;
    use atoll_types::databases::Database;
    use axum::extract::{Path as UrlPath, State};
    use axum::http::StatusCode as Status;
    use axum::routing::{get, post, put};
    use axum::{Json, Router};
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    const CHUNK: u64 = 4096;

    #[derive(Default)]
    struct Server {
        /// How many times each chunk is still to fail, with which status.
        failures: Mutex<BTreeMap<u64, (u32, u16)>>,
        attempts: Mutex<BTreeMap<u64, u32>>,
        received: Mutex<BTreeMap<u64, Vec<u8>>>,
        finalized: Mutex<bool>,
    }

    async fn serve(server: Arc<Server>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let http_url = format!("{base}/db/shop-admin/");
        let app = Router::new()
            .route(
                "/v1/databases/{name}",
                get(move |UrlPath(name): UrlPath<String>| async move {
                    Json(serde_json::json!({ "database": database(&name, &http_url) }))
                }),
            )
            .route(
                "/v1/databases/{name}/auth/tokens",
                post(|| async { Json(serde_json::json!({ "jwt": "token" })) }),
            )
            .route(
                "/db/shop-admin/v2/upload/start",
                put(|| async {
                    Json(serde_json::json!({ "chunk_size": CHUNK, "upload_id": "u1" }))
                }),
            )
            .route(
                "/db/shop-admin/v2/upload/u1/chunk/{n}",
                put(
                    |State(server): State<Arc<Server>>,
                     UrlPath(n): UrlPath<u64>,
                     body: axum::body::Bytes| async move {
                        *server.attempts.lock().unwrap().entry(n).or_default() += 1;
                        if let Some((left, status)) = server.failures.lock().unwrap().get_mut(&n) {
                            if *left > 0 {
                                *left -= 1;
                                return (Status::from_u16(*status).unwrap(), "injected failure");
                            }
                        }
                        server.received.lock().unwrap().insert(n, body.to_vec());
                        (Status::OK, "{}")
                    },
                ),
            )
            .route(
                "/db/shop-admin/v2/upload/u1/finalize",
                put(|State(server): State<Arc<Server>>| async move {
                    *server.finalized.lock().unwrap() = true;
                    Json(serde_json::json!({}))
                }),
            )
            .with_state(server);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        base
    }

    fn database(name: &str, http_url: &str) -> Database {
        Database {
            name: name.into(),
            db_id: "id".into(),
            hostname: format!("{name}-admin.localhost"),
            block_reads: false,
            block_writes: false,
            allow_attach: false,
            regions: vec!["local".into()],
            primary_region: "local".into(),
            kind: "logical".into(),
            version: "test".into(),
            group: "default".into(),
            is_schema: false,
            schema: String::new(),
            sleeping: false,
            archived: false,
            delete_protection: false,
            parent: None,
            state: "awaiting_upload".into(),
            http_url: http_url.into(),
            encryption_cipher: None,
        }
    }

    fn file_of(pages: u64) -> (tempfile::TempDir, PreparedFile, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file.db");
        let bytes: Vec<u8> = (0..pages * CHUNK).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let prepared = PreparedFile {
            path,
            size: bytes.len() as u64,
            _copy_dir: None,
        };
        (dir, prepared, bytes)
    }

    fn quick_retries(retries: u32) -> RetryPolicy {
        RetryPolicy {
            retries,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        }
    }

    #[tokio::test]
    async fn failed_chunks_are_sent_again_until_the_file_is_whole() {
        let server = Arc::new(Server::default());
        server
            .failures
            .lock()
            .unwrap()
            .extend([(0, (1, 503)), (2, (2, 429)), (3, (1, 408))]);
        let base = serve(Arc::clone(&server)).await;
        let client = Client::with(base, Some("platform".into()), String::new()).unwrap();
        let plane = DataPlane::open(&client, "shop").await.unwrap();
        let (_dir, file, bytes) = file_of(4);

        upload_file(&plane, &file, &quick_retries(3)).await.unwrap();

        let received: Vec<u8> = server
            .received
            .lock()
            .unwrap()
            .values()
            .flatten()
            .copied()
            .collect();
        assert_eq!(received, bytes, "every chunk arrived whole, in its place");
        let attempts = server.attempts.lock().unwrap().clone();
        assert_eq!(attempts, BTreeMap::from([(0, 2), (1, 1), (2, 3), (3, 2)]));
        assert!(*server.finalized.lock().unwrap());
    }

    #[tokio::test]
    async fn refusals_are_not_retried_and_retries_run_out() {
        let server = Arc::new(Server::default());
        server.failures.lock().unwrap().extend([(0, (1, 400))]);
        let base = serve(Arc::clone(&server)).await;
        let client = Client::with(base, Some("platform".into()), String::new()).unwrap();
        let plane = DataPlane::open(&client, "shop").await.unwrap();
        let (_dir, file, _) = file_of(2);
        let error = upload_file(&plane, &file, &quick_retries(3))
            .await
            .unwrap_err();
        assert!(error.message.contains("upload chunk 0"), "{error}");
        assert_eq!(server.attempts.lock().unwrap()[&0], 1, "a 400 is final");

        server.failures.lock().unwrap().insert(0, (10, 502));
        let error = upload_file(&plane, &file, &quick_retries(2))
            .await
            .unwrap_err();
        assert!(error.message.contains("after 3 attempts"), "{error}");
        assert!(!*server.finalized.lock().unwrap());
    }
}
