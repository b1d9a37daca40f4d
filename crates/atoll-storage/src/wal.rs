//! Reading committed transactions out of a SQLite WAL file, as SQLite itself decides what
//! is committed: a frame counts only if its salts match the WAL header's and its
//! cumulative checksum is right, and only frames up to the last commit frame (one whose
//! "database size after commit" is non-zero) form transactions. A torn tail left by a
//! crash, or frames of an older WAL that a reset is overwriting, fail those checks and are
//! never read as data.
//!
//! Format (sqlite.org/fileformat2.html#walformat): a 32-byte header (magic, version, page
//! size, checkpoint sequence, two salts, two checksums), then frames of a 24-byte header
//! (page number, size after commit, two salts, two checksums) and one page. All header
//! fields are big-endian; the checksums run over 32-bit words in the byte order the magic
//! names.

use crate::error::StorageError;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

const WAL_HEADER_BYTES: u64 = 32;
const FRAME_HEADER_BYTES: u64 = 24;
const MAGIC_LITTLE_ENDIAN: u32 = 0x377f_0682;
const MAGIC_BIG_ENDIAN: u32 = 0x377f_0683;

/// Where a reader stopped in one WAL: the WAL is named by its salts (a reset gives new
/// ones), `frames` were consumed, and `checksum` is the cumulative checksum after them,
/// from which the next frame is verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WalPosition {
    pub salts: (u32, u32),
    pub frames: u64,
    pub checksum: (u32, u32),
}

/// One page written by a committed transaction.
#[derive(Debug, Clone)]
pub struct WalFrame {
    pub page_no: u32,
    /// Database size in pages after the transaction, on its last frame only; else 0.
    pub size_after: u32,
    pub page: Vec<u8>,
}

/// What one read found.
#[derive(Debug)]
pub struct WalRead {
    /// Whole transactions, in commit order.
    pub frames: Vec<WalFrame>,
    /// Where the next read goes on. Its salts differ from the position read from when the
    /// WAL was reset since.
    pub position: WalPosition,
    /// The WAL was reset since `from` (its salts changed): `frames` start at its beginning.
    pub reset: bool,
}

/// Reads the committed transactions after `from` (or from the beginning of the WAL when
/// its salts differ from `from`'s, or `from` is `None`), stopping at the first commit after
/// `max_bytes` of pages were read. A WAL that does not exist, or holds no header yet, has
/// no frames.
pub fn read_committed(
    path: &Path,
    from: Option<WalPosition>,
    page_size: usize,
    max_bytes: usize,
) -> Result<WalRead, StorageError> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(WalRead {
                frames: Vec::new(),
                position: from.unwrap_or(WalPosition {
                    salts: (0, 0),
                    frames: 0,
                    checksum: (0, 0),
                }),
                reset: false,
            })
        }
        Err(e) => return Err(e.into()),
    };
    let mut header = [0u8; WAL_HEADER_BYTES as usize];
    if !read_full(&mut file, &mut header)? {
        return Ok(WalRead {
            frames: Vec::new(),
            position: from.unwrap_or(WalPosition {
                salts: (0, 0),
                frames: 0,
                checksum: (0, 0),
            }),
            reset: false,
        });
    }
    let magic = be32(&header[0..4]);
    let big_endian = match magic {
        MAGIC_LITTLE_ENDIAN => false,
        MAGIC_BIG_ENDIAN => true,
        _ => {
            return Err(StorageError::Internal(format!(
                "{} is not a WAL file (magic {magic:#x})",
                path.display()
            )))
        }
    };
    let wal_page_size = be32(&header[8..12]) as usize;
    if wal_page_size != page_size {
        return Err(StorageError::Internal(format!(
            "{} has pages of {wal_page_size} bytes, expected {page_size}",
            path.display()
        )));
    }
    let salts = (be32(&header[16..20]), be32(&header[20..24]));
    let header_checksum = checksum(big_endian, (0, 0), &header[0..24]);
    if header_checksum != (be32(&header[24..28]), be32(&header[28..32])) {
        // A header being rewritten by a reset right now: nothing to read yet.
        return Ok(WalRead {
            frames: Vec::new(),
            position: from.unwrap_or(WalPosition {
                salts,
                frames: 0,
                checksum: header_checksum,
            }),
            reset: false,
        });
    }
    let (start, reset) = match from {
        Some(position) if position.salts == salts => (position, false),
        other => (
            WalPosition {
                salts,
                frames: 0,
                checksum: header_checksum,
            },
            other.is_some(),
        ),
    };
    let frame_bytes = FRAME_HEADER_BYTES + page_size as u64;
    file.seek(SeekFrom::Start(
        WAL_HEADER_BYTES + start.frames * frame_bytes,
    ))?;
    let mut reader = std::io::BufReader::with_capacity(256 * 1024, file);

    let mut committed = Vec::new();
    let mut committed_position = start;
    let mut pending: Vec<WalFrame> = Vec::new();
    let mut running = start.checksum;
    let mut index = start.frames;
    let mut bytes = 0usize;
    let mut frame_header = [0u8; FRAME_HEADER_BYTES as usize];
    loop {
        if bytes >= max_bytes && pending.is_empty() {
            break;
        }
        if !read_full(&mut reader, &mut frame_header)? {
            break;
        }
        let mut page = vec![0u8; page_size];
        if !read_full(&mut reader, &mut page)? {
            break;
        }
        if (be32(&frame_header[8..12]), be32(&frame_header[12..16])) != salts {
            break;
        }
        let next = checksum(big_endian, running, &frame_header[0..8]);
        let next = checksum(big_endian, next, &page);
        if next != (be32(&frame_header[16..20]), be32(&frame_header[20..24])) {
            break;
        }
        let page_no = be32(&frame_header[0..4]);
        if page_no == 0 {
            break;
        }
        running = next;
        index += 1;
        let size_after = be32(&frame_header[4..8]);
        bytes += page_size;
        pending.push(WalFrame {
            page_no,
            size_after,
            page,
        });
        if size_after != 0 {
            committed.append(&mut pending);
            committed_position = WalPosition {
                salts,
                frames: index,
                checksum: running,
            };
        }
    }
    Ok(WalRead {
        frames: committed,
        position: committed_position,
        reset,
    })
}

