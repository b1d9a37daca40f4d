//! A node started while object storage is unreachable serves what its disk holds (issue
//! 28, part 5; docs/OPERATIONS.md, "When a node is down"): `atoll dev` is stopped and
//! started again on an S3 URL whose endpoint refuses connections; it comes up, serves the
//! rows its disk holds, and says in its log that storage is unreachable.

mod support;

use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, start_dev, wait_until_free, BIN};

async fn pipeline(client: &reqwest::Client, url: &str, token: &str, sql: &str) -> Value {
    let response = client
        .post(format!("{url}/v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({"requests": [
            {"type": "execute", "stmt": {"sql": sql}},
            {"type": "close"}
        ]}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test]
async fn a_node_serves_its_disk_when_object_storage_is_unreachable_at_start() {
    let mut server = start_dev("storage-unreachable").await;
    let (http_url, token) = server.database_with_token("kept").await;
    let client = reqwest::Client::new();
    for sql in ["CREATE TABLE t (v)", "INSERT INTO t VALUES ('on disk')"] {
        let answer = pipeline(&client, &http_url, &token, sql).await;
        assert_eq!(answer["results"][0]["type"], "ok", "{answer}");
    }

    let _ = server.child.kill();
    let _ = server.child.wait();
    let port: u16 = server.url.rsplit(':').next().unwrap().parse().unwrap();
    wait_until_free(port);
    // An S3 endpoint nobody listens on: every request to it is refused.
    let dead_endpoint = format!("http://127.0.0.1:{}", free_port());
    let log_path = server.data_dir.with_extension("log");
    let log = std::fs::File::create(&log_path).unwrap();
    let started = Instant::now();
    server.child = Command::new(BIN)
        .arg("dev")
        .arg("--data-dir")
        .arg(&server.data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--db-listen", "127.0.0.1:0"])
        .args(["--storage-url", "s3://atoll-unreachable/node"])
        .env("AWS_ENDPOINT_URL", &dead_endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test-secret")
        .env("AWS_REGION", "us-east-1")
        .env_remove("ATOLL_PASSWORD")
        .env_remove("ATOLL_USERNAME")
        .env_remove("ATOLL_SECRETS_KEY")
        .env_remove("ATOLL_SECRETS_KEY_FILE")
        .env_remove("ATOLL_PREVIOUS_SECRETS_KEYS")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(response) = client.get(format!("{}/health", server.url)).send().await {
            if response.status() == 200 {
                break;
            }
        }
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!(
                "atoll dev exited with {status} while object storage was unreachable:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "atoll dev did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "atoll dev served {:?} after its start with object storage unreachable",
        started.elapsed()
    );
    let log_text = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log_text.contains("object storage is unreachable"),
        "the log does not say why: {log_text}"
    );

    // Its data plane listens on another port now: ask for the database's URL again.
    let details: Value = client
        .get(format!("{}/v1/databases/kept", server.url))
        .bearer_auth(server.admin_token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let http_url = details["database"]["http_url"].as_str().unwrap();
    let answer = pipeline(&client, http_url, &token, "SELECT v FROM t").await;
    assert_eq!(answer["results"][0]["type"], "ok", "{answer}");
    assert_eq!(
        answer["results"][0]["response"]["result"]["rows"][0][0]["value"], "on disk",
        "{answer}"
    );
    let _ = std::fs::remove_file(&log_path);
}
