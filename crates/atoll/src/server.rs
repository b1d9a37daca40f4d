//! The server commands: `atoll dev`, `atoll serve`, `atoll migrate` (and `atoll node`, in
//! `node.rs`).

use anyhow::{bail, Context};
use atoll_control::{AppState, ControlConfig, DataPlane, Location};
use atoll_data::node::NodeSettings;
use atoll_data::sandbox::SandboxSettings;
use atoll_data::sql_pool::SqlPool;
use atoll_data::warm_set::WarmBudget;
use atoll_data::DataLimits;
use atoll_http::listener::Listener;
use atoll_http::rate_limit::RateLimitSetting;
use atoll_http::tls::ServerTls;
use atoll_meta::Store;
use clap::Args;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpListener;

#[derive(Args, Clone)]
pub struct DevArgs {
    /// Directory for the metadata store, databases and the admin token.
    #[arg(long, env = "ATOLL_DATA_DIR", default_value = "./atoll-data")]
    data_dir: PathBuf,
    /// Address of the platform API.
    #[arg(long, env = "ATOLL_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Address of the database hosts (the data plane).
    #[arg(long, env = "ATOLL_DB_LISTEN", default_value = "127.0.0.1:8081")]
    db_listen: SocketAddr,
    /// Serve in this one process, without the supervisor that starts the serving process
    /// again within a second after a crash (for a service manager that restarts it).
    #[arg(long, env = "ATOLL_NO_SUPERVISE")]
    no_supervise: bool,
    /// The instance administrator created on first start.
    #[arg(long, env = "ATOLL_USERNAME", default_value = "admin")]
    username: String,
    /// Password of that user on first start; a random one is generated (and written to
    /// `<data-dir>/admin.password`) when absent.
    #[arg(long, env = "ATOLL_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    #[command(flatten)]
    hosts: HostArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    api_limits: ApiLimitArgs,
    #[command(flatten)]
    jwks: JwksArgs,
    #[command(flatten)]
    db_limits: DbLimitArgs,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    secrets: crate::secrets_key::SecretsArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
    #[command(flatten)]
    storage: StorageArgs,
}

#[derive(Args, Clone)]
pub struct HostArgs {
    /// Database hosts are `<db>-<org>.<db-domain>` (point a wildcard DNS record at the
    /// data plane; `localhost` works in most browsers and with the `/db/<db>-<org>/`
    /// path prefix everywhere).
    #[arg(long, env = "ATOLL_DB_DOMAIN", default_value = "localhost")]
    pub(crate) db_domain: String,
}

#[derive(Args, Clone)]
pub struct ServeArgs {
    /// Metadata store: `postgres://…` or a SQLite file path (`sqlite://…`).
    #[arg(long, env = "ATOLL_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Most connections this process opens to PostgreSQL; requests beyond them wait (up
    /// to 10 s) for one to be free. Size it so every replica's pool fits the server's
    /// `max_connections`.
    #[arg(long, env = "ATOLL_DATABASE_POOL_SIZE", default_value_t = atoll_meta::DEFAULT_POSTGRES_POOL_SIZE as u16,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    database_pool_size: u16,
    /// Address of the platform API.
    #[arg(long, env = "ATOLL_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Admin URLs of `atoll node`s to reach at start (repeat the flag, or comma-separate in
    /// the variable); nodes started with `--control-plane` register themselves and need not
    /// be listed. Without any (and without `--registered-nodes`), `serve` runs a data node
    /// itself in `--data-dir`.
    #[arg(long = "node", env = "ATOLL_NODES", value_delimiter = ',')]
    nodes: Vec<String>,
    /// Run no data node in this process: the databases live on `atoll node`s that register
    /// themselves (`atoll node --control-plane`), and on any given with `--node`.
    #[arg(long, env = "ATOLL_REGISTERED_NODES")]
    registered_nodes: bool,
    /// Seconds between two reconcile passes (the nodes converged to the store).
    #[arg(long, env = "ATOLL_RECONCILE_INTERVAL_SECS", default_value_t = 30)]
    reconcile_interval_secs: u64,
    /// Fail a lost node's databases over after this many seconds without its heartbeat
    /// (another node of its location takes them, else the group's next location), and
    /// grant registered nodes write leases meanwhile: a node that cannot reach any control
    /// plane for 15 s stops committing. 0 (the default): failover is the operator's
    /// (`atoll group failover`). At least 30 when set; give every replica the same value.
    #[arg(long, env = "ATOLL_FAILOVER_AFTER_SECS", default_value_t = 0)]
    failover_after_secs: u64,
    /// Seconds a database may stay `creating` before a reconcile pass takes its creator
    /// (a replica that died mid-create) for dead and removes it. Keep it longer than the
    /// slowest create (a dump load).
    #[arg(long, env = "ATOLL_CREATING_GRACE_SECS", default_value_t = 900)]
    creating_grace_secs: u64,
    /// Secret shared with the nodes (`atoll node --node-secret`).
    #[arg(long, env = "ATOLL_NODE_SECRET", hide_env_values = true)]
    node_secret: Option<String>,
    /// Directory of the data node this process runs when no `--node` is given.
    #[arg(long, env = "ATOLL_DATA_DIR", default_value = "./atoll-data")]
    data_dir: PathBuf,
    /// An instance administrator to create if missing (with `--password`); then log in
    /// with `POST /v1/auth/login`.
    #[arg(long, env = "ATOLL_USERNAME")]
    username: Option<String>,
    /// Password of `--username` when it is created.
    #[arg(long, env = "ATOLL_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Address of the database hosts (the data plane).
    #[arg(long, env = "ATOLL_DB_LISTEN", default_value = "127.0.0.1:8081")]
    db_listen: SocketAddr,
    #[command(flatten)]
    hosts: HostArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    api_limits: ApiLimitArgs,
    #[command(flatten)]
    jwks: JwksArgs,
    #[command(flatten)]
    db_limits: DbLimitArgs,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    secrets: crate::secrets_key::ServeSecretsArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
    /// Object storage of its own data node (without `--node`).
    #[command(flatten)]
    storage: StorageArgs,
}

