//! `/v3/organizations/{orgId}/…`: databases and groups by id, deleted databases listed a
//! page at a time and restored by id.

use crate::harness::unique;
use reqwest::Method;
use serde_json::{json, Value};

/// A team organization with a group `main`: its slug, its id and the group's id.
async fn team_with_group(app: &crate::harness::TestApp) -> (String, String, String) {
    let team = app.team(&app.admin_token, &unique("v3")).await;
    app.group(&team, &app.admin_token, "main").await;
    let org_id = app
        .get(&format!("/v1/organizations/{team}"), &app.admin_token)
        .await
        .expect(200)["organization"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let group_id = app
        .get(
            &format!("/v1/organizations/{team}/groups/main"),
            &app.admin_token,
        )
        .await
        .expect(200)["group"]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    (team, org_id, group_id)
}

#[tokio::test]
async fn databases_and_groups_by_id() {
    let app = app!();
    let (team, org_id, group_id) = team_with_group(&app).await;
    let base = format!("/v3/organizations/{org_id}");

    let created = app
        .post(
            &format!("{base}/databases"),
            &app.admin_token,
            json!({"name": "orders", "group_id": group_id}),
        )
        .await
        .expect(200);
    let db = &created["database"];
    assert_eq!(
        (db["Name"].as_str(), db["group"].as_str()),
        (Some("orders"), Some("main"))
    );
    assert_eq!(
        db["allow_rules_config"],
        json!({"allowed_ips": [], "allowed_aws_vpc_ids": []})
    );
    let db_id = db["DbId"].as_str().unwrap().to_string();

    // The allow rules show what the v1 configuration set.
    app.patch(
        &format!("/v1/organizations/{team}/databases/orders/configuration"),
        &app.admin_token,
        json!({"allowed_ips": ["10.0.0.0/8"]}),
    )
    .await
    .expect(200);
    let got = app
        .get(&format!("{base}/databases/{db_id}"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(got["database"]["DbId"], db_id.as_str());
    assert_eq!(
        got["database"]["allow_rules_config"]["allowed_ips"],
        json!(["10.0.0.0/8"])
    );
    assert_eq!(got["database"]["delete_protection"], false);

    let listed = app
        .get(
            &format!("{base}/databases?group_id={group_id}"),
            &app.admin_token,
        )
        .await
        .expect(200);
    let names: Vec<&str> = listed["databases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["orders"]);

    let token = app
        .post(
            &format!("{base}/databases/{db_id}/auth/tokens?authorization=read-only"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    assert!(token["jwt"].as_str().unwrap().contains('.'));

    let groups = app
        .get(&format!("{base}/groups"), &app.admin_token)
        .await
        .expect(200);
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["uuid"] == group_id.as_str() && g["name"] == "main"),
        "{groups}"
    );
    let group = app
        .get(&format!("{base}/groups/{group_id}"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(group["group"]["name"], "main");
    app.post(
        &format!("{base}/groups/{group_id}/auth/tokens"),
        &app.admin_token,
        json!({}),
    )
    .await
    .expect(200);

    // Unknown ids, and ids of another organization, are 404s as unknown names are.
    let personal_group = app
        .get("/v1/groups/default", &app.admin_token)
        .await
        .expect(200)["group"]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let reply = app
        .get(&format!("{base}/groups/{personal_group}"), &app.admin_token)
        .await;
    assert_eq!((reply.status, reply.code()), (404, "group_not_found"));
    let reply = app
        .get(&format!("{base}/databases/nope"), &app.admin_token)
        .await;
    assert_eq!((reply.status, reply.code()), (404, "database_not_found"));
    let reply = app
        .get("/v3/organizations/nope/databases", &app.admin_token)
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (404, "organization_not_found")
    );
    let reply = app
        .call(Method::GET, &format!("{base}/databases"), None, None)
        .await;
    assert_eq!(reply.status, 401);

    let deleted = app
        .call(
            Method::DELETE,
            &format!("{base}/databases/{db_id}"),
            Some(&app.admin_token),
            None,
        )
        .await
        .expect(200);
    assert_eq!(deleted["database"], "orders");
}

#[tokio::test]
async fn deleted_databases_are_listed_in_pages_and_restored_by_id() {
    let app = app!();
    let (team, org_id, group_id) = team_with_group(&app).await;
    app.post(
        &format!("/v1/admin/organizations/{team}/plan"),
        &app.admin_token,
        json!({"plan": "scaler"}),
    )
    .await
    .expect(200);
    let base = format!("/v3/organizations/{org_id}");
    let mut ids = Vec::new();
    for name in ["a", "b", "c"] {
        let created = app
            .post(
                &format!("{base}/databases"),
                &app.admin_token,
                json!({"name": name, "group_id": group_id}),
            )
            .await
            .expect(200);
        let id = created["database"]["DbId"].as_str().unwrap().to_string();
        app.call(
            Method::DELETE,
            &format!("{base}/databases/{id}"),
            Some(&app.admin_token),
            None,
        )
        .await
        .expect(200);
        ids.push(id);
    }
    // Two pages of two, following `pagination.next`.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("{base}/databases?deleted=true&limit=2");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let page = app.get(&path, &app.admin_token).await.expect(200);
        for db in page["databases"].as_array().unwrap() {
            assert!(db["restorable_until"].is_string(), "{db}");
            seen.push(db["DbId"].as_str().unwrap().to_string());
        }
        match &page["pagination"]["next"] {
            Value::String(next) => cursor = Some(next.clone()),
            _ => break,
        }
    }
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(seen, expected);

    // Restoring under another name is refused; by id (and its own name) it comes back.
    let reply = app
        .post(
            &format!("{base}/databases/{}/restore", ids[0]),
            &app.admin_token,
            json!({"name": "renamed"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (501, "not_available"));
    let restored = app
        .post(
            &format!("{base}/databases/{}/restore", ids[0]),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(restored["database"]["Name"], "a");
    app.get(&format!("{base}/databases/{}", ids[0]), &app.admin_token)
        .await
        .expect(200);
    let left = app
        .get(&format!("{base}/databases?deleted=true"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(left["databases"].as_array().unwrap().len(), 2);
}
