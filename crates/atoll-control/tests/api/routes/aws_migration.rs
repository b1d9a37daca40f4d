//! `…/groups/{group}/aws/migration/info`, `…/start`, `…/abort`.

use serde_json::json;

#[tokio::test]
async fn a_self_hosted_group_never_migrates() {
    let app = app!();
    for base in [
        "/v1/groups/default/aws/migration",
        "/v1/organizations/admin/groups/default/aws/migration",
    ] {
        let info = app
            .get(&format!("{base}/info"), &app.admin_token)
            .await
            .expect(200);
        assert_eq!(info["status"], "none");
        let reply = app
            .post(&format!("{base}/start"), &app.admin_token, json!({}))
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "not_available_on_self_hosted")
        );
        app.post(&format!("{base}/abort"), &app.admin_token, json!({}))
            .await
            .expect(200);
    }
    let reply = app
        .get("/v1/groups/nope/aws/migration/info", &app.admin_token)
        .await;
    assert_eq!((reply.status, reply.code()), (404, "group_not_found"));
}
