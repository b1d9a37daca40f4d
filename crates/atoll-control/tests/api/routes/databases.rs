//! `/v1/organizations/{org}/databases…` and the personal `/v1/databases…`.

use crate::harness::unique;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn create_retrieve_list_and_delete() {
    let app = app!();
    let created = app
        .post(
            "/v1/organizations/admin/databases",
            &app.admin_token,
            json!({"name": "app", "group": "default"}),
        )
        .await
        .expect(200);
    let db = &created["database"];
    assert_eq!(
        db.as_object().unwrap().len(),
        3,
        "create answers DbId, Hostname, Name only: {db}"
    );
    assert_eq!(db["Name"], "app");
    let port = app.db_url.rsplit(':').next().unwrap();
    assert_eq!(db["Hostname"], format!("app-admin.localhost:{port}"));

    let got = app
        .get("/v1/organizations/admin/databases/app", &app.admin_token)
        .await
        .expect(200)["database"]
        .clone();
    assert_eq!(got["DbId"], db["DbId"]);
    assert_eq!(got["group"], "default");
    assert_eq!(got["primaryRegion"], "local");
    assert_eq!(got["regions"], json!(["local"]));
    assert_eq!(got["type"], "logical");
    assert_eq!(got["state"], "active");
    assert_eq!(got["parent"], serde_json::Value::Null);
    assert_eq!(got["http_url"], format!("{}/db/app-admin/", app.db_url));
    for key in [
        "block_reads",
        "block_writes",
        "allow_attach",
        "delete_protection",
        "sleeping",
        "archived",
        "is_schema",
    ] {
        assert_eq!(got[key], false, "{key}");
    }

    // The personal form answers the same.
    assert_eq!(
        app.get("/v1/databases/app", &app.admin_token)
            .await
            .expect(200)["database"],
        got
    );
    let list = app.get("/v1/databases", &app.admin_token).await.expect(200);
    assert_eq!(list["databases"], json!([got]));
    assert_eq!(list["pagination"]["next"], serde_json::Value::Null);

    assert_eq!(
        app.delete("/v1/databases/app", &app.admin_token)
            .await
            .expect(200),
        json!({"database": "app"})
    );
    let reply = app.get("/v1/databases/app", &app.admin_token).await;
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.body["error"],
        "could not find database with name app: record not found"
    );
    let reply = app.delete("/v1/databases/app", &app.admin_token).await;
    assert_eq!((reply.status, reply.code()), (404, "database_not_found"));
    // The name is free again.
    app.post("/v1/databases", &app.admin_token, json!({"name": "app"}))
        .await
        .expect(200);
}

#[tokio::test]
async fn bad_creates_are_refused_and_leave_nothing() {
    let app = app!();
    app.post("/v1/databases", &app.admin_token, json!({"name": "taken"}))
        .await
        .expect(200);
    let cases = [
        (json!({"name": "taken"}), 409, "database_already_exists"),
        (json!({"name": "Bad_Name"}), 400, "invalid_name"),
        (json!({"name": "x".repeat(65)}), 400, "invalid_name"),
        (
            json!({"name": "nogroup", "group": "nope"}),
            400,
            "group_not_found",
        ),
        (
            json!({"name": "size", "size_limit": "lots"}),
            400,
            "invalid_size",
        ),
        (
            json!({"name": "size", "size_limit": "1tb"}),
            400,
            "invalid_size",
        ),
        (
            json!({"name": "loc", "location": "aws-us-east-1"}),
            400,
            "invalid_location",
        ),
        (
            json!({"name": "seed", "seed": {"type": "magic"}}),
            400,
            "invalid_seed",
        ),
        (
            json!({"name": "seed", "seed": {"type": "database", "name": "ghost"}}),
            400,
            "invalid_seed",
        ),
        (
            // Before the source existed: outside its restorable window.
            json!({"name": "seed", "seed": {"type": "database", "name": "taken", "timestamp": "2026-01-01T00:00:00Z"}}),
            400,
            "invalid_seed",
        ),
        (
            json!({"name": "seed", "seed": {"type": "database", "name": "taken", "timestamp": "yesterday"}}),
            400,
            "invalid_seed",
        ),
        (
            json!({"name": "seed", "seed": {"type": "dump", "url": "http://x/dumps/nope"}}),
            400,
            "dump_not_found",
        ),
        (json!({"group": "default"}), 400, "invalid_request"),
    ];
    for (body, status, code) in cases {
        let reply = app
            .post("/v1/databases", &app.admin_token, body.clone())
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{body}: {}",
            reply.body
        );
    }
    let reply = app
        .post("/v1/databases", &app.admin_token, json!({"name": "taken"}))
        .await;
    assert_eq!(
        reply.body["error"],
        "database with name taken already exists"
    );
    let reply = app
        .post(
            "/v1/databases",
            &app.admin_token,
            json!({"name": "nogroup", "group": "nope"}),
        )
        .await;
    assert_eq!(reply.body["error"], "group not found");
    let names: Vec<_> = app.get("/v1/databases", &app.admin_token).await.expect(200)["databases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["Name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["taken"]);
}

