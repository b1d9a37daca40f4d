//! What the official clients read from a result, as sqld answers it (issue 32): an empty
//! result still names its columns on every Hrana path, a database URL with a trailing
//! slash works wherever a client appends a route to it, and the counters of a result
//! follow sqld's rules.

mod support;

use libsql_hrana::proto;
use serde_json::{json, Value};
use support::protobuf;
use support::*;

/// `SELECT a, b, c FROM t` on the empty table of [`empty_table`].
const EMPTY_SELECT: &str = "SELECT a, b, c FROM t";

fn empty_select_cols() -> Value {
    json!([
        {"name": "a", "decltype": "TEXT"},
        {"name": "b", "decltype": "INTEGER"},
        {"name": "c", "decltype": null}
    ])
}

/// No table at all: an expression's column has a name and no declared type.
const NO_ROW: &str = "SELECT 1 AS one WHERE 0 = 1";

fn no_row_cols() -> Value {
    json!([{"name": "one", "decltype": null}])
}

async fn empty_table(node: &TestNode, name: &str) -> TestDb {
    let db = node.create_db(name);
    db.run(&[sql("CREATE TABLE t (a TEXT, b INTEGER, c)")])
        .await;
    db
}

#[tokio::test]
async fn an_empty_result_names_its_columns_over_hrana_1() {
    let node = start_node().await;
    let db = empty_table(&node, "v1").await;
    for (query, cols) in [(EMPTY_SELECT, empty_select_cols()), (NO_ROW, no_row_cols())] {
        let response = db.post("/v1/execute", json!({"stmt": sql(query)})).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["result"]["cols"], cols, "{query}: {body}");
        assert_eq!(body["result"]["rows"], json!([]), "{body}");

        let response = db
            .post(
                "/v1/batch",
                json!({"batch": {"steps": [{"stmt": sql(query)}]}}),
            )
            .await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["result"]["step_results"][0]["cols"], cols,
            "{query}: {body}"
        );
    }
}

#[tokio::test]
async fn an_empty_result_names_its_columns_over_http_pipelines() {
    let node = start_node().await;
    let db = empty_table(&node, "pipelines").await;
    for version in ["v2", "v3"] {
        for (query, cols) in [(EMPTY_SELECT, empty_select_cols()), (NO_ROW, no_row_cols())] {
            // An execute and a batch on a stream that stays open: never the inline path.
            let body = db
                .pipeline(
                    version,
                    json!({"requests": [
                        {"type": "execute", "stmt": sql(query)},
                        {"type": "execute", "stmt": {"sql": query, "want_rows": false}},
                        {"type": "batch", "batch": {"steps": [{"stmt": sql(query)}]}}
                    ]}),
                )
                .await;
            let results = &body["results"];
            for i in 0..2 {
                assert_eq!(
                    results[i]["response"]["result"]["cols"], cols,
                    "{version} {query}: {body}"
                );
            }
            assert_eq!(
                results[2]["response"]["result"]["step_results"][0]["cols"], cols,
                "{version} {query}: {body}"
            );
            close_http_stream(&db, version, body["baton"].as_str().unwrap()).await;
        }
    }
}

/// One read and `close` on no stream, with an idle pooled connection, is answered on the
/// async worker (`serve_inline`); the pipeline before it left that connection.
#[tokio::test]
async fn an_empty_result_names_its_columns_on_the_inline_path() {
    let node = start_node().await;
    let db = empty_table(&node, "inline").await;
    for (query, cols) in [(EMPTY_SELECT, empty_select_cols()), (NO_ROW, no_row_cols())] {
        // Twice: the first one prepares the statement into the pooled connection's
        // cache, the second one runs it from there.
        for _ in 0..2 {
            let result = db.query(sql(query)).await;
            assert_eq!(result["cols"], cols, "{query}: {result}");
            assert_eq!(result["rows"], json!([]), "{result}");
        }
    }
}

