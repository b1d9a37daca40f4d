//! Stopping `atoll dev` while tenant SQL runs (issue "Tenant isolation", finding 4: with an
//! endless statement running, SIGTERM was ignored and the process ran on at full CPU).

mod support;

use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};
use support::start_dev_with;

#[tokio::test]
async fn sigterm_stops_the_server_while_an_endless_statement_runs() {
    // A deadline far beyond the test: only the shutdown can end the statement.
    let mut server = start_dev_with(
        "shutdown",
        &["--statement-timeout", "3600"],
        "http",
        reqwest::Client::new(),
    )
    .await;
    let (db_url, jwt) = server.database_with_token("spin").await;
    let endless = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{db_url}v2/pipeline"))
            .bearer_auth(jwt)
            .json(&json!({"requests": [{"type": "execute", "stmt": {"sql":
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"}}]}))
            .send()
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!endless.is_finished(), "the statement is running");

    let pid = server.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    // Generous: the bound only keeps a broken build from hanging the suite (before, the
    // process ran until SIGKILL).
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "atoll dev did not stop after SIGTERM while a statement ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    let _ = endless.await;
}
