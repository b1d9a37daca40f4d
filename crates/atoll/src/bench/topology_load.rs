//! `atoll bench --load --topology POSTGRES_URL`: the load test against the production
//! topology, with a replica and a node SIGKILLed under it (issue 12's "done when").
//!
//! Started as child processes of this binary, on free loopback ports, in a temporary
//! directory: two `atoll serve --registered-nodes` replicas on the given (empty) PostgreSQL
//! database, and three `atoll node`s registering with both — `a1`, `a2` in one location,
//! `b1` in another — sharing a `file://` object store. Workers loop over:
//!
//! | share | operation |
//! |---|---|
//! | 6/10 | an insert into one of the databases, through a random node of its location (the node forwards when it does not hold it); the id is recorded once acknowledged |
//! | 2/10 | a count of the same, through a random node of its location |
//! | 1/10 | list databases, through a live replica |
//! | 1/10 | create a database, then delete it, through a live replica |
//!
//! API calls go to the replicas the way a load balancer would: a replica that refuses the
//! connection is skipped. At a third of the run replica 1 is SIGKILLed; at half of it node
//! `a2` is, and restarted 5 s later. At the end every acknowledged insert must be in its
//! database (read back through the nodes), and every failed request must be one of the
//! killed node's (its databases, a request in flight on it when it died, or a create placed
//! on it before its heartbeats stopped), started or failed during its outage or its
//! recovery. The command prints the tally and exits non-zero
//! otherwise.

use anyhow::{bail, Context};
use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "topology-load-node-secret";
const PASSWORD: &str = "topology-load-password";
const EAST: &str = "aws-us-east-1";
const WEST: &str = "aws-eu-west-1";
/// Databases the inserts go to: four in the location with two nodes, two in the other.
const EAST_DATABASES: usize = 4;
const WEST_DATABASES: usize = 2;

