//! Finding 13 — dumps uploaded to `…/databases/dumps` expire and count against a
//! per-organization allowance, so no tenant can grow the metadata store without bound.

use crate::harness::{test_config, TestApp};
use serde_json::json;
use std::time::Duration;

const DUMP: &str = "CREATE TABLE t (x);\nINSERT INTO t VALUES (1);\n";

async fn upload(app: &TestApp, token: &str, sql: &str) -> crate::harness::Reply {
    app.post_file("/v1/databases/dumps", token, sql).await
}

async fn create_from(app: &TestApp, name: &str, url: &str) -> crate::harness::Reply {
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": name, "seed": {"type": "dump", "url": url}}),
    )
    .await
}

#[tokio::test]
async fn dumps_expire_and_the_lifecycle_job_deletes_them() {
    let app = app!();
    let url = upload(&app, &app.admin_token, DUMP).await.expect(200)["dump_url"]
        .as_str()
        .unwrap()
        .to_string();
    // A run within the lifetime keeps it.
    let now = atoll_meta::now_millis();
    let report = atoll_control::jobs::run_once(&app.state, "test", now)
        .await
        .unwrap();
    assert_eq!(report.expired_dumps, 0);
    // A day later it is gone, and a create from it says why.
    let day_later = now + 24 * 3600 * 1000 + 1000;
    let report = atoll_control::jobs::run_once(&app.state, "test", day_later)
        .await
        .unwrap();
    assert_eq!(report.expired_dumps, 1);
    let reply = create_from(&app, "too-late", &url).await;
    assert_eq!(
        (reply.status, reply.code()),
        (400, "dump_not_found"),
        "{}",
        reply.body
    );
    let message = reply.body["error"].as_str().unwrap();
    assert!(message.contains("kept 24 h after upload"), "{message}");
}

#[tokio::test]
async fn a_dump_past_its_lifetime_is_refused_before_the_job_runs() {
    // Not zero: the lifecycle job's first run, at start, may come after the upload on a
    // loaded machine and would delete a dump of no lifetime before the create sees it.
    let lifetime = Duration::from_secs(2);
    let Some(app) = TestApp::start_with(atoll_control::ControlConfig {
        dump_lifetime: lifetime,
        ..test_config()
    })
    .await
    else {
        return;
    };
    let url = upload(&app, &app.admin_token, DUMP).await.expect(200)["dump_url"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(lifetime + Duration::from_millis(100)).await;
    let reply = create_from(&app, "expired", &url).await;
    assert_eq!(
        (reply.status, reply.code()),
        (400, "dump_expired"),
        "{}",
        reply.body
    );
    assert!(reply.body["error"]
        .as_str()
        .unwrap()
        .contains("upload it again"));
}

#[tokio::test]
async fn an_organization_holds_a_bounded_number_and_size_of_dumps() {
    let Some(app) = TestApp::start_with(atoll_control::ControlConfig {
        max_dumps_per_org: 2,
        max_dump_bytes_per_org: 1000,
        ..test_config()
    })
    .await
    else {
        return;
    };
    let first = upload(&app, &app.admin_token, DUMP).await.expect(200);
    upload(&app, &app.admin_token, DUMP).await.expect(200);
    let third = upload(&app, &app.admin_token, DUMP).await;
    assert_eq!(
        (third.status, third.code()),
        (429, "too_many_requests"),
        "{}",
        third.body
    );
    // The wait is until the oldest expires: within a day.
    let wait = third.retry_after().expect("Retry-After");
    assert!((1..=24 * 3600).contains(&wait), "{wait}");

    // Another organization has its own allowance.
    let other = app.user(&crate::harness::unique("other")).await;
    upload(&app, &other, DUMP).await.expect(200);

    // A create consumes its dump, which frees the allowance.
    let url = first["dump_url"].as_str().unwrap();
    create_from(&app, "seeded", url).await.expect(200);
    let reply = create_from(&app, "seeded-twice", url).await;
    assert_eq!((reply.status, reply.code()), (400, "dump_not_found"));
    upload(&app, &app.admin_token, DUMP).await.expect(200);

    // Bytes count too: a dump over the whole allowance is too large (413), one that does
    // not fit beside the others waits (429).
    let big = format!("-- {}\nSELECT 1;\n", "x".repeat(1000));
    let reply = upload(&app, &other, &big).await;
    assert_eq!(
        (reply.status, reply.code()),
        (413, "payload_too_large"),
        "{}",
        reply.body
    );
    let half = format!("-- {}\nSELECT 1;\n", "x".repeat(600));
    upload(&app, &other, &half).await.expect(200);
    let reply = upload(&app, &other, &half).await;
    assert_eq!(
        (reply.status, reply.code()),
        (429, "too_many_requests"),
        "{}",
        reply.body
    );
}
