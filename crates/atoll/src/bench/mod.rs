//! `atoll bench`: starts a server in this process on loopback (a SQLite store in a temporary
//! directory, or `--database-url postgres://…`), runs bounded workloads against it with an
//! HTTP/1.1 keep-alive client and prints one line per figure with its target.
//!
//! Client and server share the process and the machine: the figures are a floor for what
//! the server does alone on the same hardware.
//!
//! The other workloads `atoll bench` runs live beside this file: the load test
//! (`load.rs`, and `topology_load.rs` for a cluster of processes), the replica figures
//! (`replication.rs`), what one tenant feels while another abuses the node
//! (`noisy_neighbour.rs`), and many tenants' databases at once (`spread.rs`).

mod encryption;
pub(crate) mod load;
pub(crate) mod noisy_neighbour;
pub(crate) mod replication;
mod spread;
pub(crate) mod topology_load;
pub(crate) mod turso_sync;

use anyhow::{anyhow, bail, Context};
use atoll_control::{AppState, ControlConfig, DataPlane};
use atoll_meta::Store;
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One figure (or pair of figures) of the benchmark.
#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
pub enum Figure {
    /// Create a database: request to 200, p50/p99.
    #[value(name = "create_database")]
    CreateDatabase,
    /// First page of 100 of an organization's databases, p50/p99.
    #[value(name = "list_databases")]
    ListDatabases,
    /// Authenticated `GET /v1/user`, throughput.
    #[value(name = "control_get")]
    ControlGet,
    /// Point select over `/v2/pipeline`, 1 and N connections, throughput.
    #[value(name = "execute")]
    Execute,
    /// Single-row autocommit insert over `/v2/pipeline`, throughput.
    #[value(name = "insert")]
    Insert,
    /// `/v1/upload` and the chunked upload of a SQLite file, MB/s.
    #[value(name = "upload")]
    Upload,
    /// Peak RSS while every database of a large node is queried once.
    #[value(name = "rss_peak")]
    RssPeak,
    /// RSS of an idle `atoll dev` process holding many databases.
    #[value(name = "rss_idle")]
    RssIdle,
    /// Rebuilding a database from object storage (`file://`): its latest state, MB/s, and
    /// a point-in-time restore of a database with a long log history, seconds.
    #[value(name = "restore")]
    Restore,
    /// An embedded replica syncing `--replica-mb` of new WAL over the synced-database
    /// protocol (`/sync/{generation}/{start}/{end}`), seconds.
    #[value(name = "replica_sync")]
    ReplicaSync,
    /// A Turso Sync client (`POST /pull-updates`, `bench/turso_sync.rs`): the bootstrap of
    /// a `--sync-mb` database, MB/s; a pull of 1,000 changed pages and a push of 1,000
    /// statements, seconds.
    #[value(name = "turso_sync")]
    TursoSync,
    /// Point selects spread over many databases (`--spread-databases`), uniform and Zipf,
    /// beside one database's figure, and the first query to an untouched database.
    #[value(name = "spread")]
    Spread,
    /// Point selects and inserts on a database encrypted with its customer's key beside a
    /// plain one, same run (`bench/encryption.rs`): the cost of encryption.
    #[value(name = "encryption")]
    Encryption,
}

/// Object storage of the benchmark's node (`--storage`).
#[derive(Copy, Clone, PartialEq, Eq, ValueEnum, Debug)]
pub enum StorageMode {
    /// No object storage: the figures of a node without durability.
    Off,
    /// Shipping within `--durability-lag` (what `atoll dev` runs).
    Lag,
    /// Commits acknowledged once stored.
    Sync,
}

#[derive(Args, Clone)]
pub struct BenchArgs {
    /// Run the control plane on this PostgreSQL database (`postgres://…`) instead of a
    /// SQLite store in the temporary directory. Use an empty database.
    #[arg(long)]
    database_url: Option<String>,
    /// Run one figure only.
    #[arg(long, value_enum)]
    only: Option<Figure>,
    /// Duration of each throughput figure.
    #[arg(long, default_value_t = 5)]
    duration_secs: u64,
    /// Concurrent connections of the many-connection figures.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Samples of the latency figures (create and list).
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Databases seeded into one organization on the node: `list_databases` lists its
    /// first page, `rss_peak` queries each of them once.
    #[arg(long, alias = "orgs-databases", default_value_t = 100_000)]
    databases: usize,
    /// Scales of the `spread` figure: how many databases the requests spread over,
    /// comma-separated (each scale adds databases to the previous one).
    #[arg(long, value_delimiter = ',', default_value = "2000")]
    spread_databases: Vec<usize>,
    /// Databases in the data directory of the idle `atoll dev` of `rss_idle`.
    #[arg(long, default_value_t = 10_000)]
    idle_databases: usize,
    /// Size of the uploaded SQLite file, MiB.
    #[arg(long, default_value_t = 64)]
    upload_mb: u64,
    /// Uploads per protocol.
    #[arg(long, default_value_t = 3)]
    upload_samples: usize,
    /// Object storage of the node under test (`file://` in the temporary directory).
    /// `off` keeps the figures comparable with a node without durability; `lag` is what
    /// `atoll dev` runs. The `restore` figure always has storage.
    #[arg(long, value_enum, default_value_t = StorageMode::Off)]
    storage: StorageMode,
    /// Size of the database the `restore` figure rebuilds, MiB.
    #[arg(long, default_value_t = 1024)]
    restore_mb: u64,
    /// Log history (page bytes written) of the database the `restore` figure restores to
    /// an instant of, MiB.
    #[arg(long, default_value_t = 1024)]
    history_mb: u64,
    /// New WAL (page bytes written) the `replica_sync` figure's replica syncs, MiB.
    #[arg(long, default_value_t = 100)]
    replica_mb: u64,
    /// Size of the database the `turso_sync` figure's client bootstraps, MiB.
    #[arg(long, default_value_t = 100)]
    sync_mb: u64,
    /// The replica figures instead (`bench/replication.rs`): replica vs primary reads and
    /// the replication lag, against `atoll serve` on this (empty) PostgreSQL database and
    /// two `atoll node`s started as processes.
    #[arg(long, value_name = "POSTGRES_URL", conflicts_with = "load")]
    replication: Option<String>,
    /// Inserts per second of the `--replication` lag figure.
    #[arg(long, default_value_t = 1000)]
    replication_rate: u64,
    /// What one tenant feels while another abuses the node (`bench/noisy_neighbour.rs`), instead
    /// of the figures: `--duration-secs` per abuse.
    #[arg(long, conflicts_with_all = ["load", "replication"])]
    noisy_neighbour: bool,
    /// `--load`: the load test instead of the figures (`bench/load.rs`).
    #[command(flatten)]
    load: crate::bench::load::LoadArgs,
}

