//! `/v1/organizations/{org}/audit-logs`: what the handlers record, newest first, paged;
//! paid plans and admins only.

use crate::harness::{unique, Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

const CLI: &str = "turso-cli/1.0 (linux/amd64)";
const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36";

impl TestApp {
    async fn cli(&self, method: Method, path: &str, token: &str, body: Option<Value>) -> Reply {
        self.call_as(Some(CLI), method, path, Some(token), body)
            .await
    }

    async fn set_plan(&self, org: &str, plan: &str) {
        self.post(
            &format!("/v1/admin/organizations/{org}/plan"),
            &self.admin_token,
            json!({"plan": plan}),
        )
        .await
        .expect(200);
    }

    /// Every entry of the organization's log, newest first.
    async fn audit_log(&self, org: &str, token: &str) -> Vec<Value> {
        let body = self
            .get(
                &format!("/v1/organizations/{org}/audit-logs?page_size=1000"),
                token,
            )
            .await
            .expect(200);
        body["audit_logs"].as_array().unwrap().clone()
    }
}

fn codes(entries: &[Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect()
}

/// The first (newest) entry with this code.
fn entry<'a>(entries: &'a [Value], code: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["code"] == code)
        .unwrap_or_else(|| panic!("no {code} entry in {entries:#?}"))
}

