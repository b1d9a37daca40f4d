//! Crash containment end to end (issue 26): a tenant statement that crashes the serving
//! process of `atoll dev` costs the node a restart by its supervisor, on the same ports,
//! with no acknowledged write lost; the same statement sent again is refused by the crash
//! journal instead of crashing the node a second time. The crash is the journal's test hook
//! (`ATOLL_TEST_ABORT_ON_SQL`: SIGABRT on the SQL thread, as glibc's heap checks do).

mod support;

use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const CRASHING: &str = "SELECT 'this statement crashes the engine'";

async fn execute(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    sql: &str,
) -> reqwest::Result<Value> {
    client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]}))
        .timeout(Duration::from_secs(30))
        .send()
        .await?
        .json()
        .await
}

#[tokio::test]
async fn a_crashing_statement_costs_a_restart_once_and_is_refused_after() {
    let data_dir = temp_dir("supervisor");
    let port = free_port();
    let api = format!("http://127.0.0.1:{port}");
    let mut supervisor = Command::new(BIN)
        .arg("dev")
        .arg("--data-dir")
        .arg(&data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--db-listen", "127.0.0.1:0"])
        .env("ATOLL_TEST_ABORT_ON_SQL", CRASHING)
        .env_remove("ATOLL_PASSWORD")
        .env_remove("ATOLL_NO_SUPERVISE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.get(format!("{api}/health")).send().await.is_err() {
        assert!(Instant::now() < deadline, "atoll dev did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let admin = admin_token(&data_dir);
    let (url, token) = database_with_token(&api, &admin, "victim").await;
    let (other_url, other_token) = database_with_token(&api, &admin, "neighbour").await;
    let ok = execute(&client, &url, &token, "CREATE TABLE t (x)")
        .await
        .unwrap();
    assert_eq!(ok["results"][0]["type"], "ok", "{ok}");
    let ok = execute(
        &client,
        &url,
        &token,
        "INSERT INTO t VALUES ('acknowledged')",
    )
    .await
    .unwrap();
    assert_eq!(ok["results"][0]["type"], "ok", "{ok}");

    // The crash: the request gets no answer (the process died under it).
    let crashed_at = Instant::now();
    assert!(execute(&client, &url, &token, CRASHING).await.is_err());
    // The same ports serve again once the supervisor started the serving process again.
    let restarted = loop {
        match execute(&client, &other_url, &other_token, "SELECT 1").await {
            Ok(body) if body["results"][0]["type"] == "ok" => break crashed_at.elapsed(),
            _ => {
                assert!(
                    crashed_at.elapsed() < Duration::from_secs(60),
                    "never served again"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // The figure the issue asks for (goal: 2 s); not a timed assertion.
    println!("serving again {} ms after the crash", restarted.as_millis());
    assert!(
        supervisor.try_wait().unwrap().is_none(),
        "the supervisor ended"
    );

    // The statement is refused now, with a clear error, instead of crashing the node again.
    let refused = execute(&client, &url, &token, CRASHING).await.unwrap();
    assert_eq!(refused["results"][0]["type"], "error", "{refused}");
    assert_eq!(
        refused["results"][0]["error"]["code"], "STATEMENT_REFUSED",
        "{refused}"
    );
    let message = refused["results"][0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("crashed the server before"), "{message}");
    // Reformatted, it is the same statement.
    let refused = execute(&client, &url, &token, &CRASHING.to_lowercase())
        .await
        .unwrap();
    assert_eq!(
        refused["results"][0]["error"]["code"], "STATEMENT_REFUSED",
        "{refused}"
    );

    // Nothing acknowledged was lost, and the database serves every other statement.
    let rows = execute(&client, &url, &token, "SELECT x FROM t")
        .await
        .unwrap();
    assert_eq!(
        rows["results"][0]["response"]["result"]["rows"][0][0]["value"], "acknowledged",
        "{rows}"
    );
    let journal = std::fs::read_to_string(data_dir.join("crash-journal/refused.json"))
        .or_else(|_| {
            // `atoll dev`'s node keeps its journal in its own directory under the data dir.
            find_refused(&data_dir)
        })
        .unwrap();
    assert!(journal.contains("this statement crashes"), "{journal}");

    // SIGTERM to the supervisor ends both processes: the serving process on its own (exit
    // 0), or killed by the supervisor 10 s after SIGTERM when its graceful shutdown takes
    // longer (exit 137; seen once in CI on a loaded machine), never later.
    send_sigterm(supervisor.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = supervisor.try_wait().unwrap() {
            assert!(status.success() || status.code() == Some(137), "{status}");
            println!("the supervisor ended with {status}");
            break;
        }
        assert!(Instant::now() < deadline, "the supervisor did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
        "the serving process still holds the port"
    );
    let _ = std::fs::remove_dir_all(&data_dir);
}

/// `refused.json` wherever the node keeps its journal under `dir`.
fn find_refused(dir: &std::path::Path) -> std::io::Result<String> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            let candidate = path.join("crash-journal/refused.json");
            if candidate.exists() {
                return std::fs::read_to_string(candidate);
            }
        }
    }
    Err(std::io::Error::other("no refused.json"))
}

fn send_sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
