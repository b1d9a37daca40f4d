//! Crash safety: SIGKILL `atoll dev` in the middle of an upload, a chunked upload, many
//! database creates and a group delete; start it again, and show that
//!
//! - the metadata store and the files on disk agree: every database directory belongs to a
//!   database the store knows, every database the store knows has its directory, no row is
//!   left `creating`, no staging, trash or upload temporary file is left behind;
//! - every database file passes `PRAGMA integrity_check`;
//! - every acknowledged create and write is there, and databases that existed before a
//!   failed upload still hold their old content.
//!
//! (The write workload is `usage_after_crash.rs`.) Kills are aimed with the file system:
//! the test waits until the server is visibly part-way through (an upload file growing, a
//! database directory gone) before it kills.

mod support;

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_atoll");

/// A waiting loop's bound: long enough for a slow debug build on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// An `atoll dev` in its own data directory, killed and restarted on the same ports.
struct Server {
    dir: PathBuf,
    port: u16,
    db_port: u16,
    child: Child,
    api: String,
    token: String,
    client: reqwest::Client,
}

impl Server {
    async fn start(name: &str) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "atoll-crash-safety-{name}-{}-{}",
            std::process::id(),
            free_port()
        ));
        let (port, db_port) = (free_port(), free_port());
        let child = spawn(&dir, port, db_port);
        let api = format!("http://127.0.0.1:{port}");
        wait_healthy(&api).await;
        let token = std::fs::read_to_string(dir.join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        Server {
            dir,
            port,
            db_port,
            child,
            api,
            token,
            client: reqwest::Client::new(),
        }
    }

    fn kill(&mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
        // The serving process dies with its supervisor, a moment later.
        for port in [self.port, self.db_port] {
            let deadline = Instant::now() + PATIENCE;
            while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "port {port} is still held");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    async fn restart(&mut self) {
        // A fresh client: a keep-alive connection to the killed server would fail the
        // first request after the restart.
        self.client = reqwest::Client::new();
        self.child = spawn(&self.dir, self.port, self.db_port);
        wait_healthy(&self.api).await;
    }

    async fn api(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.api))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn create_database(&self, name: &str, extra: Value) -> Result<(), String> {
        let mut body = json!({ "name": name });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let response = self
            .client
            .post(format!("{}/v1/databases", self.api))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match response.status().as_u16() {
            200 => Ok(()),
            status => Err(format!(
                "{status}: {}",
                response.text().await.unwrap_or_default()
            )),
        }
    }

    /// The database's data-plane URL (ending in `/`) and a full-access token for it.
    async fn database(&self, name: &str) -> (String, String) {
        let (status, got) = self
            .api(reqwest::Method::GET, &format!("/v1/databases/{name}"), None)
            .await;
        assert_eq!(status, 200, "{name}: {got}");
        let url = got["database"]["http_url"].as_str().unwrap().to_string();
        let (status, jwt) = self
            .api(
                reqwest::Method::POST,
                &format!("/v1/databases/{name}/auth/tokens"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{jwt}");
        (url, jwt["jwt"].as_str().unwrap().to_string())
    }

    async fn database_id(&self, name: &str) -> String {
        let (status, got) = self
            .api(reqwest::Method::GET, &format!("/v1/databases/{name}"), None)
            .await;
        assert_eq!(status, 200, "{name}: {got}");
        got["database"]["DbId"].as_str().unwrap().to_string()
    }

    /// Runs one statement; the Hrana result, or the error the server answered.
    async fn execute(&self, (url, jwt): &(String, String), sql: &str) -> Result<Value, String> {
        let body =
            json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]});
        let response = self
            .client
            .post(format!("{url}v2/pipeline"))
            .bearer_auth(jwt)
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let text = response.text().await.map_err(|e| e.to_string())?;
        let body: Value = serde_json::from_str(&text).map_err(|_| format!("{status}: {text}"))?;
        match body["results"][0]["type"].as_str() {
            Some("ok") => Ok(body["results"][0]["response"]["result"].clone()),
            _ => Err(format!("{status}: {body}")),
        }
    }

    async fn count(&self, db: &(String, String), table: &str) -> u64 {
        let result = self
            .execute(db, &format!("SELECT count(*) FROM {table}"))
            .await
            .unwrap();
        result["rows"][0][0]["value"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    fn dbs_dir(&self) -> PathBuf {
        self.dir.join("dbs")
    }

    /// Upload temporary files in a database's directory.
    fn upload_files(&self, id: &str) -> Vec<PathBuf> {
        match std::fs::read_dir(self.dbs_dir().join(id)) {
            Ok(entries) => entries
                .map(|e| e.unwrap().path())
                .filter(|p| {
                    p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with(".upload-")
                })
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The store and the disk agree, and every database file is intact (see the top). The
    /// node holds its databases' files for itself while it runs (OPERATIONS.md, "Files and
    /// secrets"), so the server is killed for the check — one more crash for the files to
    /// survive — and started again after it.
    async fn assert_consistent(&mut self) {
        self.kill();
        self.assert_files_consistent();
        self.restart().await;
    }

    fn assert_files_consistent(&self) {
        let meta = rusqlite::Connection::open(self.dir.join("meta.db")).unwrap();
        let rows: Vec<(String, String)> = meta
            .prepare("SELECT id, state FROM databases")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        drop(meta);
        let creating: Vec<_> = rows.iter().filter(|(_, s)| s == "creating").collect();
        assert!(creating.is_empty(), "rows left creating: {creating:?}");
        let in_store: BTreeSet<String> = rows.into_iter().map(|(id, _)| id).collect();
        let on_disk: BTreeSet<String> = std::fs::read_dir(self.dbs_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            in_store, on_disk,
            "the store's databases (left) and the directories on disk (right) differ"
        );
        for id in &on_disk {
            assert!(
                self.upload_files(id).is_empty(),
                "upload temporary files left in {id}: {:?}",
                self.upload_files(id)
            );
            let file = self.dbs_dir().join(id).join("data");
            if file.exists() {
                let conn = rusqlite::Connection::open(&file).unwrap();
                let verdict: String = conn
                    .query_row("PRAGMA integrity_check", [], |row| row.get(0))
                    .unwrap();
                assert_eq!(verdict, "ok", "integrity_check of database {id}");
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn(dir: &Path, port: u16, db_port: u16) -> Child {
    Command::new(BIN)
        .args(["dev", "--data-dir", dir.to_str().unwrap()])
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--db-listen",
            &format!("127.0.0.1:{db_port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn wait_healthy(url: &str) {
    let deadline = Instant::now() + PATIENCE;
    while !reqwest::get(format!("{url}/health"))
        .await
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(Instant::now() < deadline, "server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A valid upload: page size 4096, WAL, no auto-vacuum, `rows` rows of 4 KB in `t`.
fn sqlite_file(dir: &Path, rows: u32) -> Vec<u8> {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("upload-{rows}.db"));
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE t (x INTEGER PRIMARY KEY, payload BLOB);
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})
         INSERT INTO t SELECT x, randomblob(4000) FROM c;
         PRAGMA wal_checkpoint(TRUNCATE);"
    ))
    .unwrap();
    drop(conn);
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    bytes
}

/// A database with `rows` acknowledged rows in `kept`, to show it survives untouched.
async fn database_with_rows(server: &Server, name: &str, rows: u64) -> (String, String) {
    server.create_database(name, json!({})).await.unwrap();
    let db = server.database(name).await;
    server
        .execute(&db, "CREATE TABLE kept (x INTEGER)")
        .await
        .unwrap();
    for i in 0..rows {
        server
            .execute(&db, &format!("INSERT INTO kept VALUES ({i})"))
            .await
            .unwrap();
    }
    db
}

/// Sends the head and the first `sent` bytes of `POST /v1/upload`, and keeps the
/// connection open: the server is then mid-upload for as long as the test likes.
async fn start_single_upload(
    (url, jwt): &(String, String),
    file: &[u8],
    sent: usize,
) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let url = url.strip_prefix("http://").unwrap();
    let (host, path) = url.split_once('/').unwrap();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "POST /{path}v1/upload HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {jwt}\r\nContent-Length: {}\r\n\r\n",
        file.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&file[..sent]).await.unwrap();
    stream.flush().await.unwrap();
    stream
}

async fn put(
    server: &Server,
    (url, jwt): &(String, String),
    path: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let response = server
        .client
        .put(format!("{url}{path}"))
        .bearer_auth(jwt)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Starts a chunked upload and sends every chunk (not the finalize); the upload id.
async fn chunked_upload(server: &Server, db: &(String, String), file: &[u8]) -> String {
    let start = serde_json::to_vec(&json!({ "db_size_bytes": file.len() })).unwrap();
    let (status, started) = put(server, db, "v2/upload/start", start).await;
    assert_eq!(status, 200, "{started}");
    let id = started["upload_id"].as_str().unwrap().to_string();
    let chunk_size = started["chunk_size"].as_u64().unwrap() as usize;
    for (n, chunk) in file.chunks(chunk_size).enumerate() {
        let (status, body) = put(
            server,
            db,
            &format!("v2/upload/{id}/chunk/{n}"),
            chunk.to_vec(),
        )
        .await;
        assert_eq!(status, 200, "chunk {n}: {body}");
    }
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_a_single_upload() {
    let mut server = Server::start("single").await;
    let kept = database_with_rows(&server, "kept", 20).await;
    server
        .create_database("target", json!({"seed": {"type": "database_upload"}}))
        .await
        .unwrap();
    let target = server.database("target").await;
    let target_id = server.database_id("target").await;
    let file = sqlite_file(&server.dir.join("files"), 2000);

    // Half the file is on its way; kill once the server has written some of it.
    let connection = start_single_upload(&target, &file, file.len() / 2).await;
    until("the upload file to grow", || {
        server
            .upload_files(&target_id)
            .iter()
            .any(|f| std::fs::metadata(f).is_ok_and(|m| m.len() > 0))
    })
    .await;
    server.kill();
    drop(connection);
    std::fs::remove_dir_all(server.dir.join("files")).unwrap();

    server.restart().await;
    server.assert_consistent().await;
    assert_eq!(server.count(&kept, "kept").await, 20);
    // The target is still waiting for its upload, which now goes through whole.
    assert!(server.execute(&target, "SELECT 1").await.is_err());
    let response = server
        .client
        .post(format!("{}v1/upload", target.0))
        .bearer_auth(&target.1)
        .body(file)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    assert_eq!(server.count(&target, "t").await, 2000);
    server.assert_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_a_chunked_upload() {
    let mut server = Server::start("chunked").await;
    let kept = database_with_rows(&server, "kept", 20).await;
    server
        .create_database("target", json!({"seed": {"type": "database_upload"}}))
        .await
        .unwrap();
    let target = server.database("target").await;
    let target_id = server.database_id("target").await;
    // More than one chunk of the default 8 MiB.
    let file = sqlite_file(&server.dir.join("files"), 2500);
    std::fs::remove_dir_all(server.dir.join("files")).unwrap();

    // Between chunks: the first chunk is acknowledged, the rest never comes.
    let start = serde_json::to_vec(&json!({ "db_size_bytes": file.len() })).unwrap();
    let (status, started) = put(&server, &target, "v2/upload/start", start).await;
    assert_eq!(status, 200, "{started}");
    let id = started["upload_id"].as_str().unwrap().to_string();
    let chunk_size = started["chunk_size"].as_u64().unwrap() as usize;
    assert!(file.len() > chunk_size, "the file must need several chunks");
    let (status, body) = put(
        &server,
        &target,
        &format!("v2/upload/{id}/chunk/0"),
        file[..chunk_size].to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    server.kill();
    server.restart().await;
    server.assert_consistent().await;
    assert_eq!(server.count(&kept, "kept").await, 20);
    assert!(server.execute(&target, "SELECT 1").await.is_err());
    // Uploads in progress do not survive a restart: the client is told to start again.
    // (A short body: a server that refuses a chunk need not read it, and closes the
    // connection it did not drain, which the next request would find closed.)
    let (status, body) = put(
        &server,
        &target,
        &format!("v2/upload/{id}/chunk/1"),
        file[chunk_size..chunk_size + 4096].to_vec(),
    )
    .await;
    assert_eq!(status, 404, "{body}");

    // During finalize: every chunk is in, the finalize request is sent and the server dies
    // while it checks and installs the file. Either outcome is allowed, but only whole: the
    // database is still waiting for an upload, or it holds the complete file.
    let id = chunked_upload(&server, &target, &file).await;
    let finalize = {
        let (client, url, jwt) = (server.client.clone(), target.0.clone(), target.1.clone());
        tokio::spawn(async move {
            client
                .put(format!("{url}v2/upload/{id}/finalize"))
                .bearer_auth(jwt)
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    // Wait until SQLite is reading the file (its WAL index appears beside it), then kill.
    let dbs = server.dbs_dir().join(&target_id);
    until("the finalize check to open the file", || {
        std::fs::read_dir(&dbs).unwrap().any(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.ends_with("-shm") || name == "data"
        })
    })
    .await;
    server.kill();
    let acknowledged = finalize.await.unwrap().is_ok_and(|status| status == 200);
    server.restart().await;
    server.assert_consistent().await;
    assert_eq!(server.count(&kept, "kept").await, 20);
    match server.execute(&target, "SELECT count(*) FROM t").await {
        Ok(result) => assert_eq!(result["rows"][0][0]["value"], "2500"),
        Err(e) => {
            assert!(!acknowledged, "an acknowledged upload is missing: {e}");
            // Still waiting: a fresh upload goes through.
            let id = chunked_upload(&server, &target, &file).await;
            let (status, body) = put(
                &server,
                &target,
                &format!("v2/upload/{id}/finalize"),
                Vec::new(),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(server.count(&target, "t").await, 2500);
        }
    }
    server.assert_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_many_creates() {
    let mut server = Server::start("creates").await;
    let kept = database_with_rows(&server, "kept", 20).await;
    let mut creates = tokio::task::JoinSet::new();
    for i in 0..200 {
        let (client, api, token) = (
            server.client.clone(),
            server.api.clone(),
            server.token.clone(),
        );
        creates.spawn(async move {
            let name = format!("db-{i}");
            let response = client
                .post(format!("{api}/v1/databases"))
                .bearer_auth(token)
                .json(&json!({ "name": name }))
                .send()
                .await;
            response.is_ok_and(|r| r.status() == 200).then_some(name)
        });
    }
    // Kill once some creates have gone through and others are in flight.
    let mut acknowledged = Vec::new();
    while acknowledged.len() < 20 {
        if let Some(name) = creates.join_next().await.unwrap().unwrap() {
            acknowledged.push(name);
        }
    }
    server.kill();
    while let Some(result) = creates.join_next().await {
        acknowledged.extend(result.unwrap());
    }
    assert!(
        acknowledged.len() < 200,
        "every create finished before the kill"
    );

    server.restart().await;
    server.assert_consistent().await;
    assert_eq!(server.count(&kept, "kept").await, 20);
    for name in &acknowledged {
        let db = server.database(name).await;
        server
            .execute(&db, "SELECT 1")
            .await
            .unwrap_or_else(|e| panic!("acknowledged database {name}: {e}"));
    }
    // Every name of a create that was not acknowledged is either a working database or
    // free to be created again.
    for i in 0..200 {
        let name = format!("db-{i}");
        if acknowledged.contains(&name) {
            continue;
        }
        let (status, _) = server
            .api(reqwest::Method::GET, &format!("/v1/databases/{name}"), None)
            .await;
        match status {
            200 => {
                let db = server.database(&name).await;
                server.execute(&db, "SELECT 1").await.unwrap();
            }
            404 => server.create_database(&name, json!({})).await.unwrap(),
            other => panic!("{name}: {other}"),
        }
    }
    server.assert_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_a_group_delete() {
    let mut server = Server::start("group").await;
    let kept = database_with_rows(&server, "kept", 20).await;
    let (status, body) = server
        .api(
            reqwest::Method::POST,
            "/v1/groups",
            Some(json!({"name": "doomed", "location": "local"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    for i in 0..60 {
        server
            .create_database(&format!("doomed-{i}"), json!({"group": "doomed"}))
            .await
            .unwrap();
    }
    let before = std::fs::read_dir(server.dbs_dir()).unwrap().count();
    assert_eq!(before, 61);

    let delete = {
        let (client, api, token) = (
            server.client.clone(),
            server.api.clone(),
            server.token.clone(),
        );
        tokio::spawn(async move {
            client
                .delete(format!("{api}/v1/groups/doomed"))
                .bearer_auth(token)
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    // The store has forgotten the group once its databases start to go from disk: kill
    // with most of them still there.
    let dbs = server.dbs_dir();
    until("the first database of the group to go", || {
        std::fs::read_dir(&dbs).unwrap().count() < before
    })
    .await;
    server.kill();
    let acknowledged = delete.await.unwrap().is_ok_and(|status| status == 200);
    let left = std::fs::read_dir(server.dbs_dir()).unwrap().count();

    server.restart().await;
    server.assert_consistent().await;
    assert_eq!(server.count(&kept, "kept").await, 20);
    let (status, _) = server
        .api(reqwest::Method::GET, "/v1/groups/doomed", None)
        .await;
    assert_eq!(
        status, 404,
        "the group came back (acknowledged: {acknowledged})"
    );
    assert_eq!(
        std::fs::read_dir(server.dbs_dir()).unwrap().count(),
        1,
        "{left} directories were left at the kill; only `kept` may remain"
    );
    // Its names are free again.
    let (status, body) = server
        .api(
            reqwest::Method::POST,
            "/v1/groups",
            Some(json!({"name": "doomed", "location": "local"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    server
        .create_database("doomed-0", json!({"group": "doomed"}))
        .await
        .unwrap();
    server.assert_consistent().await;
}
