//! The credential cache (`atoll-meta`'s `credential_cache`) never outlives a change made in
//! this process: each test first uses a token (so its credential is cached), changes what
//! it may do, and expects the very next request to see the change — no waiting for the
//! cache's TTL.

use crate::harness::unique;
use serde_json::json;

/// Uses `token` a few times, so its credential is certainly in the cache.
async fn warm(app: &crate::harness::TestApp, path: &str, token: &str) {
    for _ in 0..3 {
        app.get(path, token).await.expect(200);
    }
}

#[tokio::test]
async fn a_revoked_token_is_refused_on_the_next_request() {
    let app = app!();
    let name = unique("tok");
    let minted = app
        .post(
            &format!("/v1/auth/api-tokens/{name}"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    let secret = minted["token"].as_str().unwrap();
    warm(&app, "/v1/user", secret).await;
    app.delete(&format!("/v1/auth/api-tokens/{name}"), &app.admin_token)
        .await
        .expect(200);
    let reply = app.get("/v1/user", secret).await;
    assert_eq!(reply.status, 401, "{:?}", reply.body);
    assert!(
        reply.body["error"].as_str().unwrap().contains("revoked"),
        "{:?}",
        reply.body
    );
}

#[tokio::test]
async fn an_organization_token_revoked_by_an_admin_is_refused_at_once() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let bob = unique("bob");
    let bob_login = app.user(&bob).await;
    app.add_member(&team, &app.admin_token, &bob, "member")
        .await;
    let minted = app
        .post(
            &format!("/v1/auth/api-tokens/{}", unique("tok")),
            &bob_login,
            json!({"organization": team}),
        )
        .await
        .expect(200);
    let (secret, id) = (
        minted["token"].as_str().unwrap(),
        minted["id"].as_str().unwrap(),
    );
    let org = format!("/v1/organizations/{team}");
    warm(&app, &org, secret).await;
    app.delete(&format!("{org}/api-tokens/{id}"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(app.get(&org, secret).await.status, 401);
}

#[tokio::test]
async fn a_role_change_applies_to_the_next_request() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let bob = unique("bob");
    let bob_login = app.user(&bob).await;
    app.add_member(&team, &app.admin_token, &bob, "admin").await;
    // Reading the members' invites needs the admin role.
    let invites = format!("/v1/organizations/{team}/invites");
    warm(&app, &invites, &bob_login).await;
    let member = format!("/v1/organizations/{team}/members/{bob}");
    app.patch(&member, &app.admin_token, json!({"role": "member"}))
        .await
        .expect(200);
    assert_eq!(app.get(&invites, &bob_login).await.status, 403);
    app.patch(&member, &app.admin_token, json!({"role": "admin"}))
        .await
        .expect(200);
    app.get(&invites, &bob_login).await.expect(200);
}

#[tokio::test]
async fn removing_a_member_cuts_off_their_organization_token_at_once() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let bob = unique("bob");
    let bob_login = app.user(&bob).await;
    app.add_member(&team, &app.admin_token, &bob, "member")
        .await;
    let org_token = app
        .api_token(&bob_login, json!({"organization": team}))
        .await;
    let org = format!("/v1/organizations/{team}");
    warm(&app, &org, &org_token).await;
    app.delete(&format!("{org}/members/{bob}"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(app.get(&org, &org_token).await.status, 401);
}

#[tokio::test]
async fn deleting_a_group_or_an_organization_cuts_off_their_tokens_at_once() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.group(&team, &app.admin_token, "g").await;
    let group_token = app
        .api_token(
            &app.admin_token,
            json!({"organization": team, "group": "g", "scopes": ["read-only"]}),
        )
        .await;
    let org_token = app
        .api_token(&app.admin_token, json!({"organization": team}))
        .await;
    let group = format!("/v1/organizations/{team}/groups/g");
    let org = format!("/v1/organizations/{team}");
    warm(&app, &group, &group_token).await;
    warm(&app, &org, &org_token).await;

    app.delete(&group, &app.admin_token).await.expect(200);
    assert_eq!(app.get("/v1/user", &group_token).await.status, 401);
    app.get("/v1/user", &org_token).await.expect(200);

    app.delete(&org, &app.admin_token).await.expect(200);
    assert_eq!(app.get("/v1/user", &org_token).await.status, 401);
}
