//! The production topology as processes, for the tests that start one: `atoll serve`
//! replicas on a PostgreSQL store (`--registered-nodes`), `atoll node`s that register
//! with them, an administrator's API client, and Hrana over HTTP through a node.

use super::{free_port, BIN};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The node secret every process of a test topology shares.
pub const SECRET: &str = "a-node-secret-for-test-topologies";
pub const EAST: &str = "aws-us-east-1";
pub const WEST: &str = "aws-eu-west-1";

pub struct Process(pub Child);

impl Process {
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

pub async fn wait_healthy(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !reqwest::get(format!("{url}/health"))
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(Instant::now() < deadline, "{url} did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub struct Replica {
    pub process: Process,
    pub url: String,
}

pub fn start_replica(database_url: &str, secrets_key: &str, dir: &Path) -> Replica {
    start_replica_with(database_url, secrets_key, dir, free_port(), &[])
}

/// A replica on `port` with `extra` arguments; its log goes beside `dir`.
pub fn start_replica_with(
    database_url: &str,
    secrets_key: &str,
    dir: &Path,
    port: u16,
    extra: &[&str],
) -> Replica {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.with_extension("log"))
        .unwrap();
    let child = Command::new(BIN)
        .args([
            "serve",
            "--database-url",
            database_url,
            "--registered-nodes",
        ])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        // Passes 2 s apart unless the caller chose another interval.
        .args(
            (!extra.contains(&"--reconcile-interval-secs"))
                .then_some(["--reconcile-interval-secs", "2"])
                .into_iter()
                .flatten(),
        )
        .args(["--data-dir", dir.to_str().unwrap()])
        .args(extra)
        .env("ATOLL_NODE_SECRET", SECRET)
        .env("ATOLL_SECRETS_KEY", secrets_key)
        .env("ATOLL_USERNAME", "root")
        .env("ATOLL_PASSWORD", "a-long-password")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Replica {
        process: Process(child),
        url: format!("http://127.0.0.1:{port}"),
    }
}

pub struct Node {
    pub process: Process,
    pub url: String,
    args: Vec<String>,
}

impl Node {
    pub fn start(name: &str, location: &str, dir: &Path, storage: &str, replicas: &[&str]) -> Node {
        Node::start_with(name, location, dir, storage, replicas, &[])
    }

    /// A node with `extra` arguments.
    pub fn start_with(
        name: &str,
        location: &str,
        dir: &Path,
        storage: &str,
        replicas: &[&str],
        extra: &[&str],
    ) -> Node {
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
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
        Node {
            process: Process(spawn_node(&args)),
            url: format!("http://127.0.0.1:{port}"),
            args,
        }
    }

    /// SIGKILLs it (if it runs) and starts it again on the same directory and ports.
    pub fn restart(&mut self) {
        self.process.kill();
        for (i, arg) in self.args.iter().enumerate() {
            if arg == "--listen" || arg == "--admin-listen" {
                if let Some(port) = self.args[i + 1]
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                {
                    super::wait_until_free(port);
                }
            }
        }
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

pub struct Api {
    pub client: reqwest::Client,
    pub token: String,
}

impl Api {
    pub async fn login(url: &str) -> Api {
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

    pub async fn call(
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

    pub async fn get(&self, url: String) -> (u16, Value) {
        self.call(reqwest::Method::GET, url, None).await
    }

    pub async fn post(&self, url: String, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, url, Some(body)).await
    }
}

/// Runs `sql` on the database with hostname label `label` through the node at `node_url`
/// (path-prefix form), answering the result of the first statement, or the error body.
pub async fn execute(
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

pub async fn ids(
    client: &reqwest::Client,
    node_url: &str,
    label: &str,
    token: &str,
) -> BTreeSet<i64> {
    // A node that came back answers 503 (with Retry-After) until it has confirmed its
    // databases' configuration with the control plane; a client retries, and so does this.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let result = loop {
        match execute(client, node_url, label, token, "SELECT id FROM t").await {
            Err(e) if e.starts_with("503") && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            other => break other.unwrap(),
        }
    };
    result["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row[0]["value"].as_str().unwrap().parse().unwrap())
        .collect()
}

pub async fn nodes(api: &Api, replica: &str) -> Vec<Value> {
    let (status, listed) = api.get(format!("{replica}/v1/admin/nodes")).await;
    assert_eq!(status, 200, "{listed}");
    listed["nodes"].as_array().unwrap().clone()
}

pub fn node<'a>(listed: &'a [Value], name: &str) -> &'a Value {
    listed
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("node {name} not listed: {listed:?}"))
}

pub struct Db {
    pub label: String,
    pub id: String,
    pub token: String,
}

pub async fn create_db(api: &Api, replica: &str, name: &str, group: &str) -> Db {
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
