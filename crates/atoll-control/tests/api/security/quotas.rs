//! A plan's database limit against a client that races it: creates sent all at once must
//! not all pass the count before any of them is stored (the count and the insert were two
//! store operations, and a burst of parallel creates went past the limit).

use crate::harness::TestApp;
use atoll_control::ControlConfig;
use atoll_types::usage::PlanQuotas;
use serde_json::json;

#[tokio::test]
async fn creates_sent_at_once_stop_at_the_database_limit() {
    let mut config = ControlConfig::default();
    config.plans.insert(
        "starter".into(),
        PlanQuotas {
            databases: Some(3),
            ..PlanQuotas::default()
        },
    );
    let Some(app) = TestApp::start_with(config).await else {
        return;
    };
    app.post("/v1/databases", &app.admin_token, json!({"name": "first"}))
        .await
        .expect(200);

    let names: Vec<String> = (0..10).map(|i| format!("burst-{i}")).collect();
    let replies = futures_util::future::join_all(
        names
            .iter()
            .map(|name| app.post("/v1/databases", &app.admin_token, json!({ "name": name }))),
    )
    .await;
    let mut statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 402, 402, 402, 402, 402, 402, 402, 402]);
    for reply in replies.iter().filter(|r| r.status == 402) {
        assert_eq!(reply.code(), "quota_exceeded", "{}", reply.body);
    }

    // Exactly the limit exists, in the store and on the node: the refused creates left
    // nothing behind.
    let listed = app.get("/v1/databases", &app.admin_token).await.expect(200);
    assert_eq!(listed["databases"].as_array().unwrap().len(), 3, "{listed}");
    assert_eq!(app.node.database_count(), 3);
}
