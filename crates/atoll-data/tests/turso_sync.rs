//! Turso Sync pulls (`POST /pull-updates`, docs/DATA-PLANE.md "Turso Sync") against a
//! node with a `file://` store: the pages a pull sends, applied to a file the way the
//! client applies them, give exactly the database; a long poll wakes on a commit; the
//! checks of every read route apply. The real client is driven in
//! `tests/compat/sync.test.mjs`.

mod support;

use atoll_data::node::NodeSettings;
use atoll_data::node_storage::StorageConfig;
use atoll_data::sync::proto::{PageData, PullHeader, PullRequest};
use atoll_data::DataLimits;
use atoll_storage::StorageSettings;
use prost::Message;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;

const PAGE: u64 = 4096;

async fn sync_node() -> TestNode {
    let store = std::env::temp_dir().join(format!("atoll-sync-store-{}", uuid::Uuid::new_v4()));
    let settings = NodeSettings {
        storage: Some(StorageConfig {
            url: format!("file://{}", store.display()),
            node_name: "test-node".into(),
            settings: StorageSettings {
                durability_lag: Duration::from_millis(50),
                checkpoint_frames: 20,
                ..StorageSettings::default()
            },
        }),
        ..NodeSettings::default()
    };
    start_node_with_settings(DataLimits::default(), settings).await
}

struct Pulled {
    status: u16,
    header: Option<PullHeader>,
    pages: Vec<(u64, Vec<u8>)>,
    error: String,
}

async fn pull_with(db: &TestDb, token: &str, request: PullRequest) -> Pulled {
    let response = db
        .http
        .post(db.url("/pull-updates"))
        .header("x-namespace", &db.config.label)
        .header("content-type", "application/protobuf")
        .bearer_auth(token)
        .body(request.encode_to_vec())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap();
    if status != 200 {
        return Pulled {
            status,
            header: None,
            pages: Vec::new(),
            error: String::from_utf8_lossy(&body).into_owned(),
        };
    }
    let mut rest = &body[..];
    let header = PullHeader::decode_length_delimited(&mut rest).unwrap();
    let mut pages = Vec::new();
    while !rest.is_empty() {
        let page = PageData::decode_length_delimited(&mut rest).unwrap();
        assert_eq!(page.encoded_page.len() as u64, PAGE);
        pages.push((page.page_id, page.encoded_page));
    }
    Pulled {
        status,
        header: Some(header),
        pages,
        error: String::new(),
    }
}

async fn pull(db: &TestDb, revision: &str) -> Pulled {
    let request = PullRequest {
        client_revision: revision.into(),
        ..PullRequest::default()
    };
    pull_with(db, &db.token(), request).await
}

/// Writes the pages into `file` and cuts it at the database's size, as the client's
/// commit of the pulled frames does.
fn apply(file: &Path, pulled: &Pulled) {
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(file)
        .unwrap();
    for (id, page) in &pulled.pages {
        out.seek(SeekFrom::Start(id * PAGE)).unwrap();
        out.write_all(page).unwrap();
    }
    out.set_len(pulled.header.as_ref().unwrap().db_size * PAGE)
        .unwrap();
}

