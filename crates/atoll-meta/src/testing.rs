//! Fresh, isolated stores for tests: a temporary SQLite file, or a new PostgreSQL schema.

use crate::{SecretsKeyring, Store};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Where the PostgreSQL tests connect: `ATOLL_TEST_DATABASE_URL`, by default the local
/// server of the development machines and CI.
pub fn postgres_test_url() -> String {
    std::env::var("ATOLL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// A migrated store in a new temporary directory, sealing signing keys with a random
/// secrets key as the servers do.
pub async fn fresh_sqlite_store() -> (Store, PathBuf) {
    let dir = std::env::temp_dir().join(format!("atoll-test-{}", uuid::Uuid::new_v4().simple()));
    let store = Store::open_sqlite(&dir.join("meta.db"))
        .await
        .expect("open SQLite store")
        .with_secrets(SecretsKeyring::random());
    (store, dir)
}

/// A URL to a new, empty schema of the test PostgreSQL database, or `None` (after a loud
/// message on stderr) when no PostgreSQL server answers.
pub async fn fresh_postgres_url() -> Option<String> {
    create_schema().await
}

/// A migrated store in a new PostgreSQL schema, sealing signing keys with a random
/// secrets key, or `None` when PostgreSQL is unreachable.
pub async fn fresh_postgres_store() -> Option<Store> {
    let url = fresh_postgres_url().await?;
    Some(
        Store::connect_postgres(&url)
            .await
            .expect("connect to the test schema")
            .with_secrets(SecretsKeyring::random()),
    )
}

async fn create_schema() -> Option<String> {
    let base = postgres_test_url();
    let client = match tokio_postgres::connect(&base, tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            client
        }
        Err(e) => {
            warn_skip(&base, &e.to_string());
            return None;
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    static CLEANED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !CLEANED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        drop_stale_schemas(&client, now).await;
    }
    let schema = format!(
        "atoll_t_{now}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create test schema");
    let separator = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{separator}options=-csearch_path%3D{schema}"))
}

/// Test schemas are named after their creation time; those of runs older than an hour
/// are dropped so repeated CI runs on one machine do not pile them up.
async fn drop_stale_schemas(client: &tokio_postgres::Client, now: u64) {
    let Ok(rows) = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'atoll_t_%'",
            &[],
        )
        .await
    else {
        return;
    };
    for row in rows {
        let name: String = row.get(0);
        let created = name
            .split('_')
            .nth(2)
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(0);
        if now.saturating_sub(created) > 3600 {
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                .await;
        }
    }
}

fn warn_skip(url: &str, error: &str) {
    static WARNED: OnceLock<()> = OnceLock::new();
    WARNED.get_or_init(|| {
        eprintln!(
            "\n\
             ************************************************************************\n\
             *  SKIPPING PostgreSQL tests: no server at {url}\n\
             *  ({error})\n\
             *  Start PostgreSQL or set ATOLL_TEST_DATABASE_URL to run them.\n\
             ************************************************************************\n"
        );
    });
}