#[tokio::test]
async fn a_session_is_recorded_newest_first_with_author_origin_and_data() {
    let app = app!();
    let owner = unique("owner");
    let owner_token = app.user(&owner).await;
    let (admin, viewer, leaver, removed) = (
        unique("admin"),
        unique("viewer"),
        unique("leaver"),
        unique("removed"),
    );
    let admin_token = app.user(&admin).await;
    app.user(&viewer).await;
    let leaver_token = app.user(&leaver).await;
    app.user(&removed).await;

    // Created through the API (no User-Agent), made paid by the instance administrator.
    let org = app.team(&owner_token, &unique("Audited")).await;
    let prefix = format!("/v1/organizations/{org}");
    app.set_plan(&org, "scaler").await;

    // Members, through the CLI.
    for (user, role) in [
        (&admin, "admin"),
        (&viewer, "viewer"),
        (&leaver, "member"),
        (&removed, "member"),
    ] {
        app.cli(
            Method::POST,
            &format!("{prefix}/members"),
            &owner_token,
            Some(json!({"username": user, "role": role})),
        )
        .await
        .expect(200);
    }
    app.delete(&format!("{prefix}/members/{leaver}"), &leaver_token)
        .await
        .expect(200);
    app.delete(&format!("{prefix}/members/{removed}"), &owner_token)
        .await
        .expect(200);

    // A group, protected and unprotected; a no-op toggle records nothing.
    app.cli(
        Method::POST,
        &format!("{prefix}/groups"),
        &owner_token,
        Some(json!({"Name": "g", "Location": "local"})),
    )
    .await
    .expect(200);
    let group_config = format!("{prefix}/groups/g/configuration");
    for protect in [true, true, false] {
        app.patch(
            &group_config,
            &owner_token,
            json!({"delete_protection": protect}),
        )
        .await
        .expect(200);
    }
    app.post(
        &format!("{prefix}/groups/g/unarchive"),
        &owner_token,
        json!({}),
    )
    .await
    .expect(200);

    // A database in it, protected and unprotected, with tokens; from a browser.
    app.call_as(
        Some(BROWSER),
        Method::POST,
        &format!("{prefix}/databases"),
        Some(&owner_token),
        Some(json!({"name": "app", "group": "g"})),
    )
    .await
    .expect(200);
    let db_config = format!("{prefix}/databases/app/configuration");
    app.patch(&db_config, &owner_token, json!({"delete_protection": true}))
        .await
        .expect(200);
    app.patch(
        &db_config,
        &owner_token,
        json!({"delete_protection": false, "block_writes": true}),
    )
    .await
    .expect(200);
    app.cli(
        Method::POST,
        &format!("{prefix}/databases/app/auth/tokens?authorization=read-only"),
        &owner_token,
        Some(json!({})),
    )
    .await
    .expect(200);
    app.post(
        &format!("{prefix}/groups/g/auth/tokens"),
        &owner_token,
        json!({}),
    )
    .await
    .expect(200);

    // Platform API tokens minted for the organization.
    app.post(
        "/v1/auth/api-tokens/org-wide",
        &owner_token,
        json!({"organization": org}),
    )
    .await
    .expect(200);
    app.post(
        "/v1/auth/api-tokens/group-only",
        &owner_token,
        json!({"organization": org, "group": "g", "scopes": ["read-only"]}),
    )
    .await
    .expect(200);

    // The organization's overages, by the admin; then the deletes.
    app.patch(&prefix, &admin_token, json!({"overages": true}))
        .await
        .expect(200);
    app.delete(&format!("{prefix}/databases/app"), &owner_token)
        .await
        .expect(200);
    app.delete(&format!("{prefix}/groups/g"), &owner_token)
        .await
        .expect(200);

    let entries = app.audit_log(&org, &admin_token).await;
    let mut expected = vec![
        "org-create",
        "org-plan-update",
        "org-member-add",
        "org-member-add",
        "org-member-add",
        "org-member-add",
        "org-member-leave",
        "org-member-rm",
        "group-create",
        "group-protect",
        "group-unprotect",
        "group-unarchive",
        "db-create",
        "db-protect",
        "db-unprotect",
        "db-configure",
        "db-token-create",
        "group-token-create",
        "user-token-create",
        "user-token-create",
        "org-set-overages",
        "db-delete",
        "group-delete",
    ];
    expected.reverse();
    assert_eq!(codes(&entries), expected);

    // Authors and origins.
    let author_origin = |e: &Value| {
        (
            e["author"].as_str().unwrap().to_string(),
            e["origin"].as_str().unwrap().to_string(),
        )
    };
    let created = entry(&entries, "org-create");
    assert_eq!(author_origin(created), (owner.clone(), "api".into()));
    assert_eq!(created["data"]["organization"], org.as_str());
    let plan = entry(&entries, "org-plan-update");
    assert_eq!(author_origin(plan), ("admin".into(), "api".into()));
    assert_eq!(
        plan["data"],
        // A new team organization starts on the instance's default plan.
        json!({"plan": "scaler", "previous_plan": "enterprise"})
    );
    let added = entries
        .iter()
        .rev()
        .find(|e| e["code"] == "org-member-add")
        .unwrap();
    assert_eq!(author_origin(added), (owner.clone(), "cli".into()));
    assert_eq!(added["data"], json!({"username": admin, "role": "admin"}));
    let left = entry(&entries, "org-member-leave");
    assert_eq!(author_origin(left), (leaver.clone(), "api".into()));
    assert_eq!(left["data"]["username"], leaver.as_str());
    assert_eq!(
        entry(&entries, "org-member-rm")["data"]["username"],
        removed.as_str()
    );
    assert_eq!(
        author_origin(entry(&entries, "group-create")),
        (owner.clone(), "cli".into())
    );
    assert_eq!(
        entry(&entries, "group-create")["data"],
        json!({"group": "g", "location": "local"})
    );
    let db_created = entry(&entries, "db-create");
    assert_eq!(author_origin(db_created), (owner.clone(), "web".into()));
    assert_eq!(db_created["data"], json!({"database": "app", "group": "g"}));
    assert_eq!(
        entry(&entries, "db-configure")["data"],
        json!({"database": "app", "group": "g", "configuration": {"block_writes": true}})
    );
    let db_token = entry(&entries, "db-token-create");
    assert_eq!(author_origin(db_token), (owner.clone(), "cli".into()));
    assert_eq!(db_token["data"]["authorization"], "read-only");
    let tokens: Vec<_> = entries
        .iter()
        .filter(|e| e["code"] == "user-token-create")
        .map(|e| e["data"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tokens, ["group-only", "org-wide"]);
    assert_eq!(
        entry(&entries, "user-token-create")["data"]["scopes"],
        json!(["read"])
    );
    assert_eq!(
        author_origin(entry(&entries, "org-set-overages")),
        (admin.clone(), "api".into())
    );
    let deleted = entry(&entries, "db-delete");
    assert_eq!(deleted["data"]["database"], "app");
    assert_eq!(deleted["data"]["restorable"], true);
    assert_eq!(
        entry(&entries, "group-delete")["data"],
        json!({"group": "g"})
    );

    // Every entry has a message and an RFC 3339 time, newest first.
    let times: Vec<_> = entries
        .iter()
        .map(|e| e["created_at"].as_str().unwrap().to_string())
        .collect();
    for (e, t) in entries.iter().zip(&times) {
        assert!(!e["message"].as_str().unwrap().is_empty(), "{e}");
        assert!(
            t.len() == 20 && t.ends_with('Z') && t.as_bytes()[10] == b'T',
            "{t}"
        );
    }
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
}

#[tokio::test]
async fn pages_count_from_one_with_totals() {
    let app = app!();
    let owner_token = app.user(&unique("owner")).await;
    let org = app.team(&owner_token, &unique("Paged")).await;
    app.set_plan(&org, "pro").await;
    for n in 0..10 {
        app.group(&org, &owner_token, &format!("g{n}")).await;
    }
    // org-create, org-plan-update, then ten group-create: 12 entries.
    let path = format!("/v1/organizations/{org}/audit-logs");
    let all = app.audit_log(&org, &owner_token).await;
    assert_eq!(all.len(), 12);
    assert_eq!(all[0]["data"]["group"], "g9");
    assert_eq!(all[11]["code"], "org-create");

    let body = app.get(&path, &owner_token).await.expect(200);
    assert_eq!(
        body["pagination"],
        json!({"page": 1, "page_size": 100, "total_pages": 1, "total_rows": 12})
    );
    assert_eq!(body["audit_logs"].as_array().unwrap().len(), 12);

    let body = app
        .get(&format!("{path}?page=2&page_size=5"), &owner_token)
        .await
        .expect(200);
    assert_eq!(
        body["pagination"],
        json!({"page": 2, "page_size": 5, "total_pages": 3, "total_rows": 12})
    );
    assert_eq!(body["audit_logs"].as_array().unwrap(), &all[5..10]);
    let body = app
        .get(&format!("{path}?page=3&page_size=5"), &owner_token)
        .await
        .expect(200);
    assert_eq!(body["audit_logs"].as_array().unwrap(), &all[10..]);
    let body = app
        .get(&format!("{path}?page=4&page_size=5"), &owner_token)
        .await
        .expect(200);
    assert!(body["audit_logs"].as_array().unwrap().is_empty());
    assert_eq!(body["pagination"]["total_rows"], 12);
    // The CLI's defaults.
    let body = app
        .get(&format!("{path}?page=1&page_size=25"), &owner_token)
        .await
        .expect(200);
    assert_eq!(body["pagination"]["total_pages"], 1);
    app.get(&format!("{path}?page_size=1000"), &owner_token)
        .await
        .expect(200);

    for query in [
        "page=0",
        "page=-1",
        "page=abc",
        "page=",
        "page_size=0",
        "page_size=1001",
        "page_size=ten",
    ] {
        let reply = app.get(&format!("{path}?{query}"), &owner_token).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_request"),
            "{query}"
        );
    }
}

