//! libSQL's WAL frame-insertion API (`libsql_wal_insert_begin`, `…_frame`, `…_end`) behind a
//! safe type. The safe binding (libsql-rusqlite) does not wrap these C functions, so this
//! module holds `unsafe` (as do `encryption::engine` and atoll-data's `memory`). Frames go
//! in as they are: on an encrypted database, through a connection without the key, so
//! the ciphertext is not sealed twice. Two callers write raw frames into a WAL, both in atoll-data: replicas applying
//! their primary's transactions (`replication::follow`), and offline writes pushed by a
//! synced client (`replication::push`).
#![allow(unsafe_code)]

use rusqlite::ffi;

/// An SQLite result code and its message.
#[derive(Debug)]
pub struct WalInsertError {
    pub code: i32,
    pub message: String,
}

impl WalInsertError {
    /// Another connection holds the write lock (or the snapshot is stale): try again.
    pub fn is_busy(&self) -> bool {
        self.code & 0xff == ffi::SQLITE_BUSY
    }
}

impl std::fmt::Display for WalInsertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (SQLite code {})", self.message, self.code)
    }
}

/// The number of frames in the connection's WAL. Ask before [`WalInsert::begin`]: once an
/// insertion began, asking takes a lock it holds.
pub fn frame_count(conn: &rusqlite::Connection) -> Result<u32, WalInsertError> {
    let mut count: u32 = 0;
    // SAFETY: `conn` is an open connection for the whole call; `count` outlives it.
    let rc = unsafe { ffi::libsql_wal_frame_count(conn.handle(), &mut count) };
    check(conn, rc)?;
    Ok(count)
}

/// A write transaction that appends frames to the WAL as given: page images with their
/// page numbers, committed by the frame that carries the database's size after it. The
/// connection must have read the database once (a fresh connection opens its WAL on its
/// first read). Ends when dropped; frames after the last commit frame are then left
/// uncommitted, and the next writer overwrites them.
pub struct WalInsert<'c> {
    conn: &'c rusqlite::Connection,
    ended: bool,
    buf: Vec<u8>,
}

impl<'c> WalInsert<'c> {
    /// Takes the write lock (fails with a busy error when another writer holds it).
    pub fn begin(conn: &'c rusqlite::Connection) -> Result<WalInsert<'c>, WalInsertError> {
        // SAFETY: `conn` is an open connection, borrowed for as long as the insertion.
        let rc = unsafe { ffi::libsql_wal_insert_begin(conn.handle()) };
        check(conn, rc)?;
        Ok(WalInsert {
            conn,
            ended: false,
            buf: Vec::new(),
        })
    }

    /// Appends one frame; `size_after` is 0 inside a transaction, the database's size in
    /// pages on its commit frame.
    pub fn append(
        &mut self,
        page_no: u32,
        size_after: u32,
        page: &[u8],
    ) -> Result<(), WalInsertError> {
        self.buf.clear();
        self.buf.extend_from_slice(&page_no.to_be_bytes());
        self.buf.extend_from_slice(&size_after.to_be_bytes());
        // Salts and checksums: SQLite computes its own.
        self.buf.extend_from_slice(&[0u8; 16]);
        self.buf.extend_from_slice(page);
        let mut conflict: i32 = 0;
        // SAFETY: `conn` is open and in an insertion; `buf` and `conflict` outlive the call.
        // A frame number past the WAL's last frame appends (one at or before it would be
        // compared with the frame there instead).
        let rc = unsafe {
            ffi::libsql_wal_insert_frame(
                self.conn.handle(),
                u32::MAX,
                self.buf.as_mut_ptr().cast(),
                self.buf.len() as u32,
                &mut conflict,
            )
        };
        check(self.conn, rc)
    }

    /// Ends the insertion, releasing the write lock.
    pub fn end(mut self) -> Result<(), WalInsertError> {
        self.ended = true;
        // SAFETY: `conn` is open and in an insertion.
        let rc = unsafe { ffi::libsql_wal_insert_end(self.conn.handle()) };
        check(self.conn, rc)
    }
}

impl Drop for WalInsert<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // SAFETY: as in `end`.
            let _ = unsafe { ffi::libsql_wal_insert_end(self.conn.handle()) };
        }
    }
}

fn check(conn: &rusqlite::Connection, rc: i32) -> Result<(), WalInsertError> {
    if rc == ffi::SQLITE_OK {
        return Ok(());
    }
    // SAFETY: `conn` is open; SQLite's message is copied before anything else runs on it.
    let message = unsafe {
        std::ffi::CStr::from_ptr(ffi::sqlite3_errmsg(conn.handle()))
            .to_string_lossy()
            .to_string()
    };
    Err(WalInsertError { code: rc, message })
}
