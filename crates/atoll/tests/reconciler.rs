//! Nothing deletes data it does not understand (issue 12, finding 1), with processes:
//! `atoll serve` on PostgreSQL and an `atoll node`.
//!
//! - a database the store forgot (PostgreSQL restored from an older backup) is quarantined
//!   on its node, listed, and removed only by an explicit purge after the retention;
//! - a replica started on another (empty) store cannot manage the node at all: it refuses
//!   to start, and the node's databases are untouched;
//! - `atoll dev` on a data directory whose store was replaced refuses to start.
//!
//! The PostgreSQL tests skip (loudly) without a server.

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_atoll");
const SECRET: &str = "a-node-secret-for-tests";
/// A waiting loop's bound: long enough for a slow debug build on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn temp_dir(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "atoll-reconciler-{what}-{}-{}",
        std::process::id(),
        free_port()
    ))
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for(url: &str, child: &mut Child) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if reqwest::get(url)
            .await
            .is_ok_and(|r| r.status().as_u16() < 500)
        {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("process exited early with {status}");
        }
        assert!(Instant::now() < deadline, "{url} did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Node {
    process: Process,
    admin_url: String,
    dir: PathBuf,
    port: u16,
    admin_port: u16,
}

async fn start_node(location: &str, dir: &Path) -> Node {
    start_node_on(location, dir, free_port(), free_port()).await
}

/// A node on given ports: a restarted node keeps its addresses.
async fn start_node_on(location: &str, dir: &Path, port: u16, admin_port: u16) -> Node {
    start_named_node(location, location, dir, port, admin_port).await
}

async fn start_named_node(
    name: &str,
    location: &str,
    dir: &Path,
    port: u16,
    admin_port: u16,
) -> Node {
    let mut child = Command::new(BIN)
        .args(["node", "--name", name, "--location", location])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
        .args(["--data-dir", dir.to_str().unwrap()])
        // Purgeable at once, so the test can show the purge.
        .args(["--quarantine-retention-hours", "0"])
        .env("ATOLL_NODE_SECRET", SECRET)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&format!("http://127.0.0.1:{port}/health"), &mut child).await;
    Node {
        process: Process(child),
        admin_url: format!("http://127.0.0.1:{admin_port}"),
        dir: dir.to_path_buf(),
        port,
        admin_port,
    }
}

fn serve_command(database_url: &str, port: u16, nodes: &[&Node], secrets_key: &str) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--database-url", database_url])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--reconcile-interval-secs", "1"])
        .env("ATOLL_NODE_SECRET", SECRET)
        .env("ATOLL_SECRETS_KEY", secrets_key)
        .env("ATOLL_USERNAME", "root")
        .env("ATOLL_PASSWORD", "a-long-password");
    for node in nodes {
        command.args(["--node", &node.admin_url]);
    }
    command
}

struct Api {
    url: String,
    client: reqwest::Client,
    token: String,
}

