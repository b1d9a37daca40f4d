//! Durable databases (docs/STORAGE.md): every database's log in object storage, restores
//! to any instant, and databases rebuilt when a node's disk loses them.
//!
//! Each test runs on a `file://` store, and again on S3 when `ATOLL_TEST_S3_URL` names
//! an S3-compatible server (scripts/test.sh starts one on loopback; without it the S3
//! runs say so loudly and skip).

mod support;

use atoll_data::node::NodeSettings;
use atoll_data::node_storage::StorageConfig;
use atoll_data::DataLimits;
use atoll_storage::{DurabilityMode, StorageSettings};
use atoll_types::node::{CreateDatabase, Durability, Seed};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use support::*;

/// The stores the tests run against: a local directory always, S3 when one is given.
fn storage_urls(name: &str) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("atoll-storage-{name}-{}", uuid::Uuid::new_v4()));
    let mut urls = vec![format!("file://{}", dir.display())];
    match std::env::var("ATOLL_TEST_S3_URL") {
        Ok(base) if !base.is_empty() => {
            urls.push(format!("{}/{name}-{}", base.trim_end_matches('/'), uuid::Uuid::new_v4()))
        }
        _ => eprintln!(
            "WARNING: ATOLL_TEST_S3_URL is not set: {name} runs on file:// only, not on S3 (scripts/test.sh starts an S3 server)"
        ),
    }
    urls
}

fn settings(url: &str, durability: DurabilityMode) -> NodeSettings {
    NodeSettings {
        storage: Some(StorageConfig {
            url: url.to_string(),
            node_name: "test-node".into(),
            settings: StorageSettings {
                durability_lag: Duration::from_millis(100),
                durability,
                // Small, so that tests reach checkpoints and several segments.
                checkpoint_frames: 20,
                ..StorageSettings::default()
            },
        }),
        ..NodeSettings::default()
    }
}

fn new_dir() -> PathBuf {
    std::env::temp_dir().join(format!("atoll-durable-{}", uuid::Uuid::new_v4()))
}

