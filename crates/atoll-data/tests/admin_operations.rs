//! The node admin API's long orders (`atoll_data::admin::operations`), over HTTP as the
//! control plane sends them: `202` with an operation's id, then `GET /v1/operations/{id}`
//! until it is done or failed with the status the order would have answered; and the
//! operations' routes guarded like every other admin route. And the one order that asks
//! about many databases at once (`POST /v1/sizes`).

mod support;

use atoll_data::admin::{self, AdminState};
use atoll_types::node::{CreateDatabase, NodeInfo, Seed, STORE_ID_HEADER};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &str = "a-node-secret-for-admin-tests";
const STORE: &str = "store-1";

struct Admin {
    url: String,
    http: reqwest::Client,
    test_node: support::TestNode,
}

async fn start_admin() -> (Admin, Arc<atoll_data::node::Node>) {
    let test_node = support::start_node().await;
    let node = Arc::clone(&test_node.node);
    let info = NodeInfo {
        name: "n1".into(),
        location: "here".into(),
        hostname_suffix: "localhost".into(),
        http_url: format!("http://{}", test_node.addr),
        databases: 0,
        direct_url: String::new(),
    };
    let state = AdminState::new(Arc::clone(&node), info, SECRET, Duration::from_secs(60)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, admin::router(state)).await });
    let admin = Admin {
        url,
        http: reqwest::Client::new(),
        test_node,
    };
    (admin, node)
}

