//! The engine's side of encrypted databases: the page codec registered with libSQL (the
//! `atoll-encrypted` VFS and the pager codec hook, an `ATOLL PATCH` in the vendored
//! `sqlite3.c`) and connections that hold a key.
//!
//! The C side moves whole pages; this side seals and opens them ([`super::page`]). Each
//! connection's cipher state is an `Arc<PageCipher>` the C side holds a reference to for
//! as long as the connection's files are open, so the key lives exactly as long as the
//! connection — a pooled connection holds it until it is closed.
//!
//! `unsafe`: the C functions of the patch and the callbacks they call back.
#![allow(unsafe_code)]

use super::page::{PageAuthenticationFailed, PageCipher};
use super::Cipher;
use super::EncryptionKey;
use rusqlite::{ffi, Connection, OpenFlags};
use std::ffi::{c_int, c_uint, c_void};
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The VFS of encrypted databases' keyed connections.
pub const VFS_NAME: &str = "atoll-encrypted";

/// `SQLITE_IOERR_DATA`: a page failed its checks (here: its tag).
const SQLITE_IOERR_DATA: c_int = ffi::SQLITE_IOERR | (32 << 8);

type PageFn = unsafe extern "C" fn(*mut c_void, c_uint, *mut u8, c_int) -> c_int;

extern "C" {
    fn atoll_codec_register(
        encrypt: PageFn,
        decrypt: PageFn,
        retain: unsafe extern "C" fn(*mut c_void),
        release: unsafe extern "C" fn(*mut c_void),
    ) -> c_int;
    fn atoll_codec_next_open(cipher: *mut c_void);
    fn atoll_codec_rewrite_pages(db: *mut ffi::sqlite3) -> c_int;
}

unsafe extern "C" fn encrypt_page(
    cipher: *mut c_void,
    pgno: c_uint,
    page: *mut u8,
    len: c_int,
) -> c_int {
    // SAFETY: the C side's arguments (see `on_page`).
    unsafe { on_page(cipher, page, len, |cipher, page| cipher.seal(pgno, page)) }
        .map_or(ffi::SQLITE_IOERR, |()| ffi::SQLITE_OK)
}

unsafe extern "C" fn decrypt_page(
    cipher: *mut c_void,
    pgno: c_uint,
    page: *mut u8,
    len: c_int,
) -> c_int {
    // SAFETY: the C side's arguments (see `on_page`).
    unsafe { on_page(cipher, page, len, |cipher, page| cipher.open(pgno, page)) }
        .map_or(SQLITE_IOERR_DATA, |()| ffi::SQLITE_OK)
}

/// Runs `work` on the cipher state and the whole page the C side passed.
///
/// # Safety
/// `cipher` is a pointer the C side holds a reference to (`retain_cipher`), and `page`
/// a whole page of `len` bytes it owns for the duration of the call.
unsafe fn on_page(
    cipher: *mut c_void,
    page: *mut u8,
    len: c_int,
    work: impl FnOnce(&PageCipher, &mut [u8]) -> Result<(), PageAuthenticationFailed>,
) -> Result<(), PageAuthenticationFailed> {
    // SAFETY: the caller's contract above.
    let (cipher, page) = unsafe {
        (
            &*(cipher as *const PageCipher),
            std::slice::from_raw_parts_mut(page, len as usize),
        )
    };
    work(cipher, page)
}

unsafe extern "C" fn retain_cipher(cipher: *mut c_void) {
    // SAFETY: `cipher` came from Arc::as_ptr of a live Arc (open) or is held by a file.
    unsafe { Arc::increment_strong_count(cipher as *const PageCipher) }
}

unsafe extern "C" fn release_cipher(cipher: *mut c_void) {
    // SAFETY: balances one retain_cipher.
    unsafe { Arc::decrement_strong_count(cipher as *const PageCipher) }
}

/// Registers the codec once per process.
fn register() -> rusqlite::Result<()> {
    static REGISTERED: OnceLock<c_int> = OnceLock::new();
    // SAFETY: the callbacks are sound for any page the C side passes (see above).
    let code = *REGISTERED.get_or_init(|| unsafe {
        atoll_codec_register(encrypt_page, decrypt_page, retain_cipher, release_cipher)
    });
    if code == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(code),
            Some("cannot register the encryption codec".into()),
        ))
    }
}

/// Opens an encrypted database with its key. A wrong key fails on the first page read
/// (`SQLITE_IOERR_DATA`); callers check the key against the database's verifier first.
pub fn open(path: &Path, flags: OpenFlags, key: &EncryptionKey) -> rusqlite::Result<Connection> {
    open_with(
        path,
        flags,
        Arc::new(PageCipher::new(key.cipher(), key.bytes())),
    )
}

/// Opens an encrypted database to rotate its key: the connection reads pages sealed with
/// `key` or `previous` and writes with `key` ([`rewrite_pages`] re-encrypts them all).
/// Nothing but the rotation may use it: a reader of it would accept either key.
pub fn open_rotating(
    path: &Path,
    flags: OpenFlags,
    key: &EncryptionKey,
    previous: &EncryptionKey,
) -> rusqlite::Result<Connection> {
    let cipher = PageCipher::rotating(
        key.cipher(),
        key.bytes(),
        (previous.cipher(), previous.bytes()),
    );
    open_with(path, flags, Arc::new(cipher))
}

