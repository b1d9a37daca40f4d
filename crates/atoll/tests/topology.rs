//! The production topology, as processes: two `atoll serve` replicas on one PostgreSQL
//! store (no `--node` list: `--registered-nodes`), three `atoll node`s in two locations that
//! register themselves with both replicas, and one object store they share. Checks what
//! issue 12 asks of it: nodes register and heartbeat; placement balances the same from
//! every replica; every node of a location answers for all of its databases (forwarding,
//! HTTP and WebSocket), so a database keeps its URL; a drain moves databases through object
//! storage under writes with no acknowledged write lost; a SIGKILLed replica or node hurts
//! only what it held. Skips (loudly) without PostgreSQL.

mod support;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::cluster::{
    create_db, execute, ids, node, nodes, start_replica, wait_healthy, Api, Db, Node, EAST, WEST,
};
use support::temp_dir;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

fn holds(dir: &Path, id: &str) -> bool {
    dir.join("dbs").join(id).join("data").exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn registered_nodes_stable_endpoints_drains_and_kills() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let root = temp_dir("topology");
    std::fs::create_dir_all(&root).unwrap();
    let storage = format!("file://{}", root.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();

    // Two replicas of the control plane on one store; the second starts once the first has
    // set up the administrator.
    let mut r1 = start_replica(&database_url, &secrets_key, &root.join("r1"));
    wait_healthy(&r1.url).await;
    let r2 = start_replica(&database_url, &secrets_key, &root.join("r2"));
    wait_healthy(&r2.url).await;
    let replicas = [r1.url.as_str(), r2.url.as_str()];

    let dirs: Vec<PathBuf> = ["a1", "a2", "b1"].iter().map(|n| root.join(n)).collect();
    let mut a1 = Node::start("a1", EAST, &dirs[0], &storage, &replicas);
    let mut a2 = Node::start("a2", EAST, &dirs[1], &storage, &replicas);
    let b1 = Node::start("b1", WEST, &dirs[2], &storage, &replicas);
    for node in [&a1, &a2, &b1] {
        wait_healthy(&node.url).await;
    }
    let api = Api::login(&r1.url).await;

    // 1. The nodes register themselves, heartbeating. Asked of replica 1 only: replica 2
    //    must learn of them from the store by itself (its creates below need them).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = nodes(&api, &r1.url).await;
        let ready = listed.len() == 3
            && listed
                .iter()
                .all(|n| n["healthy"] == true && n["last_heartbeat_at"].is_string());
        if ready {
            assert_eq!(node(&listed, "a2")["location"], EAST);
            assert_eq!(node(&listed, "b1")["location"], WEST);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nodes did not register: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A node's own routes refuse anybody without the node secret, a user token included.
    let refused = api
        .post(
            format!("{}/v1/internal/nodes/heartbeat", r1.url),
            json!({"name": "evil", "location": EAST, "hostname_suffix": "x", "http_url": "http://evil", "databases": 0, "admin_url": "http://evil"}),
        )
        .await;
    assert_eq!(refused.0, 401, "{}", refused.1);
    let refused = reqwest::get(format!("{}/v1/internal/routes/anything", r1.url))
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    // 2. Placement balances, the same from both replicas.
    for (group, location) in [("east", EAST), ("west", WEST)] {
        let (status, body) = api
            .post(
                format!("{}/v1/groups", r1.url),
                json!({"name": group, "location": location}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let mut east = Vec::new();
    for i in 0..4 {
        let replica = replicas[i % 2];
        east.push(create_db(&api, replica, &format!("east-{i}"), "east").await);
    }
    let west = create_db(&api, &r2.url, "west-0", "west").await;
    let listed = nodes(&api, &r1.url).await;
    assert_eq!(node(&listed, "a1")["databases"], 2, "{listed:?}");
    assert_eq!(node(&listed, "a2")["databases"], 2, "{listed:?}");
    assert_eq!(node(&listed, "b1")["databases"], 1, "{listed:?}");

    // 3. Stable endpoints: every node of the location answers for each database, whoever
    //    holds it; writes through either node, reads through the other.
    let client = reqwest::Client::new();
    for db in &east {
        execute(
            &client,
            &a1.url,
            &db.label,
            &db.token,
            "CREATE TABLE t (id INTEGER PRIMARY KEY)",
        )
        .await
        .unwrap();
        execute(
            &client,
            &a1.url,
            &db.label,
            &db.token,
            "INSERT INTO t VALUES (1)",
        )
        .await
        .unwrap();
        execute(
            &client,
            &a2.url,
            &db.label,
            &db.token,
            "INSERT INTO t VALUES (2)",
        )
        .await
        .unwrap();
        assert_eq!(
            ids(&client, &a2.url, &db.label, &db.token).await,
            BTreeSet::from([1, 2])
        );
        assert_eq!(
            ids(&client, &a1.url, &db.label, &db.token).await,
            BTreeSet::from([1, 2])
        );
    }
    // A token for one database reaches no other through a forwarding node.
    let crossed = execute(&client, &a1.url, &east[1].label, &east[0].token, "SELECT 1").await;
    assert!(crossed.is_err(), "{crossed:?}");
    // An unknown database is 404 on every node, not a loop.
    let unknown = client
        .post(format!("{}/db/nope-root/v2/pipeline", a1.url))
        .bearer_auth(&east[0].token)
        .json(&json!({"requests": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    // WebSocket (Hrana 3) through a node that does not hold the database.
    let not_on_a1 = east
        .iter()
        .find(|db| !holds(&dirs[0], &db.id))
        .expect("a database on a2");
    hrana_ws_select(&a1.url, &not_on_a1.label, &not_on_a1.token).await;

    // 4. Drain a1 under writes through a1's URL: every database moves to a2 through object
    //    storage, and every acknowledged insert is there afterwards.
    let on_a1: Vec<&Db> = east.iter().filter(|db| holds(&dirs[0], &db.id)).collect();
    assert_eq!(on_a1.len(), 2);
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::<(String, i64, u128)>::new()));
    let drain_started = Instant::now();
    let mut writers = Vec::new();
    for db in &on_a1 {
        let (stop, acknowledged, client) =
            (Arc::clone(&stop), Arc::clone(&acknowledged), client.clone());
        let (url, label, token) = (a1.url.clone(), db.label.clone(), db.token.clone());
        writers.push(tokio::spawn(async move {
            let mut next = 100;
            while !stop.load(Ordering::Relaxed) {
                let sql = format!("INSERT INTO t VALUES ({next})");
                let sent = drain_started.elapsed().as_millis();
                if execute(&client, &url, &label, &token, &sql).await.is_ok() {
                    acknowledged
                        .lock()
                        .unwrap()
                        .push((label.clone(), next, sent));
                }
                next += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let drain_at = drain_started.elapsed().as_millis();
    let (status, drained) = api
        .post(format!("{}/v1/admin/nodes/a1/drain", r2.url), json!({}))
        .await;
    eprintln!(
        "drain from {drain_at} ms to {} ms after the writers started",
        drain_started.elapsed().as_millis()
    );
    assert_eq!(status, 200, "{drained}");
    assert_eq!(drained["moved"].as_array().unwrap().len(), 2, "{drained}");
    assert!(
        drained["failed"].as_array().unwrap().is_empty(),
        "{drained}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    eprintln!(
        "drain: {drained}; {} acknowledged inserts",
        acknowledged.len()
    );
    assert!(
        acknowledged.len() > 10,
        "the writers made progress: {}",
        acknowledged.len()
    );
    for db in &on_a1 {
        // Read through the drained node's URL: the database kept it.
        let present = ids(&client, &a1.url, &db.label, &db.token).await;
        for (label, id, sent) in &acknowledged {
            if *label == db.label {
                assert!(
                    present.contains(id),
                    "acknowledged insert {id} (sent {sent} ms after the writers started) lost in the move of {label}; present: {present:?}; logs in {}",
                    root.display()
                );
            }
        }
        assert!(present.contains(&1) && present.contains(&2));
        assert!(!holds(&dirs[0], &db.id), "the old copy was released");
        assert!(holds(&dirs[1], &db.id), "the new holder has it");
    }
    let listed = nodes(&api, &r1.url).await;
    assert_eq!(node(&listed, "a1")["draining"], true);
    assert_eq!(node(&listed, "a1")["databases"], 0, "{listed:?}");
    assert_eq!(node(&listed, "a2")["databases"], 4, "{listed:?}");
    // A draining node takes no new database; undrained, it does again.
    let fifth = create_db(&api, &r1.url, "east-4", "east").await;
    assert!(holds(&dirs[1], &fifth.id));
    let (status, _) = api
        .call(
            reqwest::Method::DELETE,
            format!("{}/v1/admin/nodes/a1/drain", r1.url),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let sixth = create_db(&api, &r2.url, "east-5", "east").await;
    assert!(holds(&dirs[0], &sixth.id));

    // A node that comes back with a copy of a database the store places on another node
    // (an old disk put back) does not keep serving it: the next pass quarantines it.
    a1.process.kill();
    copy_dir(
        &dirs[1].join("dbs").join(&fifth.id),
        &dirs[0].join("dbs").join(&fifth.id),
    );
    a1.restart();
    wait_healthy(&a1.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, listed) = api.get(format!("{}/v1/admin/quarantine", r1.url)).await;
        assert_eq!(status, 200, "{listed}");
        let quarantined = listed["databases"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["node"] == "a1" && d["id"] == fifth.id.as_str());
        if quarantined {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stray copy was not quarantined: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The database itself is whole, served by its holder through either node.
    execute(&client, &a1.url, &fifth.label, &fifth.token, "SELECT 1")
        .await
        .unwrap();

    // 5. A replica SIGKILLed: the other one serves everything.
    r1.process.kill();
    let api2 = Api::login(&r2.url).await;
    create_db(&api2, &r2.url, "after-replica-kill", "east").await;
    let (status, _) = api2.get(format!("{}/v1/databases", r2.url)).await;
    assert_eq!(status, 200);

    // 6. A node SIGKILLed: its databases answer 503 (through the other node of the
    //    location too), everything else works; restarted, it serves them again.
    //    A database deleted just before is restored while the node is down: rebuilt from
    //    object storage on the other node.
    let deleted = on_a1[1];
    let (status, _) = api2
        .call(
            reqwest::Method::DELETE,
            format!(
                "{}/v1/databases/east-{}",
                r2.url,
                east.iter().position(|d| d.id == deleted.id).unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(status, 200);
    a2.process.kill();
    let moved = on_a1[0];
    let down = client
        .post(format!("{}/db/{}/v2/pipeline", a1.url, moved.label))
        .bearer_auth(&moved.token)
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": "SELECT 1"}}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(down.status(), 503, "{}", down.text().await.unwrap());
    // The API does not call it active meanwhile.
    let moved_name = format!(
        "east-{}",
        east.iter().position(|d| d.id == moved.id).unwrap()
    );
    let (status, got) = api2
        .get(format!("{}/v1/databases/{moved_name}", r2.url))
        .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["database"]["state"], "unavailable", "{got}");
    execute(&client, &b1.url, &west.label, &west.token, "SELECT 1")
        .await
        .unwrap();
    execute(&client, &a1.url, &sixth.label, &sixth.token, "SELECT 1")
        .await
        .unwrap();
    let (status, usage) = api2
        .get(format!("{}/v1/organizations/root/usage", r2.url))
        .await;
    assert_eq!(status, 200, "{usage}");
    // Once a2 is seen down (no heartbeat for 15 s), the deleted database is restored on a1.
    let deadline = Instant::now() + Duration::from_secs(40);
    while node(&nodes(&api2, &r2.url).await, "a2")["healthy"] == true {
        assert!(Instant::now() < deadline, "a2 is still taken for healthy");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (status, restored) = api2
        .post(
            format!("{}/v1/deleted-databases/{}/restore", r2.url, deleted.id),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{restored}");
    assert!(holds(&dirs[0], &deleted.id), "rebuilt on a1");
    let back = ids(&client, &a1.url, &deleted.label, &deleted.token).await;
    assert!(back.contains(&1) && back.contains(&2), "{back:?}");
    a2.restart();
    wait_healthy(&a2.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match execute(
            &client,
            &a1.url,
            &moved.label,
            &moved.token,
            "INSERT INTO t VALUES (99999)",
        )
        .await
        {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the restarted node does not serve: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert!(ids(&client, &a2.url, &moved.label, &moved.token)
        .await
        .contains(&99999));
    drop(a1);
    drop(a2);
    drop(b1);
    let _ = std::fs::remove_dir_all(&root);
}

/// A Hrana 3 WebSocket session (hello, one SELECT) through `node_url`.
async fn hrana_ws_select(node_url: &str, label: &str, token: &str) {
    let url = format!("{}/db/{label}/", node_url.replace("http://", "ws://"));
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
            .unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "hrana3".parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    use tokio_tungstenite::tungstenite::Message;
    socket
        .send(Message::Text(
            json!({"type": "hello", "jwt": token}).to_string().into(),
        ))
        .await
        .unwrap();
    socket
        .send(Message::Text(
            json!({"type": "request", "request_id": 1, "request": {"type": "open_stream", "stream_id": 1}})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    socket
        .send(Message::Text(
            json!({"type": "request", "request_id": 2, "request": {"type": "execute", "stream_id": 1, "stmt": {"sql": "SELECT count(*) FROM t", "want_rows": true}}})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("an answer")
            .expect("open")
            .unwrap();
        let Message::Text(text) = message else {
            continue;
        };
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_ne!(value["type"], "hello_error", "{value}");
        assert_ne!(value["type"], "response_error", "{value}");
        if value["type"] == "response_ok" && value["request_id"] == 2 {
            assert_eq!(value["response"]["result"]["rows"][0][0]["value"], "2");
            return;
        }
        assert!(Instant::now() < deadline);
    }
}
