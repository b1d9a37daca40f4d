//! The CLI's data commands driven as a user would: `db import`, `db create --from-…`,
//! `db export` and `db shell`, the built binary against a running `atoll dev`.

use rusqlite::Connection;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{start_dev, Server, BIN};

/// A fresh temporary directory, created.
fn temp_dir(name: &str) -> PathBuf {
    let dir = support::temp_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running `atoll dev` and a client logged in to it; all removed when dropped.
struct Setup {
    _server: Server,
    /// The client's settings directory.
    config: PathBuf,
    /// Scratch space for the files the tests import and export.
    files: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        for dir in [&self.config, &self.files] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn start(name: &str) -> Setup {
    let server = start_dev(&format!("{name}-server")).await;
    let (url, token) = (server.url.clone(), server.admin_token());
    let setup = Setup {
        _server: server,
        config: temp_dir(&format!("{name}-config")),
        files: temp_dir(&format!("{name}-files")),
    };
    setup.ok(&["auth", "login", "--api-url", &url, "--token", &token]);
    setup
}

impl Setup {
    /// Runs the client with `stdin` (a file, or nothing).
    fn run(&self, args: &[&str], stdin: Option<&Path>) -> Output {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(&self.files)
            .env("ATOLL_CONFIG_DIR", &self.config)
            .env_remove("ATOLL_API_URL")
            .env_remove("ATOLL_API_TOKEN")
            // Retried chunks wait milliseconds, not seconds.
            .env("ATOLL_UPLOAD_RETRY_DELAY_MS", "10");
        match stdin {
            Some(path) => command.stdin(std::fs::File::open(path).unwrap()),
            None => command.stdin(Stdio::null()),
        };
        command.output().expect("run atoll")
    }

    /// A command that must succeed: its stdout and stderr.
    fn ok_with(&self, args: &[&str], stdin: Option<&Path>) -> (String, String) {
        let output = self.run(args, stdin);
        let stdout = String::from_utf8(output.stdout).unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(
            output.status.success(),
            "atoll {args:?} failed: {stderr}\nstdout: {stdout}"
        );
        (stdout, stderr)
    }

    /// A command that must succeed, with `input` written to its stdin through a pipe (whose
    /// size, unlike a file's, the command cannot know in advance): its stderr.
    fn ok_piped(&self, args: &[&str], input: &[u8]) -> String {
        use std::io::Write;
        let mut child = Command::new(BIN)
            .args(args)
            .current_dir(&self.files)
            .env("ATOLL_CONFIG_DIR", &self.config)
            .env_remove("ATOLL_API_URL")
            .env_remove("ATOLL_API_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run atoll");
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input).unwrap());
        let output = child.wait_with_output().unwrap();
        writer.join().unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(output.status.success(), "atoll {args:?} failed: {stderr}");
        stderr
    }

    fn ok(&self, args: &[&str]) -> String {
        self.ok_with(args, None).0
    }

    /// A command that must fail with exit code 1: the `Error:` line it ends with.
    fn fails(&self, args: &[&str], stdin: Option<&Path>) -> String {
        let output = self.run(args, stdin);
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(
            output.status.code(),
            Some(1),
            "atoll {args:?} should fail: {stderr}"
        );
        let last = stderr.lines().last().unwrap_or_default().to_string();
        assert!(last.starts_with("Error: "), "{stderr}");
        last
    }

    fn file(&self, name: &str) -> PathBuf {
        self.files.join(name)
    }

    /// One value from a one-shot query, in list mode.
    fn scalar(&self, db: &str, sql: &str) -> String {
        self.ok(&["db", "shell", db, "--mode", "list", sql])
            .trim()
            .to_string()
    }

    fn database_names(&self) -> Vec<String> {
        let list: Value = serde_json::from_str(&self.ok(&["db", "list", "--json"])).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .map(|db| db["Name"].as_str().unwrap().to_string())
            .collect()
    }
}

