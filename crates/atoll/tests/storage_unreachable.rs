//! A node started while object storage is unreachable serves what its disk holds (issue
//! 28, part 5; docs/OPERATIONS.md, "When a node is down"): `atoll dev` is stopped and
//! started again on an S3 URL whose endpoint refuses connections; it comes up, serves the
//! rows its disk holds, and says in its log that storage is unreachable. And object storage
//! going away under a running node (through a proxy the test switches): `sync` writes are
//! refused, never acknowledged, reads and `lag` neighbours go on, nothing acknowledged is lost.

mod support;

use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, start_dev, wait_until_free, BIN};

/// One statement over `/v2/pipeline`: the status and body, or `None` when no answer came.
async fn send_statement(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    sql: &str,
) -> Option<(u16, Value)> {
    let response = client
        .post(format!("{url}/v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({"requests": [
            {"type": "execute", "stmt": {"sql": sql}},
            {"type": "close"}
        ]}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().await.ok()?))
}

async fn pipeline(client: &reqwest::Client, url: &str, token: &str, sql: &str) -> Value {
    let (status, body) = send_statement(client, url, token, sql)
        .await
        .expect("the server answers");
    assert_eq!(status, 200);
    body
}

#[tokio::test]
async fn a_node_serves_its_disk_when_object_storage_is_unreachable_at_start() {
    let mut server = start_dev("storage-unreachable").await;
    let (http_url, token) = server.database_with_token("kept").await;
    let client = reqwest::Client::new();
    for sql in ["CREATE TABLE t (v)", "INSERT INTO t VALUES ('on disk')"] {
        let answer = pipeline(&client, &http_url, &token, sql).await;
        assert_eq!(answer["results"][0]["type"], "ok", "{answer}");
    }

    let _ = server.child.kill();
    let _ = server.child.wait();
    let port: u16 = server.url.rsplit(':').next().unwrap().parse().unwrap();
    wait_until_free(port);
    // An S3 endpoint nobody listens on: every request to it is refused.
    let dead_endpoint = format!("http://127.0.0.1:{}", free_port());
    let log_path = server.data_dir.with_extension("log");
    let log = std::fs::File::create(&log_path).unwrap();
    let started = Instant::now();
    server.child = Command::new(BIN)
        .arg("dev")
        .arg("--data-dir")
        .arg(&server.data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--db-listen", "127.0.0.1:0"])
        .args(["--storage-url", "s3://atoll-unreachable/node"])
        .env("AWS_ENDPOINT_URL", &dead_endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test-secret")
        .env("AWS_REGION", "us-east-1")
        .env_remove("ATOLL_PASSWORD")
        .env_remove("ATOLL_USERNAME")
        .env_remove("ATOLL_SECRETS_KEY")
        .env_remove("ATOLL_SECRETS_KEY_FILE")
        .env_remove("ATOLL_PREVIOUS_SECRETS_KEYS")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(response) = client.get(format!("{}/health", server.url)).send().await {
            if response.status() == 200 {
                break;
            }
        }
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!(
                "atoll dev exited with {status} while object storage was unreachable:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "atoll dev did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "atoll dev served {:?} after its start with object storage unreachable",
        started.elapsed()
    );
    let log_text = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log_text.contains("object storage is unreachable"),
        "the log does not say why: {log_text}"
    );

    // Its data plane listens on another port now: ask for the database's URL again.
    let details: Value = client
        .get(format!("{}/v1/databases/kept", server.url))
        .bearer_auth(server.admin_token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let http_url = details["database"]["http_url"].as_str().unwrap();
    let answer = pipeline(&client, http_url, &token, "SELECT v FROM t").await;
    assert_eq!(answer["results"][0]["type"], "ok", "{answer}");
    assert_eq!(
        answer["results"][0]["response"]["result"]["rows"][0][0]["value"], "on disk",
        "{answer}"
    );
    let _ = std::fs::remove_file(&log_path);
}

/// What a loopback proxy in front of the S3 server does with its connections.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outage {
    /// Forwards both ways: storage is up.
    None,
    /// Closes every connection, new and open (a server down: connections refused or reset).
    Refuse,
    /// Holds every connection open and forwards nothing (a hung server, a partition that
    /// drops packets): whoever waits on it waits for its own timeout.
    Freeze,
}

/// A TCP proxy on loopback in front of the S3 test server, whose outage a test switches.
struct StorageProxy {
    endpoint: String,
    outage: tokio::sync::watch::Sender<Outage>,
}

impl StorageProxy {
    async fn start(upstream: String) -> StorageProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let (outage, watch) = tokio::sync::watch::channel(Outage::None);
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let watch = watch.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let now = *watch.borrow();
                    match now {
                        Outage::Refuse => return,
                        Outage::Freeze => {
                            hold(client, watch).await;
                            return;
                        }
                        Outage::None => {}
                    }
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    forward(client, server, watch).await;
                });
            }
        });
        StorageProxy { endpoint, outage }
    }

    fn set(&self, outage: Outage) {
        self.outage.send_replace(outage);
    }
}

