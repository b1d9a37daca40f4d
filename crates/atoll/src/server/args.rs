//! The command-line arguments of the server commands (`dev`, `serve`, `migrate`, `node`),
//! each flag with its `ATOLL_*` variable, and how they become typed configuration.

use anyhow::{bail, Context};
use atoll_control::{ControlConfig, Location};
use atoll_data::node::NodeSettings;
use atoll_data::sandbox::SandboxSettings;
use atoll_data::sql_pool::SqlPool;
use atoll_data::warm_set::WarmBudget;
use atoll_data::DataLimits;
use atoll_http::rate_limit::RateLimitSetting;
use atoll_http::tls::ServerTls;
use clap::Args;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Args, Clone)]
pub struct DevArgs {
    /// Directory for the metadata store, databases and the admin token.
    #[arg(long, env = "ATOLL_DATA_DIR", default_value = "./atoll-data")]
    pub(crate) data_dir: PathBuf,
    /// Address of the platform API.
    #[arg(long, env = "ATOLL_LISTEN", default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// Address of the database hosts (the data plane).
    #[arg(long, env = "ATOLL_DB_LISTEN", default_value = "127.0.0.1:8081")]
    pub(crate) db_listen: SocketAddr,
    /// Serve in this one process, without the supervisor that starts the serving process
    /// again within a second after a crash (for a service manager that restarts it).
    #[arg(long, env = "ATOLL_NO_SUPERVISE")]
    pub(crate) no_supervise: bool,
    /// The instance administrator created on first start.
    #[arg(long, env = "ATOLL_USERNAME", default_value = "admin")]
    pub(crate) username: String,
    /// Password of that user on first start; a random one is generated (and written to
    /// `<data-dir>/admin.password`) when absent.
    #[arg(long, env = "ATOLL_PASSWORD", hide_env_values = true)]
    pub(crate) password: Option<String>,
    #[command(flatten)]
    pub(crate) hosts: HostArgs,
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    #[command(flatten)]
    pub(crate) api_limits: ApiLimitArgs,
    #[command(flatten)]
    pub(crate) jwks: JwksArgs,
    #[command(flatten)]
    pub(crate) db_limits: DbLimitArgs,
    #[command(flatten)]
    pub(crate) tls: TlsArgs,
    #[command(flatten)]
    pub(crate) secrets: crate::secrets_key::SecretsArgs,
    #[command(flatten)]
    pub(crate) metrics: MetricsArgs,
    #[command(flatten)]
    pub(crate) storage: StorageArgs,
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
    pub(crate) database_url: String,
    /// Most connections this process opens to PostgreSQL; requests beyond them wait (up
    /// to 10 s) for one to be free. Size it so every replica's pool fits the server's
    /// `max_connections`.
    #[arg(long, env = "ATOLL_DATABASE_POOL_SIZE", default_value_t = atoll_meta::DEFAULT_POSTGRES_POOL_SIZE as u16,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) database_pool_size: u16,
    /// Address of the platform API.
    #[arg(long, env = "ATOLL_LISTEN", default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// Admin URLs of `atoll node`s to reach at start (repeat the flag, or comma-separate in
    /// the variable); nodes started with `--control-plane` register themselves and need not
    /// be listed. Without any (and without `--registered-nodes`), `serve` runs a data node
    /// itself in `--data-dir`.
    #[arg(long = "node", env = "ATOLL_NODES", value_delimiter = ',')]
    pub(crate) nodes: Vec<String>,
    /// Run no data node in this process: the databases live on `atoll node`s that register
    /// themselves (`atoll node --control-plane`), and on any given with `--node`.
    #[arg(long, env = "ATOLL_REGISTERED_NODES")]
    pub(crate) registered_nodes: bool,
    /// Seconds between two reconcile passes (the nodes converged to the store).
    #[arg(long, env = "ATOLL_RECONCILE_INTERVAL_SECS", default_value_t = 30)]
    pub(crate) reconcile_interval_secs: u64,
    /// Fail a lost node's databases over after this many seconds without its heartbeat
    /// (another node of its location takes them, else the group's next location), and
    /// grant registered nodes write leases meanwhile: a node that cannot reach any control
    /// plane for 15 s stops committing. 0 (the default): failover is the operator's
    /// (`atoll group failover`). At least 30 when set; give every replica the same value.
    #[arg(long, env = "ATOLL_FAILOVER_AFTER_SECS", default_value_t = 0)]
    pub(crate) failover_after_secs: u64,
    /// Seconds a database may stay `creating` before a reconcile pass takes its creator
    /// (a replica that died mid-create) for dead and removes it. Keep it longer than the
    /// slowest create (a dump load).
    #[arg(long, env = "ATOLL_CREATING_GRACE_SECS", default_value_t = 900)]
    pub(crate) creating_grace_secs: u64,
    /// Secret shared with the nodes (`atoll node --node-secret`).
    #[arg(long, env = "ATOLL_NODE_SECRET", hide_env_values = true)]
    pub(crate) node_secret: Option<String>,
    /// Directory of the data node this process runs when no `--node` is given.
    #[arg(long, env = "ATOLL_DATA_DIR", default_value = "./atoll-data")]
    pub(crate) data_dir: PathBuf,
    /// An instance administrator to create if missing (with `--password`); then log in
    /// with `POST /v1/auth/login`.
    #[arg(long, env = "ATOLL_USERNAME")]
    pub(crate) username: Option<String>,
    /// Password of `--username` when it is created.
    #[arg(long, env = "ATOLL_PASSWORD", hide_env_values = true)]
    pub(crate) password: Option<String>,
    /// Address of the database hosts (the data plane).
    #[arg(long, env = "ATOLL_DB_LISTEN", default_value = "127.0.0.1:8081")]
    pub(crate) db_listen: SocketAddr,
    #[command(flatten)]
    pub(crate) hosts: HostArgs,
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    #[command(flatten)]
    pub(crate) api_limits: ApiLimitArgs,
    #[command(flatten)]
    pub(crate) jwks: JwksArgs,
    #[command(flatten)]
    pub(crate) db_limits: DbLimitArgs,
    #[command(flatten)]
    pub(crate) tls: TlsArgs,
    #[command(flatten)]
    pub(crate) secrets: crate::secrets_key::ServeSecretsArgs,
    #[command(flatten)]
    pub(crate) metrics: MetricsArgs,
    /// Object storage of its own data node (without `--node`).
    #[command(flatten)]
    pub(crate) storage: StorageArgs,
}

