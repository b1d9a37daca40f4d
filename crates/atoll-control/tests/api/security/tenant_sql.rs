//! Tenant SQL that reaches the platform through the API: dump seeds (finding 1) and
//! engine-wide pragmas (finding 2).

use super::{http_url, mint, pipeline};
use crate::harness::{unique, TestApp};
use serde_json::{json, Value};

/// Runs one statement; answers its result (`ok` or `error`).
async fn run(app: &TestApp, url: &str, token: &str, sql: &str) -> Value {
    let (status, body) = pipeline(app, url, token, &[sql]).await;
    assert_eq!(status, 200, "{sql}: {body}");
    body["results"][0].clone()
}

/// Finding 1: a plain user's dump seed attached other tenants' files and `meta.db`, and
/// committed out of its transaction.
#[tokio::test]
async fn dump_seeds_cannot_reach_files_or_escape_their_transaction() {
    let app = app!();
    let mallory = unique("mallory");
    let token = app.user(&mallory).await;
    let attacks = [
        "ATTACH DATABASE '/etc/hostname' AS v; CREATE TABLE loot AS SELECT * FROM v.sqlite_master;",
        "ATTACH 'meta.db' AS m; UPDATE m.users SET is_admin = 1;",
        "ATTACH 'file:/etc/hostname?mode=ro' AS v;",
        "PRAGMA hard_heap_limit=100000;",
        "CREATE TABLE a(x); /* */ COMMIT; CREATE TABLE b(x); BEGIN; SELECT no_such_function();",
    ];
    for attack in attacks {
        let uploaded = app
            .post_file(
                &format!("/v1/organizations/{mallory}/databases/dumps"),
                &token,
                attack,
            )
            .await
            .expect(200);
        let name = unique("loot");
        let reply = app
            .post(
                &format!("/v1/organizations/{mallory}/databases"),
                &token,
                json!({"name": name, "group": "default", "seed": {"type": "dump", "url": uploaded["dump_url"]}}),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_seed"),
            "{attack}: {}",
            reply.body
        );
        let gone = app
            .get(
                &format!("/v1/organizations/{mallory}/databases/{name}"),
                &token,
            )
            .await;
        assert_eq!(gone.status, 404, "a refused dump left {name}: {attack}");
    }
    // The attacker is still nobody special.
    let admin_only = app
        .post(
            "/v1/admin/users",
            &token,
            json!({"username": "mallory-2", "password": "a-long-enough-password"}),
        )
        .await;
    assert_eq!(admin_only.status, 403, "{}", admin_only.body);
}

/// Finding 2: `PRAGMA hard_heap_limit` from a read-only token took every tenant and the
/// control plane (logins, listings, creates) down until restart.
#[tokio::test]
async fn a_read_only_token_cannot_take_the_platform_down() {
    let app = app!();
    let eve = unique("eve");
    let token = app.user(&eve).await;
    let prefix = format!("/v1/organizations/{eve}");
    let name = app
        .database(&prefix, &token, &unique("db"), "default")
        .await;
    let url = http_url(&app, &prefix, &name, &token).await;
    let reader = app
        .post(
            &format!("{prefix}/databases/{name}/auth/tokens?authorization=read-only"),
            &token,
            json!({}),
        )
        .await
        .expect(200)["jwt"]
        .as_str()
        .unwrap()
        .to_string();
    for pragma in [
        "PRAGMA hard_heap_limit=100000",
        "PRAGMA soft_heap_limit=100000",
        "PRAGMA temp_store_directory='/tmp'",
    ] {
        let result = run(&app, &url, &reader, pragma).await;
        assert_eq!(result["error"]["code"], "SQLITE_AUTH", "{pragma}: {result}");
    }
    // Everyone else carries on: a login, a listing, a create, a large write.
    app.login(&eve).await;
    app.get(&format!("{prefix}/databases"), &token)
        .await
        .expect(200);
    let other = app
        .database(&prefix, &token, &unique("db"), "default")
        .await;
    let other_url = http_url(&app, &prefix, &other, &token).await;
    let writer = mint(
        &app,
        &format!("{prefix}/databases/{other}"),
        &token,
        json!({}),
    )
    .await;
    let created = run(
        &app,
        &other_url,
        &writer,
        "CREATE TABLE big AS SELECT randomblob(4000000) AS b",
    )
    .await;
    assert_eq!(created["type"], "ok", "{created}");
}
