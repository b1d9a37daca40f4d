//! `/v1/organizations`, `/v2/organizations`, `/v1/organizations/{org}`.

use crate::harness::unique;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn listing_answers_an_array_and_the_object_form_for_the_typescript_sdk() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let array = app
        .get("/v1/organizations", &app.admin_token)
        .await
        .expect(200);
    let slugs: Vec<_> = array
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, vec!["admin", team.as_str()]);
    assert_eq!(array[0]["type"], "personal");
    assert_eq!(array[1]["type"], "team");
    for key in [
        "name",
        "overages",
        "require_mfa",
        "blocked_reads",
        "blocked_writes",
        "plan_id",
        "plan_timeline",
        "platform",
        "restore_enabled",
    ] {
        assert!(array[1].get(key).is_some(), "organization lacks {key}");
    }

    let response = app
        .client
        .get(format!("{}/v1/organizations", app.url))
        .header("Authorization", format!("Bearer {}", app.admin_token))
        .header("User-Agent", "@tursodatabase/api")
        .send()
        .await
        .unwrap();
    let object: serde_json::Value = response.json().await.unwrap();
    assert_eq!(object["organizations"].as_array().unwrap().len(), 2);
    let object = app
        .get("/v1/organizations?format=object", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(object["organizations"].as_array().unwrap().len(), 2);

    let v2 = app
        .get("/v2/organizations", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(v2["organizations"][1]["slug"], team.as_str());
    assert!(v2["organizations"][1]["id"].as_str().unwrap().len() == 36);
}

#[tokio::test]
async fn scoped_tokens_see_only_their_organization() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let scoped = app
        .api_token(&app.admin_token, json!({"organization": team}))
        .await;
    let list = app.get("/v1/organizations", &scoped).await.expect(200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["slug"], team.as_str());
    // …and may not act on the user's other organizations.
    assert_eq!(
        app.get("/v1/organizations/admin", &scoped).await.status,
        403
    );
}

#[tokio::test]
async fn create_with_dry_run_and_conflicts() {
    let app = app!();
    let name = unique("Big Corp");
    let slug = name.to_lowercase().replace(' ', "-");
    let dry = app
        .post(
            "/v1/organizations?dry_run=true",
            &app.admin_token,
            json!({"name": name}),
        )
        .await
        .expect(200);
    assert_eq!(dry["org"]["slug"], slug.as_str());
    assert_eq!(
        app.get(&format!("/v1/organizations/{slug}"), &app.admin_token)
            .await
            .status,
        404
    );

    let created = app
        .post(
            "/v1/organizations?dry_run=false",
            &app.admin_token,
            json!({"name": name}),
        )
        .await
        .expect(200);
    assert_eq!(created["org"]["slug"], slug.as_str());
    assert_eq!(created["org"]["type"], "team");
    let members = app
        .get(
            &format!("/v1/organizations/{slug}/members"),
            &app.admin_token,
        )
        .await
        .expect(200);
    assert_eq!(
        members["members"],
        json!([{"username": "admin", "role": "owner", "email": "admin@localhost"}])
    );

    for query in ["", "?dry_run=true"] {
        let reply = app
            .post(
                &format!("/v1/organizations{query}"),
                &app.admin_token,
                json!({"name": name}),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (409, "organization_already_exists")
        );
    }
    // A username is taken as a slug too.
    let reply = app
        .post(
            "/v1/organizations",
            &app.admin_token,
            json!({"name": "admin"}),
        )
        .await;
    assert_eq!(reply.status, 409);
    let reply = app
        .post(
            "/v1/organizations",
            &app.admin_token,
            json!({"name": "!!!"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "invalid_name"));
    let reply = app
        .post("/v1/organizations", &app.admin_token, json!({}))
        .await;
    assert_eq!(reply.status, 400);
}

#[tokio::test]
async fn update_toggles_overages_and_refuses_mfa() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    let path = format!("/v1/organizations/{team}");
    let body = app
        .patch(&path, &app.admin_token, json!({"overages": true}))
        .await
        .expect(200);
    assert_eq!(body["organization"]["overages"], true);
    let body = app
        .patch(&path, &app.admin_token, json!({"overages": null}))
        .await
        .expect(200);
    assert_eq!(body["organization"]["overages"], true);
    assert_eq!(
        app.get(&path, &app.admin_token).await.expect(200)["organization"]["overages"],
        true
    );
    let reply = app
        .patch(&path, &app.admin_token, json!({"require_mfa": true}))
        .await;
    assert_eq!((reply.status, reply.code()), (501, "not_available"));
    app.patch(&path, &app.admin_token, json!({"require_mfa": false}))
        .await
        .expect(200);
    let reply = app
        .patch(&path, &app.admin_token, json!({"overages": "yes"}))
        .await;
    assert_eq!(reply.status, 400);
}

