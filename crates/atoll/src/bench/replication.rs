//! `atoll bench --replication POSTGRES_URL`: the replica figures of issue 13, against
//! processes of this binary on loopback (`atoll serve --registered-nodes` on the given,
//! empty, PostgreSQL database; one `atoll node` in each of two locations sharing a
//! `file://` object store), a group in both locations and one database in it.
//!
//! - **Replica reads**: a point select (`SELECT v FROM t WHERE id = ?`, random id among
//!   10,000) over `/v2/pipeline` through the primary's node and through the replica's node,
//!   1 and `--connections` connections, throughput; the replica's should be the primary's
//!   within 10 %.
//! - **Replication lag**: single-row inserts paced at `--replication-rate` per second
//!   through the primary's node while a reader polls the replica's node without pause for
//!   the rows after the last it saw (numbered in commit order); the lag of an insert is
//!   from its acknowledgement to the end of the first poll that saw it (the poll's own
//!   duration is the resolution). p50/p99, target p99 ≤ 100 ms.
//!
//! Client and servers share the machine: the figures are a floor.

use crate::bench::topology_load::{free_port, node_args, serve_args, Process};
use anyhow::{bail, Context};
use rand::Rng;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PASSWORD: &str = "replication-bench-password";
const EAST: &str = "aws-us-east-1";
const WEST: &str = "aws-eu-west-1";
const ROWS: i64 = 10_000;

/// What the figures are asked for.
pub struct ReplicationArgs<'a> {
    pub database_url: &'a str,
    pub duration: Duration,
    pub connections: usize,
    pub rate: u64,
}

pub async fn run(args: ReplicationArgs<'_>) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("atoll-replication-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let outcome = run_in(&dir, &args).await;
    if outcome.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("logs kept in {}", dir.display());
    }
    outcome
}

struct Target {
    client: reqwest::Client,
    label: String,
    token: String,
}

impl Target {
    async fn execute(&self, node: &str, sql: &str) -> anyhow::Result<Value> {
        let response = self
            .client
            .post(format!("{node}/db/{}/v2/pipeline", self.label))
            .bearer_auth(&self.token)
            .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]}))
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() || body["results"][0]["type"] != "ok" {
            bail!("{status}: {body}");
        }
        Ok(body["results"][0]["response"]["result"].clone())
    }
}

async fn run_in(dir: &Path, args: &ReplicationArgs<'_>) -> anyhow::Result<()> {
    let storage = format!("file://{}", dir.join("storage").display());
    let (_serve, control) = Process::start_listening(
        || Ok(serve_args(args.database_url, free_port()?)),
        vec![
            (
                "ATOLL_SECRETS_KEY",
                atoll_meta::SecretsKey::generate_base64(),
            ),
            ("ATOLL_USERNAME", "root".to_string()),
            ("ATOLL_PASSWORD", PASSWORD.to_string()),
        ],
        dir.join("serve.log"),
    )
    .await?;
    let mut nodes = Vec::new();
    let mut urls = Vec::new();
    for (name, location) in [("east", EAST), ("west", WEST)] {
        let (node, url) = Process::start_listening(
            || {
                let port = free_port()?;
                Ok((
                    node_args(name, location, port, &dir.join(name), &storage, &control)?,
                    format!("http://127.0.0.1:{port}"),
                ))
            },
            Vec::new(),
            dir.join(format!("{name}.log")),
        )
        .await?;
        nodes.push(node);
        urls.push(url);
    }
    let (primary, replica) = (urls[0].clone(), urls[1].clone());

    let client = reqwest::Client::new();
    let api = |method: reqwest::Method, path: String, token: &str, body: Option<Value>| {
        let mut request = client
            .request(method, format!("{control}{path}"))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            if status != 200 {
                bail!("{status}: {body}");
            }
            anyhow::Ok(body)
        }
    };
    let login = api(
        reqwest::Method::POST,
        "/v1/auth/login".into(),
        "",
        Some(json!({"username": "root", "password": PASSWORD})),
    )
    .await?;
    let token = login["token"]
        .as_str()
        .context("no login token")?
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = api(reqwest::Method::GET, "/v1/admin/nodes".into(), &token, None).await?;
        if listed["nodes"].as_array().map_or(0, Vec::len) >= 2 {
            break;
        }
        if Instant::now() > deadline {
            bail!("the nodes did not register");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    api(
        reqwest::Method::POST,
        "/v1/groups".into(),
        &token,
        Some(json!({"name": "multi", "location": EAST})),
    )
    .await?;
    api(
        reqwest::Method::POST,
        "/v1/databases".into(),
        &token,
        Some(json!({"name": "bench", "group": "multi"})),
    )
    .await?;
    let got = api(
        reqwest::Method::GET,
        "/v1/databases/bench".into(),
        &token,
        None,
    )
    .await?;
    let minted = api(
        reqwest::Method::POST,
        "/v1/databases/bench/auth/tokens".into(),
        &token,
        Some(json!({})),
    )
    .await?;
    let target = Arc::new(Target {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(args.connections + 8)
            .build()?,
        label: got["database"]["Hostname"]
            .as_str()
            .and_then(|h| h.split('.').next())
            .context("no hostname")?
            .to_string(),
        token: minted["jwt"].as_str().context("no token")?.to_string(),
    });
    target
        .execute(&primary, "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        .await?;
    target
        .execute(
            &primary,
            "CREATE TABLE lag (seq INTEGER PRIMARY KEY, id INTEGER NOT NULL)",
        )
        .await?;
    target
        .execute(
            &primary,
            &format!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS}) \
                 INSERT INTO t SELECT i, printf('value %d', i) FROM n"
            ),
        )
        .await?;
    // The second location: the replica, caught up when `wait` answers.
    api(
        reqwest::Method::POST,
        format!("/v1/groups/multi/locations/{WEST}"),
        &token,
        Some(json!({})),
    )
    .await?;
    api(
        reqwest::Method::GET,
        format!("/v1/groups/multi/locations/{WEST}/wait"),
        &token,
        None,
    )
    .await?;

    println!(
        "# atoll bench --replication {}: serve on postgres, nodes east (primary) and west (replica), {} cpus, client and servers on one machine",
        env!("CARGO_PKG_VERSION"),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for connections in [1, args.connections] {
        let on_primary = point_selects(&target, &primary, connections, args.duration).await;
        let on_replica = point_selects(&target, &replica, connections, args.duration).await;
        let ratio = on_replica / on_primary * 100.0;
        println!(
            "replica_read_{connections}conn: {on_replica:.0} req/s on the replica, {on_primary:.0} req/s on the primary ({ratio:.0} %; target within 10 %: {})",
            if ratio >= 90.0 { "met" } else { "MISSED" }
        );
    }
    let (p50, p99, inserts) = replication_lag(&target, &primary, &replica, args).await?;
    println!(
        "replication_lag: p50 {p50:.1} ms, p99 {p99:.1} ms over {inserts} inserts at {}/s (target p99 <= 100 ms: {})",
        args.rate,
        if p99 <= 100.0 { "met" } else { "MISSED" }
    );
    drop(nodes);
    Ok(())
}

