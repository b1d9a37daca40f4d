//! Usage survives a crash: SIGKILL `atoll dev` in the middle of a write workload, start it
//! again, and the totals are no lower than before the kill and never more than the
//! statements reported (nothing counted twice); every acknowledged write is there.

mod support;

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_atoll");

fn start(dir: &Path, port: u16, db_port: u16) -> Child {
    Command::new(BIN)
        .args(["dev", "--data-dir", dir.to_str().unwrap()])
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--db-listen",
            &format!("127.0.0.1:{db_port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn wait_healthy(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reqwest::get(format!("{url}/health"))
        .await
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(Instant::now() < deadline, "server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn usage(client: &reqwest::Client, api: &str, token: &str) -> Value {
    let body: Value = client
        .get(format!("{api}/v1/databases/crashy/usage"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["database"]["total"].clone()
}

/// One insert; `Some(rows_written)` when the server acknowledged it.
async fn insert(client: &reqwest::Client, url: &str, jwt: &str, i: u64) -> Option<u64> {
    let body = json!({"requests": [{"type": "execute", "stmt": {"sql": format!("INSERT INTO t VALUES ({i})")}}, {"type": "close"}]});
    let response = client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(jwt)
        .json(&body)
        .send()
        .await
        .ok()?;
    let body: Value = response.json().await.ok()?;
    body["results"][0]["response"]["result"]["rows_written"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_never_goes_backwards_after_a_kill() {
    let dir = std::env::temp_dir().join(format!(
        "atoll-crash-{}-{}",
        std::process::id(),
        free_port()
    ));
    let (port, db_port) = (free_port(), free_port());
    let api = format!("http://127.0.0.1:{port}");
    let mut server = start(&dir, port, db_port);
    wait_healthy(&api).await;
    let token = std::fs::read_to_string(dir.join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    let client = reqwest::Client::new();
    let created = client
        .post(format!("{api}/v1/databases"))
        .bearer_auth(&token)
        .json(&json!({"name": "crashy"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let got: Value = client
        .get(format!("{api}/v1/databases/crashy"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = got["database"]["http_url"].as_str().unwrap().to_string();
    let jwt: Value = client
        .post(format!("{api}/v1/databases/crashy/auth/tokens"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let jwt = jwt["jwt"].as_str().unwrap().to_string();
    let setup = json!({"requests": [{"type": "execute", "stmt": {"sql": "CREATE TABLE t (x)"}}, {"type": "close"}]});
    client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(&jwt)
        .json(&setup)
        .send()
        .await
        .unwrap();

    let acknowledged = Arc::new(AtomicU64::new(0));
    let reported_written = Arc::new(AtomicU64::new(1)); // the CREATE TABLE
    for i in 0..100 {
        let written = insert(&client, &url, &jwt, i)
            .await
            .expect("insert before the kill");
        acknowledged.fetch_add(1, Ordering::SeqCst);
        reported_written.fetch_add(written, Ordering::SeqCst);
    }
    let before = usage(&client, &api, &token).await;
    assert!(before["rows_written"].as_u64().unwrap() >= 100, "{before}");

    // Keep writing while the server dies.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, url, jwt) = (client.clone(), url.clone(), jwt.clone());
        let (acknowledged, reported_written, stop) = (
            Arc::clone(&acknowledged),
            Arc::clone(&reported_written),
            Arc::clone(&stop),
        );
        tokio::spawn(async move {
            let mut i = 1000;
            while !stop.load(Ordering::SeqCst) {
                match insert(&client, &url, &jwt, i).await {
                    Some(written) => {
                        acknowledged.fetch_add(1, Ordering::SeqCst);
                        reported_written.fetch_add(written, Ordering::SeqCst);
                    }
                    None => break,
                }
                i += 1;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.kill().unwrap(); // SIGKILL
    server.wait().unwrap();
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();

    let mut server = start(&dir, port, db_port);
    wait_healthy(&api).await;
    let after = usage(&client, &api, &token).await;
    let (before_written, after_written) = (
        before["rows_written"].as_u64().unwrap(),
        after["rows_written"].as_u64().unwrap(),
    );
    let reported = reported_written.load(Ordering::SeqCst);
    assert!(
        after_written >= before_written,
        "usage went backwards: {before} then {after}"
    );
    assert!(after_written <= reported, "counted twice: {after_written} rows written reported as usage, statements reported {reported}");
    assert!(after["rows_read"].as_u64().unwrap() >= before["rows_read"].as_u64().unwrap());

    // Every acknowledged write survived.
    let count = json!({"requests": [{"type": "execute", "stmt": {"sql": "SELECT count(*) FROM t"}}, {"type": "close"}]});
    let body: Value = client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(&jwt)
        .json(&count)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows: u64 = body["results"][0]["response"]["result"]["rows"][0][0]["value"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        rows >= acknowledged.load(Ordering::SeqCst),
        "{rows} rows, {} acknowledged",
        acknowledged.load(Ordering::SeqCst)
    );

    server.kill().unwrap();
    server.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
