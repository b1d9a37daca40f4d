//! Durable databases through the `atoll` binary (docs/OPERATIONS.md, "Backups and
//! recovery"): SIGKILL `atoll dev` while clients write, lose the database directory, start
//! it again, and every acknowledged write is there; the CLI's point-in-time copy,
//! restore in place and `db backups` on the same server.
//!
//! Runs on the default `file://` store, and on S3 too when `ATOLL_TEST_S3_URL` names one
//! (scripts/test.sh starts an S3-compatible server on loopback).

mod support;

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{free_port, temp_dir, BIN};

/// An `atoll dev` on a data directory that outlives it.
struct Dev {
    child: Child,
    url: String,
    data_dir: PathBuf,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(data_dir: &Path, port: u16, args: &[String]) -> Dev {
    let child = Command::new(BIN)
        .arg("dev")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--db-listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("ATOLL_PASSWORD")
        .env_remove("ATOLL_STORAGE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start atoll dev");
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !client
        .get(format!("{url}/health"))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(
            Instant::now() < deadline,
            "atoll dev did not become healthy"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Dev {
        child,
        url,
        data_dir: data_dir.to_path_buf(),
    }
}

impl Dev {
    fn token(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("admin.token"))
            .unwrap()
            .trim()
            .to_string()
    }

    async fn api(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = reqwest::Client::new()
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(self.token());
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The database's `http_url` and a token for it.
    async fn database(&self, name: &str) -> (String, String) {
        let (status, details) = self
            .api(reqwest::Method::GET, &format!("/v1/databases/{name}"), None)
            .await;
        assert_eq!(status, 200, "{details}");
        let (status, minted) = self
            .api(
                reqwest::Method::POST,
                &format!("/v1/databases/{name}/auth/tokens"),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, 200, "{minted}");
        (
            details["database"]["http_url"]
                .as_str()
                .unwrap()
                .to_string(),
            minted["jwt"].as_str().unwrap().to_string(),
        )
    }
}

/// Runs one statement; `Some(result)` when the server acknowledged it.
async fn execute(client: &reqwest::Client, url: &str, token: &str, sql: &str) -> Option<Value> {
    let body = json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]});
    let response = client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&body)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .ok()?;
    if response.status() != 200 {
        return None;
    }
    let body: Value = response.json().await.ok()?;
    (body["results"][0]["type"] == "ok").then(|| body["results"][0]["response"]["result"].clone())
}

