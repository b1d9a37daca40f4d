//! FTS3/FTS4, FTS5 and R*Tree are registered on a connection when it first needs them, not
//! at every open (an Atoll patch of the engine, `vendor/README.md`: their registration and
//! teardown were ~7 % of a cold open). Each test here starts from a connection that has
//! never used them — the database's idle connections are dropped first — and reaches them
//! by one of the ways that must still find them, through the data plane as a client does.

mod support;

use support::*;

/// Drops `db`'s idle connections: its next statement runs on a newly opened one.
fn cold(node: &TestNode, db: &TestDb) {
    node.node.pool.forget(&db.config.id);
}

fn rows(result: &serde_json::Value) -> &Vec<serde_json::Value> {
    result["rows"].as_array().expect("rows")
}

/// The most important of them: a full-text index's shadow tables are read-only to tenant
/// SQL (defensive mode) only because the engine knows, while it reads the schema, that
/// `docs_data` belongs to an FTS5 table. Read by a connection that had not registered FTS5
/// yet, the schema must mark them all the same: a write to one is refused, and the index
/// answers a MATCH with its ranking functions.
#[tokio::test]
async fn a_full_text_index_read_by_a_new_connection_keeps_its_shadow_tables_read_only() {
    let node = start_node().await;
    let db = node.create_db("fts5");
    db.query(sql("CREATE VIRTUAL TABLE docs USING fts5(body)"))
        .await;
    db.query(sql(
        "INSERT INTO docs VALUES ('hello world'), ('goodbye world')",
    ))
    .await;

    cold(&node, &db);
    let error = db
        .query_error(sql("INSERT INTO docs_data VALUES (99, x'00')"))
        .await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("may not be modified"), "{error}");

    cold(&node, &db);
    let found = db
        .query(sql(
            "SELECT highlight(docs, 0, '[', ']'), bm25(docs) < 0 FROM docs WHERE docs MATCH 'hello'",
        ))
        .await;
    assert_eq!(rows(&found).len(), 1, "{found}");
    assert_eq!(found["rows"][0][0], text("[hello] world"));
    assert_eq!(found["rows"][0][1], integer(1));
}

/// A function of an extension named before anything else of it: the engine registers the
/// extensions when it resolves a name it does not have.
#[tokio::test]
async fn an_extension_function_is_found_on_a_new_connection() {
    let node = start_node().await;
    let db = node.create_db("functions");
    cold(&node, &db);
    let source = db.query(sql("SELECT length(fts5_source_id()) > 0")).await;
    assert_eq!(source["rows"][0][0], integer(1), "{source}");
    // A name nobody has is still an error.
    let error = db.query_error(sql("SELECT no_such_function(1)")).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("no such function"), "{error}");
}

/// FTS4 with its auxiliary functions, and an R*Tree, each created and then queried by a
/// connection opened afterwards.
#[tokio::test]
async fn fts4_and_rtree_tables_answer_new_connections() {
    let node = start_node().await;
    let db = node.create_db("fts4-rtree");
    cold(&node, &db);
    db.query(sql("CREATE VIRTUAL TABLE notes USING fts4(body)"))
        .await;
    db.query(sql(
        "INSERT INTO notes VALUES ('the quick brown fox'), ('lazy dogs sleep')",
    ))
    .await;
    cold(&node, &db);
    db.query(sql("CREATE VIRTUAL TABLE boxes USING rtree(id, x0, x1)"))
        .await;
    db.query(sql("INSERT INTO boxes VALUES (1, 0, 10), (2, 20, 30)"))
        .await;

    cold(&node, &db);
    let snippet = db
        .query(sql(
            "SELECT snippet(notes), length(matchinfo(notes)) > 0 FROM notes WHERE notes MATCH 'fox'",
        ))
        .await;
    assert_eq!(rows(&snippet).len(), 1, "{snippet}");
    assert!(
        snippet["rows"][0][0]["value"]
            .as_str()
            .unwrap()
            .contains("<b>fox</b>"),
        "{snippet}"
    );
    cold(&node, &db);
    let inside = db.query(sql("SELECT id FROM boxes WHERE x0 >= 15")).await;
    assert_eq!(rows(&inside).len(), 1, "{inside}");
    assert_eq!(inside["rows"][0][0], integer(2));
    cold(&node, &db);
    let check = db.query(sql("PRAGMA integrity_check")).await;
    assert_eq!(check["rows"][0][0], text("ok"), "{check}");
}

/// The lists of a connection's modules and functions name the deferred ones too.
#[tokio::test]
async fn a_new_connection_lists_the_extensions_modules_and_functions() {
    let node = start_node().await;
    let db = node.create_db("lists");
    cold(&node, &db);
    let modules = db
        .query(sql(
            "SELECT count(*) FROM pragma_module_list WHERE name IN ('fts3', 'fts4', 'fts5', 'rtree')",
        ))
        .await;
    assert_eq!(modules["rows"][0][0], integer(4), "{modules}");
    cold(&node, &db);
    let functions = db
        .query(sql(
            "SELECT count(DISTINCT name) FROM pragma_function_list WHERE name IN ('fts5', 'snippet', 'rtreecheck')",
        ))
        .await;
    assert_eq!(functions["rows"][0][0], integer(3), "{functions}");
}
