//! `atoll bench --load`: a bounded mixed workload against `atoll dev` for a while, with
//! zero failed requests and flat memory.
//!
//! The server runs as a child process (this binary's `dev` command, on free loopback ports,
//! in a temporary directory) so its resident memory is measured alone, from
//! `/proc/<pid>/status`. Workers loop over a mix of what users do all day:
//!
//! | share | operation |
//! |---|---|
//! | 4/10 | a query over `/v2/pipeline` (an insert and a select) on one of a few databases |
//! | 1/10 | create a database, query it once, delete it |
//! | 1/10 | upload a small SQLite file into a new database (`/v1/upload`), query it, delete it |
//! | 1/10 | mint a database token, and use it |
//! | 1/10 | mint an API token, then revoke it |
//! | 2/10 | list databases, list organizations |
//!
//! Databases are created, uploaded into and deleted in a team organization on the
//! `starter` plan (its quotas lifted with `--plans`), where a delete is final. On paid
//! plans a deleted database is kept, restorable, for 5 days, so memory grows with every
//! delete by design; measured there, the test would measure that retention, not leaks.
//! The query databases live in the admin's own organization.
//!
//! Every operation must succeed; a failure is counted and the first ones are printed.
//! Memory is "flat" when the RSS at the end is at most `--max-rss-growth` percent above
//! the RSS after the warm-up (the first fifth of the run, at least 5 s): the warm-up fills
//! caches and pools that are meant to stay, growth after it is a leak. The command exits
//! non-zero when a request failed or memory was not flat.

use anyhow::{bail, Context};
use clap::Args;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Args, Clone)]
pub struct LoadArgs {
    /// Run the load test (a mixed workload against `atoll dev` in a child process)
    /// instead of the benchmark figures.
    #[arg(long)]
    pub load: bool,
    /// Duration of the load test, seconds.
    #[arg(long, default_value_t = 60, requires = "load")]
    pub duration: u64,
    /// Concurrent workers of the load test.
    #[arg(long, default_value_t = 8, requires = "load")]
    pub workers: usize,
    /// Largest growth of the server's RSS after the warm-up, percent, for memory to count
    /// as flat.
    #[arg(long, default_value_t = 20, requires = "load")]
    pub max_rss_growth: u64,
    /// Run the load against the production topology instead, on this (empty) PostgreSQL
    /// database: two `atoll serve` replicas, three self-registering nodes in two locations,
    /// a replica and a node SIGKILLed under the load (`topology_load.rs`).
    #[arg(long, requires = "load", value_name = "POSTGRES_URL")]
    pub topology: Option<String>,
}

/// Databases the query share of the workload writes to and reads from.
const QUERY_DATABASES: usize = 4;
/// Failures printed in full; the rest are only counted.
const FAILURES_SHOWN: usize = 10;

