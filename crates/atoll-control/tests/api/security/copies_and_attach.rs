//! Finding 3 — group escape through copies and attach permissions: a token pinned to one
//! group must not reach another group's data by copying a database of that group into its
//! own, nor by minting a database token that may `ATTACH` it. It may copy and attach
//! exactly what it could read itself (`GET` of the database), and answers as that `GET`
//! would: 403 for another group of the organization.

use super::{http_url, mint, pipeline};
use crate::harness::{unique, TestApp};
use serde_json::json;

struct Groups {
    org: String,
    owner: String,
    /// Pinned to group A with `read`, `db:create`, `db:mint-token` and `group:mint-token`.
    group_a_token: String,
    group_a: String,
    group_b: String,
}

/// A team with groups A and B; B holds `secret` (with a row in it), A holds `mine`.
async fn two_groups(app: &TestApp) -> Groups {
    let owner = app.user(&unique("owner")).await;
    let org = app.team(&owner, &unique("Two Groups")).await;
    let (group_a, group_b) = (unique("a"), unique("b"));
    app.group(&org, &owner, &group_a).await;
    app.group(&org, &owner, &group_b).await;
    let prefix = format!("/v1/organizations/{org}");
    app.database(&prefix, &owner, "secret", &group_b).await;
    app.database(&prefix, &owner, "mine", &group_a).await;
    let url = http_url(app, &prefix, "secret", &owner).await;
    let token = mint(
        app,
        &format!("{prefix}/databases/secret"),
        &owner,
        json!({}),
    )
    .await;
    let (status, body) = pipeline(
        app,
        &url,
        &token,
        &[
            "CREATE TABLE s (v)",
            "INSERT INTO s VALUES ('group B only')",
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let group_a_token = app
        .api_token(
            &owner,
            json!({"organization": org, "group": group_a,
                   "scopes": ["read", "db:create", "db:mint-token", "group:mint-token"]}),
        )
        .await;
    Groups {
        org,
        owner,
        group_a_token,
        group_a,
        group_b,
    }
}

#[tokio::test]
async fn a_group_token_cannot_copy_a_database_of_another_group() {
    let app = app!();
    let world = two_groups(&app).await;
    let prefix = format!("/v1/organizations/{}", world.org);

    // What GET of the source answers this token...
    let get = app
        .get(&format!("{prefix}/databases/secret"), &world.group_a_token)
        .await;
    assert_eq!(get.status, 403, "{}", get.body);
    // ...is what a copy of it into the token's own group answers.
    let copy = app
        .post(
            &format!("{prefix}/databases"),
            &world.group_a_token,
            json!({"name": "loot", "group": world.group_a,
                   "seed": {"type": "database", "name": "secret"}}),
        )
        .await;
    assert_eq!(
        (copy.status, copy.code()),
        (403, "forbidden"),
        "{}",
        copy.body
    );
    // The Turso CLI names the source in `value`.
    let copy = app
        .post(
            &format!("{prefix}/databases"),
            &world.group_a_token,
            json!({"name": "loot", "group": world.group_a,
                   "seed": {"type": "database", "value": "secret"}}),
        )
        .await;
    assert_eq!(copy.status, 403, "{}", copy.body);
    assert_eq!(
        app.get(&format!("{prefix}/databases/loot"), &world.owner)
            .await
            .status,
        404,
        "nothing was created"
    );
    // Unknown sources stay a 400, as before.
    let ghost = app
        .post(
            &format!("{prefix}/databases"),
            &world.group_a_token,
            json!({"name": "loot", "group": world.group_a,
                   "seed": {"type": "database", "name": "ghost"}}),
        )
        .await;
    assert_eq!((ghost.status, ghost.code()), (400, "invalid_seed"));

    // The token copies its own group's databases, and an organization-level credential
    // copies across groups of its organization.
    app.post(
        &format!("{prefix}/databases"),
        &world.group_a_token,
        json!({"name": "own-copy", "group": world.group_a,
               "seed": {"type": "database", "name": "mine"}}),
    )
    .await
    .expect(200);
    app.post(
        &format!("{prefix}/databases"),
        &world.owner,
        json!({"name": "owner-copy", "group": world.group_a,
               "seed": {"type": "database", "name": "secret"}}),
    )
    .await
    .expect(200);
    let _ = world.group_b;
}

#[tokio::test]
async fn a_group_token_cannot_mint_attach_rights_on_another_group() {
    let app = app!();
    let world = two_groups(&app).await;
    let prefix = format!("/v1/organizations/{}", world.org);
    let attach = |names: &[&str]| json!({"permissions": {"read_attach": {"databases": names}}});

    for path in [
        format!("{prefix}/databases/mine/auth/tokens"),
        format!("{prefix}/groups/{}/auth/tokens", world.group_a),
    ] {
        let reply = app
            .post(&path, &world.group_a_token, attach(&["secret"]))
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "forbidden"),
            "{path}: {}",
            reply.body
        );
        // One forbidden name spoils the list.
        let reply = app
            .post(&path, &world.group_a_token, attach(&["mine", "secret"]))
            .await;
        assert_eq!(reply.status, 403, "{path}: {}", reply.body);
        // Unknown names are refused as before.
        let reply = app
            .post(&path, &world.group_a_token, attach(&["ghost"]))
            .await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        // Its own group's databases are fine.
        app.post(&path, &world.group_a_token, attach(&["mine"]))
            .await
            .expect(200);
    }

    // An organization-level credential may grant attach across its groups, and the
    // token then reads the other group's database (with its consent): the permission is
    // real, so refusing it above is what keeps group B's data in group B.
    app.patch(
        &format!("{prefix}/databases/secret/configuration"),
        &world.owner,
        json!({"allow_attach": true}),
    )
    .await
    .expect(200);
    let token = mint(
        &app,
        &format!("{prefix}/databases/mine"),
        &world.owner,
        attach(&["secret"]),
    )
    .await;
    let url = http_url(&app, &prefix, "mine", &world.owner).await;
    let (status, body) = pipeline(
        &app,
        &url,
        &token,
        &["ATTACH 'secret' AS s", "SELECT v FROM s.s"],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["results"][1]["response"]["result"]["rows"][0][0]["value"], "group B only",
        "{body}"
    );
}