#[tokio::test]
async fn an_empty_result_names_its_columns_in_a_json_cursor() {
    let node = start_node().await;
    let db = empty_table(&node, "cursor").await;
    let response = db
        .post(
            "/v3/cursor",
            json!({"batch": {"steps": [{"stmt": sql(EMPTY_SELECT)}, {"stmt": sql(NO_ROW)}]}}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        lines[1..].to_vec(),
        vec![
            json!({"type": "step_begin", "step": 0, "cols": empty_select_cols()}),
            json!({"type": "step_end", "affected_row_count": 0, "last_insert_rowid": null}),
            json!({"type": "step_begin", "step": 1, "cols": no_row_cols()}),
            json!({"type": "step_end", "affected_row_count": 0, "last_insert_rowid": null}),
        ]
    );
}

#[tokio::test]
async fn an_empty_result_names_its_columns_over_protobuf() {
    use prost::Message;
    let node = start_node().await;
    let db = empty_table(&node, "protobuf").await;
    let expected = |cols: &[proto::Col]| {
        cols.iter()
            .map(|col| (col.name.clone().unwrap_or_default(), col.decltype.clone()))
            .collect::<Vec<_>>()
    };
    let want = vec![
        ("a".to_string(), Some("TEXT".to_string())),
        ("b".to_string(), Some("INTEGER".to_string())),
        ("c".to_string(), None),
    ];

    let request = protobuf::PipelineRequest {
        baton: None,
        requests: vec![
            protobuf::StreamRequest {
                request: Some(protobuf::Request::Execute(protobuf::ExecuteRequest {
                    stmt: proto::Stmt::new(EMPTY_SELECT, true),
                })),
            },
            protobuf::StreamRequest {
                request: Some(protobuf::Request::Close(protobuf::Empty {})),
            },
        ],
    };
    let response = db
        .http
        .post(db.url("/v3-protobuf/pipeline"))
        .header("x-namespace", &db.config.label)
        .bearer_auth(db.token())
        .body(request.encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body =
        protobuf::PipelineResponse::decode(response.bytes().await.unwrap().as_ref()).unwrap();
    let Some(protobuf::Outcome::Ok(protobuf::StreamResponse {
        response: Some(protobuf::Response::Execute(execute)),
    })) = &body.results[0].outcome
    else {
        panic!("expected an execute result");
    };
    assert_eq!(expected(&execute.result.cols), want);
    assert!(execute.result.rows.is_empty());

    let cursor = protobuf::CursorRequest {
        baton: None,
        batch: proto::Batch::single(proto::Stmt::new(EMPTY_SELECT, true)),
    };
    let response = db
        .http
        .post(db.url("/v3-protobuf/cursor"))
        .header("x-namespace", &db.config.label)
        .bearer_auth(db.token())
        .body(cursor.encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes().await.unwrap();
    protobuf::CursorHead::decode_length_delimited(&mut body).unwrap();
    let first = protobuf::CursorEntry::decode_length_delimited(&mut body).unwrap();
    let Some(protobuf::Entry::StepBegin(begin)) = first.entry else {
        panic!("expected step_begin, got {:?}", first.entry);
    };
    assert_eq!(expected(&begin.cols), want);
}

#[tokio::test]
async fn an_empty_result_names_its_columns_over_websocket() {
    let node = start_node().await;
    let db = empty_table(&node, "socket").await;
    for subprotocol in ["hrana3", "hrana2", "hrana1"] {
        let mut socket = connect(&db, subprotocol).await;
        send(&mut socket, json!({"type": "hello", "jwt": db.token()})).await;
        assert_eq!(receive(&mut socket).await, json!({"type": "hello_ok"}));
        let ok = |response: Value| {
            assert_eq!(response["type"], "response_ok", "{subprotocol}: {response}");
            response["response"].clone()
        };
        ok(request(
            &mut socket,
            1,
            json!({"type": "open_stream", "stream_id": 1}),
        )
        .await);
        let executed = ok(request(
            &mut socket,
            2,
            json!({"type": "execute", "stream_id": 1, "stmt": sql(EMPTY_SELECT)}),
        )
        .await);
        assert_eq!(
            executed["result"]["cols"],
            empty_select_cols(),
            "{subprotocol}"
        );
        let batch = ok(request(
            &mut socket,
            3,
            json!({"type": "batch", "stream_id": 1, "batch": {"steps": [{"stmt": sql(NO_ROW)}]}}),
        )
        .await);
        assert_eq!(
            batch["result"]["step_results"][0]["cols"],
            no_row_cols(),
            "{subprotocol}"
        );
        if subprotocol == "hrana3" {
            ok(request(
                &mut socket,
                4,
                json!({"type": "open_cursor", "stream_id": 1, "cursor_id": 1, "batch": {"steps": [{"stmt": sql(EMPTY_SELECT)}]}}),
            )
            .await);
            let fetched = ok(request(
                &mut socket,
                5,
                json!({"type": "fetch_cursor", "cursor_id": 1, "max_count": 10}),
            )
            .await);
            assert_eq!(
                fetched["entries"][0],
                json!({"type": "step_begin", "step": 0, "cols": empty_select_cols()}),
                "{fetched}"
            );
        }
    }
}

/// A statement kept in a connection's statement cache describes the table as it was when
/// it was compiled until it runs again: an empty result after `ALTER TABLE … ADD COLUMN`
/// (made on another connection) must name the new column, with its type.
#[tokio::test]
async fn an_empty_result_after_add_column_names_the_new_column() {
    let node = start_node().await;
    let db = empty_table(&node, "altered").await;
    let select_all = |baton: Option<&str>| json!({"baton": baton, "requests": [{"type": "execute", "stmt": sql("SELECT * FROM t")}]});
    let reader = db.pipeline("v3", select_all(None)).await;
    assert_eq!(
        reader["results"][0]["response"]["result"]["cols"],
        empty_select_cols()
    );
    // Another stream, so another connection, changes the table.
    db.run(&[sql("ALTER TABLE t ADD COLUMN d REAL DEFAULT 0")])
        .await;
    let again = db
        .pipeline("v3", select_all(reader["baton"].as_str()))
        .await;
    let mut cols = empty_select_cols();
    cols.as_array_mut()
        .unwrap()
        .push(json!({"name": "d", "decltype": "REAL"}));
    assert_eq!(again["results"][0]["response"]["result"]["cols"], cols);
    // And the same with a row, read before the first step as after it.
    db.run(&[sql("INSERT INTO t (a) VALUES ('x')")]).await;
    let with_row = db.pipeline("v3", select_all(again["baton"].as_str())).await;
    let result = &with_row["results"][0]["response"]["result"];
    assert_eq!(result["cols"], cols);
    assert_eq!(result["rows"][0].as_array().unwrap().len(), 4);
    close_http_stream(&db, "v3", with_row["baton"].as_str().unwrap()).await;
}

async fn close_http_stream(db: &TestDb, version: &str, baton: &str) {
    let body = db
        .pipeline(
            version,
            json!({"baton": baton, "requests": [{"type": "close"}]}),
        )
        .await;
    assert_eq!(body["results"][0]["type"], "ok", "{body}");
}

/// The URL the CLI prints ends with a slash (`…/db/<db>-<org>/`), and clients append their
/// routes with one of their own: `…//info` (embedded replicas), `…//v2/pipeline`. Doubled
/// slashes in a path are one.
#[tokio::test]
async fn a_database_url_with_a_trailing_slash_works() {
    let node = start_node().await;
    let db = empty_table(&node, "slashed").await;
    let label = &db.config.label;
    let base = format!("http://{}/db/{label}/", db.addr);
    for route in ["/v2/pipeline", "/v3/pipeline"] {
        let response = db
            .http
            .post(format!("{base}{route}"))
            .bearer_auth(db.token())
            .json(&json!({"requests": [
                {"type": "execute", "stmt": sql("SELECT count(*) FROM t")},
                {"type": "close"}
            ]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{route}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["results"][0]["response"]["result"]["rows"][0][0],
            integer(0),
            "{route}: {body}"
        );
    }
    let response = db
        .http
        .post(format!("{base}/v1/execute"))
        .bearer_auth(db.token())
        .json(&json!({"stmt": sql("SELECT count(*) FROM t")}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // What an embedded replica asks first, and a version probe.
    for route in ["/info", "/v3"] {
        let response = db
            .http
            .get(format!("{base}{route}"))
            .bearer_auth(db.token())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{route}");
    }
    // Without the path prefix (the database named by a header), the same.
    let response = db
        .http
        .post(format!("http://{}//v2//pipeline", db.addr))
        .header("x-namespace", label)
        .bearer_auth(db.token())
        .json(
            &json!({"requests": [{"type": "execute", "stmt": sql("SELECT 1")}, {"type": "close"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // The WebSocket URL is the client URL itself.
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://{}/db/{label}/",
            db.addr
        ))
        .unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "hrana3".parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    send(&mut socket, json!({"type": "hello", "jwt": db.token()})).await;
    assert_eq!(receive(&mut socket).await, json!({"type": "hello_ok"}));
}

/// A statement that fails as it runs (not as it is prepared) has begun: sqld describes
/// its columns before the first step, so a cursor shows its `step_begin`, then the error.
#[tokio::test]
async fn a_cursor_step_that_fails_as_it_runs_begins_first() {
    let node = start_node().await;
    let db = empty_table(&node, "failing").await;
    let response = db
        .post(
            "/v3/cursor",
            json!({"batch": {"steps": [
                {"stmt": sql("SELECT abs(-9223372036854775807 - 1) AS a")},
                {"stmt": sql("SELECT * FROM nowhere")}
            ]}}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        lines[1],
        json!({"type": "step_begin", "step": 0, "cols": [{"name": "a", "decltype": null}]}),
        "{text}"
    );
    assert_eq!(lines[2]["type"], "step_error", "{text}");
    assert_eq!(lines[2]["step"], 0, "{text}");
    assert!(
        lines[2]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("integer overflow"),
        "{text}"
    );
    // A statement that does not prepare never began.
    assert_eq!(lines[3]["type"], "step_error", "{text}");
    assert_eq!(lines[3]["step"], 1, "{text}");
    assert_eq!(lines.len(), 4, "{text}");
}

/// sqld's rules for the counters of a result (`libsql-server/src/connection/program.rs`,
/// `query_analysis.rs`): `affected_row_count` is SQLite's `changes()` for an INSERT,
/// UPDATE or DELETE (REPLACE, `WITH … INSERT` and an upsert are INSERTs; rows a trigger
/// writes are not counted) and 0 for anything else; `last_insert_rowid` is set for an
/// INSERT only (the connection's last rowid, even when this INSERT added no row), `null`
/// otherwise. The same on every path: `execute`, a batch's steps, a cursor's `step_end`,
/// Hrana 1.
#[tokio::test]
async fn result_counters_follow_sqlds_rules() {
    let node = start_node().await;
    let setup = [
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)",
        "CREATE TABLE log (x)",
        "CREATE TRIGGER logged AFTER INSERT ON t BEGIN INSERT INTO log VALUES (new.id); INSERT INTO log VALUES (-new.id); END",
    ];
    // (statement, affected_row_count, last_insert_rowid)
    let cases: [(&str, u64, Option<&str>); 12] = [
        ("INSERT INTO t (v) VALUES ('a'), ('b')", 2, Some("2")),
        ("REPLACE INTO t (id, v) VALUES (1, 'a2')", 1, Some("1")),
        (
            "WITH n(x) AS (VALUES ('c')) INSERT INTO t (v) SELECT x FROM n",
            1,
            Some("3"),
        ),
        ("INSERT OR IGNORE INTO t (v) VALUES ('c')", 0, Some("3")),
        (
            "INSERT INTO t (v) VALUES ('c') ON CONFLICT (v) DO UPDATE SET v = 'c2'",
            1,
            Some("3"),
        ),
        ("INSERT INTO t (v) VALUES ('d') RETURNING id", 1, Some("4")),
        (
            "/* comment */ UPDATE t SET v = v || '!' WHERE id <= 2",
            2,
            None,
        ),
        ("SELECT count(*) FROM t", 0, None),
        ("CREATE TABLE copy AS SELECT * FROM t", 0, None),
        // `copy` has rowids of its own: four from CREATE … AS, then these two.
        (
            "INSERT INTO copy SELECT * FROM t WHERE id > 2",
            2,
            Some("6"),
        ),
        ("DELETE FROM t WHERE id > 2", 2, None),
        ("DELETE FROM log", 10, None),
    ];
    let expected: Vec<(u64, Option<String>)> = cases
        .iter()
        .map(|(_, affected, rowid)| (*affected, rowid.map(str::to_string)))
        .collect();
    let counters = |result: &Value| {
        (
            result["affected_row_count"].as_u64().unwrap(),
            result["last_insert_rowid"].as_str().map(str::to_string),
        )
    };
    let fresh = |name: &str| {
        let db = node.create_db(name);
        async move {
            db.run(&setup.map(sql)).await;
            db
        }
    };

    let db = fresh("counted-execute").await;
    let results = db
        .run(&cases.iter().map(|(text, ..)| sql(text)).collect::<Vec<_>>())
        .await;
    let seen: Vec<_> = results
        .iter()
        .map(|r| counters(&r["response"]["result"]))
        .collect();
    assert_eq!(seen, expected, "execute");
    let returning = &results[5]["response"]["result"];
    assert_eq!(
        returning["cols"],
        json!([{"name": "id", "decltype": "INTEGER"}])
    );
    assert_eq!(returning["rows"], json!([[integer(4)]]));

    let db = fresh("counted-batch").await;
    let steps: Vec<Value> = cases
        .iter()
        .map(|(text, ..)| json!({"stmt": sql(text)}))
        .collect();
    let body = db
        .pipeline(
            "v3",
            json!({"requests": [{"type": "batch", "batch": {"steps": steps}}, {"type": "close"}]}),
        )
        .await;
    let step_results = body["results"][0]["response"]["result"]["step_results"]
        .as_array()
        .unwrap();
    let seen: Vec<_> = step_results.iter().map(counters).collect();
    assert_eq!(seen, expected, "batch: {body}");

    let db = fresh("counted-cursor").await;
    let response = db
        .post("/v3/cursor", json!({"batch": {"steps": steps}}))
        .await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let seen: Vec<_> = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|entry| entry["type"] == "step_end")
        .map(|entry| counters(&entry))
        .collect();
    assert_eq!(seen, expected, "cursor: {text}");

    let db = fresh("counted-v1").await;
    let mut seen = Vec::new();
    for (text, ..) in cases {
        let response = db.post("/v1/execute", json!({"stmt": sql(text)})).await;
        assert_eq!(response.status(), 200, "{text}");
        let body: Value = response.json().await.unwrap();
        seen.push(counters(&body["result"]));
    }
    assert_eq!(seen, expected, "Hrana 1");
}
