//! The durable log alone (docs/STORAGE.md), with no data plane: objects in the store, a
//! database's WAL shipped as segments and snapshots, restores from them, a damaged object
//! named, and nothing stored without the node's lease. What needs a node and its databases
//! (rebuilds, moves, sync durability, transfers) is tested in `atoll-data/tests/storage.rs`.
//!
//! Each test runs on a `file://` store, and again on S3 when `ATOLL_TEST_S3_URL` names
//! an S3-compatible server (scripts/test.sh starts one on loopback; without it the S3
//! runs say so loudly and skip).

use atoll_storage::lease::Lease;
use atoll_storage::restore::{restore_to_file, Catalog, Target};
use atoll_storage::shipper::{internal_connection, DatabaseLog, ShipContext};
use atoll_storage::{keys, Storage, StorageError, StorageSettings};
use bytes::Bytes;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The stores the tests run against: a local directory always, S3 when one is given.
fn storage_urls(name: &str) -> Vec<String> {
    let unique = format!(
        "{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let dir = std::env::temp_dir().join(format!("atoll-storage-{unique}"));
    let mut urls = vec![format!("file://{}", dir.display())];
    match std::env::var("ATOLL_TEST_S3_URL") {
        Ok(base) if !base.is_empty() => {
            urls.push(format!("{}/{unique}", base.trim_end_matches('/')))
        }
        _ => eprintln!(
            "WARNING: ATOLL_TEST_S3_URL is not set: {name} runs on file:// only, not on S3 (scripts/test.sh starts an S3 server)"
        ),
    }
    urls
}

/// Small, so that the tests reach checkpoints and several segments.
fn settings() -> StorageSettings {
    StorageSettings {
        checkpoint_frames: 8,
        ..StorageSettings::default()
    }
}

/// A database as the data plane keeps one: WAL mode, checkpointed only by the shipper.
fn new_database(file: &Path) -> rusqlite::Connection {
    let conn = internal_connection(file).unwrap();
    conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x INTEGER PRIMARY KEY, pad TEXT);")
        .unwrap();
    conn
}

/// Commits row `x` as a tenant's connection does: the commit hook records it first.
fn insert(conn: &rusqlite::Connection, log: &DatabaseLog, x: i64) {
    log.record_commit();
    conn.execute(
        "INSERT INTO t VALUES (?1, ?2)",
        rusqlite::params![x, "p".repeat(3000)],
    )
    .unwrap();
}

/// One shipper round, on a blocking thread as the node runs them.
async fn ship(log: &Arc<DatabaseLog>, storage: &Arc<Storage>) {
    let (log, storage) = (Arc::clone(log), Arc::clone(storage));
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let settings = settings();
        log.ship_round(&ShipContext {
            storage: &storage,
            settings: &settings,
            runtime: &runtime,
        })
    })
    .await
    .unwrap()
    .unwrap();
}

