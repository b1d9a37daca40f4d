//! The `atoll` binary's server commands, run as a user would: `atoll dev` (first start,
//! restart, environment variables) and `atoll serve` / `atoll migrate` on PostgreSQL.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_atoll");

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "atoll-{name}-{}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A running server that is killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_healthy(url: &str, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(response) = reqwest::get(format!("{url}/health")).await {
            if response.status() == 200 {
                return;
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("server exited early with {status}");
        }
        assert!(Instant::now() < deadline, "server did not become healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start(args: &[&str], envs: &[(&str, String)], port: u16) -> Server {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (key, value) in envs {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("start atoll");
    let url = format!("http://127.0.0.1:{port}");
    wait_healthy(&url, &mut child).await;
    Server { child, url }
}

async fn get(url: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn read_token(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("admin.token"))
        .unwrap()
        .trim()
        .to_string()
}

#[tokio::test]
async fn dev_bootstraps_once_and_keeps_everything_across_restarts() {
    let dir = temp_dir("dev");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "dev",
        "--data-dir",
        dir.to_str().unwrap(),
        "--listen",
        &listen,
        "--db-listen",
        "127.0.0.1:0",
    ];

    let mut server = start(&args, &[], port).await;
    let token = read_token(&dir);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("admin.token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mode = std::fs::metadata(dir.join("admin.password"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (status, user) = get(&format!("{}/v1/user", server.url), &token).await;
    assert_eq!(status, 200);
    assert_eq!(user["user"]["username"], "admin");
    assert_eq!(user["user"]["admin"], true);
    let (_, groups) = get(&format!("{}/v1/groups", server.url), &token).await;
    assert_eq!(groups["groups"][0]["name"], "default");

    // Something to find after the restart.
    let created = reqwest::Client::new()
        .post(format!("{}/v1/groups", server.url))
        .bearer_auth(&token)
        .body(r#"{"name":"kept","location":"local"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);

    // The first start prints the URL and the token.
    server.child.kill().unwrap();
    let output = server.child.wait_with_output_ignoring_kill();
    assert!(
        output.contains(&format!("API URL:   {}", server.url)),
        "{output}"
    );
    assert!(output.contains(&token), "the token is printed");
    assert!(output.contains("(created)"));
    assert!(
        output.contains(&format!("Console:   {}/console/", server.url)),
        "{output}"
    );
    drop(server);

    let server = start(&args, &[], port).await;
    assert_eq!(read_token(&dir), token, "a still-valid token is kept");
    let (status, groups) = get(&format!("{}/v1/groups", server.url), &token).await;
    assert_eq!(status, 200);
    let names: Vec<_> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["default", "kept"]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn every_dev_flag_has_an_environment_variable() {
    let dir = temp_dir("env");
    let port = free_port();
    let envs = [
        ("ATOLL_DATA_DIR", dir.to_str().unwrap().to_string()),
        ("ATOLL_LISTEN", format!("127.0.0.1:{port}")),
        ("ATOLL_DB_LISTEN", "127.0.0.1:0".to_string()),
        ("ATOLL_USERNAME", "root".to_string()),
        ("ATOLL_PASSWORD", "a-long-password".to_string()),
        ("ATOLL_LOCATIONS", "local=Here,edge=The edge".to_string()),
    ];
    let server = start(&["dev"], &envs, port).await;
    let token = read_token(&dir);
    let (_, user) = get(&format!("{}/v1/user", server.url), &token).await;
    assert_eq!(user["user"]["username"], "root");
    assert!(
        !dir.join("admin.password").exists(),
        "no password is generated when one is given"
    );
    let (_, locations) = get(&format!("{}/v1/locations", server.url), &token).await;
    assert_eq!(
        locations["locations"],
        serde_json::json!({"local": "Here", "edge": "The edge"})
    );
    let login = reqwest::Client::new()
        .post(format!("{}/v1/auth/login", server.url))
        .body(r#"{"username":"root","password":"a-long-password"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 200);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn serve_and_migrate_on_postgres() {
    let Some(url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let migrated = Command::new(BIN)
        .args(["migrate", "--database-url", &url])
        .output()
        .unwrap();
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    assert!(String::from_utf8_lossy(&migrated.stdout).contains("Postgres"));

    let port = free_port();
    let node_dir = temp_dir("serve-node");
    let server = start(
        &[
            "serve",
            "--database-url",
            &url,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--db-listen",
            "127.0.0.1:0",
            "--data-dir",
            node_dir.to_str().unwrap(),
        ],
        &[(
            "ATOLL_SECRETS_KEY",
            atoll_meta::SecretsKey::generate_base64(),
        )],
        port,
    )
    .await;

    let (status, body) = get(&format!("{}/v1/user", server.url), "atoll_nothing").await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")));
    drop(server);
}

#[test]
fn refuses_a_location_outside_the_catalog() {
    let output = Command::new(BIN)
        .args([
            "serve",
            "--database-url",
            "/nonexistent/x.db",
            "--location",
            "mars",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("mars"));
}

/// A second `atoll dev` whose ports are taken fails with the flag that moves it, before it
/// writes anything: its (new) data directory must not be left with a `meta.db`.
#[test]
fn a_second_dev_on_a_busy_port_hints_listen_and_leaves_no_store() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_address = taken.local_addr().unwrap().to_string();
    for (flag, other_flag) in [("--listen", "--db-listen"), ("--db-listen", "--listen")] {
        let dir = temp_dir("busy");
        let output = Command::new(BIN)
            .args(["dev", "--data-dir", dir.to_str().unwrap(), flag])
            .arg(&taken_address)
            .arg(other_flag)
            .arg(format!("127.0.0.1:{}", free_port()))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("cannot listen on {taken_address}"))
                && stderr.contains(&format!("`{flag} 127.0.0.1:0`")),
            "{stderr}"
        );
        assert!(
            !dir.join("meta.db").exists(),
            "{flag}: a meta.db was left behind"
        );
        assert!(!dir.exists(), "{flag}: the data directory was created");
    }
}

trait OutputAfterKill {
    fn wait_with_output_ignoring_kill(&mut self) -> String;
}

impl OutputAfterKill for Child {
    fn wait_with_output_ignoring_kill(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut out = String::new();
        if let Some(stdout) = self.stdout.as_mut() {
            let _ = stdout.read_to_string(&mut out);
        }
        out
    }
}
