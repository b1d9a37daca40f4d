//! The PostgreSQL backend's pool is bounded: however many operations run at once, one
//! store opens at most `--database-pool-size` connections, and the operations beyond them
//! wait for one instead of failing or opening more (before the pool, every operation past
//! 16 idle connections opened a connection of its own). Skips (loudly) without PostgreSQL.

use atoll_meta::{NewUser, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_operations_at_once_share_a_bounded_pool() {
    let Some(url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    // The store's connections, told apart from every other client of the server.
    let application = format!(
        "atoll_pool_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let store = Store::connect_postgres_with(&format!("{url}&application_name={application}"), 3)
        .await
        .unwrap();
    let (user, _, _) = store
        .create_user(
            NewUser {
                username: "pia".into(),
                email: "pia@example.com".into(),
                name: "Pia".into(),
                password_hash: "not-a-real-hash".into(),
                is_admin: false,
                plan: None,
            },
            None,
        )
        .await
        .unwrap();

    let lookups: Vec<_> = (0..200)
        .map(|_| {
            let store = store.clone();
            let id = user.id.clone();
            tokio::spawn(async move { store.user_by_id(&id).await })
        })
        .collect();
    for lookup in lookups {
        let found = lookup.await.unwrap().expect("a waiting operation succeeds");
        assert_eq!(found.map(|u| u.username).as_deref(), Some("pia"));
    }

    let (observer, connection) = tokio_postgres::connect(
        &atoll_meta::testing::postgres_test_url(),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let opened: i64 = observer
        .query_one(
            // Not the credential-change listener, a connection of its own.
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND query NOT LIKE 'LISTEN%'",
            &[&application],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        (1..=3).contains(&opened),
        "{opened} connections open for a pool of 3"
    );
}