fn local_rows(file: &Path) -> Vec<i64> {
    let copy = file.with_extension("read");
    std::fs::copy(file, &copy).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    let mut stmt = conn.prepare("SELECT x FROM t ORDER BY x").unwrap();
    let rows = stmt
        .query_map([], |row| row.get::<_, i64>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    drop(stmt);
    drop(conn);
    let _ = std::fs::remove_file(&copy);
    rows
}

async fn insert(db: &TestDb, from: i64, to: i64) {
    let result = db
        .run(&[sql(&format!(
            "WITH RECURSIVE n(x) AS (SELECT {from} UNION ALL SELECT x + 1 FROM n WHERE x < {to}) INSERT INTO t SELECT x, randomblob(500) FROM n"
        ))])
        .await;
    assert_eq!(result[0]["type"], "ok", "{}", result[0]);
}

fn local_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("atoll-sync-local-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bootstrap_then_the_changes_give_exactly_the_database() {
    let node = sync_node().await;
    let db = node.create_db("pulled");
    db.run(&[sql("CREATE TABLE t (x INTEGER PRIMARY KEY, pad BLOB)")])
        .await;
    insert(&db, 1, 200).await;
    let dir = local_dir();
    let file = dir.join("local.db");

    let bootstrap = pull(&db, "").await;
    assert_eq!(bootstrap.status, 200, "{}", bootstrap.error);
    let header = bootstrap.header.clone().unwrap();
    assert_eq!(bootstrap.pages.len() as u64, header.db_size, "every page");
    apply(&file, &bootstrap);
    assert_eq!(local_rows(&file), (1..=200).collect::<Vec<_>>());
    // The schema cookie is the database's own (a backup would have bumped it), so it
    // changes on the client exactly when the schema does.
    let server_file = node.node.by_id(&db.config.id).unwrap().file_path();
    let server = rusqlite::Connection::open(&server_file).unwrap();
    let cookie: u32 = server
        .query_row("PRAGMA schema_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(bootstrap.pages[0].1[40..44], cookie.to_be_bytes());
    drop(server);

    // A change: only the pages it wrote come, and they bring the file up to date.
    db.run(&[sql("UPDATE t SET pad = x'00' WHERE x = 7")]).await;
    insert(&db, 201, 210).await;
    let changes = pull(&db, &header.server_revision).await;
    assert_eq!(changes.status, 200, "{}", changes.error);
    let next = changes.header.clone().unwrap();
    assert!(next.server_revision.parse::<u64>().unwrap() > header.server_revision.parse().unwrap());
    assert!(
        changes.pages.len() < bootstrap.pages.len() / 2,
        "{} pages for a small change, of {}",
        changes.pages.len(),
        bootstrap.pages.len()
    );
    apply(&file, &changes);
    assert_eq!(local_rows(&file), (1..=210).collect::<Vec<_>>());

    // Nothing newer: the header alone, the same revision.
    let nothing = pull(&db, &next.server_revision).await;
    assert_eq!(
        nothing.header.unwrap().server_revision,
        next.server_revision
    );
    assert!(nothing.pages.is_empty());

    // A revision the log cannot compare with gets every page, which fits any base.
    for revision in ["999999999", "not-a-revision"] {
        let all = pull(&db, revision).await;
        assert_eq!(all.status, 200, "{}", all.error);
        assert_eq!(all.pages.len() as u64, all.header.as_ref().unwrap().db_size);
        assert_eq!(all.header.unwrap().server_revision, next.server_revision);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_poll_wakes_on_a_commit() {
    let node = sync_node().await;
    let db = node.create_db("polled");
    db.run(&[sql("CREATE TABLE t (x INTEGER PRIMARY KEY, pad BLOB)")])
        .await;
    let head = pull(&db, "").await.header.unwrap().server_revision;
    let request = PullRequest {
        client_revision: head.clone(),
        long_poll_timeout_ms: 20_000,
        ..PullRequest::default()
    };
    let token = db.token();
    let started = Instant::now();
    let waiting = pull_with(&db, &token, request);
    let writer = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        insert(&db, 1, 1).await;
    };
    let (pulled, ()) = tokio::join!(waiting, writer);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_ne!(pulled.header.unwrap().server_revision, head);
    assert!(!pulled.pages.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pulls_are_checked_like_every_read() {
    let node = sync_node().await;
    let db = node.create_db("checked");
    db.run(&[sql("CREATE TABLE t (x INTEGER PRIMARY KEY, pad BLOB)")])
        .await;
    let other = node.create_db("other");

    // A read-only token may pull; another database's token gets nothing.
    let read_only = pull_with(&db, &db.read_only_token(), PullRequest::default()).await;
    assert_eq!(read_only.status, 200, "{}", read_only.error);
    let foreign = pull_with(&db, &other.token(), PullRequest::default()).await;
    assert_eq!(foreign.status, 401, "{}", foreign.error);

    // What Atoll does not serve is refused, not answered wrongly.
    let selected = PullRequest {
        server_pages_selector: vec![1, 2, 3],
        ..PullRequest::default()
    };
    let refused = pull_with(&db, &db.token(), selected).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.error.contains("not implemented"),
        "{}",
        refused.error
    );
    let logical = PullRequest {
        stream_kind: 1,
        ..PullRequest::default()
    };
    assert_eq!(pull_with(&db, &db.token(), logical).await.status, 400);

    node.configure(&db, |config| {
        config.block_reads = true;
        config.block_reason = Some("testing".into());
    });
    let blocked = pull(&db, "").await;
    assert_eq!(blocked.status, 403, "{}", blocked.error);
}

/// The client's push (one batch from `BEGIN IMMEDIATE` to `COMMIT`, no `close`, its stream
/// never used again) leaves no stream open: with room for 2 streams per database, pushing
/// 6 times in a row is never refused, each answer's baton is null, and a batch that leaves
/// its transaction open keeps its stream (a client continues it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pushes_leave_no_stream_open() {
    let limits = DataLimits {
        max_streams_per_database: 2,
        ..DataLimits::default()
    };
    let node = start_node_with(limits).await;
    let db = node.create_db("pushed");
    db.run(&[sql("CREATE TABLE t (x INTEGER PRIMARY KEY, v TEXT)")])
        .await;
    let in_transaction = serde_json::json!({"type": "not", "cond": {"type": "is_autocommit"}});
    let push = |x: i64, last: &str| {
        serde_json::json!({"baton": null, "requests": [{"type": "batch", "batch": {"steps": [
            {"stmt": {"sql": "BEGIN IMMEDIATE"}},
            {"stmt": {"sql": "CREATE TABLE IF NOT EXISTS turso_sync_last_change_id (client_id TEXT PRIMARY KEY, pull_gen INTEGER, change_id INTEGER)"}, "condition": in_transaction},
            {"stmt": {"sql": format!("INSERT INTO t VALUES ({x}, 'pushed')")}, "condition": in_transaction},
            {"stmt": {"sql": "INSERT INTO turso_sync_last_change_id VALUES ('c', 0, ?) ON CONFLICT (client_id) DO UPDATE SET change_id = excluded.change_id", "args": [integer(x)]}, "condition": in_transaction},
            {"stmt": {"sql": last}, "condition": in_transaction},
        ]}}]})
    };
    for x in 1..=6 {
        let response = db.post("/v2/pipeline", push(x, "COMMIT")).await;
        assert_eq!(response.status(), 200, "push {x}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert!(body["baton"].is_null(), "{body}");
        let steps = &body["results"][0]["response"]["result"]["step_errors"];
        assert!(
            steps.as_array().unwrap().iter().all(|e| e.is_null()),
            "{body}"
        );
    }
    let count = db.query(sql("SELECT count(*) FROM t")).await;
    assert_eq!(count["rows"][0][0]["value"], "6", "{count}");

    // Not a whole transaction (its last step only reads): the stream stays, with its
    // transaction, for the client's next request.
    let response = db.post("/v2/pipeline", push(7, "SELECT 1")).await;
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    let baton = body["baton"].as_str().expect("a baton").to_string();
    let response = db
        .post(
            "/v2/pipeline",
            serde_json::json!({"baton": baton, "requests": [{"type": "execute", "stmt": {"sql": "COMMIT"}}, {"type": "close"}]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let count = db.query(sql("SELECT count(*) FROM t")).await;
    assert_eq!(count["rows"][0][0]["value"], "7", "{count}");
}