/// The ids in table `t`, once the database answers again (it is rebuilt meanwhile).
async fn ids_when_served(dev: &Dev, name: &str) -> BTreeSet<i64> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (url, token) = dev.database(name).await;
        if let Some(result) = execute(&client, &url, &token, "SELECT id FROM t").await {
            return result["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| row[0]["value"].as_str().unwrap().parse().unwrap())
                .collect();
        }
        assert!(Instant::now() < deadline, "{name} was not rebuilt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn storage_args(name: &str) -> Vec<Vec<String>> {
    let mut runs = vec![vec![]];
    match std::env::var("ATOLL_TEST_S3_URL") {
        Ok(base) if !base.is_empty() => runs.push(vec![
            "--storage-url".to_string(),
            format!("{}/{name}-{}", base.trim_end_matches('/'), free_port()),
        ]),
        _ => eprintln!(
            "WARNING: ATOLL_TEST_S3_URL is not set: {name} runs on file:// only, not on S3 (scripts/test.sh starts an S3 server)"
        ),
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_writes_and_a_lost_disk_lose_no_acknowledged_write_in_sync_mode() {
    for storage in storage_args("sigkill") {
        let data_dir = temp_dir("durability");
        let port = free_port();
        let mut args: Vec<String> = vec!["--durability".into(), "sync".into()];
        args.extend(storage.iter().cloned());
        let dev = start(&data_dir, port, &args).await;
        let names = ["ledger-a", "ledger-b", "ledger-c"];
        let acknowledged: Arc<Mutex<Vec<BTreeSet<i64>>>> =
            Arc::new(Mutex::new(vec![BTreeSet::new(); names.len()]));
        let mut writers = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let (status, body) = dev
                .api(
                    reqwest::Method::POST,
                    "/v1/databases",
                    Some(json!({"name": name})),
                )
                .await;
            assert_eq!(status, 200, "{body}");
            let (url, token) = dev.database(name).await;
            let client = reqwest::Client::new();
            assert!(execute(
                &client,
                &url,
                &token,
                "CREATE TABLE t (id INTEGER PRIMARY KEY, pad BLOB)"
            )
            .await
            .is_some());
            let acknowledged = Arc::clone(&acknowledged);
            writers.push(tokio::spawn(async move {
                for id in 1.. {
                    let sql = format!("INSERT INTO t VALUES ({id}, randomblob(500))");
                    if execute(&client, &url, &token, &sql).await.is_none() {
                        // The server is gone.
                        break;
                    }
                    acknowledged.lock().unwrap()[index].insert(id);
                }
            }));
        }
        // Let every writer get well going, then kill the server mid-write.
        let deadline = Instant::now() + Duration::from_secs(60);
        while acknowledged
            .lock()
            .unwrap()
            .iter()
            .any(|ids| ids.len() < 40)
        {
            assert!(Instant::now() < deadline, "writers made no progress");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(dev); // SIGKILL
        for writer in writers {
            writer.await.unwrap();
        }
        // The disk with the databases is lost.
        std::fs::remove_dir_all(data_dir.join("dbs")).unwrap();

        let dev = start(&data_dir, port, &args).await;
        let acknowledged = acknowledged.lock().unwrap().clone();
        for (index, name) in names.iter().enumerate() {
            let ids = ids_when_served(&dev, name).await;
            let lost: Vec<_> = acknowledged[index].difference(&ids).collect();
            assert!(
                lost.is_empty(),
                "{name}: acknowledged writes lost: {lost:?} ({storage:?})"
            );
            // At most the one write in flight when the server died is there unacknowledged.
            assert!(ids.len() <= acknowledged[index].len() + 1);
        }
        drop(dev);
        let _ = std::fs::remove_dir_all(&data_dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_copies_restores_and_lists_backups() {
    let data_dir = temp_dir("durability-cli");
    let port = free_port();
    let dev = start(&data_dir, port, &["--durability-lag".into(), "0.2".into()]).await;
    let config = temp_dir("durability-cli-config");
    std::fs::create_dir_all(&config).unwrap();
    let token = dev.token();
    let env = [
        ("ATOLL_API_URL", dev.url.as_str()),
        ("ATOLL_API_TOKEN", token.as_str()),
    ];
    let run = |args: &[&str]| support::atoll_env(&config, args, &env);
    let ok = |args: &[&str]| {
        let output = run(args);
        assert!(
            output.status.success(),
            "atoll {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    ok(&["db", "create", "shop"]);
    ok(&[
        "db",
        "shell",
        "shop",
        "CREATE TABLE t (id INTEGER PRIMARY KEY)",
    ]);
    ok(&["db", "shell", "shop", "INSERT INTO t VALUES (1), (2)"]);
    tokio::time::sleep(Duration::from_millis(30)).await;
    let two = now();
    tokio::time::sleep(Duration::from_millis(30)).await;
    ok(&["db", "shell", "shop", "INSERT INTO t VALUES (3)"]);

    let out = ok(&[
        "db",
        "create",
        "shop-then",
        "--from-db",
        "shop",
        "--timestamp",
        &two,
    ]);
    assert!(out.contains("as shop was at"), "{out}");
    let count = ok(&[
        "db",
        "shell",
        "shop-then",
        "--mode",
        "json",
        "SELECT count(*) AS n FROM t",
    ]);
    assert!(
        count.contains("\"n\":2") || count.contains("\"n\": 2"),
        "{count}"
    );

    let backups = ok(&["db", "backups", "shop"]);
    assert!(
        backups.contains("Restorable:") && backups.contains("GENERATION"),
        "{backups}"
    );
    let json: Value = serde_json::from_str(&ok(&["db", "backups", "shop", "--json"])).unwrap();
    assert!(
        json["generations"]
            .as_array()
            .is_some_and(|g| !g.is_empty()),
        "{json}"
    );

    let out = ok(&["db", "restore-to", "shop", "--timestamp", &two, "--yes"]);
    assert!(out.contains("Restored database shop"), "{out}");
    let count = ok(&[
        "db",
        "shell",
        "shop",
        "--mode",
        "json",
        "SELECT count(*) AS n FROM t",
    ]);
    assert!(
        count.contains("\"n\":2") || count.contains("\"n\": 2"),
        "{count}"
    );

    // Without --yes and no terminal: refused, nothing restored.
    let output = run(&["db", "restore-to", "shop", "--timestamp", &two]);
    assert!(!output.status.success());
    // Outside the window: the error names it.
    let output = run(&[
        "db",
        "restore-to",
        "shop",
        "--timestamp",
        "2001-01-01T00:00:00Z",
        "--yes",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("restorable window"),
        "{stderr}"
    );
    drop(dev);
    let _ = std::fs::remove_dir_all(&data_dir);
    let _ = std::fs::remove_dir_all(&config);
}

fn now() -> String {
    let t = time::OffsetDateTime::now_utc();
    let t = t
        .replace_nanosecond(t.millisecond() as u32 * 1_000_000)
        .unwrap();
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// An `atoll node` on fixed ports and a data directory that outlives it.
fn start_node(dir: &Path, port: u16, admin_port: u16, storage_url: &str) -> Child {
    Command::new(BIN)
        .args(["node", "--location", "aws-us-east-1"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
        .arg("--data-dir")
        .arg(dir)
        .args(["--storage-url", storage_url, "--durability", "sync"])
        .env("ATOLL_NODE_SECRET", "a-node-secret-for-tests")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start atoll node")
}

async fn healthy(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !reqwest::get(url).await.is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "{url} did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_and_a_node_whose_disk_is_lost_rebuild_from_object_storage() {
    let root = temp_dir("durability-node");
    std::fs::create_dir_all(&root).unwrap();
    let storage_url = match std::env::var("ATOLL_TEST_S3_URL") {
        Ok(base) if !base.is_empty() => {
            format!("{}/node-{}", base.trim_end_matches('/'), free_port())
        }
        _ => {
            eprintln!(
                "WARNING: ATOLL_TEST_S3_URL is not set: the node runs on file:// only, not on S3"
            );
            format!("file://{}", root.join("objects").display())
        }
    };
    let node_dir = root.join("node");
    let (db_port, admin_port) = (free_port(), free_port());
    let node = start_node(&node_dir, db_port, admin_port, &storage_url);
    let mut node = scopeguard(node);
    healthy(&format!("http://127.0.0.1:{db_port}/health")).await;

    let port = free_port();
    let api = format!("http://127.0.0.1:{port}");
    let serve = Command::new(BIN)
        .arg("serve")
        .arg("--database-url")
        .arg(format!("sqlite://{}", root.join("meta.db").display()))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--node", &format!("http://127.0.0.1:{admin_port}")])
        .env("ATOLL_NODE_SECRET", "a-node-secret-for-tests")
        .env(
            "ATOLL_SECRETS_KEY",
            atoll_meta::SecretsKey::generate_base64(),
        )
        .env("ATOLL_USERNAME", "root")
        .env("ATOLL_PASSWORD", "a-long-password")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _serve = scopeguard(serve);
    healthy(&format!("{api}/health")).await;
    let client = reqwest::Client::new();
    let login: Value = client
        .post(format!("{api}/v1/auth/login"))
        .json(&json!({"username": "root", "password": "a-long-password"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = login["token"].as_str().unwrap().to_string();
    let call = |method: reqwest::Method, path: &str, body: Value| {
        client
            .request(method, format!("{api}{path}"))
            .bearer_auth(&token)
            .json(&body)
            .send()
    };
    let status = call(
        reqwest::Method::POST,
        "/v1/groups",
        json!({"name": "east", "location": "aws-us-east-1"}),
    )
    .await
    .unwrap()
    .status();
    assert_eq!(status, 200);
    let created = call(
        reqwest::Method::POST,
        "/v1/databases",
        json!({"name": "orders", "group": "east"}),
    )
    .await
    .unwrap();
    assert_eq!(created.status(), 200, "{}", created.text().await.unwrap());
    let database = |name: &'static str| {
        let call = &call;
        async move {
            let got: Value = call(
                reqwest::Method::GET,
                &format!("/v1/databases/{name}"),
                json!(null),
            )
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
            let minted: Value = call(
                reqwest::Method::POST,
                &format!("/v1/databases/{name}/auth/tokens"),
                json!({}),
            )
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
            (
                got["database"]["http_url"].as_str().unwrap().to_string(),
                minted["jwt"].as_str().unwrap().to_string(),
            )
        }
    };
    let (url, db_token) = database("orders").await;
    assert!(execute(
        &client,
        &url,
        &db_token,
        "CREATE TABLE t (id INTEGER PRIMARY KEY)"
    )
    .await
    .is_some());
    for id in 1..=20 {
        assert!(execute(
            &client,
            &url,
            &db_token,
            &format!("INSERT INTO t VALUES ({id})")
        )
        .await
        .is_some());
    }
    let backups: Value = call(
        reqwest::Method::GET,
        "/v1/databases/orders/backups",
        json!(null),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(backups["durability"], "sync", "{backups}");
    assert_eq!(
        backups["lag"]["commits"], 0,
        "sync: nothing waits: {backups}"
    );

    // The node's disk is lost while it runs: SIGKILL, nothing of its directory left.
    node.kill();
    std::fs::remove_dir_all(&node_dir).unwrap();
    let _node = scopeguard(start_node(&node_dir, db_port, admin_port, &storage_url));
    healthy(&format!("http://127.0.0.1:{db_port}/health")).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        if let Some(result) = execute(&client, &url, &db_token, "SELECT count(*) FROM t").await {
            break result["rows"][0][0]["value"]
                .as_str()
                .unwrap()
                .parse::<i64>()
                .unwrap();
        }
        assert!(Instant::now() < deadline, "the database was not rebuilt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(rows, 20);
    let _ = std::fs::remove_dir_all(&root);
}

/// A child process killed when dropped.
struct Guard(Child);

impl Guard {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.kill();
    }
}

fn scopeguard(child: Child) -> Guard {
    Guard(child)
}
