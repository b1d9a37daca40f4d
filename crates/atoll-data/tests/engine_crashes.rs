//! Every crash of the engine that tenant SQL ever reached, replayed through the data plane.
//! The engine is C and runs in the node's process: one of these took every tenant of the
//! node down. Each is fixed in the engine itself (`vendor/libsql-ffi.patch`, listed in
//! `vendor/README.md`), so no way of reaching the bug gets around the fix; a test here runs
//! the statement that found it and the ways around it, then checks that the node still
//! serves. Without the patch the test process itself aborts. Crashes found by the SQL
//! fuzzer (`scripts/fuzz-sql.sh`) are added here too.

mod support;

use serde_json::{json, Value};
use support::*;

/// A database with a small vector table and its DiskANN index.
async fn vector_db(node: &TestNode, name: &str) -> TestDb {
    let db = node.create_db(name);
    db.query(sql(
        "CREATE TABLE vv (id INTEGER PRIMARY KEY, e F32_BLOB(3))",
    ))
    .await;
    db.query(sql("CREATE INDEX vvi ON vv(libsql_vector_idx(e))"))
        .await;
    for i in 0..20 {
        db.query(sql(&format!(
            "INSERT INTO vv (e) VALUES (vector32('[{i}, {}, 1]'))",
            i * 2
        )))
        .await;
    }
    db
}

