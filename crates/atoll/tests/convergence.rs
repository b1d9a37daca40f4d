//! Nodes converge before they serve (issue 28, part 1; docs/ARCHITECTURE.md, "Nodes
//! converge before they serve"), as processes: `atoll serve --registered-nodes` on
//! PostgreSQL with a reconcile pass only every ten minutes (so nothing but the node's own
//! confirmation can bring it up to date in time), and one `atoll node --control-plane`.
//!
//! - The node is SIGKILLed; a database's writes are blocked, another's credentials rotated,
//!   a third deleted; the node starts again. From the very first answer it gives, every
//!   change holds: until it has confirmed their state it answers 503 with `Retry-After`.
//! - The node is paused (SIGSTOP) past its last heartbeat's expiry while writes are blocked: the
//!   requests it takes when it resumes answer 503, then blocked, never a write.
//!
//! Skips (loudly) without PostgreSQL.

mod support;

use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};
use support::cluster::{create_db, start_replica_with, wait_healthy, Api, Db, Node, Replica, EAST};
use support::{free_port, temp_dir};

/// A control-plane replica whose reconciler passes are ten minutes apart.
fn start_control_plane(database_url: &str, secrets_key: &str, dir: &std::path::Path) -> Replica {
    start_replica_with(
        database_url,
        secrets_key,
        dir,
        free_port(),
        &["--reconcile-interval-secs", "600"],
    )
}

/// What the node answered to one statement: `None` when it did not answer (not listening
/// yet), else the status, whether a `Retry-After` came with it, and the body.
async fn probe(
    client: &reqwest::Client,
    node_url: &str,
    db: &Db,
    token: &str,
    sql: &str,
) -> Option<(u16, bool, Value)> {
    let response = client
        .post(format!("{node_url}/db/{}/v2/pipeline", db.label))
        .bearer_auth(token)
        .json(&json!({"requests": [
            {"type": "execute", "stmt": {"sql": sql}},
            {"type": "close"}
        ]}))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    let retry_after = response.headers().contains_key("retry-after");
    let body = response.json().await.unwrap_or(Value::Null);
    Some((status, retry_after, body))
}