#[derive(Args, Clone)]
pub struct MigrateArgs {
    /// Metadata store: `postgres://…` or a SQLite file path (`sqlite://…`).
    #[arg(long, env = "ATOLL_DATABASE_URL", hide_env_values = true)]
    database_url: String,
}

#[derive(Args, Clone)]
pub struct CommonArgs {
    /// Location catalog, `code=Description,…`. Default: `local` plus a few AWS codes.
    #[arg(long, env = "ATOLL_LOCATIONS")]
    locations: Option<String>,
    /// Plans file (JSON: `{"<plan>": {"price": "29", "quotas": {"databases": 10, …},
    /// "default": true}}`); plans it does not name keep their defaults.
    #[arg(long, env = "ATOLL_PLANS")]
    plans: Option<PathBuf>,
    /// The plan new organizations start on (overrides the plans file's `default`).
    /// Default: `enterprise`, which has no quotas; `starter` is the free plan.
    #[arg(long, env = "ATOLL_DEFAULT_PLAN")]
    default_plan: Option<String>,
    /// Location of this server: its "closest region" answer and new users' first group.
    #[arg(long, env = "ATOLL_LOCATION", default_value = "local")]
    location: String,
    /// Log filter (`info`, `atoll_control=debug`, …).
    #[arg(long, env = "ATOLL_LOG", default_value = "info")]
    log: String,
    /// Log format: `text` (coloured only on a terminal) or `json` (one object a line).
    #[arg(long, env = "ATOLL_LOG_FORMAT", value_enum, default_value_t = crate::logging::LogFormat::Text)]
    log_format: crate::logging::LogFormat,
}

/// Abuse limits of the platform API (see docs/OPERATIONS.md, "Limits").
#[derive(Args, Clone)]
pub struct ApiLimitArgs {
    /// Requests per API token (`<n>/s`, `<n>/min`, `<n>/h`, or `off`); over it: 429 with
    /// Retry-After.
    #[arg(long, env = "ATOLL_API_RATE_LIMIT", default_value_t = RateLimitSetting(Some(atoll_control::config::DEFAULT_RATE_PER_CREDENTIAL)))]
    api_rate_limit: RateLimitSetting,
    /// Requests per client IP address for requests without a token (logins, probes).
    #[arg(long, env = "ATOLL_API_RATE_LIMIT_PER_IP", default_value_t = RateLimitSetting(Some(atoll_control::config::DEFAULT_RATE_PER_ADDRESS)))]
    api_rate_limit_per_ip: RateLimitSetting,
    /// Seconds a JSON request body may take to arrive (408 after), and a dump upload may
    /// go without sending.
    #[arg(long, env = "ATOLL_BODY_TIMEOUT", default_value_t = 60)]
    body_timeout: u64,
    /// SQL dumps (`POST …/databases/dumps`) one organization may hold at once; over it: 429
    /// with Retry-After. A create seeded from a dump deletes it; unused dumps expire after
    /// a day.
    #[arg(long, env = "ATOLL_MAX_DUMPS_PER_ORG", default_value_t = atoll_control::config::DEFAULT_MAX_DUMPS_PER_ORG)]
    max_dumps_per_org: u64,
    /// Bytes of SQL dumps one organization may hold at once (`1073741824`, `512mb`,
    /// `1gib`); over it: 429 with Retry-After.
    #[arg(long, env = "ATOLL_MAX_DUMP_BYTES_PER_ORG", default_value = "1gib", value_parser = atoll_types::sizes::parse_size)]
    max_dump_bytes_per_org: u64,
}

impl ApiLimitArgs {
    fn apply(&self, config: &mut ControlConfig, connections: &ConnectionArgs) {
        config.rate_per_credential = self.api_rate_limit.0;
        config.rate_per_address = self.api_rate_limit_per_ip.0;
        config.body_read_timeout = seconds(self.body_timeout);
        config.max_dumps_per_org = self.max_dumps_per_org;
        config.max_dump_bytes_per_org = self.max_dump_bytes_per_org;
        config.header_read_timeout = seconds(connections.header_timeout);
    }
}

/// Organizations' key sets (JWKS) for end users' JWTs (docs/OPERATIONS.md, "Key sets").
#[derive(Args, Clone)]
pub struct JwksArgs {
    /// URL prefixes organizations may register key sets from (comma-separated, e.g.
    /// `https://your-app.clerk.accounts.dev/,https://your-tenant.auth0.com/`). Default:
    /// none, and key sets are given inline.
    #[arg(long, env = "ATOLL_JWKS_ALLOWED_URLS", default_value = "")]
    jwks_allowed_urls: String,
    /// Let key set URLs resolve to loopback, private or link-local addresses (an identity
    /// provider inside your own network). Off: such URLs are refused (SSRF).
    #[arg(long, env = "ATOLL_JWKS_ALLOW_PRIVATE_ADDRESSES")]
    jwks_allow_private_addresses: bool,
    /// Seconds between two fetches of every key set registered from a URL.
    #[arg(long, env = "ATOLL_JWKS_REFRESH_SECS", default_value_t = 600)]
    jwks_refresh_secs: u64,
}

