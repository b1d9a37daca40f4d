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