const USERNAME: &str = "bench";
const PASSWORD: &str = "bench-password-not-secret";
/// Concurrency of set-up work (seeding, queries), not measured.
const SETUP_CONCURRENCY: usize = 8;
/// Concurrency of seeding: it waits on fsyncs more than on the CPU.
const SEED_CONCURRENCY: usize = 32;

/// The server under test and a client for it.
pub(crate) struct Bench {
    pub(crate) client: reqwest::Client,
    api: String,
    pub(crate) db_url: String,
    token: String,
    run: String,
    /// The server's store and node, for seeding many databases without HTTP.
    store: Store,
    node: Arc<atoll_data::node::Node>,
    node_name: String,
    /// Its data directory (object storage is `file://<dir>/storage`).
    pub(crate) dir: PathBuf,
    _shutdown: tokio::sync::oneshot::Sender<()>,
    _db_shutdown: tokio::sync::oneshot::Sender<()>,
}

/// An organization with a group `default` and a token for every database in it.
pub(crate) struct Org {
    slug: String,
    group_token: String,
}

pub async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    if args.load.load {
        return crate::bench::load::load(&args.load).await;
    }
    if let Some(database_url) = &args.replication {
        return crate::bench::replication::run(crate::bench::replication::ReplicationArgs {
            database_url,
            duration: Duration::from_secs(args.duration_secs),
            connections: args.connections,
            rate: args.replication_rate,
        })
        .await;
    }
    let dir = std::env::temp_dir().join(format!(
        "atoll-bench-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let outcome = run(&args, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

async fn run(args: &BenchArgs, dir: &Path) -> anyhow::Result<()> {
    let bench = Arc::new(Bench::start(args.database_url.as_deref(), dir, args.storage).await?);
    if args.noisy_neighbour {
        return crate::bench::noisy_neighbour::run(&bench, Duration::from_secs(args.duration_secs))
            .await;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "# atoll bench {}: store {}, object storage {:?}, {cpus} cpus, client and server in one process on loopback",
        env!("CARGO_PKG_VERSION"),
        if args.database_url.is_some() {
            "postgres"
        } else {
            "sqlite"
        },
        args.storage,
    );
    let wants = |figure: Figure| args.only.is_none_or(|only| only == figure);
    let main = bench.org("main").await?;
    if wants(Figure::CreateDatabase) {
        create_database(&bench, &main, args).await?;
    }
    // One large organization serves the list and the peak-RSS figures.
    let seeded = if wants(Figure::ListDatabases) || wants(Figure::RssPeak) {
        Some(seed_organization(&bench, args.databases).await?)
    } else {
        None
    };
    if let (true, Some(seeded)) = (wants(Figure::ListDatabases), &seeded) {
        list_databases(&bench, seeded, args).await?;
    }
    if wants(Figure::ControlGet) {
        control_get(&bench, args).await?;
    }
    if wants(Figure::Execute) {
        execute(&bench, &main, args).await?;
    }
    if wants(Figure::Insert) {
        insert(&bench, &main, args).await?;
    }
    if wants(Figure::Spread) {
        spread::run(&bench, &main, args).await?;
    }
    if wants(Figure::Encryption) {
        encryption::run(&bench, &main, args).await?;
    }
    // Peak RSS before the upload, whose file buffers would dominate the process's memory.
    if let (true, Some(seeded)) = (wants(Figure::RssPeak), &seeded) {
        rss_peak(&bench, seeded).await?;
    }
    if wants(Figure::Upload) {
        upload(&bench, &main, args, dir).await?;
    }
    if wants(Figure::RssIdle) {
        rss_idle(args, &dir.join("idle-dev")).await?;
    }
    if wants(Figure::Restore) {
        restore(args, &dir.join("restore")).await?;
    }
    if wants(Figure::ReplicaSync) {
        replica_sync(args, &dir.join("replica")).await?;
    }
    if wants(Figure::TursoSync) {
        turso_sync::run(args, &dir.join("turso-sync")).await?;
    }
    Ok(())
}

impl Bench {
    /// A server on a store and a node in `dir`, laid out as `atoll dev` lays out its data
    /// directory (`meta.db`, `dbs/`), unless `database_url` names another store.
    async fn start(
        database_url: Option<&str>,
        dir: &Path,
        storage: StorageMode,
    ) -> anyhow::Result<Bench> {
        let store = match database_url {
            Some(url) => Store::open(url)
                .await
                .context("cannot open the metadata store")?,
            // Sealing signing keys with `<dir>/secrets.key`, as `atoll dev` does (the
            // figures include it, and `rss_idle` starts `atoll dev` on this directory).
            None => {
                let store = Store::open_sqlite(&dir.join("meta.db"))
                    .await
                    .context("cannot open the metadata store")?;
                let (keyring, _) = crate::secrets_key::dev_keyring(&Default::default(), dir)?;
                store.with_secrets(keyring)
            }
        };
        let node = crate::server::open_node(dir, node_settings(dir, storage)).await?;
        let db_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let db_address = db_listener.local_addr()?;
        let db_url = format!("http://{db_address}");
        let data_state = atoll_data::DataPlaneState::new(Arc::clone(&node), "localhost");
        let (db_tx, db_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(atoll_data::serve(db_listener, data_state, async {
            let _ = db_rx.await;
        }));

        // The benchmark creates far more databases than any plan allows.
        let mut config = ControlConfig::default();
        for quotas in config.plans.values_mut() {
            *quotas = atoll_types::usage::PlanQuotas::default();
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let api = format!("http://{}", listener.local_addr()?);
        config.public_url = api.clone();
        // The limiter still runs (its cost is part of every figure), but the cheapest
        // route outruns the default ceiling per token here and would measure 429s.
        config.rate_per_credential = Some(atoll_http::rate_limit::RateLimit {
            requests: 10_000_000,
            period: Duration::from_secs(1),
        });
        let state = AppState::new(
            store.clone(),
            config,
            DataPlane::in_process(
                Arc::clone(&node),
                &db_url,
                &crate::server::hostname_suffix("localhost", db_address),
            ),
        );
        let node_name = state
            .data_plane
            .place(&state.store, "local")
            .await
            .map_err(|e| anyhow!("no node for the benchmark: {e}"))?;
        let outcome = atoll_control::bootstrap_user(
            &state,
            USERNAME,
            Some(PASSWORD.to_string()),
            None,
            Some("enterprise"),
        )
        .await
        .map_err(|e| anyhow!("cannot set up user {USERNAME}: {e}"))?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(atoll_control::serve(listener, state, async {
            let _ = rx.await;
        }));
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true)
            .build()?;
        // Names unique per run, so a reused PostgreSQL store does not collide.
        let run = format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis()
                % 0xff_ffff
        );
        Ok(Bench {
            client,
            api,
            db_url,
            token: outcome.token,
            run,
            store,
            node,
            node_name,
            dir: dir.to_path_buf(),
            _shutdown: tx,
            _db_shutdown: db_tx,
        })
    }

    /// A platform call that must answer 200; its JSON body.
    async fn call(
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
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        if status != reqwest::StatusCode::OK {
            bail!("{method} {path}: {status}: {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// A new team organization with a group `default` in location `local`.
    pub(crate) async fn org(&self, purpose: &str) -> anyhow::Result<Org> {
        let name = format!("bench-{purpose}-{}", self.run);
        let created = self
            .post("/v1/organizations", json!({"name": name}))
            .await?;
        let slug = created["org"]["slug"]
            .as_str()
            .context("organization create: no slug")?
            .to_string();
        // A new organization has its `default` group already.
        let group_token = self.group_token(&slug, "").await?;
        Ok(Org { slug, group_token })
    }

    /// A new token of organization `slug`'s `default` group; `query` is the creation's
    /// query string (`?expiration=…`), or empty.
    pub(crate) async fn group_token(&self, slug: &str, query: &str) -> anyhow::Result<String> {
        let token = self
            .post(
                &format!("/v1/organizations/{slug}/groups/default/auth/tokens{query}"),
                json!({}),
            )
            .await?;
        Ok(token["jwt"]
            .as_str()
            .context("group token: no jwt")?
            .to_string())
    }

    pub(crate) async fn create_database(
        &self,
        org: &Org,
        name: &str,
        extra: Value,
    ) -> anyhow::Result<()> {
        let mut body = json!({"name": name, "group": "default"});
        if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
            body.extend(extra);
        }
        self.post(&format!("/v1/organizations/{}/databases", org.slug), body)
            .await
            .map(drop)
    }

    pub(crate) async fn database_token(&self, org: &Org, name: &str) -> anyhow::Result<String> {
        let body = self
            .post(
                &format!(
                    "/v1/organizations/{}/databases/{name}/auth/tokens?expiration=1h",
                    org.slug
                ),
                json!({}),
            )
            .await?;
        Ok(body["jwt"].as_str().context("no jwt")?.to_string())
    }

    /// The path-prefix URL of a database, ending in `/`.
    pub(crate) fn database_url(&self, org: &Org, name: &str) -> String {
        format!("{}/db/{name}-{}/", self.db_url, org.slug)
    }

    /// Runs one statement on a database; fails unless it succeeds.
    pub(crate) async fn execute(&self, url: &str, token: &str, sql: &str) -> anyhow::Result<Value> {
        let body =
            json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]});
        let response = self
            .client
            .post(format!("{url}v2/pipeline"))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        if status != reqwest::StatusCode::OK {
            bail!("{sql}: {status}: {text}");
        }
        let body: Value = serde_json::from_str(&text)?;
        let result = &body["results"][0];
        if result["type"] != "ok" {
            bail!("{sql}: {}", result["error"]);
        }
        Ok(result["response"]["result"].clone())
    }

    /// Runs `work(i)` for every `i` in `0..count`, `concurrency` at a time, reporting
    /// progress on stderr.
    async fn for_each_index<F, Fut>(
        what: &'static str,
        count: usize,
        concurrency: usize,
        work: F,
    ) -> anyhow::Result<()>
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send,
    {
        let work = Arc::new(work);
        let next = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..concurrency {
            let (work, next) = (Arc::clone(&work), Arc::clone(&next));
            workers.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return anyhow::Ok(());
                    }
                    work(i).await?;
                    if (i + 1) % 10_000 == 0 {
                        eprintln!("  … {what} {} of {count}", i + 1);
                    }
                }
            }));
        }
        for worker in workers {
            worker.await??;
        }
        Ok(())
    }
}