impl JwksArgs {
    fn apply(&self, config: &mut ControlConfig) -> anyhow::Result<()> {
        config.jwks.allowed_urls = atoll_control::jwks::parse_allowed_urls(&self.jwks_allowed_urls)
            .map_err(|e| anyhow::anyhow!(e))?;
        config.jwks.allow_private_addresses = self.jwks_allow_private_addresses;
        config.jwks.refresh_interval = seconds(self.jwks_refresh_secs.max(1));
        Ok(())
    }
}

/// Settings of every listener.
#[derive(Args, Clone)]
pub struct ConnectionArgs {
    /// Seconds a client may take to send a request's headers before the connection is
    /// closed (slow or stalled clients).
    #[arg(long, env = "ATOLL_HEADER_TIMEOUT", default_value_t = 30)]
    pub(crate) header_timeout: u64,
    /// Connections one client IP address (an IPv6 client: its /64) may hold at once on each
    /// public listener; more are closed as soon as they are accepted. 0: no cap. Default:
    /// an eighth of the open-files limit, between 64 and 4096.
    #[arg(long, env = "ATOLL_MAX_CONNECTIONS_PER_IP")]
    pub(crate) max_connections_per_ip: Option<usize>,
}

impl ConnectionArgs {
    /// The per-address cap (after `raise_open_files_limit`, which the default depends on).
    pub(crate) fn max_connections_per_address(&self) -> usize {
        self.max_connections_per_ip
            .unwrap_or_else(atoll_http::listener::default_max_connections_per_address)
    }
}

/// Abuse limits of the database hosts (see docs/OPERATIONS.md, "Limits").
#[derive(Args, Clone)]
pub struct DbLimitArgs {
    /// Requests per database token (`<n>/s`, `<n>/min`, `<n>/h`, or `off`); over it: 429
    /// with Retry-After.
    #[arg(long, env = "ATOLL_DB_RATE_LIMIT", default_value_t = RateLimitSetting(DataLimits::default().rate_per_credential))]
    db_rate_limit: RateLimitSetting,
    /// Requests per client IP address for requests without a token (WebSocket upgrades,
    /// probes).
    #[arg(long, env = "ATOLL_DB_RATE_LIMIT_PER_IP", default_value_t = RateLimitSetting(DataLimits::default().rate_per_address))]
    db_rate_limit_per_ip: RateLimitSetting,
    /// Open Hrana streams (HTTP batons and WebSocket streams) per database.
    #[arg(long, env = "ATOLL_MAX_STREAMS_PER_DB", default_value_t = DataLimits::default().max_streams_per_database)]
    max_streams_per_db: usize,
    /// Open Hrana streams on this node, all databases together.
    #[arg(long, env = "ATOLL_MAX_STREAMS", default_value_t = DataLimits::default().max_streams_per_node)]
    max_streams: usize,
    /// Open Hrana streams of one organization on this node, all its databases together
    /// (default: a quarter of --max-streams).
    #[arg(long, env = "ATOLL_MAX_STREAMS_PER_ORG")]
    max_streams_per_org: Option<usize>,
    /// Open Hrana cursors per database.
    #[arg(long, env = "ATOLL_MAX_CURSORS_PER_DB", default_value_t = DataLimits::default().max_cursors_per_database)]
    max_cursors_per_db: usize,
    /// Open Hrana cursors on this node, all databases together.
    #[arg(long, env = "ATOLL_MAX_CURSORS", default_value_t = DataLimits::default().max_cursors_per_node)]
    max_cursors: usize,
    /// Open Hrana cursors of one organization on this node (default: a quarter of
    /// --max-cursors).
    #[arg(long, env = "ATOLL_MAX_CURSORS_PER_ORG")]
    max_cursors_per_org: Option<usize>,
    /// Seconds a Hrana request body may take to arrive (408 after).
    #[arg(long, env = "ATOLL_DB_BODY_TIMEOUT", default_value_t = DataLimits::default().body_read_timeout.as_secs())]
    db_body_timeout: u64,
    /// Seconds an upload may go without sending a byte before it is abandoned (408).
    #[arg(long, env = "ATOLL_UPLOAD_IDLE_TIMEOUT", default_value_t = DataLimits::default().upload_idle_timeout.as_secs())]
    upload_idle_timeout: u64,
    /// Seconds a Hrana WebSocket may stay silent before the server closes it.
    #[arg(long, env = "ATOLL_WS_IDLE_TIMEOUT", default_value_t = DataLimits::default().websocket_idle_timeout.as_secs())]
    ws_idle_timeout: u64,
    /// Seconds one tenant statement may run before it is interrupted (SQLITE_INTERRUPT).
    #[arg(long, env = "ATOLL_STATEMENT_TIMEOUT", default_value_t = SandboxSettings::default().statement_timeout.as_secs())]
    statement_timeout: u64,
    /// Seconds an interactive transaction may hold a database's write lock while another
    /// writer waits; then it is rolled back (TRANSACTION_TIMEOUT).
    #[arg(long, env = "ATOLL_TRANSACTION_TIMEOUT", default_value_t = SandboxSettings::default().transaction_timeout.as_secs())]
    transaction_timeout: u64,
    /// Threads that run tenant SQL (default: 16 per core, at least 16).
    #[arg(long, env = "ATOLL_SQL_THREADS")]
    sql_threads: Option<usize>,
    /// Largest string or blob one statement may make or read, in bytes (SQLITE_TOOBIG).
    #[arg(long, env = "ATOLL_MAX_VALUE_SIZE", default_value_t = SandboxSettings::default().max_value_bytes)]
    max_value_size: usize,
    /// Largest temporary database (temp tables) of one connection, in bytes (SQLITE_FULL).
    #[arg(long, env = "ATOLL_MAX_TEMP_SIZE", default_value_t = SandboxSettings::default().max_temp_bytes)]
    max_temp_size: u64,
    /// Most memory of the SQL engine one statement may take (its sorts, windows, grouping
    /// keys, values), in bytes; past it the statement fails (SQLITE_NOMEM).
    #[arg(long, env = "ATOLL_MAX_STATEMENT_MEMORY", default_value_t = SandboxSettings::default().max_statement_memory)]
    max_statement_memory: u64,
    /// SQLite page cache of each database connection, in bytes.
    #[arg(long, env = "ATOLL_PAGE_CACHE_SIZE", default_value_t = SandboxSettings::default().page_cache_bytes)]
    page_cache_size: u64,
    /// Memory the node's idle database connections (its warm databases) may hold together,
    /// in bytes. Default: a sixteenth of the machine's memory (or of its cgroup's limit).
    #[arg(long, env = "ATOLL_WARM_MEMORY", default_value_t = WarmBudget::of_machine().memory_bytes)]
    warm_memory: u64,
    /// File descriptors the node's idle database connections may hold together (three
    /// each at most). Default: half of the process's open-files limit.
    #[arg(long, env = "ATOLL_WARM_FILES", default_value_t = WarmBudget::of_machine().files)]
    warm_files: u64,
    /// At most this many idle database connections, over all databases of the node (below
    /// what `--warm-files` allows). Default: no limit besides the two above.
    #[arg(long, env = "ATOLL_MAX_IDLE_CONNECTIONS")]
    max_idle_connections: Option<usize>,
    #[command(flatten)]
    pub(crate) connections: ConnectionArgs,
}

