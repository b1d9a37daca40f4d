//! Where a node's databases keep their WAL index: in the node's own memory.
//!
//! SQLite's WAL index (`walformat.html`) says which frames of the WAL hold which page. Its
//! default home is the `-shm` file beside the database, mapped by every process that opens
//! the database and locked with `fcntl` at every read transaction. A node is the only
//! process serving its databases, and its connections use SQLite's `unix-excl` VFS
//! ([`VFS`]) instead: the first connection to a database takes one exclusive lock on the
//! file for the whole process, and the index lives in anonymous memory shared by the
//! process's connections (an `ATOLL PATCH` maps it lazily and keeps the regions a closed
//! database's index gives back, cleared, for the next database's first open,
//! `vendor/README.md`). That spares every cold open the `-shm` file (open, `fstat`,
//! `fchown`, a lock, a header write, `mmap`, and their undoing at close), every read
//! transaction its `fcntl` calls (a busy database's readers took a system call each on
//! the same lock), and every warm database one file descriptor (PERFORMANCE.md, "The WAL
//! index in the node's memory").
//!
//! What it costs: another process cannot open a database while the node has it open (it
//! gets "database is locked"), which also keeps a `sqlite3` shell from writing under a
//! live node; and the index is rebuilt from the WAL by the first reader after the last
//! connection closes, as SQLite does anyway when it opens a `-shm` file no process holds.
//! The `-shm` files left by earlier versions are ignored.
//!
//! `unsafe`: the call into the engine's patch that copies the index's header.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The VFS of every connection a node opens to a tenant's database (the encrypted
/// databases' VFS is a shim over the same one).
pub const VFS: &str = "unix-excl";

extern "C" {
    fn atoll_wal_index_read(path: *const c_char, out: *mut u8, len: c_int) -> c_int;
}

