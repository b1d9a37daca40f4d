//! `…/databases/{db}/backups`, `…/databases/{db}/restore`, and the point-in-time seed of
//! `POST …/databases` (`seed: {type: "database", name, timestamp}`): through the API, with
//! the rows checked on the data plane.

use crate::harness::TestApp;
use serde_json::{json, Value};

async fn http_url(app: &TestApp, name: &str) -> String {
    let got = app
        .get(&format!("/v1/databases/{name}"), &app.admin_token)
        .await
        .expect(200);
    got["database"]["http_url"].as_str().unwrap().to_string()
}

async fn db_token(app: &TestApp, name: &str) -> String {
    let body = app
        .post(
            &format!("/v1/databases/{name}/auth/tokens"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    body["jwt"].as_str().unwrap().to_string()
}

async fn run(app: &TestApp, name: &str, sql: &str) -> Value {
    let url = http_url(app, name).await;
    let token = db_token(app, name).await;
    let body = json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]});
    let response = app
        .client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["results"][0]["type"], "ok", "{body}");
    body["results"][0]["response"]["result"].clone()
}

async fn count(app: &TestApp, name: &str) -> i64 {
    let result = run(app, name, "SELECT count(*) FROM t").await;
    result["rows"][0][0]["value"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn now() -> String {
    // Millisecond precision: restores are asked for to the millisecond.
    let t = time::OffsetDateTime::now_utc();
    let t = t
        .replace_nanosecond(t.millisecond() as u32 * 1_000_000)
        .unwrap();
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn instant(rfc3339: &str) -> time::OffsetDateTime {
    time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339).unwrap()
}

async fn pause() {
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
}

#[tokio::test]
async fn point_in_time_copies_and_restores_in_place_through_the_api() {
    let app = app!();
    app.post("/v1/databases", &app.admin_token, json!({"name": "ledger"}))
        .await
        .expect(200);
    run(&app, "ledger", "CREATE TABLE t (x)").await;
    run(&app, "ledger", "INSERT INTO t VALUES (1), (2)").await;
    pause().await;
    let two = now();
    pause().await;
    run(&app, "ledger", "INSERT INTO t VALUES (3)").await;
    pause().await;
    let three = now();
    pause().await;
    run(&app, "ledger", "DELETE FROM t").await;

    // A copy as of each instant (Turso's seed), even within the shipping lag.
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "ledger-two", "seed": {"type": "database", "name": "ledger", "timestamp": two}}),
    )
    .await
    .expect(200);
    assert_eq!(count(&app, "ledger-two").await, 2);
    let copy = app
        .get("/v1/databases/ledger-two", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(copy["database"]["parent"]["name"], "ledger", "{copy}");

    // The window, the generations, the lag.
    let backups = app
        .get("/v1/databases/ledger/backups", &app.admin_token)
        .await
        .expect(200);
    assert!(backups["storage"].as_str().unwrap().starts_with("file://"));
    assert_eq!(backups["durability"], "lag");
    assert!(!backups["generations"].as_array().unwrap().is_empty());
    // As instants, not as text: RFC 3339 drops trailing zeros of the fraction, so
    // "…05.12Z" sorts after "…05.123Z" as a string.
    assert!(
        instant(backups["restorable_from"].as_str().unwrap()) <= instant(&two),
        "restorable from after {two}: {backups}"
    );
    assert!(backups["stored_bytes"].as_u64().unwrap() > 0);

    // Stats carry what object storage holds, and the lag.
    let stats = app
        .get("/v1/databases/ledger/stats", &app.admin_token)
        .await
        .expect(200);
    assert!(stats["backup_bytes"].as_u64().unwrap() > 0, "{stats}");
    assert!(stats["replication_lag"]["commits"].is_u64(), "{stats}");

    // In place: back to three rows, then undone (back to the present before the restore).
    pause().await;
    let before_restore = now();
    pause().await;
    let restored = app
        .post(
            "/v1/databases/ledger/restore",
            &app.admin_token,
            json!({"timestamp": three}),
        )
        .await
        .expect(200);
    assert!(restored["replication_index"].as_u64().unwrap() > 0);
    assert_eq!(count(&app, "ledger").await, 3);
    app.post(
        "/v1/databases/ledger/restore",
        &app.admin_token,
        json!({"timestamp": before_restore}),
    )
    .await
    .expect(200);
    assert_eq!(count(&app, "ledger").await, 0);

    // The audit log says who restored what.
    let audit = app
        .get("/v1/organizations/admin/audit-logs", &app.admin_token)
        .await;
    if audit.status == 200 {
        assert!(audit
            .body
            .to_string()
            .contains("restored database ledger in place"));
    }
}

#[tokio::test]
async fn a_database_can_ask_for_sync_durability_in_its_configuration() {
    let app = app!();
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "careful"}),
    )
    .await
    .expect(200);
    let config = app
        .get("/v1/databases/careful/configuration", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(config["durability"], "default");
    let changed = app
        .patch(
            "/v1/databases/careful/configuration",
            &app.admin_token,
            json!({"durability": "sync"}),
        )
        .await
        .expect(200);
    assert_eq!(changed["durability"], "sync");
    // The node acknowledges its commits only once stored: nothing waits after a write.
    run(&app, "careful", "CREATE TABLE t (x)").await;
    run(&app, "careful", "INSERT INTO t VALUES (1)").await;
    let backups = app
        .get("/v1/databases/careful/backups", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(backups["durability"], "sync", "{backups}");
    assert_eq!(backups["lag"]["commits"], 0, "{backups}");
    // Other settings leave it alone; `default` goes back to the node's.
    let changed = app
        .patch(
            "/v1/databases/careful/configuration",
            &app.admin_token,
            json!({"block_reads": false}),
        )
        .await
        .expect(200);
    assert_eq!(changed["durability"], "sync");
    let changed = app
        .patch(
            "/v1/databases/careful/configuration",
            &app.admin_token,
            json!({"durability": "default"}),
        )
        .await
        .expect(200);
    assert_eq!(changed["durability"], "default");
    let reply = app
        .patch(
            "/v1/databases/careful/configuration",
            &app.admin_token,
            json!({"durability": "eventually"}),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
}

#[tokio::test]
async fn restores_outside_the_window_or_malformed_are_refused_clearly() {
    let app = app!();
    app.post("/v1/databases", &app.admin_token, json!({"name": "young"}))
        .await
        .expect(200);
    let reply = app
        .post(
            "/v1/databases/young/restore",
            &app.admin_token,
            json!({"timestamp": "2020-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(
        reply.body.to_string().contains("restorable window"),
        "the message names the window: {}",
        reply.body
    );
    let reply = app
        .post(
            "/v1/databases/young/restore",
            &app.admin_token,
            json!({"timestamp": "last tuesday"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "invalid_request"));
    let reply = app
        .post("/v1/databases/young/restore", &app.admin_token, json!({}))
        .await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        app.get("/v1/databases/nope/backups", &app.admin_token)
            .await
            .status,
        404
    );
}