impl DbLimitArgs {
    fn warm_budget(&self) -> WarmBudget {
        WarmBudget {
            memory_bytes: self.warm_memory,
            files: self.warm_files,
        }
    }

    pub(crate) fn limits(&self) -> anyhow::Result<DataLimits> {
        for (flag, value) in [
            ("--max-streams-per-db", self.max_streams_per_db),
            ("--max-streams", self.max_streams),
            ("--max-cursors-per-db", self.max_cursors_per_db),
            ("--max-cursors", self.max_cursors),
            (
                "--max-streams-per-org",
                self.max_streams_per_org.unwrap_or(1),
            ),
            (
                "--max-cursors-per-org",
                self.max_cursors_per_org.unwrap_or(1),
            ),
            ("--sql-threads", self.sql_threads.unwrap_or(1)),
            ("--max-value-size", self.max_value_size),
        ] {
            if value == 0 {
                bail!("{flag} must be at least 1");
            }
        }
        Ok(DataLimits {
            rate_per_credential: self.db_rate_limit.0,
            rate_per_address: self.db_rate_limit_per_ip.0,
            max_streams_per_database: self.max_streams_per_db,
            max_streams_per_organization: self
                .max_streams_per_org
                .unwrap_or((self.max_streams / atoll_data::ORGANIZATION_SHARE).max(1)),
            max_streams_per_node: self.max_streams,
            max_cursors_per_database: self.max_cursors_per_db,
            max_cursors_per_organization: self
                .max_cursors_per_org
                .unwrap_or((self.max_cursors / atoll_data::ORGANIZATION_SHARE).max(1)),
            max_cursors_per_node: self.max_cursors,
            header_read_timeout: seconds(self.connections.header_timeout),
            max_connections_per_address: self.connections.max_connections_per_address(),
            body_read_timeout: seconds(self.db_body_timeout),
            upload_idle_timeout: seconds(self.upload_idle_timeout),
            websocket_idle_timeout: seconds(self.ws_idle_timeout),
            node: NodeSettings {
                sandbox: SandboxSettings {
                    statement_timeout: seconds(self.statement_timeout),
                    transaction_timeout: seconds(self.transaction_timeout),
                    // A waiting writer outlasts a holder that is rolled back.
                    busy_timeout: seconds(self.transaction_timeout) * 2
                        + std::time::Duration::from_secs(1),
                    max_value_bytes: self.max_value_size,
                    max_temp_bytes: self.max_temp_size.max(atoll_data::database::PAGE_SIZE),
                    // A statement's reads fill its connection's page cache from this budget too.
                    max_statement_memory: self.max_statement_memory.max(4 << 20),
                    page_cache_bytes: self.page_cache_size.max(1024),
                    max_idle_connections: self
                        .warm_budget()
                        .max_connections()
                        .min(self.max_idle_connections.unwrap_or(usize::MAX).max(1)),
                    warm_memory_bytes: self.warm_memory,
                    ..SandboxSettings::default()
                },
                sql_threads: self.sql_threads.unwrap_or_else(SqlPool::default_threads),
                // Set by each command from its `StorageArgs`.
                storage: None,
            },
        })
    }
}