#[derive(Args, Clone)]
pub struct MigrateArgs {
    /// Metadata store: `postgres://…` or a SQLite file path (`sqlite://…`).
    #[arg(long, env = "ATOLL_DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
}

#[derive(Args, Clone)]
pub struct CommonArgs {
    /// Location catalog, `code=Description,…`. Default: `local` plus a few AWS codes.
    #[arg(long, env = "ATOLL_LOCATIONS")]
    pub(crate) locations: Option<String>,
    /// Plans file (JSON: `{"<plan>": {"price": "29", "quotas": {"databases": 10, …},
    /// "default": true}}`); plans it does not name keep their defaults.
    #[arg(long, env = "ATOLL_PLANS")]
    pub(crate) plans: Option<PathBuf>,
    /// The plan new organizations start on (overrides the plans file's `default`).
    /// Default: `enterprise`, which has no quotas; `starter` is the free plan.
    #[arg(long, env = "ATOLL_DEFAULT_PLAN")]
    pub(crate) default_plan: Option<String>,
    /// Location of this server: its "closest region" answer and new users' first group.
    #[arg(long, env = "ATOLL_LOCATION", default_value = "local")]
    pub(crate) location: String,
    /// Log filter (`info`, `atoll_control=debug`, …).
    #[arg(long, env = "ATOLL_LOG", default_value = "info")]
    pub(crate) log: String,
    /// Log format: `text` (coloured only on a terminal) or `json` (one object a line).
    #[arg(long, env = "ATOLL_LOG_FORMAT", value_enum, default_value_t = crate::logging::LogFormat::Text)]
    pub(crate) log_format: crate::logging::LogFormat,
}

