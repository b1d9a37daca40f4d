//! Databases encrypted with their customer's key, at the engine and in the log
//! (docs/ENCRYPTION.md): no row reaches the disk, the WAL or object storage in the clear;
//! a connection with the key reads everything back; a connection without it does what the
//! log, restores and replicas do (recover, checkpoint, copy frames) but reads no row; a
//! wrong key reads and writes nothing. Each test runs for every supported cipher.

use atoll_storage::encryption::{self, Cipher, EncryptionKey};
use atoll_storage::restore::{restore_to_file, Target};
use atoll_storage::shipper::{internal_connection, DatabaseLog, ShipContext};
use atoll_storage::wal::read_committed;
use atoll_storage::wal_insert::WalInsert;
use atoll_storage::{Storage, StorageSettings};
use base64::Engine;
use rusqlite::config::DbConfig;
use rusqlite::{ffi, Connection, OpenFlags};
use std::path::Path;
use std::sync::Arc;

const MARKER: &str = "SECRET-ROW-";

fn key(cipher: Cipher, fill: u8) -> EncryptionKey {
    let bytes = vec![fill; cipher.key_len()];
    EncryptionKey::from_base64(
        cipher,
        &base64::engine::general_purpose::STANDARD.encode(bytes),
    )
    .unwrap()
}

fn read_write() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// A new encrypted database holding `rows` rows, left in its WAL (no checkpoint on close).
fn encrypted_database(file: &Path, key: &EncryptionKey, rows: i64) {
    let conn = encryption::create(file, key).unwrap();
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .unwrap();
    conn.execute_batch(
        "PRAGMA wal_autocheckpoint = 0; CREATE TABLE t(x INTEGER PRIMARY KEY, secret TEXT);",
    )
    .unwrap();
    insert_rows(&conn, 0..rows);
}

fn insert_rows(conn: &Connection, xs: std::ops::Range<i64>) {
    for x in xs {
        conn.execute(
            "INSERT INTO t VALUES (?1, ?2)",
            rusqlite::params![x, format!("{MARKER}{x:08}")],
        )
        .unwrap();
    }
}

fn rows(conn: &Connection) -> Vec<(i64, String)> {
    let mut stmt = conn.prepare("SELECT x, secret FROM t ORDER BY x").unwrap();
    let rows = stmt
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap();
    rows.map(Result::unwrap).collect()
}

fn expected(n: i64) -> Vec<(i64, String)> {
    (0..n).map(|x| (x, format!("{MARKER}{x:08}"))).collect()
}

/// Whether any file under `dir` holds the marker of a row (or the table's name) in the clear.
fn plaintext_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in walk(dir) {
        let bytes = std::fs::read(&entry).unwrap();
        for needle in [MARKER.as_bytes(), b"CREATE TABLE t"] {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found.push(format!(
                    "{}: {}",
                    entry.display(),
                    String::from_utf8_lossy(needle)
                ));
            }
        }
    }
    found
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn integrity(conn: &Connection) -> String {
    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap()
}

#[test]
fn no_row_reaches_the_file_or_the_wal_in_the_clear_and_the_key_reads_them_back() {
    for cipher in Cipher::ALL {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let key = key(cipher, 1);
        encrypted_database(&file, &key, 2_000);
        assert!(dir.path().join("data-wal").exists());
        assert_eq!(
            plaintext_under(dir.path()),
            Vec::<String>::new(),
            "{cipher:?}: WAL"
        );
        // The first 16 bytes stay SQLite's: connections without the key open the file.
        assert!(std::fs::read(&file)
            .map(|b| b.is_empty() || b.starts_with(b"SQLite format 3\0"))
            .unwrap());

        // Read back through the WAL, with a page cache too small to hold the table.
        let conn = encryption::open(&file, read_write(), &key).unwrap();
        conn.execute_batch("PRAGMA cache_size = 2;").unwrap();
        assert_eq!(rows(&conn), expected(2_000), "{cipher:?}");
        // A keyed checkpoint copies the pages into the file (decrypted from the WAL,
        // encrypted again on the way into the file).
        let (log, copied) =
            encryption::engine::checkpoint(&conn, ffi::SQLITE_CHECKPOINT_TRUNCATE).unwrap();
        assert_eq!(log, copied);
        assert_eq!(
            plaintext_under(dir.path()),
            Vec::<String>::new(),
            "{cipher:?}: file"
        );
        drop(conn);

        let conn = encryption::open(&file, read_write(), &key).unwrap();
        assert_eq!(rows(&conn), expected(2_000), "{cipher:?}: reopened");
        assert_eq!(integrity(&conn), "ok");
        assert_eq!(
            encryption::engine::reserved_bytes(&conn),
            cipher.reserved_bytes() as i64
        );
    }
}

