//! Embedded replicas with the official Rust `libsql` crate (from crates.io, unmodified)
//! against a real `atoll dev`: a local file synced from the server with
//! `Builder::new_synced_database` and `Builder::new_remote_replica` (whose default protocol
//! probes `/info` and then uses the same HTTP routes), incremental syncs, a restore in
//! place seen by a replica, and what hostile clients get.
//!
//! The server runs as a separate process: the `libsql` crate links its own SQLite, which
//! must not share a binary with Atoll's.

mod support;

use libsql::Builder;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use support::{start_dev, temp_dir, Server};

/// A plain-HTTP connector (the crate's TLS feature is off: the test server has none).
fn connector() -> hyper::client::HttpConnector {
    hyper::client::HttpConnector::new()
}

/// Runs statements on the server through Hrana (`/v2/pipeline`).
async fn server_execute(url: &str, token: &str, statements: &[&str]) -> Value {
    let mut requests: Vec<Value> = statements
        .iter()
        .map(|sql| json!({"type": "execute", "stmt": {"sql": sql}}))
        .collect();
    requests.push(json!({"type": "close"}));
    let response = reqwest::Client::new()
        .post(format!("{url}/v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({ "requests": requests }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    for result in body["results"].as_array().unwrap() {
        assert_eq!(result["type"], "ok", "{body}");
    }
    body
}

/// The first column of the first row of `sql` run on the server, as Hrana's JSON has it.
async fn server_scalar(url: &str, token: &str, sql: &str) -> String {
    let body = server_execute(url, token, &[sql]).await;
    body["results"][0]["response"]["result"]["rows"][0][0]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("{sql}: {body}"))
        .to_string()
}

async fn local_count(conn: &libsql::Connection, table: &str) -> i64 {
    let mut rows = conn
        .query(&format!("SELECT count(*) FROM {table}"), ())
        .await
        .unwrap();
    rows.next().await.unwrap().unwrap().get::<i64>(0).unwrap()
}

/// The database's URL without its trailing slash (the client appends `/info`, `/sync/…`).
async fn database(server: &Server, name: &str) -> (String, String) {
    let (url, token) = server.database_with_token(name).await;
    (url.trim_end_matches('/').to_string(), token)
}

