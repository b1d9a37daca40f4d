//! `/v2/organizations/{org}/invites…`, `/v1/organizations/{org}/invite(s)…`.

use crate::harness::unique;
use serde_json::json;

#[tokio::test]
async fn v2_invites_by_email_or_username() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let invites = format!("/v2/organizations/{team}/invites");
    let created = app
        .post(
            &invites,
            &app.admin_token,
            json!({"email": "iku@example.com", "role": "admin"}),
        )
        .await
        .expect(200);
    assert_eq!(
        created["invited"],
        json!({"email": "iku@example.com", "username": "", "role": "admin", "organization": team})
    );
    // Inviting again replaces the pending invite.
    app.post(
        &invites,
        &app.admin_token,
        json!({"email": "iku@example.com"}),
    )
    .await
    .expect(200);
    app.post(&invites, &app.admin_token, json!({"username": "someone"}))
        .await
        .expect(200);

    let list = app.get(&invites, &app.admin_token).await.expect(200)["invites"].clone();
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_eq!(list[0]["email"], "iku@example.com");
    assert_eq!(list[0]["role"], "member");
    assert!(list[0]["id"].is_i64() && list[0]["created_at"].as_str().unwrap().ends_with('Z'));

    assert_eq!(
        app.delete(&format!("{invites}/iku@example.com"), &app.admin_token)
            .await
            .expect(200),
        json!({})
    );
    let reply = app
        .delete(&format!("{invites}/iku@example.com"), &app.admin_token)
        .await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (404, Some("invite not found"))
    );
}

#[tokio::test]
async fn v1_invites_for_the_turso_cli() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.post(
        &format!("/v1/organizations/{team}/invite"),
        &app.admin_token,
        json!({"email": "a@example.com", "role": "viewer"}),
    )
    .await
    .expect(200);
    let list = app
        .get(
            &format!("/v1/organizations/{team}/invites"),
            &app.admin_token,
        )
        .await
        .expect(200);
    let invite = &list["invites"][0];
    assert_eq!(
        (
            invite["Email"].as_str(),
            invite["Role"].as_str(),
            invite["Accepted"].as_bool()
        ),
        (Some("a@example.com"), Some("viewer"), Some(false))
    );
    assert_eq!(invite["Organization"], team.as_str());
    app.delete(
        &format!("/v1/organizations/{team}/invites/a@example.com"),
        &app.admin_token,
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn bad_invites_are_refused() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let invites = format!("/v2/organizations/{team}/invites");
    for body in [
        json!({}),
        json!({"email": "x@example.com", "username": "x"}),
        json!({"email": "not-an-email"}),
    ] {
        let reply = app.post(&invites, &app.admin_token, body.clone()).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_request"),
            "{body}"
        );
    }
    let reply = app
        .post(
            &invites,
            &app.admin_token,
            json!({"email": "x@example.com", "role": "emperor"}),
        )
        .await;
    assert_eq!(reply.status, 400);
    let reply = app
        .post(&invites, &app.admin_token, json!({"username": "admin"}))
        .await;
    assert_eq!((reply.status, reply.code()), (409, "member_already_exists"));
    let reply = app
        .post(
            "/v2/organizations/admin/invites",
            &app.admin_token,
            json!({"email": "x@example.com"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "personal_organization"));
}
