//! Settings of a connection made through the engine's C interface where a pragma would
//! cost a statement at every open (or open more than it sets): a node opens connections
//! to thousands of databases, and each statement of a cold open is parsed and run
//! (PERFORMANCE.md, "Fewer statements per cold open"). One of these is an Atoll patch of
//! the engine (`vendor/README.md`). Like `memory`, one of the few modules allowed `unsafe`
//! (calls into the engine).
#![allow(unsafe_code)]

use rusqlite::Connection;

extern "C" {
    fn atoll_temp_max_page_count(db: *mut rusqlite::ffi::sqlite3, pages: libc::c_uint);
}

/// Bounds `conn`'s temporary database (temporary tables and their indexes) to `pages`,
/// applied whenever the engine opens it. `PRAGMA temp.max_page_count` would open it at
/// once to set the bound — a pager allocated at every cold open and freed at every close,
/// for a database most connections never use.
pub fn limit_temporary_database(conn: &Connection, pages: u64) {
    let pages = libc::c_uint::try_from(pages).unwrap_or(libc::c_uint::MAX);
    // SAFETY: `conn.handle()` is the connection's open handle, valid for this call; the
    // engine takes the connection's mutex and stores an integer.
    unsafe { atoll_temp_max_page_count(conn.handle(), pages) }
}

/// Turns off `conn`'s automatic checkpoints (`PRAGMA wal_autocheckpoint = 0`, without a
/// statement).
pub fn disable_automatic_checkpoints(conn: &Connection) -> rusqlite::Result<()> {
    // SAFETY: `conn.handle()` is the connection's open handle, valid for this call.
    let rc = unsafe { rusqlite::ffi::sqlite3_wal_autocheckpoint(conn.handle(), 0) };
    if rc == rusqlite::ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            None,
        ))
    }
}