/// An organization holding many databases (group `default`), seeded without HTTP.
struct Seeded {
    org: Arc<Org>,
    names: Arc<Vec<String>>,
}

/// A new organization with `count` databases, through [`seed_databases`].
async fn seed_organization(bench: &Arc<Bench>, count: usize) -> anyhow::Result<Seeded> {
    let org = Arc::new(bench.org("seeded").await?);
    let names: Arc<Vec<String>> = Arc::new((0..count).map(|i| format!("seed-{i:06}")).collect());
    let start = Instant::now();
    seed_databases(bench, &org.slug, &names, atoll_types::node::Seed::Empty).await?;
    println!(
        "# seeded {count} databases in {:.0} s through the store and the node directly (not {count} HTTP creates)",
        start.elapsed().as_secs_f64()
    );
    Ok(Seeded { org, names })
}

/// Creates the databases `names` in group `default` of `org_slug`, quickly enough to reach
/// the issue's scales (100,000) on this machine: each is recorded in the store (directly
/// as `active`) and created on the node with `Node::create_database`, the calls a create
/// request makes, without HTTP, authorization, quotas, the audit log and the intermediate
/// `creating` state. The node's files are the real thing (fsynced as usual).
async fn seed_databases(
    bench: &Bench,
    org_slug: &str,
    names: &Arc<Vec<String>>,
    seed: atoll_types::node::Seed,
) -> anyhow::Result<()> {
    let store = bench.store.clone();
    let org = store
        .org_by_slug(org_slug)
        .await?
        .context("seeded organization not found")?;
    let group = store
        .group_by_name(&org.id, "default")
        .await?
        .context("group default not found")?;
    if group.signing_key.is_empty() {
        bail!("group default has no signing key yet (mint a group token first)");
    }
    let (org, group) = (Arc::new(org), Arc::new(group));
    let (node, node_name, names) = (
        Arc::clone(&bench.node),
        bench.node_name.clone(),
        Arc::clone(names),
    );
    eprintln!("seeding {} databases…", names.len());
    Bench::for_each_index("seeded", names.len(), SEED_CONCURRENCY, move |i| {
        let (store, node, node_name) = (store.clone(), Arc::clone(&node), node_name.clone());
        let (org, group, name) = (Arc::clone(&org), Arc::clone(&group), names[i].clone());
        let seed = seed.clone();
        async move {
            let (signing_key, key_id) = atoll_control::new_signing_key();
            let record = atoll_meta::Database {
                id: uuid::Uuid::new_v4().to_string(),
                org_id: org.id.clone(),
                group_id: group.id.clone(),
                label: format!("{name}-{}", org.slug),
                name,
                state: atoll_meta::DatabaseState::Active,
                location: group.primary_location.clone(),
                node: node_name,
                size_limit: None,
                block_reads: false,
                block_writes: false,
                delete_protection: false,
                allow_attach: false,
                allowed_ips: vec![],
                parent: None,
                signing_key,
                key_id,
                created_at: 0,
                deleted_at: None,
                config_version: 1,
                durability: None,
                history_starts_at: None,
                encryption: None,
            };
            let record = store.insert_database(record).await?;
            let config = atoll_control::data_plane::node_config(
                &record,
                &group,
                &org,
                &atoll_control::data_plane::OrgCredentials::default(),
            );
            tokio::task::spawn_blocking(move || {
                node.create_database(atoll_types::node::CreateDatabase { config, seed })
            })
            .await?
            .map_err(|e| anyhow!("node: {e}"))?;
            Ok(())
        }
    })
    .await
}

