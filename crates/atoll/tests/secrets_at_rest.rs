//! Secrets at rest, run as an operator would (issue 10, finding 10): `atoll dev` keeps
//! every file owner-only and the signing keys in `meta.db` sealed under its secrets key;
//! a data directory from an older version (0644 files, plaintext keys) is tightened and
//! sealed at start; a wrong key stops the start with a clear message; `atoll serve` will
//! not run without a key unless told to keep keys in the clear.

#![cfg(unix)]

mod support;

use support::free_port;

use atoll_meta::{SecretsKey, SecretsKeyring, Store};
use serde_json::{json, Value};
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A running `atoll dev`, killed when dropped. Its log goes to a file beside the data
/// directory (not in it: the test checks every file in there).
struct Dev {
    child: Child,
    url: String,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_path(data_dir: &Path) -> PathBuf {
    data_dir.with_extension("log")
}

fn dev_command(data_dir: &Path, port: u16, db_port: u16, extra: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("dev")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--db-listen", &format!("127.0.0.1:{db_port}")])
        .args(extra)
        .env_remove("ATOLL_PASSWORD")
        .env_remove("ATOLL_USERNAME")
        .env_remove("ATOLL_SECRETS_KEY")
        .env_remove("ATOLL_SECRETS_KEY_FILE")
        .env_remove("ATOLL_PREVIOUS_SECRETS_KEYS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(log_path(data_dir)).unwrap());
    command
}

async fn start_dev(data_dir: &Path, port: u16, db_port: u16, extra: &[&str]) -> Dev {
    let mut child = dev_command(data_dir, port, db_port, extra).spawn().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(response) = reqwest::get(format!("{url}/health")).await {
            if response.status() == 200 {
                break;
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "atoll dev exited early with {status}: {}",
                std::fs::read_to_string(log_path(data_dir)).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "atoll dev did not become healthy"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Dev { child, url }
}

/// Runs a server command that must fail at start; answers its log.
fn start_fails(mut command: Command, log: &Path) -> String {
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started when it should have refused to");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    std::fs::read_to_string(log).unwrap()
}

async fn call(method: reqwest::Method, url: &str, token: &str, body: Value) -> Value {
    let response = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 200, "{url}: {body}");
    body
}

/// Runs SQL with a database token; the Hrana result of the last statement.
async fn query(db_url: &str, jwt: &str, statements: &[&str]) -> Result<Value, String> {
    let mut requests: Vec<Value> = statements
        .iter()
        .map(|sql| json!({"type": "execute", "stmt": {"sql": sql}}))
        .collect();
    requests.push(json!({"type": "close"}));
    let response = reqwest::Client::new()
        .post(format!("{db_url}v2/pipeline"))
        .bearer_auth(jwt)
        .json(&json!({ "requests": requests }))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let last = &body["results"][statements.len() - 1];
    match (status.as_u16(), last["type"].as_str()) {
        (200, Some("ok")) => Ok(last["response"]["result"].clone()),
        _ => Err(format!("{status}: {body}")),
    }
}

/// A database with a table in it, and tokens signed by its key and its group's key.
struct Tenant {
    db_id: String,
    db_url: String,
    db_token: String,
    group_token: String,
}

async fn create_tenant(dev: &Dev, admin_token: &str) -> Tenant {
    let created = call(
        reqwest::Method::POST,
        &format!("{}/v1/databases", dev.url),
        admin_token,
        json!({"name": "vault"}),
    )
    .await;
    let db_id = created["database"]["DbId"].as_str().unwrap().to_string();
    let got = call(
        reqwest::Method::GET,
        &format!("{}/v1/databases/vault", dev.url),
        admin_token,
        Value::Null,
    )
    .await;
    let db_url = got["database"]["http_url"].as_str().unwrap().to_string();
    let db_token = call(
        reqwest::Method::POST,
        &format!("{}/v1/databases/vault/auth/tokens", dev.url),
        admin_token,
        json!({}),
    )
    .await["jwt"]
        .as_str()
        .unwrap()
        .to_string();
    let group_token = call(
        reqwest::Method::POST,
        &format!(
            "{}/v1/organizations/admin/groups/default/auth/tokens",
            dev.url
        ),
        admin_token,
        json!({}),
    )
    .await["jwt"]
        .as_str()
        .unwrap()
        .to_string();
    query(
        &db_url,
        &db_token,
        &[
            "CREATE TABLE notes (body TEXT)",
            "INSERT INTO notes VALUES ('kept')",
        ],
    )
    .await
    .unwrap();
    Tenant {
        db_id,
        db_url,
        db_token,
        group_token,
    }
}

/// Both tokens still work: their keys survived (and opened) whatever happened.
async fn tokens_still_verify(tenant: &Tenant) {
    for token in [&tenant.db_token, &tenant.group_token] {
        let result = query(&tenant.db_url, token, &["SELECT body FROM notes"])
            .await
            .unwrap();
        assert_eq!(result["rows"][0][0]["value"], "kept");
    }
}

fn admin_token(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("admin.token"))
        .unwrap()
        .trim()
        .to_string()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

/// Every directory under `dir` (itself included) is 0700 and every file 0600. Answers
/// the files seen.
fn assert_owner_only(dir: &Path) -> Vec<PathBuf> {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            files.extend(assert_owner_only(&path));
        } else {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
            files.push(path);
        }
    }
    files
}

/// Sets every directory under `dir` to 0755 and every file to 0644, as an older version
/// left them.
fn loosen(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            loosen(&path);
        } else {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
}

/// The metadata store's files as they are on disk, all together.
fn store_bytes(data_dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for name in ["meta.db", "meta.db-wal", "meta.db-shm"] {
        if let Ok(content) = std::fs::read(data_dir.join(name)) {
            bytes.extend(content);
        }
    }
    bytes
}

/// A log without its terminal colour codes (`ESC [ … m`).
fn without_colours(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The private signing keys of the tenant's database and group, opened from the store
/// with the data directory's secrets key: `(id of that key, [database key, group key])`.
async fn private_keys(data_dir: &Path, db_id: &str) -> (String, Vec<String>) {
    let text = std::fs::read_to_string(data_dir.join("secrets.key")).unwrap();
    let key = SecretsKey::from_base64(text.lines().next().unwrap()).unwrap();
    let key_id = key.id().to_string();
    let store = Store::open_sqlite(&data_dir.join("meta.db"))
        .await
        .unwrap()
        .with_secrets(SecretsKeyring::new(key, Vec::new()));
    let db = store.database_by_id(db_id).await.unwrap().unwrap();
    let group = store.group_by_id(&db.group_id).await.unwrap().unwrap();
    assert!(!db.signing_key.is_empty() && !group.signing_key.is_empty());
    (key_id, vec![db.signing_key, group.signing_key])
}

/// Whether the store's files hold a private key, as text or as its raw bytes.
fn store_holds(data_dir: &Path, private_key: &str) -> bool {
    let bytes = store_bytes(data_dir);
    let raw = atoll_data::jwt::decode_signing_key(private_key)
        .unwrap()
        .to_bytes();
    contains(&bytes, private_key.as_bytes()) || contains(&bytes, &raw)
}

#[tokio::test]
async fn dev_keeps_files_owner_only_and_signing_keys_sealed() {
    let data_dir = temp_dir("sealed");
    let (port, db_port) = (free_port(), free_port());
    let dev = start_dev(&data_dir, port, db_port, &[]).await;
    let tenant = create_tenant(&dev, &admin_token(&data_dir)).await;

    // Every directory 0700, every file 0600: the store and its WAL, the admin
    // credentials, the secrets key, the database directory and its files.
    let files = assert_owner_only(&data_dir);
    let db_dir = data_dir.join("dbs").join(&tenant.db_id);
    for expected in [
        data_dir.join("meta.db"),
        data_dir.join("meta.db-wal"),
        data_dir.join("admin.token"),
        data_dir.join("admin.password"),
        data_dir.join("secrets.key"),
        db_dir.join("data"),
        db_dir.join("config.json"),
    ] {
        assert!(files.contains(&expected), "{} missing", expected.display());
    }

    // The private keys are in the store only sealed: neither their text nor their bytes
    // are anywhere in meta.db or its WAL, while their sealed form is.
    let (key_id, keys) = private_keys(&data_dir, &tenant.db_id).await;
    for key in &keys {
        assert!(
            !store_holds(&data_dir, key),
            "a private key is in the clear"
        );
    }
    assert!(contains(
        &store_bytes(&data_dir),
        format!("v1:{key_id}:").as_bytes()
    ));
    // The node holds the public halves only.
    let config = std::fs::read_to_string(db_dir.join("config.json")).unwrap();
    for key in &keys {
        let signing = atoll_data::jwt::decode_signing_key(key).unwrap();
        let public = atoll_data::jwt::encode_key(signing.verifying_key().as_bytes());
        assert!(config.contains(&public), "{config}");
        assert!(!config.contains(key.as_str()), "{config}");
    }

    // Restarted with the key given explicitly: the tokens still verify.
    drop(dev);
    let key_text = std::fs::read_to_string(data_dir.join("secrets.key")).unwrap();
    let key_text = key_text.lines().next().unwrap().to_string();
    let dev = start_dev(&data_dir, port, db_port, &["--secrets-key", &key_text]).await;
    tokens_still_verify(&tenant).await;
    drop(dev);

    // Restarted with another key: a clear refusal naming the key that is needed, and
    // never the keys themselves.
    let wrong = SecretsKey::generate_base64();
    let log = start_fails(
        dev_command(&data_dir, port, db_port, &["--secrets-key", &wrong]),
        &log_path(&data_dir),
    );
    assert!(
        log.contains(&format!("sealed with secrets key {key_id}")),
        "{log}"
    );
    assert!(!log.contains(&wrong) && !log.contains(&key_text), "{log}");

    // Without secrets.key (lost), a start refuses too, and tells to restore the file.
    let key_file = data_dir.join("secrets.key");
    let saved = std::fs::read(&key_file).unwrap();
    std::fs::remove_file(&key_file).unwrap();
    let log = start_fails(
        dev_command(&data_dir, port, db_port, &[]),
        &log_path(&data_dir),
    );
    assert!(log.contains("restore that file"), "{log}");
    assert!(!key_file.exists(), "the key made in its place is removed");
    std::fs::write(&key_file, saved).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    // Back with the right key (from the file): everything works.
    let dev = start_dev(&data_dir, port, db_port, &[]).await;
    tokens_still_verify(&tenant).await;
    drop(dev);
    let _ = std::fs::remove_dir_all(&data_dir);
    let _ = std::fs::remove_file(log_path(&data_dir));
}

#[tokio::test]
async fn an_older_data_directory_is_tightened_and_its_plaintext_keys_sealed() {
    let data_dir = temp_dir("upgrade");
    let (port, db_port) = (free_port(), free_port());
    let dev = start_dev(&data_dir, port, db_port, &[]).await;
    let tenant = create_tenant(&dev, &admin_token(&data_dir)).await;
    drop(dev);

    // Make it what an older version left: signing keys in the clear, no secrets key,
    // files 0644 and directories 0755.
    let (_, keys) = private_keys(&data_dir, &tenant.db_id).await;
    {
        let conn = rusqlite::Connection::open(data_dir.join("meta.db")).unwrap();
        let group_id: String = conn
            .query_row(
                "SELECT group_id FROM databases WHERE id = ?1",
                [&tenant.db_id],
                |row| row.get(0),
            )
            .unwrap();
        conn.execute(
            "UPDATE databases SET signing_key = ?2 WHERE id = ?1",
            [&tenant.db_id, &keys[0]],
        )
        .unwrap();
        conn.execute(
            "UPDATE org_groups SET signing_key = ?2 WHERE id = ?1",
            [&group_id, &keys[1]],
        )
        .unwrap();
    }
    std::fs::remove_file(data_dir.join("secrets.key")).unwrap();
    loosen(&data_dir);
    // What a plaintext store holds: the keys, readable by anyone who reads the file.
    for key in &keys {
        assert!(store_holds(&data_dir, key));
    }
    assert_eq!(mode(&data_dir.join("meta.db")), 0o644);

    let dev = start_dev(&data_dir, port, db_port, &[]).await;
    // Tightened: everything owner-only again, the new secrets key included.
    assert_owner_only(&data_dir);
    // Sealed: the keys are gone from the store's files (not left in freed pages or the
    // WAL either), and the tokens they signed still verify.
    for key in &keys {
        assert!(
            !store_holds(&data_dir, key),
            "a plaintext key is still on disk"
        );
    }
    tokens_still_verify(&tenant).await;
    let (_, opened) = private_keys(&data_dir, &tenant.db_id).await;
    assert_eq!(opened, keys);
    let log = without_colours(&std::fs::read_to_string(log_path(&data_dir)).unwrap());
    assert!(log.contains("sealed_plaintext=2"), "{log}");
    assert!(log.contains("owner-only"), "{log}");
    drop(dev);
    let _ = std::fs::remove_dir_all(&data_dir);
    let _ = std::fs::remove_file(log_path(&data_dir));
}

#[test]
fn serve_needs_a_secrets_key_unless_told_to_keep_keys_in_the_clear() {
    let dir = temp_dir("serve-keyless");
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("meta.db");
    let log = dir.join("serve.log");
    let serve = |extra: &[&str]| {
        let mut command = Command::new(BIN);
        command
            .args(["serve", "--database-url"])
            .arg(&store)
            .args(["--listen", "127.0.0.1:0", "--db-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.join("node"))
            .args(extra)
            .env_remove("ATOLL_SECRETS_KEY")
            .env_remove("ATOLL_SECRETS_KEY_FILE")
            .env_remove("ATOLL_INSECURE_PLAINTEXT_SECRETS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap());
        command
    };
    let refused = start_fails(serve(&[]), &log);
    assert!(
        refused.contains("atoll serve needs a secrets key"),
        "{refused}"
    );
    assert!(
        refused.contains("--insecure-plaintext-secrets"),
        "{refused}"
    );
    assert!(!store.exists(), "refused before touching the store");

    // With the explicit opt-out it starts (and says what it means).
    let mut child = serve(&["--insecure-plaintext-secrets"]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("control plane listening") {
            assert!(text.contains("in the clear"), "{text}");
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("serve exited with {status}: {text}");
        }
        assert!(Instant::now() < deadline, "serve did not start: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();

    // A key and the opt-out together make no sense.
    let key = SecretsKey::generate_base64();
    let conflicting = start_fails(
        serve(&["--insecure-plaintext-secrets", "--secrets-key", &key]),
        &log,
    );
    assert!(conflicting.contains("cannot be used with"), "{conflicting}");
    let _ = std::fs::remove_dir_all(&dir);
}