/// Percentages of the plain progress lines labelled `label`, and whether a final
/// `done` line with a rate followed them.
fn progress_lines(stderr: &str, label: &str) -> (Vec<u64>, bool) {
    let prefix = format!("{label}: ");
    let mut percents = Vec::new();
    let mut done = false;
    for line in stderr.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        if let Some((percent, _)) = rest.split_once("% (") {
            assert!(rest.ends_with("B/s)"), "{line}");
            percents.push(percent.parse().unwrap());
        } else if rest.starts_with("done, ") && rest.ends_with("B/s)") {
            done = true;
        }
    }
    (percents, done)
}

const ROWS: i64 = 200_000;

/// A ~50 MB SQLite file in rollback-journal mode (SQLite's default), so the import has to
/// prepare a WAL copy.
fn generate_large_database(path: &Path) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=DELETE;
         CREATE TABLE items(id INTEGER PRIMARY KEY, label TEXT NOT NULL, payload BLOB NOT NULL);
         CREATE INDEX items_label ON items(label);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
         INSERT INTO items SELECT i, 'item-' || i, randomblob(190) FROM n;"
    ))
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_file_is_imported_with_progress_and_exported_back() {
    let setup = start("cli-import").await;
    // Not in the working directory, where the export writes `inventory.db` by default.
    std::fs::create_dir(setup.file("source")).unwrap();
    let source = setup.file("source/inventory.db");
    generate_large_database(&source);
    let size = std::fs::metadata(&source).unwrap().len();
    assert!(size > 45_000_000, "{size} bytes");
    let original = std::fs::read(&source).unwrap();

    // `db import` names the database after the file and uploads a WAL copy in chunks.
    let (stdout, stderr) = setup.ok_with(&["db", "import", source.to_str().unwrap()], None);
    assert!(
        stdout.contains("Created database inventory from"),
        "{stdout}"
    );
    assert!(
        stderr.contains("not in WAL mode") && stderr.contains("prepared copy"),
        "{stderr}"
    );
    let (percents, done) = progress_lines(&stderr, "Uploading inventory");
    assert!(
        percents.len() >= 3 && percents.windows(2).all(|w| w[0] < w[1]),
        "progress lines expected every 10%: {stderr}"
    );
    assert!(done, "a final progress line with the rate: {stderr}");
    assert_eq!(
        std::fs::read(&source).unwrap(),
        original,
        "the user's file is not changed"
    );

    // Every row arrived.
    assert_eq!(
        setup.scalar("inventory", "select count(*) from items"),
        ROWS.to_string()
    );
    let expected: String = {
        let conn = Connection::open(&source).unwrap();
        conn.query_row(
            "select sum(length(payload)) || ':' || sum(id) || ':' || max(label) from items",
            [],
            |row| row.get(0),
        )
        .unwrap()
    };
    assert_eq!(
        setup.scalar(
            "inventory",
            "select sum(length(payload)) || ':' || sum(id) || ':' || max(label) from items"
        ),
        expected
    );

    // Export: the same rows, in a sound file, with progress.
    let exported = setup.file("exported.db");
    let (stdout, stderr) = setup.ok_with(
        &[
            "db",
            "export",
            "inventory",
            "--output",
            exported.to_str().unwrap(),
        ],
        None,
    );
    assert!(stdout.contains("Exported database inventory"), "{stdout}");
    let (percents, done) = progress_lines(&stderr, "Exporting inventory");
    assert!(percents.len() >= 3 && done, "{stderr}");
    {
        let conn = Connection::open(&exported).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        conn.execute("ATTACH ?1 AS source", [source.to_str().unwrap()])
            .unwrap();
        let differing: i64 = conn
            .query_row(
                "SELECT (SELECT count(*) FROM (SELECT * FROM items EXCEPT SELECT * FROM source.items))
                      + (SELECT count(*) FROM (SELECT * FROM source.items EXCEPT SELECT * FROM items))",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(differing, 0, "the export holds exactly the imported rows");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM items", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, ROWS);
    }
    // An existing file is not replaced without --overwrite; the default name is NAME.db.
    let line = setup.fails(
        &[
            "db",
            "export",
            "inventory",
            "--output",
            exported.to_str().unwrap(),
        ],
        None,
    );
    assert!(line.contains("already exists"), "{line}");
    setup.ok(&["db", "export", "inventory"]);
    assert!(setup.file("inventory.db").exists());
    let leftovers: Vec<_> = std::fs::read_dir(&setup.files)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Ctrl-C in the middle of the upload: the half-created database is deleted too.
    let interrupted = setup.file("source/interrupted.db");
    std::fs::copy(&source, &interrupted).unwrap();
    let mut child = Command::new(BIN)
        .args(["db", "import", interrupted.to_str().unwrap()])
        .current_dir(&setup.files)
        .env("ATOLL_CONFIG_DIR", &setup.config)
        .env_remove("ATOLL_API_URL")
        .env_remove("ATOLL_API_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr_lines = Vec::new();
    {
        use std::io::BufRead;
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut signalled = false;
        for line in stderr.lines() {
            let line = line.unwrap();
            // The first progress line: the database exists and chunks are on their way.
            if !signalled && line.starts_with("Uploading interrupted: ") {
                let status = Command::new("kill")
                    .args(["-INT", &child.id().to_string()])
                    .status()
                    .unwrap();
                assert!(status.success());
                signalled = true;
            }
            stderr_lines.push(line);
        }
    }
    let status = child.wait().unwrap();
    let last = stderr_lines.last().cloned().unwrap_or_default();
    assert_eq!(status.code(), Some(1), "{stderr_lines:?}");
    assert!(
        last.contains("interrupted") && last.contains("database interrupted was deleted again"),
        "{stderr_lines:?}"
    );
    assert!(!setup.database_names().contains(&"interrupted".to_string()));

    // `--from-file` with an explicit name works the same way.
    let small = setup.file("small.db");
    {
        let conn = Connection::open(&small).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1), (2), (3);
             PRAGMA wal_checkpoint(TRUNCATE);",
        )
        .unwrap();
    }
    let (stdout, stderr) = setup.ok_with(
        &[
            "db",
            "create",
            "from-file",
            "--from-file",
            small.to_str().unwrap(),
            "--wait",
        ],
        None,
    );
    assert!(stdout.contains("Created database from-file"), "{stdout}");
    assert!(
        !stderr.contains("prepared copy"),
        "a WAL, checkpointed file is uploaded as it is: {stderr}"
    );
    assert_eq!(setup.scalar("from-file", "select sum(x) from t"), "6");
}