/// The `q` quantile (0..=1) of sorted samples.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

/// Sorts latency samples; (p50, p99) in milliseconds.
pub(crate) fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort_unstable();
    (ms(quantile(&samples, 0.50)), ms(quantile(&samples, 0.99)))
}

/// Outcome of a throughput run.
#[derive(Default)]
struct Throughput {
    ok: u64,
    errors: u64,
    seconds: f64,
}

impl Throughput {
    /// Adds another measurement of the same figure (rounds taken in turn with another).
    fn add(&mut self, other: &Throughput) {
        self.ok += other.ok;
        self.errors += other.errors;
        self.seconds += other.seconds;
    }

    fn rate(&self) -> f64 {
        self.ok as f64 / self.seconds
    }
}

/// Runs `connections` workers, each calling `request(n)` in a loop until `duration` is
/// over; a request answers whether it succeeded.
async fn throughput<F, Fut>(connections: usize, duration: Duration, request: F) -> Throughput
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let request = Arc::new(request);
    let start = Instant::now();
    let deadline = start + duration;
    let mut workers = Vec::new();
    for worker in 0..connections {
        let request = Arc::clone(&request);
        workers.push(tokio::spawn(async move {
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut n = worker as u64 * 1_000_003;
            while Instant::now() < deadline {
                if request(n).await {
                    ok += 1;
                } else {
                    errors += 1;
                }
                n += 1;
            }
            (ok, errors)
        }));
    }
    let (mut ok, mut errors) = (0, 0);
    for worker in workers {
        if let Ok((o, e)) = worker.await {
            ok += o;
            errors += e;
        }
    }
    Throughput {
        ok,
        errors,
        seconds: start.elapsed().as_secs_f64(),
    }
}

fn print_throughput(name: &str, result: &Throughput, connections: usize, target: f64) {
    let rate = result.rate();
    println!(
        "{name}: {rate:.0} req/s ({connections} connections, {:.1} s, {} errors); target >= {target:.0} req/s: {}",
        result.seconds,
        result.errors,
        verdict(rate >= target && result.errors == 0),
    );
}

/// A throughput figure without a target of its own (compared between runs).
fn print_throughput_untargeted(name: &str, result: &Throughput, connections: usize) {
    println!(
        "{name}: {:.0} req/s ({connections} connections, {:.1} s, {} errors)",
        result.rate(),
        result.seconds,
        result.errors,
    );
}