#[test]
fn a_connection_without_the_key_recovers_checkpoints_and_locks_but_reads_no_row() {
    for cipher in Cipher::ALL {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let key = key(cipher, 2);
        encrypted_database(&file, &key, 500);

        let keyless = internal_connection(&file).unwrap();
        // The shipper's and the moves' write lock.
        keyless.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").unwrap();
        // Recovery of the WAL checks its checksums, computed over the ciphertext.
        let (log, copied) =
            encryption::engine::checkpoint(&keyless, ffi::SQLITE_CHECKPOINT_PASSIVE).unwrap();
        assert!(
            log > 0 && log == copied,
            "{cipher:?}: {log} frames, {copied} copied"
        );
        encryption::engine::checkpoint(&keyless, ffi::SQLITE_CHECKPOINT_TRUNCATE).unwrap();
        assert_eq!(
            std::fs::metadata(dir.path().join("data-wal"))
                .unwrap()
                .len(),
            0
        );
        let read = keyless.query_row("SELECT count(*) FROM t", [], |row| row.get::<_, i64>(0));
        assert!(
            read.is_err(),
            "{cipher:?}: a keyless connection read {read:?}"
        );
        drop(keyless);
        assert_eq!(
            plaintext_under(dir.path()),
            Vec::<String>::new(),
            "{cipher:?}"
        );

        let conn = encryption::open(&file, read_write(), &key).unwrap();
        assert_eq!(rows(&conn), expected(500), "{cipher:?}");
        assert_eq!(integrity(&conn), "ok", "{cipher:?}");
    }
}

#[test]
fn a_wrong_key_reads_and_writes_nothing() {
    for cipher in Cipher::ALL {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let right = key(cipher, 3);
        encrypted_database(&file, &right, 100);
        for committed in [false, true] {
            if committed {
                let conn = encryption::open(&file, read_write(), &right).unwrap();
                encryption::engine::checkpoint(&conn, ffi::SQLITE_CHECKPOINT_TRUNCATE).unwrap();
            }
            let wrong = encryption::open(&file, read_write(), &key(cipher, 4)).unwrap();
            let read = wrong.query_row("SELECT count(*) FROM t", [], |row| row.get::<_, i64>(0));
            assert!(read.is_err(), "{cipher:?}: read {read:?}");
            let write = wrong.execute("INSERT INTO t VALUES (1000, 'x')", []);
            assert!(write.is_err(), "{cipher:?}: wrote {write:?}");
            drop(wrong);
            let conn = encryption::open(&file, read_write(), &right).unwrap();
            assert_eq!(rows(&conn), expected(100), "{cipher:?}");
            assert_eq!(integrity(&conn), "ok", "{cipher:?}");
        }
    }
}

#[test]
fn spilled_sorts_and_temporary_tables_stay_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    let key = key(Cipher::Aes256Gcm, 5);
    encrypted_database(&file, &key, 3_000);
    let conn = encryption::open(&file, read_write(), &key).unwrap();
    // A 64 KiB cache makes the sort spill to a temporary file (memory, for this VFS).
    conn.execute_batch("PRAGMA cache_size = -64;").unwrap();
    let sorted: Vec<String> = conn
        .prepare("SELECT secret, randomblob(200) FROM t ORDER BY secret DESC")
        .unwrap()
        .query_map([], |row| row.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(sorted.len(), 3_000);
    assert_eq!(sorted[0], format!("{MARKER}{:08}", 2_999));
    conn.execute_batch(
        "CREATE TEMP TABLE copy AS SELECT * FROM t; CREATE INDEX temp.c ON copy(secret);",
    )
    .unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM temp.copy", [], |row| row.get(0))
        .unwrap();
    assert_eq!(n, 3_000);
    // A rollback journal would hold pages in the clear: an encrypted database stays in WAL.
    let journal =
        conn.execute_batch("PRAGMA journal_mode = DELETE; INSERT INTO t VALUES (-1, 'x');");
    assert!(journal.is_err(), "{journal:?}");
    drop(conn);
    assert_eq!(plaintext_under(dir.path()), Vec::<String>::new());
}