impl Admin {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(SECRET)
            .header(STORE_ID_HEADER, STORE);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A long order: `202` and the operation's id.
    async fn start(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> String {
        let (status, started) = self.send(method, path, body).await;
        assert_eq!(status, 202, "{path}: {started}");
        started["operation"].as_str().unwrap().to_string()
    }

    /// Operation `id` once it is no longer running.
    async fn finished(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, operation) = self
                .send(reqwest::Method::GET, &format!("/v1/operations/{id}"), None)
                .await;
            assert_eq!(status, 200, "{operation}");
            if operation["state"] != "running" {
                return operation;
            }
            assert!(Instant::now() < deadline, "{operation}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn create(node: &support::TestNode, name: &str, seed: Seed) -> (String, Value) {
    let config = node.config_for(name);
    let id = config.id.clone();
    (
        id,
        serde_json::to_value(CreateDatabase { config, seed }).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_orders_answer_202_and_their_operation_reports_the_outcome() {
    let (admin, node) = start_admin().await;

    let (id, body) = create(&admin.test_node, "fresh", Seed::Empty);
    let operation = admin
        .start(reqwest::Method::POST, "/v1/databases", Some(body))
        .await;
    let done = admin.finished(&operation).await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["kind"], "create");
    assert_eq!(done["database_id"], id.as_str());
    assert_eq!(done["result"], json!({}));
    assert!(done["finished_at_ms"].as_i64().unwrap() >= done["started_at_ms"].as_i64().unwrap());
    assert!(node.by_id(&id).is_some());

    // A failure is the order's error, with the status the order would have answered.
    let (missing, body) = create(
        &admin.test_node,
        "copy",
        Seed::Copy {
            source_id: "no-such-source".into(),
        },
    );
    let operation = admin
        .start(reqwest::Method::POST, "/v1/databases", Some(body))
        .await;
    let failed = admin.finished(&operation).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["error"]["status"], 400, "{failed}");
    assert!(
        node.by_id(&missing).is_none(),
        "a failed create leaves nothing"
    );

    // This node has no object storage: the restore fails as the order did.
    let operation = admin
        .start(
            reqwest::Method::POST,
            &format!("/v1/databases/{id}/restore"),
            Some(json!({"timestamp_ms": 1})),
        )
        .await;
    let failed = admin.finished(&operation).await;
    assert_eq!(failed["kind"], "restore");
    assert_eq!(failed["error"]["status"], 400, "{failed}");

    // An unknown database is refused at once, before any operation.
    let (status, _) = admin
        .send(reqwest::Method::GET, "/v1/databases/unknown/backups", None)
        .await;
    assert_eq!(status, 404);
    let (status, _) = admin
        .send(
            reqwest::Method::POST,
            "/v1/databases/unknown/hand-over",
            None,
        )
        .await;
    assert_eq!(status, 404);

    // The listing shows them, oldest first; an unknown id is 404; a finished operation
    // cancelled stays as it finished.
    let (status, listed) = admin
        .send(reqwest::Method::GET, "/v1/operations", None)
        .await;
    assert_eq!(status, 200);
    let kinds: Vec<&str> = listed["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["create", "create", "restore"]);
    let (status, _) = admin
        .send(
            reqwest::Method::GET,
            "/v1/operations/no-such-operation",
            None,
        )
        .await;
    assert_eq!(status, 404);
    let first = listed["operations"][0]["id"].as_str().unwrap();
    let (status, cancelled) = admin
        .send(
            reqwest::Method::DELETE,
            &format!("/v1/operations/{first}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(cancelled["state"], "done");
    assert!(node.by_id(&id).is_some());
}

#[tokio::test]
async fn the_operations_routes_need_the_node_secret_and_the_store_id() {
    let (admin, _node) = start_admin().await;
    for (method, path) in [
        (reqwest::Method::GET, "/v1/operations"),
        (reqwest::Method::GET, "/v1/operations/x"),
        (reqwest::Method::DELETE, "/v1/operations/x"),
        (reqwest::Method::POST, "/v1/databases"),
        (reqwest::Method::POST, "/v1/sizes"),
    ] {
        let refused = admin
            .http
            .request(method.clone(), format!("{}{path}", admin.url))
            .bearer_auth("not-the-secret")
            .header(STORE_ID_HEADER, STORE)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401, "{method} {path}");
        let anonymous = admin
            .http
            .request(method.clone(), format!("{}{path}", admin.url))
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status(), 401, "{method} {path}");
        let without_store = admin
            .http
            .request(method.clone(), format!("{}{path}", admin.url))
            .bearer_auth(SECRET)
            .send()
            .await
            .unwrap();
        assert_eq!(without_store.status(), 400, "{method} {path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sizes_answer_many_databases_at_once_and_leave_out_the_unknown() {
    let (admin, node) = start_admin().await;
    let mut ids = Vec::new();
    for name in ["small", "large"] {
        let (id, body) = create(&admin.test_node, name, Seed::Empty);
        let operation = admin
            .start(reqwest::Method::POST, "/v1/databases", Some(body))
            .await;
        assert_eq!(admin.finished(&operation).await["state"], "done");
        ids.push(id);
    }
    let large = node.by_id(&ids[1]).unwrap();
    let conn = rusqlite::Connection::open(large.file_path()).unwrap();
    conn.execute_batch(
        "CREATE TABLE t (x);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50)
         INSERT INTO t SELECT zeroblob(4000) FROM n;",
    )
    .unwrap();
    drop(conn);

    let asked = json!({"ids": [ids[0], ids[1], "not-held-here"]});
    let (status, sizes) = admin
        .send(reqwest::Method::POST, "/v1/sizes", Some(asked))
        .await;
    assert_eq!(status, 200, "{sizes}");
    let sizes = sizes["storage_bytes"].as_object().unwrap();
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    for id in &ids {
        assert_eq!(
            sizes[id].as_u64().unwrap(),
            node.by_id(id).unwrap().storage_bytes(),
            "the same figure as the database's stats"
        );
    }
    assert!(sizes[&ids[1]].as_u64().unwrap() > sizes[&ids[0]].as_u64().unwrap() + 100_000);

    // A bounded question: more than a request may hold is refused, not half answered.
    let too_many: Vec<String> = (0..=atoll_types::node::SIZES_PER_REQUEST)
        .map(|i| format!("id-{i}"))
        .collect();
    let (status, refused) = admin
        .send(
            reqwest::Method::POST,
            "/v1/sizes",
            Some(json!({"ids": too_many})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
}