fn open_with(
    path: &Path,
    flags: OpenFlags,
    cipher: Arc<PageCipher>,
) -> rusqlite::Result<Connection> {
    register()?;
    // The main file's xOpen takes its own reference; ours ends with this function.
    // SAFETY: the pointer stays valid during the open (we hold `cipher`), and the
    // thread-local is cleared right after it.
    unsafe { atoll_codec_next_open(Arc::as_ptr(&cipher) as *mut c_void) };
    let opened = Connection::open_with_flags_and_vfs(path, flags, VFS_NAME);
    // SAFETY: clears the thread-local.
    unsafe { atoll_codec_next_open(std::ptr::null_mut()) };
    opened
}

/// Creates an empty encrypted database at `path` (which must not exist or be empty) in
/// WAL mode, with the reserved bytes every encrypted page needs; returns its connection.
pub fn create(path: &Path, key: &EncryptionKey) -> rusqlite::Result<Connection> {
    let conn = open(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        key,
    )?;
    let reserve = key.cipher().reserved_bytes();
    request_reserved_bytes(&conn, reserve)?;
    conn.pragma_update(None, "journal_mode", "wal")?;
    // The first write fixes the page size and the reserved bytes for good.
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS atoll_reserve_check(x); DROP TABLE atoll_reserve_check;",
    )?;
    let reserved_now = reserved_bytes(&conn);
    if reserved_now != reserve as i64 {
        return Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(ffi::SQLITE_CANTOPEN),
            Some(format!(
                "the database has {reserved_now} reserved bytes, not {reserve}: not empty?"
            )),
        ));
    }
    Ok(conn)
}

/// The reserved bytes per page of `conn`'s main database (SQLite's header, byte 20).
pub fn reserved_bytes(conn: &Connection) -> i64 {
    let mut query: c_int = -1;
    // SAFETY: a negative argument asks for the current value.
    let code = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_RESERVE_BYTES,
            (&mut query as *mut c_int).cast(),
        )
    };
    if code == ffi::SQLITE_OK {
        i64::from(query)
    } else {
        -1
    }
}

/// A checkpoint of the WAL (`SQLITE_CHECKPOINT_PASSIVE` or `…_TRUNCATE`) that never loads
/// the schema, so a connection without the key can run it on an encrypted database (it
/// copies ciphertext from the WAL into the file); `PRAGMA wal_checkpoint` reads the schema
/// first, which is ciphertext to such a connection. Returns (frames in the WAL, frames
/// checkpointed).
pub fn checkpoint(conn: &Connection, mode: c_int) -> rusqlite::Result<(i32, i32)> {
    let (mut log, mut copied): (c_int, c_int) = (0, 0);
    // SAFETY: a valid connection; "main" names its main database; out-pointers are live.
    let code = unsafe {
        ffi::sqlite3_wal_checkpoint_v2(conn.handle(), c"main".as_ptr(), mode, &mut log, &mut copied)
    };
    match code {
        // BUSY: readers or a writer kept part of it; what could be copied was.
        ffi::SQLITE_OK | ffi::SQLITE_BUSY => Ok((log, copied)),
        code => Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(code),
            Some("checkpoint failed".into()),
        )),
    }
}

/// Writes every page of `conn`'s database again, in one write transaction
/// (`BEGIN IMMEDIATE`, so it waits for the write lock as the connection's busy handler
/// says): each page under the connection's key. With a connection of [`open_rotating`]
/// that re-encrypts the database under the new key, atomically — a crash before the
/// commit leaves it whole under the old key, after it whole under the new one; so does a
/// rotation repeated on a database already rotated. The frames go to the WAL like any
/// commit's (the log ships them). Returns the pages written.
pub fn rewrite_pages(conn: &Connection) -> rusqlite::Result<i64> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let rewritten = (|| {
        // SAFETY: a valid connection inside the write transaction just begun.
        let code = unsafe { atoll_codec_rewrite_pages(conn.handle()) };
        if code != ffi::SQLITE_OK {
            return Err(rusqlite::Error::SqliteFailure(
                ffi::Error::new(code),
                Some("cannot rewrite the database's pages".into()),
            ));
        }
        let pages: i64 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
        conn.execute_batch("COMMIT")?;
        Ok(pages)
    })();
    if rewritten.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    rewritten
}

/// Rewrites the plain database of `conn` (not encrypted) with the bytes a page under
/// `cipher` reserves at its end ([`Cipher::reserved_bytes`]), by `VACUUM` (which keeps the
/// rowids): the form Turso's upload of a file into an encrypted database expects (the
/// server seals its pages in place). For clients that prepare such a file (`atoll db
/// create --from-file … --remote-encryption-key`).
pub fn reserve_for_encryption(conn: &Connection, cipher: Cipher) -> rusqlite::Result<()> {
    let reserve = cipher.reserved_bytes();
    request_reserved_bytes(conn, reserve)?;
    conn.execute_batch("VACUUM;")?;
    if reserved_bytes(conn) != reserve as i64 {
        return Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(ffi::SQLITE_ERROR),
            Some("VACUUM did not reserve the bytes of encrypted pages".into()),
        ));
    }
    Ok(())
}

/// Asks SQLite to reserve `reserve` bytes at the end of every page from the next write that
/// lays out the file (its first, or a `VACUUM`).
fn request_reserved_bytes(conn: &Connection, reserve: usize) -> rusqlite::Result<()> {
    let mut reserved = reserve as c_int;
    // SAFETY: a valid connection and the documented argument of the file control.
    let code = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_RESERVE_BYTES,
            (&mut reserved as *mut c_int).cast(),
        )
    };
    if code != ffi::SQLITE_OK {
        return Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(code),
            Some("cannot reserve the bytes of encrypted pages".into()),
        ));
    }
    Ok(())
}