#[test]
fn a_vacuum_keeps_the_pages_encrypted_and_their_reserved_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    let key = key(Cipher::Aes128Gcm, 8);
    encrypted_database(&file, &key, 1_000);
    let conn = encryption::open(&file, read_write(), &key).unwrap();
    conn.execute_batch("DELETE FROM t WHERE x % 2 = 0; VACUUM;")
        .unwrap();
    encryption::engine::checkpoint(&conn, ffi::SQLITE_CHECKPOINT_TRUNCATE).unwrap();
    assert_eq!(
        encryption::engine::reserved_bytes(&conn),
        Cipher::Aes128Gcm.reserved_bytes() as i64
    );
    assert_eq!(integrity(&conn), "ok");
    let n: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
        .unwrap();
    assert_eq!(n, 500);
    drop(conn);
    assert!(encryption::is_encrypted_file(&file).unwrap());
    assert_eq!(plaintext_under(dir.path()), Vec::<String>::new());
}

/// Whether `key` reads every page of `file` (a full scan and the integrity check).
fn reads_with(file: &Path, key: &EncryptionKey) -> bool {
    let Ok(conn) = encryption::open(file, read_write(), key) else {
        return false;
    };
    conn.execute_batch("PRAGMA cache_size = 2;").is_ok()
        && conn
            .query_row("PRAGMA integrity_check", [], |row| row.get::<_, String>(0))
            .is_ok_and(|ok| ok == "ok")
}

#[test]
fn a_rotation_rewrites_every_page_under_the_new_key_at_once_and_can_be_repeated() {
    for (from, to) in [
        (Cipher::Aes256Gcm, Cipher::Aes256Gcm),
        (Cipher::Aes128Gcm, Cipher::ChaCha20Poly1305),
        (Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm),
        (Cipher::Aegis256, Cipher::Aegis256X4),
        (Cipher::Aegis128L, Cipher::Aegis128X2),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let (old, new) = (key(from, 11), key(to, 12));
        // Half checkpointed into the file, half in the WAL: both are rewritten.
        encrypted_database(&file, &old, 1_000);
        let keyless = internal_connection(&file).unwrap();
        encryption::engine::checkpoint(&keyless, ffi::SQLITE_CHECKPOINT_TRUNCATE).unwrap();
        insert_rows(
            &encryption::open(&file, read_write(), &old).unwrap(),
            1_000..1_500,
        );

        // Rewritten but not committed (a crash before the commit): all under the old key.
        let rotating = encryption::engine::open_rotating(&file, read_write(), &new, &old).unwrap();
        rotating.execute_batch("BEGIN IMMEDIATE").unwrap();
        drop(rotating);
        assert!(reads_with(&file, &old), "{from:?}: whole under the old key");
        assert!(!reads_with(&file, &new));

        let rotating = encryption::engine::open_rotating(&file, read_write(), &new, &old).unwrap();
        rotating
            .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .unwrap();
        let pages = encryption::engine::rewrite_pages(&rotating).unwrap();
        assert!(pages > 10, "{pages}");
        drop(rotating);
        assert!(
            reads_with(&file, &new),
            "{from:?}->{to:?}: the new key reads all"
        );
        assert!(
            !reads_with(&file, &old),
            "{from:?}->{to:?}: the old key reads nothing"
        );
        let conn = encryption::open(&file, read_write(), &new).unwrap();
        assert_eq!(rows(&conn), expected(1_500));
        drop(conn);

        // The rotation's frames checkpointed without a key: the file is the new key's.
        let keyless = internal_connection(&file).unwrap();
        encryption::engine::checkpoint(&keyless, ffi::SQLITE_CHECKPOINT_TRUNCATE).unwrap();
        drop(keyless);
        assert!(reads_with(&file, &new) && !reads_with(&file, &old));
        assert_eq!(plaintext_under(dir.path()), Vec::<String>::new());

        // Repeated (an interrupted rotation whose commit happened): harmless.
        let again = encryption::engine::open_rotating(&file, read_write(), &new, &old).unwrap();
        assert_eq!(encryption::engine::rewrite_pages(&again).unwrap(), pages);
        drop(again);
        assert!(reads_with(&file, &new));
        // A stranger's key as the previous one rewrites nothing it cannot read.
        let stranger = key(to, 13);
        let wrong =
            encryption::engine::open_rotating(&file, read_write(), &stranger, &key(from, 14))
                .unwrap();
        assert!(encryption::engine::rewrite_pages(&wrong).is_err());
        drop(wrong);
        assert!(
            reads_with(&file, &new),
            "{from:?}: untouched by the failed rotation"
        );
    }
}

