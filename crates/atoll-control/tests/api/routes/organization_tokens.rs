//! `/v1/organizations/{org}/api-tokens…`: admins see all, members and viewers their own.

use crate::harness::unique;
use serde_json::json;

#[tokio::test]
async fn visibility_follows_the_role() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.group(&team, &app.admin_token, "g").await;
    let bob = unique("bob");
    let bob_token = app.user(&bob).await;
    app.add_member(&team, &app.admin_token, &bob, "member")
        .await;
    app.post(
        "/v1/auth/api-tokens/owners",
        &app.admin_token,
        json!({"organization": team, "group": "g", "scopes": ["full-access"]}),
    )
    .await
    .expect(200);
    let bobs = app
        .post(
            "/v1/auth/api-tokens/bobs",
            &bob_token,
            json!({"organization": team}),
        )
        .await
        .expect(200);
    app.post(
        "/v1/auth/api-tokens/unrestricted",
        &app.admin_token,
        json!({}),
    )
    .await
    .expect(200);
    let path = format!("/v1/organizations/{team}/api-tokens");

    let all = app.get(&path, &app.admin_token).await.expect(200)["tokens"].clone();
    let mut seen: Vec<_> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["owner"]["username"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("bobs".to_string(), bob.clone()),
            ("owners".to_string(), "admin".to_string())
        ]
    );
    let owners = all
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "owners")
        .unwrap();
    assert_eq!(owners["owner"]["email"], "admin@localhost");
    assert_eq!(owners["scopes"].as_array().unwrap().len(), 9);

    let own = app.get(&path, &bob_token).await.expect(200)["tokens"].clone();
    assert_eq!(own.as_array().unwrap().len(), 1);
    assert_eq!(own[0]["name"], "bobs");

    // Bob cannot revoke the owner's token (it is invisible to him), only his own.
    let owners_id = owners["id"].as_str().unwrap();
    assert_eq!(
        app.delete(&format!("{path}/{owners_id}"), &bob_token)
            .await
            .status,
        404
    );
    let bobs_id = bobs["id"].as_str().unwrap();
    assert_eq!(
        app.delete(&format!("{path}/{bobs_id}"), &bob_token)
            .await
            .expect(200),
        json!({"token": bobs_id})
    );
    assert_eq!(
        app.get("/v1/user", bobs["token"].as_str().unwrap())
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn another_organizations_token_is_not_found() {
    let app = app!();
    let (one, two) = (
        app.team(&app.admin_token, &unique("One")).await,
        app.team(&app.admin_token, &unique("Two")).await,
    );
    let minted = app
        .post(
            "/v1/auth/api-tokens/t",
            &app.admin_token,
            json!({"organization": one}),
        )
        .await
        .expect(200);
    let id = minted["id"].as_str().unwrap();
    let reply = app
        .delete(
            &format!("/v1/organizations/{two}/api-tokens/{id}"),
            &app.admin_token,
        )
        .await;
    assert_eq!((reply.status, reply.code()), (404, "token_not_found"));
    app.delete(
        &format!("/v1/organizations/{one}/api-tokens/{id}"),
        &app.admin_token,
    )
    .await
    .expect(200);
}
