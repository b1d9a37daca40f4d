//! The scale-out shape: `atoll serve` on PostgreSQL with two `atoll node`s in two
//! locations, every database placed on the node of its group's location and served there.
//! Skips (loudly) without PostgreSQL.

mod support;

use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_atoll");
const SECRET: &str = "a-node-secret-for-tests";

struct Process(Child);

/// Every directory under `dir` (itself included) is 0700 and every file 0600.
#[cfg(unix)]
fn assert_owner_only(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", dir.display());
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        if metadata.is_dir() {
            assert_owner_only(&path);
        } else {
            let mode = metadata.permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for(url: &str, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
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
    _process: Process,
    admin_url: String,
    dir: std::path::PathBuf,
}

async fn start_node(location: &str) -> Node {
    let (port, admin_port) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!(
        "atoll-node-{location}-{}-{port}",
        std::process::id()
    ));
    let mut child = Command::new(BIN)
        .args([
            "node",
            "--location",
            location,
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args([
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
            "--data-dir",
            dir.to_str().unwrap(),
        ])
        .env("ATOLL_NODE_SECRET", SECRET)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&format!("http://127.0.0.1:{port}/health"), &mut child).await;
    Node {
        _process: Process(child),
        admin_url: format!("http://127.0.0.1:{admin_port}"),
        dir,
    }
}

#[tokio::test]
async fn two_nodes_in_two_locations() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let east = start_node("aws-us-east-1").await;
    let west = start_node("aws-eu-west-1").await;

    // A node refuses the wrong secret.
    let refused = reqwest::Client::new()
        .get(format!("{}/v1/node", east.admin_url))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    let port = free_port();
    let api = format!("http://127.0.0.1:{port}");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--database-url",
            &database_url,
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--node", &east.admin_url, "--node", &west.admin_url])
        .env("ATOLL_NODE_SECRET", SECRET)
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
    wait_for(&format!("{api}/health"), &mut child).await;
    let _serve = Process(child);

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
    let token = login["token"].as_str().expect("login token").to_string();
    let call = |method: reqwest::Method, path: String, body: Value| {
        client
            .request(method, format!("{api}{path}"))
            .bearer_auth(&token)
            .json(&body)
            .send()
    };

    let mut urls = Vec::new();
    for (group, location) in [("east", "aws-us-east-1"), ("west", "aws-eu-west-1")] {
        let created = call(
            reqwest::Method::POST,
            "/v1/groups".into(),
            json!({"name": group, "location": location}),
        )
        .await
        .unwrap();
        assert_eq!(created.status(), 200);
        let db = format!("db-{group}");
        let created = call(
            reqwest::Method::POST,
            "/v1/databases".into(),
            json!({"name": db, "group": group}),
        )
        .await
        .unwrap();
        assert_eq!(created.status(), 200, "{}", created.text().await.unwrap());
        let got: Value = call(
            reqwest::Method::GET,
            format!("/v1/databases/{db}"),
            json!(null),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(got["database"]["primaryRegion"], location);
        let url = got["database"]["http_url"].as_str().unwrap().to_string();
        let jwt: Value = call(
            reqwest::Method::POST,
            format!("/v1/databases/{db}/auth/tokens"),
            json!({}),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        let jwt = jwt["jwt"].as_str().unwrap().to_string();
        let pipeline = json!({"requests": [
            {"type": "execute", "stmt": {"sql": "CREATE TABLE t (v)"}},
            {"type": "execute", "stmt": {"sql": "INSERT INTO t VALUES (?)", "args": [{"type": "text", "value": group}]}},
            {"type": "execute", "stmt": {"sql": "SELECT v FROM t"}},
            {"type": "close"}
        ]});
        let response: Value = client
            .post(format!("{url}v2/pipeline"))
            .bearer_auth(&jwt)
            .json(&pipeline)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            response["results"][2]["response"]["result"]["rows"][0][0]["value"], group,
            "{response}"
        );
        let id = got["database"]["DbId"].as_str().unwrap().to_string();
        urls.push((url, id));
    }

    // Nodes reached through --node without --control-plane hold no replicas: adding a
    // location to a group is refused (not accepted and never served there).
    let refused = call(
        reqwest::Method::POST,
        "/v1/groups/east/locations/aws-eu-west-1".into(),
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), 400);
    let body = refused.text().await.unwrap();
    assert!(body.contains("--control-plane"), "{body}");

    // Each database lives on the node of its location, and only there.
    assert_ne!(urls[0].0, urls[1].0);
    assert!(east.dir.join("dbs").join(&urls[0].1).exists());
    assert!(!west.dir.join("dbs").join(&urls[0].1).exists());
    assert!(west.dir.join("dbs").join(&urls[1].1).exists());
    // A node keeps its files owner-only, and holds only the public halves of the signing
    // keys (the private ones stay sealed in the control plane's store).
    #[cfg(unix)]
    for node in [&east, &west] {
        assert_owner_only(&node.dir);
    }
    let config =
        std::fs::read_to_string(east.dir.join("dbs").join(&urls[0].1).join("config.json")).unwrap();
    let config: Value = serde_json::from_str(&config).unwrap();
    let keys = config["keys"].as_array().unwrap();
    assert!(!keys.is_empty(), "{config}");
    for key in keys {
        let fields: Vec<&String> = key.as_object().unwrap().keys().collect();
        assert_eq!(fields, ["kid", "public_key"], "{config}");
    }

    // An upload through the second node.
    let created = call(
        reqwest::Method::POST,
        "/v1/databases".into(),
        json!({"name": "uploaded", "group": "west", "seed": {"type": "database_upload"}}),
    )
    .await
    .unwrap();
    assert_eq!(created.status(), 200);
    let got: Value = call(
        reqwest::Method::GET,
        "/v1/databases/uploaded".into(),
        json!(null),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let url = got["database"]["http_url"].as_str().unwrap().to_string();
    let jwt: Value = call(
        reqwest::Method::POST,
        "/v1/databases/uploaded/auth/tokens".into(),
        json!({}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let jwt = jwt["jwt"].as_str().unwrap().to_string();
    let file = std::env::temp_dir().join(format!("atoll-nodes-upload-{port}.db"));
    {
        let conn = rusqlite::Connection::open(&file).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE u (v); INSERT INTO u VALUES ('uploaded'); PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
    }
    let bytes = std::fs::read(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    let upload = client
        .post(format!("{url}v1/upload"))
        .bearer_auth(&jwt)
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 200, "{}", upload.text().await.unwrap());
    let query = json!({"requests": [{"type": "execute", "stmt": {"sql": "SELECT v FROM u"}}, {"type": "close"}]});
    let response: Value = client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(&jwt)
        .json(&query)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        response["results"][0]["response"]["result"]["rows"][0][0]["value"], "uploaded",
        "{response}"
    );

    // No node serves this location: the create is refused and leaves nothing.
    call(
        reqwest::Method::POST,
        "/v1/groups".into(),
        json!({"name": "south", "location": "aws-ap-south-1"}),
    )
    .await
    .unwrap();
    let refused = call(
        reqwest::Method::POST,
        "/v1/databases".into(),
        json!({"name": "nowhere", "group": "south"}),
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), 400);
    assert_eq!(
        call(
            reqwest::Method::GET,
            "/v1/databases/nowhere".into(),
            json!(null)
        )
        .await
        .unwrap()
        .status(),
        404
    );

    // Deleting on a node.
    let deleted = call(
        reqwest::Method::DELETE,
        "/v1/databases/db-east".into(),
        json!(null),
    )
    .await
    .unwrap();
    assert_eq!(deleted.status(), 200);
    // The operator's organization is on a paid plan: the database stays restorable, its
    // files kept on its node, its hostname free.
    assert!(east.dir.join("dbs").join(&urls[0].1).exists());
    let restored = call(
        reqwest::Method::POST,
        format!("/v1/deleted-databases/{}/restore", urls[0].1),
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(restored.status(), 200);
    let _ = std::fs::remove_dir_all(&east.dir);
    let _ = std::fs::remove_dir_all(&west.dir);
}

#[test]
fn a_node_refuses_to_start_without_a_secret() {
    let output = Command::new(BIN)
        .args([
            "node",
            "--location",
            "local",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .env_remove("ATOLL_NODE_SECRET")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("node-secret"));
}
