//! Uploads (`/v1/upload`, `/v2/upload/…`), exports (`/info`, `/export/{generation}`) and
//! dumps (`/dump`) over real HTTP against a node in a temporary directory, and the checks
//! of files tenants send (uploads, dump seeds, pushed offline writes).

mod support;

use atoll_data::jwt::{self, Claims};
use atoll_data::node::Node;
use atoll_data::{DataLimits, DataPlaneState};
use atoll_types::node::{CreateDatabase, DatabaseConfig, DatabaseState, Seed, TokenKey};
use ed25519_dalek::SigningKey;
use reqwest::StatusCode;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct TestNode {
    dir: PathBuf,
    node: Arc<Node>,
    state: Arc<DataPlaneState>,
    base: String,
    http: reqwest::Client,
    key: SigningKey,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

/// A database on the test node and tokens for it.
struct Db {
    id: String,
    label: String,
    rw: String,
    ro: String,
}

const KID: &str = "test-key";

impl TestNode {
    async fn launch() -> TestNode {
        TestNode::launch_with(DataLimits::default()).await
    }

    async fn launch_with(limits: DataLimits) -> TestNode {
        let dir = std::env::temp_dir().join(format!(
            "atoll-upload-test-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let node = Arc::new(Node::open_with(&dir, limits.node.clone()).unwrap());
        let state = DataPlaneState::with_limits(Arc::clone(&node), "localhost", limits);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let served = Arc::clone(&state);
        tokio::spawn(async move {
            atoll_data::serve(listener, served, async {
                let _ = stop.await;
            })
            .await
            .unwrap();
        });
        TestNode {
            dir,
            node,
            state,
            base,
            http: reqwest::Client::new(),
            key: jwt::generate_key(),
            _shutdown: shutdown,
        }
    }

    fn create(&self, name: &str, seed: Seed) -> Db {
        let id = uuid::Uuid::new_v4().to_string();
        let label = format!("{name}-acme");
        let config = DatabaseConfig {
            id: id.clone(),
            name: name.into(),
            org_id: "org".into(),
            group_id: "group".into(),
            label: label.clone(),
            state: DatabaseState::Active,
            block_reads: false,
            block_writes: false,
            block_reason: None,
            size_limit: None,
            allow_attach: false,
            allowed_ips: vec![],
            keys: vec![TokenKey {
                kid: KID.into(),
                public_key: jwt::encode_key(self.key.verifying_key().as_bytes()),
            }],
            external_keys: Default::default(),
            client_ca: None,
            durability: None,
            pitr_retention_days: None,
            config_version: 0,
            history_starts_at_ms: None,
            encryption: None,
        };
        self.node
            .create_database(CreateDatabase { config, seed })
            .unwrap();
        let token = |a: &str| {
            jwt::sign(
                &Claims {
                    a: a.into(),
                    id: Some(id.clone()),
                    gid: None,
                    p: None,
                    iat: 0,
                    exp: None,
                },
                &self.key,
                KID,
            )
        };
        Db {
            rw: token("rw"),
            ro: token("ro"),
            id,
            label,
        }
    }

    fn state_of(&self, db: &Db) -> DatabaseState {
        self.node.by_id(&db.id).unwrap().config().state
    }

    fn data_file(&self, db: &Db) -> PathBuf {
        self.node.by_id(&db.id).unwrap().file_path()
    }

    /// Files uploads and exports left in the database's directory.
    fn leftovers(&self, db: &Db) -> Vec<String> {
        let dir = self.node.by_id(&db.id).unwrap().dir().to_path_buf();
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect()
    }

    fn request(&self, method: reqwest::Method, db: &Db, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("x-namespace", &db.label)
            .bearer_auth(&db.rw)
    }

    async fn upload(&self, db: &Db, file: Vec<u8>) -> (StatusCode, Value) {
        let response = self
            .request(reqwest::Method::POST, db, "/v1/upload")
            .body(file)
            .send()
            .await
            .unwrap();
        answer(response).await
    }

    async fn start(&self, db: &Db, size: u64) -> (StatusCode, Value) {
        let response = self
            .request(reqwest::Method::PUT, db, "/v2/upload/start")
            .header("content-type", "application/json")
            .body(format!("{{\"db_size_bytes\":{size}}}"))
            .send()
            .await
            .unwrap();
        answer(response).await
    }

    async fn chunk(&self, db: &Db, upload_id: &str, n: u64, bytes: &[u8]) -> (StatusCode, Value) {
        let response = self
            .request(
                reqwest::Method::PUT,
                db,
                &format!("/v2/upload/{upload_id}/chunk/{n}"),
            )
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        answer(response).await
    }

    async fn finalize(&self, db: &Db, upload_id: &str) -> (StatusCode, Value) {
        let response = self
            .request(
                reqwest::Method::PUT,
                db,
                &format!("/v2/upload/{upload_id}/finalize"),
            )
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        answer(response).await
    }

    /// Uploads `file` in chunks of `chunk_size` (the node is told to use it), sending the
    /// chunks in `order`.
    async fn upload_chunked(&self, db: &Db, file: &[u8], order: &[u64]) -> (StatusCode, Value) {
        let (status, started) = self.start(db, file.len() as u64).await;
        assert_eq!(status, StatusCode::OK, "{started}");
        let id = started["upload_id"].as_str().unwrap().to_string();
        let size = started["chunk_size"].as_u64().unwrap() as usize;
        for &n in order {
            let at = n as usize * size;
            let (status, body) = self
                .chunk(db, &id, n, &file[at..(at + size).min(file.len())])
                .await;
            assert_eq!(status, StatusCode::OK, "chunk {n}: {body}");
        }
        self.finalize(db, &id).await
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn answer(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

fn error_of(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

/// A scratch directory for the SQLite files the tests build.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "atoll-upload-files-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An SQLite file as a client would upload it: `setup` runs first on the empty database
/// (pragmas that only apply then), then `rows` rows go into `items`, then the WAL is
/// checkpointed into the file.
fn sqlite_file(setup: &str, wal: bool, rows: usize) -> Vec<u8> {
    let dir = scratch();
    let path = dir.join("source.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(setup).unwrap();
        if wal {
            conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        }
        conn.execute_batch(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, data BLOB);
             CREATE INDEX items_name ON items (name);",
        )
        .unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        for i in 0..rows {
            tx.execute(
                "INSERT INTO items (name, price, data) VALUES (?1, ?2, ?3)",
                rusqlite::params![format!("item {i}"), i as f64 / 3.0, vec![i as u8; 100]],
            )
            .unwrap();
        }
        tx.commit().unwrap();
        if wal {
            conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                .unwrap();
        }
    }
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_dir_all(dir);
    bytes
}

fn good_file(rows: usize) -> Vec<u8> {
    sqlite_file("PRAGMA page_size = 4096;", true, rows)
}

fn count_items(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM items", [], |row| row.get(0))
        .unwrap()
}

#[tokio::test]
async fn a_single_request_upload_installs_the_file_and_activates_the_database() {
    let node = TestNode::launch().await;
    let db = node.create("shop", Seed::Upload);
    assert_eq!(node.state_of(&db), DatabaseState::AwaitingUpload);

    let (status, body) = node.upload(&db, good_file(500)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, serde_json::json!({}));
    assert_eq!(node.state_of(&db), DatabaseState::Active);
    assert_eq!(count_items(&node.data_file(&db)), 500);
    let conn = rusqlite::Connection::open(node.data_file(&db)).unwrap();
    let (name, price): (String, f64) = conn
        .query_row("SELECT name, price FROM items WHERE id = 31", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    assert_eq!((name.as_str(), price), ("item 30", 10.0));
    assert!(node.leftovers(&db).is_empty(), "{:?}", node.leftovers(&db));

    // Now it has data: a second upload would overwrite it.
    let (status, body) = node.upload(&db, good_file(1)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        error_of(&body),
        "database shop already has data: uploads go to a database created with seed database_upload"
    );
    assert_eq!(count_items(&node.data_file(&db)), 500);
}

#[tokio::test]
async fn a_chunked_upload_takes_chunks_in_any_order_and_retried() {
    let node = TestNode::launch().await;
    node.state.uploads.set_chunk_size(16 << 10);
    let db = node.create("chunky", Seed::Upload);
    let file = good_file(1000);
    assert!(file.len() > 5 * (16 << 10), "the file needs several chunks");
    let chunks = file.len().div_ceil(16 << 10) as u64;

    let (status, started) = node.start(&db, file.len() as u64).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    assert_eq!(started["chunk_size"], 16 << 10);
    let id = started["upload_id"].as_str().unwrap().to_string();
    let chunk = |n: u64| {
        let at = n as usize * (16 << 10);
        &file[at..(at + (16 << 10)).min(file.len())]
    };

    // Last chunk first, then the rest backwards; chunk 1 twice, as after a lost answer.
    for n in (0..chunks).rev() {
        let (status, body) = node.chunk(&db, &id, n, chunk(n)).await;
        assert_eq!(status, StatusCode::OK, "chunk {n}: {body}");
    }
    let (status, body) = node.chunk(&db, &id, 1, chunk(1)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(node.state.uploads.in_progress().len(), 1);
    assert_eq!(
        node.state.uploads.in_progress()[0].received_bytes,
        file.len() as u64
    );

    let (status, body) = node.finalize(&db, &id).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, serde_json::json!({}));
    assert_eq!(node.state_of(&db), DatabaseState::Active);
    assert_eq!(count_items(&node.data_file(&db)), 1000);
    assert!(node.leftovers(&db).is_empty(), "{:?}", node.leftovers(&db));
    assert!(node.state.uploads.in_progress().is_empty());

    // Finished uploads are gone.
    let (status, body) = node.chunk(&db, &id, 0, chunk(0)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn chunk_mistakes_are_refused_and_the_upload_survives_them() {
    let node = TestNode::launch().await;
    node.state.uploads.set_chunk_size(16 << 10);
    let db = node.create("careful", Seed::Upload);
    let file = good_file(300);
    let chunks = file.len().div_ceil(16 << 10) as u64;
    assert!(chunks >= 2);
    let (_, started) = node.start(&db, file.len() as u64).await;
    let id = started["upload_id"].as_str().unwrap().to_string();

    let (status, body) = node.chunk(&db, &id, 0, &file[..1000]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error_of(&body).contains("chunk 0 must be 16384 bytes"),
        "{body}"
    );

    let (status, body) = node.chunk(&db, &id, chunks, &file[..16 << 10]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("out of range"), "{body}");

    let (status, body) = node.chunk(&db, &id, 0, &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (status, body) = node
        .chunk(&db, "0123456789abcdef", 0, &file[..16 << 10])
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error_of(&body).contains("no upload"), "{body}");

    // Another database's token cannot reach this upload.
    let other = node.create("other", Seed::Upload);
    let (status, _) = node.chunk(&other, &id, 0, &file[..16 << 10]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, body) = node.chunk(&db, &id, 0, &file[..16 << 10]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = node.finalize(&db, &id).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("have not arrived yet"), "{body}");
    assert_eq!(node.state_of(&db), DatabaseState::AwaitingUpload);

    for n in 1..chunks {
        let at = n as usize * (16 << 10);
        let (status, body) = node
            .chunk(&db, &id, n, &file[at..(at + (16 << 10)).min(file.len())])
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = node.finalize(&db, &id).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(count_items(&node.data_file(&db)), 300);
}

#[tokio::test]
async fn start_checks_the_announced_size() {
    let node = TestNode::launch().await;
    let db = node.create("sized", Seed::Upload);
    let (status, body) = node.start(&db, 0).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = node.start(&db, 4097).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error_of(&body).contains("whole number of 4096-byte pages"),
        "{body}"
    );
    node.state.uploads.set_max_bytes(8192);
    let (status, body) = node.start(&db, 12288).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        error_of(&body).contains("upload limit of 8192 bytes"),
        "{body}"
    );

    let response = node
        .request(reqwest::Method::PUT, &db, "/v2/upload/start")
        .body("{\"size\": 1}")
        .send()
        .await
        .unwrap();
    let (status, body) = answer(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("db_size_bytes"), "{body}");
}

/// Uploads `file` to a new database and checks it is refused with `status` and a reason
/// containing `reason`, leaving the database awaiting its upload with no file installed.
async fn assert_refused(node: &TestNode, file: Vec<u8>, status: StatusCode, reason: &str) {
    let db = node.create(&format!("bad{}", rand_suffix()), Seed::Upload);
    let (got, body) = node.upload(&db, file).await;
    assert_eq!(got, status, "{body}");
    assert!(
        error_of(&body).contains(reason),
        "expected {reason:?} in {body}"
    );
    assert_eq!(node.state_of(&db), DatabaseState::AwaitingUpload);
    assert!(!node.data_file(&db).exists());
    assert!(node.leftovers(&db).is_empty(), "{:?}", node.leftovers(&db));
}

fn rand_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

#[tokio::test]
async fn a_file_that_is_not_sqlite_is_refused() {
    let node = TestNode::launch().await;
    let mut file = b"hello, this is not a database".to_vec();
    file.resize(8192, b' ');
    assert_refused(
        &node,
        file,
        StatusCode::BAD_REQUEST,
        "not an SQLite database",
    )
    .await;
    let dump = b"PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\nCOMMIT;\n".to_vec();
    assert_refused(
        &node,
        dump,
        StatusCode::BAD_REQUEST,
        "looks like an SQL dump",
    )
    .await;
    assert_refused(
        &node,
        Vec::new(),
        StatusCode::BAD_REQUEST,
        "the file is empty",
    )
    .await;
}

#[tokio::test]
async fn a_truncated_file_is_refused() {
    let node = TestNode::launch().await;
    let file = good_file(500);
    let short = file[..file.len() - 4096].to_vec();
    assert_refused(&node, short, StatusCode::BAD_REQUEST, "its header says").await;
    let ragged = file[..file.len() - 100].to_vec();
    assert_refused(
        &node,
        ragged,
        StatusCode::BAD_REQUEST,
        "not a whole number of 4096-byte pages",
    )
    .await;
    assert_refused(
        &node,
        file[..60].to_vec(),
        StatusCode::BAD_REQUEST,
        "too short",
    )
    .await;
}

#[tokio::test]
async fn a_file_with_another_page_size_is_refused() {
    let node = TestNode::launch().await;
    let file = sqlite_file("PRAGMA page_size = 1024;", true, 50);
    assert_refused(
        &node,
        file,
        StatusCode::BAD_REQUEST,
        "page size is 1024 bytes, Atoll needs 4096",
    )
    .await;
}

#[tokio::test]
async fn a_file_not_in_wal_mode_is_refused() {
    let node = TestNode::launch().await;
    let file = sqlite_file("PRAGMA journal_mode = DELETE;", false, 50);
    assert_refused(
        &node,
        file,
        StatusCode::BAD_REQUEST,
        "the file is not in WAL journal mode: run PRAGMA journal_mode=WAL",
    )
    .await;
}

#[tokio::test]
async fn a_file_with_auto_vacuum_is_refused() {
    let node = TestNode::launch().await;
    let file = sqlite_file("PRAGMA auto_vacuum = FULL;", true, 50);
    assert_refused(&node, file, StatusCode::BAD_REQUEST, "auto_vacuum=FULL").await;
}

#[tokio::test]
async fn a_utf16_file_is_refused() {
    let node = TestNode::launch().await;
    let file = sqlite_file("PRAGMA encoding = 'UTF-16le';", true, 50);
    assert_refused(
        &node,
        file,
        StatusCode::BAD_REQUEST,
        "UTF-16le, Atoll needs UTF-8",
    )
    .await;
}

#[tokio::test]
async fn a_corrupt_file_is_refused() {
    let node = TestNode::launch().await;
    let mut file = good_file(500);
    // Page 3 is one of the table's b-tree pages; garbage there is what a bad disk leaves.
    file[2 * 4096..3 * 4096].fill(0x55);
    assert_refused(&node, file, StatusCode::BAD_REQUEST, "the file is corrupt").await;
}

#[tokio::test]
async fn a_file_over_the_limit_is_refused() {
    let node = TestNode::launch().await;
    node.state.uploads.set_max_bytes(16 << 10);
    let file = good_file(500);
    assert!(file.len() > 16 << 10);
    assert_refused(
        &node,
        file,
        StatusCode::PAYLOAD_TOO_LARGE,
        "larger than this node's upload limit",
    )
    .await;
}

#[tokio::test]
async fn a_bad_chunked_upload_leaves_the_database_as_it_was() {
    let node = TestNode::launch().await;
    node.state.uploads.set_chunk_size(8 << 10);
    let db = node.create("chunkbad", Seed::Upload);
    let file = sqlite_file("PRAGMA journal_mode = DELETE;", false, 200);
    let chunks: Vec<u64> = (0..file.len().div_ceil(8 << 10) as u64).collect();
    let (status, body) = node.upload_chunked(&db, &file, &chunks).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error_of(&body).contains("not in WAL journal mode"),
        "{body}"
    );
    assert_eq!(node.state_of(&db), DatabaseState::AwaitingUpload);
    assert!(!node.data_file(&db).exists());
    assert!(node.leftovers(&db).is_empty(), "{:?}", node.leftovers(&db));
    assert!(node.state.uploads.in_progress().is_empty());

    // A refused upload ends; a good one can follow.
    let file = good_file(200);
    let chunks: Vec<u64> = (0..file.len().div_ceil(8 << 10) as u64).collect();
    let (status, body) = node.upload_chunked(&db, &file, &chunks).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(count_items(&node.data_file(&db)), 200);
}

#[tokio::test]
async fn uploads_need_an_awaiting_database_and_a_full_access_token() {
    let node = TestNode::launch().await;
    let active = node.create("live", Seed::Empty);
    let (status, body) = node.upload(&active, good_file(10)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(error_of(&body).contains("already has data"), "{body}");
    let (status, _) = node.start(&active, 8192).await;
    assert_eq!(status, StatusCode::CONFLICT);

    let db = node.create("guarded", Seed::Upload);
    let response = node
        .http
        .post(format!("{}/v1/upload", node.base))
        .header("x-namespace", &db.label)
        .bearer_auth(&db.ro)
        .body(good_file(10))
        .send()
        .await
        .unwrap();
    let (status, body) = answer(response).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error_of(&body).contains("read-only"), "{body}");

    let response = node
        .http
        .put(format!("{}/v2/upload/start", node.base))
        .header("x-namespace", &db.label)
        .bearer_auth(&db.ro)
        .body("{\"db_size_bytes\": 8192}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);

    let response = node
        .http
        .post(format!("{}/v1/upload", node.base))
        .header("x-namespace", &db.label)
        .body(good_file(10))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    assert_eq!(node.state_of(&db), DatabaseState::AwaitingUpload);
    assert!(!node.data_file(&db).exists());
}

#[tokio::test]
async fn one_upload_at_a_time_per_database() {
    let node = TestNode::launch().await;
    let db = node.create("busy", Seed::Upload);
    let file = good_file(100);
    let (status, started) = node.start(&db, file.len() as u64).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = node.start(&db, file.len() as u64).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(error_of(&body).contains("another upload"), "{body}");
    let (status, body) = node.upload(&db, file.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(error_of(&body).contains("another upload"), "{body}");

    // Other databases are not held up.
    let other = node.create("free", Seed::Upload);
    let (status, body) = node.upload(&other, file.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let id = started["upload_id"].as_str().unwrap();
    let (status, body) = node.chunk(&db, id, 0, &file).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = node.finalize(&db, id).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn abandoned_uploads_are_dropped_with_their_files() {
    let node = TestNode::launch().await;
    let db = node.create("forgotten", Seed::Upload);
    let file = good_file(100);
    let (_, first) = node.start(&db, file.len() as u64).await;
    let first = first["upload_id"].as_str().unwrap().to_string();
    assert_eq!(node.leftovers(&db).len(), 1);

    node.state.uploads.set_abandon_after(Duration::ZERO);
    let (status, second) = node.start(&db, file.len() as u64).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let second = second["upload_id"].as_str().unwrap().to_string();
    let (status, _) = node.chunk(&db, &first, 0, &file).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let progress = node.state.uploads.in_progress();
    assert_eq!(progress.len(), 1);
    assert_eq!(progress[0].upload_id, second);
    // The first upload's file is deleted off the request path; give it a moment.
    for _ in 0..50 {
        if node.leftovers(&db).len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        node.leftovers(&db),
        vec![format!(".upload-{second}")],
        "only the live upload's file remains"
    );
}

#[tokio::test]
async fn info_names_the_only_generation() {
    let node = TestNode::launch().await;
    let db = node.create("info", Seed::Empty);
    let response = node
        .request(reqwest::Method::GET, &db, "/info")
        .send()
        .await
        .unwrap();
    let (status, body) = answer(response).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, serde_json::json!({ "current_generation": 1 }));
}

#[tokio::test]
async fn an_export_is_a_consistent_database_while_writes_go_on() {
    let node = TestNode::launch().await;
    let db = node.create("busyexport", Seed::Empty);
    let path = node.data_file(&db);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE log (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
             CREATE INDEX log_body ON log (body);",
        )
        .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        let path = path.clone();
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.busy_timeout(Duration::from_secs(5)).unwrap();
            let mut written = 0u64;
            while !stop.load(Ordering::Relaxed) || written < 2000 {
                let tx = conn.unchecked_transaction().unwrap();
                for _ in 0..50 {
                    tx.execute(
                        "INSERT INTO log (body) VALUES (?1)",
                        [format!("entry {written} {}", "x".repeat(200))],
                    )
                    .unwrap();
                    written += 1;
                }
                tx.commit().unwrap();
            }
            written
        })
    };
    // Let the writer get going, then export a few times while it writes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut exports = Vec::new();
    for _ in 0..3 {
        let response = node
            .request(reqwest::Method::GET, &db, "/export/1")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "application/octet-stream"
        );
        let length = response.content_length();
        let bytes = response.bytes().await.unwrap();
        assert_eq!(length, Some(bytes.len() as u64));
        exports.push(bytes.to_vec());
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();

    let dir = scratch();
    for (i, bytes) in exports.iter().enumerate() {
        let copy = dir.join(format!("export-{i}.db"));
        std::fs::write(&copy, bytes).unwrap();
        let conn = rusqlite::Connection::open(&copy).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        let rows: u64 = conn
            .query_row("SELECT count(*) FROM log", [], |row| row.get(0))
            .unwrap();
        // Whole transactions only: a snapshot between commits.
        assert_eq!(rows % 50, 0);
        assert!(rows <= written);
    }
    let _ = std::fs::remove_dir_all(dir);
    assert!(node.leftovers(&db).is_empty(), "{:?}", node.leftovers(&db));

    // An export is a valid upload: same page size, WAL mode.
    let copy = node.create("restored", Seed::Upload);
    let (status, body) = node.upload(&copy, exports.pop().unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let response = node
        .request(reqwest::Method::GET, &db, "/export/2")
        .send()
        .await
        .unwrap();
    let (status, body) = answer(response).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        error_of(&body).contains("current generation is 1"),
        "{body}"
    );
}

/// Every table's rows, with their SQLite types, in a comparable form.
fn contents(conn: &rusqlite::Connection) -> Vec<(String, Vec<String>)> {
    let tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_stat%' ORDER BY name",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables
        .into_iter()
        .map(|table| {
            let quoted = format!("\"{}\"", table.replace('"', "\"\""));
            let mut stmt = conn.prepare(&format!("SELECT * FROM {quoted}")).unwrap();
            let width = stmt.column_count();
            let mut rows = stmt
                .query_map([], |row| {
                    let mut cells = Vec::new();
                    for i in 0..width {
                        let value: rusqlite::types::Value = row.get(i)?;
                        cells.push(format!("{value:?}"));
                    }
                    Ok(cells.join("|"))
                })
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            rows.sort();
            (table, rows)
        })
        .collect()
}

fn schema(conn: &rusqlite::Connection) -> Vec<(String, String, Option<String>)> {
    conn.prepare("SELECT type, name, sql FROM sqlite_schema ORDER BY type, name")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn a_dump_loads_back_into_the_same_data() {
    let node = TestNode::launch().await;
    let db = node.create("dumped", Seed::Empty);
    let path = node.data_file(&db);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            r#"
            CREATE TABLE users (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, score REAL, avatar BLOB);
            CREATE TABLE "odd ""name""" ("select" TEXT, "two words" INTEGER);
            CREATE TABLE kv (k TEXT PRIMARY KEY, v ANY) WITHOUT ROWID;
            CREATE TABLE areas (w REAL, h REAL, area REAL GENERATED ALWAYS AS (w * h));
            CREATE TABLE plain (x);
            CREATE INDEX users_name ON users (name);
            CREATE VIEW big_scores AS SELECT name FROM users WHERE score > 1;
            CREATE TRIGGER users_touch AFTER UPDATE ON users BEGIN
                UPDATE users SET score = score + 1 WHERE id = NEW.id AND 0;
            END;
            "#,
        )
        .unwrap();
        let insert = "INSERT INTO users (name, score, avatar) VALUES (?1, ?2, ?3)";
        let texts = [
            "plain",
            "it's quoted",
            "line\nbreak",
            "crlf\r\nline",
            "backslash \\n not a newline\n",
            "ünïcödé ✓",
            "",
            "COMMIT;",
        ];
        let reals = [
            1.0,
            0.1 + 0.2,
            1.0 / 3.0,
            -2.5e-310,
            1e300,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::INFINITY,
        ];
        for (i, (text, real)) in texts.iter().zip(reals).enumerate() {
            conn.execute(
                insert,
                rusqlite::params![text, real, vec![i as u8, 0, 255, 39]],
            )
            .unwrap();
        }
        conn.execute(
            insert,
            rusqlite::params![None::<String>, None::<f64>, None::<Vec<u8>>],
        )
        .unwrap();
        conn.execute("DELETE FROM users WHERE id = 7", []).unwrap();
        conn.execute_batch(
            r#"
            INSERT INTO "odd ""name""" VALUES ('a', 1), ('b', NULL);
            INSERT INTO kv VALUES ('int', 42), ('text', 'x'), ('blob', x'00ff'), ('real', 2.0);
            INSERT INTO areas (w, h) VALUES (2, 3), (1.5, 2);
            INSERT INTO plain VALUES (CAST(x'6869' AS TEXT)), (-9223372036854775808);
            INSERT INTO plain SELECT 'multi
line';
            "#,
        )
        .unwrap();
    }

    let response = node
        .request(reqwest::Method::GET, &db, "/dump")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    let dump = response.text().await.unwrap();
    assert!(
        dump.starts_with("PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n"),
        "{dump}"
    );
    assert!(dump.ends_with("COMMIT;\n"), "{dump}");
    assert!(
        dump.contains("INSERT INTO \"users\" VALUES(2,'it''s quoted',0.30000000000000004,"),
        "{dump}"
    );
    assert!(dump.contains("DELETE FROM sqlite_sequence;\n"), "{dump}");
    assert!(
        dump.contains("INSERT INTO \"areas\"(\"w\",\"h\") VALUES(2.0,3.0);"),
        "{dump}"
    );
    // Every statement on a line of its own, as line-based tools expect.
    assert!(dump.lines().all(|l| !l.is_empty()), "{dump}");

    let original = rusqlite::Connection::open(&path).unwrap();
    let loaded = load_dump(std::path::Path::new(":memory:"), &dump).unwrap();
    let loaded = loaded.conn;
    assert_eq!(contents(&loaded), contents(&original));
    assert_eq!(schema(&loaded), schema(&original));
    let next_id: i64 = {
        loaded
            .execute("INSERT INTO users (name) VALUES ('next')", [])
            .unwrap();
        loaded.last_insert_rowid()
    };
    assert_eq!(next_id, 10, "AUTOINCREMENT continues where it was");
}

#[tokio::test]
async fn a_dump_can_keep_rowids() {
    let node = TestNode::launch().await;
    let db = node.create("rowids", Seed::Empty);
    {
        let conn = rusqlite::Connection::open(node.data_file(&db)).unwrap();
        conn.execute_batch(
            "CREATE TABLE notes (body TEXT);
             INSERT INTO notes VALUES ('a'), ('b'), ('c');
             DELETE FROM notes WHERE body = 'a';
             CREATE TABLE shadowed (rowid TEXT, body TEXT);
             INSERT INTO shadowed VALUES ('r', 'x');",
        )
        .unwrap();
    }
    let dump = node
        .request(reqwest::Method::GET, &db, "/dump?preserve_row_ids=true")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        dump.contains("INSERT INTO \"notes\"(rowid,\"body\") VALUES(2,'b');"),
        "{dump}"
    );
    assert!(
        dump.contains("INSERT INTO \"shadowed\"(_rowid_,\"rowid\",\"body\") VALUES(1,'r','x');"),
        "{dump}"
    );
    let loaded = load_dump(std::path::Path::new(":memory:"), &dump).unwrap();
    let loaded = loaded.conn;
    let rowids: Vec<i64> = loaded
        .prepare("SELECT rowid FROM notes ORDER BY rowid")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rowids, [2, 3]);
}

#[tokio::test]
async fn a_dump_restores_full_text_search_tables() {
    let node = TestNode::launch().await;
    let db = node.create("searchable", Seed::Empty);
    {
        let conn = rusqlite::Connection::open(node.data_file(&db)).unwrap();
        conn.execute_batch(
            "CREATE VIRTUAL TABLE docs USING fts5(title, body);
             INSERT INTO docs VALUES ('greeting', 'hello world'), ('farewell', 'goodbye world');",
        )
        .unwrap();
    }
    let dump = node
        .request(reqwest::Method::GET, &db, "/dump")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(dump.contains("PRAGMA writable_schema=ON;"), "{dump}");

    let dir = scratch();
    let path = dir.join("restored.db");
    {
        load_dump(&path, &dump).unwrap();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    let title: String = conn
        .query_row(
            "SELECT title FROM docs WHERE docs MATCH 'hello'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(title, "greeting");
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_database_awaiting_its_upload_has_nothing_to_export() {
    let node = TestNode::launch().await;
    let db = node.create("empty", Seed::Upload);
    for path in ["/dump", "/export/1", "/info"] {
        let response = node
            .request(reqwest::Method::GET, &db, path)
            .send()
            .await
            .unwrap();
        let (status, body) = answer(response).await;
        assert_eq!(status, StatusCode::CONFLICT, "{path}: {body}");
        assert!(error_of(&body).contains("waiting for its upload"), "{body}");
    }
    assert!(!node.data_file(&db).exists());
}

#[test]
fn a_dump_that_rolled_back_is_refused() {
    let mut sandboxed = sandboxed_loader(std::path::Path::new(":memory:"));
    let err = atoll_data::dump::load_dump(
        &mut sandboxed,
        "PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\nCREATE TABLE t(x);\nROLLBACK; -- due to errors\n",
        std::time::Duration::from_secs(60),
    )
    .unwrap_err();
    let conn = sandboxed.conn;
    assert!(err.to_string().contains("ROLLBACK"), "{err}");
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
        .unwrap();
    assert_eq!(tables, 0, "nothing of a refused dump stays");
}

#[tokio::test]
async fn stalled_uploads_are_abandoned_with_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = TestNode::launch_with(DataLimits {
        upload_idle_timeout: Duration::from_secs(1),
        ..DataLimits::default()
    })
    .await;
    let db = node.create("stalled", Seed::Upload);
    let address = node.base.trim_start_matches("http://");
    let mut client = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /v1/upload HTTP/1.1\r\nHost: localhost\r\nx-namespace: {}\r\nAuthorization: Bearer {}\r\nContent-Length: 8192\r\n\r\n",
        db.label, db.rw
    );
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&[0u8; 100]).await.unwrap();
    // Then silence: the server gives up on the upload (a generous bound, not a timing check).
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), client.read_to_end(&mut answer))
        .await
        .expect("the stalled upload was never answered");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("sent nothing for 1 seconds"), "{answer}");
    // The database is untouched and can still receive its upload.
    assert_eq!(node.state_of(&db), DatabaseState::AwaitingUpload);
    assert!(node.leftovers(&db).is_empty(), "{:?}", node.leftovers(&db));
}

/// A connection that loads dumps as a `dump` seed does (the sandbox's loader mode).
fn sandboxed_loader(path: &std::path::Path) -> atoll_data::sandbox::SandboxedConnection {
    atoll_data::sandbox::open(
        path,
        atoll_data::sandbox::IfMissing::Create,
        atoll_data::sandbox::Mode::DumpLoader,
        &atoll_data::sandbox::SandboxSettings::default(),
        &std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        None,
        |_| Ok(()),
    )
    .unwrap()
}

fn load_dump(
    path: &std::path::Path,
    dump: &str,
) -> Result<atoll_data::sandbox::SandboxedConnection, atoll_data::error::DataError> {
    let mut sandboxed = sandboxed_loader(path);
    atoll_data::dump::load_dump(&mut sandboxed, dump, std::time::Duration::from_secs(60))?;
    Ok(sandboxed)
}

/// Dumps are read one statement at a time from a window of text that grows until it holds
/// the statement: statements longer than any window, `;` inside literals, comments and
/// trigger bodies, and multi-byte characters where a window ends must load as sqlite3
/// would load them.
#[test]
fn dump_statements_are_read_whole_whatever_their_length_and_content() {
    let long_text = format!("{};/* not a comment */ -- nor this\n", "é;".repeat(40_000));
    let mut dump = String::from("PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n");
    dump.push_str("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n");
    dump.push_str("CREATE TABLE log(v TEXT);\n");
    dump.push_str(
        "CREATE TRIGGER t_log AFTER INSERT ON t BEGIN INSERT INTO log VALUES('a;b'); INSERT INTO log VALUES(new.id); END;\n",
    );
    // A comment holding `;` and what looks like a statement, then a statement after it.
    dump.push_str(
        "/* INSERT INTO t VALUES(5001, 'no'); */ -- ; INSERT INTO t VALUES(5000,'no');\n",
    );
    dump.push_str(&format!("INSERT INTO t VALUES(1, '{long_text}');\n"));
    // Statements that end near where a 4 KiB window does, with two-byte characters.
    for i in 2..2000 {
        let filler = "é".repeat(i % 97);
        dump.push_str(&format!("INSERT INTO t VALUES({i}, '{filler};');\n"));
    }
    // A block comment that outlasts the first windows, before the last statement.
    dump.push_str(&format!("/* {} */\n", "x; ".repeat(5_000)));
    dump.push_str("INSERT INTO t VALUES(2000, 'last')\n;COMMIT;\n");
    let sandboxed = load_dump(std::path::Path::new(":memory:"), &dump).unwrap();
    let conn = sandboxed.conn;
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |row| row.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM t"), 2000);
    assert_eq!(count("SELECT count(*) FROM t WHERE id >= 5000"), 0);
    assert_eq!(count("SELECT count(*) FROM log"), 2 * 2000);
    let first: String = conn
        .query_row("SELECT v FROM t WHERE id = 1", [], |row| row.get(0))
        .unwrap();
    assert_eq!(first, long_text);
    let last: String = conn
        .query_row("SELECT v FROM t WHERE id = 2000", [], |row| row.get(0))
        .unwrap();
    assert_eq!(last, "last");
}

/// A statement with a parameter cannot say how much text it took (its expansion differs):
/// the rest of the dump is still read, statement by statement.
#[test]
fn a_dump_with_a_parameter_still_loads_its_other_statements() {
    let dump = "CREATE TABLE t(x);\nINSERT INTO t VALUES(?);\nINSERT INTO t VALUES(2);\n";
    let sandboxed = load_dump(std::path::Path::new(":memory:"), dump).unwrap();
    let rows: Vec<Option<i64>> = sandboxed
        .conn
        .prepare("SELECT x FROM t ORDER BY rowid")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows, [None, Some(2)]);
}

