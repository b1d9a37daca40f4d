//! The server commands: `atoll dev`, `atoll serve`, `atoll migrate` (and `atoll node`, in
//! `node.rs`).

use anyhow::Context;
use atoll_control::{AppState, DataPlane};
use atoll_data::node::NodeSettings;
use atoll_data::DataLimits;
use atoll_http::listener::Listener;
use atoll_http::tls::ServerTls;
use atoll_meta::Store;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;

mod args;

pub use args::*;

/// `https` when the listener has TLS, else `http`.
pub(crate) fn url_scheme(tls: &Option<ServerTls>) -> &'static str {
    if tls.is_some() {
        "https"
    } else {
        "http"
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