/// The first `N` bytes of the WAL index of the database file at `database`, as a
/// connection of this process has it mapped now; `None` when no connection has (the next
/// reader rebuilds it from the WAL). Read without the index's locks, as a reader of a
/// `-shm` file would: the caller checks the header's two copies agree.
pub fn read<const N: usize>(database: &Path) -> Option<[u8; N]> {
    let path = CString::new(database.as_os_str().as_bytes()).ok()?;
    let len = c_int::try_from(N).ok()?;
    let mut out = [0u8; N];
    // SAFETY: `path` is a NUL-terminated string and `out` has room for `len` bytes, both
    // valid for the call; the engine copies at most `len` bytes under its own mutexes.
    let copied = unsafe { atoll_wal_index_read(path.as_ptr(), out.as_mut_ptr(), len) };
    (copied == 1).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::committed_in_index;
    use rusqlite::{Connection, OpenFlags};

    fn node_connection(file: &Path) -> Connection {
        let conn = Connection::open_with_flags_and_vfs(file, OpenFlags::default(), VFS).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;")
            .unwrap();
        conn
    }

    /// A connection through the default VFS, as the shipper's, a restore's or a copy's.
    fn plain_connection(file: &Path) -> Connection {
        let conn = Connection::open(file).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;")
            .unwrap();
        // Busy at once rather than after rusqlite's 5 s of retries.
        conn.busy_timeout(std::time::Duration::ZERO).unwrap();
        conn
    }

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn the_index_lives_in_the_process_while_a_connection_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let conn = node_connection(&file);
        // As a shipped database's connections: the WAL outlives them (no checkpoint at
        // close), so the index rebuilt from it below must say what this one said.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .unwrap();
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1), (2);")
            .unwrap();
        assert!(!dir.path().join("data-shm").exists(), "no -shm file");
        let (_, frames) = committed_in_index(&file).expect("the index of the open connection");
        assert!(frames >= 2, "{frames} frames");
        conn.execute("INSERT INTO t VALUES (3)", []).unwrap();
        let (_, more) = committed_in_index(&file).unwrap();
        assert!(more > frames, "a commit moves it: {frames} then {more}");
        drop(conn);
        assert_eq!(
            committed_in_index(&file),
            None,
            "freed with the last connection"
        );
        // Rebuilt from the WAL by the next reader.
        let conn = node_connection(&file);
        assert_eq!(count(&conn), 3);
        assert_eq!(committed_in_index(&file).map(|(_, f)| f), Some(more));
    }

    /// The shipper, restores and copies open the node's files through the default VFS while
    /// the node's own connections use `unix-excl`: both share the process's bookkeeping of
    /// the file (its locks, and whichever index the first of them mapped), whichever opens
    /// first.
    #[test]
    fn connections_through_both_vfs_share_one_index_and_one_set_of_locks() {
        for node_first in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("data");
            let (node, plain) = if node_first {
                let node = node_connection(&file);
                node.execute_batch("CREATE TABLE t(x)").unwrap();
                (node, plain_connection(&file))
            } else {
                let plain = plain_connection(&file);
                plain.execute_batch("CREATE TABLE t(x)").unwrap();
                (node_connection(&file), plain)
            };
            plain
                .set_db_config(
                    rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                    true,
                )
                .unwrap();
            // Each sees the other's commits.
            node.execute("INSERT INTO t VALUES (1)", []).unwrap();
            assert_eq!(count(&plain), 1, "node first: {node_first}");
            plain.execute("INSERT INTO t VALUES (2)", []).unwrap();
            assert_eq!(count(&node), 2);
            // One writer at a time, across both.
            node.execute_batch("BEGIN IMMEDIATE").unwrap();
            let busy = plain.execute_batch("BEGIN IMMEDIATE").unwrap_err();
            assert_eq!(
                busy.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy),
                "{busy}"
            );
            node.execute_batch("INSERT INTO t VALUES (3); COMMIT")
                .unwrap();
            // A reader's snapshot holds against the other's writes and checkpoint: the WAL
            // is not reset under it.
            node.execute_batch("BEGIN").unwrap();
            assert_eq!(count(&node), 3);
            plain.execute("INSERT INTO t VALUES (4)", []).unwrap();
            let (_, _, checkpointed): (i64, i64, i64) = plain
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .unwrap();
            let (_, frames) = committed_in_index(&file).unwrap();
            assert!(
                frames > 0,
                "the WAL was kept for the reader ({checkpointed} checkpointed)"
            );
            assert_eq!(count(&node), 3, "the snapshot of before");
            node.execute_batch("COMMIT").unwrap();
            assert_eq!(count(&node), 4);
            drop(plain);
            node.execute("INSERT INTO t VALUES (5)", []).unwrap();
            let check: String = node
                .query_row("PRAGMA integrity_check", [], |row| row.get(0))
                .unwrap();
            assert_eq!(check, "ok");
            drop(node);
            assert_eq!(count(&plain_connection(&file)), 5);
        }
    }

    /// The engine keeps the regions an index gives back for the next database's first open
    /// (an `ATOLL PATCH`, `vendor/README.md`): each must read as a new one. A region that
    /// still held another database's index header would be trusted as this database's
    /// (its two copies agree, its checksum holds) and send reads to the wrong frames.
    #[test]
    fn an_index_region_given_back_serves_the_next_database_as_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<_> = (0..40).map(|i| dir.path().join(format!("db{i}"))).collect();
        let wal_frames = |file: &Path| {
            let wal = std::fs::metadata(file.with_file_name(format!(
                "{}-wal",
                file.file_name().unwrap().to_str().unwrap()
            )))
            .unwrap();
            (wal.len() - 32) / (24 + 4096)
        };
        // As a shipped database's connections: the WAL outlives them, and each open
        // rebuilds the index from it.
        let open = |file: &Path| {
            let conn = node_connection(file);
            conn.set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            )
            .unwrap();
            conn
        };
        for (i, file) in files.iter().enumerate() {
            let conn = open(file);
            // Durability is not what this test is about: no fsync per commit.
            conn.execute_batch("PRAGMA synchronous = OFF; CREATE TABLE t(x)")
                .unwrap();
            // WALs of different lengths: the first one commit of 4,500 rows of about a page
            // each, longer than one region of the index holds (4,062 frames), so it maps
            // two; the others one commit per row.
            if i == 0 {
                conn.execute_batch(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4500)
                     INSERT INTO t SELECT randomblob(3000) FROM n",
                )
                .unwrap();
            } else {
                for _ in 0..i {
                    conn.execute("INSERT INTO t VALUES (randomblob(10))", [])
                        .unwrap();
                }
            }
            let (_, frames) = committed_in_index(file).unwrap();
            assert_eq!(frames, wal_frames(file), "database {i}");
            drop(conn);
        }
        // Each reopened takes a region another database's index gave back (in reverse,
        // then forwards: the first's two regions go to others and come back), and sees its
        // own WAL and rows only.
        for round in 0..2 {
            let order: Vec<usize> = if round == 0 {
                (0..files.len()).rev().collect()
            } else {
                (0..files.len()).collect()
            };
            for i in order {
                let file = &files[i];
                let conn = open(file);
                let expected = if i == 0 { 4_500 } else { i as i64 };
                assert_eq!(count(&conn), expected, "database {i}, round {round}");
                let (_, frames) = committed_in_index(file).unwrap();
                assert_eq!(frames, wal_frames(file), "database {i}, round {round}");
                drop(conn);
            }
        }
    }

    /// No other process opens a file while the node holds it: a `sqlite3` shell (here
    /// Python's) gets "database is locked" instead of an index of its own beside the node's.
    #[test]
    fn another_process_cannot_open_a_database_the_node_holds() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let conn = node_connection(&file);
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
        let read_elsewhere = || {
            std::process::Command::new("python3")
                .args([
                    "-c",
                    "import sqlite3, sys\n\
                     c = sqlite3.connect(sys.argv[1], timeout=0)\n\
                     print(c.execute('SELECT count(*) FROM t').fetchone()[0])",
                ])
                .arg(&file)
                .output()
        };
        let Ok(held) = read_elsewhere() else {
            eprintln!("SKIPPED: no python3 to play the other process");
            return;
        };
        assert!(!held.status.success());
        let stderr = String::from_utf8_lossy(&held.stderr);
        assert!(stderr.contains("database is locked"), "{stderr}");
        drop(conn);
        let free = read_elsewhere().unwrap();
        assert!(
            free.status.success(),
            "{}",
            String::from_utf8_lossy(&free.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "1");
    }
}
