//! Legacy per-database instances: `POST …/databases/{db}/instances`,
//! `DELETE …/instances/{instance}`, `GET …/instances/{instance}/wait`.

use crate::harness::unique;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn legacy_instances_say_to_use_the_group() {
    let app = app!();
    let db = app
        .database("/v1", &app.admin_token, &unique("db"), "default")
        .await;
    let base = format!("/v1/databases/{db}/instances");

    // `turso db replicate`: a 4xx naming the group command, never a 5xx (on which the
    // CLI would offer other locations).
    let reply = app
        .post(
            &base,
            &app.admin_token,
            json!({"Location": "aws-eu-west-1"}),
        )
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (400, "not_available_on_self_hosted")
    );
    let message = reply.body["error"].as_str().unwrap();
    assert!(
        message.contains("turso group locations add default aws-eu-west-1"),
        "{message}"
    );

    // `turso db replicate --wait`: the listed instance is ready; another is the CLI's 404.
    app.get(&format!("{base}/local/wait"), &app.admin_token)
        .await
        .expect(200);
    let reply = app
        .get(&format!("{base}/nowhere/wait"), &app.admin_token)
        .await;
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.body["error"],
        format!("could not find instance nowhere of database {db}")
    );

    // `turso db destroy --instance`.
    let reply = app
        .call(
            Method::DELETE,
            &format!("{base}/local"),
            Some(&app.admin_token),
            None,
        )
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (400, "not_available_on_self_hosted")
    );
    let reply = app
        .call(
            Method::DELETE,
            &format!("{base}/nowhere"),
            Some(&app.admin_token),
            None,
        )
        .await;
    assert_eq!(
        reply.body["error"],
        format!("could not find instance nowhere of database {db}")
    );
    // The database is untouched.
    app.get(&format!("/v1/databases/{db}"), &app.admin_token)
        .await
        .expect(200);
}
