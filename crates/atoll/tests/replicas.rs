//! Replicas in a group's second location, as processes: `atoll serve` on PostgreSQL, one
//! `atoll node` in each of two locations, one object store. A group in both locations
//! gives its database a replica on the other location's node (issue 13): reads there are
//! served from the replica's own copy (even with the primary's node down), writes and
//! interactive transactions through it reach the primary, a client reads its own writes
//! through the replica, `…/locations/{location}/wait` answers once the replica caught up,
//! the instances list shows both, and removing the location removes the replica. Skips
//! (loudly) without PostgreSQL.

mod support;

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, temp_dir, BIN};

const SECRET: &str = "a-node-secret-for-the-replicas";
const EAST: &str = "aws-us-east-1";
const WEST: &str = "aws-eu-west-1";

struct Process(Child);

impl Process {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn wait_healthy(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !reqwest::get(format!("{url}/health"))
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(Instant::now() < deadline, "{url} did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `atoll serve` process (killed when dropped) and its URL.
struct Replica {
    _process: Process,
    url: String,
}

fn start_replica(database_url: &str, secrets_key: &str, dir: &Path) -> Replica {
    let port = free_port();
    let child = Command::new(BIN)
        .args([
            "serve",
            "--database-url",
            database_url,
            "--registered-nodes",
        ])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--reconcile-interval-secs", "2"])
        .args(["--data-dir", dir.to_str().unwrap()])
        .env("ATOLL_NODE_SECRET", SECRET)
        .env("ATOLL_SECRETS_KEY", secrets_key)
        .env("ATOLL_USERNAME", "root")
        .env("ATOLL_PASSWORD", "a-long-password")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Replica {
        _process: Process(child),
        url: format!("http://127.0.0.1:{port}"),
    }
}

struct Node {
    process: Process,
    url: String,
    args: Vec<String>,
}

impl Node {
    fn start(name: &str, location: &str, dir: &Path, storage: &str, replicas: &[&str]) -> Node {
        let (port, admin_port) = (free_port(), free_port());
        let args: Vec<String> = [
            "node",
            "--name",
            name,
            "--location",
            location,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
            "--data-dir",
            dir.to_str().unwrap(),
            "--storage-url",
            storage,
            "--control-plane",
            &replicas.join(","),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Node {
            process: Process(spawn_node(&args)),
            url: format!("http://127.0.0.1:{port}"),
            args,
        }
    }

    /// Starts it again on the same directory and ports, after a SIGKILL.
    fn restart(&mut self) {
        self.process.kill();
        self.process = Process(spawn_node(&self.args));
    }
}

/// Its log goes beside its data directory (kept when the test fails).
fn spawn_node(args: &[String]) -> Child {
    let dir = args
        .iter()
        .position(|a| a == "--data-dir")
        .map(|i| PathBuf::from(&args[i + 1]))
        .unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.with_extension("log"))
        .unwrap();
    Command::new(BIN)
        .args(args)
        .env("ATOLL_NODE_SECRET", SECRET)
        .env("ATOLL_LOG", "info,atoll_data=debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

struct Api {
    client: reqwest::Client,
    token: String,
}

impl Api {
    async fn login(url: &str) -> Api {
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
        Api {
            client,
            token: login["token"].as_str().expect("login token").to_string(),
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        url: String,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.client.request(method, url).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, url: String) -> (u16, Value) {
        self.call(reqwest::Method::GET, url, None).await
    }

    async fn post(&self, url: String, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, url, Some(body)).await
    }
}

/// Runs `sql` on the database with hostname label `label` through the node at `node_url`
/// (path-prefix form), answering the result of the first statement, or the error body.
async fn execute(
    client: &reqwest::Client,
    node_url: &str,
    label: &str,
    token: &str,
    sql: &str,
) -> Result<Value, String> {
    let response = client
        .post(format!("{node_url}/db/{label}/v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({"requests": [
            {"type": "execute", "stmt": {"sql": sql}},
            {"type": "close"}
        ]}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() || body["results"][0]["type"] != "ok" {
        return Err(format!("{status}: {body}"));
    }
    Ok(body["results"][0]["response"]["result"].clone())
}

async fn ids(client: &reqwest::Client, node_url: &str, label: &str, token: &str) -> BTreeSet<i64> {
    let result = execute(client, node_url, label, token, "SELECT id FROM t")
        .await
        .unwrap();
    result["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row[0]["value"].as_str().unwrap().parse().unwrap())
        .collect()
}

async fn nodes(api: &Api, replica: &str) -> Vec<Value> {
    let (status, listed) = api.get(format!("{replica}/v1/admin/nodes")).await;
    assert_eq!(status, 200, "{listed}");
    listed["nodes"].as_array().unwrap().clone()
}

struct Db {
    label: String,
    id: String,
    token: String,
}

async fn create_db(api: &Api, replica: &str, name: &str, group: &str) -> Db {
    let (status, created) = api
        .post(
            format!("{replica}/v1/databases"),
            json!({"name": name, "group": group}),
        )
        .await;
    assert_eq!(status, 200, "{created}");
    let (_, got) = api.get(format!("{replica}/v1/databases/{name}")).await;
    let (status, minted) = api
        .post(
            format!("{replica}/v1/databases/{name}/auth/tokens"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{minted}");
    Db {
        label: got["database"]["Hostname"]
            .as_str()
            .unwrap()
            .split('.')
            .next()
            .unwrap()
            .to_string(),
        id: got["database"]["DbId"].as_str().unwrap().to_string(),
        token: minted["jwt"].as_str().unwrap().to_string(),
    }
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
    let west = Node::start("west", WEST, &west_dir, &storage, &replicas);
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

    // The primary's node goes down: the replica still serves reads from its own copy;
    // writes through it fail (nothing is acknowledged that the primary did not take).
    east.process.kill();
    for _ in 0..5 {
        // Never an older state than the one already read, however long the primary is gone.
        let all = ids(&client, &west.url, &db.label, &db.token).await;
        assert_eq!(all.len(), 24, "{all:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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
        24
    );
}