#[tokio::test]
async fn the_free_plan_admins_and_members_only() {
    let app = app!();
    let owner_token = app.user(&unique("owner")).await;
    let (admin, member, viewer, stranger) = (
        unique("admin"),
        unique("member"),
        unique("viewer"),
        unique("stranger"),
    );
    let admin_token = app.user(&admin).await;
    let member_token = app.user(&member).await;
    let viewer_token = app.user(&viewer).await;
    let stranger_token = app.user(&stranger).await;
    let org = app.team(&owner_token, &unique("Gated")).await;
    for (user, role) in [(&admin, "admin"), (&member, "member"), (&viewer, "viewer")] {
        app.add_member(&org, &owner_token, user, role).await;
    }
    app.group(&org, &owner_token, "g").await;
    // New organizations start on the instance's default plan; this one is put on the free plan.
    app.set_plan(&org, "starter").await;
    let path = format!("/v1/organizations/{org}/audit-logs");

    // Starter: refused with the code the Turso CLI recognises.
    for token in [&owner_token, &admin_token] {
        let reply = app.get(&path, token).await;
        assert_eq!(reply.status, 403);
        assert_eq!(
            reply.body,
            json!({
                "error": "Audit logs are not available on the free plan: upgrade the organization's plan",
                "code": "feature_not_available_for_starter_plan"
            })
        );
    }
    // Entries were recorded all along: upgrading shows them.
    app.set_plan(&org, "developer").await;
    let entries = app.audit_log(&org, &admin_token).await;
    assert_eq!(entries.len(), 7, "{entries:#?}");

    for token in [&member_token, &viewer_token] {
        let reply = app.get(&path, token).await;
        assert_eq!((reply.status, reply.code()), (403, "forbidden"));
    }
    let reply = app.get(&path, &stranger_token).await;
    assert_eq!(
        (reply.status, reply.code()),
        (404, "organization_not_found")
    );
    let reply = app
        .get("/v1/organizations/no-such-org/audit-logs", &owner_token)
        .await;
    assert_eq!(reply.status, 404);

    // Organization-scoped tokens read it; group-scoped tokens never.
    let org_scoped = app
        .api_token(&owner_token, json!({"organization": org}))
        .await;
    app.get(&path, &org_scoped).await.expect(200);
    let group_scoped = app
        .api_token(
            &owner_token,
            json!({"organization": org, "group": "g", "scopes": ["full-access"]}),
        )
        .await;
    assert_eq!(app.get(&path, &group_scoped).await.status, 403);

    // Back on the free plan, refused again.
    app.set_plan(&org, "starter").await;
    let reply = app.get(&path, &owner_token).await;
    assert_eq!(
        (reply.status, reply.code()),
        (403, "feature_not_available_for_starter_plan")
    );
}