/// A dump that fails names the statement as a reader of the file counts it (from 1, its
/// `BEGIN` included), quotes it on one line, and doubles no spaces.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_dump_names_its_statement_counted_from_one() {
    let setup = start("cli-dump-error").await;
    for (file, sql, expected) in [
        (
            "missing-table.sql",
            "BEGIN TRANSACTION;\nCREATE TABLE t(x);\nINSERT INTO t VALUES (1);\nINSERT INTO nope\n  VALUES (1);\nCOMMIT;\n",
            "the dump failed to load at statement 4: no such table: nope",
        ),
        (
            "syntax.sql",
            "SELEC 1;\n",
            "the dump failed to load at statement 1 (SELEC 1;): near \"SELEC\": syntax error",
        ),
    ] {
        std::fs::write(setup.file(file), sql).unwrap();
        let line = setup.fails(&["db", "create", "broken", "--from-dump", file], None);
        assert!(line.contains(expected), "{line}");
        assert!(!line.contains("  "), "doubled spaces: {line}");
    }
}

/// `db import` names the database after the file; a file whose name is no valid database
/// name (`Orders.db`) is refused before anything is created, with the name it derived and
/// `--name` in the error, and `--name` imports it.
#[tokio::test(flavor = "multi_thread")]
async fn import_names_the_database_after_the_file_or_name() {
    let setup = start("cli-import-name").await;
    let file = setup.file("Orders.db");
    {
        let conn = Connection::open(&file).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (7);
             PRAGMA wal_checkpoint(TRUNCATE);",
        )
        .unwrap();
    }
    let line = setup.fails(&["db", "import", "Orders.db"], None);
    assert!(
        line.contains("the name `Orders`, taken from the file Orders.db")
            && line.contains("lowercase")
            && line.contains("`atoll db import Orders.db --name orders`"),
        "{line}"
    );
    assert!(setup.database_names().is_empty());

    let (stdout, _) = setup.ok_with(&["db", "import", "Orders.db", "--name", "orders"], None);
    assert!(stdout.contains("Created database orders from"), "{stdout}");
    assert_eq!(setup.scalar("orders", "select x from t"), "7");
}

