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

/// Issue 26, finding 5: a transfer starts the database's history anew. The old owner's
/// history holds every row it ever wrote, deleted ones included; the new owner must reach
/// none of it through a point-in-time copy or restore, the backups listing, an embedded
/// replica's sync from the start, a file export, or the objects themselves.
mod history {
    use super::super::{http_url, mint, pipeline};
    use super::parties;
    use crate::harness::{unique, TestApp};
    use serde_json::json;

    /// Now, to the millisecond (restores are asked for to the millisecond).
    fn now() -> String {
        let t = time::OffsetDateTime::now_utc();
        let t = t
            .replace_nanosecond(t.millisecond() as u32 * 1_000_000)
            .unwrap();
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    }

    /// An RFC 3339 instant, comparable.
    fn instant(text: &str) -> time::OffsetDateTime {
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).unwrap()
    }

    async fn pause() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    fn holds(haystack: &[u8], needle: &str) -> bool {
        haystack
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }

    /// The objects of database `id` in the node's object storage that hold `secret`.
    fn stored_with(app: &TestApp, id: &str, secret: &str) -> Vec<String> {
        let dir = app.node.data_dir().join("storage").join("dbs").join(id);
        let mut found = Vec::new();
        let mut pending = vec![dir];
        while let Some(dir) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                } else if holds(&std::fs::read(&path).unwrap_or_default(), secret) {
                    found.push(path.display().to_string());
                }
            }
        }
        found
    }

    async fn db_id(app: &TestApp, prefix: &str, name: &str, token: &str) -> String {
        app.get(&format!("{prefix}/databases/{name}"), token)
            .await
            .expect(200)["database"]["DbId"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A GET on the data plane: status and body.
    async fn get(app: &TestApp, url: String, token: &str) -> (u16, Vec<u8>) {
        let response = app.client.get(url).bearer_auth(token).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.bytes().await.unwrap().to_vec())
    }

    /// The old owner writes a secret row and deletes it (after `secret_at`), then waits
    /// until its history holds it in object storage. Answers the secret and that instant.
    async fn write_and_delete_a_secret(
        app: &TestApp,
        url: &str,
        token: &str,
        id: &str,
    ) -> (String, String) {
        let secret = unique("old-owners-secret-row");
        let (status, body) = pipeline(
            app,
            url,
            token,
            &[
                "CREATE TABLE t (v TEXT)",
                "INSERT INTO t VALUES ('kept')",
                &format!("INSERT INTO t VALUES ('{}')", secret.repeat(8)),
            ],
        )
        .await;
        assert_eq!(status, 200, "{body}");
        pause().await;
        let secret_at = now();
        pause().await;
        let (status, body) = pipeline(app, url, token, &["DELETE FROM t WHERE v <> 'kept'"]).await;
        assert_eq!(status, 200, "{body}");
        // Shipped within the durability lag (1 s): the history holds the row.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stored_with(app, id, &secret).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the secret never reached object storage"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        (secret, secret_at)
    }

    /// Everything the new owner could reach of the history before the transfer is refused
    /// or gone: a copy or a restore as of the secret's instant, the listing, a sync from
    /// the first generation, the stored objects.
    async fn assert_the_old_history_is_out_of_reach(
        app: &TestApp,
        theirs: &str,
        name: &str,
        owner: &str,
        id: &str,
        (secret, secret_at): (&str, &str),
        transferred_at: &str,
    ) {
        let copy = app
            .post(
                &format!("{theirs}/databases"),
                owner,
                json!({"name": unique("copy"), "group": "default",
                       "seed": {"type": "database", "name": name, "timestamp": secret_at}}),
            )
            .await;
        assert_eq!(copy.status, 400, "a copy of the old history: {}", copy.body);
        assert!(
            copy.body.to_string().contains("transfer"),
            "the refusal says why: {}",
            copy.body
        );
        let restore = app
            .post(
                &format!("{theirs}/databases/{name}/restore"),
                owner,
                json!({"timestamp": secret_at}),
            )
            .await;
        assert_eq!(
            restore.status, 400,
            "a restore to the old history: {}",
            restore.body
        );

        let backups = app
            .get(&format!("{theirs}/databases/{name}/backups"), owner)
            .await
            .expect(200);
        let generations = backups["generations"].as_array().unwrap();
        assert!(!generations.is_empty(), "{backups}");
        for generation in generations {
            assert!(
                instant(generation["created_at"].as_str().unwrap()) >= instant(transferred_at),
                "a generation from before the transfer is listed: {backups}"
            );
        }
        assert!(
            instant(backups["restorable_from"].as_str().unwrap()) >= instant(transferred_at),
            "{backups}"
        );

        // An embedded replica syncing from the start gets nothing of the old history:
        // told to start over (409), as a replica of a lost history is.
        let url = http_url(app, theirs, name, owner).await;
        let token = mint(app, &format!("{theirs}/databases/{name}"), owner, json!({})).await;
        let (status, body) = get(app, format!("{url}sync/2/1/129"), &token).await;
        assert_eq!(
            status,
            409,
            "frames from before the transfer: {}",
            String::from_utf8_lossy(&body)
        );
        let (status, _) = get(app, format!("{url}export/2"), &token).await;
        assert_eq!(status, 404, "the state before the transfer was exported");

        // From the history's first generation on, nothing of the old owner's.
        let (status, body) = pipeline(app, &url, &token, &["INSERT INTO t VALUES ('new')"]).await;
        assert_eq!(status, 200, "{body}");
        let first = generations[0]["start_frame_no"].as_u64().unwrap() + 2;
        let (status, file) = get(app, format!("{url}export/{first}"), &token).await;
        assert_eq!(status, 200);
        assert!(
            !holds(&file, secret),
            "the first generation holds the secret"
        );
        let (status, frames) = get(app, format!("{url}sync/{first}/1/1025"), &token).await;
        assert_eq!(status, 200);
        assert!(!frames.is_empty());
        assert!(
            !holds(&frames, secret),
            "a frame after the transfer holds the secret"
        );
        let (status, file) = get(app, format!("{url}export/1"), &token).await;
        assert_eq!(status, 200);
        assert!(
            !holds(&file, secret),
            "the live file still holds the secret"
        );

        // Object storage no longer holds it at all.
        let stored = stored_with(app, id, secret);
        assert!(stored.is_empty(), "the secret is still stored: {stored:?}");
    }

    #[tokio::test]
    async fn a_transferred_database_starts_its_history_anew() {
        let app = app!();
        let p = parties(&app).await;
        let own = format!("/v1/organizations/{}", p.alice_name);
        let theirs = format!("/v1/organizations/{}", p.team);
        app.database(&own, &p.alice, "ledger", "default").await;
        let id = db_id(&app, &own, "ledger", &p.alice).await;
        let url = http_url(&app, &own, "ledger", &p.alice).await;
        let token = mint(
            &app,
            &format!("{own}/databases/ledger"),
            &p.alice,
            json!({}),
        )
        .await;
        let secret = write_and_delete_a_secret(&app, &url, &token, &id).await;
        // SQLite leaves a deleted row's bytes in the free space of its page: the file
        // itself would give them away, not only the log.
        let (_, file) = get(&app, format!("{url}export/1"), &token).await;
        assert!(
            holds(&file, &secret.0),
            "the deleted row left no trace to test"
        );
        pause().await;
        let transferred_at = now();
        app.post(
            &format!("{own}/databases/ledger/transfer"),
            &p.alice,
            json!({"org": p.team}),
        )
        .await
        .expect(200);

        assert_the_old_history_is_out_of_reach(
            &app,
            &theirs,
            "ledger",
            &p.bob,
            &id,
            (&secret.0, &secret.1),
            &transferred_at,
        )
        .await;

        // A copy from the new history works, with the live rows only, and its file holds
        // nothing of the old owner's either.
        let copy = unique("copy");
        app.post(
            &format!("{theirs}/databases"),
            &p.bob,
            json!({"name": copy, "group": "default",
                   "seed": {"type": "database", "name": "ledger", "timestamp": now()}}),
        )
        .await
        .expect(200);
        let copy_url = http_url(&app, &theirs, &copy, &p.bob).await;
        let copy_token = mint(
            &app,
            &format!("{theirs}/databases/{copy}"),
            &p.bob,
            json!({}),
        )
        .await;
        let (status, body) = pipeline(
            &app,
            &copy_url,
            &copy_token,
            &["SELECT v FROM t ORDER BY v"],
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let rows = &body["results"][0]["response"]["result"]["rows"];
        assert_eq!(rows.as_array().unwrap().len(), 2, "{rows}");
        assert_eq!(rows[0][0]["value"], "kept", "{rows}");
        let (status, file) = get(&app, format!("{copy_url}export/1"), &copy_token).await;
        assert_eq!(status, 200);
        assert!(!holds(&file, &secret.0), "the copy's file holds the secret");
    }

    #[tokio::test]
    async fn a_transferred_group_starts_the_history_of_its_databases_anew() {
        let app = app!();
        let p = parties(&app).await;
        let own = format!("/v1/organizations/{}", p.alice_name);
        let theirs = format!("/v1/organizations/{}", p.team);
        let group = unique("moving");
        app.group(&p.alice_name, &p.alice, &group).await;
        app.database(&own, &p.alice, "books", &group).await;
        let id = db_id(&app, &own, "books", &p.alice).await;
        let url = http_url(&app, &own, "books", &p.alice).await;
        let token = mint(&app, &format!("{own}/databases/books"), &p.alice, json!({})).await;
        let secret = write_and_delete_a_secret(&app, &url, &token, &id).await;
        pause().await;
        let transferred_at = now();
        app.post(
            &format!("{own}/groups/{group}/transfer"),
            &p.alice,
            json!({"organization": p.team}),
        )
        .await
        .expect(200);

        assert_the_old_history_is_out_of_reach(
            &app,
            &theirs,
            "books",
            &p.bob,
            &id,
            (&secret.0, &secret.1),
            &transferred_at,
        )
        .await;
    }
}