pub(crate) struct Process {
    child: Option<Child>,
    args: Vec<String>,
    /// Secrets go by environment, never on the command line (`ps` shows it).
    envs: Vec<(&'static str, String)>,
    log: PathBuf,
}

impl Process {
    pub(crate) fn start(
        args: Vec<String>,
        envs: Vec<(&'static str, String)>,
        log: PathBuf,
    ) -> anyhow::Result<Process> {
        let mut process = Process {
            child: None,
            args,
            envs,
            log,
        };
        process.spawn()?;
        Ok(process)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        self.child = Some(
            Command::new(std::env::current_exe()?)
                .args(&self.args)
                .env("ATOLL_NODE_SECRET", SECRET)
                .envs(self.envs.iter().map(|(k, v)| (*k, v.as_str())))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("cannot start a process of the topology")?,
        );
        Ok(())
    }

    /// Starts a process that listens on ports [`free_port`] picks, and waits until it
    /// answers `/health`. `args` makes the arguments and the URL to ask from fresh ports
    /// each time: a port is free when picked but only bound a moment later by the process,
    /// and in between another process's outgoing connection can take it, so a start that
    /// ends for a taken address is tried again on other ports.
    pub(crate) async fn start_listening(
        args: impl Fn() -> anyhow::Result<(Vec<String>, String)>,
        envs: Vec<(&'static str, String)>,
        log: PathBuf,
    ) -> anyhow::Result<(Process, String)> {
        const ATTEMPTS: usize = 3;
        let mut attempt = 1;
        loop {
            let (args, url) = args()?;
            let mut process = Process::start(args, envs.clone(), log.clone())?;
            match process.wait_healthy(&url).await {
                Ok(()) => return Ok((process, url)),
                Err(NotHealthy::PortTaken(why)) if attempt < ATTEMPTS => {
                    eprintln!("{url}: {why}; starting again on other ports");
                    attempt += 1;
                }
                Err(NotHealthy::PortTaken(why) | NotHealthy::Other(why)) => bail!(why),
            }
        }
    }

    /// Waits until `url` answers `/health`, failing at once (with the end of the log) if
    /// the process ends first.
    async fn wait_healthy(&mut self, url: &str) -> Result<(), NotHealthy> {
        let log_start = std::fs::metadata(&self.log).map_or(0, |m| m.len());
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = reqwest::Client::new();
        loop {
            let answered = client
                .get(format!("{url}/health"))
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if answered {
                return Ok(());
            }
            let exited = match self.child.as_mut().map(|child| child.try_wait()) {
                Some(Ok(status)) => status,
                _ => None,
            };
            if let Some(status) = exited {
                self.child = None;
                let tail = self.log_tail(log_start);
                let why = format!(
                    "{url} ended ({status}) before answering /health; the end of {}:\n{tail}",
                    self.log.display()
                );
                return Err(if tail.contains("Address already in use") {
                    NotHealthy::PortTaken(why)
                } else {
                    NotHealthy::Other(why)
                });
            }
            if Instant::now() > deadline {
                return Err(NotHealthy::Other(format!(
                    "{url} did not answer /health in 60 s; the end of {}:\n{}",
                    self.log.display(),
                    self.log_tail(log_start)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last lines the process logged since `start` (a byte offset in the log).
    fn log_tail(&self, start: u64) -> String {
        let log = std::fs::read(&self.log).unwrap_or_default();
        let written = String::from_utf8_lossy(log.get(start as usize..).unwrap_or_default());
        let lines: Vec<&str> = written.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGKILL: no shutdown, no flush.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The arguments of an `atoll node` named `name` in `location`, its database listener on
/// `port` (its admin listener on a free one), registering with `control_planes`.
pub(crate) fn node_args(
    name: &str,
    location: &str,
    port: u16,
    data_dir: &Path,
    storage: &str,
    control_planes: &str,
) -> anyhow::Result<Vec<String>> {
    Ok(vec![
        "node".into(),
        "--name".into(),
        name.into(),
        "--location".into(),
        location.into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--admin-listen".into(),
        format!("127.0.0.1:{}", free_port()?),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--storage-url".into(),
        storage.into(),
        "--control-plane".into(),
        control_planes.into(),
    ])
}

/// Why a started process is not serving.
enum NotHealthy {
    /// It ended because a port it was given was taken by then.
    PortTaken(String),
    Other(String),
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The arguments of an `atoll serve` replica on `database_url` listening on `port`, and its
/// URL.
pub(crate) fn serve_args(database_url: &str, port: u16) -> (Vec<String>, String) {
    (
        vec![
            "serve".into(),
            "--database-url".into(),
            database_url.into(),
            "--registered-nodes".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--reconcile-interval-secs".into(),
            "2".into(),
        ],
        format!("http://127.0.0.1:{port}"),
    )
}

struct Db {
    name: String,
    label: String,
    token: String,
    /// Node URLs of its location.
    nodes: Vec<String>,
    /// Whether it is held by the node that gets killed (known once placed).
    on_killed_node: bool,
    acknowledged: Mutex<BTreeSet<i64>>,
}

/// A request that was in flight on the killed node (a load balancer in front of it would
/// answer 502): expected while the node is out, whichever node holds the database.
#[derive(Debug)]
struct ThroughKilledNode(reqwest::Error);

impl std::fmt::Display for ThroughKilledNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "in flight on the killed node: {}", self.0)
    }
}

impl std::error::Error for ThroughKilledNode {}

struct Topology {
    client: reqwest::Client,
    /// The database listener of the node that gets killed.
    killed_node_url: String,
    replicas: Vec<String>,
    token: String,
    dbs: Vec<Db>,
    next_id: AtomicU64,
    requests: AtomicU64,
    /// Failures of the killed node's databases (or of creates placed on it) while it was
    /// down or recovering: expected.
    expected_failures: AtomicU64,
    unexpected_failures: AtomicU64,
    shown: Mutex<Vec<String>>,
    /// Set from the node's SIGKILL until its databases answer again.
    node_outage: AtomicBool,
    /// Set once replica 1 is SIGKILLed.
    replica_killed: AtomicBool,
    stop: AtomicBool,
}

impl Topology {
    fn failed(&self, what: String, expected: bool) {
        if expected {
            self.expected_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.unexpected_failures.fetch_add(1, Ordering::Relaxed);
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        if shown.len() < 10 {
            shown.push(what);
        }
    }

    /// An API call through the first live replica (in random order), as a load balancer
    /// would send it. Answers the status and body of the replica that answered.
    async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut replicas = self.replicas.clone();
        replicas.shuffle(&mut rand::thread_rng());
        let mut last = None;
        for replica in replicas {
            let mut request = self
                .client
                .request(method.clone(), format!("{replica}{path}"))
                .bearer_auth(&self.token);
            if let Some(body) = &body {
                request = request.json(body);
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    return Ok((status, response.json().await.unwrap_or(Value::Null)));
                }
                // A dead replica: the load balancer tries the next one.
                Err(e) if e.is_connect() => last = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        bail!("no replica answered: {last:?}")
    }

    /// Runs `sql` through the location's nodes as a load balancer in front of them would:
    /// starting with `first`, moving on to the next node when one refuses the connection.
    async fn execute(&self, first: usize, db: &Db, sql: &str) -> anyhow::Result<Value> {
        let mut last = None;
        for i in 0..db.nodes.len() {
            let node = &db.nodes[(first + i) % db.nodes.len()];
            match self.execute_on(node, db, sql).await {
                Err(e)
                    if e.downcast_ref::<reqwest::Error>()
                        .is_some_and(|e| e.is_connect()) =>
                {
                    last = Some(e)
                }
                Err(e) if *node == self.killed_node_url => {
                    return Err(match e.downcast::<reqwest::Error>() {
                        Ok(transport) => ThroughKilledNode(transport).into(),
                        Err(other) => other,
                    })
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no node")))
    }

    async fn execute_on(&self, node: &str, db: &Db, sql: &str) -> anyhow::Result<Value> {
        let response = self
            .client
            .post(format!("{node}/db/{}/v2/pipeline", db.label))
            .bearer_auth(&db.token)
            .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]}))
            .timeout(Duration::from_secs(30))
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() || body["results"][0]["type"] != "ok" {
            bail!("{status}: {body}");
        }
        Ok(body["results"][0]["response"]["result"].clone())
    }

    async fn operation(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let (share, db_index, node_pick) = {
            let mut rng = rand::thread_rng();
            (
                rng.gen_range(0..10),
                rng.gen_range(0..self.dbs.len()),
                rng.gen::<usize>(),
            )
        };
        let db = &self.dbs[db_index];
        let node = node_pick % db.nodes.len();
        // In the outage when the operation started or when it failed: a request in flight
        // at the instant the node is SIGKILLed fails with it.
        let started_in_outage = self.node_outage.load(Ordering::Relaxed);
        let in_outage = || started_in_outage || self.node_outage.load(Ordering::Relaxed);
        let killed_node_failed =
            |e: &anyhow::Error| in_outage() && (db.on_killed_node || e.is::<ThroughKilledNode>());
        // A request in flight on the replica at the instant it is SIGKILLed fails with it
        // (a load balancer answers 502 for it): counted with the expected failures.
        let replica_died = |e: &anyhow::Error| {
            e.downcast_ref::<reqwest::Error>()
                .is_some_and(|e| !e.is_connect() && self.replica_killed.load(Ordering::Relaxed))
        };
        match share {
            0..=5 => {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed) as i64;
                match self
                    .execute(node, db, &format!("INSERT INTO t VALUES ({id})"))
                    .await
                {
                    Ok(_) => {
                        db.acknowledged
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(id);
                    }
                    Err(e) => {
                        let expected = killed_node_failed(&e);
                        self.failed(format!("insert into {}: {e}", db.name), expected)
                    }
                }
            }
            6..=7 => {
                if let Err(e) = self.execute(node, db, "SELECT count(*) FROM t").await {
                    let expected = killed_node_failed(&e);
                    self.failed(format!("count of {}: {e}", db.name), expected);
                }
            }
            8 => match self.api(reqwest::Method::GET, "/v1/databases", None).await {
                Ok((200, _)) => {}
                Ok((status, body)) => self.failed(format!("list: {status}: {body}"), false),
                Err(e) => {
                    let died = replica_died(&e);
                    self.failed(format!("list: {e}"), died)
                }
            },
            _ => {
                let name = format!("churn-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
                match self
                    .api(
                        reqwest::Method::POST,
                        "/v1/databases",
                        Some(json!({"name": name, "group": "east"})),
                    )
                    .await
                {
                    Ok((200, _)) => {
                        match self
                            .api(
                                reqwest::Method::DELETE,
                                &format!("/v1/databases/{name}"),
                                None,
                            )
                            .await
                        {
                            Ok((200, _)) => {}
                            Ok((status, body)) => {
                                self.failed(format!("delete {name}: {status}: {body}"), false)
                            }
                            Err(e) => {
                                let died = replica_died(&e);
                                self.failed(format!("delete {name}: {e}"), died)
                            }
                        }
                    }
                    // Placed on the killed node before its heartbeats stopped (503), or in
                    // flight to it when it died (502).
                    Ok((status @ (502 | 503), body)) => {
                        self.failed(format!("create {name}: {status}: {body}"), in_outage())
                    }
                    Ok((status, body)) => {
                        self.failed(format!("create {name}: {status}: {body}"), false)
                    }
                    Err(e) => {
                        let died = replica_died(&e);
                        self.failed(format!("create {name}: {e}"), died)
                    }
                }
            }
        }
    }
}

/// Runs the topology load test on `database_url` (an empty PostgreSQL database).
pub async fn run(database_url: &str, duration: Duration, workers: usize) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("atoll-topology-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let outcome = run_in(&dir, database_url, duration, workers).await;
    if outcome.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("logs kept in {}", dir.display());
    }
    outcome
}

async fn run_in(
    dir: &Path,
    database_url: &str,
    duration: Duration,
    workers: usize,
) -> anyhow::Result<()> {
    let storage = format!("file://{}", dir.join("storage").display());
    let secrets_key = atoll_meta::SecretsKey::generate_base64();
    let mut replicas = Vec::new();
    let mut replica_urls = Vec::new();
    for i in 1..=2 {
        let envs = vec![
            ("ATOLL_SECRETS_KEY", secrets_key.clone()),
            ("ATOLL_USERNAME", "root".to_string()),
            ("ATOLL_PASSWORD", PASSWORD.to_string()),
        ];
        // The first replica sets the administrator up before the second starts.
        let (replica, url) = Process::start_listening(
            || Ok(serve_args(database_url, free_port()?)),
            envs,
            dir.join(format!("r{i}.log")),
        )
        .await?;
        replicas.push(replica);
        replica_urls.push(url);
    }
    let control_planes = replica_urls.join(",");
    let mut nodes = Vec::new();
    let mut node_urls = Vec::new();
    for (name, location) in [("a1", EAST), ("a2", EAST), ("b1", WEST)] {
        let (node, url) = Process::start_listening(
            || {
                let port = free_port()?;
                Ok((
                    node_args(
                        name,
                        location,
                        port,
                        &dir.join(name),
                        &storage,
                        &control_planes,
                    )?,
                    format!("http://127.0.0.1:{port}"),
                ))
            },
            Vec::new(),
            dir.join(format!("{name}.log")),
        )
        .await?;
        nodes.push(node);
        node_urls.push((name, location, url));
    }

    let client = reqwest::Client::new();
    let login: Value = client
        .post(format!("{}/v1/auth/login", replica_urls[0]))
        .json(&json!({"username": "root", "password": PASSWORD}))
        .send()
        .await?
        .json()
        .await?;
    let token = login["token"]
        .as_str()
        .context("no login token")?
        .to_string();
    let mut topology = Topology {
        client,
        killed_node_url: node_urls[1].2.clone(),
        replicas: replica_urls.clone(),
        token,
        dbs: Vec::new(),
        next_id: AtomicU64::new(1),
        requests: AtomicU64::new(0),
        expected_failures: AtomicU64::new(0),
        unexpected_failures: AtomicU64::new(0),
        shown: Mutex::new(Vec::new()),
        node_outage: AtomicBool::new(false),
        replica_killed: AtomicBool::new(false),
        stop: AtomicBool::new(false),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, listed) = topology
            .api(reqwest::Method::GET, "/v1/admin/nodes", None)
            .await?;
        let healthy = listed["nodes"]
            .as_array()
            .map_or(0, |n| n.iter().filter(|n| n["healthy"] == true).count());
        if healthy == 3 {
            break;
        }
        if Instant::now() > deadline {
            bail!("the nodes did not register: {listed}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (group, location) in [("east", EAST), ("west", WEST)] {
        let (status, body) = topology
            .api(
                reqwest::Method::POST,
                "/v1/groups",
                Some(json!({"name": group, "location": location})),
            )
            .await?;
        if status != 200 {
            bail!("cannot create group {group}: {status}: {body}");
        }
    }
    let killed_dir = dir.join("a2");
    for (i, (group, location)) in std::iter::repeat_n(("east", EAST), EAST_DATABASES)
        .chain(std::iter::repeat_n(("west", WEST), WEST_DATABASES))
        .enumerate()
    {
        let name = format!("load-{i}");
        let (status, body) = topology
            .api(
                reqwest::Method::POST,
                "/v1/databases",
                Some(json!({"name": name, "group": group})),
            )
            .await?;
        if status != 200 {
            bail!("cannot create {name}: {status}: {body}");
        }
        let id = body["database"]["DbId"]
            .as_str()
            .context("no DbId")?
            .to_string();
        let label = body["database"]["Hostname"]
            .as_str()
            .and_then(|h| h.split('.').next())
            .context("no Hostname")?
            .to_string();
        let (_, minted) = topology
            .api(
                reqwest::Method::POST,
                &format!("/v1/databases/{name}/auth/tokens"),
                Some(json!({})),
            )
            .await?;
        let db = Db {
            name,
            label,
            token: minted["jwt"].as_str().context("no jwt")?.to_string(),
            nodes: node_urls
                .iter()
                .filter(|(_, l, _)| *l == location)
                .map(|(_, _, url)| url.clone())
                .collect(),
            on_killed_node: killed_dir.join("dbs").join(&id).exists(),
            acknowledged: Mutex::new(BTreeSet::new()),
        };
        topology
            .execute(0, &db, "CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .await?;
        topology.dbs.push(db);
    }
    let topology = Arc::new(topology);
    println!(
        "topology: 2 replicas, 3 nodes (a1, a2 in {EAST}; b1 in {WEST}); {} databases, {} on a2 (killed at half time); {workers} workers for {} s",
        topology.dbs.len(),
        topology.dbs.iter().filter(|d| d.on_killed_node).count(),
        duration.as_secs()
    );

    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let topology = Arc::clone(&topology);
        tasks.push(tokio::spawn(async move {
            while !topology.stop.load(Ordering::Relaxed) {
                topology.operation().await;
            }
        }));
    }
    tokio::time::sleep(duration / 3).await;
    println!(
        "{:>5.1} s: SIGKILL replica 1",
        started.elapsed().as_secs_f64()
    );
    topology.replica_killed.store(true, Ordering::Relaxed);
    replicas[0].kill();
    tokio::time::sleep(duration / 2 - duration / 3).await;
    println!(
        "{:>5.1} s: SIGKILL node a2",
        started.elapsed().as_secs_f64()
    );
    topology.node_outage.store(true, Ordering::Relaxed);
    let killed_at = Instant::now();
    nodes[1].kill();
    tokio::time::sleep(Duration::from_secs(5)).await;
    println!(
        "{:>5.1} s: restart node a2",
        started.elapsed().as_secs_f64()
    );
    nodes[1].spawn()?;
    // Recovered once every database of a2 answers again through a1.
    let probe_deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut all = true;
        for db in topology.dbs.iter().filter(|d| d.on_killed_node) {
            if topology.execute(0, db, "SELECT 1").await.is_err() {
                all = false;
            }
        }
        if all {
            break;
        }
        if Instant::now() > probe_deadline {
            bail!("node a2's databases did not come back in 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let outage = killed_at.elapsed();
    // Requests that started during the outage may still be finishing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    topology.node_outage.store(false, Ordering::Relaxed);
    println!(
        "{:>5.1} s: node a2's databases answer again ({:.1} s after the SIGKILL)",
        started.elapsed().as_secs_f64(),
        outage.as_secs_f64()
    );
    let rest = duration.saturating_sub(started.elapsed());
    tokio::time::sleep(rest).await;
    topology.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }

    // Every acknowledged insert is in its database.
    let mut acknowledged = 0usize;
    let mut lost = 0usize;
    for db in &topology.dbs {
        let result = topology.execute(0, db, "SELECT id FROM t").await?;
        let present: BTreeSet<i64> = result["rows"]
            .as_array()
            .context("rows")?
            .iter()
            .filter_map(|row| row[0]["value"].as_str().and_then(|v| v.parse().ok()))
            .collect();
        let wanted = db
            .acknowledged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        acknowledged += wanted.len();
        lost += wanted.difference(&present).count();
    }
    let requests = topology.requests.load(Ordering::Relaxed);
    let expected = topology.expected_failures.load(Ordering::Relaxed);
    let unexpected = topology.unexpected_failures.load(Ordering::Relaxed);
    println!(
        "{requests} operations ({:.0}/s); {acknowledged} inserts acknowledged, {lost} lost; {expected} failed on the killed node's databases during its outage and recovery; {unexpected} failed elsewhere",
        requests as f64 / started.elapsed().as_secs_f64()
    );
    for shown in topology
        .shown
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
    {
        println!("  failed: {shown}");
    }
    if lost > 0 || unexpected > 0 {
        bail!("{lost} acknowledged inserts lost, {unexpected} requests failed outside the killed node's databases");
    }
    Ok(())
}