/// Point selects through `node` for `duration`, answered per second.
async fn point_selects(
    target: &Arc<Target>,
    node: &str,
    connections: usize,
    duration: Duration,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..connections {
        let (target, node, done) = (Arc::clone(target), node.to_string(), Arc::clone(&done));
        workers.push(tokio::spawn(async move {
            while start.elapsed() < duration {
                let id = rand::thread_rng().gen_range(1..=ROWS);
                let sql = format!("SELECT v FROM t WHERE id = {id}");
                if target.execute(&node, &sql).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for worker in workers {
        let _ = worker.await;
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// Inserts paced at `args.rate` through the primary, a reader polling the replica; answers
/// the lag's p50 and p99 (ms) and how many inserts were measured.
async fn replication_lag(
    target: &Arc<Target>,
    primary: &str,
    replica: &str,
    args: &ReplicationArgs<'_>,
) -> anyhow::Result<(f64, f64, usize)> {
    let total = (args.rate as f64 * args.duration.as_secs_f64()) as u64;
    let acknowledged: Arc<Mutex<Vec<Option<Instant>>>> =
        Arc::new(Mutex::new(vec![None; total as usize + 1]));
    let next = Arc::new(AtomicU64::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    // The reader: when each id was first seen. Rows are numbered in commit order (`seq`),
    // and a replica applies whole transactions in that order, so each poll asks for the
    // rows after the last one it saw.
    let reader = {
        let (target, replica, stop) = (Arc::clone(target), replica.to_string(), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut seen: Vec<Option<Instant>> = vec![None; total as usize + 1];
            let mut last = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let sql = format!("SELECT seq, id FROM lag WHERE seq > {last} ORDER BY seq");
                let Ok(result) = target.execute(&replica, &sql).await else {
                    continue;
                };
                let now = Instant::now();
                for row in result["rows"].as_array().into_iter().flatten() {
                    let number = |i: usize| {
                        row[i]["value"]
                            .as_str()
                            .and_then(|v| v.parse::<u64>().ok())
                            .unwrap_or(0)
                    };
                    last = last.max(number(0));
                    if let Some(slot) = seen.get_mut(number(1) as usize) {
                        slot.get_or_insert(now);
                    }
                }
            }
            seen
        })
    };
    let start = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / args.rate as f64);
    let mut writers = Vec::new();
    for _ in 0..16 {
        let (target, primary, next, acknowledged) = (
            Arc::clone(target),
            primary.to_string(),
            Arc::clone(&next),
            Arc::clone(&acknowledged),
        );
        writers.push(tokio::spawn(async move {
            loop {
                let id = next.fetch_add(1, Ordering::Relaxed);
                if id > total {
                    return;
                }
                tokio::time::sleep_until((start + interval * id as u32).into()).await;
                let sql = format!("INSERT INTO lag (id) VALUES ({id})");
                if target.execute(&primary, &sql).await.is_ok() {
                    acknowledged.lock().unwrap_or_else(|p| p.into_inner())[id as usize] =
                        Some(Instant::now());
                }
            }
        }));
    }
    for writer in writers {
        writer.await?;
    }
    // Time for the last inserts to reach the replica.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let seen = reader.await?;
    let acknowledged = acknowledged
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut lags = Vec::new();
    for (id, acked) in acknowledged.iter().enumerate().skip(1) {
        let Some(acked) = acked else { continue };
        let Some(seen) = seen[id] else {
            bail!("insert {id} never reached the replica");
        };
        // Seen before its acknowledgement reached the client: no lag at all.
        lags.push(seen.saturating_duration_since(*acked));
    }
    let measured = lags.len();
    let (p50, p99) = crate::bench::percentiles(lags);
    Ok((p50, p99, measured))
}
