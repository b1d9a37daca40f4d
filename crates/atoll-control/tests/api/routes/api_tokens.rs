//! `/v1/auth/api-tokens…` and `/v2/auth/api-tokens/{name}`.

use crate::harness::unique;
use serde_json::json;

#[tokio::test]
async fn unrestricted_tokens_work_but_are_deprecated() {
    let app = app!();
    let v1 = app
        .post(
            "/v1/auth/api-tokens/everything",
            &app.admin_token,
            json!(null),
        )
        .await
        .expect(200);
    assert_eq!(v1["name"], "everything");
    assert_eq!(v1["id"].as_str().unwrap().len(), 22);
    assert!(v1["deprecation"].as_str().unwrap().contains("deprecated"));
    let secret = v1["token"].as_str().unwrap();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.get(&format!("/v1/organizations/{team}"), secret)
        .await
        .expect(200);
    app.get("/v1/organizations/admin", secret).await.expect(200);

    let v2 = app
        .post("/v2/auth/api-tokens/cli", &app.admin_token, json!({}))
        .await
        .expect(200);
    assert_eq!(v2["token"]["name"], "cli");
    assert!(v2["token"]["value"].as_str().unwrap().starts_with("atoll_"));
}

#[tokio::test]
async fn listing_and_revoking_by_name() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.group(&team, &app.admin_token, "g").await;
    app.post(
        "/v1/auth/api-tokens/org",
        &app.admin_token,
        json!({"organization": team}),
    )
    .await
    .expect(200);
    app.post(
        "/v1/auth/api-tokens/grp",
        &app.admin_token,
        json!({"organization": team, "group": "g", "scopes": ["read-only", "db:create"]}),
    )
    .await
    .expect(200);
    let tokens = app
        .get("/v1/auth/api-tokens", &app.admin_token)
        .await
        .expect(200)["tokens"]
        .clone();
    let grp = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "grp")
        .unwrap();
    assert_eq!(grp["organization"], team.as_str());
    assert_eq!(grp["group"], "g");
    // Presets are expanded: only individual scopes are ever shown.
    assert_eq!(grp["scopes"], json!(["read", "db:create"]));
    assert_eq!(grp["created_at"].as_str().unwrap().len(), 10);
    assert!(
        grp.get("token").is_none() && grp.get("value").is_none(),
        "secrets are shown once only"
    );
    let org = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "org")
        .unwrap();
    assert!(org.get("scopes").is_none() && org.get("group").is_none());

    let reply = app
        .post("/v1/auth/api-tokens/org", &app.admin_token, json!({}))
        .await;
    assert_eq!((reply.status, reply.code()), (409, "token_already_exists"));
    assert_eq!(
        app.delete("/v1/auth/api-tokens/org", &app.admin_token)
            .await
            .expect(200),
        json!({"token": "org"})
    );
    let reply = app
        .delete("/v1/auth/api-tokens/org", &app.admin_token)
        .await;
    assert_eq!((reply.status, reply.code()), (404, "token_not_found"));
    // The name is free again.
    app.post("/v1/auth/api-tokens/org", &app.admin_token, json!({}))
        .await
        .expect(200);
}

#[tokio::test]
async fn last_use_is_recorded() {
    let app = app!();
    let secret = app.api_token(&app.admin_token, json!({})).await;
    let before = app
        .get("/v1/auth/api-tokens", &app.admin_token)
        .await
        .expect(200);
    assert!(before["tokens"][0].get("last_used_at").is_none());
    app.get("/v1/user", &secret).await.expect(200);
    let after = app
        .get("/v1/auth/api-tokens", &app.admin_token)
        .await
        .expect(200);
    assert!(after["tokens"][0]["last_used_at"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
}

#[tokio::test]
async fn minting_rules() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.group(&team, &app.admin_token, "g").await;
    let bob = unique("bob");
    let bob_token = app.user(&bob).await;
    app.add_member(&team, &app.admin_token, &bob, "member")
        .await;

    // Group-scoped tokens need the admin or owner role; organization-scoped ones membership.
    let reply = app
        .post(
            "/v1/auth/api-tokens/x",
            &bob_token,
            json!({"organization": team, "group": "g", "scopes": ["read"]}),
        )
        .await;
    assert_eq!(reply.status, 403);
    app.post(
        "/v1/auth/api-tokens/x",
        &bob_token,
        json!({"organization": team}),
    )
    .await
    .expect(200);

    let cases = [
        (
            json!({"organization": team, "group": "g"}),
            400,
            "invalid_scope",
        ),
        (
            json!({"organization": team, "group": "g", "scopes": []}),
            400,
            "invalid_scope",
        ),
        (
            json!({"organization": team, "group": "g", "scopes": ["db:drop"]}),
            400,
            "invalid_scope",
        ),
        (
            json!({"organization": team, "scopes": ["read"]}),
            400,
            "invalid_request",
        ),
        (
            json!({"group": "g", "scopes": ["read"]}),
            400,
            "invalid_request",
        ),
        (
            json!({"organization": team, "group": "nope", "scopes": ["read"]}),
            404,
            "group_not_found",
        ),
        (
            json!({"organization": "nowhere"}),
            404,
            "organization_not_found",
        ),
        (json!({"expiration": "soon"}), 400, "invalid_expiration"),
    ];
    for (body, status, code) in cases {
        let reply = app
            .post(
                &format!("/v1/auth/api-tokens/{}", unique("t")),
                &app.admin_token,
                body.clone(),
            )
            .await;
        assert_eq!((reply.status, reply.code()), (status, code), "{body}");
    }

    // Scoped tokens cannot mint (or list) tokens: they would widen themselves.
    let scoped = app
        .api_token(&app.admin_token, json!({"organization": team}))
        .await;
    assert_eq!(
        app.post("/v1/auth/api-tokens/wider", &scoped, json!({}))
            .await
            .status,
        403
    );
    assert_eq!(app.get("/v1/auth/api-tokens", &scoped).await.status, 403);
}
