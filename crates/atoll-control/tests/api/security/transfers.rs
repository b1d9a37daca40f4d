//! Finding 7 — credentials follow access: after a database or a group moves to another
//! organization, no database or group token minted before the move works on the data
//! plane (the old owner no longer decides who reads the data); tokens the new owner mints
//! do. Atoll deliberately has no transition period here (docs/API.md, deviations).

use super::{http_url, mint, pipeline};
use crate::harness::{unique, TestApp};
use serde_json::json;

/// `alice` (who will give) and `bob`'s team `receiving` (with a `default` group and
/// `alice` as a member, so she may transfer into it).
struct Parties {
    alice: String,
    alice_name: String,
    bob: String,
    team: String,
}

async fn parties(app: &TestApp) -> Parties {
    let alice_name = unique("alice");
    let alice = app.user(&alice_name).await;
    let bob_name = unique("bob");
    let bob = app.user(&bob_name).await;
    let team = app.team(&bob, &unique("Receiving")).await;
    app.add_member(&team, &bob, &alice_name, "admin").await;
    Parties {
        alice,
        alice_name,
        bob,
        team,
    }
}

#[tokio::test]
async fn a_transferred_database_refuses_the_tokens_minted_before() {
    let app = app!();
    let p = parties(&app).await;
    let own = format!("/v1/organizations/{}", p.alice_name);
    app.database(&own, &p.alice, "moving", "default").await;
    let url = http_url(&app, &own, "moving", &p.alice).await;
    let db_token = mint(
        &app,
        &format!("{own}/databases/moving"),
        &p.alice,
        json!({}),
    )
    .await;
    let group_token = mint(&app, &format!("{own}/groups/default"), &p.alice, json!({})).await;
    for token in [&db_token, &group_token] {
        let (status, body) =
            pipeline(&app, &url, token, &["CREATE TABLE IF NOT EXISTS t (v)"]).await;
        assert_eq!(status, 200, "{body}");
    }

    app.post(
        &format!("{own}/databases/moving/transfer"),
        &p.alice,
        json!({"org": p.team}),
    )
    .await
    .expect(200);

    let theirs = format!("/v1/organizations/{}", p.team);
    let new_url = http_url(&app, &theirs, "moving", &p.bob).await;
    for (name, token) in [("database token", &db_token), ("group token", &group_token)] {
        let (status, body) = pipeline(&app, &new_url, token, &["SELECT count(*) FROM t"]).await;
        assert_eq!(status, 401, "the old owner's {name} still works: {body}");
    }
    // The new owner's tokens work, on the same data.
    let new_token = mint(
        &app,
        &format!("{theirs}/databases/moving"),
        &p.bob,
        json!({}),
    )
    .await;
    let (status, body) = pipeline(&app, &new_url, &new_token, &["SELECT count(*) FROM t"]).await;
    assert_eq!(status, 200, "{body}");
    let new_group_token = mint(&app, &format!("{theirs}/groups/default"), &p.bob, json!({})).await;
    let (status, body) = pipeline(
        &app,
        &new_url,
        &new_group_token,
        &["SELECT count(*) FROM t"],
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_transferred_group_refuses_its_database_and_group_tokens_minted_before() {
    let app = app!();
    let p = parties(&app).await;
    let own = format!("/v1/organizations/{}", p.alice_name);
    app.group(&p.alice_name, &p.alice, "moving").await;
    app.database(&own, &p.alice, "first", "moving").await;
    app.database(&own, &p.alice, "second", "moving").await;
    let urls = [
        http_url(&app, &own, "first", &p.alice).await,
        http_url(&app, &own, "second", &p.alice).await,
    ];
    let db_token = mint(&app, &format!("{own}/databases/first"), &p.alice, json!({})).await;
    let group_token = mint(&app, &format!("{own}/groups/moving"), &p.alice, json!({})).await;
    let (status, body) = pipeline(&app, &urls[0], &db_token, &["CREATE TABLE t (v)"]).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = pipeline(&app, &urls[1], &group_token, &["CREATE TABLE t (v)"]).await;
    assert_eq!(status, 200, "{body}");

    app.post(
        &format!("{own}/groups/moving/transfer"),
        &p.alice,
        json!({"organization": p.team}),
    )
    .await
    .expect(200);

    let theirs = format!("/v1/organizations/{}", p.team);
    let new_urls = [
        http_url(&app, &theirs, "first", &p.bob).await,
        http_url(&app, &theirs, "second", &p.bob).await,
    ];
    let (status, body) = pipeline(&app, &new_urls[0], &db_token, &["SELECT 1"]).await;
    assert_eq!(status, 401, "the old database token still works: {body}");
    for url in &new_urls {
        let (status, body) = pipeline(&app, url, &group_token, &["SELECT 1"]).await;
        assert_eq!(status, 401, "the old group token still works: {body}");
    }
    let new_group_token = mint(&app, &format!("{theirs}/groups/moving"), &p.bob, json!({})).await;
    let new_db_token = mint(
        &app,
        &format!("{theirs}/databases/second"),
        &p.bob,
        json!({}),
    )
    .await;
    for (url, token) in [
        (&new_urls[0], &new_group_token),
        (&new_urls[1], &new_group_token),
        (&new_urls[1], &new_db_token),
    ] {
        let (status, body) = pipeline(&app, url, token, &["SELECT count(*) FROM t"]).await;
        assert_eq!(status, 200, "{body}");
    }
}

#[tokio::test]
async fn a_refused_transfer_leaves_the_tokens_working() {
    let app = app!();
    let p = parties(&app).await;
    let own = format!("/v1/organizations/{}", p.alice_name);
    let theirs = format!("/v1/organizations/{}", p.team);
    app.database(&own, &p.alice, "clash", "default").await;
    app.database(&theirs, &p.bob, "clash", "default").await;
    let url = http_url(&app, &own, "clash", &p.alice).await;
    let token = mint(&app, &format!("{own}/databases/clash"), &p.alice, json!({})).await;
    let reply = app
        .post(
            &format!("{own}/databases/clash/transfer"),
            &p.alice,
            json!({"org": p.team}),
        )
        .await;
    assert_eq!(reply.status, 409, "{}", reply.body);
    // Nothing moved, so nothing was rotated.
    let (status, body) = pipeline(&app, &url, &token, &["SELECT 1"]).await;
    assert_eq!(status, 200, "{body}");
}

/// Issue 26: moving a database out of an organization is giving it away, so it takes what
/// moving a group takes: admin or owner of the organization it leaves, and never a
/// group-scoped token. A member could otherwise carry a team database (and its data) into
/// their personal organization, where the team no longer decides who reads it.
#[tokio::test]
async fn only_an_admin_may_transfer_a_database_out_of_the_team() {
    let app = app!();
    let owner_name = unique("owner");
    let owner = app.user(&owner_name).await;
    let team = app.team(&owner, &unique("Team")).await;
    let theirs = format!("/v1/organizations/{team}");
    let mut logins = Vec::new();
    for role in ["member", "viewer", "admin"] {
        let name = unique(role);
        let login = app.user(&name).await;
        app.add_member(&team, &owner, &name, role).await;
        logins.push((role, name, login));
    }
    app.database(&theirs, &owner, "kept", "default").await;
    let full_access = app
        .api_token(
            &owner,
            json!({"organization": team, "group": "default", "scopes": ["full-access"]}),
        )
        .await;

    // Each tries to move it into a personal organization, where the caller is owner
    // (`personal_login` looks there afterwards).
    let attempts = [
        ("member", &logins[0].2, &logins[0].1, &logins[0].2),
        ("viewer", &logins[1].2, &logins[1].1, &logins[1].2),
        ("full-access group token", &full_access, &owner_name, &owner),
    ];
    for (who, token, personal, personal_login) in attempts {
        let reply = app
            .post(
                &format!("{theirs}/databases/kept/transfer"),
                token,
                json!({"org": personal}),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "forbidden"),
            "a {who} transferred the team's database: {}",
            reply.body
        );
        // It is still the team's, and nowhere else.
        app.get(&format!("{theirs}/databases/kept"), &owner)
            .await
            .expect(200);
        let elsewhere = app
            .get(
                &format!("/v1/organizations/{personal}/databases/kept"),
                personal_login,
            )
            .await;
        assert_eq!(elsewhere.status, 404, "{}", elsewhere.body);
    }

    // An admin may.
    let (_, admin_name, admin) = &logins[2];
    app.post(
        &format!("{theirs}/databases/kept/transfer"),
        admin,
        json!({"org": admin_name}),
    )
    .await
    .expect(200);
    app.get(
        &format!("/v1/organizations/{admin_name}/databases/kept"),
        admin,
    )
    .await
    .expect(200);
    let gone = app.get(&format!("{theirs}/databases/kept"), &owner).await;
    assert_eq!(gone.status, 404, "{}", gone.body);
}
