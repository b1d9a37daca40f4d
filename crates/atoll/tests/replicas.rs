//! Replicas in a group's second location, as processes: `atoll serve` on PostgreSQL, one
//! `atoll node` in each of two locations, one object store. A group in both locations
//! gives its database a replica on the other location's node (issue 13): reads there are
//! served from the replica's own copy (even with the primary's node down), writes and
//! interactive transactions through it reach the primary, a client reads its own writes
//! through the replica, `…/locations/{location}/wait` answers once the replica caught up,
//! the instances list shows both, and removing the location removes the replica. Skips
//! (loudly) without PostgreSQL.

mod support;

use atoll_data::sync::proto::{decode_answer, PageData, PullHeader, PullRequest};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::cluster::{
    create_db, execute, ids, nodes, start_replica, wait_healthy, Api, Node, EAST, WEST,
};
use support::temp_dir;

/// Runs `tests/compat/replica-client.mjs` (`@libsql/client` from npm) against the node at
/// `node_url`. Needs Node and `npm ci` in `tests/compat` (scripts/test.sh runs it first);
/// without them it says so loudly and skips.
fn run_node_client(node_url: &str, label: &str, token: &str) {
    let compat = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/compat");
    if !compat.join("node_modules/@libsql/client").exists() {
        eprintln!(
            "WARNING: tests/compat/node_modules has no @libsql/client (run `npm ci` there, as scripts/test.sh does): the Node client is not run against the replica"
        );
        return;
    }
    let output = std::process::Command::new("node")
        .arg(compat.join("replica-client.mjs"))
        .env("REPLICA_URL", format!("{node_url}/db/{label}/"))
        .env("TOKEN", token)
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            eprintln!(
                "WARNING: cannot run node ({e}): the Node client is not run against the replica"
            );
            return;
        }
    };
    assert!(
        output.status.success(),
        "@libsql/client through the replica failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs `tests/compat/replica-sync.mjs` (`@tursodatabase/sync` from npm) against the node
/// at `node_url`: it bootstraps from the replica (the database holds `rows` rows in `t`),
/// pulls, and pushes row 8000. Skips loudly as [`run_node_client`] does.
fn run_node_sync_client(node_url: &str, label: &str, token: &str, rows: usize) {
    let compat = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/compat");
    if !compat.join("node_modules/@tursodatabase/sync").exists() {
        eprintln!(
            "WARNING: tests/compat/node_modules has no @tursodatabase/sync (run `npm ci` there, as scripts/test.sh does): the Turso Sync client is not run against the replica"
        );
        return;
    }
    let output = std::process::Command::new("node")
        .arg(compat.join("replica-sync.mjs"))
        .env("REPLICA_URL", format!("{node_url}/db/{label}/"))
        .env("TOKEN", token)
        .env("ROWS", rows.to_string())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            eprintln!(
                "WARNING: cannot run node ({e}): the Turso Sync client is not run against the replica"
            );
            return;
        }
    };
    assert!(
        output.status.success(),
        "@tursodatabase/sync through the replica failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn pipeline(
    client: &reqwest::Client,
    node_url: &str,
    label: &str,
    token: &str,
    body: Value,
) -> (u16, Value) {
    let response = client
        .post(format!("{node_url}/db/{label}/v3/pipeline"))
        .bearer_auth(token)
        .json(&body)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A Turso Sync pull (`POST /pull-updates`, docs/DATA-PLANE.md "Turso Sync") from the
/// node at `node_url`: its status, and the answer's header and pages when 200.
async fn pull(
    client: &reqwest::Client,
    node_url: &str,
    label: &str,
    token: &str,
    revision: &str,
    long_poll_ms: u32,
) -> (u16, Option<(PullHeader, Vec<PageData>)>) {
    let request = PullRequest {
        client_revision: revision.to_string(),
        long_poll_timeout_ms: long_poll_ms,
        ..PullRequest::default()
    };
    let response = client
        .post(format!("{node_url}/db/{label}/pull-updates"))
        .bearer_auth(token)
        .header("content-type", "application/protobuf")
        .body(request.to_body())
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap();
    if status != 200 {
        return (status, None);
    }
    (status, Some(decode_answer(&body).unwrap()))
}

/// Writes an answer's pages into the client's file and cuts it at the database's size, as
/// the sync client applies them.
fn apply_pulled(file: &std::path::Path, header: &PullHeader, pages: &[PageData]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(file)
        .unwrap();
    for page in pages {
        out.seek(SeekFrom::Start(page.page_id * 4096)).unwrap();
        out.write_all(&page.encoded_page).unwrap();
    }
    out.set_len(header.db_size * 4096).unwrap();
}

fn local_rows(file: &std::path::Path) -> Vec<(i64, String)> {
    let conn = rusqlite::Connection::open(file).unwrap();
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let mut statement = conn.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
    let rows = statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_in_two_locations_serves_reads_from_the_replica_and_writes_through_it() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let root = temp_dir("replicas");
    std::fs::create_dir_all(&root).unwrap();
    let storage = format!("file://{}", root.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let control = start_replica(&database_url, &secrets_key, &root.join("serve"));
    wait_healthy(&control.url).await;
    let replicas = [control.url.as_str()];
    let (east_dir, west_dir) = (root.join("east"), root.join("west"));
    let mut east = Node::start("east", EAST, &east_dir, &storage, &replicas);
    let mut west = Node::start("west", WEST, &west_dir, &storage, &replicas);
    wait_healthy(&east.url).await;
    wait_healthy(&west.url).await;
    let api = Api::login(&control.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while nodes(&api, &control.url).await.len() < 2 {
        assert!(Instant::now() < deadline, "the nodes did not register");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, orgs) = api.get(format!("{}/v1/organizations", control.url)).await;
    let org = orgs[0]["slug"].as_str().unwrap().to_string();
    let base = format!("{}/v1/organizations/{org}", control.url);

    let (status, body) = api
        .post(
            format!("{base}/groups"),
            json!({"name": "multi", "location": EAST}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let db = create_db(&api, &control.url, "shop", "multi").await;
    let client = reqwest::Client::new();
    execute(
        &client,
        &east.url,
        &db.label,
        &db.token,
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)",
    )
    .await
    .unwrap();
    for id in 1..=3 {
        execute(
            &client,
            &east.url,
            &db.label,
            &db.token,
            &format!("INSERT INTO t VALUES ({id}, 'east')"),
        )
        .await
        .unwrap();
    }

    // The second location: a replica on its node, caught up when `wait` answers.
    let (status, body) = api
        .post(format!("{base}/groups/multi/locations/{WEST}"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = api
        .get(format!("{base}/groups/multi/locations/{WEST}/wait"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        west_dir.join("replicas").join(&db.id).join("data").exists(),
        "the west node holds no replica"
    );
    let (status, listed) = api.get(format!("{base}/databases/shop/instances")).await;
    assert_eq!(status, 200, "{listed}");
    let instances = listed["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 2, "{listed}");
    assert_eq!(instances[0]["type"], "primary");
    assert_eq!(instances[0]["region"], EAST);
    assert_eq!(instances[1]["type"], "replica");
    assert_eq!(instances[1]["region"], WEST);
    assert!(
        instances[1]["replication_index"].as_u64().unwrap() > 0,
        "{listed}"
    );
    let (status, one) = api
        .get(format!("{base}/databases/shop/instances/{WEST}"))
        .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["instance"]["type"], "replica");

    // The primary's log is for nodes only: a client (even with the database's own
    // token) gets nothing from the frames route.
    for token in [None, Some(db.token.as_str())] {
        let mut request = client.get(format!("{}/v1/internal/frames/{}?after=0", east.url, db.id));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let refused = request.send().await.unwrap();
        assert_eq!(refused.status(), 401);
    }

    // Reads through the west node see the primary's rows.
    assert_eq!(
        ids(&client, &west.url, &db.label, &db.token).await,
        BTreeSet::from([1, 2, 3])
    );

    // Writes through the replica reach the primary, and the same client reads them back
    // through the replica at once (it waits to apply the frame the primary reported).
    for id in 4..=23 {
        execute(
            &client,
            &west.url,
            &db.label,
            &db.token,
            &format!("INSERT INTO t VALUES ({id}, 'via west')"),
        )
        .await
        .unwrap();
        let seen = ids(&client, &west.url, &db.label, &db.token).await;
        assert!(
            seen.contains(&id),
            "the replica did not show write {id}: {seen:?}"
        );
    }
    // `replication_index`: a write's result carries the frame of its commit, a read on the
    // primary none, a read on the replica the frame it had applied (at least the write's,
    // which its client saw); a read that asks for a frame the replica does not reach is
    // answered by the primary.
    let written = execute(
        &client,
        &east.url,
        &db.label,
        &db.token,
        "INSERT INTO t VALUES (50, 'indexed')",
    )
    .await
    .unwrap();
    let index: u64 = written["replication_index"]
        .as_str()
        .unwrap_or_else(|| panic!("no replication_index: {written}"))
        .parse()
        .unwrap();
    assert!(index > 0);
    let read = execute(&client, &east.url, &db.label, &db.token, "SELECT 1")
        .await
        .unwrap();
    assert!(read["replication_index"].is_null(), "{read}");
    let read_at = |index: u64| {
        json!({"requests": [
            {"type": "execute", "stmt": {"sql": "SELECT count(*) FROM t WHERE id = 50", "replication_index": index.to_string()}},
            {"type": "close"}
        ]})
    };
    let (status, body) = pipeline(&client, &west.url, &db.label, &db.token, read_at(index)).await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0]["response"]["result"];
    assert_eq!(result["rows"][0][0]["value"], "1", "{body}");
    let seen: u64 = result["replication_index"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(seen >= index, "{body}");
    let (status, body) = pipeline(
        &client,
        &west.url,
        &db.label,
        &db.token,
        read_at(index + 1_000_000),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["results"][0]["response"]["result"]["rows"][0][0]["value"], "1",
        "{body}"
    );
    execute(
        &client,
        &east.url,
        &db.label,
        &db.token,
        "DELETE FROM t WHERE id = 50",
    )
    .await
    .unwrap();

    // The official Node client, unmodified, through the replica's node.
    run_node_client(&west.url, &db.label, &db.token);

    // An interactive transaction through the replica: its baton belongs to the primary.
    let (status, begun) = pipeline(
        &client,
        &west.url,
        &db.label,
        &db.token,
        json!({"requests": [
            {"type": "execute", "stmt": {"sql": "BEGIN"}},
            {"type": "execute", "stmt": {"sql": "INSERT INTO t VALUES (100, 'tx')"}}
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{begun}");
    let baton = begun["baton"].as_str().expect("a baton").to_string();
    let (status, committed) = pipeline(
        &client,
        &west.url,
        &db.label,
        &db.token,
        json!({"baton": baton, "requests": [
            {"type": "execute", "stmt": {"sql": "COMMIT"}},
            {"type": "close"}
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{committed}");
    assert_eq!(committed["results"][0]["type"], "ok", "{committed}");
    assert!(ids(&client, &west.url, &db.label, &db.token)
        .await
        .contains(&100));
    // A read-only token reads through the replica too, and cannot write through it.
    let (status, minted) = api
        .post(
            format!("{base}/databases/shop/auth/tokens?authorization=read-only"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{minted}");
    let reader = minted["jwt"].as_str().unwrap();
    assert_eq!(ids(&client, &west.url, &db.label, reader).await.len(), 24);
    assert!(execute(
        &client,
        &west.url,
        &db.label,
        reader,
        "INSERT INTO t VALUES (999, 'no')"
    )
    .await
    .is_err());

    // Usage per instance: the replica's reads are its own, the writes (forwarded) the
    // primary's, and the instances add up to the database's total.
    let (status, usage) = api.get(format!("{base}/databases/shop/usage")).await;
    assert_eq!(status, 200, "{usage}");
    let database = &usage["database"];
    let instances = database["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 2, "{usage}");
    assert_eq!(instances[0]["uuid"], db.id);
    assert_eq!(
        instances[1]["uuid"], listed["instances"][1]["uuid"],
        "{usage}"
    );
    let (primary, replica) = (&instances[0]["usage"], &instances[1]["usage"]);
    assert!(replica["rows_read"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(replica["rows_written"], 0, "{usage}");
    assert!(primary["rows_written"].as_u64().unwrap() >= 23, "{usage}");
    for field in ["rows_read", "rows_written"] {
        assert_eq!(
            primary[field].as_u64().unwrap() + replica[field].as_u64().unwrap(),
            database["total"][field].as_u64().unwrap(),
            "{field}: {usage}"
        );
    }

    // The official Rust client, unmodified, through the replica's node: plain remote
    // queries (its connection keeps a stream open, so they are the primary's), and an
    // embedded replica that syncs and writes through it.
    let west_db_url = format!("{}/db/{}", west.url, db.label);
    let remote = libsql::Builder::new_remote(west_db_url.clone(), db.token.clone())
        .connector(hyper::client::HttpConnector::new())
        .build()
        .await
        .unwrap();
    let conn = remote.connect().unwrap();
    conn.execute("INSERT INTO t VALUES (200, 'libsql remote')", ())
        .await
        .unwrap();
    let mut rows = conn.query("SELECT count(*) FROM t", ()).await.unwrap();
    let count: i64 = rows.next().await.unwrap().unwrap().get(0).unwrap();
    assert_eq!(count, 25);
    let local_dir = root.join("embedded");
    std::fs::create_dir_all(&local_dir).unwrap();
    let embedded = libsql::Builder::new_remote_replica(
        local_dir.join("shop.db"),
        west_db_url.clone(),
        db.token.clone(),
    )
    .connector(hyper::client::HttpConnector::new())
    .build()
    .await
    .unwrap();
    embedded.sync().await.unwrap();
    let local = embedded.connect().unwrap();
    local
        .execute("INSERT INTO t VALUES (201, 'embedded')", ())
        .await
        .unwrap();
    embedded.sync().await.unwrap();
    let mut rows = local.query("SELECT count(*) FROM t", ()).await.unwrap();
    let count: i64 = rows.next().await.unwrap().unwrap().get(0).unwrap();
    assert_eq!(count, 26);
    assert_eq!(
        ids(&client, &west.url, &db.label, &db.token).await.len(),
        26
    );

    // The replica's node is killed (SIGKILL, mid-follow, under writes to the primary) and
    // comes back: its replica resumes from what it applied, and catches up.
    west.restart();
    wait_healthy(&west.url).await;
    for id in 300..310 {
        execute(
            &client,
            &east.url,
            &db.label,
            &db.token,
            &format!("INSERT INTO t VALUES ({id}, 'while west was down')"),
        )
        .await
        .unwrap();
    }
    let (status, body) = api
        .get(format!("{base}/groups/multi/locations/{WEST}/wait"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        ids(&client, &west.url, &db.label, &db.token).await.len(),
        36
    );

    // Turso Sync pulls through the replica's node are answered from its copy and the
    // stored log (shown below with the primary's node down): a bootstrap gives the
    // database, a pull from its revision the pages a write on the primary changed (a long
    // poll, woken once the replica applied it and it is stored), a revision past what the
    // replica holds goes to the primary (a client never goes back).
    // The official client first: its push reaches the primary, taken back after.
    run_node_sync_client(&west.url, &db.label, &db.token, 36);
    if std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/compat/node_modules/@tursodatabase/sync")
        .exists()
    {
        assert!(ids(&client, &east.url, &db.label, &db.token)
            .await
            .contains(&8000));
    }
    execute(
        &client,
        &east.url,
        &db.label,
        &db.token,
        "DELETE FROM t WHERE id = 8000",
    )
    .await
    .unwrap();
    let (status, body) = api
        .get(format!("{base}/groups/multi/locations/{WEST}/wait"))
        .await;
    assert_eq!(status, 200, "{body}");
    let synced = root.join("synced.db");
    let (status, answer) = pull(&client, &west.url, &db.label, &db.token, "", 0).await;
    assert_eq!(status, 200);
    let (header, pages) = answer.unwrap();
    apply_pulled(&synced, &header, &pages);
    assert_eq!(local_rows(&synced).len(), 36);
    let bootstrapped: u64 = header.server_revision.parse().unwrap();
    let waiting = {
        let (client, url, label, token) = (
            client.clone(),
            west.url.clone(),
            db.label.clone(),
            db.token.clone(),
        );
        let revision = header.server_revision.clone();
        tokio::spawn(async move { pull(&client, &url, &label, &token, &revision, 20_000).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    execute(
        &client,
        &east.url,
        &db.label,
        &db.token,
        "UPDATE t SET v = 'pulled' WHERE id = 1",
    )
    .await
    .unwrap();
    let (status, answer) = waiting.await.unwrap();
    assert_eq!(status, 200);
    let (header, pages) = answer.unwrap();
    let pulled: u64 = header.server_revision.parse().unwrap();
    assert!(pulled > bootstrapped, "{header:?}");
    assert!(
        !pages.is_empty() && pages.len() < 10,
        "{} pages",
        pages.len()
    );
    apply_pulled(&synced, &header, &pages);
    let rows = local_rows(&synced);
    assert_eq!(rows.len(), 36);
    assert_eq!(rows[0], (1, "pulled".to_string()));
    let (status, answer) = pull(
        &client,
        &west.url,
        &db.label,
        &db.token,
        &(pulled + 1_000_000).to_string(),
        0,
    )
    .await;
    assert_eq!(status, 200);
    let (ahead, pages) = answer.unwrap();
    // The primary cannot compare it with its log either: every page, as of its head.
    assert_eq!(pages.len() as u64, ahead.db_size);
    assert!(ahead.server_revision.parse::<u64>().unwrap() >= pulled);

    // The primary's node goes down: the replica still serves reads from its own copy;
    // writes through it fail (nothing is acknowledged that the primary did not take).
    east.process.kill();
    for _ in 0..5 {
        // Never an older state than the one already read, however long the primary is gone.
        let all = ids(&client, &west.url, &db.label, &db.token).await;
        assert_eq!(all.len(), 36, "{all:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Turso Sync pulls too, from its copy and the stored log: nothing newer than the
    // client's revision, and a bootstrap.
    let (status, answer) = pull(
        &client,
        &west.url,
        &db.label,
        &db.token,
        &pulled.to_string(),
        0,
    )
    .await;
    assert_eq!(status, 200);
    let (header, pages) = answer.unwrap();
    assert_eq!(header.server_revision, pulled.to_string());
    assert!(pages.is_empty());
    let (status, answer) = pull(&client, &west.url, &db.label, &db.token, "", 0).await;
    assert_eq!(status, 200);
    let (header, pages) = answer.unwrap();
    assert_eq!(header.server_revision, pulled.to_string());
    let again = root.join("synced-again.db");
    apply_pulled(&again, &header, &pages);
    assert_eq!(local_rows(&again), rows);
    assert!(execute(
        &client,
        &west.url,
        &db.label,
        &db.token,
        "INSERT INTO t VALUES (500, 'lost?')"
    )
    .await
    .is_err());

    // Back, and the location removed: the replica goes.
    east.restart();
    wait_healthy(&east.url).await;
    let (status, body) = api
        .call(
            reqwest::Method::DELETE,
            format!("{base}/groups/multi/locations/{WEST}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while west_dir.join("replicas").join(&db.id).exists() {
        assert!(Instant::now() < deadline, "the replica was not removed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, listed) = api.get(format!("{base}/databases/shop/instances")).await;
    assert_eq!(listed["instances"].as_array().unwrap().len(), 1, "{listed}");
    // Through the west node the database is still reachable (forwarded to the primary).
    assert_eq!(
        ids(&client, &west.url, &db.label, &db.token).await.len(),
        36
    );

    // Under load: a writer inserts through the primary's node the whole time the location
    // is added again (the replica starts from object storage while frames keep coming)
    // and removed again. No write fails, every acknowledged one is on the primary, and the
    // replica, once `wait` answered, holds every write acknowledged before it was asked
    // (the ones after may still be on their way: a replica is a few milliseconds behind).
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let (client, url, label, token) = (
            client.clone(),
            east.url.clone(),
            db.label.clone(),
            db.token.clone(),
        );
        let (stop, acknowledged, failures) = (
            Arc::clone(&stop),
            Arc::clone(&acknowledged),
            Arc::clone(&failures),
        );
        tokio::spawn(async move {
            let mut id = 10_000;
            while !stop.load(Ordering::SeqCst) {
                let sql = format!("INSERT INTO t VALUES ({id}, 'under load')");
                match execute(&client, &url, &label, &token, &sql).await {
                    Ok(_) => acknowledged.lock().unwrap().push(id),
                    Err(e) => failures.lock().unwrap().push(e),
                }
                id += 1;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = api
        .post(format!("{base}/groups/multi/locations/{WEST}"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let before_wait: BTreeSet<i64> = acknowledged.lock().unwrap().iter().copied().collect();
    let (status, body) = api
        .get(format!("{base}/groups/multi/locations/{WEST}/wait"))
        .await;
    assert_eq!(status, 200, "{body}");
    let on_replica = ids(&client, &west.url, &db.label, &db.token).await;
    assert!(
        before_wait.is_subset(&on_replica),
        "the caught-up replica misses {:?}",
        before_wait.difference(&on_replica).collect::<Vec<_>>()
    );
    let (status, body) = api
        .call(
            reqwest::Method::DELETE,
            format!("{base}/groups/multi/locations/{WEST}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    assert!(
        failures.lock().unwrap().is_empty(),
        "writes failed under the location changes: {:?}",
        failures.lock().unwrap()
    );
    let written: BTreeSet<i64> = acknowledged.lock().unwrap().iter().copied().collect();
    assert!(
        written.len() > before_wait.len(),
        "the writer stopped early"
    );
    let on_primary = ids(&client, &east.url, &db.label, &db.token).await;
    assert!(written.is_subset(&on_primary));
}