/// TLS of the process's listeners (see docs/OPERATIONS.md, "TLS"): the platform API and
/// the database hosts of `dev` and `serve`, the database hosts and the node admin API of
/// `node`.
#[derive(Args, Clone)]
pub struct TlsArgs {
    /// PEM certificate chain (the server's certificate first) to serve over TLS (with
    /// `--tls-key`); without it the listeners speak plain HTTP. Re-read when the file
    /// changes: renewals need no restart.
    #[arg(long, env = "ATOLL_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert` (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "ATOLL_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The listeners' TLS, or `None` for plain HTTP; an error when the files cannot be used.
    pub(crate) fn server_tls(&self) -> anyhow::Result<Option<ServerTls>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(certificate), Some(key)) => Ok(Some(ServerTls::from_files(certificate, key)?)),
            _ => Ok(None),
        }
    }
}

/// `https` when the listener has TLS, else `http`.
pub(crate) fn url_scheme(tls: &Option<ServerTls>) -> &'static str {
    if tls.is_some() {
        "https"
    } else {
        "http"
    }
}

/// A timeout flag: whole seconds, at least one.
fn seconds(value: u64) -> std::time::Duration {
    std::time::Duration::from_secs(value.max(1))
}

impl CommonArgs {
    fn config(&self) -> anyhow::Result<ControlConfig> {
        let mut config = ControlConfig::default();
        if let Some(catalog) = &self.locations {
            config.locations = Location::parse_catalog(catalog).map_err(anyhow::Error::msg)?;
        }
        if config.location(&self.location).is_none() {
            bail!(
                "--location {} is not in the location catalog",
                self.location
            );
        }
        config.server_location = self.location.clone();
        if let Some(path) = &self.plans {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read plans file {}", path.display()))?;
            atoll_control::config::apply_plans_file(&mut config, &text)
                .map_err(anyhow::Error::msg)?;
        }
        if let Some(plan) = &self.default_plan {
            config.default_plan = plan.clone();
        }
        if !config.plans.contains_key(&config.default_plan) {
            bail!(
                "the default plan {} is not a plan: give one of {} (or add it to the plans file)",
                config.default_plan,
                config.plans.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        Ok(config)
    }

    fn init_logging(&self) {
        crate::logging::init(&self.log, self.log_format);
    }
}

/// A data node inside this process: its database-host listener and the control plane's
/// handle on it.
struct InProcessNode {
    data_plane: DataPlane,
    db_url: String,
    hostname_suffix: String,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    node: Arc<atoll_data::node::Node>,
}

/// Opens a node's data directory off the async executor.
pub(crate) async fn open_node(
    data_dir: &Path,
    settings: NodeSettings,
) -> anyhow::Result<Arc<atoll_data::node::Node>> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
    let node_dir = data_dir.to_path_buf();
    let node =
        tokio::task::spawn_blocking(move || atoll_data::node::Node::open_with(&node_dir, settings))
            .await?
            .map_err(|e| {
                anyhow::anyhow!("cannot open the data node in {}: {e}", data_dir.display())
            })?;
    let node = Arc::new(node);
    if let Some(storage) = node.storage() {
        tracing::info!(storage = %storage.storage.url(), "object storage");
        // Databases whose files are gone come back from object storage (in the
        // background: each answers 503 until it is rebuilt).
        let rebuilding = atoll_data::node_storage::recover(&node)
            .await
            .map_err(|e| anyhow::anyhow!("cannot read the node's index in object storage: {e}"))?;
        if rebuilding > 0 {
            tracing::warn!(
                databases = rebuilding,
                "rebuilding databases from object storage"
            );
        }
        atoll_data::node_storage::start(&node);
    }
    Ok(node)
}

/// `<db-domain>`, with the port when it is not 80.
pub(crate) fn hostname_suffix(db_domain: &str, address: SocketAddr) -> String {
    if address.port() == 80 {
        db_domain.to_string()
    } else {
        format!("{db_domain}:{}", address.port())
    }
}

/// Binds one listener (or takes the one the supervisor bound for `flag`); a port already
/// taken gets the hint of the flag that moves it.
pub(crate) async fn bind(
    address: SocketAddr,
    what: &str,
    flag: &str,
) -> anyhow::Result<TcpListener> {
    if let Some(listener) = crate::supervisor::inherited_listener(flag)? {
        return Ok(listener);
    }
    TcpListener::bind(address)
        .await
        .map_err(|e| bind_error(address, what, flag, e))
}

/// Why `address` could not be bound, with the hint of the flag that moves it.
pub(crate) fn bind_error(
    address: SocketAddr,
    what: &str,
    flag: &str,
    e: std::io::Error,
) -> anyhow::Error {
    let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
        format!(
            "; hint: another process (another `atoll dev`?) holds it: stop it, or choose another address with `{flag}`, like `{flag} 127.0.0.1:0`"
        )
    } else {
        String::new()
    };
    anyhow::anyhow!("cannot listen on {address} for {what}: {e}{hint}")
}