/// Whether `haystack` contains `needle`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Sends a prepared pipeline body; true on 200 with no error result.
async fn pipeline_ok(client: &reqwest::Client, url: &str, token: &str, body: String) -> bool {
    let Ok(response) = client
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
    else {
        return false;
    };
    if response.status() != reqwest::StatusCode::OK {
        return false;
    }
    match response.bytes().await {
        Ok(bytes) => !contains(&bytes, br#""type":"error""#),
        Err(_) => false,
    }
}

async fn create_database(bench: &Bench, org: &Org, args: &BenchArgs) -> anyhow::Result<()> {
    eprintln!("create_database: {} creates…", args.samples);
    let mut samples = Vec::with_capacity(args.samples);
    for i in 0..args.samples {
        let name = format!("create-{i}");
        let start = Instant::now();
        bench.create_database(org, &name, json!({})).await?;
        samples.push(start.elapsed());
        // Not timed: a query right after the 200 must succeed.
        let url = bench.database_url(org, &name);
        bench
            .execute(&url, &org.group_token, "SELECT 1")
            .await
            .with_context(|| format!("query right after creating {name}"))?;
    }
    let count = samples.len();
    let (p50, p99) = percentiles(samples);
    println!(
        "create_database: p50 {p50:.1} ms, p99 {p99:.1} ms ({count} samples, each queried right after: ok); target p50 <= 5 ms, p99 <= 25 ms: {}",
        verdict(p50 <= 5.0 && p99 <= 25.0)
    );
    Ok(())
}

/// `met`/`MISSED`, and at which scale when it is smaller than the target's.
fn verdict_at(met: bool, count: usize, target_count: usize) -> String {
    if count >= target_count {
        verdict(met).to_string()
    } else {
        format!("{} at {count}", verdict(met))
    }
}

async fn list_databases(bench: &Bench, seeded: &Seeded, args: &BenchArgs) -> anyhow::Result<()> {
    let count = seeded.names.len();
    eprintln!("list_databases: {} samples…", args.samples);
    let path = format!("/v1/organizations/{}/databases?limit=100", seeded.org.slug);
    let expected = count.min(100);
    for _ in 0..5 {
        bench.call(reqwest::Method::GET, &path, None).await?;
    }
    let mut samples = Vec::with_capacity(args.samples);
    for _ in 0..args.samples {
        let start = Instant::now();
        let body = bench.call(reqwest::Method::GET, &path, None).await?;
        samples.push(start.elapsed());
        let got = body["databases"].as_array().map_or(0, Vec::len);
        if got != expected {
            bail!("list: {got} databases in the first page, expected {expected}");
        }
    }
    let n = samples.len();
    let (p50, p99) = percentiles(samples);
    println!(
        "list_databases: p50 {p50:.1} ms, p99 {p99:.1} ms ({n} samples, first page of 100 in an organization of {count} databases); target p50 <= 10 ms at 100000 databases: {}",
        verdict_at(p50 <= 10.0, count, 100_000)
    );
    Ok(())
}

/// Databases of the organization `control_get_list` lists.
const LISTED_DATABASES: usize = 10;

async fn control_get(bench: &Bench, args: &BenchArgs) -> anyhow::Result<()> {
    let listed = bench.org("listed").await?;
    for i in 0..LISTED_DATABASES {
        bench
            .create_database(&listed, &format!("l{i}"), json!({}))
            .await?;
    }
    let list = format!("/v1/organizations/{}/databases", listed.slug);
    // `/v1/user` reads the store twice more (the user's invites, their personal
    // organization); `/v1/auth/validate` is authentication alone; the list reads the
    // organization, the caller's membership and its databases.
    for (name, path) in [
        ("control_get", "/v1/user"),
        ("control_get_validate", "/v1/auth/validate"),
        ("control_get_list", list.as_str()),
    ] {
        eprintln!(
            "{name}: GET {path}, {} connections for {} s…",
            args.connections, args.duration_secs
        );
        let client = bench.client.clone();
        let url = format!("{}{path}", bench.api);
        let token = bench.token.clone();
        let result = throughput(
            args.connections,
            Duration::from_secs(args.duration_secs),
            move |_| {
                let request = client.get(&url).bearer_auth(&token).send();
                async move {
                    match request.await {
                        Ok(response) => {
                            response.status() == reqwest::StatusCode::OK
                                && response.bytes().await.is_ok()
                        }
                        Err(_) => false,
                    }
                }
            },
        )
        .await;
        // The list's target is relative: on PostgreSQL, at least half the SQLite store's.
        if name == "control_get_list" {
            print_throughput_untargeted(name, &result, args.connections);
        } else {
            print_throughput(name, &result, args.connections, 20_000.0);
        }
    }
    Ok(())
}

const KV_ROWS: u64 = 1000;

async fn execute(bench: &Bench, org: &Org, args: &BenchArgs) -> anyhow::Result<()> {
    bench.create_database(org, "kv", json!({})).await?;
    let token = bench.database_token(org, "kv").await?;
    let url = bench.database_url(org, "kv");
    bench
        .execute(
            &url,
            &token,
            "CREATE TABLE kv (id INTEGER PRIMARY KEY, v TEXT NOT NULL)",
        )
        .await?;
    bench
        .execute(
            &url,
            &token,
            &format!("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {KV_ROWS}) INSERT INTO kv (id, v) SELECT x, 'value ' || x FROM c"),
        )
        .await?;
    let pipeline = format!("{url}v2/pipeline");
    for (name, connections, target) in [
        ("execute_select_1", 1, 5_000.0),
        ("execute_select_n", args.connections, 30_000.0),
    ] {
        eprintln!(
            "{name}: {connections} connections for {} s…",
            args.duration_secs
        );
        let (client, pipeline, token) = (bench.client.clone(), pipeline.clone(), token.clone());
        let result = throughput(
            connections,
            Duration::from_secs(args.duration_secs),
            move |n| {
                let id = n % KV_ROWS + 1;
                let body = format!(
                    r#"{{"requests":[{{"type":"execute","stmt":{{"sql":"SELECT v FROM kv WHERE id = ?","args":[{{"type":"integer","value":"{id}"}}]}}}},{{"type":"close"}}]}}"#
                );
                let (client, pipeline, token) = (client.clone(), pipeline.clone(), token.clone());
                async move { pipeline_ok(&client, &pipeline, &token, body).await }
            },
        )
        .await;
        print_throughput(name, &result, connections, target);
    }
    Ok(())
}

async fn insert(bench: &Bench, org: &Org, args: &BenchArgs) -> anyhow::Result<()> {
    bench.create_database(org, "ins", json!({})).await?;
    let token = bench.database_token(org, "ins").await?;
    let url = bench.database_url(org, "ins");
    bench
        .execute(
            &url,
            &token,
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)",
        )
        .await?;
    eprintln!(
        "insert_autocommit: {} connections for {} s…",
        args.connections, args.duration_secs
    );
    let pipeline = format!("{url}v2/pipeline");
    let (client, token2) = (bench.client.clone(), token.clone());
    let result = throughput(
        args.connections,
        Duration::from_secs(args.duration_secs),
        move |n| {
            let body = format!(
                r#"{{"requests":[{{"type":"execute","stmt":{{"sql":"INSERT INTO t (v) VALUES (?)","args":[{{"type":"text","value":"row {n}"}}]}}}},{{"type":"close"}}]}}"#
            );
            let (client, pipeline, token) = (client.clone(), pipeline.clone(), token2.clone());
            async move { pipeline_ok(&client, &pipeline, &token, body).await }
        },
    )
    .await;
    // Every acknowledged insert is there.
    let counted = bench
        .execute(&url, &token, "SELECT count(*) FROM t")
        .await?;
    let rows: u64 = counted["rows"][0][0]["value"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if rows < result.ok {
        bail!("insert: {} acknowledged, {rows} rows", result.ok);
    }
    print_throughput("insert_autocommit", &result, args.connections, 5_000.0);
    if args.storage != StorageMode::Off {
        // What object storage costs: PUTs and bytes of the log per 1,000 inserts.
        let db = bench
            .node
            .by_label(&format!("ins-{}", org.slug))
            .context("the insert database")?;
        wait_durable(&bench.node, db.id()).await?;
        let storage_dir = bench.dir.join("storage");
        let (puts, bytes) = log_objects(&storage_dir, db.id());
        let per = 1000.0 / result.ok.max(1) as f64;
        println!(
            "insert_object_storage: {:.1} PUTs and {:.0} KB of log per 1,000 inserts ({:?} mode; {puts} segments for {} inserts)",
            puts as f64 * per,
            bytes as f64 * per / 1000.0,
            args.storage,
            result.ok
        );
    }
    Ok(())
}

/// A SQLite file of about `mib` MiB: WAL mode, page size 4096, checkpointed.
fn sqlite_file(path: &Path, mib: u64) -> anyhow::Result<(Vec<u8>, u64)> {
    // Four 1000-byte rows to a 4096-byte page.
    let rows = (mib * 1024 * 1024 / 1024).max(1);
    {
        let conn = rusqlite::Connection::open(path)?;
        conn.execute_batch(
            "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB NOT NULL);",
        )?;
        conn.execute_batch(&format!(
            "BEGIN; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows}) INSERT INTO t (b) SELECT randomblob(1000) FROM c; COMMIT; PRAGMA wal_checkpoint(TRUNCATE);"
        ))?;
    }
    let bytes = std::fs::read(path)?;
    let _ = std::fs::remove_file(path);
    Ok((bytes, rows))
}

async fn upload(bench: &Bench, org: &Org, args: &BenchArgs, dir: &Path) -> anyhow::Result<()> {
    let path: PathBuf = dir.join("upload.db");
    let mib = args.upload_mb;
    let (file, rows) = tokio::task::spawn_blocking(move || sqlite_file(&path, mib)).await??;
    let file = bytes::Bytes::from(file);
    let size_mb = file.len() as f64 / (1024.0 * 1024.0);
    eprintln!(
        "upload: {size_mb:.1} MiB file, {} uploads per protocol…",
        args.upload_samples
    );
    for chunked in [false, true] {
        let mut rates = Vec::new();
        for k in 0..args.upload_samples {
            let name = format!("upload-{}-{k}", if chunked { "chunked" } else { "v1" });
            bench
                .create_database(org, &name, json!({"seed": {"type": "database_upload"}}))
                .await?;
            let token = bench.database_token(org, &name).await?;
            let url = bench.database_url(org, &name);
            let start = Instant::now();
            if chunked {
                chunked_upload(bench, &url, &token, &file).await?;
            } else {
                let response = bench
                    .client
                    .post(format!("{url}v1/upload"))
                    .bearer_auth(&token)
                    .body(file.clone())
                    .send()
                    .await?;
                let status = response.status();
                if status != reqwest::StatusCode::OK {
                    bail!("upload: {status}: {}", response.text().await?);
                }
            }
            let elapsed = start.elapsed();
            rates.push(size_mb / elapsed.as_secs_f64());
            // Not timed: the upload is what the database now holds.
            let counted = bench
                .execute(&url, &token, "SELECT count(*) FROM t")
                .await?;
            if counted["rows"][0][0]["value"] != json!(rows.to_string()) {
                bail!("upload {name}: {counted}, expected {rows} rows");
            }
        }
        rates.sort_by(f64::total_cmp);
        let median = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
        let best = rates.last().copied().unwrap_or(0.0);
        println!(
            "{}: median {median:.0} MB/s, best {best:.0} MB/s ({} uploads of {size_mb:.1} MiB, validation included; 1 MB = 2^20 bytes); target >= 300 MB/s: {}",
            if chunked { "upload_chunked" } else { "upload_v1" },
            rates.len(),
            verdict(median >= 300.0)
        );
    }
    Ok(())
}

async fn chunked_upload(
    bench: &Bench,
    url: &str,
    token: &str,
    bytes: &bytes::Bytes,
) -> anyhow::Result<()> {
    let response = bench
        .client
        .put(format!("{url}v2/upload/start"))
        .bearer_auth(token)
        .json(&json!({"db_size_bytes": bytes.len()}))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!(
            "upload start: {}: {}",
            response.status(),
            response.text().await?
        );
    }
    let start: Value = response.json().await?;
    let chunk_size = start["chunk_size"].as_u64().context("no chunk_size")? as usize;
    let id = start["upload_id"].as_str().context("no upload_id")?;
    if chunk_size == 0 {
        bail!("upload start: chunk size 0");
    }
    for (n, offset) in (0..bytes.len()).step_by(chunk_size).enumerate() {
        let chunk = bytes.slice(offset..(offset + chunk_size).min(bytes.len()));
        let response = bench
            .client
            .put(format!("{url}v2/upload/{id}/chunk/{n}"))
            .bearer_auth(token)
            .body(chunk)
            .send()
            .await?;
        if !response.status().is_success() {
            bail!(
                "upload chunk {n}: {}: {}",
                response.status(),
                response.text().await?
            );
        }
    }
    let response = bench
        .client
        .put(format!("{url}v2/upload/{id}/finalize"))
        .bearer_auth(token)
        .send()
        .await?;
    if response.status() != reqwest::StatusCode::OK {
        bail!(
            "upload finalize: {}: {}",
            response.status(),
            response.text().await?
        );
    }
    Ok(())
}