#[tokio::test]
async fn personal_organizations_invites_roles_and_token_revocation() {
    let app = app!();
    let alice = unique("alice");
    let alice_token = app.user(&alice).await;
    let bob = unique("bob");
    let bob_token = app.user(&bob).await;

    // The CLI reads a personal organization's log under the username.
    app.set_plan(&alice, "scaler").await;
    app.post("/v1/auth/api-tokens/everywhere", &alice_token, json!({}))
        .await
        .expect(200);
    app.delete("/v1/auth/api-tokens/everywhere", &alice_token)
        .await
        .expect(200);
    let personal = app.audit_log(&alice, &alice_token).await;
    assert_eq!(
        codes(&personal),
        [
            "user-token-revoke",
            "user-token-create",
            "org-plan-update",
            "user-signup"
        ]
    );
    let signup = entry(&personal, "user-signup");
    assert_eq!(signup["author"], "admin");
    assert_eq!(signup["data"], json!({"username": alice}));

    // Invites, their acceptance, a role change, a token revoked by id.
    let org = app.team(&alice_token, &unique("Team")).await;
    let prefix = format!("/v1/organizations/{org}");
    app.set_plan(&org, "scaler").await;
    app.post(
        &format!("/v2/organizations/{org}/invites"),
        &alice_token,
        json!({"username": bob, "role": "viewer"}),
    )
    .await
    .expect(200);
    app.post(
        &format!("/v2/organizations/{org}/invites"),
        &alice_token,
        json!({"email": "someone@example.com"}),
    )
    .await
    .expect(200);
    app.delete(
        &format!("/v2/organizations/{org}/invites/someone@example.com"),
        &alice_token,
    )
    .await
    .expect(200);
    app.post(
        &format!("/v1/user/invites/{org}/accept"),
        &bob_token,
        json!({}),
    )
    .await
    .expect(200);
    app.patch(
        &format!("{prefix}/members/{bob}"),
        &alice_token,
        json!({"role": "member"}),
    )
    .await
    .expect(200);
    let minted = app
        .post(
            "/v1/auth/api-tokens/bobs",
            &bob_token,
            json!({"organization": org}),
        )
        .await
        .expect(200);
    let id = minted["id"].as_str().unwrap();
    app.delete(&format!("{prefix}/api-tokens/{id}"), &alice_token)
        .await
        .expect(200);

    let entries = app.audit_log(&org, &alice_token).await;
    assert_eq!(
        codes(&entries),
        [
            "user-token-revoke",
            "user-token-create",
            "org-member-role-update",
            "org-member-add",
            "org-invite-rm",
            "org-invite-create",
            "org-invite-create",
            "org-plan-update",
            "org-create",
        ]
    );
    let joined = entry(&entries, "org-member-add");
    assert_eq!(joined["author"], bob.as_str());
    assert_eq!(
        joined["data"],
        json!({"username": bob, "role": "viewer", "invite": true})
    );
    assert_eq!(
        entry(&entries, "org-member-role-update")["data"],
        json!({"username": bob, "role": "member", "previous_role": "viewer"})
    );
    let revoked = entry(&entries, "user-token-revoke");
    assert_eq!(revoked["author"], alice.as_str());
    assert_eq!(revoked["data"], json!({"name": "bobs", "id": id}));
    // Alice's own log kept only her own tokens.
    assert_eq!(app.audit_log(&alice, &alice_token).await.len(), 4);
}