fn rows(file: &Path) -> Vec<i64> {
    let conn = rusqlite::Connection::open(file).unwrap();
    let mut stmt = conn.prepare("SELECT x FROM t ORDER BY x").unwrap();
    let rows = stmt.query_map([], |row| row.get(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_stored_read_listed_and_deleted() {
    for url in storage_urls("objects") {
        let storage = Storage::open(&url).unwrap();
        assert_eq!(storage.get("dbs/a/missing").await.unwrap(), None, "{url}");
        storage
            .put("dbs/a/one", Bytes::from_static(b"first"))
            .await
            .unwrap();
        storage
            .put("dbs/a/two", Bytes::from_static(b"second"))
            .await
            .unwrap();
        storage
            .put("dbs/b/one", Bytes::from_static(b"other"))
            .await
            .unwrap();
        assert_eq!(
            storage.get("dbs/a/one").await.unwrap().as_deref(),
            Some(&b"first"[..]),
            "{url}"
        );
        let listed = storage.list("dbs/a/").await.unwrap();
        let keys: Vec<_> = listed.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["dbs/a/one", "dbs/a/two"], "{url}");
        assert_eq!(listed[1].size, 6, "{url}");

        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy");
        // The inspector (a running checksum, in restores) sees every byte on the way.
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counting = Arc::clone(&seen);
        let copied = storage
            .get_to_file("dbs/a/two", &copy, move |chunk| {
                counting.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
            })
            .await
            .unwrap();
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 6, "{url}");
        assert_eq!(copied, 6, "{url}");
        assert_eq!(std::fs::read(&copy).unwrap(), b"second", "{url}");
        let missing = storage
            .get_to_file("dbs/a/none", &dir.path().join("none"), |_| {})
            .await;
        assert!(
            matches!(&missing, Err(StorageError::ObjectStorage(why)) if why.contains("dbs/a/none")),
            "{url}: {missing:?}"
        );

        assert_eq!(storage.delete_prefix("dbs/a/").await.unwrap(), 2, "{url}");
        assert!(storage.list("dbs/a/").await.unwrap().is_empty(), "{url}");
        assert_eq!(storage.list("dbs/").await.unwrap().len(), 1, "{url}");
        // Deleting what is gone is not an error (retention may run twice).
        storage.delete("dbs/a/one").await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shipped_log_restores_every_committed_state() {
    for url in storage_urls("restore") {
        let storage = Arc::new(Storage::open(&url).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let conn = new_database(&file);
        let log = Arc::new(DatabaseLog::open(
            "db1",
            &file,
            Arc::new(atoll_storage::backlog::Backlog::new()),
            Arc::clone(storage.lease()),
        ));
        // The first round snapshots the new database (a generation at frame 0); then
        // several rounds, each with commits, and checkpoints between them (8 frames).
        ship(&log, &storage).await;
        let mut heads = Vec::new();
        for round in 0..5 {
            for x in round * 4..round * 4 + 4 {
                insert(&conn, &log, x);
            }
            ship(&log, &storage).await;
            heads.push((
                log.state().durable_frame_no,
                (0..round * 4 + 4).collect::<Vec<_>>(),
            ));
        }
        let catalog = Catalog::load(&storage, "db1").await.unwrap();
        assert!(!catalog.is_empty(), "{url}");
        assert_eq!(catalog.segments.len(), 5, "{url}: {:?}", catalog.segments);

        let restored = dir.path().join("latest");
        let latest = restore_to_file(&storage, "db1", Target::Latest, None, &restored)
            .await
            .unwrap();
        assert_eq!(latest.frame_no, log.state().durable_frame_no, "{url}");
        assert_eq!(rows(&restored), (0..20).collect::<Vec<_>>(), "{url}");

        // Each round's head is a state of its own, exactly as committed then.
        for (i, (frame, expected)) in heads.iter().enumerate() {
            let at = dir.path().join(format!("frame-{i}"));
            let state = restore_to_file(&storage, "db1", Target::Frame(*frame), None, &at)
                .await
                .unwrap();
            assert_eq!(state.frame_no, *frame, "{url}");
            assert_eq!(&rows(&at), expected, "{url}: frame {frame}");
        }
        // A frame in the middle of a transaction is no state of the database.
        let torn = restore_to_file(
            &storage,
            "db1",
            Target::Frame(heads[0].0 - 1),
            None,
            &dir.path().join("torn"),
        )
        .await;
        assert!(
            matches!(&torn, Err(StorageError::BadRequest(why)) if why.contains("does not end a transaction")),
            "{url}: {torn:?}"
        );
        assert!(!dir.path().join("torn").exists(), "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_segment_stops_the_restore_and_is_named() {
    for url in storage_urls("damaged") {
        let storage = Arc::new(Storage::open(&url).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let conn = new_database(&file);
        let log = Arc::new(DatabaseLog::open(
            "db1",
            &file,
            Arc::new(atoll_storage::backlog::Backlog::new()),
            Arc::clone(storage.lease()),
        ));
        for x in 0..3 {
            insert(&conn, &log, x);
            ship(&log, &storage).await;
        }
        let segments = storage.list(&keys::log("db1")).await.unwrap();
        let damaged = &segments[segments.len() / 2].key;
        let mut bytes = storage.get(damaged).await.unwrap().unwrap().to_vec();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        storage.put(damaged, Bytes::from(bytes)).await.unwrap();

        let dest = dir.path().join("restored");
        let result = restore_to_file(&storage, "db1", Target::Latest, None, &dest).await;
        assert!(
            matches!(&result, Err(StorageError::ObjectStorage(why)) if why.contains(damaged.as_str())),
            "{url}: {result:?}"
        );
        assert!(!dest.exists(), "{url}: nothing partial is left");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_stored_once_the_lease_ran_out() {
    for url in storage_urls("lease") {
        let dir = tempfile::tempdir().unwrap();
        let lease = Arc::new(Lease::load(dir.path()));
        let storage = Storage::open(&url).unwrap().with_lease(Arc::clone(&lease));
        lease
            .grant(Instant::now(), Duration::from_secs(15))
            .unwrap();
        storage
            .put("dbs/a/leased", Bytes::from_static(b"ok"))
            .await
            .unwrap();
        // A lease whose last heartbeat was sent 20 s ago ran out 5 s ago.
        let lease = Arc::new(Lease::load(dir.path()));
        assert!(lease.is_required(), "{url}: the marker survives a restart");
        let storage = Storage::open(&url).unwrap().with_lease(Arc::clone(&lease));
        if let Some(sent) = Instant::now().checked_sub(Duration::from_secs(20)) {
            lease.grant(sent, Duration::from_secs(15)).unwrap();
        }
        let refused = storage.put("dbs/a/late", Bytes::from_static(b"no")).await;
        assert!(
            matches!(&refused, Err(StorageError::ObjectStorage(why)) if why.contains("lease")),
            "{url}: {refused:?}"
        );
        assert_eq!(storage.get("dbs/a/late").await.unwrap(), None, "{url}");
    }
}