/// A `/proc/<pid>/status` field in KiB.
fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn rss_peak(bench: &Arc<Bench>, seeded: &Seeded) -> anyhow::Result<()> {
    let count = seeded.names.len();
    // Resets the peak to the current RSS (Linux ≥ 4.0), so the peak is this figure's.
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = status_kib("self", "VmRSS").unwrap_or(0);
    eprintln!("rss_peak: querying each of {count} databases once…");
    let start = Instant::now();
    let (each, org, names) = (
        Arc::clone(bench),
        Arc::clone(&seeded.org),
        Arc::clone(&seeded.names),
    );
    Bench::for_each_index("queried", count, SETUP_CONCURRENCY, move |i| {
        let (bench, org, names) = (Arc::clone(&each), Arc::clone(&org), Arc::clone(&names));
        async move {
            let url = bench.database_url(&org, &names[i]);
            bench.execute(&url, &org.group_token, "SELECT 1").await?;
            Ok(())
        }
    })
    .await?;
    let seconds = start.elapsed().as_secs_f64();
    let peak = status_kib("self", "VmHWM").context("no VmHWM in /proc/self/status")?;
    let after = status_kib("self", "VmRSS").unwrap_or(0);
    println!(
        "rss_peak: {:.1} MiB (whole process: client, control plane, store and node; {:.1} MiB before{}, {:.1} MiB after; {count} databases on the node each queried once over /v2/pipeline, {SETUP_CONCURRENCY} at a time, {:.0} queries/s); target <= 800 MiB at 100000 databases: {}",
        mib(peak),
        mib(before),
        if reset { "" } else { " (peak not reset: it covers the whole run)" },
        mib(after),
        count as f64 / seconds,
        verdict_at(mib(peak) <= 800.0, count, 100_000)
    );
    Ok(())
}

/// Seeds an `atoll dev` data directory with `--idle-databases` databases, starts
/// `atoll dev` on it as a child process, and reads its RSS once it has been idle a while.
async fn rss_idle(args: &BenchArgs, dir: &Path) -> anyhow::Result<()> {
    let count = args.idle_databases;
    std::fs::create_dir_all(dir)?;
    let seed_start = Instant::now();
    {
        // A server of this process on the directory, only to seed it; stopped when dropped.
        // With object storage where `atoll dev` keeps it, so the idle process finds every
        // database's first generation stored (as its own creates leave them).
        let seeder = Bench::start(None, dir, StorageMode::Lag).await?;
        let org = seeder.org("idle").await?;
        let names = Arc::new((0..count).map(|i| format!("idle-{i:06}")).collect());
        seed_databases(&seeder, &org.slug, &names, atoll_types::node::Seed::Empty).await?;
    }
    println!(
        "# seeded {count} databases in {:.0} s for rss_idle (store and node directly, as for list_databases)",
        seed_start.elapsed().as_secs_f64()
    );
    // Let the seeding server let go of its connections.
    tokio::time::sleep(Duration::from_secs(1)).await;

    eprintln!("rss_idle: starting atoll dev on {count} databases…");
    let exe = std::env::current_exe().context("cannot find the atoll binary")?;
    let mut child = std::process::Command::new(exe)
        .arg("dev")
        .arg("--data-dir")
        .arg(dir)
        .args(["--listen", "127.0.0.1:0", "--db-listen", "127.0.0.1:0"])
        // One process: its RSS is what is measured (a supervisor's is its own).
        .arg("--no-supervise")
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("cannot start atoll dev")?;
    let started = Instant::now();
    let stdout = child.stdout.take().context("no stdout of atoll dev")?;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    // Keeps reading, so the child never blocks on a full pipe.
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut ready_tx = Some(ready_tx);
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("is running") {
                if let Some(tx) = ready_tx.take() {
                    let _ = tx.send(());
                }
            }
        }
    });
    let outcome = async {
        match tokio::time::timeout(Duration::from_secs(600), ready_rx).await {
            Ok(Ok(())) => {}
            _ => bail!("atoll dev did not report it was running"),
        }
        let ready = started.elapsed();
        tokio::time::sleep(IDLE_WAIT).await;
        let pid = child.id().to_string();
        let rss = status_kib(&pid, "VmRSS").context("no VmRSS of atoll dev")?;
        let peak = status_kib(&pid, "VmHWM").unwrap_or(0);
        Ok((ready, rss, peak))
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let (ready, rss, peak) = outcome?;
    println!(
        "rss_idle: {:.1} MiB (an atoll dev process with {count} databases, {} s after it reported running, {:.1} s after start; peak {:.1} MiB); target <= 150 MiB at 10000 idle databases: {}",
        mib(rss),
        IDLE_WAIT.as_secs(),
        ready.as_secs_f64(),
        mib(peak),
        verdict_at(mib(rss) <= 150.0, count, 10_000)
    );
    Ok(())
}