#[tokio::test]
async fn transfers_are_recorded_on_both_sides() {
    let app = app!();
    let owner_token = app.user(&unique("owner")).await;
    let (from, to) = (
        app.team(&owner_token, &unique("From")).await,
        app.team(&owner_token, &unique("To")).await,
    );
    for org in [&from, &to] {
        app.set_plan(org, "scaler").await;
    }
    app.group(&from, &owner_token, "moving").await;
    app.database(
        &format!("/v1/organizations/{from}"),
        &owner_token,
        "travelling",
        "default",
    )
    .await;
    app.post(
        &format!("/v1/organizations/{from}/databases/travelling/transfer"),
        &owner_token,
        json!({"org": to}),
    )
    .await
    .expect(200);
    app.post(
        &format!("/v1/organizations/{from}/groups/moving/transfer"),
        &owner_token,
        json!({"organization": to}),
    )
    .await
    .expect(200);

    let sent = app.audit_log(&from, &owner_token).await;
    assert_eq!(codes(&sent)[..2], ["group-transfer", "db-transfer"]);
    assert_eq!(sent[0]["data"], json!({"group": "moving", "to": to}));
    assert_eq!(
        sent[1]["data"],
        json!({"database": "travelling", "group": "default", "to": to})
    );
    let received = app.audit_log(&to, &owner_token).await;
    assert_eq!(codes(&received)[..2], ["group-transfer", "db-transfer"]);
    assert_eq!(
        received[0]["data"],
        json!({"group": "moving", "from": from})
    );
    assert_eq!(
        received[1]["data"],
        json!({"database": "travelling", "group": "default", "from": from})
    );
}

#[tokio::test]
async fn actions_the_contract_names_no_code_for_get_atolls_own() {
    let app = app!();
    let owner_token = app.user(&unique("owner")).await;
    let org = app.team(&owner_token, &unique("Extra")).await;
    let prefix = format!("/v1/organizations/{org}");
    app.set_plan(&org, "scaler").await;
    app.group(&org, &owner_token, "g").await;
    app.post(
        &format!("{prefix}/groups/g/rename"),
        &owner_token,
        json!({"name": "h"}),
    )
    .await
    .expect(200);
    let location = format!("{prefix}/groups/h/locations/aws-us-east-1");
    app.post(&location, &owner_token, json!({}))
        .await
        .expect(200);
    app.delete(&location, &owner_token).await.expect(200);
    app.post(
        &format!("{prefix}/groups/h/auth/rotate"),
        &owner_token,
        json!({}),
    )
    .await
    .expect(200);
    let created = app
        .post(
            &format!("{prefix}/databases"),
            &owner_token,
            json!({"name": "db", "group": "h"}),
        )
        .await
        .expect(200);
    let id = created["database"]["DbId"].as_str().unwrap();
    app.post(
        &format!("{prefix}/databases/db/auth/rotate"),
        &owner_token,
        json!({}),
    )
    .await
    .expect(200);
    app.delete(&format!("{prefix}/databases/db"), &owner_token)
        .await
        .expect(200);
    app.post(
        &format!("{prefix}/deleted-databases/{id}/restore"),
        &owner_token,
        json!({}),
    )
    .await
    .expect(200);
    app.post_file(
        &format!("{prefix}/databases/dumps"),
        &owner_token,
        "CREATE TABLE t (x);",
    )
    .await
    .expect(200);

    let entries = app.audit_log(&org, &owner_token).await;
    assert_eq!(
        codes(&entries),
        [
            "db-dump-upload",
            "db-restore",
            "db-delete",
            "db-rotate-creds",
            "db-create",
            "group-rotate-creds",
            "group-location-rm",
            "group-location-add",
            "group-rename",
            "group-create",
            "org-plan-update",
            "org-create",
        ]
    );
    assert_eq!(
        entry(&entries, "group-rename")["data"],
        json!({"group": "h", "previous_name": "g"})
    );
    assert_eq!(
        entry(&entries, "group-location-add")["data"],
        json!({"group": "h", "location": "aws-us-east-1"})
    );
    assert_eq!(
        entry(&entries, "db-restore")["data"],
        json!({"database": "db", "group": "h", "id": id})
    );
}

