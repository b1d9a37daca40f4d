//! Faults without surprises (issue 28), with processes on PostgreSQL:
//!
//! - a node paused with SIGSTOP (it accepts connections and never answers) is failed over
//!   within `--failover-after-secs` and a few seconds, however long orders to it wait, and a
//!   create placed on it while it still looks healthy goes to another node of the location;
//! - while a node is paused, the reconciler's work on the other nodes (a replica placed)
//!   is done within about one reconcile interval, not behind the paused node's timeouts;
//! - a create whose node was just SIGKILLed goes to another node of the location, leaving
//!   nothing behind;
//! - PostgreSQL ending the server's connections (`pg_terminate_backend`, 57P01, as a
//!   restart or a failover of PostgreSQL does) in the middle of creates: every create
//!   answers 200 or 503 `store_unavailable` with `Retry-After`, never 500, and none leaves
//!   a database in `creating` or files on the node;
//! - the same during transfers between organizations and drains (moves between nodes):
//!   200 or 503, and afterwards every database on exactly one node, of one organization,
//!   its rows intact.
//!
//! Skips (loudly) without PostgreSQL.

mod support;

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::cluster::{
    create_db, execute, ids, nodes, start_replica, start_replica_with, wait_healthy, Api, Node,
    Process, EAST, WEST,
};
use support::{free_port, temp_dir, BIN};

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to the process of `node`.
fn signal(node: &Node, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &node.process.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal}");
}