/// What SQLite's WAL index says of the WAL of the database file `database` now: its salts
/// and the number of frames committed in it (`mxFrame`). The index is the one a
/// connection of this process has mapped (`wal_index`); `None` when none has, or while it
/// is being rewritten.
pub fn committed_in_index(database: &Path) -> Option<((u32, u32), u64)> {
    for _ in 0..3 {
        let header: [u8; 2 * INDEX_HEADER_COPY] = crate::wal_index::read(database)?;
        if let Some(found) = index_header(&header) {
            return Some(found);
        }
    }
    None
}

/// Bytes of one copy of the WAL index header (`WalIndexHdr`).
const INDEX_HEADER_COPY: usize = 48;

/// The salts and committed frames of a WAL index that starts with `index`. The header is
/// kept twice and a reader takes it only when both copies agree, as SQLite's own readers
/// do (`walIndexTryHdr`): its layout (`walformat.html`: `iChange` at 8, `isInit` at 12,
/// `mxFrame` at 16 in native order, the WAL's salts at 32 as the WAL header holds them)
/// is part of SQLite's file format.
fn index_header(index: &[u8]) -> Option<((u32, u32), u64)> {
    let (first, second) = index
        .get(..2 * INDEX_HEADER_COPY)?
        .split_at(INDEX_HEADER_COPY);
    if first != second || first[12] != 1 {
        return None;
    }
    let frames = u32::from_ne_bytes([first[16], first[17], first[18], first[19]]);
    Some((
        (be32(&first[32..36]), be32(&first[36..40])),
        u64::from(frames),
    ))
}