async fn read_only_token(server: &Server, name: &str) -> String {
    let minted: Value = reqwest::Client::new()
        .post(format!(
            "{}/v1/databases/{name}/auth/tokens?authorization=read-only",
            server.url
        ))
        .bearer_auth(server.admin_token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    minted["jwt"].as_str().unwrap().to_string()
}

fn rfc3339_now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_database_pulls_incrementally_and_follows_a_restore_in_place() {
    let server = start_dev("replica-synced").await;
    let (url, token) = database(&server, "shop").await;
    server_execute(
        &url,
        &token,
        &[
            "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, padding BLOB)",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100) INSERT INTO items (name, padding) SELECT 'first-' || x, randomblob(3000) FROM c",
        ],
    )
    .await;

    let dir = temp_dir("replica-synced-local");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("shop.db");
    let db = Builder::new_synced_database(&path, url.clone(), token.clone())
        .connector(connector())
        .remote_writes(true)
        .build()
        .await
        .unwrap();
    db.sync().await.unwrap();
    assert_eq!(local_count(&db.connect().unwrap(), "items").await, 100);

    // Incremental: only the new frames travel.
    let before_more = rfc3339_now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    server_execute(
        &url,
        &token,
        &["WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50) INSERT INTO items (name, padding) SELECT 'second-' || x, randomblob(3000) FROM c"],
    )
    .await;
    db.sync().await.unwrap();
    assert_eq!(local_count(&db.connect().unwrap(), "items").await, 150);

    // Writes through the replica go to the server and come back with the next sync.
    db.connect()
        .unwrap()
        .execute("INSERT INTO items (name) VALUES ('from-the-replica')", ())
        .await
        .unwrap();
    db.sync().await.unwrap();
    assert_eq!(local_count(&db.connect().unwrap(), "items").await, 151);

    // A restore in place is new frames at the head of the log: the replica follows it.
    let restored = reqwest::Client::new()
        .post(format!(
            "{}/v1/organizations/admin/databases/shop/restore",
            server.url
        ))
        .bearer_auth(server.admin_token())
        .json(&json!({ "timestamp": before_more }))
        .send()
        .await
        .unwrap();
    assert_eq!(restored.status(), 200, "{}", restored.text().await.unwrap());
    db.sync().await.unwrap();
    // A new connection after each sync: an open connection of the crate may keep pages it
    // cached before a sync rewrote them (seen with libsql 0.10; a new one reads the file).
    let conn = db.connect().unwrap();
    assert_eq!(local_count(&conn, "items").await, 100);
    let mut rows = conn
        .query("SELECT count(*) FROM items WHERE name LIKE 'second-%'", ())
        .await
        .unwrap();
    assert_eq!(
        rows.next().await.unwrap().unwrap().get::<i64>(0).unwrap(),
        0
    );

    // And goes on after it.
    server_execute(
        &url,
        &token,
        &["INSERT INTO items (name) VALUES ('after-restore')"],
    )
    .await;
    db.sync().await.unwrap();
    assert_eq!(local_count(&db.connect().unwrap(), "items").await, 101);
    drop(conn);
    drop(db);

    // A second replica made now starts from the current state at once.
    let path2 = dir.join("shop2.db");
    let db2 = Builder::new_synced_database(&path2, url.clone(), token.clone())
        .connector(connector())
        .build()
        .await
        .unwrap();
    db2.sync().await.unwrap();
    assert_eq!(local_count(&db2.connect().unwrap(), "items").await, 101);

    // Reopening the first replica resumes from its saved position.
    let db = Builder::new_synced_database(&path, url.clone(), token.clone())
        .connector(connector())
        .build()
        .await
        .unwrap();
    server_execute(&url, &token, &["INSERT INTO items (name) VALUES ('later')"]).await;
    db.sync().await.unwrap();
    assert_eq!(local_count(&db.connect().unwrap(), "items").await, 102);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_replica_syncs_and_reads_its_own_writes_and_read_only_tokens_may_sync() {
    let server = start_dev("replica-remote").await;
    let (url, token) = database(&server, "notes").await;
    server_execute(
        &url,
        &token,
        &[
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
            "INSERT INTO notes (body) VALUES ('one'), ('two')",
        ],
    )
    .await;
    let dir = temp_dir("replica-remote-local");
    std::fs::create_dir_all(&dir).unwrap();

    let db = Builder::new_remote_replica(dir.join("notes.db"), url.clone(), token.clone())
        .connector(connector())
        .build()
        .await
        .unwrap();
    db.sync().await.unwrap();
    let conn = db.connect().unwrap();
    assert_eq!(local_count(&conn, "notes").await, 2);
    conn.execute("INSERT INTO notes (body) VALUES ('three')", ())
        .await
        .unwrap();
    // Read your writes: the write went to the server, and the replica has it locally.
    db.sync().await.unwrap();
    assert_eq!(local_count(&conn, "notes").await, 3);
    server_execute(&url, &token, &["DELETE FROM notes WHERE body = 'one'"]).await;
    db.sync().await.unwrap();
    assert_eq!(local_count(&conn, "notes").await, 2);

    // A read-only token syncs; writing through it is refused by the server. Its URL is the
    // one the CLI prints, with the trailing slash: the client asks for `…//info`.
    let read_only = read_only_token(&server, "notes").await;
    let ro = Builder::new_synced_database(dir.join("notes-ro.db"), format!("{url}/"), read_only)
        .connector(connector())
        .remote_writes(true)
        .build()
        .await
        .unwrap();
    ro.sync().await.unwrap();
    let ro_conn = ro.connect().unwrap();
    assert_eq!(local_count(&ro_conn, "notes").await, 2);
    assert!(ro_conn
        .execute("INSERT INTO notes (body) VALUES ('nope')", ())
        .await
        .is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_sync_requests_get_clear_errors() {
    let server = start_dev("replica-hostile").await;
    let (url_a, token_a) = database(&server, "alpha").await;
    let (url_b, token_b) = database(&server, "beta").await;
    server_execute(
        &url_a,
        &token_a,
        &[
            "CREATE TABLE secret (x)",
            "INSERT INTO secret VALUES ('alpha-only')",
        ],
    )
    .await;
    server_execute(&url_b, &token_b, &["CREATE TABLE other (y)"]).await;
    let client = reqwest::Client::new();
    let get = |url: String, token: Option<String>| {
        let client = client.clone();
        async move {
            let mut request = client.get(url);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.bytes().await.unwrap())
        }
    };
    let info: Value =
        serde_json::from_slice(&get(format!("{url_a}/info"), Some(token_a.clone())).await.1)
            .unwrap();
    let generation = info["current_generation"].as_u64().unwrap();
    assert!(generation >= 2, "{info}");

    // No token, a token of another database: nothing of alpha.
    for path in [
        "/info".to_string(),
        format!("/export/{generation}"),
        format!("/sync/{generation}/1/129"),
    ] {
        let (status, _) = get(format!("{url_a}{path}"), None).await;
        assert_eq!(status, 401, "{path} without a token");
        let (status, body) = get(format!("{url_a}{path}"), Some(token_b.clone())).await;
        assert!(
            status == 401 || status == 404,
            "{path} with beta's token: {status}"
        );
        assert!(!String::from_utf8_lossy(&body).contains("alpha-only"));
    }

    // Alpha from its first generation: the frames carry its data, in 4120-byte frames.
    let (status, frames) = get(format!("{url_a}/sync/2/1/129"), Some(token_a.clone())).await;
    assert_eq!(status, 200);
    assert_eq!(frames.len() % 4120, 0);
    assert!(frames.windows(10).any(|w| w == b"alpha-only"));

    // Huge batches are capped; absurd offsets and generations are refused, not served.
    let (status, frames) = get(
        format!("{url_a}/sync/2/1/4000000000"),
        Some(token_a.clone()),
    )
    .await;
    assert_eq!(status, 200);
    assert!(frames.len() <= 1024 * 4120);
    for (path, expected) in [
        (format!("/sync/{}/1/2", u64::MAX), 400),
        ("/sync/4000000000/1/2".to_string(), 409),
        (format!("/sync/{generation}/4000000000/4000000001"), 409),
        ("/sync/2/0/10".to_string(), 400),
        ("/sync/2/5/5".to_string(), 400),
        ("/sync/x/1/2".to_string(), 400),
        ("/sync/1/1/2".to_string(), 409),
        ("/export/99999999999".to_string(), 404),
    ] {
        let (status, body) = get(format!("{url_a}{path}"), Some(token_a.clone())).await;
        assert_eq!(
            status,
            expected,
            "{path}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    // Caught up: the client's "nothing newer" answer.
    let (status, body) = get(
        format!("{url_a}/sync/{generation}/1/129"),
        Some(token_a.clone()),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json!({"generation": generation})
    );

    // Pushing frames that name no page: refused, and never taken from a read-only token.
    let read_only = read_only_token(&server, "alpha").await;
    for (token, expected) in [(token_a.clone(), 400), (read_only, 403)] {
        let response = client
            .post(format!("{url_a}/sync/{generation}/1/2"))
            .bearer_auth(token)
            .body(vec![0u8; 4120])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected);
    }

    // block_reads: nothing is served, over either protocol.
    let patched = client
        .patch(format!("{}/v1/databases/alpha/configuration", server.url))
        .bearer_auth(server.admin_token())
        .json(&json!({ "block_reads": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);
    for path in [
        format!("/sync/{generation}/1/129"),
        format!("/export/{generation}"),
    ] {
        let (status, body) = get(format!("{url_a}{path}"), Some(token_a.clone())).await;
        assert_eq!(status, 403, "{path} with block_reads");
        assert!(!String::from_utf8_lossy(&body).contains("alpha-only"));
    }
    let (status, _, _) = grpc_call(
        &url_a,
        "BatchLogEntries",
        Some(&token_a),
        None,
        &log_offset(1),
    )
    .await;
    assert_eq!(status, "7", "gRPC with block_reads");

    // The official client with the wrong token fails instead of syncing anything.
    let dir = temp_dir("replica-hostile-local");
    std::fs::create_dir_all(&dir).unwrap();
    let built = Builder::new_synced_database(dir.join("alpha.db"), url_a.clone(), token_b)
        .connector(connector())
        .build()
        .await;
    if let Ok(db) = built {
        assert!(db.sync().await.is_err());
    }
    assert!(
        !dir.join("alpha.db").exists()
            || std::fs::metadata(dir.join("alpha.db")).unwrap().len() == 0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Offline writes with the official client: a synced database written locally pushes its
/// frames with `sync()` (transactions larger than one push request included), pulls the
/// server's writes on top of its own, and a conflicting push changes nothing on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_writes_are_pushed_and_a_conflicting_push_changes_nothing() {
    let server = start_dev("replica-push").await;
    let (url, token) = database(&server, "field").await;
    server_execute(
        &url,
        &token,
        &[
            "CREATE TABLE visits (id INTEGER PRIMARY KEY, site TEXT, notes BLOB)",
            "INSERT INTO visits (site) VALUES ('depot')",
        ],
    )
    .await;
    let dir = temp_dir("replica-push-local");
    std::fs::create_dir_all(&dir).unwrap();
    let open = |name: &str| {
        Builder::new_synced_database(dir.join(name), url.clone(), token.clone())
            .connector(connector())
            .build()
    };
    let db = open("field.db").await.unwrap();
    db.sync().await.unwrap();
    let conn = db.connect().unwrap();
    assert_eq!(local_count(&conn, "visits").await, 1);

    // Offline: three transactions, one of them far larger than a push request (128 frames).
    for sql in [
        "INSERT INTO visits (site) VALUES ('north')",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300) INSERT INTO visits (site, notes) SELECT 'bulk-' || x, randomblob(3000) FROM c",
        "UPDATE visits SET site = 'north-2' WHERE site = 'north'",
    ] {
        conn.execute(sql, ()).await.unwrap();
    }
    db.sync().await.unwrap();
    let on_server = |sql: &'static str| {
        let (url, token) = (url.clone(), token.clone());
        async move { server_scalar(&url, &token, sql).await }
    };
    assert_eq!(on_server("SELECT count(*) FROM visits").await, "302");
    assert_eq!(
        on_server("SELECT count(*) FROM visits WHERE site = 'north-2'").await,
        "1"
    );

    // The server's writes come after the pushed frames, and the client pulls them.
    server_execute(
        &url,
        &token,
        &["INSERT INTO visits (site) VALUES ('south')"],
    )
    .await;
    db.sync().await.unwrap();
    assert_eq!(local_count(&db.connect().unwrap(), "visits").await, 303);
    // Offline again, on top of the pulled frames.
    let conn = db.connect().unwrap();
    conn.execute("INSERT INTO visits (site) VALUES ('east')", ())
        .await
        .unwrap();
    db.sync().await.unwrap();
    assert_eq!(on_server("SELECT count(*) FROM visits").await, "304");
    assert_eq!(
        server_scalar(&url, &token, "PRAGMA integrity_check").await,
        "ok"
    );

    // A replica made now has all of it.
    let second = open("field-2.db").await.unwrap();
    second.sync().await.unwrap();
    assert_eq!(local_count(&second.connect().unwrap(), "visits").await, 304);

    // Written on both sides: the push is a conflict, and nothing of it reaches the server.
    server_execute(
        &url,
        &token,
        &["INSERT INTO visits (site) VALUES ('west-server')"],
    )
    .await;
    conn.execute("INSERT INTO visits (site) VALUES ('west-offline')", ())
        .await
        .unwrap();
    let refused = db.sync().await.unwrap_err().to_string();
    assert!(refused.contains("conflict"), "{refused}");
    assert_eq!(on_server("SELECT count(*) FROM visits").await, "305");
    assert_eq!(
        on_server("SELECT count(*) FROM visits WHERE site = 'west-offline'").await,
        "0"
    );
    // The other replica, which wrote nothing, goes on syncing.
    second.sync().await.unwrap();
    assert_eq!(local_count(&second.connect().unwrap(), "visits").await, 305);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The frames of a local replica's WAL (24-byte header and page each), from frame 1.
fn local_wal_frames(db_path: &Path) -> Vec<Vec<u8>> {
    let mut wal = db_path.as_os_str().to_owned();
    wal.push("-wal");
    let bytes = std::fs::read(wal).unwrap_or_default();
    bytes
        .get(32..)
        .unwrap_or_default()
        .chunks(4120)
        .filter(|frame| frame.len() == 4120)
        .map(<[u8]>::to_vec)
        .collect()
}

/// Pushes `frames` as frames `start..` of `generation`, as libSQL's client does.
async fn push_frames(
    url: &str,
    token: &str,
    generation: u64,
    start: usize,
    frames: &[Vec<u8>],
    baton: Option<&str>,
) -> (u16, Value) {
    let end = start + frames.len();
    let mut target = format!("{url}/sync/{generation}/{start}/{end}");
    if let Some(baton) = baton {
        target.push_str(&format!("/{baton}"));
    }
    let response = reqwest::Client::new()
        .post(target)
        .bearer_auth(token)
        .body(frames.concat())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| json!({ "text": text })),
    )
}

/// Pushed frames as a hostile client would send them: pages that would damage the
/// database, a header changed underneath SQLite, a database past its size limit, a
/// read-only token. Each is refused before anything is written; the server killed while a
/// push waits for its commit frame forgets the push, and the client sends it again whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_pushes_change_nothing_and_a_push_cut_by_a_crash_is_sent_again() {
    let mut server = start_dev("replica-push-hostile").await;
    let (url, token) = database(&server, "ledger").await;
    server_execute(
        &url,
        &token,
        &["CREATE TABLE entries (id INTEGER PRIMARY KEY, memo TEXT, padding BLOB)"],
    )
    .await;
    let count = |url: String, token: String| async move {
        server_scalar(&url, &token, "SELECT count(*) FROM entries").await
    };
    let dir = temp_dir("replica-push-hostile-local");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ledger.db");
    let info: Value = reqwest::Client::new()
        .get(format!("{url}/info"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let generation = info["current_generation"].as_u64().unwrap();
    let db = Builder::new_synced_database(&path, url.clone(), token.clone())
        .connector(connector())
        .build()
        .await
        .unwrap();
    db.sync().await.unwrap();
    let pulled = local_wal_frames(&path).len();
    let conn = db.connect().unwrap();
    conn.execute(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300) INSERT INTO entries (memo, padding) SELECT 'offline-' || x, randomblob(3000) FROM c",
        (),
    )
    .await
    .unwrap();
    conn.execute("INSERT INTO entries (memo) VALUES ('last')", ())
        .await
        .unwrap();
    drop(conn);
    drop(db);
    let frames = local_wal_frames(&path)[pulled..].to_vec();
    assert!(frames.len() > 256, "{} frames", frames.len());
    let start = pulled + 1;
    let page_of = |frame: &[u8]| u32::from_be_bytes(frame[..4].try_into().unwrap());

    // A read-only token pushes nothing.
    let read_only = read_only_token(&server, "ledger").await;
    let (status, _) = push_frames(&url, &read_only, generation, start, &frames, None).await;
    assert_eq!(status, 403);
    // A body that is not whole frames; a frame naming page 0.
    let mut short = frames[..2].to_vec();
    short[1].pop();
    let (status, _) = push_frames(&url, &token, generation, start, &short, None).await;
    assert_eq!(status, 400);
    let mut page_zero = frames.clone();
    page_zero[0][..4].copy_from_slice(&0u32.to_be_bytes());
    let (status, body) = push_frames(&url, &token, generation, start, &page_zero, None).await;
    assert_eq!(status, 400, "{body}");

    // Garbage in a b-tree page (the table's root, page 2): the database it would make
    // fails its check, so no frame is written.
    let mut damaged = frames.clone();
    let last = damaged.len() - 1;
    if page_of(&damaged[last]) == 2 {
        damaged[last][24..].fill(0x55);
    } else {
        let mut garbage = vec![0x55u8; 4120];
        garbage[..8].copy_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0]);
        damaged.insert(last, garbage);
    }
    let (status, body) = push_frames(&url, &token, generation, start, &damaged, None).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("unusable"),
        "{body}"
    );
    // The page size in the header changed underneath SQLite.
    let mut resized = frames.clone();
    let header_frame = resized
        .iter()
        .rposition(|f| page_of(f) == 1)
        .expect("growing the database rewrites page 1");
    resized[header_frame][24 + 16..24 + 18].copy_from_slice(&[0x20, 0x00]);
    let (status, body) = push_frames(&url, &token, generation, start, &resized, None).await;
    assert_eq!(status, 400, "{body}");
    // Past the database's size limit (the frames make about 1.3 MB).
    let patch = |limit: &'static str| {
        let (server_url, admin) = (server.url.clone(), server.admin_token());
        async move {
            let response = reqwest::Client::new()
                .patch(format!("{server_url}/v1/databases/ledger/configuration"))
                .bearer_auth(admin)
                .json(&json!({ "size_limit": limit }))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }
    };
    patch("1mb").await;
    let (status, body) = push_frames(&url, &token, generation, start, &frames, None).await;
    assert_eq!(status, 413, "{body}");
    patch("").await;
    assert_eq!(count(url.clone(), token.clone()).await, "0");

    // The first request of a push (no commit frame in it) waits under a baton; the server
    // is killed; the rest arrives with the old baton and is told to start again.
    let (status, body) = push_frames(&url, &token, generation, start, &frames[..128], None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ok");
    assert_eq!(body["max_frame_no"], (start + 127) as u64);
    let baton = body["baton"].as_str().unwrap().to_string();
    server.restart().await;
    let (url, _) = database_url(&server, "ledger").await;
    let (status, body) = push_frames(
        &url,
        &token,
        generation,
        start + 128,
        &frames[128..256],
        Some(&baton),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ok");
    assert_eq!(body["max_frame_no"], (start - 1) as u64);
    assert_eq!(count(url.clone(), token.clone()).await, "0");

    // Sent again whole, 128 frames a request under one baton: applied when the last
    // commit frame arrives, all of it at once.
    let mut baton: Option<String> = None;
    for (i, chunk) in frames.chunks(128).enumerate() {
        let first = start + i * 128;
        let (status, body) =
            push_frames(&url, &token, generation, first, chunk, baton.as_deref()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "ok", "{body}");
        assert_eq!(body["max_frame_no"], (first + chunk.len() - 1) as u64);
        baton = body["baton"].as_str().map(str::to_string);
    }
    assert_eq!(count(url.clone(), token.clone()).await, "301");
    // Sent once more (as a client whose answer was lost would): the database holds these
    // very frames, so they are acknowledged and nothing is written twice.
    let (status, body) = push_frames(&url, &token, generation, start, &frames[..128], None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ok", "{body}");
    assert_eq!(body["max_frame_no"], (start + 127) as u64);
    // Different pages at those places: a conflict, and nothing changes.
    let mut other = frames[..128].to_vec();
    other[5][100] ^= 0xff;
    let (status, body) = push_frames(&url, &token, generation, start, &other, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "conflict");
    assert_eq!(count(url.clone(), token.clone()).await, "301");

    // A replica made now has it, frame for frame.
    let fresh = Builder::new_synced_database(dir.join("fresh.db"), url.clone(), token.clone())
        .connector(connector())
        .build()
        .await
        .unwrap();
    fresh.sync().await.unwrap();
    assert_eq!(local_count(&fresh.connect().unwrap(), "entries").await, 301);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The database's URL as the API answers it now (the data plane's port changes when the
/// server restarts), without a trailing slash.
async fn database_url(server: &Server, name: &str) -> (String, Value) {
    let details: Value = reqwest::Client::new()
        .get(format!("{}/v1/databases/{name}", server.url))
        .bearer_auth(server.admin_token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = details["database"]["http_url"]
        .as_str()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    (url, details)
}

/// libSQL's older protocol: gRPC-web `wal_log.ReplicationLog` (what the crate uses without
/// its `sync` feature, or when told `SyncProtocol::V1`): a snapshot for a new replica, log
/// frames after it, a restore in place, and writes through the replica refused clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_over_the_grpc_protocol_snapshots_then_follows_the_log() {
    let server = start_dev("replica-grpc").await;
    let (url, token) = database(&server, "ledger").await;
    server_execute(
        &url,
        &token,
        &[
            "CREATE TABLE entries (id INTEGER PRIMARY KEY, amount INTEGER, padding BLOB)",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 40) INSERT INTO entries (amount, padding) SELECT x, randomblob(2000) FROM c",
        ],
    )
    .await;
    let dir = temp_dir("replica-grpc-local");
    std::fs::create_dir_all(&dir).unwrap();
    let open = |name: &str| {
        Builder::new_remote_replica(dir.join(name), url.clone(), token.clone())
            .connector(connector())
            .sync_protocol(libsql::SyncProtocol::V1)
            .build()
    };
    let db = open("ledger.db").await.unwrap();
    db.sync().await.unwrap();
    // The URL the CLI prints, with its trailing slash, works too (the client calls
    // `…//wal_log.ReplicationLog/Hello`).
    let slashed =
        Builder::new_remote_replica(dir.join("slashed.db"), format!("{url}/"), token.clone())
            .connector(connector())
            .sync_protocol(libsql::SyncProtocol::V1)
            .build()
            .await
            .unwrap();
    slashed.sync().await.unwrap();
    let sum = |db: &libsql::Database| {
        let conn = db.connect().unwrap();
        async move {
            let mut rows = conn
                .query("SELECT count(*), coalesce(sum(amount), 0) FROM entries", ())
                .await
                .unwrap();
            let row = rows.next().await.unwrap().unwrap();
            (row.get::<i64>(0).unwrap(), row.get::<i64>(1).unwrap())
        }
    };
    assert_eq!(sum(&db).await, (40, 820));
    assert_eq!(sum(&slashed).await, (40, 820));

    let before_more = rfc3339_now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    server_execute(
        &url,
        &token,
        &[
            "UPDATE entries SET amount = amount * 10 WHERE id <= 10",
            "INSERT INTO entries (amount) VALUES (1000)",
        ],
    )
    .await;
    db.sync().await.unwrap();
    assert_eq!(sum(&db).await, (41, 820 + 9 * 55 + 1000));

    let restored = reqwest::Client::new()
        .post(format!(
            "{}/v1/organizations/admin/databases/ledger/restore",
            server.url
        ))
        .bearer_auth(server.admin_token())
        .json(&json!({ "timestamp": before_more }))
        .send()
        .await
        .unwrap();
    assert_eq!(restored.status(), 200);
    db.sync().await.unwrap();
    assert_eq!(sum(&db).await, (40, 820));

    // Writes through a gRPC replica would go through `proxy.Proxy`: refused, clearly.
    let error = db
        .connect()
        .unwrap()
        .execute("INSERT INTO entries (amount) VALUES (1)", ())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("not served"), "{error}");

    // A token of another database syncs nothing.
    let (_, other_token) = database(&server, "other").await;
    let stranger = Builder::new_remote_replica(dir.join("stranger.db"), url.clone(), other_token)
        .connector(connector())
        .sync_protocol(libsql::SyncProtocol::V1)
        .build()
        .await;
    if let Ok(stranger) = stranger {
        assert!(stranger.sync().await.is_err());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gRPC-web call by hand: answers (grpc-status, grpc-message, body).
async fn grpc_call(
    url: &str,
    method: &str,
    token: Option<&str>,
    session: Option<&str>,
    message: &[u8],
) -> (String, String, Vec<u8>) {
    let mut body = vec![0u8];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    let mut request = reqwest::Client::new()
        .post(format!("{url}/wal_log.ReplicationLog/{method}"))
        .header("content-type", "application/grpc-web+proto")
        .body(body);
    if let Some(token) = token {
        request = request.header("x-authorization", format!("Bearer {token}"));
    }
    if let Some(session) = session {
        request = request.header("x-session-token", session);
    }
    let response = request.send().await.unwrap();
    assert_eq!(
        response.status(),
        200,
        "gRPC answers 200 and says the rest in grpc-status"
    );
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let (mut status, message) = (header("grpc-status"), header("grpc-message"));
    let body = response.bytes().await.unwrap().to_vec();
    if status.is_empty() && String::from_utf8_lossy(&body).contains("grpc-status:0") {
        status = "0".into();
    }
    (status, message, body)
}

/// `LogOffset { next_offset }` in protobuf.
fn log_offset(mut next: u64) -> Vec<u8> {
    let mut out = vec![0x08];
    loop {
        let byte = (next & 0x7f) as u8;
        next >>= 7;
        if next == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_grpc_calls_get_grpc_errors() {
    let server = start_dev("replica-grpc-hostile").await;
    let (url, token) = database(&server, "vault").await;
    let (_, other_token) = database(&server, "decoy").await;
    server_execute(
        &url,
        &token,
        &[
            "CREATE TABLE secret (x)",
            "INSERT INTO secret VALUES ('vault-only')",
        ],
    )
    .await;

    let (status, _, body) = grpc_call(&url, "Hello", None, None, &[]).await;
    assert_eq!(status, "16", "no token");
    assert!(!String::from_utf8_lossy(&body).contains("vault-only"));
    let (status, _, _) = grpc_call(&url, "Hello", Some(&other_token), None, &[]).await;
    assert!(
        status == "16" || status == "9",
        "a token of another database: {status}"
    );
    for method in ["BatchLogEntries", "Snapshot", "LogEntries"] {
        let (status, _, body) =
            grpc_call(&url, method, Some(&other_token), None, &log_offset(1)).await;
        assert!(status == "16" || status == "9", "{method}: {status}");
        assert!(!String::from_utf8_lossy(&body).contains("vault-only"));
    }

    let (status, _, hello) = grpc_call(&url, "Hello", Some(&token), None, &[]).await;
    assert_eq!(status, "0");
    assert_eq!(hello[0], 0, "a message frame first");
    let (status, _, frames) =
        grpc_call(&url, "BatchLogEntries", Some(&token), None, &log_offset(1)).await;
    assert_eq!(status, "0");
    assert!(frames.windows(10).any(|w| w == b"vault-only"));
    assert!(frames.len() < 1025 * 4200);

    // Absurd offsets want a snapshot; a stale session says hello again; garbage is refused.
    for offset in [0, u64::MAX, 1 << 40] {
        let (status, message, _) = grpc_call(
            &url,
            "BatchLogEntries",
            Some(&token),
            None,
            &log_offset(offset),
        )
        .await;
        assert_eq!(
            (status.as_str(), message.as_str()),
            ("9", "NEED_SNAPSHOT"),
            "offset {offset}"
        );
    }
    let stale = "00000000-0000-4000-8000-000000000000";
    let (status, message, _) = grpc_call(
        &url,
        "BatchLogEntries",
        Some(&token),
        Some(stale),
        &log_offset(1),
    )
    .await;
    assert_eq!((status.as_str(), message.as_str()), ("9", "NO_HELLO"));
    let (status, _, _) = grpc_call(&url, "Nonsense", Some(&token), None, &[]).await;
    assert_eq!(status, "12");
    let (status, _, _) = grpc_call(&url, "BatchLogEntries", Some(&token), None, &[0xff; 40]).await;
    assert_eq!(status, "3");
    let response = reqwest::Client::new()
        .post(format!("{url}/wal_log.ReplicationLog/Hello"))
        .header("x-authorization", format!("Bearer {token}"))
        .body(vec![0u8; 1 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["grpc-status"], "3", "a 1 MiB request");

    // Without a path prefix or a database host name, the namespace the client sends in
    // x-namespace-bin names the database; the token must still be one of its own.
    let root = url.split("/db/").next().unwrap().to_string();
    // (base64 without padding of "vault-admin" and "decoy-admin")
    for (namespace, expected) in [("dmF1bHQtYWRtaW4", "0"), ("ZGVjb3ktYWRtaW4", "16")] {
        let response = reqwest::Client::new()
            .post(format!("{root}/wal_log.ReplicationLog/Hello"))
            .header("x-authorization", format!("Bearer {token}"))
            .header("x-namespace-bin", namespace)
            .body(vec![0u8, 0, 0, 0, 0])
            .send()
            .await
            .unwrap();
        let status = response
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap().to_string());
        let body = response.bytes().await.unwrap();
        let status = status.unwrap_or_else(|| {
            assert!(String::from_utf8_lossy(&body).contains("grpc-status:0"));
            "0".into()
        });
        assert_eq!(status, expected, "{namespace}");
    }

    // The snapshot is the whole database, ending with a commit.
    let (status, _, snapshot) =
        grpc_call(&url, "Snapshot", Some(&token), None, &log_offset(0)).await;
    assert_eq!(status, "0");
    assert!(snapshot.windows(10).any(|w| w == b"vault-only"));
}

/// An embedded replica of a database encrypted with its customer's key (the `libsql`
/// crate's `remote_encryption`, which sends the key with every sync request): the server
/// decrypts the pages it sends and seals the ones pushed to it, the replica reads its rows,
/// follows new commits and pushes offline writes, no row lies on the server's disk in the
/// clear, and a replica without the key gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_database_syncs_to_a_replica_holding_its_key() {
    let server = start_dev("replica-encrypted").await;
    let key = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
    let created = reqwest::Client::new()
        .post(format!("{}/v1/databases", server.url))
        .bearer_auth(server.admin_token())
        .json(&json!({"name": "vault", "remote_encryption": {"encryption_key": key, "encryption_cipher": "aegis256"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let (url, token) =
        support::database_url_and_token(&server.url, &server.admin_token(), "vault").await;
    let url = url.trim_end_matches('/').to_string();
    let keyed_execute = |sql: &'static str| {
        let (url, token) = (url.clone(), token.clone());
        async move {
            let response = reqwest::Client::new()
                .post(format!("{url}/v2/pipeline"))
                .bearer_auth(token)
                .header("x-turso-encryption-key", key)
                .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }
    };
    keyed_execute("CREATE TABLE secrets (id INTEGER PRIMARY KEY, v TEXT)").await;
    keyed_execute(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 40) INSERT INTO secrets (v) SELECT 'sealed-' || x FROM c",
    )
    .await;

    let dir = temp_dir("replica-encrypted-local");
    std::fs::create_dir_all(&dir).unwrap();
    let encryption = || libsql::EncryptionContext {
        key: libsql::EncryptionKey::Base64Encoded(key.to_string()),
    };
    let db = Builder::new_synced_database(dir.join("vault.db"), url.clone(), token.clone())
        .connector(connector())
        .remote_encryption(encryption())
        .build()
        .await
        .unwrap();
    db.sync().await.unwrap();
    assert_eq!(local_count(&db.connect().unwrap(), "secrets").await, 40);
    keyed_execute("INSERT INTO secrets (v) VALUES ('after the first sync')").await;
    db.sync().await.unwrap();
    assert_eq!(local_count(&db.connect().unwrap(), "secrets").await, 41);

    // Offline writes pushed from the replica arrive plain and are sealed with the key
    // before they are checked and written: the server reads them with the key.
    db.connect()
        .unwrap()
        .execute("INSERT INTO secrets (v) VALUES ('written offline')", ())
        .await
        .unwrap();
    db.sync().await.unwrap();
    let response = reqwest::Client::new()
        .post(format!("{url}/v2/pipeline"))
        .bearer_auth(&token)
        .header("x-turso-encryption-key", key)
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": "SELECT count(*), max(v) FROM secrets WHERE v = 'written offline'"}}, {"type": "close"}]}))
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["results"][0]["response"]["result"]["rows"][0][0]["value"], "1",
        "{body}"
    );
    keyed_execute("INSERT INTO secrets (v) VALUES ('after the push')").await;
    db.sync().await.unwrap();
    assert_eq!(local_count(&db.connect().unwrap(), "secrets").await, 43);
    for file in walk(&server.data_dir) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        for needle in [&b"written offline"[..], b"sealed-1"] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} holds a row in the clear",
                file.display()
            );
        }
    }

    // Without the key, the first sync is refused.
    let keyless = Builder::new_synced_database(dir.join("keyless.db"), url.clone(), token.clone())
        .connector(connector())
        .build()
        .await
        .unwrap();
    assert!(keyless.sync().await.is_err(), "synced without the key");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