/// The store's rows, read with a connection of the test's own (its schema is in `url`).
fn store_query(
    url: &str,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> Vec<postgres::Row> {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client.query(sql, params).unwrap()
}

/// The node the store places database `name` on, and its state.
async fn placed(url: &str, name: &str) -> Option<(String, String)> {
    let (url, name) = (url.to_string(), name.to_string());
    tokio::task::spawn_blocking(move || {
        store_query(
            &url,
            "SELECT node, state FROM databases WHERE name = $1 AND deleted_at IS NULL",
            &[&name],
        )
        .first()
        .map(|row| (row.get(0), row.get(1)))
    })
    .await
    .unwrap()
}

/// How many databases the store holds in `creating`.
async fn creating(url: &str) -> i64 {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        store_query(
            &url,
            "SELECT count(*) FROM databases WHERE state = 'creating'",
            &[],
        )[0]
        .get(0)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_node_fails_over_on_time_and_creates_go_around_dead_nodes() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let root = temp_dir("faults-nodes");
    std::fs::create_dir_all(&root).unwrap();
    let storage = format!("file://{}", root.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let failover_after = 30;
    let control = start_replica_with(
        &database_url,
        &secrets_key,
        &root.join("serve"),
        free_port(),
        &["--failover-after-secs", &failover_after.to_string()],
    );
    wait_healthy(&control.url).await;
    let replicas = [control.url.as_str()];
    // One process per node (no supervisor), so the signals reach the one that serves.
    let sync = ["--durability", "sync", "--no-supervise"];
    let started: Vec<Node> = ["east-a", "east-b", "east-c"]
        .iter()
        .map(|name| Node::start_with(name, EAST, &root.join(name), &storage, &replicas, &sync))
        .collect();
    let west_dir = root.join("west-a");
    let west = Node::start_with("west-a", WEST, &west_dir, &storage, &replicas, &sync);
    for node in started.iter().chain([&west]) {
        wait_healthy(&node.url).await;
    }
    let [a, b, c] = <[Node; 3]>::try_from(started).ok().unwrap();
    let api = Api::login(&control.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while nodes(&api, &control.url).await.len() < 4 {
        assert!(Instant::now() < deadline, "the nodes did not register");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = api
        .post(
            format!("{}/v1/groups", control.url),
            json!({"name": "g", "location": EAST}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // One database on each node (placement: the fewest, ties by name).
    let first = create_db(&api, &control.url, "da", "g").await;
    let second = create_db(&api, &control.url, "db", "g").await;
    create_db(&api, &control.url, "dc", "g").await;
    assert_eq!(placed(&database_url, "da").await.unwrap().0, "east-a");
    let client = reqwest::Client::new();
    let sql = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'kept')";
    for statement in sql.split("; ") {
        execute(&client, &a.url, &first.label, &first.token, statement)
            .await
            .unwrap();
    }

    // Paused: it takes connections and answers nothing.
    signal(&a, "STOP");
    let paused_at = Instant::now();
    // It still looks healthy (its last heartbeat is fresh) and ties for the fewest
    // databases: the create tries it, then another node of the location.
    let (status, body) = api
        .post(
            format!("{}/v1/databases", control.url),
            json!({"name": "x1", "group": "g"}),
        )
        .await;
    assert_eq!(status, 200, "a create while a node is paused: {body}");
    let created_in = paused_at.elapsed();
    let (node, state) = placed(&database_url, "x1").await.unwrap();
    assert_ne!(node, "east-a");
    assert_eq!(state, "active");

    // Work for the other nodes goes on: a location added to the group gets its replicas
    // from the next reconcile passes, which no longer wait on the paused node.
    let added_at = Instant::now();
    let (status, body) = api
        .post(
            format!("{}/v1/groups/g/locations/{WEST}", control.url),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let replica = west_dir.join("replicas").join(&second.id).join("data");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !replica.exists() {
        assert!(Instant::now() < deadline, "no replica of db in {WEST}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let replica_in = added_at.elapsed();
    assert!(
        replica_in < Duration::from_secs(25),
        "the replica came {:.1} s after the location was added, behind the paused node",
        replica_in.as_secs_f64()
    );

    // Failed over by itself: the lease (15 s) and its margin (10 s) after the last
    // heartbeat, and --failover-after-secs, not the 120 s an order to it waited before.
    let deadline = Instant::now() + Duration::from_secs(120);
    while placed(&database_url, "da").await.unwrap().0 == "east-a" {
        assert!(
            Instant::now() < deadline,
            "the paused node's database was not failed over (see {})",
            root.join("serve.log").display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let failed_over_in = paused_at.elapsed();
    assert!(
        failed_over_in < Duration::from_secs(failover_after + 15),
        "failed over {:.1} s after the pause (--failover-after-secs {failover_after})",
        failed_over_in.as_secs_f64()
    );
    let through_b = ids(&client, &b.url, &first.label, &first.token).await;
    assert_eq!(through_b, BTreeSet::from([1]));

    // SIGKILLed: the node placement chooses next refuses connections at once, and the
    // create goes to the other one.
    let counts = |name: &'static str| {
        let url = database_url.clone();
        async move {
            tokio::task::spawn_blocking(move || -> i64 {
                store_query(
                    &url,
                    "SELECT count(*) FROM databases WHERE node = $1",
                    &[&name],
                )[0]
                .get(0)
            })
            .await
            .unwrap()
        }
    };
    let (on_b, on_c) = (counts("east-b").await, counts("east-c").await);
    let (mut doomed, survivor) = if on_b <= on_c { (b, c) } else { (c, b) };
    let survivor_name = if on_b <= on_c { "east-c" } else { "east-b" };
    signal(&doomed, "KILL");
    let _ = doomed.process.0.wait();
    let killed_at = Instant::now();
    let (status, body) = api
        .post(
            format!("{}/v1/databases", control.url),
            json!({"name": "x2", "group": "g"}),
        )
        .await;
    assert_eq!(status, 200, "a create right after its node died: {body}");
    let created_after_kill_in = killed_at.elapsed();
    assert_eq!(
        placed(&database_url, "x2").await.unwrap(),
        (survivor_name.to_string(), "active".to_string())
    );
    assert_eq!(creating(&database_url).await, 0, "nothing left in creating");
    let (status, listed) = api.get(format!("{}/v1/databases", control.url)).await;
    assert_eq!(status, 200, "{listed}");
    let names: Vec<&str> = listed["databases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["Name"].as_str())
        .filter(|n| n.starts_with('x'))
        .collect();
    assert_eq!(names.len(), 2, "{listed}");
    eprintln!(
        "faults: a create with a node paused {:.1} s, a replica for another node's database {:.1} s after its location was added, failover of the paused node {:.1} s after SIGSTOP (--failover-after-secs {failover_after}), a create right after a SIGKILL {:.1} s",
        created_in.as_secs_f64(),
        replica_in.as_secs_f64(),
        failed_over_in.as_secs_f64(),
        created_after_kill_in.as_secs_f64()
    );
    signal(&a, "CONT");
    drop(survivor);
    drop(west);
    doomed.process.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_node_does_not_slow_the_other_nodes_convergence() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let root = temp_dir("faults-independent");
    std::fs::create_dir_all(&root).unwrap();
    let storage = format!("file://{}", root.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    // Passes 2 s apart; no failover, so the paused node stays listed and every pass has
    // work for it that cannot finish (its orders wait out their 10 s timeout).
    let interval = Duration::from_secs(2);
    let control = start_replica(&database_url, &secrets_key, &root.join("serve"));
    wait_healthy(&control.url).await;
    let replicas = [control.url.as_str()];
    let sync = ["--no-supervise"];
    // The databases go to east-b before east-a exists: none is on the node to be paused.
    let b = Node::start_with(
        "east-b",
        EAST,
        &root.join("east-b"),
        &storage,
        &replicas,
        &sync,
    );
    let west_dir = root.join("west-a");
    let west = Node::start_with("west-a", WEST, &west_dir, &storage, &replicas, &sync);
    wait_healthy(&b.url).await;
    wait_healthy(&west.url).await;
    let api = Api::login(&control.url).await;
    let wait_nodes = |count: usize| {
        let (api, url) = (&api, control.url.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            while nodes(api, &url).await.len() < count {
                assert!(Instant::now() < deadline, "the nodes did not register");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    wait_nodes(2).await;
    let mut dbs = Vec::new();
    for i in 0..4 {
        let group = format!("g{i}");
        let (status, body) = api
            .post(
                format!("{}/v1/groups", control.url),
                json!({"name": group, "location": EAST}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        dbs.push((
            group.clone(),
            create_db(&api, &control.url, &format!("d{i}"), &group).await,
        ));
    }
    let a = Node::start_with(
        "east-a",
        EAST,
        &root.join("east-a"),
        &storage,
        &replicas,
        &sync,
    );
    wait_healthy(&a.url).await;
    wait_nodes(3).await;
    // Every pass has reached east-a before it stops answering.
    tokio::time::sleep(2 * interval).await;

    signal(&a, "STOP");
    // Reconciler work for the healthy nodes, asked at different moments of the paused
    // node's 10 s order timeouts: a group's new location gets its replica from a pass.
    let mut took = Vec::new();
    for (i, (group, db)) in dbs.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(1_300 + 2_100 * i as u64)).await;
        let added_at = Instant::now();
        let (status, body) = api
            .post(
                format!("{}/v1/groups/{group}/locations/{WEST}", control.url),
                json!({}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let replica = west_dir.join("replicas").join(&db.id).join("data");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !replica.exists() {
            assert!(
                Instant::now() < deadline,
                "no replica of {} in {WEST} (see {})",
                db.id,
                root.join("serve.log").display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        took.push(added_at.elapsed());
    }
    let slowest = took.iter().max().copied().unwrap();
    eprintln!(
        "faults: with a node paused, replicas placed {:?} s after their location was added (reconcile interval {} s)",
        took.iter()
            .map(|t| format!("{:.1}", t.as_secs_f64()))
            .collect::<Vec<_>>(),
        interval.as_secs()
    );
    // About one interval (the pass, then the replica's first frames), not one interval
    // plus the paused node's order timeout.
    assert!(
        slowest < interval + Duration::from_secs(4),
        "a replica came {:.1} s after its location was added, behind the paused node: {took:?}",
        slowest.as_secs_f64()
    );
    signal(&a, "CONT");
}

/// Kills every connection of the server (named by `application_name`) every few tens of
/// milliseconds until `stop`, answering how many it ended.
fn spawn_connection_killer(
    url: String,
    application_name: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut ended = 0;
        let mut round = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let rows = client
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE datname = current_database() AND pid <> pg_backend_pid()
                       AND application_name = $1",
                    &[&application_name],
                )
                .unwrap();
            ended += rows.len();
            round += 1;
            std::thread::sleep(Duration::from_millis(20 + (round * 37) % 90));
        }
        ended
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_ending_connections_mid_create_never_half_creates_and_answers_503() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    // The server's connections carry a name of their own: only they are ended.
    let application_name = format!("atoll_faults_{}", free_port());
    let server_url = format!("{database_url}&application_name={application_name}");
    let data_dir = temp_dir("faults-store");
    let port = free_port();
    let log = std::fs::File::create(data_dir.with_extension("log")).unwrap();
    let child = Command::new(BIN)
        .args(["serve", "--database-url", &server_url])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--data-dir", data_dir.to_str().unwrap()])
        .args(["--db-listen", &format!("127.0.0.1:{}", free_port())])
        .env("ATOLL_NODE_SECRET", support::cluster::SECRET)
        .env(
            "ATOLL_SECRETS_KEY",
            atoll_meta::SecretsKey::generate_base64(),
        )
        .env("ATOLL_USERNAME", "root")
        .env("ATOLL_PASSWORD", "a-long-password")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let _serve = Process(child);
    let url = format!("http://127.0.0.1:{port}");
    wait_healthy(&url).await;
    let api = Arc::new(Api::login(&url).await);

    let stop = Arc::new(AtomicBool::new(false));
    let killer = spawn_connection_killer(
        database_url.clone(),
        application_name.clone(),
        Arc::clone(&stop),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let total = 48;
    let mut creators = Vec::new();
    for _ in 0..4 {
        let (api, url, next) = (Arc::clone(&api), url.clone(), Arc::clone(&next));
        creators.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    return answers;
                }
                let name = format!("blip-{i}");
                let response = api
                    .client
                    .post(format!("{url}/v1/databases"))
                    .bearer_auth(&api.token)
                    .json(&json!({"name": name}))
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                let retry_after = response.headers().contains_key("retry-after");
                let body: Value = response.json().await.unwrap_or(Value::Null);
                answers.push((name, status, retry_after, body));
            }
        }));
    }
    let mut answers = Vec::new();
    for creator in creators {
        answers.extend(creator.await.unwrap());
    }
    let mut created = BTreeSet::new();
    let mut refused = Vec::new();
    for (name, status, retry_after, body) in &answers {
        match status {
            200 => {
                created.insert(name.clone());
            }
            503 => {
                assert_eq!(body["code"], "store_unavailable", "{name}: {body}");
                assert!(retry_after, "{name}: 503 without Retry-After");
                refused.push(name.clone());
            }
            other => panic!("{name}: {other} {body}"),
        }
    }
    // Deletes under the same blips: done (200) or refused (503), never 500.
    let mut deleted = BTreeSet::new();
    for name in created.iter().take(12) {
        let response = api
            .client
            .delete(format!("{url}/v1/databases/{name}"))
            .bearer_auth(&api.token)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        match status {
            200 => {
                deleted.insert(name.clone());
            }
            503 => assert_eq!(body["code"], "store_unavailable", "delete {name}: {body}"),
            other => panic!("delete {name}: {other} {body}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let ended = killer.join().unwrap();
    assert!(ended > 0, "no connection of the server was ended");
    let created: BTreeSet<String> = created.difference(&deleted).cloned().collect();

    // Nothing half-created: no record left in `creating`, and the node holds exactly the
    // databases the store knows (a failed create's files are deleted).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let known: BTreeSet<String> = {
            let url = database_url.clone();
            tokio::task::spawn_blocking(move || {
                store_query(&url, "SELECT id FROM databases", &[])
                    .iter()
                    .map(|row| row.get(0))
                    .collect()
            })
            .await
            .unwrap()
        };
        let on_node: BTreeSet<String> = std::fs::read_dir(data_dir.join("dbs"))
            .unwrap()
            .filter_map(|entry| entry.unwrap().file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect();
        let left = creating(&database_url).await;
        if left == 0 && known == on_node {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} left in creating; the store knows {known:?}, the node holds {on_node:?} (see {})",
            data_dir.with_extension("log").display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, listed) = api.get(format!("{url}/v1/databases")).await;
    assert_eq!(status, 200, "{listed}");
    let listed: BTreeSet<String> = listed["databases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["Name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        listed, created,
        "the list is what was acknowledged (created, not deleted)"
    );
    // A refused create can be sent again: its name is free.
    for name in refused.iter().take(5) {
        let (status, body) = api
            .post(format!("{url}/v1/databases"), json!({"name": name}))
            .await;
        assert_eq!(status, 200, "{name} again: {body}");
    }
    eprintln!(
        "faults: {} creates and 12 deletes under {ended} ended connections: {} created, {} answered 503 store_unavailable, none left in creating; {} deleted",
        answers.len(),
        created.len() + deleted.len(),
        refused.len(),
        deleted.len()
    );
    let _ = std::fs::remove_dir_all(&data_dir);
}

/// An API call answering its status, whether it said `Retry-After`, and its body.
async fn send(api: &Api, method: reqwest::Method, url: String, body: Value) -> (u16, bool, Value) {
    let mut request = api
        .client
        .request(method.clone(), url)
        .bearer_auth(&api.token);
    if method == reqwest::Method::POST {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response.headers().contains_key("retry-after");
    (
        status,
        retry_after,
        response.json().await.unwrap_or(Value::Null),
    )
}

/// A refusal must be 503 `store_unavailable` with `Retry-After`; answers whether it was one
/// (false: 200).
fn refused(what: &str, (status, retry_after, body): &(u16, bool, Value)) -> bool {
    match status {
        200 => false,
        503 => {
            assert_eq!(body["code"], "store_unavailable", "{what}: {body}");
            assert!(retry_after, "{what}: 503 without Retry-After");
            true
        }
        other => panic!("{what}: {other} {body}"),
    }
}

/// Where the store places each database (by id), and which organization owns it.
async fn placements(url: &str) -> std::collections::BTreeMap<String, (String, String)> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        store_query(
            &url,
            "SELECT d.id, d.node, o.slug FROM databases d JOIN organizations o ON o.id = d.org_id",
            &[],
        )
        .iter()
        .map(|row| (row.get(0), (row.get(1), row.get(2))))
        .collect()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_ending_connections_mid_transfer_and_move_never_half_does_them() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let application_name = format!("atoll_faults_{}", free_port());
    let server_url = format!("{database_url}&application_name={application_name}");
    let root = temp_dir("faults-transfer-move");
    std::fs::create_dir_all(&root).unwrap();
    let storage = format!("file://{}", root.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let control = start_replica(&server_url, &secrets_key, &root.join("serve"));
    wait_healthy(&control.url).await;
    let replicas = [control.url.as_str()];
    let names = ["east-a", "east-b"];
    let started: Vec<Node> = names
        .iter()
        .map(|name| Node::start(name, EAST, &root.join(name), &storage, &replicas))
        .collect();
    for node in &started {
        wait_healthy(&node.url).await;
    }
    let node_url = |name: &str| {
        started[names.iter().position(|n| *n == name).unwrap()]
            .url
            .clone()
    };
    let api = Api::login(&control.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while nodes(&api, &control.url).await.len() < 2 {
        assert!(Instant::now() < deadline, "the nodes did not register");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let base = &control.url;
    let (_, listed) = api.get(format!("{base}/v1/organizations")).await;
    let personal = listed[0]["slug"].as_str().unwrap().to_string();
    let (status, body) = api
        .post(
            format!("{base}/v1/organizations"),
            json!({"name": "Receiving"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let orgs = [personal, body["org"]["slug"].as_str().unwrap().to_string()];
    for org in &orgs {
        let (status, body) = api
            .post(
                format!("{base}/v1/admin/organizations/{org}/plan"),
                json!({"plan": "scaler"}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = api
            .post(
                format!("{base}/v1/organizations/{org}/groups"),
                json!({"name": "g", "location": EAST}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // And a group of its own, transferred whole.
    let (status, body) = api
        .post(
            format!("{base}/v1/organizations/{}/groups", orgs[0]),
            json!({"name": "h", "location": EAST}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let client = reqwest::Client::new();
    let count = 6;
    let mut dbs = Vec::new();
    for i in 0..=count {
        let (name, group) = match i {
            i if i < count => (format!("t{i}"), "g"),
            _ => ("u".to_string(), "h"),
        };
        let db = create_db(&api, base, &name, group).await;
        let on = placed(&database_url, &name).await.unwrap().0;
        for statement in [
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)",
            "INSERT INTO t VALUES (1, 'kept')",
        ] {
            execute(&client, &node_url(&on), &db.label, &db.token, statement)
                .await
                .unwrap();
        }
        dbs.push((name, db.id));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let killer = spawn_connection_killer(
        database_url.clone(),
        application_name.clone(),
        Arc::clone(&stop),
    );
    let (mut transfers, mut transfers_refused) = (0, 0);
    let mut groups_refused = 0;
    let (mut moved, mut move_failures, mut drains_refused) = (0, 0, 0);
    let rounds = 6;
    for round in 0..rounds {
        // Every database to the other organization, one at a time.
        let owners = placements(&database_url).await;
        // `u` goes with its group.
        let (_, group_owner) = &owners[&dbs[count].1];
        let other = orgs.iter().find(|o| *o != group_owner).unwrap();
        let answer = send(
            &api,
            reqwest::Method::POST,
            format!("{base}/v1/organizations/{group_owner}/groups/h/transfer"),
            json!({"organization": other}),
        )
        .await;
        if refused(&format!("transfer group h to {other}"), &answer) {
            groups_refused += 1;
        }
        for (name, id) in &dbs[..count] {
            let owner = &owners[id].1;
            let other = orgs.iter().find(|o| *o != owner).unwrap();
            let answer = send(
                &api,
                reqwest::Method::POST,
                format!("{base}/v1/organizations/{owner}/databases/{name}/transfer"),
                json!({"org": other}),
            )
            .await;
            transfers += 1;
            if refused(&format!("transfer {name} to {other}"), &answer) {
                transfers_refused += 1;
            }
        }
        // One node drained (its databases move to the other), then taking databases again.
        let node = names[round % 2];
        let answer = send(
            &api,
            reqwest::Method::POST,
            format!("{base}/v1/admin/nodes/{node}/drain"),
            json!({}),
        )
        .await;
        if refused(&format!("drain {node}"), &answer) {
            drains_refused += 1;
        } else {
            moved += answer.2["moved"].as_array().unwrap().len();
            move_failures += answer.2["failed"].as_array().unwrap().len();
        }
        let undrain_deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = send(
                &api,
                reqwest::Method::DELETE,
                format!("{base}/v1/admin/nodes/{node}/drain"),
                json!({}),
            )
            .await;
            if !refused(&format!("undrain {node}"), &answer) {
                break;
            }
            assert!(Instant::now() < undrain_deadline, "{node} stays drained");
        }
    }
    stop.store(true, Ordering::SeqCst);
    let ended = killer.join().unwrap();
    assert!(ended > 0, "no connection of the server was ended");
    let stopped_at = Instant::now();

    // Each database served from exactly one node (the one the store places it on: no copy
    // left handed over elsewhere), owned by exactly one organization, its rows intact and
    // taking writes.
    let holders = |id: &str| -> Vec<&str> {
        names
            .iter()
            .copied()
            .filter(|name| root.join(name).join("dbs").join(id).exists())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    for (name, id) in &dbs {
        loop {
            let (node, owner) = placements(&database_url).await[id].clone();
            let held = holders(id);
            let (in_owner, _) = api
                .get(format!("{base}/v1/organizations/{owner}/databases/{name}"))
                .await;
            let other = orgs.iter().find(|o| **o != owner).unwrap();
            let (in_other, _) = api
                .get(format!("{base}/v1/organizations/{other}/databases/{name}"))
                .await;
            let served = if held == [node.as_str()] && (in_owner, in_other) == (200, 404) {
                let (status, got) = api
                    .get(format!("{base}/v1/organizations/{owner}/databases/{name}"))
                    .await;
                assert_eq!(status, 200, "{got}");
                let label = got["database"]["Hostname"]
                    .as_str()
                    .unwrap()
                    .split('.')
                    .next()
                    .unwrap()
                    .to_string();
                let (status, minted) = api
                    .post(
                        format!("{base}/v1/organizations/{owner}/databases/{name}/auth/tokens"),
                        json!({}),
                    )
                    .await;
                assert_eq!(status, 200, "{minted}");
                let token = minted["jwt"].as_str().unwrap();
                let url = node_url(&node);
                match execute(&client, &url, &label, token, "SELECT id, v FROM t").await {
                    Ok(rows) if rows["rows"].as_array().map(Vec::len) == Some(1) => execute(
                        &client,
                        &url,
                        &label,
                        token,
                        &format!("INSERT INTO t VALUES (2, '{owner}')"),
                    )
                    .await
                    .map(|_| ()),
                    Ok(rows) => panic!("{name}: rows lost or added: {rows}"),
                    Err(e) => Err(e),
                }
            } else {
                Err(format!(
                    "placed on {node}, held by {held:?}, owner {owner} answers {in_owner}, {other} {in_other}"
                ))
            };
            let Err(unsettled) = served else {
                break;
            };
            assert!(
                Instant::now() < deadline,
                "{name} did not settle: {unsettled} (see {})",
                root.join("serve.log").display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let settled_in = stopped_at.elapsed();
    let log = std::fs::read_to_string(root.join("serve.log")).unwrap_or_default();
    eprintln!(
        "faults: under {ended} ended connections, {transfers} transfers ({transfers_refused} answered 503 store_unavailable), {rounds} group transfers ({groups_refused} answered 503) and {rounds} drains ({drains_refused} answered 503; {moved} databases moved, {move_failures} moves reported failed); {} moves and {} transfers read back their store write's outcome after it failed; every database in one place, of one organization, its row intact, {:.1} s after the blips stopped",
        log.matches("finished a move whose flip failed").count(),
        log.matches("transfer whose commit failed was").count(),
        settled_in.as_secs_f64()
    );
}