/// Fills `buf`, or answers `false` at the end of the file (a partial read is the end too).
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> Result<bool, StorageError> {
    match reader.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// SQLite's WAL checksum: over pairs of 32-bit words, `s0 += x0 + s1; s1 += x1 + s0`.
fn checksum(big_endian: bool, (mut s0, mut s1): (u32, u32), data: &[u8]) -> (u32, u32) {
    for pair in data.chunks_exact(8) {
        let (x0, x1) = if big_endian {
            (be32(&pair[0..4]), be32(&pair[4..8]))
        } else {
            (
                u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]),
                u32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]),
            )
        };
        s0 = s0.wrapping_add(x0).wrapping_add(s1);
        s1 = s1.wrapping_add(x1).wrapping_add(s0);
    }
    (s0, s1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal_db(dir: &Path) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(dir.join("data")).unwrap();
        conn.execute_batch(
            "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;",
        )
        .unwrap();
        conn
    }

    /// The engine clears a left-over WAL index's header instead of truncating the file
    /// (`ATOLL PATCH (cold opens)`, vendor/README.md): an index that describes another
    /// generation of the WAL, with valid checksums, must still be rebuilt from the WAL the
    /// file has now, never trusted — and the file keeps its size.
    #[test]
    fn a_stale_wal_index_left_beside_a_file_is_rebuilt_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let shm = dir.path().join("data-shm");
        // As the node's connections: the last one to close leaves the WAL and its index.
        let without_checkpoint_on_close = |conn: rusqlite::Connection| {
            conn.set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            )
            .unwrap();
            conn
        };
        let count = |conn: &rusqlite::Connection| -> i64 {
            conn.query_row("SELECT count(*) FROM t", [], |row| row.get(0))
                .unwrap()
        };
        {
            let conn = without_checkpoint_on_close(wal_db(dir.path()));
            conn.execute_batch("CREATE TABLE t(x)").unwrap();
            for i in 0..100 {
                conn.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
            }
        }
        // The index of the first WAL generation (100 commits in it), as the last
        // connection left it.
        let stale = std::fs::read(&shm).unwrap();
        assert!(stale.len() >= 32768, "{} bytes", stale.len());
        assert!(index_header(&stale).is_some_and(|(_, frames)| frames > 100));
        {
            let conn = without_checkpoint_on_close(wal_db(dir.path()));
            assert_eq!(count(&conn), 100, "the first reader rebuilt the index");
            // A second generation of the WAL, shorter than the first.
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .unwrap();
            for i in 100..150 {
                conn.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
            }
        }
        assert!(std::fs::metadata(&shm).unwrap().len() >= 32768);
        // The old index, checksums and all, put back beside the new WAL: trusted, it
        // would point readers at frames of the first generation.
        std::fs::write(&shm, &stale).unwrap();
        let conn = wal_db(dir.path());
        assert_eq!(count(&conn), 150);
        let max: i64 = conn
            .query_row("SELECT max(x) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(max, 149);
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        let (_, frames) = committed_in_index(&dir.path().join("data")).unwrap();
        assert!(
            frames < 100,
            "the index describes the WAL of now: {frames} frames"
        );
    }

    #[test]
    fn reads_whole_transactions_and_continues_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let conn = wal_db(dir.path());
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
        let wal = dir.path().join("data-wal");
        let first = read_committed(&wal, None, 4096, usize::MAX).unwrap();
        assert!(!first.frames.is_empty());
        assert_ne!(first.frames.last().unwrap().size_after, 0);
        assert_eq!(first.position.frames as usize, first.frames.len());

        let nothing = read_committed(&wal, Some(first.position), 4096, usize::MAX).unwrap();
        assert!(nothing.frames.is_empty());
        assert_eq!(nothing.position, first.position);

        conn.execute_batch("INSERT INTO t VALUES (2);").unwrap();
        let second = read_committed(&wal, Some(first.position), 4096, usize::MAX).unwrap();
        assert!(!second.reset);
        assert_eq!(second.frames.len(), 1, "one page changed");
        assert!(second.position.frames > first.position.frames);
    }

    #[test]
    fn a_torn_tail_is_not_a_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let conn = wal_db(dir.path());
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
        let wal = dir.path().join("data-wal");
        let whole = read_committed(&wal, None, 4096, usize::MAX).unwrap();
        conn.execute_batch("INSERT INTO t VALUES (randomblob(3000));")
            .unwrap();
        // Cut the last frame short, as a crash during its write would.
        let len = std::fs::metadata(&wal).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&wal)
            .unwrap()
            .set_len(len - 100)
            .unwrap();
        let read = read_committed(&wal, None, 4096, usize::MAX).unwrap();
        assert_eq!(read.position, whole.position);
        // A flipped byte inside a committed frame ends the readable log before it.
        let mut bytes = std::fs::read(&wal).unwrap();
        bytes[32 + 24 + 10] ^= 0xff;
        std::fs::write(&wal, bytes).unwrap();
        let read = read_committed(&wal, None, 4096, usize::MAX).unwrap();
        assert!(read.frames.is_empty());
    }

    #[test]
    fn a_reset_wal_starts_over_with_new_salts() {
        let dir = tempfile::tempdir().unwrap();
        let conn = wal_db(dir.path());
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
        let wal = dir.path().join("data-wal");
        let before = read_committed(&wal, None, 4096, usize::MAX).unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);")
            .unwrap();
        conn.execute_batch("INSERT INTO t VALUES (2);").unwrap();
        let after = read_committed(&wal, Some(before.position), 4096, usize::MAX).unwrap();
        assert!(after.reset);
        assert_ne!(after.position.salts, before.position.salts);
        assert_eq!(after.frames.len(), 1);
    }
}