/// Sends `sql` until the node serves it (any answer but "not listening" and 503): every 503
/// on the way must say when to retry. Answers the first served answer and how many 503s
/// came before it.
async fn first_served(
    client: &reqwest::Client,
    node_url: &str,
    db: &Db,
    token: &str,
    sql: &str,
) -> ((u16, Value), usize) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut unavailable = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "the node did not serve {} within 90 s",
            db.label
        );
        match probe(client, node_url, db, token, sql).await {
            None => {}
            Some((503, retry_after, body)) => {
                assert!(retry_after, "a 503 without Retry-After: {body}");
                unavailable += 1;
            }
            Some((status, _, body)) => return ((status, body), unavailable),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn is_ok(answer: &(u16, Value)) -> bool {
    answer.0 == 200 && answer.1["results"][0]["type"] == "ok"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_returning_node_serves_nothing_stale() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let root = temp_dir("convergence");
    std::fs::create_dir_all(&root).unwrap();
    let storage = format!("file://{}", root.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let control = start_control_plane(&database_url, &secrets_key, &root.join("serve"));
    wait_healthy(&control.url).await;
    let replicas = [control.url.as_str()];
    // One process (no supervisor), so that SIGSTOP pauses the one that serves.
    let mut east = Node::start_with(
        "east",
        EAST,
        &root.join("east"),
        &storage,
        &replicas,
        &["--no-supervise"],
    );
    wait_healthy(&east.url).await;
    let api = Api::login(&control.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while support::cluster::nodes(&api, &control.url).await.is_empty() {
        assert!(Instant::now() < deadline, "the node did not register");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = api
        .post(
            format!("{}/v1/groups", control.url),
            json!({"name": "east", "location": EAST}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let client = reqwest::Client::new();
    let guarded = create_db(&api, &control.url, "guarded", "east").await;
    let rotated = create_db(&api, &control.url, "rotated", "east").await;
    let gone = create_db(&api, &control.url, "gone", "east").await;
    for db in [&guarded, &rotated, &gone] {
        let answer = first_served(&client, &east.url, db, &db.token, "CREATE TABLE t (v)").await;
        assert!(is_ok(&answer.0), "{answer:?}");
    }

    // The node dies; while it is down, the guarded database's writes are blocked, the
    // rotated one's credentials rotated (every token minted before is invalid), the gone
    // one deleted.
    east.process.kill();
    let (status, body) = api
        .call(
            reqwest::Method::PATCH,
            format!("{}/v1/databases/guarded/configuration", control.url),
            Some(json!({"block_writes": true})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = api
        .post(
            format!("{}/v1/databases/rotated/auth/rotate", control.url),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = api
        .call(
            reqwest::Method::DELETE,
            format!("{}/v1/databases/gone", control.url),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");

    // It starts again on its old configurations: from its very first answer on, the
    // changes hold (it answers 503 until it has confirmed them).
    east.restart();
    let restarted = Instant::now();
    let (answer, refused) = first_served(
        &client,
        &east.url,
        &guarded,
        &guarded.token,
        "INSERT INTO t VALUES (1)",
    )
    .await;
    assert!(
        !is_ok(&answer),
        "a write to a blocked database was served: {answer:?}"
    );
    assert_eq!(
        answer.1["results"][0]["error"]["code"], "BLOCKED",
        "{answer:?}"
    );
    eprintln!(
        "restarted: first served answer {:?} after the start, {refused} answers of 503 before it",
        restarted.elapsed()
    );
    let (answer, _) = first_served(&client, &east.url, &rotated, &rotated.token, "SELECT 1").await;
    assert_eq!(answer.0, 401, "a token of before the rotation: {answer:?}");
    let (answer, _) = first_served(&client, &east.url, &gone, &gone.token, "SELECT 1").await;
    assert!(
        !is_ok(&answer) && answer.0 != 200,
        "a deleted database was served: {answer:?}"
    );
    // The guarded database still reads, and a token minted after the rotation works.
    let (answer, _) = first_served(
        &client,
        &east.url,
        &guarded,
        &guarded.token,
        "SELECT count(*) FROM t",
    )
    .await;
    assert!(is_ok(&answer), "{answer:?}");
    let (status, minted) = api
        .post(
            format!("{}/v1/databases/rotated/auth/tokens", control.url),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{minted}");
    let (answer, _) = first_served(
        &client,
        &east.url,
        &rotated,
        minted["jwt"].as_str().unwrap(),
        "SELECT count(*) FROM t",
    )
    .await;
    assert!(is_ok(&answer), "{answer:?}");

    // Paused past its last heartbeat's expiry (25 s) while writes are unblocked and blocked
    // again: the requests it took while paused, and every one after, are refused until it
    // has confirmed the state again; never a write.
    let (status, body) = api
        .call(
            reqwest::Method::PATCH,
            format!("{}/v1/databases/guarded/configuration", control.url),
            Some(json!({"block_writes": false})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let answer = first_served(
        &client,
        &east.url,
        &guarded,
        &guarded.token,
        "INSERT INTO t VALUES (2)",
    )
    .await;
    assert!(is_ok(&answer.0), "{answer:?}");
    let pid = east.process.0.id().to_string();
    let pause = |signal: &str| {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success());
    };
    pause("STOP");
    let (status, body) = api
        .call(
            reqwest::Method::PATCH,
            format!("{}/v1/databases/guarded/configuration", control.url),
            Some(json!({"block_writes": true})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Past the expiry of its last answered heartbeat (25 s).
    tokio::time::sleep(Duration::from_secs(30)).await;
    // Requests sent while it is paused wait in its listen queue.
    let waiting: Vec<_> = (0..4)
        .map(|i| {
            // A connection of its own each (not one the paused node may have closed).
            let (client, url, db) = (
                reqwest::Client::new(),
                east.url.clone(),
                Db {
                    label: guarded.label.clone(),
                    id: guarded.id.clone(),
                    token: guarded.token.clone(),
                },
            );
            tokio::spawn(async move {
                probe(
                    &client,
                    &url,
                    &db,
                    &db.token,
                    &format!("INSERT INTO t VALUES ({})", 100 + i),
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    pause("CONT");
    let resumed = Instant::now();
    for answer in waiting {
        let answer = answer.await.unwrap().expect("the resumed node answers");
        assert!(
            answer.0 == 503 || answer.2["results"][0]["error"]["code"] == "BLOCKED",
            "a request taken while paused: {answer:?}"
        );
    }
    let (answer, refused) = first_served(
        &client,
        &east.url,
        &guarded,
        &guarded.token,
        "INSERT INTO t VALUES (3)",
    )
    .await;
    assert_eq!(
        answer.1["results"][0]["error"]["code"], "BLOCKED",
        "{answer:?}"
    );
    eprintln!(
        "resumed: first served answer {:?} after SIGCONT, {refused} answers of 503 before it",
        resumed.elapsed()
    );
    let (answer, _) = first_served(
        &client,
        &east.url,
        &guarded,
        &guarded.token,
        "SELECT count(*) FROM t",
    )
    .await;
    assert!(is_ok(&answer), "{answer:?}");
    assert_eq!(
        answer.1["results"][0]["response"]["result"]["rows"][0][0]["value"], "1",
        "only the writes made while writes were allowed: {answer:?}"
    );
    drop(control);
    let _ = std::fs::remove_dir_all(&root);
}

/// A TCP relay to PostgreSQL that can be cut (every connection ended, new ones refused).
struct Relay {
    tasks: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Relay {
    async fn start(port: u16, target: String) -> Relay {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let tasks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let connections = std::sync::Arc::clone(&tasks);
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let target = target.clone();
                let relay = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                connections.lock().unwrap().push(relay);
            }
        });
        tasks.lock().unwrap().push(accept);
        Relay { tasks }
    }

    fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// PostgreSQL down is not the control plane gone: its replicas answer heartbeats with 503
/// `store_unavailable`, nothing can change meanwhile, and a node that was in touch serves
/// on past the 25 s it would otherwise stop after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_serves_on_while_the_control_planes_store_is_down() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let config: postgres::Config = database_url.parse().unwrap();
    let (host, port) = match (config.get_hosts().first(), config.get_ports().first()) {
        (Some(postgres::config::Host::Tcp(host)), Some(port)) => (host.clone(), *port),
        _ => panic!("the test PostgreSQL URL must name a TCP host and port"),
    };
    let relay_port = free_port();
    let through_relay = database_url.replacen(
        &format!("{host}:{port}"),
        &format!("127.0.0.1:{relay_port}"),
        1,
    );
    assert_ne!(through_relay, database_url, "the URL names {host}:{port}");
    let relay = Relay::start(relay_port, format!("{host}:{port}")).await;
    let root = temp_dir("convergence-store-down");
    std::fs::create_dir_all(&root).unwrap();
    let storage = format!("file://{}", root.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let control = start_control_plane(&through_relay, &secrets_key, &root.join("serve"));
    wait_healthy(&control.url).await;
    let east = Node::start("east", EAST, &root.join("east"), &storage, &[&control.url]);
    wait_healthy(&east.url).await;
    let api = Api::login(&control.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while support::cluster::nodes(&api, &control.url).await.is_empty() {
        assert!(Instant::now() < deadline, "the node did not register");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = api
        .post(
            format!("{}/v1/groups", control.url),
            json!({"name": "east", "location": EAST}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let db = create_db(&api, &control.url, "kept", "east").await;
    let client = reqwest::Client::new();
    let answer = first_served(&client, &east.url, &db, &db.token, "CREATE TABLE t (v)").await;
    assert!(is_ok(&answer.0), "{answer:?}");

    relay.cut();
    // Past the 25 s a node stops serving without an answered heartbeat.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let (status, body) = api.get(format!("{}/v1/databases", control.url)).await;
    assert_eq!(status, 503, "the store is down: {body}");
    for sql in ["INSERT INTO t VALUES (1)", "SELECT count(*) FROM t"] {
        let answer = probe(&client, &east.url, &db, &db.token, sql)
            .await
            .expect("the node answers");
        assert_eq!(answer.0, 200, "{sql} with the store down: {answer:?}");
        assert_eq!(answer.2["results"][0]["type"], "ok", "{answer:?}");
    }
    drop(control);
    let _ = std::fs::remove_dir_all(&root);
}
