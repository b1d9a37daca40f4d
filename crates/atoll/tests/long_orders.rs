//! Long orders to nodes (issue 28), with processes on PostgreSQL: a seeded create runs on
//! its node as an operation the control plane polls (`GET /v1/operations/{id}` of the node
//! admin API), so
//!
//! - it works end to end through the public API as before, and the node lists the
//!   operation with its outcome and logs its phases;
//! - a node paused (SIGSTOP) in the middle of one is given up within about the poll's
//!   timeout (5 s, under the 10 s `ORDER_TIMEOUT`), not the 120 s a long order waited
//!   before: the create answers 503 and leaves nothing (no record, its name free, no files
//!   on the node once it runs again).
//!
//! Skips (loudly) without PostgreSQL.

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::cluster::{
    create_db, execute, start_replica_with, wait_healthy, Api, Process, EAST, SECRET,
};
use support::{free_port, temp_dir, BIN};

/// An `atoll node` whose admin API the test reaches itself.
struct AdminNode {
    process: Process,
    url: String,
    admin_url: String,
    dir: PathBuf,
    args: Vec<String>,
}

fn start_node(name: &str, dir: &Path, storage: &str, control_plane: &str) -> AdminNode {
    let (port, admin_port) = (free_port(), free_port());
    let args: Vec<String> = [
        "node",
        "--name",
        name,
        "--location",
        EAST,
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--admin-listen",
        &format!("127.0.0.1:{admin_port}"),
        "--data-dir",
        dir.to_str().unwrap(),
        "--storage-url",
        storage,
        "--control-plane",
        control_plane,
        // One process (no supervisor), so the signals reach the one that serves.
        "--no-supervise",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    AdminNode {
        process: Process(spawn_node(&args, dir)),
        url: format!("http://127.0.0.1:{port}"),
        admin_url: format!("http://127.0.0.1:{admin_port}"),
        dir: dir.to_path_buf(),
        args,
    }
}

fn spawn_node(args: &[String], dir: &Path) -> std::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.with_extension("log"))
        .unwrap();
    Command::new(BIN)
        .args(args)
        .env("ATOLL_NODE_SECRET", SECRET)
        .env("ATOLL_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

impl AdminNode {
    /// SIGKILLs it and starts it again on the same directory and ports.
    async fn restart(&mut self) {
        self.process.kill();
        for url in [&self.url, &self.admin_url] {
            support::wait_until_free(url.rsplit(':').next().unwrap().parse().unwrap());
        }
        self.process = Process(spawn_node(&self.args, &self.dir));
        wait_healthy(&self.url).await;
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.process.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal}");
    }

    /// `GET {path}` of its admin API, as the control plane asks (the node secret and the
    /// store it is stamped with).
    async fn admin_get(&self, client: &reqwest::Client, path: &str) -> Value {
        let store_id = std::fs::read_to_string(self.dir.join("store-id")).unwrap();
        let response = client
            .get(format!("{}{path}", self.admin_url))
            .bearer_auth(SECRET)
            .header(atoll_types::node::STORE_ID_HEADER, store_id.trim())
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        response.json().await.unwrap()
    }

    /// `GET /v1/operations/{id}`'s status.
    async fn operation_status(&self, client: &reqwest::Client, id: &str) -> u16 {
        let store_id = std::fs::read_to_string(self.dir.join("store-id")).unwrap();
        client
            .get(format!("{}/v1/operations/{id}", self.admin_url))
            .bearer_auth(SECRET)
            .header(atoll_types::node::STORE_ID_HEADER, store_id.trim())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    async fn operations(&self, client: &reqwest::Client) -> Vec<Value> {
        self.admin_get(client, "/v1/operations").await["operations"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Whether the node holds database `id` or is creating it.
    async fn holds(&self, client: &reqwest::Client, id: &str) -> bool {
        let held = self.admin_get(client, "/v1/databases").await;
        held["ids"].as_array().unwrap().iter().any(|h| h == id)
            || self
                .dir
                .join("dbs")
                .join(format!(".creating-{id}"))
                .exists()
    }
}

/// A control plane with one node of [`EAST`], a group `g` there, and a database `src` of a
/// few MB (several commits, so a point-in-time copy of it replays a log).
struct Setup {
    _root: PathBuf,
    control: support::cluster::Replica,
    node: AdminNode,
    api: Api,
}

async fn setup(name: &str, database_url: &str) -> Setup {
    let root = temp_dir(name);
    std::fs::create_dir_all(&root).unwrap();
    let storage = format!("file://{}", root.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let control = start_replica_with(
        database_url,
        &secrets_key,
        &root.join("serve"),
        free_port(),
        &[],
    );
    wait_healthy(&control.url).await;
    let node = start_node("east-a", &root.join("east-a"), &storage, &control.url);
    wait_healthy(&node.url).await;
    let api = Api::login(&control.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, listed) = api.get(format!("{}/v1/admin/nodes", control.url)).await;
        if listed["nodes"].as_array().is_some_and(|n| !n.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "the node did not register");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = api
        .post(
            format!("{}/v1/groups", control.url),
            json!({"name": "g", "location": EAST}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let src = create_db(&api, &control.url, "src", "g").await;
    let client = reqwest::Client::new();
    let run = |sql: &'static str| execute(&client, &node.url, &src.label, &src.token, sql);
    run("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
        .await
        .unwrap();
    for _ in 0..8 {
        run(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 64) \
             INSERT INTO t (v) SELECT randomblob(8192) FROM c",
        )
        .await
        .unwrap();
    }
    Setup {
        _root: root,
        control,
        node,
        api,
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// Creates `name` as a point-in-time copy of `src` as of now, through the public API.
async fn create_copy(api: &Api, control: &str, name: &str) -> (u16, Value) {
    api.post(
        format!("{control}/v1/databases"),
        json!({"name": name, "group": "g",
               "seed": {"type": "database", "name": "src", "timestamp": now_rfc3339()}}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seeded_create_runs_as_an_operation_end_to_end() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let Setup {
        control, node, api, ..
    } = setup("long-orders-ok", &database_url).await;
    let client = reqwest::Client::new();

    let started = Instant::now();
    let (status, body) = create_copy(&api, &control.url, "copy").await;
    assert_eq!(status, 200, "{body}");
    let took = started.elapsed();
    let (status, minted) = api
        .post(
            format!("{}/v1/databases/copy/auth/tokens", control.url),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{minted}");
    let (_, got) = api.get(format!("{}/v1/databases/copy", control.url)).await;
    let label = got["database"]["Hostname"]
        .as_str()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_string();
    let id = got["database"]["DbId"].as_str().unwrap().to_string();
    let counted = execute(
        &client,
        &node.url,
        &label,
        minted["jwt"].as_str().unwrap(),
        "SELECT count(*), sum(length(v)) FROM t",
    )
    .await
    .unwrap();
    assert_eq!(counted["rows"][0][0]["value"], "512", "{counted}");
    assert_eq!(counted["rows"][0][1]["value"], "4194304", "{counted}");

    // The node lists the operation with its outcome, and logged its phases.
    let operations = node.operations(&client).await;
    let create = operations
        .iter()
        .find(|o| o["kind"] == "create" && o["database_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no create operation of {id}: {operations:?}"));
    assert_eq!(create["state"], "done", "{create}");
    assert_eq!(create["result"], json!({}), "{create}");
    let log = std::fs::read_to_string(node.dir.with_extension("log")).unwrap();
    let phase = create["id"].as_str().unwrap().to_string();
    assert!(
        log.lines().any(|l| l.contains(&phase)
            && l.contains("operation phase")
            && l.contains("restoring from object storage")),
        "no phase logged for operation {phase}"
    );

    // The same through the other long orders of the public API: the listing of backups,
    // and a restore in place to before a delete.
    let (status, backups) = api
        .get(format!("{}/v1/databases/copy/backups", control.url))
        .await;
    assert_eq!(status, 200, "{backups}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before_delete = now_rfc3339();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let token = minted["jwt"].as_str().unwrap();
    execute(
        &client,
        &node.url,
        &label,
        token,
        "DELETE FROM t WHERE id > 256",
    )
    .await
    .unwrap();
    let (status, restored) = api
        .post(
            format!("{}/v1/databases/copy/restore", control.url),
            json!({"timestamp": before_delete}),
        )
        .await;
    assert_eq!(status, 200, "{restored}");
    let counted = execute(&client, &node.url, &label, token, "SELECT count(*) FROM t")
        .await
        .unwrap();
    assert_eq!(counted["rows"][0][0]["value"], "512", "{counted}");
    let kinds: Vec<Value> = node
        .operations(&client)
        .await
        .iter()
        .filter(|o| o["database_id"] == id.as_str() && o["state"] == "done")
        .map(|o| o["kind"].clone())
        .collect();
    for kind in ["create", "backups", "restore"] {
        assert!(kinds.contains(&json!(kind)), "{kind} not listed: {kinds:?}");
    }
    eprintln!(
        "long orders: a point-in-time copy of 4 MiB answered in {:.2} s",
        took.as_secs_f64()
    );
}

/// A point-in-time copy `{prefix}{n}` caught running on the node (seen in its
/// `GET /v1/operations`): its name, its operation as seen, and the API request still
/// waiting. A copy that finishes before it is seen running succeeds; the next is tried.
async fn catch_running_create(
    setup: &Setup,
    api: &std::sync::Arc<Api>,
    prefix: &str,
) -> (String, Value, tokio::task::JoinHandle<(u16, Value)>) {
    let (node, client) = (&setup.node, reqwest::Client::new());
    for attempt in 0..8 {
        let name = format!("{prefix}{attempt}");
        let before: Vec<String> = node
            .operations(&client)
            .await
            .iter()
            .map(|o| o["id"].as_str().unwrap().to_string())
            .collect();
        let creating = {
            let (api, url, name) = (api.clone(), setup.control.url.clone(), name.clone());
            tokio::spawn(async move { create_copy(&api, &url, &name).await })
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let running = loop {
            let operations = node.operations(&client).await;
            let new = operations
                .iter()
                .find(|o| o["kind"] == "create" && !before.iter().any(|id| o["id"] == id.as_str()));
            match new {
                Some(o) if o["state"] == "running" => break Some(o.clone()),
                Some(_) => break None,
                None if creating.is_finished() => break None,
                None => {}
            }
            assert!(
                Instant::now() < deadline,
                "the create did not reach the node"
            );
        };
        match running {
            Some(operation) => return (name, operation, creating),
            None => {
                let (status, body) = creating.await.unwrap();
                assert_eq!(status, 200, "{body}");
            }
        }
    }
    panic!("no create was caught running on the node in 8 attempts");
}

/// Once the node runs again it holds nothing of the create of `operation` (its copy, once
/// finished, was deleted by the control plane's undo or by the node's own rule for an
/// abandoned create), and the name `name` can be created.
async fn nothing_left(setup: &Setup, api: &Api, name: &str, operation: &Value) {
    let client = reqwest::Client::new();
    let (status, got) = api
        .get(format!("{}/v1/databases/{name}", setup.control.url))
        .await;
    assert_eq!(status, 404, "{got}");
    let id = operation["database_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while setup.node.holds(&client, &id).await {
        assert!(
            Instant::now() < deadline,
            "the node still holds the abandoned create {id}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, body) = create_copy(api, &setup.control.url, name).await;
    assert_eq!(status, 200, "the name is free again: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_paused_mid_create_is_given_up_within_seconds_leaving_nothing() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let setup = setup("long-orders-paused", &database_url).await;
    let api = std::sync::Arc::new(Api::login(&setup.control.url).await);

    let (name, operation, creating) = catch_running_create(&setup, &api, "stalled").await;
    setup.node.signal("STOP");
    let paused_at = Instant::now();
    let (status, body) = creating.await.unwrap();
    let given_up_in = paused_at.elapsed();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "data_plane_error", "{body}");
    assert!(
        given_up_in < Duration::from_secs(12),
        "the control plane gave up on the paused node after {:.1} s",
        given_up_in.as_secs_f64()
    );
    setup.node.signal("CONT");
    nothing_left(&setup, &api, &name, &operation).await;
    eprintln!(
        "long orders: a node paused mid-create ({} at {:?}) was given up {:.2} s after SIGSTOP",
        operation["phase"],
        operation["progress"],
        given_up_in.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_restarted_mid_create_forgets_it_and_the_create_fails_leaving_nothing() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let mut setup = setup("long-orders-restarted", &database_url).await;
    let api = std::sync::Arc::new(Api::login(&setup.control.url).await);

    let (name, operation, creating) = catch_running_create(&setup, &api, "cut").await;
    let killed_at = Instant::now();
    setup.node.restart().await;
    let (status, body) = creating.await.unwrap();
    let failed_in = killed_at.elapsed();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "data_plane_error", "{body}");
    // The restarted node does not know the operation: a control plane polling it now
    // is told 404 and takes the order as failed.
    let client = reqwest::Client::new();
    let id = operation["id"].as_str().unwrap();
    assert_eq!(setup.node.operation_status(&client, id).await, 404);
    nothing_left(&setup, &api, &name, &operation).await;
    eprintln!(
        "long orders: a node SIGKILLed mid-create and restarted: the create answered 503 {:.2} s after the kill",
        failed_in.as_secs_f64()
    );
}

/// One statement on database `label` through the node, with an encryption key: (status,
/// body).
async fn execute_keyed(
    node_url: &str,
    label: &str,
    token: &str,
    key: &str,
    sql: &str,
) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{node_url}/db/{label}/v2/pipeline"))
        .bearer_auth(token)
        .header("x-turso-encryption-key", key)
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]}))
        .send()
        .await
        .unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or(Value::Null),
    )
}

/// A key rotation (docs/ENCRYPTION.md) is a long order too: both keys travel to the node
/// process in the order's headers, the node re-encrypts the database as an operation, and
/// from then on it serves the new key only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_rotation_runs_on_the_node_as_an_operation() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let Setup {
        control, node, api, ..
    } = setup("long-orders-rotation", &database_url).await;
    let (old, new) = (
        "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=",
        "ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoM=",
    );
    let (status, body) = api
        .post(
            format!("{}/v1/databases", control.url),
            json!({"name": "vault", "group": "g", "remote_encryption": {"encryption_key": old}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, got) = api.get(format!("{}/v1/databases/vault", control.url)).await;
    let label = got["database"]["Hostname"]
        .as_str()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_string();
    let (_, minted) = api
        .post(
            format!("{}/v1/databases/vault/auth/tokens", control.url),
            json!({}),
        )
        .await;
    let token = minted["jwt"].as_str().unwrap().to_string();
    for sql in [
        "CREATE TABLE t (v TEXT)",
        "INSERT INTO t VALUES ('one'), ('two'), ('three')",
    ] {
        let (status, body) = execute_keyed(&node.url, &label, &token, old, sql).await;
        assert_eq!(status, 200, "{body}");
    }

    let (status, rotated) = api
        .post(
            format!("{}/v1/databases/vault/encryption/rotate", control.url),
            json!({"current_encryption_key": old, "encryption_key": new}),
        )
        .await;
    assert_eq!(status, 200, "{rotated}");
    assert!(
        rotated["pages_rewritten"].as_i64().unwrap() >= 2,
        "{rotated}"
    );
    let (status, body) =
        execute_keyed(&node.url, &label, &token, new, "SELECT count(*) FROM t").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["results"][0]["response"]["result"]["rows"][0][0]["value"],
        "3"
    );
    let (status, body) =
        execute_keyed(&node.url, &label, &token, old, "SELECT count(*) FROM t").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("ENCRYPTION_KEY_INVALID")),
        "{body}"
    );

    // The node ran it as an operation, and its log names neither key.
    let operations = node.operations(&reqwest::Client::new()).await;
    assert!(
        operations
            .iter()
            .any(|o| o["kind"] == "rotate_encryption_key" && o["state"] == "done"),
        "{operations:?}"
    );
    let log = std::fs::read_to_string(node.dir.with_extension("log")).unwrap_or_default();
    assert!(
        !log.contains(old) && !log.contains(new),
        "a key in the node's log"
    );
}