/// How long `atoll dev` idles before its RSS is read.
const IDLE_WAIT: Duration = Duration::from_secs(5);

/// The node settings of a benchmark node: default, with `file://<dir>/storage` unless off,
/// and the SQL threads of `ATOLL_SQL_THREADS` when set (as `atoll node` reads it).
fn node_settings(dir: &Path, storage: StorageMode) -> atoll_data::node::NodeSettings {
    let mut settings = atoll_data::node::NodeSettings::default();
    if let Some(threads) = std::env::var("ATOLL_SQL_THREADS")
        .ok()
        .and_then(|threads| threads.parse().ok())
    {
        settings.sql_threads = threads;
    }
    let durability = match storage {
        StorageMode::Off => return settings,
        StorageMode::Lag => atoll_storage::DurabilityMode::Lag,
        StorageMode::Sync => atoll_storage::DurabilityMode::Sync,
    };
    settings.storage = Some(atoll_data::node_storage::StorageConfig {
        url: format!("file://{}", dir.join("storage").display()),
        node_name: "local".into(),
        settings: atoll_storage::StorageSettings {
            durability,
            ..Default::default()
        },
    });
    settings
}

/// What object storage holds of a database under `storage_dir`: objects in its log and
/// their bytes.
fn log_objects(storage_dir: &Path, id: &str) -> (u64, u64) {
    let dir = storage_dir.join("dbs").join(id).join("log");
    let mut count = 0;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        count += 1;
        bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
    }
    (count, bytes)
}

/// `restore`: a database of `--restore-mb` in object storage rebuilt at its latest state
/// (MB/s of the file produced), and a database with `--history-mb` of log history restored
/// to an instant in the middle of it (seconds). Both on a node of their own with `file://`
/// storage, written through the node's own connections (as tenants' writes are).
async fn restore(args: &BenchArgs, dir: &Path) -> anyhow::Result<()> {
    use atoll_storage::restore::{restore_to_file, Target};
    std::fs::create_dir_all(dir)?;
    let node = crate::server::open_node(dir, node_settings(dir, StorageMode::Lag)).await?;
    let storage = node.storage().cloned().context("no storage")?;

    eprintln!("restore: writing a {} MiB database…", args.restore_mb);
    let big = create_node_database(&node, "big").await?;
    write_pages(&node, &big, args.restore_mb, false).await?;
    wait_durable(&node, &big).await?;
    // A generation at the head: the rebuild reads one snapshot, as after a quiet period.
    node.by_id(&big)
        .context("big")?
        .log()
        .context("log")?
        .start_generation();
    wait_durable(&node, &big).await?;
    let target = dir.join("restored-big.db");
    let start = Instant::now();
    restore_to_file(&storage.storage, &big, Target::Latest, None, &target).await?;
    let seconds = start.elapsed().as_secs_f64();
    let mb = std::fs::metadata(&target)?.len() as f64 / 1_000_000.0;
    let rate = mb / seconds;
    println!(
        "restore_latest: {rate:.0} MB/s ({mb:.0} MB in {seconds:.2} s, file:// store, checksums verified, quick_check included); target >= 200 MB/s: {}",
        verdict(rate >= 200.0)
    );
    let _ = std::fs::remove_file(&target);

    eprintln!("restore: writing {} MiB of log history…", args.history_mb);
    let busy = create_node_database(&node, "busy").await?;
    // A 64 MiB database rewritten again and again: the log grows, the file does not.
    write_pages(&node, &busy, 64.min(args.history_mb), false).await?;
    let mut written = 64.min(args.history_mb);
    let mut middle = None;
    while written < args.history_mb {
        let chunk = 64.min(args.history_mb - written);
        write_pages(&node, &busy, chunk, true).await?;
        written += chunk;
        if middle.is_none() && written >= args.history_mb / 2 {
            wait_durable(&node, &busy).await?;
            middle = Some(atoll_storage::now_ms_public());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    wait_durable(&node, &busy).await?;
    let at = middle.unwrap_or_else(atoll_storage::now_ms_public);
    let target = dir.join("restored-busy.db");
    let start = Instant::now();
    restore_to_file(&storage.storage, &busy, Target::Time(at), None, &target).await?;
    let seconds = start.elapsed().as_secs_f64();
    let catalog = atoll_storage::restore::Catalog::load(&storage.storage, &busy).await?;
    println!(
        "restore_point_in_time: {seconds:.2} s (to the middle of {} MiB of history; {} generations, {} segments); target <= 30 s: {}",
        args.history_mb,
        catalog.generations.len(),
        catalog.segments.len(),
        verdict(seconds <= 30.0)
    );
    let _ = std::fs::remove_file(&target);
    node.begin_shutdown();
    Ok(())
}

async fn create_node_database(
    node: &Arc<atoll_data::node::Node>,
    name: &str,
) -> anyhow::Result<String> {
    let id = uuid::Uuid::new_v4().to_string();
    let config = atoll_types::node::DatabaseConfig {
        id: id.clone(),
        name: name.into(),
        org_id: "bench".into(),
        group_id: "bench".into(),
        label: format!("{name}-bench"),
        state: atoll_types::node::DatabaseState::Active,
        block_reads: false,
        block_writes: false,
        block_reason: None,
        size_limit: None,
        allow_attach: false,
        allowed_ips: vec![],
        keys: vec![],
        external_keys: Default::default(),
        client_ca: None,
        durability: None,
        pitr_retention_days: None,
        config_version: 0,
        history_starts_at_ms: None,
        encryption: None,
    };
    let node = Arc::clone(node);
    tokio::task::spawn_blocking(move || {
        node.create_database(atoll_types::node::CreateDatabase {
            config,
            seed: atoll_types::node::Seed::Empty,
        })
    })
    .await??;
    Ok(id)
}

/// Writes `mib` MiB of pages into table `t` of a database, in 8 MiB transactions, through
/// a connection of the node (its commits are shipped like a tenant's); with `rewrite`, the
/// rows already there are replaced instead.
async fn write_pages(
    node: &Arc<atoll_data::node::Node>,
    id: &str,
    mib: u64,
    rewrite: bool,
) -> anyhow::Result<()> {
    let db = node.by_id(id).context("database")?;
    let node = Arc::clone(node);
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let conn = db.open_connection(
            atoll_data::sandbox::Mode::ReadWrite,
            node.sandbox(),
            &Arc::new(std::sync::atomic::AtomicBool::new(false)),
            None,
        )?;
        conn.conn
            .execute_batch("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, b BLOB NOT NULL)")?;
        // Rows of 3000 bytes: one a page.
        let rows_per_chunk = 8 * 1024 * 1024 / 4096;
        let chunks = (mib * 1024 * 1024 / 4096).div_ceil(rows_per_chunk);
        for chunk in 0..chunks {
            let first = chunk * rows_per_chunk + 1;
            let last = first + rows_per_chunk - 1;
            let sql = if rewrite {
                format!("UPDATE t SET b = randomblob(3000) WHERE id BETWEEN {} AND {}", first % (16 * 1024) + 1, (first % (16 * 1024)) + rows_per_chunk)
            } else {
                format!("WITH RECURSIVE c(x) AS (SELECT {first} UNION ALL SELECT x + 1 FROM c WHERE x < {last}) INSERT INTO t SELECT x, randomblob(3000) FROM c")
            };
            conn.conn.execute_batch(&sql)?;
        }
        Ok(())
    })
    .await?
}

