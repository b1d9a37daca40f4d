//! `atoll bench --noisy-neighbour`: what one tenant feels while another abuses the node.
//!
//! The node under test is the benchmark's (`bench/mod.rs`), with its default limits. A victim
//! organization runs point selects one after another on its own database from its own
//! client address (127.0.0.2) for the whole run, while an attacker organization runs each
//! abuse of the issue "Tenant blast radius" in turn, from 127.0.0.1:
//!
//! - `streams`: 4,352 pipelines left open (no `close`) over 17 of its databases;
//! - `runaway_selects`: 48 statements that run until the deadline, kept in flight;
//! - `slowloris`: 1,100 connections that send half a request's headers and wait;
//! - `upload_checks`: uploads whose CHECK constraint makes the file's check expensive,
//!   8 at a time.
//!
//! For each, one line: the victim's p50/p99 and how many of its requests were refused
//! (429), failed or timed out (5 s). Goal: p99 ≤ 50 ms and none.

use crate::bench::{percentiles, Bench, Org};
use anyhow::Context;
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The victim's address: the per-address limits must not count it with the attacker's.
const VICTIM_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const GOAL_P99_MS: f64 = 50.0;

/// What the victim saw during one abuse.
#[derive(Default)]
struct Seen {
    latencies: Vec<Duration>,
    refused: u64,
    failed: u64,
    timed_out: u64,
}

pub(crate) async fn run(bench: &Arc<Bench>, duration: Duration) -> anyhow::Result<()> {
    let victim_org = bench.org("victim").await?;
    bench
        .create_database(&victim_org, "victim", json!({}))
        .await?;
    let victim_url = bench.database_url(&victim_org, "victim");
    let victim_token = bench.database_token(&victim_org, "victim").await?;
    bench
        .execute(
            &victim_url,
            &victim_token,
            "CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT)",
        )
        .await?;
    bench
        .execute(
            &victim_url,
            &victim_token,
            "INSERT INTO kv WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100) SELECT x, 'value ' || x FROM c",
        )
        .await?;
    let attacker = bench.org("attacker").await?;
    let mut databases = Vec::new();
    for i in 0..17 {
        let name = format!("noisy-{i}");
        bench.create_database(&attacker, &name, json!({})).await?;
        let token = bench.database_token(&attacker, &name).await?;
        databases.push((bench.database_url(&attacker, &name), token));
    }
    let victim_client = reqwest::Client::builder()
        .local_address(VICTIM_ADDRESS)
        .timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .build()?;

    println!("# noisy neighbour: the victim's point selects while another organization abuses the node ({} s each)", duration.as_secs());
    let victim = Victim {
        client: victim_client,
        url: victim_url,
        token: victim_token,
        duration,
    };
    victim.during("quiet", async {}).await;
    victim
        .during("streams", open_streams(bench, &databases))
        .await;

    let runaway = runaway_selects(bench, &databases);
    victim.during("runaway_selects", async {}).await;
    abort_all(runaway);

    let held = slowloris(bench).await?;
    victim.during("slowloris", async {}).await;
    drop(held);

    let uploads = upload_checks(bench, &attacker).await?;
    victim.during("upload_checks", async {}).await;
    abort_all(uploads);
    Ok(())
}

/// The victim's client, database and token, and how long it measures each abuse.
struct Victim {
    client: reqwest::Client,
    url: String,
    token: String,
    duration: Duration,
}

impl Victim {
    /// Measures the victim while `abuse` runs (and whatever abuse was started before), and
    /// prints the line of `name`.
    async fn during(&self, name: &str, abuse: impl std::future::Future<Output = ()>) {
        let seen = measure(&self.client, &self.url, &self.token, self.duration, abuse).await;
        report(name, &seen);
    }
}

/// Ends an abuse: its requests are dropped, so the node sees their clients go away.
fn abort_all(workers: Vec<tokio::task::JoinHandle<()>>) {
    for worker in workers {
        worker.abort();
    }
}

/// Runs the victim's point selects for `duration` while `abuse` runs beside them.
async fn measure(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    duration: Duration,
    abuse: impl std::future::Future<Output = ()>,
) -> Seen {
    let victim = async {
        let mut seen = Seen::default();
        let deadline = Instant::now() + duration;
        let mut k = 0u64;
        while Instant::now() < deadline {
            k = k % 100 + 1;
            let body = json!({"requests": [
                {"type": "execute", "stmt": {"sql": format!("SELECT v FROM kv WHERE k = {k}")}},
                {"type": "close"}
            ]});
            let started = Instant::now();
            match client
                .post(format!("{url}v2/pipeline"))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
            {
                Ok(response) if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS => {
                    seen.refused += 1
                }
                Ok(response) if response.status() == reqwest::StatusCode::OK => {
                    match response.json::<Value>().await {
                        Ok(body) if body["results"][0]["type"] == "ok" => {
                            seen.latencies.push(started.elapsed())
                        }
                        _ => seen.failed += 1,
                    }
                }
                Ok(_) => seen.failed += 1,
                Err(error) if error.is_timeout() => seen.timed_out += 1,
                Err(_) => seen.failed += 1,
            }
        }
        seen
    };
    let (seen, ()) = tokio::join!(victim, abuse);
    seen
}

