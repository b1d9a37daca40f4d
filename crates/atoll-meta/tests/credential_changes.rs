//! A revocation on one replica applies at once on the others (PostgreSQL `LISTEN/NOTIFY`),
//! not after the credential cache's TTL: two stores on one PostgreSQL schema stand for
//! two `atoll serve` replicas. Skips (loudly) without PostgreSQL.

use atoll_meta::{NewToken, NewUser, Store, TokenKind, TokenRestriction};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_reaches_the_other_replicas_cache_at_once() {
    let Some(url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let first = Store::connect_postgres(&url).await.unwrap();
    let second = Store::connect_postgres(&url).await.unwrap();
    let (user, _, _) = first
        .create_user(
            NewUser {
                username: "rita".into(),
                email: "rita@example.com".into(),
                name: "Rita".into(),
                password_hash: "not-a-real-hash".into(),
                is_admin: false,
                plan: None,
            },
            None,
        )
        .await
        .unwrap();
    let secret_hash = format!("hash-of-{}", uuid::Uuid::new_v4());
    first
        .insert_token(NewToken {
            id: uuid::Uuid::new_v4().simple().to_string(),
            user_id: user.id.clone(),
            name: "deploy".into(),
            kind: TokenKind::Api,
            secret_hash: secret_hash.clone(),
            restriction: TokenRestriction::Unrestricted,
            expires_at: None,
        })
        .await
        .unwrap();
    // The second replica has the token in its cache (trusted for 10 s).
    let cached = second
        .credential_by_secret_hash(&secret_hash)
        .await
        .unwrap();
    assert!(cached.unwrap().token.revoked_at.is_none());

    first.revoke_user_token(&user.id, "deploy").await.unwrap();

    // Well inside the cache's 10 s: the notification, not the TTL, emptied it.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = second
            .credential_by_secret_hash(&secret_hash)
            .await
            .unwrap()
            .unwrap();
        if seen.token.revoked_at.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the other replica still trusts a revoked token"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