async fn rows(db: &TestDb) -> Vec<i64> {
    let result = db.query(sql("SELECT x FROM t ORDER BY x")).await;
    result["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row[0]["value"].as_str().unwrap().parse().unwrap())
        .collect()
}

async fn insert(db: &TestDb, x: i64) {
    let result = db
        .run(&[json_stmt(&format!(
            "INSERT INTO t VALUES ({x}, randomblob(300))"
        ))])
        .await;
    assert_eq!(result[0]["type"], "ok", "{}", result[0]);
}

fn json_stmt(text: &str) -> Value {
    sql(text)
}

/// Waits until the database's log has everything committed in object storage.
async fn wait_shipped(node: &TestNode, db: &TestDb) {
    let log = node
        .node
        .by_id(&db.config.id)
        .unwrap()
        .log()
        .unwrap()
        .clone();
    for _ in 0..200 {
        let status = log.status();
        // `lag_ms` too: a round takes its commits' times before its put lands, and the
        // database counts as behind (lag > 0) until the round is done.
        if status.pending_commits == 0
            && status.lag_ms == 0
            && !log.generation_pending()
            && status.last_error.is_none()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the log was not shipped: {:?}", log.status());
}

/// Waits until a rebuilt database answers again.
async fn wait_served(db: &TestDb) {
    for _ in 0..200 {
        let body = serde_json::json!({"requests": [{"type": "execute", "stmt": sql("SELECT 1")}, {"type": "close"}]});
        let response = db.post("/v2/pipeline", body).await;
        if response.status() == 200 {
            return;
        }
        assert_eq!(
            response.status(),
            503,
            "a database being rebuilt answers 503"
        );
        assert!(response.headers().contains_key("retry-after"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the database was not rebuilt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_data_directory_comes_back_with_every_acknowledged_write() {
    for url in storage_urls("wiped") {
        let dir = new_dir();
        let node = serve_node(
            dir.clone(),
            DataLimits::default(),
            settings(&url, DurabilityMode::Sync),
        )
        .await;
        let mut db = node.create_db("kept");
        db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
            .await;
        // Enough writes for several segments and checkpoints (a reset WAL in between).
        for x in 1..=60 {
            insert(&db, x).await;
        }
        let stopped = node.stop();
        // The disk is lost: nothing of the node's directory survives.
        std::fs::remove_dir_all(&stopped).unwrap();

        let node = serve_node(
            stopped,
            DataLimits::default(),
            settings(&url, DurabilityMode::Sync),
        )
        .await;
        db.addr = node.addr;
        wait_served(&db).await;
        assert_eq!(rows(&db).await, (1..=60).collect::<Vec<_>>(), "on {url}");
        // It goes on: new writes ship after the rebuilt state.
        insert(&db, 61).await;
        wait_shipped(&node, &db).await;
        let stopped = node.stop();
        std::fs::remove_dir_all(stopped.join("dbs")).unwrap();
        let node = serve_node(
            stopped,
            DataLimits::default(),
            settings(&url, DurabilityMode::Sync),
        )
        .await;
        db.addr = node.addr;
        wait_served(&db).await;
        assert_eq!(rows(&db).await.len(), 61, "on {url}");
    }
}

/// A database encrypted with its customer's key (docs/ENCRYPTION.md) comes back from object
/// storage after the disk is lost, rebuilt without the key, and serves its rows to
/// requests with the key; neither object storage nor the node's disk holds a row in the
/// clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_encrypted_database_is_rebuilt_without_its_key_and_read_with_it() {
    for url in storage_urls("encrypted") {
        let dir = new_dir();
        let node = serve_node(
            dir.clone(),
            DataLimits::default(),
            settings(&url, DurabilityMode::Sync),
        )
        .await;
        let key = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
        let mut db = node.create_encrypted_db("vault", key);
        db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
            .await;
        for x in 1..=40 {
            let result = db
                .run(&[sql(&format!(
                    "INSERT INTO t VALUES ({x}, 'SECRET-PAYLOAD-{x}')"
                ))])
                .await;
            assert_eq!(result[0]["type"], "ok", "{}", result[0]);
        }
        wait_shipped(&node, &db).await;
        let stopped = node.stop();
        if let Some(local) = url.strip_prefix("file://") {
            for file in walk(std::path::Path::new(local))
                .into_iter()
                .chain(walk(&stopped))
            {
                let bytes = std::fs::read(&file).unwrap_or_default();
                assert!(
                    !holds(&bytes, "SECRET-PAYLOAD"),
                    "{} holds a row in the clear",
                    file.display()
                );
            }
        }
        std::fs::remove_dir_all(&stopped).unwrap();

        let node = serve_node(
            stopped,
            DataLimits::default(),
            settings(&url, DurabilityMode::Sync),
        )
        .await;
        db.addr = node.addr;
        wait_served(&db).await;
        assert_eq!(rows(&db).await, (1..=40).collect::<Vec<_>>(), "on {url}");
        // Without the key, nothing.
        let keyless = reqwest::Client::new()
            .post(db.url("/v2/pipeline"))
            .header("x-namespace", &db.config.label)
            .bearer_auth(db.token())
            .json(&serde_json::json!({"requests": [{"type": "execute", "stmt": sql("SELECT count(*) FROM t")}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(keyless.status(), 401, "on {url}");
    }
}

/// A client of `db` sending `key` as its encryption key.
fn keyed(db: &TestDb, key: &str) -> TestDb {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-turso-encryption-key", key.parse().unwrap());
    TestDb {
        addr: db.addr,
        http: reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap(),
        config: db.config.clone(),
        key: db.key.clone(),
    }
}

/// A key rotation killed after its commit, before the node took the new key: after the
/// restart the database refuses every request (503) rather than answer under either key;
/// the same rotation, repeated, finishes it; its frames were shipped like any commit's, so
/// a disk-loss rebuild afterwards reads with the new key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rotation_killed_after_its_commit_is_finished_by_repeating_it() {
    use atoll_storage::encryption::{engine, Cipher, EncryptionKey};
    let url = storage_urls("rotation").remove(0);
    let dir = new_dir();
    let node = serve_node(
        dir.clone(),
        DataLimits::default(),
        settings(&url, DurabilityMode::Sync),
    )
    .await;
    let old = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
    let new = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
    let mut db = node.create_encrypted_db("vault", old);
    db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
        .await;
    for x in 1..=30 {
        db.run(&[sql(&format!("INSERT INTO t VALUES ({x}, 'SECRET-{x}')"))])
            .await;
    }
    // The rotation's first steps, as `key_rotation` takes them, then the kill.
    let held = node.node.by_id(&db.config.id).unwrap();
    std::fs::write(held.dir().join("rotating-key"), b"").unwrap();
    let (old_key, new_key) = (
        EncryptionKey::from_base64(Cipher::Aes256Gcm, old).unwrap(),
        EncryptionKey::from_base64(Cipher::ChaCha20Poly1305, new).unwrap(),
    );
    let conn = engine::open_rotating(
        &held.file_path(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE,
        &new_key,
        &old_key,
    )
    .unwrap();
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .unwrap();
    let log = held.log().unwrap().clone();
    conn.commit_hook(Some(move || {
        log.record_commit();
        false
    }));
    engine::rewrite_pages(&conn).unwrap();
    drop((conn, held));
    let stopped = node.stop();

    let node = serve_node(
        stopped,
        DataLimits::default(),
        settings(&url, DurabilityMode::Sync),
    )
    .await;
    db.addr = node.addr;
    let with_new = keyed(&db, new);
    assert_eq!(status_of(&db).await, 503, "the old key is not served");
    assert_ne!(status_of(&with_new).await, 200, "nor the new one yet");

    let mut rotated = db.config.clone();
    rotated.config_version += 1;
    rotated.encryption = Some(atoll_types::node::DatabaseEncryption {
        cipher: "chacha20poly1305".into(),
        verifier: new_key.verifier(&db.config.id).to_hex(),
    });
    let order = atoll_types::node::RotateEncryptionKey {
        from_cipher: "aes256gcm".into(),
        config: rotated.clone(),
    };
    // A stranger's current key is refused before anything is touched.
    let stranger = "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=";
    let refused = tokio::task::block_in_place(|| {
        node.node
            .rotate_encryption_key(&db.config.id, order.clone(), stranger, new)
    });
    assert!(refused.is_err(), "{refused:?}");
    let done = tokio::task::block_in_place(|| {
        node.node
            .rotate_encryption_key(&db.config.id, order, old, new)
    })
    .unwrap();
    assert!(done.pages > 1, "{done:?}");
    assert_eq!(rows(&with_new).await, (1..=30).collect::<Vec<_>>());
    assert_eq!(status_of(&db).await, 403, "the old key is refused");
    with_new
        .run(&[sql("INSERT INTO t VALUES (31, 'SECRET-31')")])
        .await;
    wait_shipped(&node, &with_new).await;

    // The data is lost: rebuilt from the log, without a key, and read with the new one.
    let data_file = node.node.by_id(&db.config.id).unwrap().file_path();
    let stopped = node.stop();
    for suffix in ["", "-wal", "-shm"] {
        let mut path = data_file.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
    let node = serve_node(
        stopped,
        DataLimits::default(),
        settings(&url, DurabilityMode::Sync),
    )
    .await;
    let mut with_new = with_new;
    with_new.addr = node.addr;
    wait_served(&with_new).await;
    assert_eq!(rows(&with_new).await, (1..=31).collect::<Vec<_>>());
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_damaged_database_file_is_rebuilt_and_kept_aside() {
    for url in storage_urls("damaged") {
        let dir = new_dir();
        let node = serve_node(
            dir.clone(),
            DataLimits::default(),
            settings(&url, DurabilityMode::Lag),
        )
        .await;
        let mut db = node.create_db("hurt");
        db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
            .await;
        for x in 1..=5 {
            insert(&db, x).await;
        }
        wait_shipped(&node, &db).await;
        let stopped = node.stop();
        let db_dir = stopped.join("dbs").join(&db.config.id);
        std::fs::write(db_dir.join("data"), b"not a database").unwrap();
        let node = serve_node(
            stopped.clone(),
            DataLimits::default(),
            settings(&url, DurabilityMode::Lag),
        )
        .await;
        db.addr = node.addr;
        wait_served(&db).await;
        assert_eq!(rows(&db).await, vec![1, 2, 3, 4, 5]);
        let aside = std::fs::read_dir(stopped.join("dbs"))
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with(".damaged-"));
        assert!(aside, "the damaged files are kept for an operator");
    }
}

/// Commits rows one at a time, answering for each the instant right after it was
/// acknowledged.
async fn timed_rows(db: &TestDb, range: std::ops::RangeInclusive<i64>) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for x in range {
        insert(db, x).await;
        let acknowledged = now_ms();
        out.push((x, acknowledged));
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    out
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn point_in_time_restore_gives_exactly_the_rows_committed_by_then() {
    for url in storage_urls("pitr") {
        let node = serve_node(
            new_dir(),
            DataLimits::default(),
            settings(&url, DurabilityMode::Lag),
        )
        .await;
        let source = node.create_db("source");
        source
            .run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
            .await;
        let first = timed_rows(&source, 1..=15).await;
        // A new generation in the middle: restores before and after it.
        node.node
            .by_id(&source.config.id)
            .unwrap()
            .log()
            .unwrap()
            .start_generation();
        wait_shipped(&node, &source).await;
        let second = timed_rows(&source, 16..=30).await;
        wait_shipped(&node, &source).await;
        let all: Vec<(i64, i64)> = first.into_iter().chain(second).collect();
        for &(x, at) in [all[0], all[6], all[14], all[15], all[22], all[29]].iter() {
            let copy = format!("copy{x}");
            let restored = node.create_db_seeded(
                &copy,
                Seed::PointInTime {
                    source_id: source.config.id.clone(),
                    timestamp_ms: Some(at),
                    history_starts_at_ms: None,
                },
            );
            assert_eq!(
                rows(&restored).await,
                (1..=x).collect::<Vec<_>>(),
                "restored to just after row {x} on {url}"
            );
        }
        // Before the first snapshot, and in the future: outside the window, said plainly.
        let error = tokio::task::block_in_place(|| {
            node.node.create_database(CreateDatabase {
                config: node.config_for("early"),
                seed: Seed::PointInTime {
                    source_id: source.config.id.clone(),
                    timestamp_ms: Some(all[0].1 - 3_600_000),
                    history_starts_at_ms: None,
                },
            })
        })
        .err()
        .unwrap();
        assert!(
            error.to_string().contains("outside the restorable window"),
            "{error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_in_place_is_a_new_write_that_can_itself_be_undone() {
    for url in storage_urls("in-place") {
        let node = serve_node(
            new_dir(),
            DataLimits::default(),
            settings(&url, DurabilityMode::Lag),
        )
        .await;
        let db = node.create_db("undo");
        db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
            .await;
        let early = timed_rows(&db, 1..=3).await;
        let late = timed_rows(&db, 4..=6).await;
        wait_shipped(&node, &db).await;
        let head_before = node
            .node
            .by_id(&db.config.id)
            .unwrap()
            .log()
            .unwrap()
            .state()
            .durable_frame_no;

        let id = db.config.id.clone();
        let at = early[2].1;
        let outcome = {
            let node = node.node.clone();
            tokio::task::spawn_blocking(move || node.restore_in_place(&id, at, None))
                .await
                .unwrap()
                .unwrap()
        };
        assert!(
            outcome.frame_no > head_before,
            "frame numbers never go back"
        );
        assert_eq!(rows(&db).await, vec![1, 2, 3]);
        // Undo: back to the state before the restore.
        let id = db.config.id.clone();
        let at = late[2].1;
        {
            let node = node.node.clone();
            tokio::task::spawn_blocking(move || node.restore_in_place(&id, at, None))
                .await
                .unwrap()
                .unwrap();
        }
        assert_eq!(rows(&db).await, vec![1, 2, 3, 4, 5, 6]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_corrupt_or_missing_object_is_an_error_naming_it_never_a_silent_loss() {
    let url = storage_urls("corrupt").remove(0);
    let root = PathBuf::from(url.strip_prefix("file://").unwrap());
    let node = serve_node(
        new_dir(),
        DataLimits::default(),
        settings(&url, DurabilityMode::Lag),
    )
    .await;
    let source = node.create_db("fragile");
    source
        .run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
        .await;
    for x in 1..=5 {
        insert(&source, x).await;
        wait_shipped(&node, &source).await;
    }
    let log_dir = root.join("dbs").join(&source.config.id).join("log");
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    segments.sort();
    assert!(
        segments.len() >= 3,
        "one segment per shipped write: {segments:?}"
    );

    // A flipped byte in the middle of the log.
    let target = &segments[1];
    let mut bytes = std::fs::read(target).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(target, &bytes).unwrap();
    let error = tokio::task::block_in_place(|| {
        node.node.create_database(CreateDatabase {
            config: node.config_for("fromcorrupt"),
            seed: Seed::PointInTime {
                source_id: source.config.id.clone(),
                timestamp_ms: None,
                history_starts_at_ms: None,
            },
        })
    })
    .err()
    .unwrap()
    .to_string();
    let name = target.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        error.contains("damaged") && error.contains(&name),
        "{error}"
    );
    assert!(
        node.node.by_label("fromcorrupt-acme").is_none(),
        "nothing half-created"
    );

    // A missing segment: the gap is named.
    bytes[middle] ^= 0x40;
    std::fs::write(target, &bytes).unwrap();
    std::fs::remove_file(target).unwrap();
    let error = tokio::task::block_in_place(|| {
        node.node.create_database(CreateDatabase {
            config: node.config_for("fromgap"),
            seed: Seed::PointInTime {
                source_id: source.config.id.clone(),
                timestamp_ms: None,
                history_starts_at_ms: None,
            },
        })
    })
    .err()
    .unwrap()
    .to_string();
    assert!(error.contains("missing frames"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_keeps_every_instant_inside_the_window_restorable() {
    for url in storage_urls("retention") {
        let node = serve_node(
            new_dir(),
            DataLimits::default(),
            settings(&url, DurabilityMode::Lag),
        )
        .await;
        let source = node.create_db("kept");
        source
            .run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
            .await;
        let log = node
            .node
            .by_id(&source.config.id)
            .unwrap()
            .log()
            .unwrap()
            .clone();
        let mut instants = Vec::new();
        for batch in 0..3 {
            instants.extend(timed_rows(&source, batch * 5 + 1..=batch * 5 + 5).await);
            log.start_generation();
            wait_shipped(&node, &source).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let storage = node.node.storage().unwrap().clone();
        let before = atoll_storage::restore::Catalog::load(&storage.storage, &source.config.id)
            .await
            .unwrap();
        assert!(before.generations.len() >= 4);
        // The window starts after row 7 was acknowledged.
        let cutoff = instants[6].1;
        atoll_storage::retention::collect_garbage_before(
            &storage.storage,
            &source.config.id,
            cutoff,
        )
        .await
        .unwrap();
        let after = atoll_storage::restore::Catalog::load(&storage.storage, &source.config.id)
            .await
            .unwrap();
        assert!(
            after.generations.len() < before.generations.len(),
            "old generations go"
        );
        assert!(after.bytes < before.bytes);
        for &(x, at) in instants.iter().filter(|(_, at)| *at >= cutoff) {
            let restored = node.create_db_seeded(
                &format!("r{x}"),
                Seed::PointInTime {
                    source_id: source.config.id.clone(),
                    timestamp_ms: Some(at),
                    history_starts_at_ms: None,
                },
            );
            assert_eq!(
                rows(&restored).await,
                (1..=x).collect::<Vec<_>>(),
                "on {url}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sync_mode_acknowledges_only_what_object_storage_has() {
    let url = storage_urls("sync").remove(0);
    let root = PathBuf::from(url.strip_prefix("file://").unwrap());
    let node = serve_node(
        new_dir(),
        DataLimits::default(),
        settings(&url, DurabilityMode::Lag),
    )
    .await;
    // The node is in lag mode; the database asks for sync in its configuration.
    let db = node.create_db_with("strict", |c| c.durability = Some(Durability::Sync));
    db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
        .await;
    insert(&db, 1).await;
    // Acknowledged means stored: no waiting for the lag.
    let head = node
        .node
        .by_id(&db.config.id)
        .unwrap()
        .log()
        .unwrap()
        .state()
        .durable_frame_no;
    assert!(head > 0);

    // Object storage goes away: the commit is not acknowledged.
    let saved = root.with_extension("moved");
    std::fs::rename(&root, &saved).unwrap();
    std::fs::write(&root, b"not a directory").unwrap();
    let result = db.run(&[sql("INSERT INTO t VALUES (2, NULL)")]).await;
    assert_eq!(result[0]["type"], "error", "{}", result[0]);
    assert_eq!(result[0]["error"]["code"], "DURABILITY_UNAVAILABLE");
    // Back: the write (in the WAL all along) is shipped, and new ones are acknowledged.
    std::fs::remove_file(&root).unwrap();
    std::fs::rename(&saved, &root).unwrap();
    insert(&db, 3).await;
    assert_eq!(rows(&db).await, vec![1, 2, 3]);
}

fn settings_named(url: &str, node_name: &str) -> NodeSettings {
    let mut settings = settings(url, DurabilityMode::Lag);
    if let Some(storage) = settings.storage.as_mut() {
        storage.node_name = node_name.to_string();
    }
    settings
}

async fn status_of(db: &TestDb) -> u16 {
    let body = serde_json::json!({"requests": [{"type": "execute", "stmt": sql("SELECT 1")}, {"type": "close"}]});
    db.post("/v2/pipeline", body).await.status().as_u16()
}

/// A move of a database encrypted with its customer's key: the old node hands it over, the
/// new one adopts it from object storage and resumes it, all without the key (pages are
/// copied as ciphertext), and it then serves its rows to requests with the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_encrypted_database_moves_without_its_key() {
    use atoll_data::moves;
    for url in storage_urls("move-encrypted") {
        let old = serve_node(
            new_dir(),
            DataLimits::default(),
            settings_named(&url, "old"),
        )
        .await;
        let new = serve_node(
            new_dir(),
            DataLimits::default(),
            settings_named(&url, "new"),
        )
        .await;
        let mut db =
            old.create_encrypted_db("vault", "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=");
        db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
            .await;
        for x in 1..=30 {
            insert(&db, x).await;
        }
        let id = db.config.id.clone();
        let node = Arc::clone(&old.node);
        let handed = {
            let id = id.clone();
            tokio::task::spawn_blocking(move || moves::hand_over(&node, &id))
                .await
                .unwrap()
                .unwrap()
        };
        let reached =
            atoll_data::node_storage::adopt(&new.node, db.config.clone(), handed.frame_no, true)
                .await
                .unwrap();
        assert!(reached >= handed.frame_no);
        moves::resume(&new.node, &id).unwrap();
        db.addr = new.addr;
        wait_served(&db).await;
        assert_eq!(rows(&db).await, (1..=30).collect::<Vec<_>>(), "on {url}");
        insert(&db, 31).await;
        wait_shipped(&new, &db).await;
        moves::release(&old.node, &id).unwrap();
        assert!(atoll_storage::encryption::is_encrypted_file(
            &new.node.by_id(&id).unwrap().file_path()
        )
        .unwrap());
    }
}

/// A move between two nodes sharing object storage (docs/STORAGE.md, "Moves and drains"),
/// step by step, with a restart at the worst moments: the old holder handed over and the
/// new one adopted but neither resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_hands_over_adopts_resumes_and_releases_losing_nothing() {
    use atoll_data::moves;
    for url in storage_urls("move") {
        let old = serve_node(
            new_dir(),
            DataLimits::default(),
            settings_named(&url, "old"),
        )
        .await;
        let new = serve_node(
            new_dir(),
            DataLimits::default(),
            settings_named(&url, "new"),
        )
        .await;
        let mut db = old.create_db("moving");
        db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
            .await;
        for x in 1..=40 {
            insert(&db, x).await;
        }
        let id = db.config.id.clone();

        // 1. Hand-over: everything committed is stored; nothing more is served or written.
        let node = Arc::clone(&old.node);
        let handed = {
            let id = id.clone();
            tokio::task::spawn_blocking(move || moves::hand_over(&node, &id))
                .await
                .unwrap()
                .unwrap()
        };
        assert!(handed.frame_no > 0);
        assert_eq!(
            status_of(&db).await,
            503,
            "a handed-over database serves nothing"
        );
        // Asked again, the same frame: nothing committed since.
        let node = Arc::clone(&old.node);
        let again = {
            let id = id.clone();
            tokio::task::spawn_blocking(move || moves::hand_over(&node, &id))
                .await
                .unwrap()
                .unwrap()
        };
        assert_eq!(again, handed);
        // A serving database is never released.
        let serving = new.create_db("serving");
        let refused = moves::release(&new.node, &serving.config.id);
        assert!(
            matches!(refused, Err(atoll_data::error::DataError::Conflict(_))),
            "{refused:?}"
        );

        // The old holder dies here and comes back: still handed over, still serving nothing.
        let old_dir = old.stop();
        let old = serve_node(old_dir, DataLimits::default(), settings_named(&url, "old")).await;
        db.addr = old.addr;
        assert_eq!(status_of(&db).await, 503);

        // 2. Adopt. A frame object storage does not reach is refused, leaving nothing.
        let ahead = atoll_data::node_storage::adopt(
            &new.node,
            db.config.clone(),
            handed.frame_no + 1_000,
            true,
        )
        .await;
        assert!(ahead.is_err(), "{ahead:?}");
        assert!(new.node.by_id(&id).is_none());
        // Rebuilt on the new node up to the hand-over, not serving yet.
        let reached =
            atoll_data::node_storage::adopt(&new.node, db.config.clone(), handed.frame_no, true)
                .await
                .unwrap();
        assert!(reached >= handed.frame_no);
        // A rebuild (no replace) never replaces the copy a move just put there.
        let rebuild = atoll_data::node_storage::adopt(&new.node, db.config.clone(), 0, false).await;
        assert!(
            matches!(rebuild, Err(atoll_data::error::DataError::Conflict(_))),
            "{rebuild:?}"
        );
        db.addr = new.addr;
        assert_eq!(status_of(&db).await, 503, "adopted, not resumed");
        // Adopting what a node already serves is refused.
        let twice =
            atoll_data::node_storage::adopt(&new.node, serving.config.clone(), 0, true).await;
        assert!(
            matches!(twice, Err(atoll_data::error::DataError::Conflict(_))),
            "{twice:?}"
        );

        // 3. Resume on the new holder: every row, and it takes writes that continue the log.
        moves::resume(&new.node, &id).unwrap();
        wait_served(&db).await;
        assert_eq!(rows(&db).await, (1..=40).collect::<Vec<_>>(), "on {url}");
        insert(&db, 41).await;
        wait_shipped(&new, &db).await;

        // 4. Release the old copy: its files go, its history stays for the new holder.
        moves::release(&old.node, &id).unwrap();
        assert!(old.node.by_id(&id).is_none());
        assert!(!old.dir.join("dbs").join(&id).exists());
        moves::release(&old.node, &id).unwrap();

        // The new holder's disk is lost: it comes back from its own index, all 41 rows.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let new_dir_path = new.stop();
        std::fs::remove_dir_all(&new_dir_path).unwrap();
        let new = serve_node(
            new_dir_path,
            DataLimits::default(),
            settings_named(&url, "new"),
        )
        .await;
        db.addr = new.addr;
        wait_served(&db).await;
        assert_eq!(rows(&db).await.len(), 41, "on {url}");
        // And the old node, restarted, does not bring its released copy back.
        let old_dir = old.stop();
        let old = serve_node(old_dir, DataLimits::default(), settings_named(&url, "old")).await;
        assert!(old.node.by_id(&id).is_none());
    }
}

/// `lag` mode with object storage out of reach: commits go on within `--max-unshipped`,
/// then writes are refused (reads go on) until storage is back and has caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_are_refused_once_storage_is_out_of_reach_past_the_bound() {
    let store_dir = std::env::temp_dir().join(format!("atoll-outage-{}", uuid::Uuid::new_v4()));
    let url = format!("file://{}", store_dir.display());
    let mut settings = settings(&url, DurabilityMode::Lag);
    if let Some(storage) = settings.storage.as_mut() {
        storage.settings.max_unshipped = Duration::from_secs(1);
    }
    let node = serve_node(new_dir(), DataLimits::default(), settings).await;
    let db = node.create_db("outage");
    db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
        .await;
    insert(&db, 1).await;
    wait_shipped(&node, &db).await;

    // Storage goes away: its directory is replaced by a file, so every put fails.
    let away = store_dir.with_extension("away");
    std::fs::rename(&store_dir, &away).unwrap();
    std::fs::write(&store_dir, b"not a directory").unwrap();
    insert(&db, 2).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let refused = db
        .run(&[json_stmt("INSERT INTO t VALUES (3, randomblob(300))")])
        .await;
    assert_eq!(refused[0]["type"], "error", "{}", refused[0]);
    assert_eq!(
        refused[0]["error"]["code"], "DURABILITY_UNAVAILABLE",
        "{}",
        refused[0]
    );
    assert_eq!(rows(&db).await, vec![1, 2], "reads go on");

    // Storage is back: the backlog ships, and writes are taken again.
    std::fs::remove_file(&store_dir).unwrap();
    std::fs::rename(&away, &store_dir).unwrap();
    wait_shipped(&node, &db).await;
    insert(&db, 3).await;
    assert_eq!(rows(&db).await, vec![1, 2, 3]);
    let _ = std::fs::remove_dir_all(&store_dir);
}

/// A transaction that holds the write lock when its database is handed over gets an error
/// for its COMMIT, never an acknowledgement: the commit would land after the frame the
/// database was handed over at, on a copy about to be released (found by the topology
/// test, as a writer that waited for the lock committed into the released copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_after_the_hand_over_is_refused_not_acknowledged() {
    let url = storage_urls("fence").remove(0);
    let node = serve_node(
        new_dir(),
        DataLimits::default(),
        settings_named(&url, "fenced"),
    )
    .await;
    let db = node.create_db("fenced");
    db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
        .await;
    insert(&db, 1).await;
    // An interactive transaction takes the write lock and waits.
    let opened = db
        .pipeline(
            "v2",
            serde_json::json!({"requests": [
                {"type": "execute", "stmt": sql("BEGIN")},
                {"type": "execute", "stmt": sql("INSERT INTO t VALUES (2, NULL)")}
            ]}),
        )
        .await;
    let baton = opened["baton"].as_str().unwrap().to_string();
    assert_eq!(opened["results"][1]["type"], "ok", "{opened}");
    // The hand-over waits for the lock meanwhile.
    let handing = {
        let node = Arc::clone(&node.node);
        let id = db.config.id.clone();
        tokio::task::spawn_blocking(move || atoll_data::moves::hand_over(&node, &id))
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let committed = db
        .post(
            "/v2/pipeline",
            serde_json::json!({"baton": baton, "requests": [
                {"type": "execute", "stmt": sql("COMMIT")},
                {"type": "close"}
            ]}),
        )
        .await;
    let status = committed.status();
    let body: Value = committed.json().await.unwrap();
    assert!(
        status != 200 || body["results"][0]["type"] == "error",
        "a commit after the hand-over began is refused: {status} {body}"
    );
    // The idle transaction is rolled back past the transaction timeout, as for any
    // writer that waits; the hand-over then completes.
    let handed = handing.await.unwrap().unwrap();
    // What object storage holds as of the hand-over has row 1 only.
    let file = new_dir().join("restored.db");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let storage = node.node.storage().unwrap();
    let restored = atoll_storage::restore::restore_to_file(
        &storage.storage,
        &db.config.id,
        atoll_storage::restore::Target::Latest,
        None,
        &file,
    )
    .await
    .unwrap();
    assert_eq!(restored.frame_no, handed.frame_no);
    let conn = rusqlite::Connection::open(&file).unwrap();
    let rows: Vec<i64> = conn
        .prepare("SELECT x FROM t ORDER BY x")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows, vec![1]);
}

/// A write's `replication_index` is the frame number the shipper gives its commit, across
/// the shipper's checkpoints and WAL restarts (lag mode: some commits are read from the
/// WAL before they are stored, some after); a read carries none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writes_replication_index_is_its_commit_frame_in_the_log() {
    let url = storage_urls("replication-index").remove(0);
    let node = serve_node(
        new_dir(),
        DataLimits::default(),
        settings(&url, DurabilityMode::Lag),
    )
    .await;
    let db = node.create_db("indexed");
    db.run(&[sql("CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)")])
        .await;
    let log = node
        .node
        .by_id(&db.config.id)
        .unwrap()
        .log()
        .unwrap()
        .clone();
    let mut last = 0u64;
    for x in 1..=60 {
        let result = db
            .run(&[sql(&format!("INSERT INTO t VALUES ({x}, randomblob(300))"))])
            .await;
        let index: u64 = result[0]["response"]["result"]["replication_index"]
            .as_str()
            .unwrap_or_else(|| panic!("no replication_index: {}", result[0]))
            .parse()
            .unwrap();
        assert!(index > last, "{index} after {last}");
        last = index;
        if x % 7 == 0 {
            // The shipper numbers the same frames: its head after this commit is the index.
            assert_eq!(log.head().unwrap(), index, "after insert {x}");
        }
    }
    // Once shipped, the stored head is the last index (`wait_shipped` may answer while a
    // round's put is still on its way: its commit times are taken before the put).
    wait_shipped(&node, &db).await;
    for _ in 0..200 {
        if log.state().durable_frame_no >= last {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(log.state().durable_frame_no, last);
    let read = db.query(sql("SELECT count(*) FROM t")).await;
    assert!(read["replication_index"].is_null(), "{read}");
}

/// A GET of the data plane's `path` for `db`, with a token of it.
async fn get(db: &TestDb, path: &str) -> reqwest::Response {
    db.http
        .get(db.url(path))
        .header("x-namespace", &db.config.label)
        .bearer_auth(db.token())
        .send()
        .await
        .unwrap()
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// A transfer starts the history anew (docs/STORAGE.md, "Transfers start the history
/// anew"): while the node cannot start it, nothing of the old history is served (503, to
/// be asked again); once it has, no state, frame or object of the old one is left, and a
/// node whose disk is lost keeps to the new history when it rebuilds the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transfers_new_history_is_waited_for_and_outlives_a_lost_disk() {
    for url in storage_urls("history") {
        let node = serve_node(
            new_dir(),
            DataLimits::default(),
            settings(&url, DurabilityMode::Lag),
        )
        .await;
        let mut db = node.create_db("handed");
        let secret = "the-old-owners-deleted-row-".repeat(4);
        db.run(&[
            sql("CREATE TABLE t(x INTEGER PRIMARY KEY, v TEXT)"),
            sql(&format!("INSERT INTO t VALUES (1, '{secret}')")),
            sql("INSERT INTO t VALUES (2, 'kept')"),
            sql("DELETE FROM t WHERE x = 1"),
        ])
        .await;
        wait_shipped(&node, &db).await;
        let log = node
            .node
            .by_id(&db.config.id)
            .unwrap()
            .log()
            .unwrap()
            .clone();

        // The node may not write (a hand-over, a lost lease): the new history cannot start,
        // and nothing that serves the old one answers meanwhile.
        log.set_fenced(true);
        let since = now_ms();
        db.config.history_starts_at_ms = Some(since);
        tokio::task::block_in_place(|| node.node.configure(db.config.clone())).unwrap();
        for path in ["/info", "/export/1", "/export/2", "/sync/2/1/129"] {
            let response = get(&db, path).await;
            assert_eq!(response.status(), 503, "{path} on {url}");
            assert!(response.headers().contains_key("retry-after"), "{path}");
        }
        let backups = node.node.backups(&db.config.id).await.unwrap();
        assert!(backups.generations.is_empty(), "{backups:?}");
        let copy = tokio::task::block_in_place(|| {
            node.node.create_database(CreateDatabase {
                config: node.config_for("early-copy"),
                seed: Seed::PointInTime {
                    source_id: db.config.id.clone(),
                    timestamp_ms: None,
                    history_starts_at_ms: Some(since),
                },
            })
        });
        let error = copy.err().expect("a copy while the history starts");
        assert!(error.to_string().contains("try again"), "{error}");

        // Once it may, the shipper's rounds start it.
        log.set_fenced(false);
        for _ in 0..100 {
            if !log.history_pending() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!log.history_pending(), "the new history never started");
        let start = log.state().history_start;
        assert!(start > 0);
        for (path, status) in [("/sync/2/1/129", 409), ("/export/2", 404)] {
            assert_eq!(get(&db, path).await.status(), status, "{path} on {url}");
        }
        let first = format!("/export/{}", start + 2);
        let response = get(&db, &first).await;
        assert_eq!(response.status(), 200, "{first}");
        assert!(!holds(&response.bytes().await.unwrap(), &secret));
        let response = get(&db, "/export/1").await;
        assert_eq!(response.status(), 200);
        assert!(!holds(&response.bytes().await.unwrap(), &secret));
        if let Some(dir) = url.strip_prefix("file://") {
            let stored = std::path::Path::new(dir).join("dbs").join(&db.config.id);
            let mut pending = vec![stored];
            while let Some(dir) = pending.pop() {
                for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        pending.push(path);
                    } else {
                        let bytes = std::fs::read(&path).unwrap();
                        assert!(!holds(&bytes, &secret), "{} holds it", path.display());
                    }
                }
            }
        }

        // The disk is lost: the database is rebuilt from its new history, and keeps to it.
        insert_row(&db, 3).await;
        wait_shipped(&node, &db).await;
        let stopped = node.stop();
        std::fs::remove_dir_all(&stopped).unwrap();
        let node = serve_node(
            stopped,
            DataLimits::default(),
            settings(&url, DurabilityMode::Lag),
        )
        .await;
        db.addr = node.addr;
        wait_served(&db).await;
        let rebuilt = node.node.by_id(&db.config.id).unwrap();
        assert!(!atoll_data::transfer_history::pending(&rebuilt));
        assert_eq!(atoll_data::transfer_history::first_frame(&rebuilt), start);
        assert_eq!(get(&db, "/sync/2/1/129").await.status(), 409);
        let result = db.query(sql("SELECT x FROM t ORDER BY x")).await;
        assert_eq!(result["rows"].as_array().unwrap().len(), 2, "{result}");
    }
}

async fn insert_row(db: &TestDb, x: i64) {
    let result = db
        .run(&[sql(&format!("INSERT INTO t VALUES ({x}, 'new')"))])
        .await;
    assert_eq!(result[0]["type"], "ok", "{}", result[0]);
}