pub async fn load(args: &LoadArgs) -> anyhow::Result<()> {
    if let Some(database_url) = &args.topology {
        return crate::bench::topology_load::run(
            database_url,
            Duration::from_secs(args.duration),
            args.workers,
        )
        .await;
    }
    let dir = std::env::temp_dir().join(format!(
        "atoll-load-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut server = Server::start(&dir).await?;
    let outcome = run(args, &server, &dir).await;
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

struct Server {
    child: Child,
    api: String,
    token: String,
}

impl Server {
    async fn start(dir: &Path) -> anyhow::Result<Server> {
        let (port, db_port) = (free_port()?, free_port()?);
        // New organizations start on the free plan, where a delete is final; its quotas
        // left out are unlimited: the churn organization never hits one.
        let plans = dir.join("plans.json");
        std::fs::write(&plans, r#"{"starter": {"quotas": {}, "default": true}}"#)?;
        // `ATOLL_LOAD_WRAPPER=heaptrack`: the server runs under a profiler (which is how
        // the growth of the `stats` regression was found, PERFORMANCE.md "Load test").
        let mut command = match std::env::var("ATOLL_LOAD_WRAPPER") {
            Ok(wrapper) => {
                let mut command = Command::new(wrapper);
                command.arg(std::env::current_exe()?);
                command
            }
            Err(_) => Command::new(std::env::current_exe()?),
        };
        let child = command
            .args(["dev", "--data-dir"])
            .arg(dir.join("data"))
            .arg("--plans")
            .arg(&plans)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--db-listen", &format!("127.0.0.1:{db_port}")])
            // One process: its RSS is what is measured (a supervisor's is its own).
            .arg("--no-supervise")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("server.log"))?)
            .spawn()
            .context("cannot start atoll dev")?;
        let mut server = Server {
            child,
            api: format!("http://127.0.0.1:{port}"),
            token: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let healthy = reqwest::get(format!("{}/health", server.api))
                .await
                .is_ok_and(|r| r.status().is_success());
            if healthy {
                break;
            }
            if let Some(status) = server.child.try_wait()? {
                bail!(
                    "atoll dev exited with {status}; see {}",
                    dir.join("server.log").display()
                );
            }
            if Instant::now() > deadline {
                server.stop();
                bail!("atoll dev did not answer /health in 60 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server.token = std::fs::read_to_string(dir.join("data/admin.token"))
            .context("cannot read the admin token")?
            .trim()
            .to_string();
        Ok(server)
    }

    fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What the workers share: the client, the server's addresses, the tally.
struct Load {
    client: reqwest::Client,
    api: String,
    token: String,
    /// `(data-plane URL, token)` of the query databases.
    query_databases: Vec<(String, String)>,
    /// `/v1/organizations/<slug>` of the starter-plan organization databases churn in.
    churn: String,
    upload_file: Vec<u8>,
    requests: AtomicU64,
    failures: AtomicU64,
    shown: Mutex<Vec<String>>,
}

impl Load {
    fn failed(&self, what: String) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        if shown.len() < FAILURES_SHOWN {
            shown.push(what);
        }
    }

    /// One request that must answer 2xx; its JSON body (or `null`).
    async fn send(&self, what: &str, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let response = request.send().await.with_context(|| what.to_string())?;
        let status = response.status();
        let text = response.text().await.with_context(|| what.to_string())?;
        if !status.is_success() {
            bail!("{what}: {status}: {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.api))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.send(&format!("{method} {path}"), request).await
    }

    /// Runs statements in one pipeline; fails unless every one succeeds.
    async fn execute(&self, (url, jwt): &(String, String), sqls: &[&str]) -> anyhow::Result<Value> {
        let mut requests: Vec<Value> = sqls
            .iter()
            .map(|sql| json!({"type": "execute", "stmt": {"sql": sql}}))
            .collect();
        requests.push(json!({"type": "close"}));
        let request = self
            .client
            .post(format!("{url}v2/pipeline"))
            .bearer_auth(jwt)
            .json(&json!({ "requests": requests }));
        let body = self.send("POST /v2/pipeline", request).await?;
        for (i, sql) in sqls.iter().enumerate() {
            if body["results"][i]["type"] != "ok" {
                bail!("{sql}: {}", body["results"][i]);
            }
        }
        Ok(body)
    }

    /// Creates a database under `prefix` (`/v1` or `/v1/organizations/<slug>`; the JSON
    /// `extra` merged into the body); its URL and a token.
    async fn create_database(
        &self,
        prefix: &str,
        name: &str,
        extra: Value,
    ) -> anyhow::Result<(String, String)> {
        let mut body = json!({ "name": name, "group": "default" });
        if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
            body.extend(extra);
        }
        self.api(
            reqwest::Method::POST,
            &format!("{prefix}/databases"),
            Some(body),
        )
        .await?;
        self.database(prefix, name).await
    }

    async fn database(&self, prefix: &str, name: &str) -> anyhow::Result<(String, String)> {
        let got = self
            .api(
                reqwest::Method::GET,
                &format!("{prefix}/databases/{name}"),
                None,
            )
            .await?;
        let url = got["database"]["http_url"]
            .as_str()
            .context("no http_url")?
            .to_string();
        let jwt = self
            .api(
                reqwest::Method::POST,
                &format!("{prefix}/databases/{name}/auth/tokens?expiration=1h"),
                None,
            )
            .await?;
        Ok((url, jwt["jwt"].as_str().context("no jwt")?.to_string()))
    }

    async fn delete_database(&self, name: &str) -> anyhow::Result<()> {
        let path = format!("{}/databases/{name}", self.churn);
        self.api(reqwest::Method::DELETE, &path, None)
            .await
            .map(drop)
    }

    /// One operation of the mix; `n` picks which and names what it creates.
    async fn operation(&self, worker: usize, n: u64) -> anyhow::Result<()> {
        let unique = format!("w{worker}-{n}");
        match n % 10 {
            0..=3 => {
                let db = &self.query_databases[(n as usize + worker) % self.query_databases.len()];
                self.execute(
                    db,
                    &[
                        &format!("INSERT INTO t (worker, n) VALUES ({worker}, {n})"),
                        "SELECT count(*), max(n) FROM t",
                    ],
                )
                .await
                .map(drop)
            }
            4 => {
                let name = format!("load-{unique}");
                let db = self.create_database(&self.churn, &name, json!({})).await?;
                self.execute(&db, &["CREATE TABLE t (x)", "INSERT INTO t VALUES (1)"])
                    .await?;
                self.delete_database(&name).await
            }
            5 => {
                let name = format!("upload-{unique}");
                let db = self
                    .create_database(
                        &self.churn,
                        &name,
                        json!({"seed": {"type": "database_upload"}}),
                    )
                    .await?;
                let request = self
                    .client
                    .post(format!("{}v1/upload", db.0))
                    .bearer_auth(&db.1)
                    .body(self.upload_file.clone());
                self.send("POST /v1/upload", request).await?;
                self.execute(&db, &["SELECT count(*) FROM t"]).await?;
                self.delete_database(&name).await
            }
            6 => {
                let name = format!("load-query-{}", (n as usize + worker) % QUERY_DATABASES);
                let db = self.database("/v1", &name).await?;
                self.execute(&db, &["SELECT 1"]).await.map(drop)
            }
            7 => {
                let name = format!("load-{unique}");
                let minted = self
                    .api(
                        reqwest::Method::POST,
                        &format!("/v1/auth/api-tokens/{name}"),
                        None,
                    )
                    .await?;
                minted["token"].as_str().context("no token minted")?;
                self.api(
                    reqwest::Method::DELETE,
                    &format!("/v1/auth/api-tokens/{name}"),
                    None,
                )
                .await
                .map(drop)
            }
            _ => {
                self.api(reqwest::Method::GET, "/v1/databases", None)
                    .await?;
                self.api(reqwest::Method::GET, "/v1/organizations", None)
                    .await
                    .map(drop)
            }
        }
    }
}

/// A small valid upload: page size 4096, WAL, 100 rows in `t`.
fn upload_file(dir: &Path) -> anyhow::Result<Vec<u8>> {
    let path: PathBuf = dir.join("upload.db");
    let conn = rusqlite::Connection::open(&path)?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE t (x INTEGER PRIMARY KEY, payload BLOB);
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100)
         INSERT INTO t SELECT x, randomblob(1000) FROM c;
         PRAGMA wal_checkpoint(TRUNCATE);",
    )?;
    drop(conn);
    let bytes = std::fs::read(&path)?;
    std::fs::remove_file(&path)?;
    Ok(bytes)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn run(args: &LoadArgs, server: &Server, dir: &Path) -> anyhow::Result<()> {
    let duration = Duration::from_secs(args.duration.max(1));
    let warm_up = (duration / 5).max(Duration::from_secs(5)).min(duration);
    let start_rss = server.rss_kib().context("cannot read the server's RSS")?;
    let mut load = Load {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()?,
        api: server.api.clone(),
        token: server.token.clone(),
        query_databases: Vec::new(),
        churn: String::new(),
        upload_file: upload_file(dir)?,
        requests: AtomicU64::new(0),
        failures: AtomicU64::new(0),
        shown: Mutex::new(Vec::new()),
    };
    let org = load
        .api(
            reqwest::Method::POST,
            "/v1/organizations",
            Some(json!({"name": "load"})),
        )
        .await?;
    let slug = org["org"]["slug"]
        .as_str()
        .context("no organization slug")?;
    // A new team organization has its `default` group already.
    load.churn = format!("/v1/organizations/{slug}");
    for i in 0..QUERY_DATABASES {
        let db = load
            .create_database("/v1", &format!("load-query-{i}"), json!({}))
            .await?;
        load.execute(&db, &["CREATE TABLE t (worker INTEGER, n INTEGER)"])
            .await?;
        load.query_databases.push(db);
    }
    println!(
        "# atoll bench --load: {} s, {} workers, server RSS at start {:.1} MiB",
        duration.as_secs(),
        args.workers,
        mib(start_rss)
    );

    let load = Arc::new(load);
    let began = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..args.workers {
        let load = Arc::clone(&load);
        workers.spawn(async move {
            let mut n = worker as u64;
            while began.elapsed() < duration {
                if let Err(e) = load.operation(worker, n).await {
                    load.failed(format!("{e:#}"));
                }
                n += 1;
            }
        });
    }
    // Sample the server's RSS while the workers run; every fifth second's sample is printed,
    // so a run shows whether memory levels off (caches, the allocator) or keeps climbing.
    let (mut warm_rss, mut peak_rss) = (None, start_rss);
    let mut trend: Vec<String> = Vec::new();
    while !workers.is_empty() {
        tokio::select! {
            _ = workers.join_next() => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                if let Some(rss) = server.rss_kib() {
                    peak_rss = peak_rss.max(rss);
                    let second = began.elapsed().as_secs();
                    if second / 5 >= trend.len() as u64 {
                        trend.push(format!("{second} s {:.0}", mib(rss)));
                    }
                    if warm_rss.is_none() && began.elapsed() >= warm_up {
                        warm_rss = Some(rss);
                    }
                }
            }
        }
    }
    let end_rss = server.rss_kib().context("the server is gone")?;
    let warm_rss = warm_rss.unwrap_or(end_rss);
    let elapsed = began.elapsed().as_secs_f64();
    let requests = load.requests.load(Ordering::Relaxed);
    let failures = load.failures.load(Ordering::Relaxed);
    let growth = (end_rss as f64 / warm_rss as f64 - 1.0) * 100.0;
    let flat = growth <= args.max_rss_growth as f64;
    println!(
        "load_requests: {requests} in {elapsed:.1} s ({:.0} req/s), failed operations {failures}",
        requests as f64 / elapsed
    );
    println!(
        "load_rss: start {:.1} MiB, after warm-up ({} s) {:.1} MiB, peak {:.1} MiB, end {:.1} MiB: {growth:+.1} % after warm-up, limit +{} %: {}",
        mib(start_rss),
        warm_up.as_secs(),
        mib(warm_rss),
        mib(peak_rss),
        mib(end_rss),
        args.max_rss_growth,
        if flat { "flat" } else { "GREW" }
    );
    println!("load_rss_trend (MiB): {}", trend.join(", "));
    for failure in load.shown.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        eprintln!("failed: {failure}");
    }
    if failures > 0 {
        bail!("{failures} operations failed ({requests} requests sent)");
    }
    if !flat {
        bail!(
            "the server's memory grew {growth:.1} % after the warm-up (limit {} %)",
            args.max_rss_growth
        );
    }
    Ok(())
}
