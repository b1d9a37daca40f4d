//! Durable databases (docs/STORAGE.md): every database's log in object storage, restores
//! to any instant, and databases rebuilt when a node's disk loses them.
//!
//! Each test runs on a `file://` store, and again on S3 when `ATOLL_TEST_S3_URL` names
//! an S3-compatible server (scripts/test.sh starts one on loopback; without it the S3
//! runs say so loudly and skip).

mod support;

use atoll_data::node::NodeSettings;
use atoll_data::storage::service::StorageConfig;
use atoll_data::storage::{DurabilityMode, StorageSettings};
use atoll_data::DataLimits;
use atoll_types::node::{CreateDatabase, Durability, Seed};
use serde_json::Value;
use std::path::PathBuf;
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
        if status.pending_commits == 0 && !log.generation_pending() && status.last_error.is_none() {
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
            tokio::task::spawn_blocking(move || node.restore_in_place(&id, at))
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
            tokio::task::spawn_blocking(move || node.restore_in_place(&id, at))
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
        let before =
            atoll_data::storage::restore::Catalog::load(&storage.storage, &source.config.id)
                .await
                .unwrap();
        assert!(before.generations.len() >= 4);
        // The window starts after row 7 was acknowledged.
        let cutoff = instants[6].1;
        atoll_data::storage::service::collect_garbage_before(
            &storage.storage,
            &source.config.id,
            cutoff,
        )
        .await
        .unwrap();
        let after =
            atoll_data::storage::restore::Catalog::load(&storage.storage, &source.config.id)
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