impl Api {
    async fn login(url: String) -> Api {
        let client = reqwest::Client::new();
        let login: Value = client
            .post(format!("{url}/v1/auth/login"))
            .json(&json!({"username": "root", "password": "a-long-password"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let token = login["token"].as_str().expect("login token").to_string();
        Api { url, client, token }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Creates a database in `group`: its id, URL and a token.
    async fn database(&self, name: &str, group: &str) -> (String, String, String) {
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                "/v1/databases",
                json!({"name": name, "group": group}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let (_, got) = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/databases/{name}"),
                json!(null),
            )
            .await;
        let (_, jwt) = self
            .call(
                reqwest::Method::POST,
                &format!("/v1/databases/{name}/auth/tokens"),
                json!({}),
            )
            .await;
        (
            got["database"]["DbId"].as_str().unwrap().to_string(),
            got["database"]["http_url"].as_str().unwrap().to_string(),
            jwt["jwt"].as_str().unwrap().to_string(),
        )
    }

    async fn execute(&self, db: &(String, String, String), sql: &str) -> Value {
        let response = self.try_execute(db, sql).await;
        assert_eq!(response["results"][0]["type"], "ok", "{response}");
        response["results"][0]["response"]["result"].clone()
    }

    /// The Hrana answer (or `{"status": …}` when the body is not JSON).
    async fn try_execute(&self, (_, url, jwt): &(String, String, String), sql: &str) -> Value {
        let body =
            json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]});
        let response = self
            .client
            .post(format!("{url}v2/pipeline"))
            .bearer_auth(jwt)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        response
            .json()
            .await
            .unwrap_or_else(|_| json!({"status": status}))
    }
}

#[tokio::test]
async fn a_database_the_store_forgot_is_quarantined_and_another_store_is_refused() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let Some(other_store_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let node = start_node("aws-us-east-1", &temp_dir("node")).await;
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let port = free_port();
    let mut child = serve_command(&database_url, port, &[&node], &secrets_key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let api_url = format!("http://127.0.0.1:{port}");
    wait_for(&format!("{api_url}/health"), &mut child).await;
    let serve = Process(child);
    let api = Api::login(api_url).await;
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            "/v1/groups",
            json!({"name": "east", "location": "aws-us-east-1"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let kept = api.database("kept", "east").await;
    api.execute(&kept, "CREATE TABLE t (v)").await;
    api.execute(&kept, "INSERT INTO t VALUES ('still here')")
        .await;
    let forgotten = api.database("forgotten", "east").await;
    api.execute(&forgotten, "CREATE TABLE f (v)").await;

    // The store forgets a database its node holds, as a restore of PostgreSQL from a
    // backup older than the database does: the row is simply not there (no tombstone).
    let (url, id) = (database_url.clone(), forgotten.0.clone());
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let deleted = client
            .execute("DELETE FROM databases WHERE id = $1", &[&id])
            .unwrap();
        assert_eq!(deleted, 1);
    })
    .await
    .unwrap();

    // The reconciler moves it aside on its node, whole, and lists it.
    let deadline = Instant::now() + PATIENCE;
    let listed = loop {
        let (status, listed) = api
            .call(reqwest::Method::GET, "/v1/admin/quarantine", json!(null))
            .await;
        assert_eq!(status, 200, "{listed}");
        if listed["databases"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
        {
            break listed;
        }
        assert!(Instant::now() < deadline, "never quarantined: {listed}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        listed["databases"][0]["id"],
        forgotten.0.as_str(),
        "{listed}"
    );
    assert_eq!(listed["databases"][0]["node"], "aws-us-east-1");
    assert_eq!(listed["databases"][0]["name"], "forgotten");
    assert_eq!(listed["unreachable_nodes"], json!([]));
    let aside = node.dir.join("quarantine").join(&forgotten.0);
    assert!(aside.join("data").is_file());
    assert!(!node.dir.join("dbs").join(&forgotten.0).exists());
    let kept_rows = api.execute(&kept, "SELECT v FROM t").await;
    assert_eq!(kept_rows["rows"][0][0]["value"], "still here");

    // The operator sees it with the CLI.
    let cli = |args: &[&str]| {
        let output = Command::new(BIN)
            .args(args)
            .env("ATOLL_CONFIG_DIR", node.dir.join("cli"))
            .env("ATOLL_API_URL", &api.url)
            .env("ATOLL_API_TOKEN", &api.token)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{args:?}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    let table = cli(&["admin", "quarantine", "list"]);
    assert!(table.contains(&forgotten.0), "{table}");
    assert!(table.contains("PURGEABLE"), "{table}");

    // Removed only on an explicit order (the node's retention is 0 here).
    let purged = cli(&["admin", "quarantine", "purge", "--yes"]);
    assert!(
        purged.contains(&format!("Purged {}", forgotten.0)),
        "{purged}"
    );
    assert!(!aside.exists());
    let (status, listed) = api
        .call(reqwest::Method::GET, "/v1/admin/quarantine", json!(null))
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed["databases"], json!([]));
    drop(serve);

    // A node refuses orders without a store id, and from another store.
    let client = reqwest::Client::new();
    let bare = client
        .get(format!("{}/v1/databases", node.admin_url))
        .bearer_auth(SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 400);
    let foreign = client
        .delete(format!("{}/v1/databases/{}", node.admin_url, kept.0))
        .bearer_auth(SECRET)
        .header("x-atoll-store-id", uuid_like())
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);

    // A replica on an empty store cannot manage the node: it refuses to start, saying why.
    let output = serve_command(&other_store_url, free_port(), &[&node], &secrets_key)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("belongs to metadata store"), "{stderr}");
    assert!(node.dir.join("dbs").join(&kept.0).join("data").is_file());

    // The right store still manages it, and the data is there.
    let port = free_port();
    let mut child = serve_command(&database_url, port, &[&node], &secrets_key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let api_url = format!("http://127.0.0.1:{port}");
    wait_for(&format!("{api_url}/health"), &mut child).await;
    let _serve = Process(child);
    let api = Api::login(api_url).await;
    let kept_rows = api.execute(&kept, "SELECT v FROM t").await;
    assert_eq!(kept_rows["rows"][0][0]["value"], "still here");
    let _ = std::fs::remove_dir_all(&node.dir);
}

fn uuid_like() -> String {
    format!("00000000-0000-4000-8000-{:012}", free_port())
}

#[tokio::test]
async fn atoll_dev_refuses_a_data_directory_whose_store_was_replaced() {
    let dir = temp_dir("dev");
    let start = |dir: &Path| {
        let port = free_port();
        let child = Command::new(BIN)
            .args(["dev", "--data-dir", dir.to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--db-listen", &format!("127.0.0.1:{}", free_port())])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        (child, format!("http://127.0.0.1:{port}"))
    };
    let (mut child, url) = start(&dir);
    wait_for(&format!("{url}/health"), &mut child).await;
    let token = std::fs::read_to_string(dir.join("admin.token")).unwrap();
    let created = reqwest::Client::new()
        .post(format!("{url}/v1/databases"))
        .bearer_auth(token.trim())
        .json(&json!({"name": "precious", "group": "default"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let _ = child.kill();
    let _ = child.wait();
    let databases: Vec<_> = std::fs::read_dir(dir.join("dbs")).unwrap().collect();
    assert_eq!(databases.len(), 1);

    // The store is replaced by an empty one (meta.db removed): the databases on disk are
    // not the new store's, and `atoll dev` refuses to touch them.
    for file in ["meta.db", "meta.db-wal", "meta.db-shm"] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let (child, _) = start(&dir);
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("belongs to metadata store"), "{stderr}");
    let databases: Vec<_> = std::fs::read_dir(dir.join("dbs")).unwrap().collect();
    assert_eq!(databases.len(), 1, "the database was kept");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Finding 2: a PATCH, a key rotation and a delete made while a node is down are in the
/// store (the API answers per the store), and reach the node by themselves when it comes
/// back; a create that needs the down node is refused with 503 and `Retry-After`.
#[tokio::test]
async fn changes_made_while_a_node_is_down_reach_it_when_it_returns() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let mut node = start_node("aws-us-east-1", &temp_dir("down")).await;
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let port = free_port();
    let mut child = serve_command(&database_url, port, &[&node], &secrets_key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let api_url = format!("http://127.0.0.1:{port}");
    wait_for(&format!("{api_url}/health"), &mut child).await;
    let _serve = Process(child);
    let api = Api::login(api_url).await;
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            "/v1/groups",
            json!({"name": "east", "location": "aws-us-east-1"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let guarded = api.database("guarded", "east").await;
    api.execute(&guarded, "CREATE TABLE t (v)").await;
    let gone = api.database("gone", "east").await;
    api.execute(&gone, "CREATE TABLE g (v)").await;

    // The node dies.
    let _ = node.process.0.kill();
    let _ = node.process.0.wait();

    let (status, body) = api
        .call(
            reqwest::Method::PATCH,
            "/v1/databases/guarded/configuration",
            json!({"block_writes": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["block_writes"], true, "{body}");
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            "/v1/databases/guarded/auth/rotate",
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = api
        .call(reqwest::Method::DELETE, "/v1/databases/gone", json!(null))
        .await;
    assert_eq!(status, 200, "{body}");
    // A create needs the node now: refused, with when to retry, and nothing left behind.
    let response = api
        .client
        .post(format!("{}/v1/databases", api.url))
        .bearer_auth(&api.token)
        .json(&json!({"name": "new", "group": "east"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().get("retry-after").is_some());
    let (status, _) = api
        .call(reqwest::Method::GET, "/v1/databases/new", json!(null))
        .await;
    assert_eq!(status, 404);
    // The store's answer is the intent.
    let (_, got) = api
        .call(
            reqwest::Method::GET,
            "/v1/databases/guarded/configuration",
            json!(null),
        )
        .await;
    assert_eq!(got["block_writes"], true, "{got}");
    let (_, new_token) = api
        .call(
            reqwest::Method::POST,
            "/v1/databases/guarded/auth/tokens",
            json!({}),
        )
        .await;
    let rotated = (
        guarded.0.clone(),
        guarded.1.clone(),
        new_token["jwt"].as_str().unwrap().to_string(),
    );

    // The node comes back, with its old configurations on disk; the reconciler brings it
    // up to date without any other change: the new token works, writes are blocked.
    node = start_node_on(
        "aws-us-east-1",
        &node.dir.clone(),
        node.port,
        node.admin_port,
    )
    .await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = api.try_execute(&rotated, "INSERT INTO t VALUES (1)").await;
        let code = answer["results"][0]["error"]["code"].as_str().unwrap_or("");
        if code == "BLOCKED" {
            break;
        }
        assert!(Instant::now() < deadline, "never converged: {answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let read = api.execute(&rotated, "SELECT count(*) FROM t").await;
    assert_eq!(read["rows"][0][0]["value"], "0");
    // The key rotated away no longer opens it.
    let old = api.try_execute(&guarded, "SELECT 1").await;
    assert_ne!(old["results"][0]["type"], "ok", "{old}");
    // The deleted database no longer answers.
    let deleted = api.try_execute(&gone, "SELECT 1").await;
    assert_ne!(deleted["results"][0]["type"], "ok", "{deleted}");
    // And creates work again.
    api.database("new", "east").await;
    let _ = std::fs::remove_dir_all(&node.dir);
}

/// Findings 3 and 4: two replicas place databases alike, balanced over the nodes of a
/// location (from the store, not from counts read at start); a replica starts and serves
/// while one of the nodes is down.
#[tokio::test]
async fn replicas_place_alike_and_start_while_a_node_is_down() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let east_a = start_named_node(
        "east-a",
        "aws-us-east-1",
        &temp_dir("east-a"),
        free_port(),
        free_port(),
    )
    .await;
    let mut east_b = start_named_node(
        "east-b",
        "aws-us-east-1",
        &temp_dir("east-b"),
        free_port(),
        free_port(),
    )
    .await;
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let port = free_port();
        let mut child = serve_command(&database_url, port, &[&east_a, &east_b], &secrets_key)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let api_url = format!("http://127.0.0.1:{port}");
        wait_for(&format!("{api_url}/health"), &mut child).await;
        replicas.push((Process(child), api_url));
    }
    let first = Api::login(replicas[0].1.clone()).await;
    // The same credentials work on the other replica (one store).
    let second = Api {
        url: replicas[1].1.clone(),
        client: reqwest::Client::new(),
        token: first.token.clone(),
    };
    let (status, body) = first
        .call(
            reqwest::Method::POST,
            "/v1/groups",
            json!({"name": "east", "location": "aws-us-east-1"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut created = Vec::new();
    for i in 0..6 {
        let api = if i % 2 == 0 { &first } else { &second };
        created.push(api.database(&format!("spread-{i}"), "east").await);
    }
    let count = |node: &Node| {
        std::fs::read_dir(node.dir.join("dbs"))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .count()
            })
            .unwrap_or(0)
    };
    assert_eq!(
        (count(&east_a), count(&east_b)),
        (3, 3),
        "balanced over the location's nodes"
    );

    // east-b dies; the second replica restarts meanwhile, and serves.
    let _ = east_b.process.0.kill();
    let _ = east_b.process.0.wait();
    replicas.pop();
    let port = free_port();
    let mut child = serve_command(&database_url, port, &[&east_a, &east_b], &secrets_key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let api_url = format!("http://127.0.0.1:{port}");
    wait_for(&format!("{api_url}/health"), &mut child).await;
    let _restarted = Process(child);
    let second = Api {
        url: api_url,
        client: reqwest::Client::new(),
        token: first.token.clone(),
    };
    let (status, listed) = second
        .call(reqwest::Method::GET, "/v1/databases", json!(null))
        .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["databases"].as_array().unwrap().len(), 6);
    // The databases of the node that is up answer through it.
    let on_a: Vec<_> = created
        .iter()
        .filter(|db| east_a.dir.join("dbs").join(&db.0).exists())
        .collect();
    assert_eq!(on_a.len(), 3);
    for db in on_a {
        second.execute(db, "SELECT 1").await;
    }
    // The operator sees both nodes and their databases, from the store.
    let (status, nodes) = second
        .call(reqwest::Method::GET, "/v1/admin/nodes", json!(null))
        .await;
    assert_eq!(status, 200, "{nodes}");
    let by_name = |name: &str| {
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing: {nodes}"))
    };
    assert_eq!(by_name("east-a")["databases"], 3);
    assert_eq!(by_name("east-a")["healthy"], true);
    assert_eq!(by_name("east-b")["databases"], 3);
    assert_eq!(by_name("east-b")["location"], "aws-us-east-1");
    let table = Command::new(BIN)
        .args(["admin", "nodes"])
        .env("ATOLL_CONFIG_DIR", east_a.dir.join("cli"))
        .env("ATOLL_API_URL", &second.url)
        .env("ATOLL_API_TOKEN", &second.token)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("east-a") && table.contains("east-b"),
        "{table}"
    );
    let (status, usage) = second
        .call(
            reqwest::Method::GET,
            "/v1/organizations/root/usage",
            json!(null),
        )
        .await;
    assert_eq!(status, 200, "{usage}");
    let _ = std::fs::remove_dir_all(&east_a.dir);
    let _ = std::fs::remove_dir_all(&east_b.dir);
}

/// A TCP relay to PostgreSQL that the test can cut (as PostgreSQL going down: listener
/// closed, every connection dropped) and restore on the same port.
struct Relay {
    port: u16,
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
        Relay { port, tasks }
    }

    fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// Finding 8: with PostgreSQL unreachable the API answers 503 with `Retry-After`, and
/// `/health` names the metadata store; when it is back, the replica serves again by
/// itself.
#[tokio::test]
async fn postgres_down_is_a_503_naming_the_store_and_heals_by_itself() {
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
    let target = format!("{host}:{port}");
    let relay = Relay::start(relay_port, target.clone()).await;

    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let api_port = free_port();
    let mut command = serve_command(&through_relay, api_port, &[], &secrets_key);
    let node_dir = temp_dir("pg-down");
    let mut child = command
        .args(["--data-dir", node_dir.to_str().unwrap()])
        .args(["--db-listen", &format!("127.0.0.1:{}", free_port())])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let api_url = format!("http://127.0.0.1:{api_port}");
    wait_for(&format!("{api_url}/health"), &mut child).await;
    let _serve = Process(child);
    let api = Api::login(api_url.clone()).await;

    relay.cut();
    let health = reqwest::get(format!("{api_url}/health")).await.unwrap();
    assert_eq!(health.status(), 503);
    assert!(health.headers().get("retry-after").is_some());
    let body: Value = health.json().await.unwrap();
    assert_eq!(body["code"], "store_unavailable", "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("metadata store"),
        "{body}"
    );
    let (status, body) = api
        .call(reqwest::Method::GET, "/v1/organizations", json!(null))
        .await;
    assert_eq!(status, 503, "{body}");

    // PostgreSQL is back: the replica reconnects by itself.
    let _relay = Relay::start(relay.port, target).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let health = reqwest::get(format!("{api_url}/health")).await.unwrap();
        if health.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never healed: {}",
            health.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = api
        .call(reqwest::Method::GET, "/v1/organizations", json!(null))
        .await;
    assert_eq!(status, 200, "{body}");
    let _ = std::fs::remove_dir_all(&node_dir);
}
