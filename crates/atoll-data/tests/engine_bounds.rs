//! Work and memory of one statement that the engine did not bound, found by the SQL fuzzer
//! (`fuzz/sql-findings/`), replayed through the data plane. None of them crashed the node:
//! each held one of its SQL threads deaf to the statement's deadline, or took memory past
//! the sandbox's per-value bound, or never gave memory back. Each is fixed in the engine
//! (`vendor/libsql-ffi.patch`, listed in `vendor/README.md`).
//!
//! The leak's test lives alone in `engine_leaks.rs`: it reads the engine's process-wide
//! allocation counter, which the other tests here would move.

mod support;

use support::*;

// json_pretty's output buffer doubled without looking at the connection's length limit: a
// 1,000-deep array indented by 100,000 spaces took ~1.5 GiB before the allocator refused
// and the statement failed with "out of memory". It now fails with "too big" when the
// output passes the limit (the sandbox's 32 MiB per value), and smaller output is whole.
#[tokio::test]
async fn json_pretty_stops_at_the_length_limit() {
    let node = start_node().await;
    let db = node.create_db("pretty");
    let error = db
        .query_error(sql(
            "SELECT length(json_pretty(printf('%.*c', 1000, '[') || '1' || printf('%.*c', 1000, ']'), printf('%.*c', 100000, ' ')))",
        ))
        .await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("too big"), "{message}");
    // 100 levels indented by 1,000: 10 MB of output, under the limit, returned whole.
    let rows = db
        .query(sql(
            "SELECT length(json_pretty(printf('%.*c', 100, '[') || '1' || printf('%.*c', 100, ']'), printf('%.*c', 1000, ' ')))",
        ))
        .await;
    assert_eq!(rows["rows"][0][0]["value"], "10000401", "{rows}");
}

// An FTS3/FTS4 MATCH was parsed in time quadratic in its terms, inside one instruction of
// the virtual machine, so the deadline never stopped it: a MATCH of 2 million terms (4 MB)
// would have held an SQL thread for hours, and only then failed the expression's depth
// check. It now fails that check as soon as the tree has more phrases than it can hold.
// The bound on the wait is a hang detector, not a speed check (the answer comes in
// milliseconds).
#[tokio::test]
async fn a_match_of_millions_of_terms_fails_at_once() {
    let node = start_node().await;
    let db = node.create_db("fts");
    db.query(sql("CREATE VIRTUAL TABLE f USING fts4(x, y)"))
        .await;
    db.query(sql(
        "INSERT INTO f VALUES ('alpha beta', 'one two'), ('gamma 0 5 1', 'three'), ('alpha gamma', 'two three')",
    ))
    .await;
    for query in [
        "replace(printf('%.*c', 2000000, 'x'), 'x', '0 ')",
        "'[' || replace(printf('%.*c', 1000000, 'x'), 'x', '0.5,') || '1]'",
        "replace(printf('%.*c', 100000, 'x'), 'x', '(0) ')",
        "replace(printf('%.*c', 100000, 'x'), 'x', '\"0\" ')",
    ] {
        let error = tokio::time::timeout(
            std::time::Duration::from_secs(120),
            db.query_error(sql(&format!(
                "SELECT count(*) FROM f WHERE f MATCH ({query})"
            ))),
        )
        .await
        .unwrap_or_else(|_| panic!("MATCH {query} still running after 120 s"));
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("FTS expression tree is too large"),
            "{query}: {message}"
        );
    }
    // Every kind of MATCH expression still parses as before.
    for (query, expected) in [
        ("alpha", vec!["1", "3"]),
        ("alpha (beta OR gamma)", vec!["1", "3"]),
        ("\"alpha beta\" OR y:three", vec!["1", "2", "3"]),
        ("(alpha NOT beta) OR (\"gamma 0\" 5)", vec!["2", "3"]),
        ("alp* y:tw*", vec!["1", "3"]),
        ("alpha NEAR/2 gamma", vec!["3"]),
    ] {
        let rows = db
            .query(sql(&format!(
                "SELECT rowid FROM f WHERE f MATCH '{}' ORDER BY rowid",
                query.replace('\'', "''")
            )))
            .await;
        let found: Vec<&str> = rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row[0]["value"].as_str().unwrap())
            .collect();
        assert_eq!(found, expected, "MATCH {query}");
    }
    // 2,048 terms (the most a tree of depth 12 holds with implicit ANDs) still run.
    let rows = db
        .query(sql(
            "SELECT count(*) FROM f WHERE f MATCH (replace(printf('%.*c', 2047, 'x'), 'x', '0 ') || '1')",
        ))
        .await;
    assert_eq!(rows["rows"][0][0]["value"], "1", "{rows}");
}

/// A node whose statements may take `bytes` of the engine's memory each.
async fn node_with_statement_memory(bytes: u64) -> TestNode {
    let mut settings = atoll_data::node::NodeSettings::default();
    settings.sandbox.max_statement_memory = bytes;
    start_node_with_settings(atoll_data::DataLimits::default(), settings).await
}

// SQLite bounds the memory of the whole process, not of one statement: a GROUP BY over 100
// keys of 33 MB peaked at 3.4 GB, a window ordered by 16 MiB keys at 2.6 GB (for 40 s,
// deaf to a 1 s deadline), taken from every tenant of the node. Each statement now has a
// budget of the engine's heap (`--max-statement-memory`, here 64 MiB); past it the
// statement fails, saying why, and the connection goes on serving.
#[tokio::test]
async fn a_statement_over_its_memory_budget_fails_alone() {
    let node = node_with_statement_memory(64 << 20).await;
    let db = node.create_db("hungry");
    for hungry in [
        "SELECT count(*) FROM (SELECT x FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 100) SELECT x FROM s) GROUP BY substr(zeroblob(33000000), x, 2147483647))",
        "SELECT count(*) FROM (SELECT max(x) OVER (ORDER BY randomblob(16777217) ROWS BETWEEN 4096 PRECEDING AND CURRENT ROW) FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 150) SELECT x FROM s))",
        "SELECT count(*) FROM (SELECT x FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 10) SELECT x FROM s) ORDER BY randomblob(20000000))",
    ] {
        let error = db.query_error(sql(hungry)).await;
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("needed more than 64 MiB of memory")
                && message.contains("--max-statement-memory"),
            "{hungry}: {message}"
        );
        assert_eq!(error["code"], "SQLITE_NOMEM", "{error}");
    }
    // Work within the budget is untouched: a sort of 20 MB, and the table it sorted.
    db.query(sql("CREATE TABLE t (x)")).await;
    db.query(sql(
        "INSERT INTO t SELECT randomblob(1000) FROM (WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 20000) SELECT x FROM s)",
    ))
    .await;
    let rows = db
        .query(sql("SELECT count(*) FROM (SELECT x FROM t ORDER BY x)"))
        .await;
    assert_eq!(rows["rows"][0][0]["value"], "20000", "{rows}");
}
