//! `/v1/organizations/{org}/groups…` and the personal `/v1/groups…`.

use crate::harness::unique;
use serde_json::json;

#[tokio::test]
async fn create_get_list_configure_and_delete() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let groups = format!("/v1/organizations/{team}/groups");
    let created = app
        .post(
            &groups,
            &app.admin_token,
            json!({"name": "eu", "location": "aws-eu-west-1"}),
        )
        .await
        .expect(200)["group"]
        .clone();
    assert_eq!(created["name"], "eu");
    assert_eq!(created["primary"], "aws-eu-west-1");
    assert_eq!(created["locations"], json!(["aws-eu-west-1"]));
    assert_eq!(
        (
            created["delete_protection"].as_bool(),
            created["archived"].as_bool()
        ),
        (Some(false), Some(false))
    );
    assert_eq!(created["uuid"].as_str().unwrap().len(), 36);
    assert!(created["version"].as_str().unwrap().starts_with('v'));

    assert_eq!(
        app.get(&format!("{groups}/eu"), &app.admin_token)
            .await
            .expect(200)["group"],
        created
    );
    // Beside the `default` group every new organization starts with.
    let listed = app.get(&groups, &app.admin_token).await.expect(200)["groups"].clone();
    assert_eq!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].clone())
            .collect::<Vec<_>>(),
        [json!("default"), json!("eu")]
    );
    assert_eq!(listed[1], created);

    let config = format!("{groups}/eu/configuration");
    assert_eq!(
        app.get(&config, &app.admin_token).await.expect(200),
        json!({"delete_protection": false})
    );
    assert_eq!(
        app.patch(
            &config,
            &app.admin_token,
            json!({"delete_protection": true})
        )
        .await
        .expect(200),
        json!({"delete_protection": true})
    );
    assert_eq!(
        app.patch(
            &config,
            &app.admin_token,
            json!({"delete_protection": null})
        )
        .await
        .expect(200),
        json!({"delete_protection": true})
    );
    let reply = app.delete(&format!("{groups}/eu"), &app.admin_token).await;
    assert_eq!((reply.status, reply.code()), (409, "delete_protected"));
    app.patch(
        &config,
        &app.admin_token,
        json!({"delete_protection": false}),
    )
    .await
    .expect(200);
    let deleted = app
        .delete(&format!("{groups}/eu"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(deleted["group"]["uuid"], created["uuid"]);
    let reply = app.get(&format!("{groups}/eu"), &app.admin_token).await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (404, Some("group not found"))
    );
}