/// The filters (an Atoll extension): exact code, author, origin, a time range; pages and
/// totals count the matches; an unfiltered list stays Turso's.
#[tokio::test]
async fn filters_narrow_the_log_on_the_server() {
    let app = app!();
    let owner = unique("owner");
    let owner_token = app.user(&owner).await;
    let admin = unique("admin");
    let admin_token = app.user(&admin).await;
    let org = app.team(&owner_token, &unique("Filtered")).await;
    app.set_plan(&org, "pro").await;
    app.add_member(&org, &owner_token, &admin, "admin").await;
    for n in 0..3 {
        app.group(&org, &owner_token, &format!("o{n}")).await;
    }
    // Well apart in time from the entries before it (the bound is checked to the ms).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let before_cli = atoll_meta::now_millis();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let reply = app
        .cli(
            Method::POST,
            &format!("/v1/organizations/{org}/groups"),
            &admin_token,
            Some(json!({"name": "a0", "location": "aws-us-east-1"})),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let path = format!("/v1/organizations/{org}/audit-logs");
    let all = app.audit_log(&org, &owner_token).await;

    let list = |query: String| {
        let app = &app;
        let path = &path;
        let token = &owner_token;
        async move { app.get(&format!("{path}?{query}"), token).await.expect(200) }
    };
    let body = list("code=group-create".into()).await;
    assert_eq!(body["pagination"]["total_rows"], 4);
    assert!(codes(body["audit_logs"].as_array().unwrap())
        .iter()
        .all(|c| *c == "group-create"));
    let body = list(format!("code=group-create&author={admin}")).await;
    assert_eq!(body["pagination"]["total_rows"], 1);
    assert_eq!(body["audit_logs"][0]["data"]["group"], "a0");
    assert_eq!(body["audit_logs"][0]["origin"], "cli");
    let body = list("origin=cli".into()).await;
    assert_eq!(body["pagination"]["total_rows"], 1);
    // Pages count the matches: 4 group creations, 3 a page.
    let body = list("code=group-create&page=2&page_size=3".into()).await;
    assert_eq!(
        body["pagination"],
        json!({"page": 2, "page_size": 3, "total_pages": 2, "total_rows": 4})
    );
    assert_eq!(body["audit_logs"].as_array().unwrap().len(), 1);
    // Time: from (included) and to (excluded).
    let since = rfc3339_millis(before_cli);
    let body = list(format!("from={}", urlencode(&since))).await;
    assert_eq!(
        codes(body["audit_logs"].as_array().unwrap()),
        ["group-create"],
        "since {since}: {body:#}\nall: {all:#?}"
    );
    let body = list(format!("to={}", urlencode(&since))).await;
    assert_eq!(
        body["pagination"]["total_rows"].as_u64().unwrap() + 1,
        all.len() as u64
    );
    // Blank fields filter nothing; the unfiltered answer is unchanged.
    let body = list("code=&author=&origin=&page_size=1000".into()).await;
    assert_eq!(body["audit_logs"].as_array().unwrap(), &all);
    // Exact matches: no prefix, no pattern, no SQL.
    for query in ["code=group", "code=%25", "author=%27%20OR%20%271%27=%271"] {
        let body = list(query.into()).await;
        assert_eq!(body["pagination"]["total_rows"], 0, "{query}");
    }
    // Bad values say which.
    let long = "x".repeat(201);
    for query in [
        "from=yesterday".to_string(),
        "to=2026-13-01T00:00:00Z".to_string(),
        "from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z".to_string(),
        format!("code={long}"),
    ] {
        let reply = app.get(&format!("{path}?{query}"), &owner_token).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_request"),
            "{query}"
        );
    }
    // The filters see only this organization's log: another organization's admin asking
    // for this author's entries in their own log finds none there.
    let other = app.team(&admin_token, &unique("Other")).await;
    app.set_plan(&other, "pro").await;
    let body = app
        .get(
            &format!("/v1/organizations/{other}/audit-logs?author={owner}"),
            &admin_token,
        )
        .await
        .expect(200);
    assert_eq!(body["pagination"]["total_rows"], 0);
}

fn rfc3339_millis(millis: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn urlencode(text: &str) -> String {
    text.replace(':', "%3A").replace('+', "%2B")
}