/// The error message of a statement that must fail, run with `token`.
async fn error_message(db: &TestDb, token: &str, stmt: Value) -> String {
    let response = db
        .post_with(
            "/v2/pipeline",
            token,
            json!({"requests": [{"type": "execute", "stmt": stmt}, {"type": "close"}]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let result = &body["results"][0];
    assert_eq!(result["type"], "error", "ran: {result}");
    result["error"]["message"].as_str().unwrap().to_string()
}

async fn still_serves(db: &TestDb) {
    let rows = db.query(sql("SELECT count(*) FROM vv")).await;
    assert_eq!(rows["rows"][0][0]["value"], "20", "{rows}");
}

// Issue 26, finding 1: a read-only token's `vector_top_k` with k = 1e9 aborted the whole
// process (the search context's failed allocation was freed twice).
#[tokio::test]
async fn vector_top_k_with_a_huge_k_is_an_error_not_a_crash() {
    let node = start_node().await;
    let db = vector_db(&node, "vectors").await;
    let reader = db.read_only_token();
    // A working search first: the bound leaves normal use alone.
    let found = db
        .query(sql(
            "SELECT id FROM vector_top_k('vvi', vector32('[1, 2, 1]'), 3)",
        ))
        .await;
    assert_eq!(found["rows"].as_array().unwrap().len(), 3, "{found}");
    for k in [
        "1000000000",
        "100000000",
        // 2^29 + 1: k * 8 bytes wrapped around to an 8-byte buffer.
        "536870913",
        "4294967297",
        "9223372036854775807",
        "1e9",
        "1e300",
        "(SELECT 1000000000)",
        "65537",
    ] {
        let message = error_message(
            &db,
            &reader,
            sql(&format!(
                "SELECT * FROM vector_top_k('vvi', vector32('[1,2,3]'), {k})"
            )),
        )
        .await;
        assert!(
            message.contains("at most 65536") || message.contains("between 0 and 65536"),
            "k = {k}: {message}"
        );
        still_serves(&db).await;
    }
    // A bound parameter gets no further than a literal.
    let message = error_message(
        &db,
        &reader,
        json!({"sql": "SELECT * FROM vector_top_k('vvi', vector32('[1,2,3]'), ?)", "args": [integer(1_000_000_000)]}),
    )
    .await;
    assert!(message.contains("at most 65536"), "{message}");
    still_serves(&db).await;
}

// Found reading the code around finding 1: an index's `search_l` sizes every search's
// allocations, and the tenant chooses it.
#[tokio::test]
async fn vector_index_parameters_are_bounded() {
    let node = start_node().await;
    let db = vector_db(&node, "params").await;
    for param in [
        "search_l=1000000000",
        "insert_l=536870913",
        "max_neighbors=100000",
    ] {
        let error = db
            .query_error(sql(&format!(
                "CREATE INDEX big ON vv(libsql_vector_idx(e, '{param}'))"
            )))
            .await;
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("too large") || message.contains("at most"),
            "{param}: {message}"
        );
    }
    // Within the bound they work as before.
    db.query(sql(
        "CREATE INDEX fine ON vv(libsql_vector_idx(e, 'search_l=300', 'insert_l=100'))",
    ))
    .await;
    let found = db
        .query(sql(
            "SELECT id FROM vector_top_k('fine', vector32('[1, 2, 1]'), 5)",
        ))
        .await;
    assert_eq!(found["rows"].as_array().unwrap().len(), 5, "{found}");
    still_serves(&db).await;
}

// Found by the SQL fuzzer (fuzz/sql-crashes): `libsql_vector_idx` is registered with any
// number of arguments and read the first of a call with none.
#[tokio::test]
async fn libsql_vector_idx_without_arguments_is_an_error_not_a_crash() {
    let node = start_node().await;
    let db = vector_db(&node, "marker").await;
    let reader = db.read_only_token();
    for statement in [
        "SELECT libsql_vector_idx()",
        "SELECT json_quote(1.5), libsql_vector_idx()",
    ] {
        let message = error_message(&db, &reader, sql(statement)).await;
        assert!(
            message.contains("needs the vector column"),
            "{statement}: {message}"
        );
        still_serves(&db).await;
    }
    // Its one use, in an index definition, works as before.
    let found = db
        .query(sql(
            "SELECT libsql_vector_idx(1), libsql_vector_idx('x', 'metric=l2')",
        ))
        .await;
    assert_eq!(found["rows"][0][0]["value"], "1", "{found}");
}

// Found by the SQL fuzzer (a campaign with a small statement memory budget; it crashes
// without one): an index on `libsql_vector_idx()` called without arguments read the count
// of an argument list that does not exist (a null pointer) while CREATE INDEX was prepared.
#[tokio::test]
async fn a_vector_index_without_arguments_is_an_error_not_a_crash() {
    let node = start_node().await;
    let db = vector_db(&node, "marker-index").await;
    for statement in [
        "CREATE INDEX i0 ON vv(libsql_vector_idx())",
        "CREATE INDEX i1 ON vv((libsql_vector_idx()) ASC) WHERE id > 0",
        "CREATE INDEX i2 ON vv(libsql_vector_idx(*))",
    ] {
        let message = error_message(&db, &db.token(), sql(statement)).await;
        assert!(
            message.contains("must contain at least one argument"),
            "{statement}: {message}"
        );
        still_serves(&db).await;
    }
    // With its column it still makes an index.
    db.query(sql("CREATE INDEX i3 ON vv(libsql_vector_idx(e))"))
        .await;
}

// Found by the SQL fuzzer: `vector_top_k`'s hidden columns (`idx`, `vector`, `k`) were read
// at negative offsets of its result rows; on a table whose key is not its rowid that was a
// wild pointer (SIGSEGV).
#[tokio::test]
async fn vector_top_k_hidden_columns_read_as_null() {
    let node = start_node().await;
    let db = node.create_db("hidden");
    for statement in [
        "CREATE TABLE w (id TEXT PRIMARY KEY, e F32_BLOB(2)) WITHOUT ROWID",
        "CREATE INDEX wi ON w(libsql_vector_idx(e))",
        "INSERT INTO w WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 300) SELECT 'k' || x, vector32('[' || x || ', 1]') FROM s",
    ] {
        db.query(sql(statement)).await;
    }
    for _ in 0..3 {
        let rows = db
            .query(sql(
                "SELECT k, idx, vector, id FROM vector_top_k('wi', vector32('[1,2]'), 100)",
            ))
            .await;
        let rows = rows["rows"].as_array().unwrap().clone();
        assert_eq!(rows.len(), 100);
        assert_eq!(rows[0][0]["type"], "null", "{:?}", rows[0]);
        assert_eq!(rows[0][3]["type"], "text", "{:?}", rows[0]);
    }
}

// Found by the SQL fuzzer: with a foreign key naming an FTS5 table's shadow table, the
// shadow writes of a flush open statement savepoints, each of which flushed the same table
// again: endless recursion, a stack overflow (SIGSEGV).
#[tokio::test]
async fn an_fts5_flush_does_not_recurse_into_itself() {
    let node = start_node().await;
    let db = node.create_db("fts");
    db.query(sql("CREATE VIRTUAL TABLE f3 USING fts5(x0)"))
        .await;
    db.query(sql(
        "CREATE TABLE t1 (c0 INTEGER PRIMARY KEY, FOREIGN KEY (c0) REFERENCES f3_data)",
    ))
    .await;
    const BULK: &str = "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 200000) SELECT 'w' || x FROM s";
    // Under the sandbox (defensive mode, foreign keys on) the flush's shadow write answers a
    // constraint error; what matters is that it answers, and that the node still serves.
    let _ = db.run(&[sql(&format!("INSERT INTO f3 (x0) {BULK}"))]).await;
    let rows = db.query(sql("SELECT count(*) FROM t1")).await;
    assert_eq!(rows["rows"][0][0]["value"], "0", "{rows}");
    // Without the foreign key the same bulk insert works as ever.
    db.query(sql("CREATE VIRTUAL TABLE f4 USING fts5(x0)"))
        .await;
    db.query(sql(&format!("INSERT INTO f4 (x0) {BULK}"))).await;
    let rows = db
        .query(sql(
            "SELECT count(*), (SELECT count(*) FROM f4 WHERE f4 MATCH 'w777') FROM f4",
        ))
        .await;
    assert_eq!(rows["rows"][0][0]["value"], "200000", "{rows}");
    assert_eq!(rows["rows"][0][1]["value"], "1", "{rows}");
}

// Found by the SQL fuzzer: a vector index keeps its nodes in `<index>_shadow` and its
// parameters in `libsql_vector_meta_shadow`, ordinary tables a full-access token may write.
// A node blob claiming more neighbours than its block holds sent every search past the
// buffer (SIGSEGV); parameters describing a node larger than its block would too.
#[tokio::test]
async fn a_vector_index_whose_own_tables_were_rewritten_is_an_error_not_a_crash() {
    let node = start_node().await;
    let db = node.create_db("rewritten");
    for statement in [
        "CREATE TABLE v (id INTEGER PRIMARY KEY, e F32_BLOB(4))",
        "CREATE INDEX vi ON v(libsql_vector_idx(e))",
        "INSERT INTO v(e) WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 50) SELECT vector32('[' || x || ',1,2,3]') FROM s",
        // The neighbour count (after the node's 8-byte rowid) set to 65,535.
        "UPDATE vi_shadow SET data = substr(data, 1, 8) || x'ffff' || substr(data, 11)",
    ] {
        db.query(sql(statement)).await;
    }
    for statement in [
        "SELECT id FROM vector_top_k('vi', vector32('[1,2,3,4]'), 5)",
        "INSERT INTO v(e) VALUES (vector32('[9,9,9,9]'))",
        "DELETE FROM v WHERE id = 3",
    ] {
        // Answered (the clamped count reads what the block holds), whatever the answer.
        let _ = db.run(&[sql(statement)]).await;
    }
    db.query(sql("SELECT count(*) FROM v")).await;
    // Parameters that do not describe a node fitting its block: refused when the index opens.
    db.query(sql(
        "UPDATE libsql_vector_meta_shadow SET metadata = x'0100000000000000000000000000000001000000000000000000000000000000'",
    ))
    .await;
    let _ = db
        .run(&[sql(
            "SELECT id FROM vector_top_k('vi', vector32('[1,2,3,4]'), 5)",
        )])
        .await;
    let _ = db
        .run(&[sql("INSERT INTO v(e) VALUES (vector32('[8,8,8,8]'))")])
        .await;
    db.query(sql("SELECT count(*) FROM v")).await;
}

// Found by the SQL fuzzer: an EXPLAIN taken from the connection's statement cache after the
// table it names was dropped listed the freed table (SIGSEGV). EXPLAINs are prepared afresh.
#[tokio::test]
async fn a_cached_explain_of_a_dropped_table_is_an_error_not_a_crash() {
    let node = start_node().await;
    let db = node.create_db("explain");
    let results = db
        .run(&[
            sql("CREATE TABLE t (a)"),
            sql("EXPLAIN INSERT INTO t VALUES (1)"),
            sql("DROP TABLE t"),
            sql("EXPLAIN INSERT INTO t VALUES (1)"),
        ])
        .await;
    assert_eq!(results[1]["type"], "ok", "{results:?}");
    assert_eq!(results[3]["type"], "error", "{results:?}");
    db.query(sql("SELECT 1")).await;
}

// Found by the SQL fuzzer: a vector element longer than 1,024 characters filled the
// parser's buffer without a terminator, and the error message printed the stack bytes
// after it — memory of the node's process in a tenant's error.
#[tokio::test]
async fn a_too_long_vector_element_leaks_nothing_into_its_error() {
    let node = start_node().await;
    let db = node.create_db("leak");
    let error = db
        .query_error(sql(
            "SELECT vector32('[' || printf('%.*c', 1100, '1') || ']')",
        ))
        .await;
    let message = error["message"].as_str().unwrap();
    let quoted = message
        .split_once("characters: '")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("{message}"));
    assert_eq!(quoted, format!("{}'", "1".repeat(1024)), "{message}");
    // 1,024 characters are still a number.
    db.query(sql(
        "SELECT vector_extract(vector32('[' || printf('%.*c', 1024, '1') || ']'))",
    ))
    .await;
}