#[tokio::test]
async fn size_limits_take_units_in_both_cases() {
    let app = app!();
    for (size, bytes) in [
        ("10000", "10000"),
        ("256mb", "256000000"),
        ("1GB", "1000000000"),
        ("512kb", "512000"),
    ] {
        let name = unique("sized");
        app.post(
            "/v1/databases",
            &app.admin_token,
            json!({"name": name, "size_limit": size}),
        )
        .await
        .expect(200);
        let config = app
            .get(
                &format!("/v1/databases/{name}/configuration"),
                &app.admin_token,
            )
            .await
            .expect(200);
        assert_eq!(config["size_limit"], bytes, "{size}");
    }
}

#[tokio::test]
async fn an_idempotency_key_replays_the_first_answer() {
    let app = app!();
    let send = |body: serde_json::Value, key: &'static str| {
        app.client
            .post(format!("{}/v1/databases", app.url))
            .header("Authorization", format!("Bearer {}", app.admin_token))
            .header("Idempotency-Key", key)
            .json(&body)
    };
    let first: serde_json::Value = send(json!({"name": "once"}), "k-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let retry = send(json!({"name": "once"}), "k-1").send().await.unwrap();
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.json::<serde_json::Value>().await.unwrap(), first);
    // Without the key a retry is a conflict; with the key and another body, too.
    assert_eq!(
        app.post("/v1/databases", &app.admin_token, json!({"name": "once"}))
            .await
            .status,
        409
    );
    let other = send(json!({"name": "twice"}), "k-1").send().await.unwrap();
    assert_eq!(other.status(), 409);
    let list = app.get("/v1/databases", &app.admin_token).await.expect(200);
    assert_eq!(list["databases"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn pagination_and_filters() {
    let app = app!();
    app.group("admin", &app.admin_token, "other").await;
    for name in ["e", "a", "d", "c", "b"] {
        let group = if name == "e" { "other" } else { "default" };
        app.database("/v1", &app.admin_token, name, group).await;
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/databases?limit=2&cursor={c}"),
            None => "/v1/databases?limit=2".to_string(),
        };
        let page = app.get(&path, &app.admin_token).await.expect(200);
        let names: Vec<_> = page["databases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["Name"].as_str().unwrap().to_string())
            .collect();
        assert!(names.len() <= 2);
        seen.extend(names);
        match page["pagination"]["next"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, vec!["a", "b", "c", "d", "e"]);
    let other = app
        .get("/v1/databases?group=other", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(other["databases"].as_array().unwrap().len(), 1);
    assert_eq!(
        app.get("/v1/databases?group=nope", &app.admin_token)
            .await
            .status,
        404
    );
    assert_eq!(
        app.get("/v1/databases?limit=0", &app.admin_token)
            .await
            .status,
        400
    );
    assert_eq!(
        app.get("/v1/databases?cursor=%%%", &app.admin_token)
            .await
            .status,
        400
    );

    // Copies name their parent, and the parent filter finds them.
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "copy", "seed": {"type": "database", "value": "a"}}),
    )
    .await
    .expect(200);
    let a_id = app
        .get("/v1/databases/a", &app.admin_token)
        .await
        .expect(200)["database"]["DbId"]
        .clone();
    let children = app
        .get(
            &format!("/v1/databases?parent={}", a_id.as_str().unwrap()),
            &app.admin_token,
        )
        .await
        .expect(200);
    assert_eq!(children["databases"][0]["Name"], "copy");
    assert_eq!(children["databases"][0]["parent"]["name"], "a");
}

#[tokio::test]
async fn configuration_round_trips_and_nulls_leave_fields_alone() {
    let app = app!();
    app.database("/v1", &app.admin_token, "conf", "default")
        .await;
    let path = "/v1/databases/conf/configuration";
    let initial = app.get(path, &app.admin_token).await.expect(200);
    assert_eq!(
        initial,
        json!({"size_limit": "", "allow_attach": false, "block_reads": false, "block_writes": false,
               "delete_protection": false, "allowed_ips": [], "allowed_aws_vpc_ids": [],
               "durability": "default"})
    );
    let body = json!({"allow_attach": true, "delete_protection": null, "block_writes": true, "size_limit": "1mb",
                      "allowed_ips": ["203.0.113.7", "10.0.0.0/8"]});
    let changed = app.patch(path, &app.admin_token, body).await.expect(200);
    assert_eq!(changed["allow_attach"], true);
    assert_eq!(changed["block_writes"], true);
    assert_eq!(changed["size_limit"], "1000000");
    assert_eq!(changed["allowed_ips"], json!(["203.0.113.7", "10.0.0.0/8"]));
    // The Turso CLI's shape: explicit nulls change nothing.
    let same = app
        .patch(
            path,
            &app.admin_token,
            json!({"allow_attach": null, "delete_protection": true}),
        )
        .await
        .expect(200);
    assert_eq!(
        (
            same["allow_attach"].as_bool(),
            same["delete_protection"].as_bool()
        ),
        (Some(true), Some(true))
    );
    let cleared = app
        .patch(path, &app.admin_token, json!({"allowed_ips": []}))
        .await
        .expect(200);
    assert_eq!(cleared["allowed_ips"], json!([]));
    let reply = app
        .patch(path, &app.admin_token, json!({"allowed_ips": ["nope"]}))
        .await;
    assert_eq!(reply.status, 400);

    let reply = app.delete("/v1/databases/conf", &app.admin_token).await;
    assert_eq!((reply.status, reply.code()), (409, "delete_protected"));
    let got = app
        .get("/v1/databases/conf", &app.admin_token)
        .await
        .expect(200)["database"]
        .clone();
    assert_eq!(
        (
            got["block_writes"].as_bool(),
            got["delete_protection"].as_bool()
        ),
        (Some(true), Some(true))
    );
}

#[tokio::test]
async fn instances_wakeup_and_transfer() {
    let app = app!();
    app.database("/v1", &app.admin_token, "moving", "default")
        .await;
    let instances = app
        .get("/v1/databases/moving/instances", &app.admin_token)
        .await
        .expect(200);
    let instance = &instances["instances"][0];
    assert_eq!(
        (
            instance["name"].as_str(),
            instance["type"].as_str(),
            instance["region"].as_str()
        ),
        (Some("local"), Some("primary"), Some("local"))
    );
    app.get("/v1/databases/moving/instances/local", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(
        app.get("/v1/databases/moving/instances/mars", &app.admin_token)
            .await
            .status,
        404
    );
    assert_eq!(
        app.post("/v1/databases/moving/wakeup", &app.admin_token, json!({}))
            .await
            .expect(200),
        json!({})
    );

    let team = app.team(&app.admin_token, &unique("Acme")).await;
    // A new team organization has a `default` group; without it the transfer has nowhere to land.
    app.delete(
        &format!("/v1/organizations/{team}/groups/default"),
        &app.admin_token,
    )
    .await
    .expect(200);
    let reply = app
        .post(
            "/v1/databases/moving/transfer",
            &app.admin_token,
            json!({"org": team}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "group_not_found"));
    app.group(&team, &app.admin_token, "default").await;
    let moved = app
        .post(
            "/v1/databases/moving/transfer",
            &app.admin_token,
            json!({"org": team}),
        )
        .await
        .expect(200);
    assert!(moved["database"]["Hostname"]
        .as_str()
        .unwrap()
        .starts_with(&format!("moving-{team}.")));
    app.get(
        &format!("/v1/organizations/{team}/databases/moving"),
        &app.admin_token,
    )
    .await
    .expect(200);
    assert_eq!(
        app.get("/v1/databases/moving", &app.admin_token)
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn database_tokens() {
    let app = app!();
    app.database("/v1", &app.admin_token, "tok", "default")
        .await;
    app.database("/v1", &app.admin_token, "other", "default")
        .await;
    let path = "/v1/databases/tok/auth/tokens";
    for query in [
        "",
        "?expiration=never",
        "?expiration=2w1d30m&authorization=read-only",
        "?expiration=7d3h2m1s",
    ] {
        let body = app
            .post(
                &format!("{path}{query}"),
                &app.admin_token,
                json!({"permissions": {"read_attach": {"databases": []}}}),
            )
            .await
            .expect(200);
        assert_eq!(
            body["jwt"].as_str().unwrap().split('.').count(),
            3,
            "{query}"
        );
    }
    let reply = app
        .post(
            &format!("{path}?expiration=soon"),
            &app.admin_token,
            json!({}),
        )
        .await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (400, Some("Invalid expiration format"))
    );
    let reply = app
        .post(
            &format!("{path}?authorization=admin"),
            &app.admin_token,
            json!({}),
        )
        .await;
    assert_eq!(reply.status, 400);
    let reply = app
        .post(
            path,
            &app.admin_token,
            json!({"permissions": {"read_attach": {"databases": ["ghost"]}}}),
        )
        .await;
    assert_eq!(reply.status, 400);
    app.post(
        path,
        &app.admin_token,
        json!({"permissions": {"read_attach": {"databases": ["other"]}}}),
    )
    .await
    .expect(200);
    assert_eq!(
        app.post("/v1/databases/tok/auth/rotate", &app.admin_token, json!({}))
            .await
            .expect(200),
        json!({})
    );
    let group = app
        .post(
            "/v1/groups/default/auth/tokens?authorization=read-only",
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    assert!(group["jwt"].is_string());
    assert_eq!(
        app.post(
            "/v1/groups/default/auth/rotate",
            &app.admin_token,
            json!({})
        )
        .await
        .expect(200),
        json!({})
    );
    assert_eq!(
        app.call(
            Method::POST,
            "/v1/databases/ghost/auth/tokens",
            Some(&app.admin_token),
            None
        )
        .await
        .status,
        404
    );
}

#[tokio::test]
async fn seeds_from_dumps() {
    let app = app!();
    let uploaded = app
        .post_file(
            "/v1/organizations/admin/databases/dumps",
            &app.admin_token,
            "CREATE TABLE t (x);\nINSERT INTO t VALUES (1);\n",
        )
        .await;
    let url = uploaded.body["dump_url"]
        .as_str()
        .expect("dump_url")
        .to_string();
    assert!(url.contains("/databases/dumps/"));
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "dumped", "seed": {"type": "dump", "url": url}}),
    )
    .await
    .expect(200);
    let bad = app
        .post_file(
            "/v1/databases/dumps",
            &app.admin_token,
            "CREATE TABLE broken (",
        )
        .await;
    let bad_url = bad.body["dump_url"].as_str().unwrap().to_string();
    let reply = app
        .post(
            "/v1/databases",
            &app.admin_token,
            json!({"name": "broken", "seed": {"type": "dump", "url": bad_url}}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "invalid_seed"));
    // The failed create left nothing behind.
    assert_eq!(
        app.get("/v1/databases/broken", &app.admin_token)
            .await
            .status,
        404
    );
    app.post("/v1/databases", &app.admin_token, json!({"name": "broken"}))
        .await
        .expect(200);
    assert_eq!(
        app.post_file("/v1/databases/dumps", &app.admin_token, "  ")
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn group_tokens_need_their_group_to_create() {
    let app = app!();
    app.group("admin", &app.admin_token, "mine").await;
    let scoped = app
        .api_token(
            &app.admin_token,
            json!({"organization": "admin", "group": "mine", "scopes": ["db:create", "read"]}),
        )
        .await;
    app.post(
        "/v1/databases",
        &scoped,
        json!({"name": "ok", "group": "mine"}),
    )
    .await
    .expect(200);
    assert_eq!(
        app.post(
            "/v1/databases",
            &scoped,
            json!({"name": "no", "group": "default"})
        )
        .await
        .status,
        403
    );
    let list = app.get("/v1/databases", &scoped).await.expect(200);
    assert_eq!(list["databases"].as_array().unwrap().len(), 1);
    assert_eq!(
        app.get("/v1/databases?group=default", &scoped)
            .await
            .expect(200)["databases"],
        json!([])
    );
}

#[tokio::test]
async fn deleting_a_group_deletes_its_databases() {
    let app = app!();
    app.group("admin", &app.admin_token, "doomed").await;
    app.database("/v1", &app.admin_token, "inside", "doomed")
        .await;
    app.delete("/v1/groups/doomed", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(
        app.get("/v1/databases/inside", &app.admin_token)
            .await
            .status,
        404
    );
    app.group("admin", &app.admin_token, "doomed").await;
    app.database("/v1", &app.admin_token, "inside", "doomed")
        .await;
}

/// A malformed query string or upload body is the API's JSON error, like every other
/// refusal (axum's own rejections are `text/plain`); found by schemathesis.
#[tokio::test]
async fn malformed_query_and_multipart_answer_json_errors() {
    let app = app!();
    let reply = app
        .get("/v1/databases?limit=&cursor=", &app.admin_token)
        .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.code(), "invalid_request", "{}", reply.body);

    let reply = app
        .call(
            Method::POST,
            "/v1/organizations/admin/databases/dumps",
            Some(&app.admin_token),
            None,
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.code(), "invalid_request", "{}", reply.body);
}
