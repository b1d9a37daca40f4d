//! The databases the control plane creates, reached on the data plane with the tokens it
//! mints: the end-to-end flows of the spec (create → token → query; create for upload →
//! token → upload → query) and data-plane authentication.

use crate::harness::{unique, TestApp};
use serde_json::{json, Value};

/// Creates a database in the admin's personal organization; returns its `http_url`.
async fn create(app: &TestApp, name: &str, body: Value) -> String {
    let mut body = body;
    body["name"] = json!(name);
    app.post("/v1/databases", &app.admin_token, body)
        .await
        .expect(200);
    let got = app
        .get(&format!("/v1/databases/{name}"), &app.admin_token)
        .await
        .expect(200);
    got["database"]["http_url"].as_str().unwrap().to_string()
}

async fn token(app: &TestApp, path: &str, query: &str) -> String {
    let body = app
        .post(
            &format!("{path}/auth/tokens{query}"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    body["jwt"].as_str().unwrap().to_string()
}

/// Runs one statement through `/v2/pipeline`: (HTTP status, the execute result or error).
async fn execute(app: &TestApp, url: &str, token: &str, sql: &str) -> (u16, Value) {
    let body = json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]});
    let response = app
        .client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status != 200 {
        return (status, body);
    }
    let result = &body["results"][0];
    if result["type"] == "ok" {
        (200, result["response"]["result"].clone())
    } else {
        (200, json!({"error": result["error"]}))
    }
}

fn sqlite_file(rows: i64) -> Vec<u8> {
    let path = std::env::temp_dir().join(format!("atoll-upload-{}.db", unique("f")));
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT);")
            .unwrap();
        for i in 0..rows {
            conn.execute("INSERT INTO t (v) VALUES (?1)", [format!("row {i}")])
                .unwrap();
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    bytes
}

#[tokio::test]
async fn a_query_right_after_create_succeeds() {
    let app = app!();
    let url = create(&app, "fresh", json!({})).await;
    let token = token(&app, "/v1/databases/fresh", "").await;
    let (status, result) = execute(&app, &url, &token, "CREATE TABLE t (x); ").await;
    assert_eq!(status, 200, "{result}");
    let (_, result) = execute(&app, &url, &token, "INSERT INTO t VALUES (42)").await;
    assert_eq!(result["affected_row_count"], 1);
    let (_, result) = execute(&app, &url, &token, "SELECT x FROM t").await;
    assert_eq!(
        result["rows"],
        json!([[{"type": "integer", "value": "42"}]])
    );
}

#[tokio::test]
async fn the_upload_flow_of_the_spec() {
    let app = app!();
    let url = create(
        &app,
        "imported",
        json!({"seed": {"type": "database_upload"}}),
    )
    .await;
    let got = app
        .get("/v1/databases/imported", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(got["database"]["state"], "awaiting_upload");
    let token = token(&app, "/v1/databases/imported", "?expiration=5m").await;

    // Until the file lands, queries are refused with a clear error.
    let (status, body) = execute(&app, &url, &token, "SELECT 1").await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("waiting for its upload"),
        "{body}"
    );

    // A bad file is refused, and the database still waits.
    let bad = app
        .client
        .post(format!("{url}v1/upload"))
        .bearer_auth(&token)
        .body(b"not sqlite".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let upload = app
        .client
        .post(format!("{url}v1/upload"))
        .bearer_auth(&token)
        .body(sqlite_file(100))
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 200, "{}", upload.text().await.unwrap());

    let (status, result) = execute(&app, &url, &token, "SELECT count(*), max(v) FROM t").await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["rows"][0][0]["value"], "100");
    assert_eq!(result["rows"][0][1]["value"], "row 99");
    let got = app
        .get("/v1/databases/imported", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(got["database"]["state"], "active");
}

