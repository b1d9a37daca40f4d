//! `atoll node`: one data node, for production set-ups where `atoll serve` manages many.

use crate::server::{
    hostname_suffix, open_node, shutdown_signal, url_scheme, DbLimitArgs, HostArgs, TlsArgs,
};
use anyhow::{bail, Context};
use atoll_http::listener::Listener;
use atoll_types::node::NodeInfo;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Clone)]
pub struct NodeArgs {
    /// The location this node serves (a code of the control plane's catalog).
    #[arg(long, env = "ATOLL_LOCATION")]
    location: String,
    /// The node's name (unique among the control plane's nodes); defaults to the location.
    #[arg(long, env = "ATOLL_NODE_NAME")]
    name: Option<String>,
    /// Address of the database hosts.
    #[arg(long, env = "ATOLL_LISTEN", default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
    /// Address of the node admin API (reach it from the control plane only).
    #[arg(long, env = "ATOLL_ADMIN_LISTEN", default_value = "127.0.0.1:8082")]
    admin_listen: SocketAddr,
    /// Serve in this one process, without the supervisor that starts the serving process
    /// again within a second after a crash (for a service manager that restarts it).
    #[arg(long, env = "ATOLL_NO_SUPERVISE")]
    no_supervise: bool,
    /// Directory of the node's databases.
    #[arg(long, env = "ATOLL_DATA_DIR", default_value = "./atoll-node")]
    data_dir: PathBuf,
    /// Secret the control plane must present (`atoll serve --node-secret`). Required: the
    /// admin API can create and delete databases.
    #[arg(long, env = "ATOLL_NODE_SECRET", hide_env_values = true)]
    node_secret: Option<String>,
    /// Base URL clients use to reach this node's database hosts; defaults to
    /// `http://<listen>` (`https://` with `--tls-cert`).
    #[arg(long, env = "ATOLL_PUBLIC_URL")]
    public_url: Option<String>,
    /// Control-plane replicas (`atoll serve`) this node registers with and sends its
    /// heartbeats to, every 5 s (comma-separated; the first that answers takes it). Without
    /// it, the node is only known through `atoll serve --node`.
    #[arg(long, env = "ATOLL_CONTROL_PLANE", value_delimiter = ',')]
    control_plane: Vec<String>,
    /// Where the control plane reaches this node's admin API; defaults to
    /// `http://<admin-listen>` (`https://` with `--tls-cert`).
    #[arg(long, env = "ATOLL_ADMIN_URL")]
    admin_url: Option<String>,
    /// This node's own database listener as the other nodes reach it, when `--public-url`
    /// is shared by the nodes of the location (a DNS name or load balancer in front of
    /// them); defaults to `http://<listen>`.
    #[arg(long, env = "ATOLL_DIRECT_URL")]
    direct_url: Option<String>,
    /// How many databases this node takes at most (0: no bound).
    #[arg(long, env = "ATOLL_CAPACITY", default_value_t = 0)]
    capacity: u64,
    /// Hours a quarantined database (one its metadata store did not know) is kept before
    /// `atoll admin quarantine purge` may remove it.
    #[arg(long, env = "ATOLL_QUARANTINE_RETENTION_HOURS", default_value_t = 168)]
    quarantine_retention_hours: u64,
    #[command(flatten)]
    hosts: HostArgs,
    #[command(flatten)]
    limits: DbLimitArgs,
    /// TLS of both listeners: the database hosts and the node admin API.
    #[command(flatten)]
    tls: TlsArgs,
    /// Log filter.
    #[arg(long, env = "ATOLL_LOG", default_value = "info")]
    log: String,
    /// Log format: `text` (coloured only on a terminal) or `json` (one object a line).
    #[arg(long, env = "ATOLL_LOG_FORMAT", value_enum, default_value_t = crate::logging::LogFormat::Text)]
    log_format: crate::logging::LogFormat,
    #[command(flatten)]
    metrics: crate::server::MetricsArgs,
    #[command(flatten)]
    storage: crate::server::StorageArgs,
}