/// A node whose statements, and so checks of files, may run for `statement_timeout`.
async fn node_with_statement_timeout(statement_timeout: Duration) -> TestNode {
    let mut limits = DataLimits::default();
    limits.node.sandbox.statement_timeout = statement_timeout;
    TestNode::launch_with(limits).await
}

/// A CHECK constraint that costs each row a few milliseconds of a single `instr()` call
/// (quadratic in its arguments; `x - x` keeps SQLite from computing it once for all rows),
/// and is always true.
const SLOW_CHECK: &str =
    "instr(hex(zeroblob(20000 + x - x)), hex(zeroblob(10000 + x - x)) || '1') >= 0";

/// A database file whose table `slow` has `rows` rows and a CHECK constraint `check`,
/// written without evaluating it.
fn file_with_check(check: &str, rows: usize) -> Vec<u8> {
    let dir = scratch();
    let path = dir.join("checked.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; PRAGMA ignore_check_constraints = ON;
             CREATE TABLE slow (x INTEGER CHECK ({check}));
             WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {rows})
             INSERT INTO slow SELECT x FROM n;
             PRAGMA wal_checkpoint(TRUNCATE);"
        ))
        .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_dir_all(dir);
    bytes
}

// Issue 26: a file's CHECK constraints are tenant SQL, and checking an upload runs them on
// every row. That check ran outside the sandbox with no deadline: one request held a core
// for half a minute past `--statement-timeout`, and the server past SIGTERM.
#[tokio::test]
async fn an_upload_whose_check_runs_past_the_statement_timeout_is_refused() {
    let node = node_with_statement_timeout(Duration::from_secs(1)).await;
    // About 3,000 × 10 ms of CHECK constraint: half a minute unbounded.
    let file = file_with_check(SLOW_CHECK, 3000);
    let started = std::time::Instant::now();
    assert_refused(
        &node,
        file.clone(),
        StatusCode::BAD_REQUEST,
        "the file could not be checked within 1 s",
    )
    .await;
    // A loose bound: the point is that it ends near the deadline, not how near.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The same file in chunks: the same check.
    let db = node.create("slow-chunked", Seed::Upload);
    let (status, body) = node.upload_chunked(&db, &file, &[0]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(error_of(&body).contains("CHECK constraints"), "{body}");
    assert_eq!(node.state_of(&db), DatabaseState::AwaitingUpload);
    assert!(node.leftovers(&db).is_empty(), "{:?}", node.leftovers(&db));
}

// The check runs on a blocking thread and holds the database's upload claim: a client
// that hangs up, and a node that shuts down, stop it instead of waiting for it.
#[tokio::test]
async fn an_upload_check_stops_when_its_client_goes_away() {
    let node = node_with_statement_timeout(Duration::from_secs(600)).await;
    // A minute of CHECK constraint unbounded.
    let file = file_with_check(SLOW_CHECK, 6000);
    let db = node.create("abandoned", Seed::Upload);
    let gone = node
        .request(reqwest::Method::POST, &db, "/v1/upload")
        .timeout(Duration::from_secs(1))
        .body(file)
        .send()
        .await;
    assert!(gone.is_err(), "the check answered within a second");
    // The claim ends with the check: the database takes another upload (the bound only
    // keeps a broken build from hanging the suite).
    let started = std::time::Instant::now();
    loop {
        let (status, body) = node.upload(&db, good_file(10)).await;
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the abandoned check still runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(count_items(&node.data_file(&db)), 10);
}

#[tokio::test]
async fn an_upload_check_stops_when_the_node_shuts_down() {
    let node = node_with_statement_timeout(Duration::from_secs(600)).await;
    let file = file_with_check(SLOW_CHECK, 6000);
    let db = node.create("interrupted", Seed::Upload);
    let upload = node
        .request(reqwest::Method::POST, &db, "/v1/upload")
        .body(file)
        .send();
    let shutdown = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        node.node.begin_shutdown();
    };
    let (response, ()) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(upload, shutdown)
    })
    .await
    .expect("the check went on past shutdown");
    let (status, body) = answer(response.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(error_of(&body).contains("shutting down"), "{body}");
    assert_eq!(node.state_of(&db), DatabaseState::AwaitingUpload);
    assert!(!node.data_file(&db).exists());
}