/// `db create --remote-encryption-key` and `db shell --remote-encryption-key`: the shell
/// sends the key with every request; without it the server refuses, and says why.
#[tokio::test(flavor = "multi_thread")]
async fn an_encrypted_database_is_created_and_queried_with_its_key() {
    let setup = start("cli-encryption").await;
    let key = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="; // bytes 1..=32
    setup.ok(&[
        "db",
        "create",
        "vault",
        "--remote-encryption-key",
        key,
        "--remote-encryption-cipher",
        "chacha20poly1305",
        "--wait",
    ]);
    let shell = |sql: &str| {
        setup
            .ok(&[
                "db",
                "shell",
                "vault",
                "--mode",
                "list",
                "--remote-encryption-key",
                key,
                sql,
            ])
            .trim()
            .to_string()
    };
    shell("CREATE TABLE secrets (v TEXT)");
    shell("INSERT INTO secrets VALUES ('kept in the clear nowhere')");
    assert_eq!(shell("SELECT v FROM secrets"), "kept in the clear nowhere");
    let dump = setup.ok(&[
        "db",
        "shell",
        "vault",
        "--remote-encryption-key",
        key,
        ".dump",
    ]);
    assert!(
        dump.contains("INSERT INTO secrets VALUES('kept in the clear nowhere')")
            || dump.contains("kept in the clear nowhere"),
        "{dump}"
    );
    let refused = setup.fails(&["db", "shell", "vault", "SELECT v FROM secrets"], None);
    assert!(refused.contains("is encrypted"), "{refused}");
    let wrong = setup.fails(
        &[
            "db",
            "shell",
            "vault",
            "--remote-encryption-key",
            "ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICA=",
            "SELECT v FROM secrets",
        ],
        None,
    );
    assert!(wrong.contains("not the key"), "{wrong}");

    // The file export, with the key: a plain SQLite file, decrypted by the server.
    let exported = setup.files.join("vault-export.db");
    setup.ok(&[
        "db",
        "export",
        "vault",
        "--output",
        exported.to_str().unwrap(),
        "--remote-encryption-key",
        key,
    ]);
    let conn = Connection::open(&exported).unwrap();
    let v: String = conn
        .query_row("SELECT v FROM secrets", [], |row| row.get(0))
        .unwrap();
    assert_eq!(v, "kept in the clear nowhere");
    drop(conn);

    // A file uploaded into an encrypted database: prepared with the reserved bytes an
    // encrypted page needs (the file itself untouched), sealed by the server.
    let file = setup.files.join("plain-secrets.db");
    {
        let conn = Connection::open(&file).unwrap();
        conn.execute_batch(
            "CREATE TABLE notes(n TEXT); INSERT INTO notes VALUES ('uploaded in the clear, kept sealed');",
        )
        .unwrap();
    }
    let original = std::fs::read(&file).unwrap();
    setup.ok(&[
        "db",
        "create",
        "vault-file",
        "--from-file",
        file.to_str().unwrap(),
        "--remote-encryption-key",
        key,
        "--remote-encryption-cipher",
        "chacha20poly1305",
        "--wait",
    ]);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        original,
        "the user's file is not changed"
    );
    let read = setup.ok(&[
        "db",
        "shell",
        "vault-file",
        "--mode",
        "list",
        "--remote-encryption-key",
        key,
        "SELECT n FROM notes",
    ]);
    assert_eq!(read.trim(), "uploaded in the clear, kept sealed");

    // A copy keeps the source's key and cipher.
    setup.ok(&[
        "db",
        "create",
        "vault-copy",
        "--from-db",
        "vault",
        "--remote-encryption-key",
        key,
        "--remote-encryption-cipher",
        "chacha20poly1305",
        "--wait",
    ]);
    let copied = setup.ok(&[
        "db",
        "shell",
        "vault-copy",
        "--mode",
        "list",
        "--remote-encryption-key",
        key,
        "SELECT v FROM secrets",
    ]);
    assert_eq!(copied.trim(), "kept in the clear nowhere");

    // A new key: the old one no longer reads, the new one reads everything.
    let new_key = "ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoM=";
    let rotated = setup.ok(&[
        "db",
        "rotate-encryption-key",
        "vault",
        "--current-key",
        key,
        "--new-key",
        new_key,
        "--new-cipher",
        "aes256gcm",
    ]);
    assert!(rotated.contains("aes256gcm"), "{rotated}");
    let old = setup.fails(
        &[
            "db",
            "shell",
            "vault",
            "--remote-encryption-key",
            key,
            "SELECT v FROM secrets",
        ],
        None,
    );
    assert!(old.contains("not the key"), "{old}");
    let read = setup.ok(&[
        "db",
        "shell",
        "vault",
        "--mode",
        "list",
        "--remote-encryption-key",
        new_key,
        "SELECT v FROM secrets",
    ]);
    assert_eq!(read.trim(), "kept in the clear nowhere");
    let again = setup.fails(
        &[
            "db",
            "rotate-encryption-key",
            "vault",
            "--current-key",
            key,
            "--new-key",
            "ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICA=",
        ],
        None,
    );
    assert!(again.contains("not the key"), "{again}");

    let unsupported = setup.fails(
        &[
            "db",
            "create",
            "unknown-cipher",
            "--remote-encryption-key",
            key,
            "--remote-encryption-cipher",
            "aegis512",
        ],
        None,
    );
    assert!(
        unsupported.contains("aes256gcm, aes128gcm, chacha20poly1305"),
        "{unsupported}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_imports_leave_no_database() {
    let setup = start("cli-cleanup").await;

    // The server refuses the file (larger than the size limit) after the database was
    // created: the database is deleted again, and the error says so.
    let file = setup.file("toolarge.db");
    {
        let conn = Connection::open(&file).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; CREATE TABLE t(x);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO t SELECT randomblob(1000) FROM n;
             PRAGMA wal_checkpoint(TRUNCATE);",
        )
        .unwrap();
    }
    let line = setup.fails(
        &[
            "db",
            "create",
            "toolarge",
            "--from-file",
            file.to_str().unwrap(),
            "--size-limit",
            "1mb",
        ],
        None,
    );
    assert!(
        line.contains("size limit") && line.contains("database toolarge was deleted again"),
        "{line}"
    );
    assert!(!setup.database_names().contains(&"toolarge".to_string()));
    let line = setup.fails(&["db", "show", "toolarge"], None);
    assert!(line.contains("database_not_found"), "{line}");

    // Refused locally, before anything is created.
    let dump = setup.file("dump.sql");
    std::fs::write(
        &dump,
        "PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\nCOMMIT;\n",
    )
    .unwrap();
    let line = setup.fails(&["db", "import", dump.to_str().unwrap()], None);
    assert!(
        line.contains("SQL dump") && line.contains("--from-dump"),
        "{line}"
    );
    let line = setup.fails(&["db", "import", "missing.db"], None);
    assert!(line.contains("could not find file"), "{line}");
    let corrupt = setup.file("corrupt.db");
    let mut bytes = std::fs::read(&file).unwrap();
    for byte in bytes.iter_mut().skip(4096).take(8192) {
        *byte = 0x5a;
    }
    std::fs::write(&corrupt, bytes).unwrap();
    let line = setup.fails(&["db", "import", corrupt.to_str().unwrap()], None);
    assert!(
        line.contains("corrupt") || line.contains("malformed"),
        "{line}"
    );
    assert!(
        setup.database_names().is_empty(),
        "{:?}",
        setup.database_names()
    );
}