/// Keeps `client` open, reading and dropping what it sends, until the outage ends.
async fn hold(client: tokio::net::TcpStream, mut watch: tokio::sync::watch::Receiver<Outage>) {
    let _held = client;
    while *watch.borrow_and_update() == Outage::Freeze {
        if watch.changed().await.is_err() {
            return;
        }
    }
}

/// Copies both ways until either side closes or an outage starts: a refusal closes both
/// sockets, a freeze keeps them open and copies nothing more.
async fn forward(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    mut watch: tokio::sync::watch::Receiver<Outage>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let copying = async {
        tokio::select! {
            _ = tokio::io::copy(&mut client_read, &mut server_write) => {}
            _ = tokio::io::copy(&mut server_read, &mut client_write) => {}
        }
    };
    let outage = async {
        loop {
            if watch.changed().await.is_err() {
                return Outage::None;
            }
            let now = *watch.borrow_and_update();
            if now != Outage::None {
                return now;
            }
        }
    };
    tokio::select! {
        _ = copying => {}
        started = outage => {
            if started == Outage::Freeze {
                // Open and silent until the test ends; the caller times out on its own.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// One statement's outcome: `Ok(result)` when acknowledged, `Err(code)` when refused.
async fn run(client: &reqwest::Client, url: &str, token: &str, sql: &str) -> Result<Value, String> {
    let answer = pipeline(client, url, token, sql).await;
    let result = &answer["results"][0];
    if result["type"] == "ok" {
        Ok(result["response"]["result"].clone())
    } else {
        Err(result["error"]["code"].as_str().unwrap_or("").to_string())
    }
}

/// Starts `atoll dev` in `data_dir` on `port`, its object storage reached through `endpoint`.
async fn start_through(
    data_dir: &std::path::Path,
    port: u16,
    storage_url: &str,
    endpoint: &str,
) -> std::process::Child {
    let child = Command::new(BIN)
        .arg("dev")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--db-listen", "127.0.0.1:0"])
        .args(["--storage-url", storage_url, "--durability", "sync"])
        .env("AWS_ENDPOINT_URL", endpoint)
        .env_remove("ATOLL_PASSWORD")
        .env_remove("ATOLL_USERNAME")
        .env_remove("ATOLL_STORAGE_URL")
        .env_remove("ATOLL_SECRETS_KEY")
        .env_remove("ATOLL_SECRETS_KEY_FILE")
        .env_remove("ATOLL_PREVIOUS_SECRETS_KEYS")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    support::cluster::wait_healthy(&format!("http://127.0.0.1:{port}")).await;
    child
}

/// The data-plane URL of existing database `name` and a token for it, from `atoll dev` on
/// `port`.
async fn database(data_dir: &std::path::Path, port: u16, name: &str) -> (String, String) {
    let admin = support::admin_token(data_dir);
    support::database_url_and_token(&format!("http://127.0.0.1:{port}"), &admin, name).await
}

/// One statement's result when the server answers it (`None` while it cannot: a node
/// rebuilding its database answers 503).
async fn try_run(client: &reqwest::Client, url: &str, token: &str, sql: &str) -> Option<Value> {
    let (_, body) = send_statement(client, url, token, sql).await?;
    (body["results"][0]["type"] == "ok").then(|| body["results"][0]["response"]["result"].clone())
}

/// Object storage going away under a running node in `sync` durability (issue 28;
/// docs/OPERATIONS.md, "When a node is down"): refused connections, then a hung server.
/// Every write meanwhile is refused with `DURABILITY_UNAVAILABLE` (never acknowledged),
/// reads go on, writes are acknowledged again once storage answers, and after a SIGKILL and
/// the loss of the disk every acknowledged row comes back from object storage. The times
/// are printed for OPERATIONS.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sync_writes_are_refused_while_object_storage_is_away_and_nothing_acknowledged_is_lost() {
    let Some(base) = std::env::var("ATOLL_TEST_S3_URL")
        .ok()
        .filter(|b| !b.is_empty())
    else {
        eprintln!(
            "WARNING: ATOLL_TEST_S3_URL is not set: the object-storage outage test is skipped (scripts/test.sh starts an S3 server)"
        );
        return;
    };
    let upstream = std::env::var("AWS_ENDPOINT_URL")
        .expect("AWS_ENDPOINT_URL names the S3 server")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let proxy = StorageProxy::start(upstream).await;
    let storage_url = format!("{}/outage-{}", base.trim_end_matches('/'), free_port());
    let data_dir = support::temp_dir("storage-outage");
    let port = free_port();
    let mut child = start_through(&data_dir, port, &storage_url, &proxy.endpoint).await;
    let (url, token) = support::database_with_token(
        &format!("http://127.0.0.1:{port}"),
        &support::admin_token(&data_dir),
        "ledger",
    )
    .await;
    let client = reqwest::Client::new();
    let mut acknowledged = Vec::new();
    run(
        &client,
        &url,
        &token,
        "CREATE TABLE t (id INTEGER PRIMARY KEY)",
    )
    .await
    .unwrap();
    for id in 1..=5 {
        run(
            &client,
            &url,
            &token,
            &format!("INSERT INTO t VALUES ({id})"),
        )
        .await
        .unwrap();
        acknowledged.push(id);
    }

    // A neighbour on the same node that chose `lag` durability (a cache, say).
    let (other_url, other_token) = support::database_with_token(
        &format!("http://127.0.0.1:{port}"),
        &support::admin_token(&data_dir),
        "cache",
    )
    .await;
    let configured = client
        .patch(format!(
            "http://127.0.0.1:{port}/v1/databases/cache/configuration"
        ))
        .bearer_auth(support::admin_token(&data_dir))
        .json(&json!({"durability": "lag"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        configured.status(),
        200,
        "{}",
        configured.text().await.unwrap()
    );
    run(&client, &other_url, &other_token, "CREATE TABLE c (v)")
        .await
        .unwrap();

    let mut next = 6;
    for outage in [Outage::Refuse, Outage::Freeze] {
        proxy.set(outage);
        let started = Instant::now();
        let refused = run(
            &client,
            &url,
            &token,
            &format!("INSERT INTO t VALUES ({next})"),
        )
        .await;
        let took = started.elapsed();
        next += 1;
        assert_eq!(
            refused,
            Err("DURABILITY_UNAVAILABLE".to_string()),
            "a sync write while storage is away ({outage:?})"
        );
        let started = Instant::now();
        let read = run(&client, &url, &token, "SELECT count(*) FROM t").await;
        assert!(read.is_ok(), "reads go on while storage is away: {read:?}");
        eprintln!(
            "storage {outage:?}: a sync write refused after {took:?}; a read answered in {:?}",
            started.elapsed()
        );
        // The neighbour in `lag` durability commits on meanwhile (shipped later).
        let started = Instant::now();
        let neighbour = run(
            &client,
            &other_url,
            &other_token,
            "INSERT INTO c VALUES (1)",
        )
        .await;
        assert!(
            neighbour.is_ok(),
            "a lag-durability neighbour's write while storage is away ({outage:?}): {neighbour:?}"
        );
        eprintln!(
            "storage {outage:?}: a lag-durability neighbour's write acknowledged in {:?}",
            started.elapsed()
        );
        proxy.set(Outage::None);
        let back = Instant::now();
        let deadline = back + Duration::from_secs(60);
        loop {
            let id = next;
            next += 1;
            if run(
                &client,
                &url,
                &token,
                &format!("INSERT INTO t VALUES ({id})"),
            )
            .await
            .is_ok()
            {
                acknowledged.push(id);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "writes were not acknowledged again within 60 s of storage answering"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "storage back after {outage:?}: the first sync write acknowledged {:?} later",
            back.elapsed()
        );
    }

    // The disk is lost; everything acknowledged comes back from object storage.
    let _ = child.kill();
    let _ = child.wait();
    wait_until_free(port);
    std::fs::remove_dir_all(data_dir.join("dbs")).unwrap();
    let mut child = start_through(&data_dir, port, &storage_url, &proxy.endpoint).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let ids: Vec<i64> = loop {
        let (url, token) = database(&data_dir, port, "ledger").await;
        let answer = try_run(&client, &url, &token, "SELECT id FROM t ORDER BY id").await;
        if let Some(result) = answer {
            break result["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| row[0]["value"].as_str().unwrap().parse().unwrap())
                .collect();
        }
        assert!(Instant::now() < deadline, "the database was not rebuilt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lost: Vec<_> = acknowledged.iter().filter(|id| !ids.contains(id)).collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost: {lost:?} (got {ids:?})"
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&data_dir);
}