/// Abuse limits of the platform API (see docs/OPERATIONS.md, "Limits").
#[derive(Args, Clone)]
pub struct ApiLimitArgs {
    /// Requests per API token (`<n>/s`, `<n>/min`, `<n>/h`, or `off`); over it: 429 with
    /// Retry-After.
    #[arg(long, env = "ATOLL_API_RATE_LIMIT", default_value_t = RateLimitSetting(Some(atoll_control::config::DEFAULT_RATE_PER_CREDENTIAL)))]
    pub(crate) api_rate_limit: RateLimitSetting,
    /// Requests per client IP address for requests without a token (logins, probes).
    #[arg(long, env = "ATOLL_API_RATE_LIMIT_PER_IP", default_value_t = RateLimitSetting(Some(atoll_control::config::DEFAULT_RATE_PER_ADDRESS)))]
    pub(crate) api_rate_limit_per_ip: RateLimitSetting,
    /// Seconds a JSON request body may take to arrive (408 after), and a dump upload may
    /// go without sending.
    #[arg(long, env = "ATOLL_BODY_TIMEOUT", default_value_t = 60)]
    pub(crate) body_timeout: u64,
    /// SQL dumps (`POST …/databases/dumps`) one organization may hold at once; over it: 429
    /// with Retry-After. A create seeded from a dump deletes it; unused dumps expire after
    /// a day.
    #[arg(long, env = "ATOLL_MAX_DUMPS_PER_ORG", default_value_t = atoll_control::config::DEFAULT_MAX_DUMPS_PER_ORG)]
    pub(crate) max_dumps_per_org: u64,
    /// Bytes of SQL dumps one organization may hold at once (`1073741824`, `512mb`,
    /// `1gib`); over it: 429 with Retry-After.
    #[arg(long, env = "ATOLL_MAX_DUMP_BYTES_PER_ORG", default_value = "1gib", value_parser = atoll_types::sizes::parse_size)]
    pub(crate) max_dump_bytes_per_org: u64,
}

