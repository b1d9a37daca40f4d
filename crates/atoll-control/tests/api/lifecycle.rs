//! The lifecycle jobs of the spec's States and transitions, with the clock moved.

use crate::harness::TestApp;
use atoll_control::jobs::{
    run_once, ARCHIVE_AFTER_MS, LEASE_MS, RESTORE_WINDOW_MS, UNFINISHED_UPLOAD_AFTER_MS,
};
use serde_json::{json, Value};

async fn create_with_token(app: &TestApp, name: &str, group: &str) -> (String, String) {
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": name, "group": group}),
    )
    .await
    .expect(200);
    let url = app
        .get(&format!("/v1/databases/{name}"), &app.admin_token)
        .await
        .expect(200)["database"]["http_url"]
        .as_str()
        .unwrap()
        .to_string();
    let jwt = app
        .post(
            &format!("/v1/databases/{name}/auth/tokens"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200)["jwt"]
        .as_str()
        .unwrap()
        .to_string();
    (url, jwt)
}

async fn select_one(app: &TestApp, url: &str, jwt: &str) -> (u16, Value) {
    let body =
        json!({"requests": [{"type": "execute", "stmt": {"sql": "SELECT 1"}}, {"type": "close"}]});
    let response = app
        .client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(jwt)
        .json(&body)
        .send()
        .await
        .unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn idle_free_groups_are_archived_and_come_back() {
    let app = app!();
    app.group("admin", &app.admin_token, "sleepy").await;
    let (url, jwt) = create_with_token(&app, "napping", "sleepy").await;
    assert_eq!(select_one(&app, &url, &jwt).await.0, 200);
    let now = atoll_meta::now_millis();

    // Nine days later nothing happens; past ten, the free group is archived.
    let report = run_once(&app.state, "test", now + ARCHIVE_AFTER_MS - 86_400_000)
        .await
        .unwrap();
    assert!(
        report.ran && report.archived_groups.is_empty(),
        "{report:?}"
    );
    let report = run_once(&app.state, "test", now + ARCHIVE_AFTER_MS + 60_000)
        .await
        .unwrap();
    assert_eq!(
        report.archived_groups.len(),
        2,
        "both the idle groups of the free organization: {report:?}"
    );
    let group = app
        .get("/v1/groups/sleepy", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(group["group"]["archived"], true);
    let db = app
        .get("/v1/databases/napping", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(db["database"]["archived"], true);
    let (status, body) = select_one(&app, &url, &jwt).await;
    assert_eq!(status, 409);
    assert!(
        body["error"].as_str().unwrap().contains("unarchive"),
        "the error names the way out: {body}"
    );

    let back = app
        .post("/v1/groups/sleepy/unarchive", &app.admin_token, json!({}))
        .await
        .expect(200);
    assert_eq!(back["group"]["archived"], false);
    assert_eq!(select_one(&app, &url, &jwt).await.0, 200);

    // Paid plans are never archived.
    app.post(
        "/v1/admin/organizations/admin/plan",
        &app.admin_token,
        json!({"plan": "scaler"}),
    )
    .await
    .expect(200);
    let report = run_once(&app.state, "test", now + 3 * ARCHIVE_AFTER_MS)
        .await
        .unwrap();
    assert!(report.archived_groups.is_empty(), "{report:?}");
}

#[tokio::test]
async fn deleted_databases_are_purged_after_their_window() {
    let app = app!();
    app.post(
        "/v1/admin/organizations/admin/plan",
        &app.admin_token,
        json!({"plan": "scaler"}),
    )
    .await
    .expect(200);
    create_with_token(&app, "short-lived", "default").await;
    let id = app
        .get("/v1/databases/short-lived", &app.admin_token)
        .await
        .expect(200)["database"]["DbId"]
        .as_str()
        .unwrap()
        .to_string();
    app.delete("/v1/databases/short-lived", &app.admin_token)
        .await
        .expect(200);
    let now = atoll_meta::now_millis();

    let report = run_once(&app.state, "test", now + RESTORE_WINDOW_MS - 60_000)
        .await
        .unwrap();
    assert!(report.purged_databases.is_empty());
    assert_eq!(
        app.get("/v1/deleted-databases", &app.admin_token)
            .await
            .expect(200)["databases"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let report = run_once(&app.state, "test", now + RESTORE_WINDOW_MS + 60_000)
        .await
        .unwrap();
    assert_eq!(report.purged_databases, vec![id.clone()]);
    assert_eq!(
        app.get("/v1/deleted-databases", &app.admin_token)
            .await
            .expect(200)["databases"],
        json!([])
    );
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
}

#[tokio::test]
async fn unfinished_uploads_are_reported_and_can_be_cleaned_up() {
    let app = app!();
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "never-uploaded", "seed": {"type": "database_upload"}}),
    )
    .await
    .expect(200);
    let id = app
        .get("/v1/databases/never-uploaded", &app.admin_token)
        .await
        .expect(200)["database"]["DbId"]
        .as_str()
        .unwrap()
        .to_string();
    let now = atoll_meta::now_millis();
    assert!(run_once(&app.state, "test", now)
        .await
        .unwrap()
        .unfinished_uploads
        .is_empty());
    let report = run_once(
        &app.state,
        "test",
        now + UNFINISHED_UPLOAD_AFTER_MS + 60_000,
    )
    .await
    .unwrap();
    assert_eq!(report.unfinished_uploads, vec![id]);
    app.delete("/v1/databases/never-uploaded", &app.admin_token)
        .await
        .expect(200);
    assert!(run_once(
        &app.state,
        "test",
        now + UNFINISHED_UPLOAD_AFTER_MS + 60_000
    )
    .await
    .unwrap()
    .unfinished_uploads
    .is_empty());
}

#[tokio::test]
async fn one_replica_at_a_time() {
    let app = app!();
    // The server's own lifecycle job ran when it started and may hold the lease until
    // then (CI once saw it win that race): the replicas of this test start after it, with a
    // minute to spare (on a loaded machine the job took the lease after this test read
    // the clock, and held it a moment past `now + LEASE_MS`).
    let now = atoll_meta::now_millis() + LEASE_MS + 60_000;
    assert!(run_once(&app.state, "replica-a", now).await.unwrap().ran);
    assert!(
        !run_once(&app.state, "replica-b", now + 1000)
            .await
            .unwrap()
            .ran,
        "a holds the lease"
    );
    assert!(
        run_once(&app.state, "replica-a", now + 2000)
            .await
            .unwrap()
            .ran,
        "a renews it"
    );
    assert!(
        run_once(&app.state, "replica-b", now + 10 * 60_000)
            .await
            .unwrap()
            .ran,
        "expired: b takes over"
    );
}
