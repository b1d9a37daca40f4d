//! Every case the SQL fuzzer kept (`fuzz/sql-crashes/*.sql`: a case that killed
//! `atoll fuzz-sql` with a signal, found by `scripts/fuzz-sql.sh`), replayed through a real
//! data plane: `atoll dev` in one process (no supervisor to hide a crash by restarting
//! it), each case on a database of its own over one Hrana stream, statement by statement,
//! as a tenant would send it. The node must still be running and answer `/health` after
//! each. A case fails here until the engine is fixed (`vendor/libsql-ffi.patch`); the fix
//! then gets its own test in `atoll-data`'s `tests/engine_crashes.rs`.
//!
//! With an empty corpus the test still runs and says it replayed no case.

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

fn corpus_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/sql-crashes");
    dir.canonicalize().unwrap_or(dir)
}

fn corpus() -> Vec<PathBuf> {
    let dir = corpus_dir();
    assert!(
        dir.join("README.md").exists(),
        "{} is missing (its README says what the corpus is)",
        dir.display()
    );
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .collect();
    cases.sort();
    cases
}

/// The statements of a case: one a line, comments (`--`) and blank lines left out.
fn statements(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("--"))
        .map(str::to_string)
        .collect()
}

/// Sends `sql` on the stream of `baton` (a new stream when `None`); answers the stream's
/// next baton. Errors of the statement are expected; a node that does not answer is not.
async fn execute(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    baton: Option<String>,
    sql: &str,
    context: &str,
) -> Option<String> {
    let response = client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({"baton": baton, "requests": [{"type": "execute", "stmt": {"sql": sql}}]}))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{context}: the node did not answer: {e}\n    {sql}"));
    if response.status() != 200 {
        // A refused request (the stream expired, a statement the node refuses as a whole):
        // go on with a new stream.
        return None;
    }
    let body: Value = response
        .json()
        .await
        .unwrap_or_else(|e| panic!("{context}: the answer was cut short: {e}\n    {sql}"));
    body["baton"].as_str().map(str::to_string)
}

#[tokio::test]
async fn every_kept_sql_crash_leaves_the_node_serving() {
    let cases = corpus();
    println!(
        "replaying {} case(s) of {}",
        cases.len(),
        corpus_dir().display()
    );
    if cases.is_empty() {
        println!("replayed 0 cases: the corpus is empty");
        return;
    }
    // The fuzzer's deadline; no supervisor, so a crash ends the process under test.
    let mut server = start_dev_with(
        "sql-crash-corpus",
        &["--no-supervise", "--statement-timeout", "1"],
        "http",
        reqwest::Client::new(),
    )
    .await;
    let client = reqwest::Client::new();
    let mut replayed = 0;
    for (i, path) in cases.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let (url, token) = server.database_with_token(&format!("replay{i}")).await;
        let mut baton = None;
        let all = statements(&text);
        for (n, sql) in all.iter().enumerate() {
            let context = format!("{name}, statement {} of {}", n + 1, all.len());
            baton = execute(&client, &url, &token, baton, sql, &context).await;
        }
        if let Some(baton) = baton {
            let _ = client
                .post(format!("{url}v2/pipeline"))
                .bearer_auth(&token)
                .json(&json!({"baton": baton, "requests": [{"type": "close"}]}))
                .send()
                .await;
        }
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "{name}: the node died"
        );
        let health = client
            .get(format!("{}/health", server.url))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{name}: /health did not answer: {e}"));
        assert_eq!(health.status(), 200, "{name}: /health");
        // And the database the case ran on still serves.
        let fresh = execute(&client, &url, &token, None, "SELECT 1", &name).await;
        assert!(fresh.is_some(), "{name}: SELECT 1 after the case failed");
        replayed += 1;
    }
    println!("replayed {replayed} case(s); the node served after each");
}
