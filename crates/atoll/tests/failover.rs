//! Failover, as processes (issue 13; docs/STORAGE.md, "Failover"): `atoll serve
//! --failover-after-secs` on PostgreSQL, one `atoll node` in each of two locations, one
//! object store, a group in both locations whose databases commit in `sync` durability.
//!
//! - The primary's node is SIGKILLed under a stream of writes: once its lease ran out the
//!   control plane fails the group over to the other location by itself, and every write
//!   that was acknowledged is there; the old node, restarted, quarantines its copy (never
//!   serves it) and holds the replica.
//! - `atoll group failover` moves the primary back while both nodes are up (a hand-over:
//!   nothing lost).
//! - A node that no control plane answers stops committing once its lease runs out, and
//!   serving reads (503: it cannot confirm its databases' state), and commits again when
//!   one answers.
//!
//! Skips (loudly) without PostgreSQL.

mod support;

use serde_json::json;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::cluster::{
    create_db, execute, ids, nodes, start_replica_with, wait_healthy, Api, Node, EAST, WEST,
};
use support::{free_port, ok, temp_dir};

/// The primary's location of database `name`, from its instances.
async fn primary_location(api: &Api, base: &str, name: &str) -> Option<String> {
    let (status, listed) = api.get(format!("{base}/databases/{name}/instances")).await;
    if status != 200 {
        return None;
    }
    listed["instances"]
        .as_array()?
        .iter()
        .find(|i| i["type"] == "primary")
        .and_then(|i| i["region"].as_str())
        .map(str::to_string)
}

/// Inserts ids from `first` on through `node_url` until `stop`, keeping the ones whose
/// insert was acknowledged.
fn spawn_writer(
    node_url: String,
    label: String,
    token: String,
    first: i64,
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<Vec<i64>>>, tokio::task::JoinHandle<()>) {
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&acknowledged);
    let task = tokio::spawn(async move {
        let client = reqwest::Client::new();
        let mut id = first;
        while !stop.load(Ordering::SeqCst) {
            let sql = format!("INSERT INTO t VALUES ({id}, 'stream')");
            if execute(&client, &node_url, &label, &token, &sql)
                .await
                .is_ok()
            {
                kept.lock().unwrap().push(id);
            }
            id += 1;
        }
    });
    (acknowledged, task)
}

