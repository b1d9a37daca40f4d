//! `/v1/user`, `/v1/current-user`, `/v1/user/invites…`.

use crate::harness::unique;
use serde_json::json;

#[tokio::test]
async fn the_current_user() {
    let app = app!();
    for path in ["/v1/user", "/v1/current-user"] {
        let user = app.get(path, &app.admin_token).await.expect(200)["user"].clone();
        assert_eq!(user["username"], "admin");
        assert_eq!(user["plan"], "starter");
        assert_eq!(user["admin"], true);
        assert_eq!(user["has_pending_invites"], false);
        assert!(user["avatarUrl"].is_string() && user["mfa"] == false);
    }
}

#[tokio::test]
async fn invited_users_see_and_accept_their_invites() {
    let app = app!();
    let name = unique("invitee");
    let token = app.user(&name).await;
    let org = app.team(&app.admin_token, &unique("Acme")).await;
    app.post(
        &format!("/v2/organizations/{org}/invites"),
        &app.admin_token,
        json!({"email": format!("{name}@example.com"), "role": "admin"}),
    )
    .await
    .expect(200);

    assert_eq!(
        app.get("/v1/user", &token).await.expect(200)["user"]["has_pending_invites"],
        true
    );
    let invites = app.get("/v1/user/invites", &token).await.expect(200);
    assert_eq!(invites["invites"][0]["organization"], org.as_str());
    assert_eq!(invites["invites"][0]["role"], "admin");
    // Not a member yet: the organization is invisible.
    assert_eq!(
        app.get(&format!("/v1/organizations/{org}"), &token)
            .await
            .status,
        404
    );

    let accepted = app
        .post(&format!("/v1/user/invites/{org}/accept"), &token, json!({}))
        .await
        .expect(200);
    assert_eq!(accepted, json!({"organization": org, "role": "admin"}));
    assert_eq!(
        app.get("/v1/user", &token).await.expect(200)["user"]["has_pending_invites"],
        false
    );
    app.get(&format!("/v1/organizations/{org}"), &token)
        .await
        .expect(200);
    let members = app
        .get(&format!("/v1/organizations/{org}/members"), &token)
        .await
        .expect(200);
    assert!(members["members"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["username"] == name.as_str() && m["role"] == "admin"));

    let reply = app
        .post(&format!("/v1/user/invites/{org}/accept"), &token, json!({}))
        .await;
    assert_eq!((reply.status, reply.code()), (404, "invite_not_found"));
    let reply = app
        .post("/v1/user/invites/no-such-org/accept", &token, json!({}))
        .await;
    assert_eq!((reply.status, reply.code()), (404, "invite_not_found"));
}