#[tokio::test]
async fn the_turso_cli_shapes_work_on_the_personal_routes() {
    let app = app!();
    app.post(
        "/v1/groups",
        &app.admin_token,
        json!({"Name": "cli", "Location": "local", "Version": "latest"}),
    )
    .await
    .expect(200);
    let renamed = app
        .post(
            "/v1/groups/cli/rename",
            &app.admin_token,
            json!({"Name": "cli2"}),
        )
        .await
        .expect(200);
    assert_eq!(renamed["group"]["name"], "cli2");
    app.get("/v1/groups/cli2/locations/local/wait", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(
        app.post("/v1/groups/cli2/update", &app.admin_token, json!({}))
            .await
            .expect(200),
        json!({})
    );
    let personal = app
        .get("/v1/organizations/admin/groups/cli2", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(personal["group"]["name"], "cli2");
}

#[tokio::test]
async fn invalid_groups_are_refused() {
    let app = app!();
    let cases = [
        (
            json!({"name": "Bad_Name", "location": "local"}),
            400,
            "invalid_name",
        ),
        (
            json!({"name": "x".repeat(65), "location": "local"}),
            400,
            "invalid_name",
        ),
        (
            json!({"name": "ok", "location": "amss"}),
            400,
            "invalid_location",
        ),
        (json!({"name": "ok"}), 400, "invalid_request"),
        (
            json!({"name": "default", "location": "local"}),
            409,
            "group_already_exists",
        ),
    ];
    for (body, status, code) in cases {
        let reply = app.post("/v1/groups", &app.admin_token, body.clone()).await;
        assert_eq!((reply.status, reply.code()), (status, code), "{body}");
    }
    let reply = app
        .post(
            "/v1/groups",
            &app.admin_token,
            json!({"name": "ok", "location": "amss"}),
        )
        .await;
    assert_eq!(reply.body["error"], "invalid location: amss");
    // The OpenAPI document's exact words, which clients match on.
    let reply = app
        .post(
            "/v1/groups",
            &app.admin_token,
            json!({"name": "default", "location": "local"}),
        )
        .await;
    assert_eq!(reply.body["error"], "group already exists");
    app.group("admin", &app.admin_token, "other").await;
    let reply = app
        .post(
            "/v1/groups/other/rename",
            &app.admin_token,
            json!({"name": "default"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (409, "group_already_exists"));
}

#[tokio::test]
async fn locations_are_added_and_removed() {
    let app = app!();
    let base = "/v1/groups/default/locations";
    let added = app
        .post(
            &format!("{base}/aws-us-east-1"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(
        added["group"]["locations"],
        json!(["local", "aws-us-east-1"])
    );
    // Adding again changes nothing.
    let again = app
        .post(
            &format!("{base}/aws-us-east-1"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(
        again["group"]["locations"],
        json!(["local", "aws-us-east-1"])
    );
    let reply = app
        .post(&format!("{base}/amss"), &app.admin_token, json!({}))
        .await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (400, Some("invalid location: amss"))
    );
    let reply = app.delete(&format!("{base}/amss"), &app.admin_token).await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (400, Some("Invalid location code"))
    );
    let reply = app.delete(&format!("{base}/local"), &app.admin_token).await;
    assert_eq!((reply.status, reply.code()), (400, "primary_location"));
    let removed = app
        .delete(&format!("{base}/aws-us-east-1"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(removed["group"]["locations"], json!(["local"]));
    let reply = app
        .delete(&format!("{base}/aws-us-east-1"), &app.admin_token)
        .await;
    assert_eq!((reply.status, reply.code()), (400, "invalid_location"));
}

#[tokio::test]
async fn transfer_moves_the_group_and_revokes_its_tokens() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.group("admin", &app.admin_token, "moving").await;
    let pinned = app
        .api_token(
            &app.admin_token,
            json!({"organization": "admin", "group": "moving", "scopes": ["read-only"]}),
        )
        .await;
    app.get("/v1/groups/moving", &pinned).await.expect(200);

    let moved = app
        .post(
            "/v1/groups/moving/transfer",
            &app.admin_token,
            json!({"organization": team}),
        )
        .await
        .expect(200);
    assert_eq!(moved["name"], "moving"); // a bare group, as the spec shows
    app.get(
        &format!("/v1/organizations/{team}/groups/moving"),
        &app.admin_token,
    )
    .await
    .expect(200);
    assert_eq!(
        app.get("/v1/groups/moving", &app.admin_token).await.status,
        404
    );
    assert_eq!(
        app.get(&format!("/v1/organizations/{team}/groups/moving"), &pinned)
            .await
            .status,
        401
    );

    // Into an organization where the name is taken, or one the caller cannot see.
    app.group("admin", &app.admin_token, "moving").await;
    let reply = app
        .post(
            "/v1/groups/moving/transfer",
            &app.admin_token,
            json!({"organization": team}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (409, "group_already_exists"));
    let reply = app
        .post(
            "/v1/groups/moving/transfer",
            &app.admin_token,
            json!({"organization": "nowhere"}),
        )
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (404, "organization_not_found")
    );
    let reply = app
        .post(
            "/v1/groups/moving/transfer",
            &app.admin_token,
            json!({"organization": "admin"}),
        )
        .await;
    assert_eq!(reply.status, 400);
}

#[tokio::test]
async fn deleting_a_group_revokes_its_tokens_for_good() {
    let app = app!();
    app.group("admin", &app.admin_token, "doomed").await;
    let pinned = app
        .api_token(
            &app.admin_token,
            json!({"organization": "admin", "group": "doomed", "scopes": ["full-access"]}),
        )
        .await;
    app.delete("/v1/groups/doomed", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(app.get("/v1/groups/doomed", &pinned).await.status, 401);
    // A new group with the same name does not bring the token back.
    app.group("admin", &app.admin_token, "doomed").await;
    let reply = app.get("/v1/groups/doomed", &pinned).await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (401, Some("token has been revoked"))
    );
}

#[tokio::test]
async fn group_scoped_tokens_stay_in_their_group() {
    let app = app!();
    app.group("admin", &app.admin_token, "mine").await;
    app.group("admin", &app.admin_token, "theirs").await;
    let full = app
        .api_token(
            &app.admin_token,
            json!({"organization": "admin", "group": "mine", "scopes": ["full-access"]}),
        )
        .await;
    let listed = app.get("/v1/groups", &full).await.expect(200);
    let names: Vec<_> = listed["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["mine"]);
    app.patch(
        "/v1/groups/mine/configuration",
        &full,
        json!({"delete_protection": false}),
    )
    .await
    .expect(200);
    assert_eq!(app.get("/v1/groups/theirs", &full).await.status, 403);
    // Group create, delete and transfer need organization-level credentials at any scope.
    assert_eq!(
        app.post(
            "/v1/groups",
            &full,
            json!({"name": "new", "location": "local"})
        )
        .await
        .status,
        403
    );
    assert_eq!(app.delete("/v1/groups/mine", &full).await.status, 403);
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    assert_eq!(
        app.post(
            "/v1/groups/mine/transfer",
            &full,
            json!({"organization": team})
        )
        .await
        .status,
        403
    );

    let archived_group = app
        .post("/v1/groups/mine/unarchive", &full, json!({}))
        .await
        .expect(200);
    assert_eq!(archived_group["group"]["archived"], false);
}