#[tokio::test]
async fn the_chunked_upload_flow() {
    let app = app!();
    let url = create(
        &app,
        "chunked",
        json!({"seed": {"type": "database_upload"}}),
    )
    .await;
    let token = token(&app, "/v1/databases/chunked", "?expiration=5m").await;
    let file = sqlite_file(2000);
    let start: Value = app
        .client
        .put(format!("{url}v2/upload/start"))
        .bearer_auth(&token)
        .json(&json!({"db_size_bytes": file.len()}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let chunk_size = start["chunk_size"].as_u64().unwrap() as usize;
    let id = start["upload_id"].as_str().unwrap();
    assert!(chunk_size > 0);
    for (n, chunk) in file.chunks(chunk_size).enumerate() {
        let response = app
            .client
            .put(format!("{url}v2/upload/{id}/chunk/{n}"))
            .bearer_auth(&token)
            .body(chunk.to_vec())
            .send()
            .await
            .unwrap();
        assert!(matches!(response.status().as_u16(), 200 | 201));
    }
    let done = app
        .client
        .put(format!("{url}v2/upload/{id}/finalize"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200);
    let (_, result) = execute(&app, &url, &token, "SELECT count(*) FROM t").await;
    assert_eq!(result["rows"][0][0]["value"], "2000");
}

#[tokio::test]
async fn data_plane_authentication() {
    let app = app!();
    let url = create(&app, "guarded", json!({})).await;
    let other_url = create(&app, "neighbour", json!({})).await;
    let path = "/v1/databases/guarded";
    let full = token(&app, path, "").await;
    execute(&app, &url, &full, "CREATE TABLE t (x)").await;

    // Missing and malformed credentials.
    let response = app
        .client
        .post(format!("{url}v2/pipeline"))
        .json(&json!({"requests": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(execute(&app, &url, "not-a-jwt", "SELECT 1").await.0, 401);

    // Read-only tokens read, and a write fails the whole request with 403.
    let read_only = token(&app, path, "?authorization=read-only").await;
    assert_eq!(
        execute(&app, &url, &read_only, "SELECT * FROM t").await.0,
        200
    );
    let (status, body) = execute(&app, &url, &read_only, "INSERT INTO t VALUES (1)").await;
    assert_eq!(status, 403, "{body}");

    // A token for one database never opens another, even in the same group.
    assert_eq!(execute(&app, &other_url, &full, "SELECT 1").await.0, 401);

    // Expired tokens.
    let short = token(&app, path, "?expiration=1s").await;
    assert_eq!(execute(&app, &url, &short, "SELECT 1").await.0, 200);
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let (status, body) = execute(&app, &url, &short, "SELECT 1").await;
    assert_eq!(status, 401, "{body}");
    assert!(body["error"].as_str().unwrap().contains("expired"));

    // Rotation: every token the old key signed stops at once; new ones work.
    app.post(&format!("{path}/auth/rotate"), &app.admin_token, json!({}))
        .await
        .expect(200);
    assert_eq!(execute(&app, &url, &full, "SELECT 1").await.0, 401);
    let fresh = token(&app, path, "").await;
    assert_eq!(execute(&app, &url, &fresh, "SELECT 1").await.0, 200);
}

#[tokio::test]
async fn group_tokens_open_every_database_of_their_group_only() {
    let app = app!();
    app.group("admin", &app.admin_token, "other").await;
    let a = create(&app, "a", json!({})).await;
    let b = create(&app, "b", json!({})).await;
    let c = create(&app, "c", json!({"group": "other"})).await;
    let group = token(&app, "/v1/groups/default", "").await;
    assert_eq!(execute(&app, &a, &group, "SELECT 1").await.0, 200);
    assert_eq!(execute(&app, &b, &group, "SELECT 1").await.0, 200);
    assert_eq!(execute(&app, &c, &group, "SELECT 1").await.0, 401);

    let database = token(&app, "/v1/databases/a", "").await;
    app.post(
        "/v1/groups/default/auth/rotate",
        &app.admin_token,
        json!({}),
    )
    .await
    .expect(200);
    assert_eq!(
        execute(&app, &a, &group, "SELECT 1").await.0,
        401,
        "group tokens die with the group key"
    );
    assert_eq!(
        execute(&app, &a, &database, "SELECT 1").await.0,
        200,
        "database tokens keep working"
    );
}

#[tokio::test]
async fn configuration_is_enforced_on_the_data_plane() {
    let app = app!();
    let url = create(&app, "limited", json!({})).await;
    let token = token(&app, "/v1/databases/limited", "").await;
    execute(&app, &url, &token, "CREATE TABLE t (x)").await;
    let config = "/v1/databases/limited/configuration";

    app.patch(config, &app.admin_token, json!({"block_writes": true}))
        .await
        .expect(200);
    let (_, result) = execute(&app, &url, &token, "INSERT INTO t VALUES (1)").await;
    assert_eq!(result["error"]["code"], "BLOCKED", "{result}");
    assert_eq!(
        execute(&app, &url, &token, "SELECT * FROM t").await.1["rows"],
        json!([])
    );

    // An IP allow list: loopback clients pass only while loopback is listed.
    app.patch(
        config,
        &app.admin_token,
        json!({"block_writes": false, "allowed_ips": ["203.0.113.0/24"]}),
    )
    .await
    .expect(200);
    let (status, body) = execute(&app, &url, &token, "SELECT * FROM t").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("not allowed"),
        "{body}"
    );
    app.patch(
        config,
        &app.admin_token,
        json!({"allowed_ips": ["203.0.113.0/24", "127.0.0.0/8"]}),
    )
    .await
    .expect(200);
    assert_eq!(execute(&app, &url, &token, "SELECT * FROM t").await.0, 200);
    app.patch(config, &app.admin_token, json!({"allowed_ips": []}))
        .await
        .expect(200);

    app.patch(
        config,
        &app.admin_token,
        json!({"block_writes": false, "block_reads": true}),
    )
    .await
    .expect(200);
    let (_, result) = execute(&app, &url, &token, "SELECT * FROM t").await;
    assert_eq!(result["error"]["code"], "BLOCKED", "{result}");

    app.patch(
        config,
        &app.admin_token,
        json!({"block_reads": false, "size_limit": "64kb"}),
    )
    .await
    .expect(200);
    let (_, result) = execute(
        &app,
        &url,
        &token,
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) INSERT INTO t SELECT randomblob(1000) FROM n",
    )
    .await;
    assert_eq!(result["error"]["code"], "SQLITE_FULL", "{result}");
}

#[tokio::test]
async fn attach_needs_the_permission_and_the_targets_consent() {
    let app = app!();
    let main = create(&app, "main-db", json!({})).await;
    let source = create(&app, "source", json!({})).await;
    let source_token = token(&app, "/v1/databases/source", "").await;
    execute(&app, &source, &source_token, "CREATE TABLE shared (v)").await;
    execute(
        &app,
        &source,
        &source_token,
        "INSERT INTO shared VALUES ('hello')",
    )
    .await;

    let with_attach = app
        .post(
            "/v1/databases/main-db/auth/tokens",
            &app.admin_token,
            json!({"permissions": {"read_attach": {"databases": ["source"]}}}),
        )
        .await
        .expect(200)["jwt"]
        .as_str()
        .unwrap()
        .to_string();
    let plain = token(&app, "/v1/databases/main-db", "").await;

    // The target has not allowed attaching yet.
    let body = json!({"requests": [
        {"type": "execute", "stmt": {"sql": "ATTACH 'source' AS src"}},
        {"type": "execute", "stmt": {"sql": "SELECT v FROM src.shared"}},
        {"type": "close"}
    ]});
    let pipeline = |token: &str| {
        app.client
            .post(format!("{main}v2/pipeline"))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    assert_eq!(pipeline(&with_attach).await.unwrap().status(), 403);
    app.patch(
        "/v1/databases/source/configuration",
        &app.admin_token,
        json!({"allow_attach": true}),
    )
    .await
    .expect(200);
    assert_eq!(pipeline(&plain).await.unwrap().status(), 403);
    let response: Value = pipeline(&with_attach).await.unwrap().json().await.unwrap();
    assert_eq!(
        response["results"][1]["response"]["result"]["rows"][0][0]["value"], "hello",
        "{response}"
    );
}

#[tokio::test]
async fn copies_and_dumps_carry_their_data() {
    let app = app!();
    let original = create(&app, "original", json!({})).await;
    let token_original = token(&app, "/v1/databases/original", "").await;
    execute(&app, &original, &token_original, "CREATE TABLE t (v)").await;
    execute(
        &app,
        &original,
        &token_original,
        "INSERT INTO t VALUES ('kept')",
    )
    .await;

    let copy = create(
        &app,
        "copy",
        json!({"seed": {"type": "database", "name": "original"}}),
    )
    .await;
    let token_copy = token(&app, "/v1/databases/copy", "").await;
    assert_eq!(
        execute(&app, &copy, &token_copy, "SELECT v FROM t").await.1["rows"][0][0]["value"],
        "kept"
    );

    let uploaded = app
        .post_file(
            "/v1/databases/dumps",
            &app.admin_token,
            "CREATE TABLE d (v);\nINSERT INTO d VALUES ('from dump');\n",
        )
        .await;
    let dump_url = uploaded.body["dump_url"].as_str().unwrap().to_string();
    let dumped = create(
        &app,
        "dumped",
        json!({"seed": {"type": "dump", "url": dump_url}}),
    )
    .await;
    let token_dumped = token(&app, "/v1/databases/dumped", "").await;
    assert_eq!(
        execute(&app, &dumped, &token_dumped, "SELECT v FROM d")
            .await
            .1["rows"][0][0]["value"],
        "from dump"
    );
}

#[tokio::test]
async fn deleted_and_transferred_databases_move_on_the_data_plane() {
    let app = app!();
    let url = create(&app, "leaving", json!({})).await;
    let token = token(&app, "/v1/databases/leaving", "").await;
    execute(&app, &url, &token, "CREATE TABLE t (x)").await;
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.post(
        "/v1/databases/leaving/transfer",
        &app.admin_token,
        json!({"org": team}),
    )
    .await
    .expect(200);
    let moved = app
        .get(
            &format!("/v1/organizations/{team}/databases/leaving"),
            &app.admin_token,
        )
        .await
        .expect(200);
    let new_url = moved["database"]["http_url"].as_str().unwrap().to_string();
    assert_ne!(new_url, url);
    // Same database under the new hostname, with a new key: the tokens minted before the
    // transfer stop working (docs/SECURITY.md, "Credentials follow access").
    assert_eq!(
        execute(&app, &new_url, &token, "SELECT count(*) FROM t")
            .await
            .0,
        401
    );
    assert_eq!(execute(&app, &url, &token, "SELECT 1").await.0, 404);
    let token = self::token(
        &app,
        &format!("/v1/organizations/{team}/databases/leaving"),
        "",
    )
    .await;
    assert_eq!(
        execute(&app, &new_url, &token, "SELECT count(*) FROM t")
            .await
            .0,
        200
    );

    app.delete(
        &format!("/v1/organizations/{team}/databases/leaving"),
        &app.admin_token,
    )
    .await
    .expect(200);
    assert_eq!(execute(&app, &new_url, &token, "SELECT 1").await.0, 404);
}

#[tokio::test]
async fn deleted_databases_are_restorable_on_paid_plans() {
    let app = app!();
    // On the free plan a delete is final.
    let url = create(&app, "gone", json!({})).await;
    app.delete("/v1/databases/gone", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(
        app.get("/v1/deleted-databases", &app.admin_token)
            .await
            .expect(200),
        json!({"databases": []})
    );
    let _ = url;

    let reply = app
        .post(
            "/v1/admin/organizations/admin/plan",
            &app.admin_token,
            json!({"plan": "platinum"}),
        )
        .await;
    assert_eq!(reply.status, 400);
    let set = app
        .post(
            "/v1/admin/organizations/admin/plan",
            &app.admin_token,
            json!({"plan": "scaler"}),
        )
        .await
        .expect(200);
    assert_eq!(set["organization"]["plan_id"], "scaler");
    assert_eq!(set["organization"]["restore_enabled"], true);

    let url = create(&app, "precious", json!({})).await;
    let db_token = token(&app, "/v1/databases/precious", "").await;
    execute(&app, &url, &db_token, "CREATE TABLE t (v)").await;
    execute(&app, &url, &db_token, "INSERT INTO t VALUES ('still here')").await;
    let id = app
        .get("/v1/databases/precious", &app.admin_token)
        .await
        .expect(200)["database"]["DbId"]
        .as_str()
        .unwrap()
        .to_string();
    app.delete("/v1/databases/precious", &app.admin_token)
        .await
        .expect(200);

    assert_eq!(
        app.get("/v1/databases/precious", &app.admin_token)
            .await
            .status,
        404
    );
    // Its hostname no longer answers.
    assert_eq!(
        execute(&app, &url, &db_token, "SELECT * FROM t").await.0,
        404
    );

    let deleted = app
        .get("/v1/deleted-databases", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(deleted["databases"][0]["Name"], "precious");
    assert_eq!(deleted["databases"][0]["DbId"], id.as_str());
    assert!(
        deleted["databases"][0]["restorable_until"]
            .as_str()
            .unwrap()
            > deleted["databases"][0]["deleted_at"].as_str().unwrap()
    );

    // Its name is free meanwhile; while taken, the restore is refused.
    create(&app, "precious", json!({})).await;
    let reply = app
        .post(
            &format!("/v1/deleted-databases/{id}/restore"),
            &app.admin_token,
            json!({}),
        )
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (409, "database_already_exists")
    );
    // The stand-in is deleted too (restorable in its turn), and the original comes back.
    app.delete("/v1/databases/precious", &app.admin_token)
        .await
        .expect(200);
    let restored = app
        .post(
            &format!("/v1/deleted-databases/{id}/restore"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(restored["database"]["DbId"], id.as_str());
    let (_, result) = execute(&app, &url, &db_token, "SELECT v FROM t").await;
    assert_eq!(result["rows"][0][0]["value"], "still here");
    assert_eq!(
        app.post(
            &format!("/v1/deleted-databases/{id}/restore"),
            &app.admin_token,
            json!({})
        )
        .await
        .status,
        404
    );
    assert_eq!(
        app.post(
            "/v1/deleted-databases/nope/restore",
            &app.admin_token,
            json!({})
        )
        .await
        .status,
        404
    );
}

/// Runs a pipeline of statements; returns the Hrana results.
async fn pipeline(app: &TestApp, url: &str, token: &str, statements: &[&str]) -> Vec<Value> {
    let mut requests: Vec<Value> = statements
        .iter()
        .map(|sql| json!({"type": "execute", "stmt": {"sql": sql}}))
        .collect();
    requests.push(json!({"type": "close"}));
    let response = app
        .client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({"requests": requests}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["results"].as_array().unwrap()[..statements.len()].to_vec()
}

#[tokio::test]
async fn usage_reports_exactly_what_the_statements_did() {
    let app = app!();
    let url = create(&app, "metered", json!({})).await;
    let token = token(&app, "/v1/databases/metered", "").await;
    let mut statements = vec!["CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)".to_string()];
    for i in 0..50 {
        statements.push(format!("INSERT INTO t (v) VALUES ('row {i}')"));
    }
    for id in [1, 10, 25] {
        statements.push(format!("SELECT v FROM t WHERE id = {id}"));
    }
    statements.push("SELECT count(*) FROM t WHERE v LIKE '%9'".to_string());
    let texts: Vec<&str> = statements.iter().map(String::as_str).collect();
    let results = pipeline(&app, &url, &token, &texts).await;

    // Each statement reports its engine counters; usage is their sum, a statement that
    // touched no row counting one read (as sqld bills).
    let (mut read, mut written) = (0u64, 0u64);
    for result in &results {
        assert_eq!(result["type"], "ok", "{result}");
        let stats = &result["response"]["result"];
        let (r, w) = (
            stats["rows_read"].as_u64().unwrap(),
            stats["rows_written"].as_u64().unwrap(),
        );
        read += if r == 0 && w == 0 { 1 } else { r };
        written += w;
    }
    // The known workload: 50 rows written by the inserts (and the schema row), three point
    // reads of one row each, a full scan of 50 rows.
    assert!(written >= 50, "{written}");
    let point_reads: Vec<u64> = results[51..54]
        .iter()
        .map(|r| r["response"]["result"]["rows_read"].as_u64().unwrap())
        .collect();
    assert_eq!(point_reads, vec![1, 1, 1]);
    assert_eq!(results[54]["response"]["result"]["rows_read"], 50);

    let usage = app
        .get("/v1/databases/metered/usage", &app.admin_token)
        .await
        .expect(200)["database"]
        .clone();
    assert_eq!(usage["total"]["rows_read"], read);
    assert_eq!(usage["total"]["rows_written"], written);
    assert_eq!(usage["usage"], usage["total"], "both aggregate keys");
    assert_eq!(usage["instances"][0]["usage"], usage["total"]);
    let storage = usage["total"]["storage_bytes"].as_u64().unwrap();
    assert!(storage >= 8192, "{storage}");
    assert_eq!(usage["total"]["bytes_synced"], 0);

    // Reading usage costs nothing, and asking again counts nothing twice.
    let again = app
        .get("/v1/databases/metered/usage", &app.admin_token)
        .await
        .expect(200)["database"]
        .clone();
    assert_eq!(again["total"]["rows_read"], read);

    // An export counts as bytes synced.
    let export = app
        .client
        .get(format!("{url}export/1"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let exported = export.bytes().await.unwrap().len() as u64;
    let after = app
        .get("/v1/databases/metered/usage", &app.admin_token)
        .await
        .expect(200)["database"]
        .clone();
    assert_eq!(after["total"]["bytes_synced"], exported);

    // A period before the database existed has nothing; bad bounds say which.
    let past = app
        .get(
            "/v1/databases/metered/usage?from=2020-01-01T00:00:00Z&to=2020-02-01T00:00:00Z",
            &app.admin_token,
        )
        .await
        .expect(200);
    assert_eq!(past["database"]["total"]["rows_read"], 0);
    let reply = app
        .get(
            "/v1/databases/metered/usage?from=2023-12-12T00:00:00",
            &app.admin_token,
        )
        .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.body["error"]
            .as_str()
            .unwrap()
            .starts_with("invalid from parameter"),
        "{}",
        reply.body
    );
    let reply = app
        .get("/v1/databases/metered/usage?to=yesterday", &app.admin_token)
        .await;
    assert!(reply.body["error"]
        .as_str()
        .unwrap()
        .starts_with("invalid to parameter"));

    // The heaviest statements: the full scan first, texts without their arguments.
    let stats = app
        .get("/v1/databases/metered/stats", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(
        stats["top_queries"][0]["query"],
        "SELECT count(*) FROM t WHERE v LIKE '%9'"
    );
    assert_eq!(stats["top_queries"][0]["rows_read"], 50);
    let bare = app
        .get("/v1/databases/metered/usage/queries", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(bare, stats["top_queries"]);
    assert!(stats["top_queries"].as_array().unwrap().len() <= 10);

    // The organization's cycle: its consumption, and its plan's quotas beside it.
    let org = app.get("/v1/usage", &app.admin_token).await.expect(200)["organization"].clone();
    assert_eq!(org["usage"]["rows_read"], read);
    assert_eq!(org["usage"]["rows_written"], written);
    assert_eq!(org["usage"]["databases"], 1);
    assert_eq!(org["usage"]["groups"], 1);
    assert_eq!(org["usage"]["locations"], 1);
    assert_eq!(org["usage"]["bytes_synced"], exported);
    assert_eq!(org["plan"], "starter");
    assert!(org["quotas"].is_object());
    assert_eq!(org["databases"][0]["uuid"], usage["uuid"]);
    assert!(org["from"].as_str().unwrap().ends_with("-01T00:00:00Z"));
}

#[tokio::test]
async fn plan_quotas_are_enforced() {
    use atoll_control::ControlConfig;
    use atoll_types::usage::PlanQuotas;
    let tight = PlanQuotas {
        databases: Some(2),
        groups: Some(2),
        locations: Some(1),
        rows_written: Some(30),
        ..PlanQuotas::default()
    };
    let mut config = ControlConfig::default();
    config.plans.insert("starter".into(), tight);
    let app = match TestApp::start_with(config).await {
        Some(app) => app,
        None => return,
    };

    // Creating past a quota is refused with 402 and a stable code; an upload-created database counts.
    create(&app, "one", json!({"seed": {"type": "database_upload"}})).await;
    let url = create(&app, "two", json!({})).await;
    let reply = app
        .post("/v1/databases", &app.admin_token, json!({"name": "three"}))
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (402, "quota_exceeded"),
        "{}",
        reply.body
    );
    assert!(reply.body["error"]
        .as_str()
        .unwrap()
        .contains("allows 2 databases"));
    app.group("admin", &app.admin_token, "second").await;
    let reply = app
        .post(
            "/v1/groups",
            &app.admin_token,
            json!({"name": "third", "location": "local"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (402, "quota_exceeded"));
    let reply = app
        .post(
            "/v1/groups/second/locations/aws-us-east-1",
            &app.admin_token,
            json!({}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (402, "quota_exceeded"));

    // Past the monthly rows-written quota, statements are BLOCKED until overages are on.
    let token = token(&app, "/v1/databases/two", "").await;
    execute(&app, &url, &token, "CREATE TABLE t (x)").await;
    for i in 0..40 {
        execute(&app, &url, &token, &format!("INSERT INTO t VALUES ({i})")).await;
    }
    let org = app.get("/v1/usage", &app.admin_token).await.expect(200)["organization"].clone();
    assert!(org["usage"]["rows_written"].as_u64().unwrap() > 30);
    let flags = app
        .get("/v1/organizations/admin", &app.admin_token)
        .await
        .expect(200)["organization"]
        .clone();
    assert_eq!(
        (
            flags["blocked_reads"].as_bool(),
            flags["blocked_writes"].as_bool()
        ),
        (Some(true), Some(true)),
        "{org}"
    );
    let (_, result) = execute(&app, &url, &token, "INSERT INTO t VALUES (99)").await;
    assert_eq!(result["error"]["code"], "BLOCKED", "{result}");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("quota"),
        "{result}"
    );

    app.patch(
        "/v1/organizations/admin",
        &app.admin_token,
        json!({"overages": true}),
    )
    .await
    .expect(200);
    app.get("/v1/usage", &app.admin_token).await.expect(200);
    let (status, result) = execute(&app, &url, &token, "INSERT INTO t VALUES (100)").await;
    assert_eq!(status, 200);
    assert_eq!(result["affected_row_count"], 1, "{result}");
}

fn rfc3339(millis: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(millis / 1000)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// Usage over time (the `granularity` extension): hours and days of one database and of
/// its organization, with the sizes the collector sampled, against what was written.
#[tokio::test]
async fn storage_has_a_history_by_hour_and_by_day() {
    let app = app!();
    let url = create(&app, "sized", json!({})).await;
    let token = token(&app, "/v1/databases/sized", "").await;
    // Without the extension's parameter the answer is Turso's, with no history.
    let plain = app
        .get("/v1/databases/sized/usage", &app.admin_token)
        .await
        .expect(200);
    assert!(plain["database"].get("history").is_none(), "{plain}");
    let plain_org = app.get("/v1/usage", &app.admin_token).await.expect(200);
    assert!(plain_org["organization"].get("history").is_none());

    let written = pipeline(
        &app,
        &url,
        &token,
        &[
            "CREATE TABLE blobs (b BLOB)",
            "INSERT INTO blobs VALUES (randomblob(200000))",
        ],
    )
    .await;
    assert!(written.iter().all(|r| r["type"] == "ok"), "{written:?}");

    let hour = 3_600_000;
    let now = atoll_meta::now_millis();
    let this_hour = atoll_meta::hour_bucket(now);
    let from = this_hour - 3 * hour;
    let to = this_hour + hour;
    let history = |path: &str| {
        let path = path.to_string();
        let app = &app;
        async move { app.get(&path, &app.admin_token).await.expect(200) }
    };
    let body = history(&format!(
        "/v1/databases/sized/usage?granularity=hour&from={}&to={}",
        rfc3339(from),
        rfc3339(to)
    ))
    .await;
    let database = &body["database"];
    let hours = database["history"].as_array().unwrap().clone();
    assert_eq!(hours.len(), 4, "{hours:?}");
    assert_eq!(hours[0]["start"], rfc3339(from));
    assert_eq!(hours[3]["end"], rfc3339(to));
    // The database did not exist three hours ago: nothing measured then.
    assert_eq!(hours[0]["storage_bytes"], Value::Null);
    // The write was measured after it ran: this hour holds its size.
    let now_bytes = hours[3]["storage_bytes"].as_u64().unwrap();
    assert!(now_bytes >= 200_000, "{now_bytes}");
    assert_eq!(
        hours
            .iter()
            .map(|h| h["rows_written"].as_u64().unwrap())
            .sum::<u64>(),
        database["total"]["rows_written"].as_u64().unwrap()
    );

    // Two hours ago the database was smaller (as if sampled then): the history says so.
    let record = app
        .state
        .store
        .database_by_id(database["uuid"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    app.state
        .store
        .record_storage_samples(
            this_hour - 2 * hour + 60_000,
            vec![atoll_meta::StorageSample {
                database_id: record.id.clone(),
                org_id: record.org_id.clone(),
                storage_bytes: 4096,
            }],
        )
        .await
        .unwrap();
    let body = history(&format!(
        "/v1/databases/sized/usage?granularity=hour&from={}&to={}",
        rfc3339(from),
        rfc3339(to)
    ))
    .await;
    let sizes: Vec<Value> = body["database"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["storage_bytes"].clone())
        .collect();
    assert_eq!(sizes[1], json!(4096));
    assert_eq!(sizes[2], Value::Null);

    // Days: the largest size of the day.
    let day = 24 * hour;
    let today = now - now.rem_euclid(day);
    let body = history(&format!(
        "/v1/databases/sized/usage?granularity=day&from={}&to={}",
        rfc3339(today - day),
        rfc3339(today + day)
    ))
    .await;
    let days = body["database"]["history"].as_array().unwrap();
    assert_eq!(days.len(), 2);
    assert!(days[1]["storage_bytes"].as_u64().unwrap() >= 200_000);

    // The organization: its databases' sizes summed (it has this one only).
    let body = history(&format!(
        "/v1/usage?granularity=hour&from={}&to={}",
        rfc3339(from),
        rfc3339(to)
    ))
    .await;
    let org = &body["organization"];
    let org_hours = org["history"].as_array().unwrap();
    assert_eq!(org_hours.len(), 4);
    assert_eq!(org_hours[1]["storage_bytes"], json!(4096));
    assert!(org_hours[3]["storage_bytes"].as_u64().unwrap() >= 200_000);
    // The totals stay the billing cycle's whatever `from`/`to` say.
    assert_eq!(org["from"], plain_org["organization"]["from"]);

    // Bad parameters say which.
    for (query, says) in [
        ("granularity=week", "invalid granularity parameter"),
        (
            "granularity=hour&from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            "invalid granularity parameter",
        ),
        ("granularity=day&from=yesterday", "invalid from parameter"),
    ] {
        for path in ["/v1/databases/sized/usage", "/v1/usage"] {
            let reply = app.get(&format!("{path}?{query}"), &app.admin_token).await;
            assert_eq!(reply.status, 400, "{path}?{query}");
            assert!(
                reply.body["error"].as_str().unwrap().starts_with(says),
                "{path}?{query}: {}",
                reply.body
            );
        }
    }
}