/// A `sqlite3 .dump`-style script of `rows` orders, with a trigger keeping an audit table.
fn generate_dump(rows: usize) -> String {
    let mut sql = String::from(
        "PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n\
         CREATE TABLE orders(id INTEGER PRIMARY KEY, customer TEXT NOT NULL, note TEXT, total REAL);\n\
         CREATE TABLE audit(order_id INTEGER, at TEXT);\n\
         CREATE TRIGGER orders_audit AFTER INSERT ON orders BEGIN\n  INSERT INTO audit VALUES (new.id, 'created; logged');\nEND;\n",
    );
    for i in 1..=rows {
        writeln!(
            sql,
            "INSERT INTO orders VALUES({i},'customer {i}; the ''quoted'' kind','a note -- not a comment, /* nor this */ padding padding padding padding',{}.5);",
            i % 97
        )
        .unwrap();
    }
    sql.push_str("COMMIT;\n");
    sql
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shell_runs_piped_dumps_in_batches_and_one_shot_queries() {
    let setup = start("cli-shell").await;
    setup.ok(&["db", "create", "shop"]);

    // A piped dump of thousands of statements: batches, progress, one transaction.
    let rows = 3000;
    let dump = setup.file("dump.sql");
    std::fs::write(&dump, generate_dump(rows)).unwrap();
    assert!(std::fs::metadata(&dump).unwrap().len() > 256 << 10);
    let (_, stderr) = setup.ok_with(&["db", "shell", "shop", "--verbose"], Some(&dump));
    let requests: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("request ") && l.contains(": statements "))
        .collect();
    assert!(
        requests.len() >= 6,
        "{} statements in batches of at most 500: {stderr}",
        rows + 6
    );
    assert!(
        requests.iter().any(|l| l.contains("statements 1-500 ")),
        "{stderr}"
    );
    let (_, done) = progress_lines(&stderr, "Running SQL");
    assert!(done, "{stderr}");
    assert_eq!(
        setup.scalar("shop", "select count(*) from orders"),
        rows.to_string()
    );
    assert_eq!(
        setup.scalar(
            "shop",
            "select count(*) from audit where at = 'created; logged'"
        ),
        rows.to_string()
    );

    // The same through a pipe: progress once the input proves large, the same rows.
    setup.ok(&["db", "create", "piped"]);
    let stderr = setup.ok_piped(&["db", "shell", "piped"], &std::fs::read(&dump).unwrap());
    assert!(progress_lines(&stderr, "Running SQL").1, "{stderr}");
    assert_eq!(
        setup.scalar("piped", "select count(*) from orders"),
        rows.to_string()
    );

    // One-shot queries in several modes.
    let sql = "select id, customer from orders where id <= 2 order by id";
    let csv = setup.ok(&["db", "shell", "shop", "--mode", "csv", sql]);
    assert_eq!(
        csv,
        "id,customer\n1,customer 1; the 'quoted' kind\n2,customer 2; the 'quoted' kind\n"
    );
    let json: Value =
        serde_json::from_str(&setup.ok(&["db", "shell", "shop", "--mode", "json", sql])).unwrap();
    assert_eq!(json[1]["id"], 2);
    assert_eq!(json[1]["customer"], "customer 2; the 'quoted' kind");
    let table = setup.ok(&["db", "shell", "shop", sql]);
    assert!(table.starts_with("id  customer"), "{table}");
    assert_eq!(table.lines().count(), 3, "{table}");

    // Dot-commands piped in, and a mode switch between statements.
    let script = setup.file("script.sql");
    std::fs::write(
        &script,
        ".tables\n.schema orders\n.mode line\nselect count(*) as n,\n  max(id) as top\nfrom orders;\n",
    )
    .unwrap();
    let (out, _) = setup.ok_with(&["db", "shell", "shop"], Some(&script));
    assert!(out.starts_with("audit\norders\n"), "{out}");
    assert!(
        out.contains("CREATE TABLE orders(")
            && out.contains("CREATE TRIGGER orders_audit")
            && !out.contains("CREATE TABLE audit"),
        "{out}"
    );
    assert!(out.ends_with("  n = 3000\ntop = 3000\n"), "{out}");

    // `.dump` as a one-shot command, loaded into a new database with --from-dump.
    let exported_dump = setup.file("shop.sql");
    let dumped = setup.ok(&["db", "shell", "shop", ".dump"]);
    assert!(dumped.contains("CREATE TABLE orders("), "{dumped}");
    std::fs::write(&exported_dump, &dumped).unwrap();
    let (stdout, stderr) = setup.ok_with(
        &[
            "db",
            "create",
            "restored",
            "--from-dump",
            exported_dump.to_str().unwrap(),
            "--wait",
        ],
        None,
    );
    assert!(stdout.contains("Created database restored"), "{stdout}");
    // Not a terminal: no bar and no escape codes, but one line once the load is done.
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    let loaded: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("Loading "))
        .collect();
    assert_eq!(loaded.len(), 1, "{stderr}");
    assert!(
        loaded[0].contains("shop.sql into restored: done in "),
        "{stderr}"
    );
    assert_eq!(
        setup.scalar("restored", "select count(*) from orders"),
        rows.to_string()
    );

    // --from-db copies a database.
    setup.ok(&["db", "create", "shop-copy", "--from-db", "shop", "--wait"]);
    assert_eq!(
        setup.scalar("shop-copy", "select sum(id) from orders"),
        (rows * (rows + 1) / 2).to_string()
    );

    // A failing statement: its number and the server's message, a non-zero exit, and the
    // transaction rolled back.
    let failing = setup.file("failing.sql");
    std::fs::write(
        &failing,
        "BEGIN;\nINSERT INTO orders(customer) VALUES ('late');\nINSERT INTO missing VALUES (1);\nCOMMIT;\n",
    )
    .unwrap();
    let line = setup.fails(&["db", "shell", "shop"], Some(&failing));
    assert!(
        line.contains("statement 3 failed")
            && line.contains("missing")
            && line.contains("rolled back"),
        "{line}"
    );
    assert_eq!(
        setup.scalar("shop", "select count(*) from orders"),
        rows.to_string()
    );
    let line = setup.fails(&["db", "shell", "shop", "select * from nowhere"], None);
    assert_eq!(
        line,
        "Error: statement 1 failed: no such table: nowhere, in `select * from nowhere` \
         (SQL_INPUT_ERROR)"
    );
    // A syntax error is one clean line: SQLite's words, the statement, the code once.
    let line = setup.fails(&["db", "shell", "shop", "SELEC 1"], None);
    assert_eq!(
        line,
        "Error: statement 1 failed: near \"SELEC\": syntax error at offset 0, in `SELEC 1` \
         (SQL_INPUT_ERROR)"
    );
}