/// Waits until everything committed on the database is in object storage.
async fn wait_durable(node: &Arc<atoll_data::node::Node>, id: &str) -> anyhow::Result<()> {
    let log = node
        .by_id(id)
        .context("database")?
        .log()
        .cloned()
        .context("log")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    while log.status().pending_commits > 0 || log.generation_pending() {
        if Instant::now() > deadline {
            bail!("the log was not shipped in 10 minutes: {:?}", log.status());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// `replica_sync`: an embedded replica made from a database's current generation, then
/// `--replica-mb` of new WAL written on the server (1 MiB transactions, shipped to a
/// `file://` store) and the time for the replica to sync it: the same requests as the
/// `libsql` crate's synced databases (`GET /sync/{generation}/{start}/{start + 128}` until
/// "nothing newer"), each frame applied to the replica's file as it arrives (pages written
/// in place, the file cut to the size of each commit). The replica is checked afterwards
/// (`quick_check`, every row there).
async fn replica_sync(args: &BenchArgs, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bench = Bench::start(None, dir, StorageMode::Lag).await?;
    let org = bench.org("replica").await?;
    bench.create_database(&org, "replica", json!({})).await?;
    let token = bench.database_token(&org, "replica").await?;
    let url = bench.database_url(&org, "replica");
    bench
        .execute(
            &url,
            &token,
            "CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB NOT NULL)",
        )
        .await?;
    let get = |path: String| {
        let request = bench.client.get(format!("{url}{path}")).bearer_auth(&token);
        async move { anyhow::Ok(request.send().await?) }
    };
    let info: Value = get("info".into()).await?.json().await?;
    let generation = info["current_generation"]
        .as_u64()
        .context("no generation")?;
    let local = dir.join("replica.db");
    let exported = get(format!("export/{generation}")).await?;
    if exported.status() != reqwest::StatusCode::OK {
        bail!("export: {}", exported.status());
    }
    std::fs::write(&local, exported.bytes().await?)?;

    eprintln!("replica_sync: writing {} MiB…", args.replica_mb);
    let id = bench
        .node
        .by_label(&format!("replica-{}", org.slug))
        .context("the database")?
        .id()
        .to_string();
    write_replica_rows(&bench.node, &id, args.replica_mb).await?;
    wait_durable(&bench.node, &id).await?;

    let start = Instant::now();
    let mut file = std::fs::OpenOptions::new().write(true).open(&local)?;
    let (mut next, mut bytes, mut requests) = (1u64, 0u64, 0u64);
    loop {
        let response = get(format!("sync/{generation}/{next}/{}", next + 128)).await?;
        requests += 1;
        if response.status() == reqwest::StatusCode::BAD_REQUEST {
            break;
        }
        if response.status() != reqwest::StatusCode::OK {
            bail!("pull: {}: {}", response.status(), response.text().await?);
        }
        let body = response.bytes().await?;
        bytes += body.len() as u64;
        next += apply_wal_frames(&mut file, &body)?;
    }
    file.sync_all()?;
    drop(file);
    let seconds = start.elapsed().as_secs_f64();
    let mb = bytes as f64 / 1_000_000.0;
    let conn = rusqlite::Connection::open(&local)?;
    let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
    let rows: u64 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?;
    if check != "ok" || rows != args.replica_mb * 256 {
        bail!("the replica is not the database: quick_check {check}, {rows} rows");
    }
    println!(
        "replica_sync: {seconds:.2} s for {} MiB of new WAL ({mb:.0} MB of frames in {requests} requests of 128 frames, {:.0} MB/s, applied and verified); target <= 10 s: {}",
        args.replica_mb,
        mb / seconds,
        verdict(seconds <= 10.0)
    );
    bench.node.begin_shutdown();
    Ok(())
}

/// Inserts `mib` MiB of one-page rows (256 a MiB) in 1 MiB transactions.
async fn write_replica_rows(
    node: &Arc<atoll_data::node::Node>,
    id: &str,
    mib: u64,
) -> anyhow::Result<()> {
    let db = node.by_id(id).context("database")?;
    let node = Arc::clone(node);
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let conn = db.open_connection(
            atoll_data::sandbox::Mode::ReadWrite,
            node.sandbox(),
            &Arc::new(std::sync::atomic::AtomicBool::new(false)),
            None,
        )?;
        for chunk in 0..mib {
            let first = chunk * 256 + 1;
            let last = first + 255;
            conn.conn.execute_batch(&format!(
                "WITH RECURSIVE c(x) AS (SELECT {first} UNION ALL SELECT x + 1 FROM c WHERE x < {last}) INSERT INTO t SELECT x, randomblob(3000) FROM c"
            ))?;
        }
        Ok(())
    })
    .await?
}

/// Applies SQLite WAL frames (24-byte header: big-endian page number, database size after
/// a commit) to a database file; answers how many there were.
fn apply_wal_frames(file: &mut std::fs::File, body: &[u8]) -> anyhow::Result<u64> {
    use std::io::{Seek, SeekFrom, Write};
    const FRAME: usize = 24 + 4096;
    if body.is_empty() || !body.len().is_multiple_of(FRAME) {
        bail!("a pull answered {} bytes, not whole frames", body.len());
    }
    for frame in body.chunks(FRAME) {
        let page_no = u32::from_be_bytes(frame[0..4].try_into()?);
        let size_after = u32::from_be_bytes(frame[4..8].try_into()?);
        let Some(index) = page_no.checked_sub(1) else {
            bail!("a frame of page 0");
        };
        file.seek(SeekFrom::Start(u64::from(index) * 4096))?;
        file.write_all(&frame[24..])?;
        if size_after != 0 {
            file.set_len(u64::from(size_after) * 4096)?;
        }
    }
    Ok((body.len() / FRAME) as u64)
}
