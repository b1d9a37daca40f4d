//! `/v1/organizations/{org}/members…`.

use crate::harness::unique;
use serde_json::json;

#[tokio::test]
async fn add_get_change_and_remove_members() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let (bob, carol) = (unique("bob"), unique("carol"));
    app.user(&bob).await;
    app.user(&carol).await;
    let members = format!("/v1/organizations/{team}/members");

    // The spec's form, and the TypeScript SDK's.
    assert_eq!(
        app.post(&members, &app.admin_token, json!({"username": bob}))
            .await
            .expect(200),
        json!({"member": bob, "role": "member"})
    );
    let added = app
        .post(
            &format!("{members}/{carol}"),
            &app.admin_token,
            json!({"member": carol, "role": "viewer"}),
        )
        .await
        .expect(200);
    assert_eq!(added, json!({"member": carol, "role": "viewer"}));

    let one = app
        .get(&format!("{members}/{bob}"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(
        one["member"],
        json!({"username": bob, "role": "member", "email": format!("{bob}@example.com")})
    );

    let changed = app
        .patch(
            &format!("{members}/{bob}"),
            &app.admin_token,
            json!({"role": "admin"}),
        )
        .await
        .expect(200);
    assert_eq!(changed["member"]["role"], "admin");

    let removed = app
        .delete(&format!("{members}/{carol}"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(removed, json!({"member": carol}));
    let list = app.get(&members, &app.admin_token).await.expect(200);
    let names: Vec<_> = list["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["username"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"admin".to_string()) && names.contains(&bob));
}

#[tokio::test]
async fn errors_have_the_contract_texts() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let bob = unique("bob");
    app.user(&bob).await;
    let members = format!("/v1/organizations/{team}/members");
    app.post(&members, &app.admin_token, json!({"username": bob}))
        .await
        .expect(200);

    let reply = app
        .post(&members, &app.admin_token, json!({"username": bob}))
        .await;
    assert_eq!(reply.status, 409);
    assert_eq!(
        reply.body["error"],
        format!("user {bob} is already a member of organization {team}")
    );
    let reply = app
        .post(&members, &app.admin_token, json!({"username": "ghost"}))
        .await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (404, Some("could not find user ghost"))
    );
    let reply = app
        .post(
            &members,
            &app.admin_token,
            json!({"username": bob, "role": "king"}),
        )
        .await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (400, Some("invalid role"))
    );
    let reply = app
        .patch(
            &format!("{members}/{bob}"),
            &app.admin_token,
            json!({"role": "king"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "invalid_role"));
    let reply = app
        .delete(&format!("{members}/ghost"), &app.admin_token)
        .await;
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.body["error"],
        format!("user ghost is not a member of org {team}")
    );
    // Each route with the OpenAPI document's own words (clients match on them).
    let reply = app.get(&format!("{members}/ghost"), &app.admin_token).await;
    assert_eq!((reply.status, reply.code()), (404, "member_not_found"));
    assert_eq!(reply.body["error"], "could not find member");
    let reply = app
        .patch(
            &format!("{members}/ghost"),
            &app.admin_token,
            json!({"role": "member"}),
        )
        .await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (404, Some("could not find user ghost"))
    );
    // Personal organizations have no members to manage.
    let reply = app
        .post(
            "/v1/organizations/admin/members",
            &app.admin_token,
            json!({"username": bob}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "personal_organization"));
}

#[tokio::test]
async fn the_last_owner_cannot_leave_or_be_demoted() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let members = format!("/v1/organizations/{team}/members");
    let reply = app
        .delete(&format!("{members}/admin"), &app.admin_token)
        .await;
    assert_eq!((reply.status, reply.code()), (409, "last_owner"));
    let reply = app
        .patch(
            &format!("{members}/admin"),
            &app.admin_token,
            json!({"role": "admin"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (409, "last_owner"));

    // With a second owner, the first may step down.
    let bob = unique("bob");
    let bob_token = app.user(&bob).await;
    app.post(
        &members,
        &app.admin_token,
        json!({"username": bob, "role": "owner"}),
    )
    .await
    .expect(200);
    app.patch(
        &format!("{members}/admin"),
        &bob_token,
        json!({"role": "member"}),
    )
    .await
    .expect(200);
    let reply = app.delete(&format!("{members}/{bob}"), &bob_token).await;
    assert_eq!((reply.status, reply.code()), (409, "last_owner"));
}

#[tokio::test]
async fn roles_limit_member_management() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let members = format!("/v1/organizations/{team}/members");
    let (adam, vera, zed) = (unique("adam"), unique("vera"), unique("zed"));
    let adam_token = app.user(&adam).await;
    let vera_token = app.user(&vera).await;
    app.user(&zed).await;
    app.add_member(&team, &app.admin_token, &adam, "admin")
        .await;
    app.add_member(&team, &app.admin_token, &vera, "viewer")
        .await;

    // Admins manage members but not owners.
    app.post(
        &members,
        &adam_token,
        json!({"username": zed, "role": "member"}),
    )
    .await
    .expect(200);
    let reply = app
        .patch(
            &format!("{members}/{zed}"),
            &adam_token,
            json!({"role": "owner"}),
        )
        .await;
    assert_eq!(reply.status, 403);
    let reply = app.delete(&format!("{members}/admin"), &adam_token).await;
    assert_eq!(reply.status, 403);
    // Viewers read, and may leave, but not remove others.
    app.get(&members, &vera_token).await.expect(200);
    assert_eq!(
        app.delete(&format!("{members}/{zed}"), &vera_token)
            .await
            .status,
        403
    );
    assert_eq!(
        app.post(&members, &vera_token, json!({"username": zed}))
            .await
            .status,
        403
    );
    app.delete(&format!("{members}/{vera}"), &vera_token)
        .await
        .expect(200);
    assert_eq!(app.get(&members, &vera_token).await.status, 404);
}

#[tokio::test]
async fn a_token_never_outranks_its_user() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.group(&team, &app.admin_token, "g").await;
    let bob = unique("bob");
    let bob_login = app.user(&bob).await;
    app.add_member(&team, &app.admin_token, &bob, "admin").await;
    let group_token = app
        .api_token(
            &bob_login,
            json!({"organization": team, "group": "g", "scopes": ["full-access"]}),
        )
        .await;
    let config = format!("/v1/organizations/{team}/groups/g/configuration");
    app.patch(&config, &group_token, json!({"delete_protection": true}))
        .await
        .expect(200);

    // Demoted to viewer: the token holding every scope may now only read.
    app.patch(
        &format!("/v1/organizations/{team}/members/{bob}"),
        &app.admin_token,
        json!({"role": "viewer"}),
    )
    .await
    .expect(200);
    assert_eq!(
        app.patch(&config, &group_token, json!({"delete_protection": false}))
            .await
            .status,
        403
    );
    app.get(&config, &group_token).await.expect(200);

    // Removed: the tokens minted for the organization are revoked.
    app.delete(
        &format!("/v1/organizations/{team}/members/{bob}"),
        &app.admin_token,
    )
    .await
    .expect(200);
    assert_eq!(app.get(&config, &group_token).await.status, 401);
}