#[tokio::test]
async fn delete_removes_everything_and_revokes_tokens() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    app.group(&team, &app.admin_token, "g").await;
    let scoped = app
        .api_token(&app.admin_token, json!({"organization": team}))
        .await;
    let body = app
        .delete(&format!("/v1/organizations/{team}"), &app.admin_token)
        .await
        .expect(200);
    assert_eq!(body["organization"], team.as_str());
    assert_eq!(
        app.get(&format!("/v1/organizations/{team}"), &app.admin_token)
            .await
            .status,
        404
    );
    assert_eq!(app.get("/v1/user", &scoped).await.status, 401);
    let reply = app
        .delete(&format!("/v1/organizations/{team}"), &app.admin_token)
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (404, "organization_not_found")
    );

    let reply = app
        .call(
            Method::DELETE,
            "/v1/organizations/admin",
            Some(&app.admin_token),
            None,
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "personal_organization"));
}

#[tokio::test]
async fn other_peoples_organizations_are_not_found() {
    let app = app!();
    let outsider = app.user(&unique("outsider")).await;
    let team = app.team(&app.admin_token, &unique("Acme")).await;
    for path in [
        format!("/v1/organizations/{team}"),
        format!("/v1/organizations/{team}/groups"),
        "/v1/organizations/admin".to_string(),
    ] {
        let reply = app.get(&path, &outsider).await;
        assert_eq!(
            (reply.status, reply.code()),
            (404, "organization_not_found"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn plans_subscription_and_invoices() {
    let app = app!();
    let plans = app.get("/v1/plans", &app.admin_token).await.expect(200)["plans"].clone();
    let names: Vec<_> = plans
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["starter", "developer", "scaler", "pro", "enterprise"]
    );
    assert_eq!(plans[2]["price"], "29");
    assert_eq!(plans[2]["prices"][0]["timeline"], "monthly");
    assert!(
        plans[0]["quotas"].get("rowsRead").is_some(),
        "camelCase quotas: {}",
        plans[0]
    );

    let sub = app
        .get("/v1/organizations/admin/subscription", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(
        sub["subscription"],
        json!({"name": "starter", "overages": false, "plan": "starter", "timeline": "monthly"})
    );
    app.post(
        "/v1/admin/organizations/admin/plan",
        &app.admin_token,
        json!({"plan": "scaler"}),
    )
    .await
    .expect(200);
    assert_eq!(
        app.get("/v1/subscription", &app.admin_token)
            .await
            .expect(200)["subscription"]["plan"],
        "scaler"
    );

    let invoices = app.get("/v1/invoices", &app.admin_token).await.expect(200)["invoices"].clone();
    assert_eq!(
        invoices.as_array().unwrap().len(),
        1,
        "one cycle since the organization was created"
    );
    assert_eq!(invoices[0]["status"], "upcoming");
    assert_eq!(invoices[0]["amount_due"], "29");
    assert_eq!(invoices[0]["paid_at"], serde_json::Value::Null);
    assert_eq!(
        app.get("/v1/invoices?type=issued", &app.admin_token)
            .await
            .expect(200)["invoices"],
        json!([])
    );
    assert_eq!(
        app.get("/v1/invoices?type=weird", &app.admin_token)
            .await
            .status,
        400
    );
}

/// A self-hosted instance is the operator's: a new team organization can be used at once,
/// with the `default` group `atoll db create` picks and no quotas in the way.
#[tokio::test]
async fn a_new_team_organization_has_a_default_group_and_no_quotas() {
    // The plans of a fresh install (the harness's are unlimited).
    let config = atoll_control::config::ControlConfig::default();
    let Some(app) = crate::harness::TestApp::start_with(config).await else {
        return;
    };
    let owner = app.user(&unique("owner")).await;
    let team = app.team(&owner, &unique("Acme")).await;
    let org = app
        .get(&format!("/v1/organizations/{team}"), &owner)
        .await
        .expect(200)["organization"]
        .clone();
    assert_eq!(org["plan_id"], "enterprise");

    let groups = app
        .get(&format!("/v1/organizations/{team}/groups"), &owner)
        .await
        .expect(200)["groups"]
        .clone();
    assert_eq!(groups.as_array().unwrap().len(), 1, "{groups}");
    assert_eq!(
        (&groups[0]["name"], &groups[0]["primary"]),
        (&json!("default"), &json!("local"))
    );
    app.database(
        &format!("/v1/organizations/{team}"),
        &owner,
        "first",
        "default",
    )
    .await;
    // A second group, in a second location: the free plan would refuse both.
    app.post(
        &format!("/v1/organizations/{team}/groups"),
        &owner,
        json!({"name": "second", "location": "aws-eu-west-1"}),
    )
    .await
    .expect(200);

    // Idle for longer than the free plan allows: not archived, it is not on the free plan.
    let later = atoll_meta::now_millis() + atoll_control::jobs::ARCHIVE_AFTER_MS + 60_000;
    let report = atoll_control::jobs::run_once(&app.state, "test", later)
        .await
        .unwrap();
    let archived = app
        .get(&format!("/v1/organizations/{team}/groups/default"), &owner)
        .await
        .expect(200)["group"]["archived"]
        .clone();
    assert_eq!(archived, false, "{report:?}");
}

#[tokio::test]
async fn an_organization_put_on_the_free_plan_gets_the_free_plan_limits() {
    let config = atoll_control::config::ControlConfig::default();
    let Some(app) = crate::harness::TestApp::start_with(config).await else {
        return;
    };
    let owner = app.user(&unique("owner")).await;
    let team = app.team(&owner, &unique("Frugal")).await;
    app.post(
        &format!("/v1/admin/organizations/{team}/plan"),
        &app.admin_token,
        json!({"plan": "starter"}),
    )
    .await
    .expect(200);
    // Its `default` group is the one group the free plan allows.
    let reply = app
        .post(
            &format!("/v1/organizations/{team}/groups"),
            &owner,
            json!({"name": "second", "location": "local"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (402, "quota_exceeded"));
    // Deletes are final.
    let prefix = format!("/v1/organizations/{team}");
    app.database(&prefix, &owner, "gone", "default").await;
    app.delete(&format!("{prefix}/databases/gone"), &owner)
        .await
        .expect(200);
    let deleted = app
        .get(&format!("{prefix}/deleted-databases"), &owner)
        .await
        .expect(200);
    assert_eq!(deleted["databases"], json!([]));
    // Idle groups are archived.
    let later = atoll_meta::now_millis() + atoll_control::jobs::ARCHIVE_AFTER_MS + 60_000;
    atoll_control::jobs::run_once(&app.state, "test", later)
        .await
        .unwrap();
    let group = app
        .get(&format!("{prefix}/groups/default"), &owner)
        .await
        .expect(200);
    assert_eq!(group["group"]["archived"], true);
}

#[tokio::test]
async fn the_operator_chooses_the_plan_new_organizations_start_on() {
    let mut config = atoll_control::config::ControlConfig::default();
    atoll_control::config::apply_plans_file(
        &mut config,
        r#"{"team": {"quotas": {"groups": 1}, "default": true}}"#,
    )
    .unwrap();
    let Some(app) = crate::harness::TestApp::start_with(config).await else {
        return;
    };
    let owner = app.user(&unique("owner")).await;
    let team = app.team(&owner, &unique("Acme")).await;
    let org = app
        .get(&format!("/v1/organizations/{team}"), &owner)
        .await
        .expect(200)["organization"]
        .clone();
    assert_eq!(org["plan_id"], "team");
    let reply = app
        .post(
            &format!("/v1/organizations/{team}/groups"),
            &owner,
            json!({"name": "second", "location": "local"}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (402, "quota_exceeded"));
}
