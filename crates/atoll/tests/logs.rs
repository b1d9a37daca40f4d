//! The server's logs as a file or a log shipper sees them: no terminal escape codes when
//! stderr is not a terminal, one JSON object a line with `--log-format json`, and lines
//! for dump loads and for the shutdown.

mod support;

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, temp_dir};

/// Runs `atoll dev` with its stderr in a file, loads a small dump through the API, stops
/// it with SIGTERM and answers what it logged.
async fn logs_of_a_session(name: &str, args: &[&str]) -> String {
    let data_dir = temp_dir(name);
    let log_path = data_dir.with_extension("log");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_atoll"))
        .arg("dev")
        .arg("--data-dir")
        .arg(&data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--db-listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("ATOLL_LOG")
        .env_remove("ATOLL_LOG_FORMAT")
        .env_remove("ATOLL_SECRETS_KEY")
        .env_remove("ATOLL_SECRETS_KEY_FILE")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("start atoll dev");
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !data_dir.join("admin.token").exists()
        || client.get(format!("{url}/health")).send().await.is_err()
    {
        assert!(
            child.try_wait().unwrap().is_none(),
            "atoll dev exited early"
        );
        assert!(Instant::now() < deadline, "atoll dev did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let token = std::fs::read_to_string(data_dir.join("admin.token")).unwrap();
    let token = token.trim();
    let dump = "CREATE TABLE t(x);\nINSERT INTO t VALUES(1);\nINSERT INTO t VALUES(2);\n";
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(dump.as_bytes().to_vec()).file_name("dump.sql"),
    );
    let uploaded: Value = client
        .post(format!("{url}/v1/databases/dumps"))
        .bearer_auth(token)
        .multipart(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let created = client
        .post(format!("{url}/v1/databases"))
        .bearer_auth(token)
        .json(&json!({"name": "dumped", "group": "default", "seed": {"type": "dump", "url": uploaded["dump_url"]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200, "{uploaded}");

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "atoll dev did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let logs = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_dir_all(&data_dir);
    let _ = std::fs::remove_file(Path::new(&log_path));
    logs
}

#[tokio::test]
async fn logs_in_a_file_have_no_escape_codes_and_tell_dump_loads_and_the_shutdown() {
    let logs = logs_of_a_session("logs-text", &[]).await;
    assert!(!logs.contains('\u{1b}'), "escape codes in a file:\n{logs}");
    for line in [
        "dump load started",
        "dump loaded statements=3",
        "shutting down signal=\"SIGTERM\"",
        "stopped",
    ] {
        assert!(logs.contains(line), "no `{line}` in:\n{logs}");
    }
}

#[tokio::test]
async fn json_logs_are_one_object_a_line() {
    let logs = logs_of_a_session("logs-json", &["--log-format", "json"]).await;
    assert!(
        !logs.contains('\u{1b}'),
        "escape codes in JSON logs:\n{logs}"
    );
    // The start banner goes to stdout; stderr holds only the log lines.
    let lines: Vec<Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let loaded = lines
        .iter()
        .find(|l| l["fields"]["message"] == "dump loaded")
        .unwrap_or_else(|| panic!("no dump loaded line in:\n{logs}"));
    assert_eq!(loaded["fields"]["statements"], 3);
    assert_eq!(loaded["level"], "INFO");
    assert!(loaded["timestamp"].is_string() && loaded["target"] == "atoll_data::dump");
    assert!(lines
        .iter()
        .any(|l| l["fields"]["message"] == "shutting down" && l["fields"]["signal"] == "SIGTERM"));
}