async fn start_in_process_node(
    data_dir: &Path,
    listener: TcpListener,
    db_domain: &str,
    limits: DataLimits,
    tls: Option<ServerTls>,
) -> anyhow::Result<InProcessNode> {
    let node = open_node(data_dir, limits.node.clone()).await?;
    let address = listener.local_addr()?;
    let db_url = format!("{}://{address}", url_scheme(&tls));
    let hostname_suffix = hostname_suffix(db_domain, address);
    let state = atoll_data::DataPlaneState::with_limits(Arc::clone(&node), db_domain, limits);
    // Database hosts ask for TLS client certificates (an alternative to a token).
    let tls = tls.map(|t| t.accepting_client_certificates()).transpose()?;
    let task = tokio::spawn(atoll_data::serve(
        Listener::new(listener, tls),
        state,
        shutdown_signal(),
    ));
    Ok(InProcessNode {
        data_plane: DataPlane::in_process(Arc::clone(&node), &db_url, &hostname_suffix),
        node,
        db_url,
        hostname_suffix,
        task,
    })
}

/// `atoll dev`: the control plane and a data node on an embedded store in `--data-dir`.
/// Prometheus metrics of the process.
#[derive(Args, Clone, Debug)]
pub(crate) struct MetricsArgs {
    /// Serve Prometheus metrics at `GET /metrics` on this address, e.g. `127.0.0.1:9464`
    /// (off unless set: the figures show every tenant's traffic, so keep the address
    /// internal).
    #[arg(long, env = "ATOLL_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

impl MetricsArgs {
    /// Installs the metrics recorder and serves it, when `--metrics-listen` is set.
    pub(crate) async fn start(&self) -> anyhow::Result<()> {
        let Some(address) = self.metrics_listen else {
            return Ok(());
        };
        atoll_http::metrics::install().map_err(anyhow::Error::msg)?;
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| {
                format!("cannot listen on {address} for metrics (--metrics-listen)")
            })?;
        tracing::info!(address = %listener.local_addr()?, "serving Prometheus metrics at /metrics");
        tokio::spawn(atoll_http::metrics::serve(listener, shutdown_signal()));
        Ok(())
    }
}