impl ApiLimitArgs {
    pub(crate) fn apply(&self, config: &mut ControlConfig, connections: &ConnectionArgs) {
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
    pub(crate) jwks_allowed_urls: String,
    /// Let key set URLs resolve to loopback, private or link-local addresses (an identity
    /// provider inside your own network). Off: such URLs are refused (SSRF).
    #[arg(long, env = "ATOLL_JWKS_ALLOW_PRIVATE_ADDRESSES")]
    pub(crate) jwks_allow_private_addresses: bool,
    /// Seconds between two fetches of every key set registered from a URL.
    #[arg(long, env = "ATOLL_JWKS_REFRESH_SECS", default_value_t = 600)]
    pub(crate) jwks_refresh_secs: u64,
}

impl JwksArgs {
    pub(crate) fn apply(&self, config: &mut ControlConfig) -> anyhow::Result<()> {
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
    pub(crate) db_rate_limit: RateLimitSetting,
    /// Requests per client IP address for requests without a token (WebSocket upgrades,
    /// probes).
    #[arg(long, env = "ATOLL_DB_RATE_LIMIT_PER_IP", default_value_t = RateLimitSetting(DataLimits::default().rate_per_address))]
    pub(crate) db_rate_limit_per_ip: RateLimitSetting,
    /// Open Hrana streams (HTTP batons and WebSocket streams) per database.
    #[arg(long, env = "ATOLL_MAX_STREAMS_PER_DB", default_value_t = DataLimits::default().max_streams_per_database)]
    pub(crate) max_streams_per_db: usize,
    /// Open Hrana streams on this node, all databases together.
    #[arg(long, env = "ATOLL_MAX_STREAMS", default_value_t = DataLimits::default().max_streams_per_node)]
    pub(crate) max_streams: usize,
    /// Open Hrana streams of one organization on this node, all its databases together
    /// (default: a quarter of --max-streams).
    #[arg(long, env = "ATOLL_MAX_STREAMS_PER_ORG")]
    pub(crate) max_streams_per_org: Option<usize>,
    /// Open Hrana cursors per database.
    #[arg(long, env = "ATOLL_MAX_CURSORS_PER_DB", default_value_t = DataLimits::default().max_cursors_per_database)]
    pub(crate) max_cursors_per_db: usize,
    /// Open Hrana cursors on this node, all databases together.
    #[arg(long, env = "ATOLL_MAX_CURSORS", default_value_t = DataLimits::default().max_cursors_per_node)]
    pub(crate) max_cursors: usize,
    /// Open Hrana cursors of one organization on this node (default: a quarter of
    /// --max-cursors).
    #[arg(long, env = "ATOLL_MAX_CURSORS_PER_ORG")]
    pub(crate) max_cursors_per_org: Option<usize>,
    /// Seconds a Hrana request body may take to arrive (408 after).
    #[arg(long, env = "ATOLL_DB_BODY_TIMEOUT", default_value_t = DataLimits::default().body_read_timeout.as_secs())]
    pub(crate) db_body_timeout: u64,
    /// Seconds an upload may go without sending a byte before it is abandoned (408).
    #[arg(long, env = "ATOLL_UPLOAD_IDLE_TIMEOUT", default_value_t = DataLimits::default().upload_idle_timeout.as_secs())]
    pub(crate) upload_idle_timeout: u64,
    /// Seconds a Hrana WebSocket may stay silent before the server closes it.
    #[arg(long, env = "ATOLL_WS_IDLE_TIMEOUT", default_value_t = DataLimits::default().websocket_idle_timeout.as_secs())]
    pub(crate) ws_idle_timeout: u64,
    /// Seconds one tenant statement may run before it is interrupted (SQLITE_INTERRUPT).
    #[arg(long, env = "ATOLL_STATEMENT_TIMEOUT", default_value_t = SandboxSettings::default().statement_timeout.as_secs())]
    pub(crate) statement_timeout: u64,
    /// Seconds an interactive transaction may hold a database's write lock while another
    /// writer waits; then it is rolled back (TRANSACTION_TIMEOUT).
    #[arg(long, env = "ATOLL_TRANSACTION_TIMEOUT", default_value_t = SandboxSettings::default().transaction_timeout.as_secs())]
    pub(crate) transaction_timeout: u64,
    /// Threads that run tenant SQL (default: 16 per core, at least 16).
    #[arg(long, env = "ATOLL_SQL_THREADS")]
    pub(crate) sql_threads: Option<usize>,
    /// Largest string or blob one statement may make or read, in bytes (SQLITE_TOOBIG).
    #[arg(long, env = "ATOLL_MAX_VALUE_SIZE", default_value_t = SandboxSettings::default().max_value_bytes)]
    pub(crate) max_value_size: usize,
    /// Largest temporary database (temp tables) of one connection, in bytes (SQLITE_FULL).
    #[arg(long, env = "ATOLL_MAX_TEMP_SIZE", default_value_t = SandboxSettings::default().max_temp_bytes)]
    pub(crate) max_temp_size: u64,
    /// Most memory of the SQL engine one statement may take (its sorts, windows, grouping
    /// keys, values), in bytes; past it the statement fails (SQLITE_NOMEM).
    #[arg(long, env = "ATOLL_MAX_STATEMENT_MEMORY", default_value_t = SandboxSettings::default().max_statement_memory)]
    pub(crate) max_statement_memory: u64,
    /// SQLite page cache of each database connection, in bytes.
    #[arg(long, env = "ATOLL_PAGE_CACHE_SIZE", default_value_t = SandboxSettings::default().page_cache_bytes)]
    pub(crate) page_cache_size: u64,
    /// Memory the node's idle database connections (its warm databases) may hold together,
    /// in bytes. Default: a sixteenth of the machine's memory (or of its cgroup's limit).
    #[arg(long, env = "ATOLL_WARM_MEMORY", default_value_t = WarmBudget::of_machine().memory_bytes)]
    pub(crate) warm_memory: u64,
    /// File descriptors the node's idle database connections may hold together (three
    /// each at most). Default: three quarters of the process's open-files limit (at least
    /// 4,096 left to the rest when the limit allows, never under half); idle
    /// connections are closed early when the process runs short of descriptors.
    #[arg(long, env = "ATOLL_WARM_FILES", default_value_t = WarmBudget::of_machine().files)]
    pub(crate) warm_files: u64,
    /// At most this many idle database connections, over all databases of the node (below
    /// what `--warm-files` allows). Default: no limit besides the two above.
    #[arg(long, env = "ATOLL_MAX_IDLE_CONNECTIONS")]
    pub(crate) max_idle_connections: Option<usize>,
    #[command(flatten)]
    pub(crate) connections: ConnectionArgs,
}

impl DbLimitArgs {
    pub(crate) fn warm_budget(&self) -> WarmBudget {
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
    pub(crate) tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert` (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "ATOLL_TLS_KEY", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
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

/// A timeout flag: whole seconds, at least one.
pub(crate) fn seconds(value: u64) -> std::time::Duration {
    std::time::Duration::from_secs(value.max(1))
}

impl CommonArgs {
    pub(crate) fn config(&self) -> anyhow::Result<ControlConfig> {
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

    pub(crate) fn init_logging(&self) {
        crate::logging::init(&self.log, self.log_format);
    }
}

/// Prometheus metrics of the process.
#[derive(Args, Clone, Debug)]
pub(crate) struct MetricsArgs {
    /// Serve Prometheus metrics at `GET /metrics` on this address, e.g. `127.0.0.1:9464`
    /// (off unless set: the figures show every tenant's traffic, so keep the address
    /// internal).
    #[arg(long, env = "ATOLL_METRICS_LISTEN")]
    pub(crate) metrics_listen: Option<SocketAddr>,
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
        tokio::spawn(atoll_http::metrics::serve(
            listener,
            super::shutdown_signal(),
        ));
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
    pub(crate) storage_url: Option<String>,
    /// When a commit is acknowledged: `lag` (once in the node's WAL; object storage has it
    /// within --durability-lag) or `sync` (only once object storage has it). A database's
    /// own `durability` setting overrides it.
    #[arg(long, env = "ATOLL_DURABILITY", value_enum, default_value_t = DurabilityArg::Lag)]
    pub(crate) durability: DurabilityArg,
    /// The longest a commit waits to be shipped in `lag` mode (seconds, fractions allowed):
    /// what a lost disk can lose at most.
    #[arg(long, env = "ATOLL_DURABILITY_LAG", default_value_t = 1.0)]
    pub(crate) durability_lag: f64,
    /// Days of history kept restorable for databases whose plan names none.
    #[arg(long, env = "ATOLL_PITR_RETENTION_DAYS", default_value_t = 30)]
    pub(crate) pitr_retention_days: u32,
    /// In `lag` mode, once a commit has waited this many seconds for object storage
    /// (unreachable, or far behind), writes are refused with `DURABILITY_UNAVAILABLE`
    /// until it has caught up; reads go on. Bounds what a lost disk can lose.
    #[arg(long, env = "ATOLL_MAX_UNSHIPPED_SECS", default_value_t = 300)]
    pub(crate) max_unshipped_secs: u64,
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
