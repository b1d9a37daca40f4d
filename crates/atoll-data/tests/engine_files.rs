//! How the engine finds and checks a database's file, as the node's engine is built
//! (`vendor/README.md`): no symbolic link in a database's path is resolved (a link among the
//! directories is followed by the kernel, a database file that is itself a link is refused),
//! and the checks of an open file that only feed the engine's log are made only when a log
//! callback listens. Alone in its test binary: a log callback is process-wide and must be
//! installed before the engine starts, so every test here installs it first.

use rusqlite::Connection;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Mutex, Once};

/// What the engine logged, in order.
static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

#[allow(unsafe_code)] // reads the message the engine passes
extern "C" fn collect(_: *mut c_void, _code: c_int, message: *const c_char) {
    // SAFETY: the engine passes a NUL-terminated message that lives for the call.
    let message = unsafe { CStr::from_ptr(message) };
    LOGGED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(message.to_string_lossy().into_owned());
}

/// Installs [`collect`] as the engine's log callback, before this process opens anything.
#[allow(unsafe_code)] // one FFI configuration call
fn listen_to_the_engine_log() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let callback: extern "C" fn(*mut c_void, c_int, *const c_char) = collect;
        // SAFETY: SQLITE_CONFIG_LOG takes a callback of this signature and a context pointer
        // (none); made before any connection in this process (every test calls this first),
        // the engine refuses it (SQLITE_MISUSE) once initialized, which the assert catches.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_LOG,
                callback,
                std::ptr::null_mut::<c_void>(),
            )
        };
        assert_eq!(
            rc,
            rusqlite::ffi::SQLITE_OK,
            "the log callback is installed"
        );
    });
}

fn logged(needle: &str) -> bool {
    LOGGED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|message| message.contains(needle))
}

/// A data directory on another disk, reached through a link: the kernel follows the link
/// among the directories, and the WAL lands beside the real file.
#[test]
fn a_database_under_a_linked_directory_opens_with_its_wal_beside_it() {
    listen_to_the_engine_log();
    let dir = tempfile::tempdir().expect("tempdir");
    let real = dir.path().join("disk");
    std::fs::create_dir(&real).expect("mkdir");
    let link = dir.path().join("data-dir");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let conn = Connection::open(link.join("tenant.db")).expect("open through the link");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1), (2);",
    )
    .expect("write");
    assert!(real.join("tenant.db").is_file());
    assert!(
        real.join("tenant.db-wal").is_file(),
        "the WAL is beside the database"
    );
    let count: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
        .expect("read");
    assert_eq!(count, 2);
}

/// The node never opens a database through a link of its own; a database file that is a
/// link is refused by `open(O_NOFOLLOW)` rather than resolved (the engine used to `lstat`
/// every element of every path it opened to resolve links).
#[test]
fn a_database_file_that_is_a_link_is_refused_not_followed() {
    listen_to_the_engine_log();
    let dir = tempfile::tempdir().expect("tempdir");
    let real = dir.path().join("real.db");
    Connection::open(&real)
        .and_then(|conn| conn.execute_batch("CREATE TABLE t(x)"))
        .expect("a real database");
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let opened = Connection::open(&link).and_then(|conn| {
        conn.query_row("SELECT count(*) FROM sqlite_schema", [], |row| {
            row.get::<_, i64>(0)
        })
    });
    let error = opened.expect_err("a linked database file is not opened");
    assert_eq!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::CannotOpen),
        "{error}"
    );
}

/// The checks of an open database file (unlinked, linked twice, renamed while open) only
/// feed the engine's log, so the node, which installs no log callback, skips their system
/// calls at every open and close; with a callback they report as before.
#[test]
fn a_file_unlinked_while_open_is_still_reported_to_a_log_callback() {
    listen_to_the_engine_log();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("unlinked.db");
    let conn = Connection::open(&path).expect("open");
    conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .expect("write");
    std::fs::remove_file(&path).expect("unlink");
    drop(conn);
    assert!(
        logged("file unlinked while open"),
        "{:?}",
        LOGGED.lock().unwrap_or_else(|p| p.into_inner())
    );
}
