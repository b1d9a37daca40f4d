//! `--tls-cert` / `--tls-key` on the binary: `atoll dev` over https with the CLI printing
//! `libsql://` URLs (and trusting the certificate through SSL_CERT_FILE), and `atoll serve`
//! managing an `atoll node` whose listeners speak TLS.

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{atoll_env, free_port, start_dev_with, temp_dir, BIN};

/// A self-signed certificate for `localhost` and `127.0.0.1`, written as PEM files.
struct Certificate {
    dir: PathBuf,
    pem: String,
}

impl Certificate {
    fn write(name: &str) -> Certificate {
        let generated =
            rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
                .unwrap();
        let dir = temp_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        let pem = generated.cert.pem();
        std::fs::write(dir.join("cert.pem"), &pem).unwrap();
        std::fs::write(dir.join("key.pem"), generated.key_pair.serialize_pem()).unwrap();
        Certificate { dir, pem }
    }

    fn cert_path(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    fn key_path(&self) -> PathBuf {
        self.dir.join("key.pem")
    }

    fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(self.pem.as_bytes()).unwrap())
            .build()
            .unwrap()
    }
}

impl Drop for Certificate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the CLI trusting `certificate` (SSL_CERT_FILE); must succeed; answers stdout.
fn cli(config: &Path, certificate: &Certificate, args: &[&str]) -> String {
    let output = atoll_env(
        config,
        args,
        &[("SSL_CERT_FILE", certificate.cert_path().to_str().unwrap())],
    );
    assert!(
        output.status.success(),
        "atoll {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn dev_with_tls_serves_https_and_the_cli_prints_libsql_urls() {
    let certificate = Certificate::write("tls-cert");
    let cert = certificate.cert_path();
    let key = certificate.key_path();
    let server = start_dev_with(
        "tls-dev",
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        "https",
        certificate.client(),
    )
    .await;
    assert!(server.url.starts_with("https://"));
    let config = temp_dir("tls-cli");

    // A CLI that does not trust the certificate says what to do.
    let refused = atoll_env(
        &config,
        &[
            "auth",
            "login",
            "--api-url",
            &server.url,
            "--username",
            "admin",
        ],
        &[("ATOLL_PASSWORD", &server.password())],
    );
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("SSL_CERT_FILE"), "{message}");

    let password = server.password();
    let output = atoll_env(
        &config,
        &[
            "auth",
            "login",
            "--api-url",
            &server.url,
            "--username",
            "admin",
        ],
        &[
            ("ATOLL_PASSWORD", &password),
            ("SSL_CERT_FILE", cert.to_str().unwrap()),
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    cli(&config, &certificate, &["db", "create", "shop"]);

    // With TLS the URL for clients is libsql:// in the path form; the HTTP URL is https.
    let url = cli(&config, &certificate, &["db", "show", "shop", "--url"]);
    let http_url = cli(&config, &certificate, &["db", "show", "shop", "--http-url"]);
    let (url, http_url) = (url.trim(), http_url.trim());
    assert!(http_url.starts_with("https://127.0.0.1:"), "{http_url}");
    assert!(http_url.ends_with("/db/shop-admin/"), "{http_url}");
    assert_eq!(url, http_url.replacen("https://", "libsql://", 1));
    let instances = cli(
        &config,
        &certificate,
        &["db", "show", "shop", "--instance-urls"],
    );
    assert!(instances.contains(url), "{instances}");

    // The CLI's own data commands go over https too.
    cli(
        &config,
        &certificate,
        &[
            "db",
            "shell",
            "shop",
            "CREATE TABLE t (x); INSERT INTO t VALUES (7)",
        ],
    );
    let rows = cli(
        &config,
        &certificate,
        &["db", "shell", "shop", "--mode", "csv", "SELECT x FROM t"],
    );
    assert!(rows.contains('7'), "{rows}");
    let _ = std::fs::remove_dir_all(&config);
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_healthy(client: &reqwest::Client, url: &str, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if client
            .get(format!("{url}/health"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("process exited early with {status}");
        }
        assert!(Instant::now() < deadline, "{url} did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn serve_manages_a_node_over_https() {
    const SECRET: &str = "a-node-secret-for-tests";
    let certificate = Certificate::write("tls-node-cert");
    let client = certificate.client();
    let dir = temp_dir("tls-node");
    let (db_port, admin_port, api_port) = (free_port(), free_port(), free_port());
    // The node takes its certificate from the environment, both listeners use it.
    let mut node = Command::new(BIN)
        .args(["node", "--location", "local"])
        .args(["--listen", &format!("127.0.0.1:{db_port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
        .arg("--data-dir")
        .arg(dir.join("node"))
        .env("ATOLL_NODE_SECRET", SECRET)
        .env("ATOLL_TLS_CERT", certificate.cert_path())
        .env("ATOLL_TLS_KEY", certificate.key_path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_healthy(&client, &format!("https://127.0.0.1:{db_port}"), &mut node).await;
    let _node = Process(node);

    // The control plane trusts the node's certificate through SSL_CERT_FILE.
    let api = format!("http://127.0.0.1:{api_port}");
    let mut serve = Command::new(BIN)
        .arg("serve")
        .arg("--database-url")
        .arg(format!("sqlite://{}", dir.join("meta.db").display()))
        .args(["--listen", &format!("127.0.0.1:{api_port}")])
        .args(["--node", &format!("https://127.0.0.1:{admin_port}")])
        .env("ATOLL_NODE_SECRET", SECRET)
        .env("ATOLL_USERNAME", "root")
        .env("ATOLL_PASSWORD", "a-long-password")
        .env("SSL_CERT_FILE", certificate.cert_path())
        // `serve` refuses to start without a key sealing the signing keys.
        .env(
            "ATOLL_SECRETS_KEY",
            "c2VjcmV0cy1rZXktb2YtdGhlLXRscy10ZXN0LTMyYmI=",
        )
        .env_remove("ATOLL_TLS_CERT")
        .env_remove("ATOLL_TLS_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_healthy(&reqwest::Client::new(), &api, &mut serve).await;
    let _serve = Process(serve);

    let plain = reqwest::Client::new();
    let login: Value = plain
        .post(format!("{api}/v1/auth/login"))
        .json(&json!({"username": "root", "password": "a-long-password"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = login["token"].as_str().expect("login token");
    let created = plain
        .post(format!("{api}/v1/databases"))
        .bearer_auth(token)
        .json(&json!({"name": "remote", "group": "default"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200, "{}", created.text().await.unwrap());
    let got: Value = plain
        .get(format!("{api}/v1/databases/remote"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let http_url = got["database"]["http_url"].as_str().unwrap();
    assert_eq!(
        http_url,
        format!("https://127.0.0.1:{db_port}/db/remote-root/")
    );
    let jwt: Value = plain
        .post(format!("{api}/v1/databases/remote/auth/tokens"))
        .bearer_auth(token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answer: Value = client
        .post(format!("{http_url}v2/pipeline"))
        .bearer_auth(jwt["jwt"].as_str().unwrap())
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": "SELECT 40 + 2"}}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer["results"][0]["response"]["result"]["rows"][0][0]["value"], "42",
        "{answer}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
