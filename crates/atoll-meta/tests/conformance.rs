//! Runs the conformance suite on both backends. PostgreSQL checks skip loudly when no
//! server is reachable (see `atoll_meta::testing`).

use atoll_meta::conformance::checks;
use atoll_meta::testing::{fresh_postgres_store, fresh_sqlite_store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_backend_conforms() {
    for (name, check) in checks() {
        let (store, dir) = fresh_sqlite_store().await;
        eprintln!("sqlite: {name}");
        check(store).await;
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_backend_conforms() {
    for (name, check) in checks() {
        let Some(store) = fresh_postgres_store().await else {
            return;
        };
        eprintln!("postgres: {name}");
        check(store).await;
    }
}