/// The check runs with the sandbox's limits: a CHECK constraint cannot build values past
/// `--max-value-size`.
#[tokio::test]
async fn an_upload_whose_check_builds_a_huge_value_is_refused() {
    let node = TestNode::launch().await;
    let file = file_with_check("length(zeroblob(400000000 + x - x)) > 0", 1);
    assert_refused(&node, file, StatusCode::BAD_REQUEST, "too big").await;
}

// A dump may install a CHECK constraint after its rows (through `writable_schema`, as
// `sqlite3 .dump` writes virtual tables), so only the check of the database it made runs
// it: that check is bounded by the load's deadline too.
#[test]
fn a_dump_seed_whose_check_runs_past_the_load_deadline_is_refused() {
    let dir = scratch();
    let mut settings = atoll_data::node::NodeSettings::default();
    settings.sandbox.dump_load_timeout = Duration::from_secs(2);
    let node = Node::open_with(&dir, settings).unwrap();
    let dump = format!(
        "PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE slow (x INTEGER);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 5000) INSERT INTO slow SELECT x FROM n;
PRAGMA writable_schema=ON;
UPDATE sqlite_schema SET sql = 'CREATE TABLE slow (x INTEGER CHECK ({}))' WHERE name = 'slow';
PRAGMA writable_schema=OFF;
COMMIT;
",
        SLOW_CHECK.replace('\'', "''")
    );
    let id = uuid::Uuid::new_v4().to_string();
    let config = DatabaseConfig {
        id: id.clone(),
        name: "slowdump".into(),
        org_id: "org".into(),
        group_id: "group".into(),
        label: "slowdump-acme".into(),
        state: DatabaseState::Active,
        block_reads: false,
        block_writes: false,
        block_reason: None,
        size_limit: None,
        allow_attach: false,
        allowed_ips: vec![],
        keys: vec![],
        external_keys: Default::default(),
        client_ca: None,
        durability: None,
        pitr_retention_days: None,
        config_version: 0,
        history_starts_at_ms: None,
        encryption: None,
    };
    let started = std::time::Instant::now();
    let created = node.create_database(CreateDatabase {
        config,
        seed: Seed::Dump { sql: dump },
    });
    let message = created.err().expect("the dump was accepted").to_string();
    assert!(
        message.contains("the database the dump made could not be checked within 2 s"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // Nothing of it is left: no database, no directory.
    assert!(node.by_id(&id).is_none());
    let left: Vec<_> = std::fs::read_dir(dir.join("dbs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    drop(node);
    let _ = std::fs::remove_dir_all(dir);
}

// A pushed page can leave a UNIQUE index without a row of its table: `quick_check` does not
// compare indexes with tables, so such a push was applied (and the database then holds a
// duplicate its index does not know). The push is checked with `integrity_check`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_that_breaks_a_unique_index_is_refused_and_changes_nothing() {
    use atoll_data::node_storage::StorageConfig;
    use support::sql;
    let store = scratch();
    let settings = atoll_data::node::NodeSettings {
        storage: Some(StorageConfig {
            url: format!("file://{}", store.display()),
            node_name: "test-node".into(),
            settings: atoll_storage::StorageSettings {
                durability_lag: Duration::from_millis(100),
                ..Default::default()
            },
        }),
        ..Default::default()
    };
    let node = support::start_node_with_settings(DataLimits::default(), settings).await;
    let db = node.create_db("ledger");
    db.query(sql("CREATE TABLE t (x INTEGER)")).await;
    db.query(sql("CREATE UNIQUE INDEX t_x ON t (x)")).await;
    db.query(sql("INSERT INTO t VALUES (1), (2)")).await;
    let get = |path: String| {
        db.http
            .get(db.url(&path))
            .header("x-namespace", &db.config.label)
            .bearer_auth(db.token())
            .send()
    };
    let info: Value = get("/info".into()).await.unwrap().json().await.unwrap();
    let generation = info["current_generation"].as_u64().unwrap();
    let before = get(format!("/export/{generation}"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();

    // In the replica's copy, the 2 becomes a second 1 while the index is out of SQLite's
    // sight: the index keeps as many entries as the table has rows (which `quick_check`
    // counts), but not the row's value.
    let dir = scratch();
    let path = dir.join("replica.db");
    std::fs::write(&path, &before).unwrap();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let (root, index_sql): (i64, String) = conn
            .query_row(
                "SELECT rootpage, sql FROM sqlite_schema WHERE name = 't_x'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        conn.execute_batch(
            "PRAGMA writable_schema = ON; DELETE FROM sqlite_schema WHERE name = 't_x'; PRAGMA writable_schema = RESET;
             UPDATE t SET x = 1 WHERE x = 2;
             PRAGMA writable_schema = ON;",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO sqlite_schema VALUES ('index', 't_x', 't', ?1, ?2)",
            rusqlite::params![root, index_sql],
        )
        .unwrap();
        conn.execute_batch("PRAGMA writable_schema = RESET; PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
        let check =
            |pragma: &str| -> String { conn.query_row(pragma, [], |row| row.get(0)).unwrap() };
        assert_eq!(
            check("PRAGMA quick_check"),
            "ok",
            "quick_check cannot see it"
        );
        assert_ne!(check("PRAGMA integrity_check"), "ok");
    }
    let after = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    // The pages that changed, as frames 1.. of the generation (the last one commits).
    let pages = after.len() / 4096;
    let changed: Vec<usize> = (0..pages)
        .filter(|&i| before.get(i * 4096..(i + 1) * 4096) != Some(&after[i * 4096..(i + 1) * 4096]))
        .collect();
    assert!(!changed.is_empty());
    let mut body = Vec::new();
    for (n, &i) in changed.iter().enumerate() {
        let commit = if n + 1 == changed.len() {
            pages as u32
        } else {
            0
        };
        body.extend_from_slice(&(i as u32 + 1).to_be_bytes());
        body.extend_from_slice(&commit.to_be_bytes());
        body.extend_from_slice(&[0; 16]);
        body.extend_from_slice(&after[i * 4096..(i + 1) * 4096]);
    }
    let response = db
        .http
        .post(db.url(&format!("/sync/{generation}/1/{}", 1 + changed.len())))
        .header("x-namespace", &db.config.label)
        .bearer_auth(db.token())
        .body(body)
        .send()
        .await
        .unwrap();
    let (status, answer) = answer(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let message = error_of(&answer);
    assert!(message.contains("unusable"), "{answer}");
    assert!(message.contains("missing from index t_x"), "{answer}");

    // The database is as it was, and whole.
    let count = db.query(sql("SELECT count(*) FROM t")).await;
    assert_eq!(count["rows"][0][0]["value"], "2", "{count}");
    let check = db.query(sql("PRAGMA integrity_check")).await;
    assert_eq!(check["rows"][0][0]["value"], "ok", "{check}");
    let _ = std::fs::remove_dir_all(store);
}