fn report(abuse: &str, seen: &Seen) {
    let answered = seen.latencies.len();
    let (p50, p99) = percentiles(seen.latencies.clone());
    let bad = seen.refused + seen.failed + seen.timed_out;
    let met = p99 <= GOAL_P99_MS && bad == 0;
    println!(
        "noisy_neighbour {abuse}: victim p50 {p50:.2} ms, p99 {p99:.2} ms over {answered} selects; {} refused (429), {} failed, {} timed out; target p99 <= {GOAL_P99_MS} ms and none refused: {}",
        seen.refused,
        seen.failed,
        seen.timed_out,
        if met { "met" } else { "MISSED" }
    );
}

/// 4,352 pipelines without `close` over the attacker's 17 databases, 64 at a time: each
/// leaves a stream open until it expires.
async fn open_streams(bench: &Arc<Bench>, databases: &[(String, String)]) {
    let refused = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let databases = Arc::new(databases.to_vec());
    let mut workers = Vec::new();
    for _ in 0..64 {
        let (bench, refused, next, databases) = (
            Arc::clone(bench),
            Arc::clone(&refused),
            Arc::clone(&next),
            Arc::clone(&databases),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= 4_352 {
                    return;
                }
                let (url, token) = &databases[i as usize % databases.len()];
                let body = json!({"requests": [{"type": "execute", "stmt": {"sql": "SELECT 1"}}]});
                if let Ok(response) = bench
                    .client
                    .post(format!("{url}v2/pipeline"))
                    .bearer_auth(token)
                    .json(&body)
                    .send()
                    .await
                {
                    if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for worker in workers {
        let _ = worker.await;
    }
    eprintln!(
        "  the attacker's open pipelines: {} of 4352 refused",
        refused.load(Ordering::Relaxed)
    );
}

/// 48 statements that count forever (until the node's statement deadline), each sent
/// again when it ends.
fn runaway_selects(
    bench: &Arc<Bench>,
    databases: &[(String, String)],
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..48)
        .map(|i| {
            let bench = Arc::clone(bench);
            let (url, token) = databases[i % databases.len()].clone();
            tokio::spawn(async move {
                loop {
                    let _ = bench
                        .execute(
                            &url,
                            &token,
                            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
                        )
                        .await;
                }
            })
        })
        .collect()
}

/// 1,100 connections from the attacker's address, each with half of a request's headers.
async fn slowloris(bench: &Arc<Bench>) -> anyhow::Result<Vec<tokio::net::TcpStream>> {
    use tokio::io::AsyncWriteExt;
    let address = bench
        .db_url
        .trim_start_matches("http://")
        .parse::<std::net::SocketAddr>()
        .context("the node's address")?;
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..1_100 {
        match tokio::net::TcpStream::connect(address).await {
            Ok(mut stream) => {
                let _ = stream
                    .write_all(b"POST /v2/pipeline HTTP/1.1\r\nHost: noisy\r\nContent-Type: appl")
                    .await;
                held.push(stream);
            }
            Err(_) => refused += 1,
        }
    }
    eprintln!(
        "  the attacker's half-sent requests: {} connections open, {refused} refused",
        held.len()
    );
    Ok(held)
}

/// Uploads whose CHECK constraint makes the file's check expensive, 8 at a time.
async fn upload_checks(
    bench: &Arc<Bench>,
    attacker: &Org,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let path = bench.dir.join("expensive-check.db");
    let file = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<u8>> {
        let _ = std::fs::remove_file(&path);
        let conn = rusqlite::Connection::open(&path)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA ignore_check_constraints = ON;
             CREATE TABLE t (x CHECK (instr(hex(zeroblob(900000)), hex(zeroblob(450000)) || '1') >= 0));
             INSERT INTO t VALUES (1);
             PRAGMA wal_checkpoint(TRUNCATE);",
        )?;
        drop(conn);
        Ok(std::fs::read(&path)?)
    })
    .await??;
    let file = bytes::Bytes::from(file);
    let mut targets = Vec::new();
    for i in 0..8 {
        let name = format!("noisy-upload-{i}");
        bench
            .create_database(
                attacker,
                &name,
                json!({"seed": {"type": "database_upload"}}),
            )
            .await?;
        let token = bench.database_token(attacker, &name).await?;
        targets.push((bench.database_url(attacker, &name), token));
    }
    Ok(targets
        .into_iter()
        .map(|(url, token)| {
            let (bench, file) = (Arc::clone(bench), file.clone());
            tokio::spawn(async move {
                loop {
                    let _ = bench
                        .client
                        .post(format!("{url}v1/upload"))
                        .bearer_auth(&token)
                        .body(file.clone())
                        .send()
                        .await;
                }
            })
        })
        .collect())
}