/// Object storage, the durable home of every database (docs/OPERATIONS.md, "Backups and
/// recovery"; docs/STORAGE.md).
#[derive(Args, Clone, Debug)]
pub(crate) struct StorageArgs {
    /// Where every database's log and snapshots live: `s3://bucket/prefix` (with the AWS
    /// variables; `AWS_ENDPOINT_URL` for MinIO, R2, Garage…) or `file:///dir`. Defaults to
    /// `file://<data-dir>/storage`, which gives point-in-time restore and rebuilds lost
    /// database files, but shares the node's disk: use object storage in production.
    #[arg(long, env = "ATOLL_STORAGE_URL")]
    storage_url: Option<String>,
    /// When a commit is acknowledged: `lag` (once in the node's WAL; object storage has it
    /// within --durability-lag) or `sync` (only once object storage has it). A database's
    /// own `durability` setting overrides it.
    #[arg(long, env = "ATOLL_DURABILITY", value_enum, default_value_t = DurabilityArg::Lag)]
    durability: DurabilityArg,
    /// The longest a commit waits to be shipped in `lag` mode (seconds, fractions allowed):
    /// what a lost disk can lose at most.
    #[arg(long, env = "ATOLL_DURABILITY_LAG", default_value_t = 1.0)]
    durability_lag: f64,
    /// Days of history kept restorable for databases whose plan names none.
    #[arg(long, env = "ATOLL_PITR_RETENTION_DAYS", default_value_t = 30)]
    pitr_retention_days: u32,
    /// In `lag` mode, once a commit has waited this many seconds for object storage
    /// (unreachable, or far behind), writes are refused with `DURABILITY_UNAVAILABLE`
    /// until it has caught up; reads go on. Bounds what a lost disk can lose.
    #[arg(long, env = "ATOLL_MAX_UNSHIPPED_SECS", default_value_t = 300)]
    max_unshipped_secs: u64,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DurabilityArg {
    Lag,
    Sync,
}

impl StorageArgs {
    /// The node's storage configuration; `data_dir` gives the default `file://` store.
    pub(crate) fn config(
        &self,
        data_dir: &Path,
        node_name: &str,
    ) -> anyhow::Result<atoll_data::node_storage::StorageConfig> {
        if !(self.durability_lag > 0.0 && self.durability_lag <= 3600.0) {
            bail!("--durability-lag must be between 0 and 3600 seconds");
        }
        let url = match &self.storage_url {
            Some(url) => url.clone(),
            None => {
                std::fs::create_dir_all(data_dir).with_context(|| {
                    format!("cannot create data directory {}", data_dir.display())
                })?;
                let dir = data_dir.canonicalize()?.join("storage");
                format!("file://{}", dir.display())
            }
        };
        Ok(atoll_data::node_storage::StorageConfig {
            url,
            node_name: node_name.to_string(),
            settings: atoll_storage::StorageSettings {
                durability_lag: std::time::Duration::from_secs_f64(self.durability_lag),
                durability: match self.durability {
                    DurabilityArg::Lag => atoll_storage::DurabilityMode::Lag,
                    DurabilityArg::Sync => atoll_storage::DurabilityMode::Sync,
                },
                default_retention_days: self.pitr_retention_days,
                max_unshipped: std::time::Duration::from_secs(self.max_unshipped_secs.max(1)),
                ..Default::default()
            },
        })
    }
}

pub async fn dev(args: DevArgs) -> anyhow::Result<()> {
    crate::file_modes::restrict_new_files();
    args.common.init_logging();
    atoll_http::listener::raise_open_files_limit();
    let listeners = [
        crate::supervisor::Listen {
            flag: "--listen",
            address: args.listen,
            what: "the platform API",
        },
        crate::supervisor::Listen {
            flag: "--db-listen",
            address: args.db_listen,
            what: "the database hosts",
        },
    ];
    if let Some(code) = crate::supervisor::supervise(args.no_supervise, &listeners).await? {
        std::process::exit(code);
    }
    args.metrics.start().await?;
    crate::supervisor::report_restarts();
    let mut config = args.common.config()?;
    args.api_limits
        .apply(&mut config, &args.db_limits.connections);
    args.jwks.apply(&mut config)?;
    let mut db_limits = args.db_limits.limits()?;
    let tls = args.tls.server_tls()?;
    // Both ports first: a second `atoll dev` on busy ports must fail before it creates
    // anything in the data directory (no stray meta.db or secrets.key).
    let listener = bind(args.listen, "the platform API", "--listen").await?;
    let db_listener = bind(args.db_listen, "the database hosts", "--db-listen").await?;
    db_limits.node.storage = Some(args.storage.config(&args.data_dir, "local")?);
    crate::file_modes::tighten_data_dir(&args.data_dir);
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create data directory {}", args.data_dir.display()))?;
    let store = Store::open_sqlite(&args.data_dir.join("meta.db"))
        .await
        .context("cannot open the metadata store")?;
    let store = seal_dev_store(store, &args).await?;
    let api_url = format!("{}://{}", url_scheme(&tls), listener.local_addr()?);
    let node = start_in_process_node(
        &args.data_dir,
        db_listener,
        &args.hosts.db_domain,
        db_limits,
        tls.clone(),
    )
    .await?;
    config.public_url = api_url.clone();
    let state = AppState::new(store, config, node.data_plane);
    let store_id = state.store.store_id().await?;
    state
        .data_plane
        .claim_store(&store_id)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // `atoll dev` is the only process on its store (the store lives in its data
    // directory), so a database still `creating` at start was abandoned by this process
    // when it died: no grace period is needed.
    state
        .data_plane
        .reconcile(
            &state.store,
            std::time::Duration::ZERO,
            atoll_meta::now_millis(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("cannot reconcile the data node: {e}"))?;

    let token_path = args.data_dir.join("admin.token");
    let existing = std::fs::read_to_string(&token_path).ok();
    let outcome = atoll_control::bootstrap_user(
        &state,
        &args.username,
        args.password.clone(),
        existing,
        Some("enterprise"),
    )
    .await
    .map_err(|e| anyhow::anyhow!("cannot set up user {}: {e}", args.username))?;
    if outcome.token_is_new {
        write_secret(&token_path, &outcome.token)?;
    }
    if let Some(password) = &outcome.generated_password {
        write_secret(&args.data_dir.join("admin.password"), password)?;
    }

    let mut out = std::io::stdout().lock();
    writeln!(out, "Atoll {} (dev) is running.", env!("CARGO_PKG_VERSION"))?;
    writeln!(out, "  API URL:   {api_url}")?;
    writeln!(
        out,
        "  Console:   {}/console/ (log in with the user and password below)",
        api_url.trim_end_matches('/')
    )?;
    writeln!(
        out,
        "  Databases: {}/db/<db>-<org>/ (or the host <db>-<org>.{})",
        node.db_url, node.hostname_suffix
    )?;
    if let Some(certificate) = &args.tls.tls_cert {
        writeln!(
            out,
            "  TLS:       {} (re-read when it changes)",
            certificate.display()
        )?;
    }
    writeln!(
        out,
        "  User:      {}{}",
        outcome.username,
        if outcome.created { " (created)" } else { "" }
    )?;
    if let Some(password) = &outcome.generated_password {
        writeln!(
            out,
            "  Password:  {password} (also in {})",
            args.data_dir.join("admin.password").display()
        )?;
    }
    writeln!(
        out,
        "  Token:     {} (in {})",
        outcome.token,
        token_path.display()
    )?;
    writeln!(out, "  Data:      {}", args.data_dir.display())?;
    writeln!(
        out,
        "Try: curl -H \"Authorization: Bearer $(cat {})\" {api_url}/v1/organizations",
        token_path.display()
    )?;
    drop(out);

    let listener = Listener::new(listener, tls)
        .with_max_connections_per_address(args.db_limits.connections.max_connections_per_address());
    atoll_control::serve(listener, state, shutdown_signal()).await?;
    node.task.abort();
    // Whatever is committed goes to object storage before the process ends.
    atoll_data::node_storage::flush_all(&node.node).await;
    tracing::info!("stopped");
    Ok(())
}

/// `atoll serve`: the control plane on PostgreSQL (or SQLite), with `atoll node`s or a data
/// node of its own.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    crate::file_modes::restrict_new_files();
    args.common.init_logging();
    atoll_http::listener::raise_open_files_limit();
    args.metrics.start().await?;
    let mut config = args.common.config()?;
    args.api_limits
        .apply(&mut config, &args.db_limits.connections);
    args.jwks.apply(&mut config)?;
    let mut db_limits = args.db_limits.limits()?;
    let own_node = args.nodes.is_empty() && !args.registered_nodes;
    if own_node {
        db_limits.node.storage = Some(args.storage.config(&args.data_dir, "local")?);
    }
    let tls = args.tls.server_tls()?;
    config.reconcile_interval = seconds(args.reconcile_interval_secs);
    config.creating_grace = std::time::Duration::from_secs(args.creating_grace_secs);
    let keyring = crate::secrets_key::serve_keyring(&args.secrets)?;
    if let Some(path) = sqlite_store_path(&args.database_url) {
        crate::file_modes::tighten_sqlite_store(path);
    }
    if own_node {
        crate::file_modes::tighten_data_dir(&args.data_dir);
    }
    let store = Store::open_with(&args.database_url, usize::from(args.database_pool_size))
        .await
        .context("cannot open the metadata store")?;
    let store = crate::secrets_key::seal_store(store, keyring, None).await?;
    let store_id = store
        .store_id()
        .await
        .context("cannot read the metadata store's id")?;
    let listener = bind(args.listen, "the platform API", "--listen").await?;
    config.public_url = format!("{}://{}", url_scheme(&tls), listener.local_addr()?);
    let nodes: Vec<String> = args
        .nodes
        .iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    let mut in_process = None;
    let data_plane = if own_node {
        let db_listener = bind(args.db_listen, "the database hosts", "--db-listen").await?;
        let node = start_in_process_node(
            &args.data_dir,
            db_listener,
            &args.hosts.db_domain,
            db_limits,
            tls.clone(),
        )
        .await?;
        let data_plane = node.data_plane;
        data_plane
            .claim_store(&store_id)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        in_process = Some((node.task, node.node));
        data_plane
    } else {
        let secret = args
            .node_secret
            .clone()
            .filter(|s| !s.is_empty())
            .context("--node and --registered-nodes need --node-secret (ATOLL_NODE_SECRET)")?;
        let failover_after = match args.failover_after_secs {
            0 => None,
            secs if secs < atoll_control::failover::MIN_FAILOVER_AFTER_SECS => anyhow::bail!(
                "--failover-after-secs must be 0 (off) or at least {}: a node needs that long to lose its write lease",
                atoll_control::failover::MIN_FAILOVER_AFTER_SECS
            ),
            secs => Some(std::time::Duration::from_secs(secs)),
        };
        DataPlane::remote(&nodes, &secret, &store, &store_id)
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach the data nodes: {e}"))?
            .with_failover_after(failover_after)
    };
    // No reconcile before serving: other replicas may be creating databases right now.
    // The reconciler's first pass runs as the server starts, with its grace period.
    let state = AppState::new(store, config, data_plane);
    if let Some(username) = &args.username {
        let password = args
            .password
            .clone()
            .filter(|p| p.len() >= 8)
            .context("--username needs --password (ATOLL_PASSWORD) of at least 8 characters")?;
        let outcome = atoll_control::bootstrap_user(
            &state,
            username,
            Some(password),
            None,
            Some("enterprise"),
        )
        .await
        .map_err(|e| anyhow::anyhow!("cannot set up user {username}: {e}"))?;
        tracing::info!(user = %outcome.username, created = outcome.created, "instance administrator ready");
    }

    tracing::info!(address = %listener.local_addr()?, nodes = nodes.len(), backend = ?state.store.kind(), tls = tls.is_some(), "control plane listening");
    let listener = Listener::new(listener, tls)
        .with_max_connections_per_address(args.db_limits.connections.max_connections_per_address());
    atoll_control::serve(listener, state, shutdown_signal()).await?;
    if let Some((task, node)) = in_process {
        task.abort();
        atoll_data::node_storage::flush_all(&node).await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// `atoll migrate`.
pub async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    crate::file_modes::restrict_new_files();
    if let Some(path) = sqlite_store_path(&args.database_url) {
        crate::file_modes::tighten_sqlite_store(path);
    }
    let store = Store::open(&args.database_url)
        .await
        .context("cannot open the metadata store")?;
    store.migrate().await?;
    println!("metadata store is up to date ({:?})", store.kind());
    Ok(())
}

/// The file of a SQLite store URL (as [`Store::open`] reads it), `None` for PostgreSQL.
fn sqlite_store_path(database_url: &str) -> Option<&Path> {
    if database_url.starts_with("postgres://") || database_url.starts_with("postgresql://") {
        return None;
    }
    Some(Path::new(
        database_url
            .strip_prefix("sqlite://")
            .unwrap_or(database_url),
    ))
}

/// `atoll dev`'s store with its keyring, everything in it sealed under the current key.
async fn seal_dev_store(store: Store, args: &DevArgs) -> anyhow::Result<Store> {
    let (keyring, generated) = crate::secrets_key::dev_keyring(&args.secrets, &args.data_dir)?;
    let key_path = crate::secrets_key::dev_key_path(&args.data_dir);
    let hint = generated.then(|| {
        format!(
            "{} was missing, so a new key was made, but the store's signing keys were sealed \
             with another: restore that file from your backup (the new one was removed)",
            key_path.display()
        )
    });
    let sealed = crate::secrets_key::seal_store(store, keyring, hint).await;
    if sealed.is_err() && generated {
        let _ = std::fs::remove_file(&key_path);
    }
    sealed
}

/// Writes a secret readable by its owner only (mode 0600).
fn write_secret(path: &Path, secret: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    #[cfg(unix)]
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    writeln!(file, "{secret}")?;
    Ok(())
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    let signal = tokio::select! {
        _ = ctrl_c => "SIGINT",
        _ = terminate => "SIGTERM",
    };
    // Every listener of the process waits on this; one line says why they stop.
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| tracing::info!(signal, "shutting down"));
}
