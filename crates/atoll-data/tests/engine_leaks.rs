//! Memory the engine never gave back, found by the SQL fuzzer and replayed through the data
//! plane. Alone in its test binary: it reads the engine's process-wide count of bytes
//! allocated (`sqlite3_memory_used`), which any other test running beside it would move.
//! The engine is built without that count (`SQLITE_DEFAULT_MEMSTATUS=0`, `vendor/README.md`):
//! this binary turns it on before the engine starts.

mod support;

use support::*;

#[allow(unsafe_code)] // two FFI calls: one setting, one counter
fn engine_bytes_in_use() -> i64 {
    static COUNT_ON: std::sync::Once = std::sync::Once::new();
    COUNT_ON.call_once(|| {
        let on: libc::c_int = 1;
        // SAFETY: a configuration call with one integer argument, made before anything in
        // this process opened a connection (the first call of the test, before its node);
        // the engine refuses it (SQLITE_MISUSE) once initialized, which the assert catches.
        let rc =
            unsafe { rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, on) };
        assert_eq!(
            rc,
            rusqlite::ffi::SQLITE_OK,
            "the engine's heap count stays off"
        );
    });
    // SAFETY: reads a counter; no arguments, no state of ours.
    unsafe { rusqlite::ffi::sqlite3_memory_used() }
}

// vector_top_k filtered again (here: once for each row of the outer table of a join) set
// its cursor's result rows to NULL without freeing the previous ones: every pass leaked its
// result for good (~480 KB per statement below, ~150 MiB with a bigger outer table and the
// node's 30 s deadline). The engine now frees them before the next search.
#[tokio::test]
async fn a_vector_top_k_filtered_again_leaks_nothing() {
    // The count turned on before the node opens its first connection.
    assert_eq!(engine_bytes_in_use(), 0);
    let node = start_node().await;
    let db = node.create_db("leak");
    for statement in [
        "CREATE TABLE v (id INTEGER PRIMARY KEY, e F32_BLOB(2))",
        "CREATE INDEX vi ON v(libsql_vector_idx(e))",
        "INSERT INTO v(e) WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 60) SELECT vector32('[' || x || ', 1]') FROM s",
        "CREATE TABLE big (x)",
        "INSERT INTO big WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 1000) SELECT x FROM s",
    ] {
        db.query(sql(statement)).await;
    }
    let join =
        "SELECT count(*) FROM big AS a CROSS JOIN vector_top_k('vi', vector32('[1,1]'), 60) AS b";
    // Warm up: the statement cache, the page cache and the pool's connections.
    for _ in 0..3 {
        let rows = db.query(sql(join)).await;
        assert_eq!(rows["rows"][0][0]["value"], "60000", "{rows}");
    }
    let before = engine_bytes_in_use();
    assert!(before > 0, "the engine's heap is not being counted");
    for _ in 0..10 {
        db.query(sql(join)).await;
    }
    let grown = engine_bytes_in_use() - before;
    // Leaking, ten statements took ~4.8 MB; a little slack for the node's own work.
    assert!(
        grown < 1_000_000,
        "the engine holds {grown} bytes more after ten joins"
    );
}