/// `db shell` on a terminal (util-linux `script`'s pseudo-terminal; without `script` the
/// test says so and passes): multi-line statements, a transaction across statements,
/// dot-commands, errors that do not end the session, and the history file.
#[tokio::test(flavor = "multi_thread")]
async fn the_interactive_shell_keeps_a_session_and_history() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    let setup = start("cli-interactive").await;
    setup.ok(&["db", "create", "shop"]);
    setup.ok(&[
        "db",
        "shell",
        "shop",
        "create table orders(id integer primary key, customer text)",
    ]);
    setup.ok(&[
        "db",
        "shell",
        "shop",
        "insert into orders(customer) values ('a'), ('b')",
    ]);
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux `script` is not installed, so there is no terminal to test the shell on");
        return;
    }
    let command_line = format!("{BIN} db shell shop");
    let mut child = Command::new("script")
        .args(["-qec", &command_line, "/dev/null"])
        .env("ATOLL_CONFIG_DIR", &setup.config)
        .env("TERM", "xterm")
        .env_remove("ATOLL_API_URL")
        .env_remove("ATOLL_API_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run script");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let seen = Arc::clone(&seen);
        let mut stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 1024];
            loop {
                match stdout.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.lock().unwrap().extend_from_slice(&buffer[..n]),
                }
            }
        })
    };
    // The line editor drops what is typed before it reads (as terminals do), so each line
    // goes only once the editor is waiting for it: every read starts by turning on
    // bracketed paste, ESC [ ? 2004 h, which marks the prompts.
    let prompts = || {
        let seen = seen.lock().unwrap();
        String::from_utf8_lossy(&seen)
            .matches("\x1b[?2004h")
            .count()
    };
    let mut stdin = child.stdin.take().unwrap();
    let lines = [
        "begin;",
        "insert into orders(customer)",
        "  values ('typed; at the prompt');",
        "select count(*) as n from orders;",
        "rollback;",
        ".mode csv",
        "select count(*) as n from orders;",
        "select * from nowhere;",
        ".tables",
        ".quit",
    ];
    for (i, line) in lines.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(30);
        while prompts() <= i {
            assert!(
                Instant::now() < deadline,
                "no prompt for line {i}: {:?}",
                String::from_utf8_lossy(&seen.lock().unwrap())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }
    assert!(child.wait().unwrap().success());
    drop(stdin);
    reader.join().unwrap();
    let raw = String::from_utf8_lossy(&seen.lock().unwrap()).to_string();
    // The transcript without carriage returns and terminal escapes.
    let mut transcript = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {}
            '\x1b' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() {
                            break;
                        }
                    }
                }
            }
            c => transcript.push(c),
        }
    }
    // Inside the transaction the typed row counts; after the rollback it is gone.
    assert!(transcript.contains("n\n3\n"), "{transcript}");
    assert!(transcript.contains("n\n2\n"), "{transcript}");
    assert!(
        transcript.contains("no such table: nowhere"),
        "{transcript}"
    );
    assert!(transcript.contains("\norders\n"), "{transcript}");
    assert_eq!(setup.scalar("shop", "select count(*) from orders"), "2");
    let history = std::fs::read_to_string(setup.config.join("shell_history")).unwrap();
    assert!(
        history.contains("select * from nowhere;") && history.contains(".mode csv"),
        "{history}"
    );
}

#[test]
fn the_data_commands_have_help_with_an_example() {
    let config = temp_dir("cli-data-help");
    for args in [
        vec!["db", "import"],
        vec!["db", "export"],
        vec!["db", "shell"],
        vec!["db", "create"],
    ] {
        let output = Command::new(BIN)
            .args(&args)
            .arg("--help")
            .env("ATOLL_CONFIG_DIR", &config)
            .output()
            .unwrap();
        let help = String::from_utf8(output.stdout).unwrap();
        assert!(help.contains("Example"), "{args:?}: {help}");
        assert!(
            help.contains(&format!("atoll {}", args.join(" "))),
            "{args:?}: {help}"
        );
    }
    // `db usage` says how rows are counted, so 1 row read for `SELECT 1` is no surprise.
    let output = Command::new(BIN)
        .args(["db", "usage", "--help"])
        .env("ATOLL_CONFIG_DIR", &config)
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(
        help.contains("`SELECT 1` is 1 row read") && help.contains("atoll db usage shop"),
        "{help}"
    );
    let _ = std::fs::remove_dir_all(&config);
}
