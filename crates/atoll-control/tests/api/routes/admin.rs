//! `/v1/admin/users`.

use crate::harness::{unique, PASSWORD};
use serde_json::json;

#[tokio::test]
async fn administrators_create_users_with_a_personal_organization_and_default_group() {
    let app = app!();
    let name = unique("carol");
    let body = app
        .post("/v1/admin/users", &app.admin_token, json!({"username": name, "password": PASSWORD, "email": "c@example.com", "name": "Carol"}))
        .await
        .expect(200);
    assert_eq!(body["user"]["username"], name.as_str());
    assert_eq!(body["user"]["admin"], false);
    let token = app.login(&name).await;
    let orgs = app.get("/v2/organizations", &token).await.expect(200);
    assert_eq!(orgs["organizations"][0]["slug"], name.as_str());
    assert_eq!(orgs["organizations"][0]["type"], "personal");
    let groups = app.get("/v1/groups", &token).await.expect(200);
    assert_eq!(groups["groups"][0]["name"], "default");

    // Not an administrator: may not create users.
    let reply = app
        .post(
            "/v1/admin/users",
            &token,
            json!({"username": unique("x"), "password": PASSWORD}),
        )
        .await;
    assert_eq!(reply.status, 403);
}

#[tokio::test]
async fn bad_users_are_refused() {
    let app = app!();
    let name = unique("dave");
    app.user(&name).await;
    let cases = [
        (
            json!({"username": name, "password": PASSWORD}),
            409,
            "user_already_exists",
        ),
        (
            json!({"username": "Bad Name", "password": PASSWORD}),
            400,
            "invalid_name",
        ),
        (
            json!({"username": unique("e"), "password": "short"}),
            400,
            "invalid_request",
        ),
        (
            json!({"username": unique("e"), "password": PASSWORD, "email": "nope"}),
            400,
            "invalid_request",
        ),
        (json!({"password": PASSWORD}), 400, "invalid_request"),
    ];
    for (body, status, code) in cases {
        let reply = app
            .post("/v1/admin/users", &app.admin_token, body.clone())
            .await;
        assert_eq!((reply.status, reply.code()), (status, code), "{body}");
    }
    // A username may not take a team organization's slug either.
    let slug = app.team(&app.admin_token, &unique("Team")).await;
    let reply = app
        .post(
            "/v1/admin/users",
            &app.admin_token,
            json!({"username": slug, "password": PASSWORD}),
        )
        .await;
    assert_eq!(reply.status, 409);
}