#[test]
fn frames_copied_as_bytes_without_the_key_make_a_readable_replica() {
    for cipher in Cipher::ALL {
        let dir = tempfile::tempdir().unwrap();
        let primary = dir.path().join("primary");
        let key = key(cipher, 6);
        encrypted_database(&primary, &key, 200);
        // The replica starts as a copy of the checkpointed primary.
        {
            let conn = encryption::open(&primary, read_write(), &key).unwrap();
            encryption::engine::checkpoint(&conn, ffi::SQLITE_CHECKPOINT_TRUNCATE).unwrap();
        }
        let replica_dir = dir.path().join("replica");
        std::fs::create_dir(&replica_dir).unwrap();
        let replica = replica_dir.join("data");
        std::fs::copy(&primary, &replica).unwrap();

        // New transactions on the primary, read out of its WAL as bytes and inserted into
        // the replica's WAL by a connection without the key, as read replicas do.
        {
            let conn = encryption::open(&primary, read_write(), &key).unwrap();
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
                .unwrap();
            insert_rows(&conn, 200..700);
        }
        let read = read_committed(&dir.path().join("primary-wal"), None, 4096, usize::MAX).unwrap();
        assert!(!read.frames.is_empty());
        let keyless = internal_connection(&replica).unwrap();
        let mut insert = WalInsert::begin(&keyless).unwrap();
        for frame in &read.frames {
            insert
                .append(frame.page_no, frame.size_after, &frame.page)
                .unwrap();
        }
        insert.end().unwrap();
        drop(keyless);
        assert_eq!(
            plaintext_under(&replica_dir),
            Vec::<String>::new(),
            "{cipher:?}"
        );

        let conn = encryption::open(&replica, read_write(), &key).unwrap();
        assert_eq!(rows(&conn), expected(700), "{cipher:?}");
        assert_eq!(integrity(&conn), "ok", "{cipher:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_in_object_storage_holds_ciphertext_and_restores_without_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let storage = Arc::new(Storage::open(&format!("file://{}", store_dir.display())).unwrap());
    let db_dir = dir.path().join("db");
    std::fs::create_dir(&db_dir).unwrap();
    let file = db_dir.join("data");
    let key = key(Cipher::Aes256Gcm, 7);
    let conn = encryption::create(&file, &key).unwrap();
    conn.execute_batch(
        "PRAGMA wal_autocheckpoint = 0; CREATE TABLE t(x INTEGER PRIMARY KEY, secret TEXT);",
    )
    .unwrap();
    let log = Arc::new(DatabaseLog::open(
        "db1",
        &file,
        Arc::new(atoll_storage::backlog::Backlog::new()),
        Arc::clone(storage.lease()),
    ));
    let settings = StorageSettings {
        checkpoint_frames: 8,
        ..StorageSettings::default()
    };
    // Rounds of commits, each shipped; the small checkpoint threshold makes the shipper
    // (a connection without the key) checkpoint and snapshot between them.
    for round in 0..4 {
        for x in round * 50..round * 50 + 50 {
            log.record_commit();
            insert_rows(&conn, x..x + 1);
        }
        let (log, storage, settings) = (Arc::clone(&log), Arc::clone(&storage), settings.clone());
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
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
    drop(conn);
    assert!(!walk(&store_dir).is_empty());
    assert_eq!(
        plaintext_under(&store_dir),
        Vec::<String>::new(),
        "object storage"
    );
    assert_eq!(
        plaintext_under(&db_dir),
        Vec::<String>::new(),
        "the node's files"
    );

    let restored = dir.path().join("restored");
    restore_to_file(&storage, "db1", Target::Latest, None, &restored)
        .await
        .unwrap();
    assert_eq!(
        plaintext_under(dir.path().join("restored").parent().unwrap()).len(),
        0
    );
    let conn = encryption::open(&restored, read_write(), &key).unwrap();
    assert_eq!(rows(&conn), expected(200));
    assert_eq!(integrity(&conn), "ok");
}

#[test]
fn a_plain_file_prepared_for_an_encrypted_upload_keeps_its_rows_and_rowids() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain.db");
    let conn = Connection::open(&file).unwrap();
    // No INTEGER PRIMARY KEY: the rowids are the table's own, and must survive.
    conn.execute_batch(
        "CREATE TABLE t(secret TEXT); CREATE INDEX t_secret ON t(secret);
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500)
         INSERT INTO t SELECT 'row ' || x FROM c;
         DELETE FROM t WHERE rowid % 3 = 0;",
    )
    .unwrap();
    let before: Vec<(i64, String)> = conn
        .prepare("SELECT rowid, secret FROM t ORDER BY rowid")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    encryption::engine::reserve_for_encryption(&conn, Cipher::Aegis256).unwrap();
    assert_eq!(encryption::engine::reserved_bytes(&conn), 48);
    let after: Vec<(i64, String)> = conn
        .prepare("SELECT rowid, secret FROM t ORDER BY rowid")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(before, after);
    assert_eq!(integrity(&conn), "ok");
}
