//! Each connection's page cache is its own. SQLite built with
//! `SQLITE_ENABLE_MEMORY_MANAGEMENT` (libsql-ffi's default) puts the caches of every
//! connection in the process in one group: one mutex taken by every page fetch of every
//! tenant, and one least-recently-used list, from which a connection at its cache's bound
//! takes the oldest page of any database. The node's engine is built without it
//! (`vendor/README.md`): a neighbour scanning a large table recycles its own pages, never a
//! quiet tenant's.

use atoll_data::memory::HeapReading;
use rusqlite::Connection;

/// The engine's heap `conn` holds: its cached pages, its schema (the same before and after
/// below) and its prepared statements (none are kept).
fn held(conn: &Connection) -> u64 {
    HeapReading::default().bytes(conn)
}

/// Fills `table` with `rows` rows of 1,000 bytes each: four to a 4 KiB page.
fn fill(conn: &Connection, table: &str, rows: u32) {
    conn.execute_batch(&format!(
        "CREATE TABLE {table}(id INTEGER PRIMARY KEY, body BLOB);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
         INSERT INTO {table} SELECT i, randomblob(1000) FROM n;"
    ))
    .expect("fill");
}

fn scan(conn: &Connection, table: &str) -> i64 {
    conn.query_row(
        &format!("SELECT sum(length(body)) FROM {table}"),
        [],
        |row| row.get(0),
    )
    .expect("scan")
}

#[test]
fn a_neighbours_scan_does_not_take_the_pages_another_connection_cached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let quiet = Connection::open(dir.path().join("quiet.db")).expect("open quiet");
    fill(&quiet, "t", 40);
    assert_eq!(scan(&quiet, "t"), 40_000);
    let cached = held(&quiet);

    // The neighbour's cache is bounded at 10 pages and it reads ~250: at its bound on
    // nearly every page, so it recycles a page each time.
    let busy = Connection::open(dir.path().join("busy.db")).expect("open busy");
    busy.execute_batch("PRAGMA cache_size = 10").expect("bound");
    fill(&busy, "big", 1_000);
    assert_eq!(scan(&busy, "big"), 1_000_000);

    assert_eq!(
        held(&quiet),
        cached,
        "the quiet connection's cached pages were taken by its neighbour's scan"
    );
    // And the quiet tenant's pages are still there to be read.
    assert_eq!(scan(&quiet, "t"), 40_000);
}
