//! What the CLI tests share: a running `atoll dev` on loopback ports, killed and removed
//! when dropped, and the built client run with its settings in a directory of its own.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod cluster;

pub const BIN: &str = env!("CARGO_BIN_EXE_atoll");

/// A loopback port nobody listens on, for a server a test starts as a process. Taken below
/// Linux's ephemeral range (32768–60999), where the kernel picks the local ports of outgoing
/// connections: a port from there (what binding port 0 gives) could become a client
/// connection's own before the server bound it, and a test failed now and then on a loaded
/// machine. Each port is handed out once per test process; test binaries run one at a time.
pub fn free_port() -> u16 {
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    let start = std::process::id().wrapping_mul(7_919).wrapping_add(nanos) % COUNT;
    for step in 0..COUNT {
        let port = (FIRST + (start + step) % COUNT) as u16;
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + COUNT);
}

/// Waits until `port` on loopback can be bound again: after SIGKILLing an `atoll dev` or
/// `atoll node` (its supervisor), the serving process it started dies a moment later, still
/// holding the ports, and may even answer a request or two before it does. A test that
/// starts the server again, or looks at what the dead one left, waits for this first.
pub fn wait_until_free(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} is still held");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A path for a fresh temporary directory (not created). Unique within the process by a
/// counter: a port alone can come back for two tests at once, and the second would remove
/// the first's directory under it (a CI run lost `atoll dev`'s `admin.password` so).
pub fn temp_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "atoll-{name}-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        free_port()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A running `atoll dev`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub data_dir: PathBuf,
    port: u16,
    args: Vec<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Server {
    pub fn password(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("admin.password"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// Creates database `name` in the admin's `default` group through the API; answers
    /// its `http_url` and a full-access database token.
    pub async fn database_with_token(&self, name: &str) -> (String, String) {
        database_with_token(&self.url, &self.admin_token(), name).await
    }

    pub fn admin_token(&self) -> String {
        admin_token(&self.data_dir)
    }
}

/// The admin token `atoll dev` wrote in `data_dir`.
pub fn admin_token(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("admin.token"))
        .unwrap()
        .trim()
        .to_string()
}

/// Creates database `name` in the admin's `default` group through the API at `url`;
/// answers its `http_url` and a full-access database token.
pub async fn database_with_token(url: &str, token: &str, name: &str) -> (String, String) {
    let client = reqwest::Client::new();
    let created: serde_json::Value = client
        .post(format!("{url}/v1/databases"))
        .bearer_auth(token)
        .json(&serde_json::json!({"name": name, "group": "default"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["database"]["Name"], name, "{created}");
    database_url_and_token(url, token, name).await
}

/// Existing database `name`'s `http_url` and a full-access database token for it, through
/// the API at `url` with `token`.
pub async fn database_url_and_token(url: &str, token: &str, name: &str) -> (String, String) {
    let client = reqwest::Client::new();
    let details: serde_json::Value = client
        .get(format!("{}/v1/databases/{name}", url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let minted: serde_json::Value = client
        .post(format!("{}/v1/databases/{name}/auth/tokens", url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        details["database"]["http_url"]
            .as_str()
            .unwrap()
            .to_string(),
        minted["jwt"].as_str().unwrap().to_string(),
    )
}

/// Starts `atoll dev` in a temporary data directory and waits until it is healthy.
pub async fn start_dev(name: &str) -> Server {
    start_dev_with(name, &[], "http", reqwest::Client::new()).await
}

/// As [`start_dev`], with more flags; the API is at `<scheme>://…` and `client` (which
/// must trust the server's certificate with `https`) asks whether it is healthy.
pub async fn start_dev_with(
    name: &str,
    args: &[&str],
    scheme: &str,
    client: reqwest::Client,
) -> Server {
    let data_dir = temp_dir(name);
    let port = free_port();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let url = format!("{scheme}://127.0.0.1:{port}");
    let child = spawn_dev(&data_dir, port, &args, &url, &client).await;
    Server {
        child,
        url,
        data_dir,
        port,
        args,
    }
}

impl Server {
    /// Kills the server (SIGKILL: whatever it held only in memory is gone) and starts it
    /// again on the same data directory, port and flags (plain HTTP only). Its data plane
    /// listens on another port afterwards: ask for databases' URLs again.
    pub async fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        wait_until_free(self.port);
        self.child = spawn_dev(
            &self.data_dir,
            self.port,
            &self.args,
            &self.url,
            &reqwest::Client::new(),
        )
        .await;
    }
}

async fn spawn_dev(
    data_dir: &Path,
    port: u16,
    args: &[String],
    url: &str,
    client: &reqwest::Client,
) -> Child {
    let mut child = Command::new(BIN)
        .arg("dev")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--db-listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("ATOLL_PASSWORD")
        .env_remove("ATOLL_USERNAME")
        .env_remove("ATOLL_SECRETS_KEY")
        .env_remove("ATOLL_SECRETS_KEY_FILE")
        .env_remove("ATOLL_PREVIOUS_SECRETS_KEYS")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start atoll dev");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(response) = client.get(format!("{url}/health")).send().await {
            if response.status() == 200 {
                break;
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("atoll dev exited early with {status}");
        }
        assert!(
            Instant::now() < deadline,
            "atoll dev did not become healthy"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

/// Runs the client with its settings in `config` and nothing from the caller's environment.
pub fn atoll(config: &Path, args: &[&str]) -> Output {
    atoll_env(config, args, &[])
}

pub fn atoll_env(config: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("ATOLL_CONFIG_DIR", config)
        .env_remove("ATOLL_API_URL")
        .env_remove("ATOLL_API_TOKEN")
        .env_remove("ATOLL_PASSWORD")
        .env_remove("ATOLL_USERNAME")
        .stdin(Stdio::null());
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().expect("run atoll")
}

/// Runs a command that must succeed; answers its stdout.
pub fn ok(config: &Path, args: &[&str]) -> String {
    let output = atoll(config, args);
    assert!(
        output.status.success(),
        "atoll {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