/// One statement on database `label` through the node at `node_url`, with an encryption
/// key or none: (status, body).
async fn execute_keyed(
    node_url: &str,
    label: &str,
    token: &str,
    key: Option<&str>,
    sql: &str,
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{node_url}/db/{label}/v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]}))
        .timeout(Duration::from_secs(30));
    if let Some(key) = key {
        request = request.header("x-turso-encryption-key", key);
    }
    let response = request.send().await.unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_primary_fails_over_with_every_acknowledged_write_and_a_cut_off_node_stops_committing(
) {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let root = temp_dir("failover");
    std::fs::create_dir_all(&root).unwrap();
    let storage = format!("file://{}", root.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let serve_port = free_port();
    let serve_args = ["--failover-after-secs", "30"];
    let mut control = start_replica_with(
        &database_url,
        &secrets_key,
        &root.join("serve"),
        serve_port,
        &serve_args,
    );
    wait_healthy(&control.url).await;
    let replicas = [control.url.as_str()];
    let (east_dir, west_dir) = (root.join("east"), root.join("west"));
    let sync = ["--durability", "sync"];
    let mut east = Node::start_with("east", EAST, &east_dir, &storage, &replicas, &sync);
    let west = Node::start_with("west", WEST, &west_dir, &storage, &replicas, &sync);
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
    let (status, body) = api
        .post(format!("{base}/groups/multi/locations/{WEST}"), json!({}))
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
    // A database encrypted with its customer's key in the same group: the nodes never
    // hold its key, and it fails over as the others do (its pages are copied as they are).
    let vault_key = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
    let (status, body) = api
        .post(
            format!("{base}/databases"),
            json!({"name": "vault", "group": "multi", "remote_encryption": {"encryption_key": vault_key}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, vault) = api.get(format!("{base}/databases/vault")).await;
    let vault_label = vault["database"]["Hostname"]
        .as_str()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_string();
    let (_, minted) = api
        .post(format!("{base}/databases/vault/auth/tokens"), json!({}))
        .await;
    let vault_token = minted["jwt"].as_str().unwrap().to_string();
    for sql in [
        "CREATE TABLE secrets (v TEXT)",
        "INSERT INTO secrets VALUES ('kept through the failover')",
    ] {
        let (status, body) =
            execute_keyed(&east.url, &vault_label, &vault_token, Some(vault_key), sql).await;
        assert_eq!(status, 200, "{body}");
    }

    // Failing over while nothing is lost yet is refused: the primary's node is up, so
    // this is a move, and a location the group is not in is refused.
    let (status, body) = api
        .post(
            format!("{base}/groups/multi/failover"),
            json!({"location": "aws-ap-south-1"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");

    // An embedded replica (the official `libsql` crate's synced database), synced through
    // the other location's node before anything goes wrong.
    let local_dir = root.join("embedded");
    std::fs::create_dir_all(&local_dir).unwrap();
    let embedded = libsql::Builder::new_synced_database(
        local_dir.join("shop.db"),
        format!("{}/db/{}", west.url, db.label),
        db.token.clone(),
    )
    .connector(hyper::client::HttpConnector::new())
    .build()
    .await
    .unwrap();
    embedded.sync().await.unwrap();

    // A stream of writes through the primary's node, SIGKILLed in the middle of it.
    let stop = Arc::new(AtomicBool::new(false));
    let (acknowledged, writer) = spawn_writer(
        east.url.clone(),
        db.label.clone(),
        db.token.clone(),
        1,
        Arc::clone(&stop),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while acknowledged.lock().unwrap().len() < 20 {
        assert!(Instant::now() < deadline, "no writes were acknowledged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    east.process.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let acknowledged: BTreeSet<i64> = acknowledged.lock().unwrap().iter().copied().collect();
    let killed_at = Instant::now();

    // The control plane fails the group over by itself: the lease (15 s) and its margin
    // (10 s) after the last heartbeat, and --failover-after-secs (30 s).
    let deadline = Instant::now() + Duration::from_secs(120);
    while primary_location(&api, &base, "shop").await.as_deref() != Some(WEST) {
        assert!(
            Instant::now() < deadline,
            "the group was not failed over (see {})",
            root.join("serve.log").display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let failed_over_after = killed_at.elapsed();
    let (_, group) = api.get(format!("{base}/groups/multi")).await;
    assert_eq!(group["group"]["primary"], WEST, "{group}");
    let seen = ids(&client, &west.url, &db.label, &db.token).await;
    let lost: Vec<_> = acknowledged.difference(&seen).collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost by the failover: {lost:?} (of {})",
        acknowledged.len()
    );
    // The encrypted database too, read with its key on the node that adopted it without
    // the key; refused without it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let vault_rows = loop {
        let (status, body) = execute_keyed(
            &west.url,
            &vault_label,
            &vault_token,
            Some(vault_key),
            "SELECT v FROM secrets",
        )
        .await;
        if status == 200 || Instant::now() >= deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        vault_rows.1["results"][0]["response"]["result"]["rows"][0][0]["value"],
        "kept through the failover",
        "{vault_rows:?}"
    );
    let (status, _) = execute_keyed(
        &west.url,
        &vault_label,
        &vault_token,
        None,
        "SELECT v FROM secrets",
    )
    .await;
    assert_eq!(status, 401);
    // The new primary takes writes, and the old node's copy is not in the listing.
    execute(
        &client,
        &west.url,
        &db.label,
        &db.token,
        "INSERT INTO t VALUES (100000, 'after failover')",
    )
    .await
    .unwrap();
    // The embedded replica goes on syncing from the new primary: the same log, the same
    // frame numbers, nothing to rebuild.
    embedded.sync().await.unwrap();
    let local = embedded.connect().unwrap();
    let mut rows = local.query("SELECT count(*) FROM t", ()).await.unwrap();
    let synced: i64 = rows.next().await.unwrap().unwrap().get(0).unwrap();
    assert_eq!(
        synced as usize,
        seen.len() + 1,
        "the embedded replica after the failover"
    );
    eprintln!(
        "failover: {} acknowledged writes kept, primary in {WEST} {:.1} s after the SIGKILL",
        acknowledged.len(),
        failed_over_after.as_secs_f64()
    );

    // The old node comes back: its copy is quarantined (it could hold writes nobody
    // acknowledged), never served, and it holds the replica of the new primary.
    east.restart();
    wait_healthy(&east.url).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !east_dir.join("quarantine").join(&db.id).exists() {
        assert!(
            Instant::now() < deadline,
            "the old primary's copy was not quarantined"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!east_dir.join("dbs").join(&db.id).exists());
    let (status, body) = api
        .get(format!("{base}/groups/multi/locations/{EAST}/wait"))
        .await;
    assert_eq!(status, 200, "{body}");
    let through_east = ids(&client, &east.url, &db.label, &db.token).await;
    assert!(through_east.contains(&100_000), "{through_east:?}");
    assert!(acknowledged.is_subset(&through_east));

    // Back to the first location with the CLI, both nodes up: a move, nothing lost.
    let config = root.join("cli");
    std::fs::create_dir_all(&config).unwrap();
    let login = support::atoll_env(
        &config,
        &[
            "auth",
            "login",
            "--api-url",
            &control.url,
            "--username",
            "root",
        ],
        &[("ATOLL_PASSWORD", "a-long-password")],
    );
    assert!(
        login.status.success(),
        "{}",
        String::from_utf8_lossy(&login.stderr)
    );
    let printed = ok(&config, &["group", "failover", "multi", "--to", EAST]);
    assert!(printed.contains("Moved shop to node east"), "{printed}");
    assert_eq!(
        primary_location(&api, &base, "shop").await.as_deref(),
        Some(EAST)
    );
    let after_move = ids(&client, &east.url, &db.label, &db.token).await;
    assert_eq!(after_move, through_east, "a move loses nothing");
    let (status, audit) = api.get(format!("{base}/audit-logs?page_size=50")).await;
    assert_eq!(status, 200, "{audit}");
    assert!(audit.to_string().contains("group-failover"), "{audit}");

    // Cut off: with no control plane to answer its heartbeats, a node stops committing
    // once its lease ran out, and reading 10 s later. It commits again once one answers.
    control.process.kill();
    tokio::time::sleep(Duration::from_secs(17)).await;
    let refused = execute(
        &client,
        &east.url,
        &db.label,
        &db.token,
        "INSERT INTO t VALUES (200000, 'cut off')",
    )
    .await;
    let refused = refused.expect_err("a node without its lease committed");
    // Said as what it is, with the way out (not SQLite's "constraint failed").
    assert!(
        refused.contains("WRITE_NOT_APPLIED")
            && refused.contains("write lease")
            && refused.contains("retrying"),
        "{refused}"
    );
    // Nor, once 25 s passed since its last heartbeat was answered, does it serve reads: it
    // cannot confirm the database's state (docs/ARCHITECTURE.md, "Nodes converge before
    // they serve").
    tokio::time::sleep(Duration::from_secs(13)).await;
    let read = execute(&client, &east.url, &db.label, &db.token, "SELECT id FROM t").await;
    assert!(
        read.as_ref().is_err_and(|e| e.starts_with("503")),
        "a node cut off from its control plane served a read: {read:?}"
    );
    control = start_replica_with(
        &database_url,
        &secrets_key,
        &root.join("serve"),
        serve_port,
        &serve_args,
    );
    wait_healthy(&control.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let written = execute(
            &client,
            &east.url,
            &db.label,
            &db.token,
            "INSERT INTO t VALUES (200001, 'back')",
        )
        .await;
        if written.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the node did not commit again: {written:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after = ids(&client, &east.url, &db.label, &db.token).await;
    assert!(after.contains(&200_001) && !after.contains(&200_000));
    drop(control);
}