pub async fn node(args: NodeArgs) -> anyhow::Result<()> {
    crate::file_modes::restrict_new_files();
    crate::logging::init(&args.log, args.log_format);
    atoll_http::listener::raise_open_files_limit();
    let listeners = [
        crate::supervisor::Listen {
            flag: "--listen",
            address: args.listen,
            what: "the database hosts",
        },
        crate::supervisor::Listen {
            flag: "--admin-listen",
            address: args.admin_listen,
            what: "the node admin API",
        },
    ];
    if let Some(code) = crate::supervisor::supervise(args.no_supervise, &listeners).await? {
        std::process::exit(code);
    }
    args.metrics.start().await?;
    crate::supervisor::report_restarts();
    let secret = args.node_secret.clone().unwrap_or_default();
    if secret.len() < 16 {
        bail!("--node-secret (ATOLL_NODE_SECRET) must be set to at least 16 characters: the admin API manages every database of the node");
    }
    atoll_types::names::validate_resource_name("location", &args.location)
        .map_err(anyhow::Error::msg)?;
    let mut limits = args.limits.limits()?;
    let node_name = args.name.clone().unwrap_or_else(|| args.location.clone());
    limits.node.storage = Some(args.storage.config(&args.data_dir, &node_name)?);
    let tls = args.tls.server_tls()?;
    crate::file_modes::tighten_data_dir(&args.data_dir);
    let node = open_node(&args.data_dir, limits.node.clone()).await?;
    if args.control_plane.is_empty() && node.lease().is_required() {
        // Leases come with heartbeats: a node that sends none (started without
        // --control-plane) would never commit again. Its control plane reaches it with
        // --node and fails it over only on the operator's word (`force`).
        tracing::warn!("this node wrote under a lease, but it has no --control-plane to renew one: it writes without");
        node.lease().waive()?;
    }
    let listener = crate::server::bind(args.listen, "the database hosts", "--listen").await?;
    let admin_listener =
        crate::server::bind(args.admin_listen, "the node admin API", "--admin-listen").await?;
    let address = listener.local_addr()?;
    let admin_address = admin_listener.local_addr()?;
    let direct_url = format!("{}://{address}", url_scheme(&tls));
    let info = NodeInfo {
        name: args.name.clone().unwrap_or_else(|| args.location.clone()),
        location: args.location.clone(),
        hostname_suffix: hostname_suffix(&args.hosts.db_domain, address),
        http_url: args
            .public_url
            .clone()
            .unwrap_or_else(|| format!("{}://{address}", url_scheme(&tls))),
        databases: node.database_count(),
        direct_url: args.direct_url.clone().unwrap_or(direct_url),
    };
    tracing::info!(
        name = %info.name,
        location = %info.location,
        databases = %address,
        admin = %admin_listener.local_addr()?,
        tls = tls.is_some(),
        "data node listening"
    );
    // With control planes to ask, a request for a database another node holds is forwarded
    // there: every node of a location answers for all of its databases.
    let forwarder = if args.control_plane.is_empty() {
        None
    } else {
        Some(Arc::new(atoll_data::forward::Forwarder::new(
            &node_name,
            args.control_plane.clone(),
            &secret,
        )?))
    };
    let data_state = atoll_data::DataPlaneState::forwarding(
        Arc::clone(&node),
        &args.hosts.db_domain,
        limits,
        forwarder,
    );
    let admin_state = atoll_data::admin::AdminState::new(
        Arc::clone(&node),
        info,
        &secret,
        std::time::Duration::from_secs(args.quarantine_retention_hours.saturating_mul(3600)),
    )
    .context("cannot read the node's store stamp")?;
    if !args.control_plane.is_empty() {
        atoll_data::registration::spawn(
            Arc::clone(&admin_state),
            atoll_data::registration::Registration {
                control_planes: args.control_plane.clone(),
                secret: secret.clone(),
                info: admin_state.info.clone(),
                admin_url: args
                    .admin_url
                    .clone()
                    .unwrap_or_else(|| format!("{}://{admin_address}", url_scheme(&tls))),
                capacity: args.capacity,
            },
        );
    }
    let admin = tokio::spawn(atoll_data::admin::serve(
        Listener::new(admin_listener, tls.clone()),
        admin_state,
        shutdown_signal(),
    ));
    // Database hosts ask for TLS client certificates (an alternative to a token).
    let tls = tls.map(|t| t.accepting_client_certificates()).transpose()?;
    atoll_data::serve(Listener::new(listener, tls), data_state, shutdown_signal()).await?;
    admin.abort();
    // Whatever is committed goes to object storage before the process ends.
    atoll_data::node_storage::flush_all(&node).await;
    tracing::info!("stopped");
    Ok(())
}
