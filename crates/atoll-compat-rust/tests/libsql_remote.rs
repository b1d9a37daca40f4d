//! The official Rust `libsql` crate in remote mode (Hrana v3 over HTTP: pipelines, and
//! cursors for queries) against a real Atoll server on loopback: a control plane creates
//! the database and mints the token, the data plane serves it.

use libsql::{params, Builder, TransactionBehavior, Value};
use serde_json::json;
use std::sync::Arc;

struct Server {
    api: String,
    admin_token: String,
    client: reqwest::Client,
    _shutdown: (
        tokio::sync::oneshot::Sender<()>,
        tokio::sync::oneshot::Sender<()>,
    ),
}

async fn start() -> Server {
    let dir = std::env::temp_dir().join(format!(
        "atoll-compat-rust-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    let store = atoll_meta::Store::open_sqlite(&dir.join("meta.db"))
        .await
        .unwrap();
    let node = Arc::new(atoll_data::node::Node::open(&dir).unwrap());
    let db_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let db_port = db_listener.local_addr().unwrap().port();
    let (db_tx, db_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(atoll_data::serve(
        db_listener,
        atoll_data::DataPlaneState::new(Arc::clone(&node), "localhost"),
        async {
            let _ = db_rx.await;
        },
    ));
    let data_plane = atoll_control::DataPlane::in_process(
        node,
        &format!("http://127.0.0.1:{db_port}"),
        &format!("localhost:{db_port}"),
    );
    let state =
        atoll_control::AppState::new(store, atoll_control::ControlConfig::default(), data_plane);
    let admin =
        atoll_control::bootstrap_user(&state, "admin", Some("a-long-password".into()), None, None)
            .await
            .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(atoll_control::serve(listener, state, async {
        let _ = rx.await;
    }));
    Server {
        api,
        admin_token: admin.token,
        client: reqwest::Client::new(),
        _shutdown: (tx, db_tx),
    }
}

/// A remote-mode builder over plain HTTP (the loopback test server has no TLS). A macro
/// because the builder's type parameter is not nameable outside the crate.
macro_rules! remote {
    ($url:expr, $token:expr) => {
        Builder::new_remote($url, $token).connector(hyper::client::HttpConnector::new())
    };
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

impl Server {
    /// Creates a database; returns its URL (path-prefix form, no wildcard DNS needed).
    async fn database(&self, name: &str) -> String {
        self.database_with(json!({"name": name})).await
    }

    /// Creates the database `body` describes; returns its URL.
    async fn database_with(&self, body: serde_json::Value) -> String {
        let name = body["name"].as_str().unwrap().to_string();
        let created = self
            .client
            .post(format!("{}/v1/databases", self.api))
            .bearer_auth(&self.admin_token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 200);
        let got: serde_json::Value = self
            .client
            .get(format!("{}/v1/databases/{name}", self.api))
            .bearer_auth(&self.admin_token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        got["database"]["http_url"]
            .as_str()
            .unwrap()
            .trim_end_matches('/')
            .to_string()
    }

    async fn token(&self, name: &str, query: &str) -> String {
        let body: serde_json::Value = self
            .client
            .post(format!(
                "{}/v1/databases/{name}/auth/tokens{query}",
                self.api
            ))
            .bearer_auth(&self.admin_token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body["jwt"].as_str().unwrap().to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_round_trip_through_pipelines_and_cursors() {
    let server = start().await;
    let url = server.database("rusty").await;
    let token = server.token("rusty", "").await;
    let db = remote!(url, token).build().await.unwrap();
    let conn = db.connect().unwrap();

    conn.execute("CREATE TABLE v (i INTEGER, r REAL, t TEXT, b BLOB, n)", ())
        .await
        .unwrap();
    let inserted = conn
        .execute(
            "INSERT INTO v VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                i64::MAX,
                2.5f64,
                "zażółć 🦀",
                vec![0u8, 1, 2, 255],
                Value::Null
            ],
        )
        .await
        .unwrap();
    assert_eq!(inserted, 1);
    assert_eq!(conn.last_insert_rowid(), 1);

    // `query` describes, then reads through `/v3/cursor`.
    let mut rows = conn.query("SELECT i, r, t, b, n FROM v", ()).await.unwrap();
    let row = rows.next().await.unwrap().expect("one row");
    assert_eq!(row.get::<i64>(0).unwrap(), i64::MAX);
    assert_eq!(row.get::<f64>(1).unwrap(), 2.5);
    assert_eq!(row.get::<String>(2).unwrap(), "zażółć 🦀");
    assert_eq!(row.get::<Vec<u8>>(3).unwrap(), vec![0u8, 1, 2, 255]);
    assert_eq!(row.get_value(4).unwrap(), Value::Null);
    assert!(rows.next().await.unwrap().is_none());

    // Named parameters.
    let mut rows = conn
        .query("SELECT :a + :b", libsql::named_params! {":a": 40, ":b": 2})
        .await
        .unwrap();
    assert_eq!(
        rows.next().await.unwrap().unwrap().get::<i64>(0).unwrap(),
        42
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_batches_and_errors() {
    let server = start().await;
    let url = server.database("tx").await;
    let token = server.token("tx", "").await;
    let db = remote!(url.clone(), token).build().await.unwrap();
    let conn = db.connect().unwrap();
    conn.execute_batch(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE); INSERT INTO t (v) VALUES ('a');",
    )
    .await
    .unwrap();

    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .await
        .unwrap();
    tx.execute("INSERT INTO t (v) VALUES ('b')", ())
        .await
        .unwrap();
    tx.execute("INSERT INTO t (v) VALUES ('c')", ())
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let tx = conn.transaction().await.unwrap();
    tx.execute("INSERT INTO t (v) VALUES ('gone')", ())
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let tx = conn
        .transaction_with_behavior(TransactionBehavior::ReadOnly)
        .await
        .unwrap();
    let mut rows = tx
        .query(
            "SELECT group_concat(v) FROM (SELECT v FROM t ORDER BY v)",
            (),
        )
        .await
        .unwrap();
    assert_eq!(
        rows.next()
            .await
            .unwrap()
            .unwrap()
            .get::<String>(0)
            .unwrap(),
        "a,b,c"
    );
    drop(rows);
    tx.commit().await.unwrap();

    let err = conn
        .execute("INSERT INTO t (v) VALUES ('a')", ())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("UNIQUE constraint failed"),
        "{err}"
    );
    let err = conn.execute("SELECT * FROM missing", ()).await.unwrap_err();
    assert!(err.to_string().contains("no such table"), "{err}");

    conn.execute_transactional_batch(
        "INSERT INTO t (v) VALUES ('d'); INSERT INTO t (v) VALUES ('e');",
    )
    .await
    .unwrap();
    let mut rows = conn.query("SELECT count(*) FROM t", ()).await.unwrap();
    assert_eq!(
        rows.next().await.unwrap().unwrap().get::<i64>(0).unwrap(),
        5
    );

    // A read-only token reads but cannot write.
    let read_only = server.token("tx", "?authorization=read-only").await;
    let reader = remote!(url, read_only)
        .build()
        .await
        .unwrap()
        .connect()
        .unwrap();
    let mut rows = reader.query("SELECT count(*) FROM t", ()).await.unwrap();
    assert_eq!(
        rows.next().await.unwrap().unwrap().get::<i64>(0).unwrap(),
        5
    );
    drop(rows);
    let err = reader.execute("DELETE FROM t", ()).await.unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_header_selects_the_database_too() {
    let server = start().await;
    let url = server.database("by-header").await;
    let token = server.token("by-header", "").await;
    // The data plane's bare address, with the database named by `x-namespace`.
    let base = url.split("/db/").next().unwrap().to_string();
    let db = remote!(base, token)
        .namespace("by-header-admin")
        .build()
        .await
        .unwrap();
    let conn = db.connect().unwrap();
    let mut rows = conn.query("SELECT 7", ()).await.unwrap();
    assert_eq!(
        rows.next().await.unwrap().unwrap().get::<i64>(0).unwrap(),
        7
    );
}

/// An end user's JWT from the organization's own auth provider (a key set registered with
/// `PUT /v2/organizations/{org}/jwks/{name}`, claims from `…/jwks-template`) works with the
/// official client as a token minted by Atoll does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auth_providers_jwt_queries_through_the_official_client() {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use ring::signature::{Ed25519KeyPair, KeyPair};
    let server = start().await;
    let url = server.database("byoa").await;
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    let key = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let b64 = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
    let saved = server
        .client
        .put(format!("{}/v2/organizations/admin/jwks/provider", server.api))
        .bearer_auth(&server.admin_token)
        .json(&json!({"jwks": {"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "p1", "x": b64(key.public_key().as_ref())}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(saved.status(), 200);
    let token_for = |scope: &'static str| {
        let client = server.client.clone();
        let api = server.api.clone();
        let admin = server.admin_token.clone();
        let key = &key;
        async move {
            let template: serde_json::Value = client
                .get(format!(
                    "{api}/v2/organizations/admin/jwks-template?database=byoa&scope={scope}"
                ))
                .bearer_auth(admin)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let mut claims = template["template"].clone();
            claims["exp"] = json!(rand_suffix() / 1_000_000_000 + 600);
            claims["sub"] = json!("user_42");
            let input = format!(
                "{}.{}",
                b64(br#"{"alg":"EdDSA","typ":"JWT","kid":"p1"}"#),
                b64(claims.to_string().as_bytes())
            );
            format!("{input}.{}", b64(key.sign(input.as_bytes()).as_ref()))
        }
    };

    let writer = token_for("full-access").await;
    let db = remote!(url.clone(), writer).build().await.unwrap();
    let conn = db.connect().unwrap();
    conn.execute("CREATE TABLE notes (body TEXT)", ())
        .await
        .unwrap();
    conn.execute("INSERT INTO notes VALUES (?1)", params!["from an end user"])
        .await
        .unwrap();

    let reader = token_for("read-only").await;
    let db = remote!(url, reader).build().await.unwrap();
    let conn = db.connect().unwrap();
    let mut rows = conn.query("SELECT body FROM notes", ()).await.unwrap();
    let row = rows.next().await.unwrap().unwrap();
    assert_eq!(row.get::<String>(0).unwrap(), "from an end user");
    assert!(conn
        .execute("INSERT INTO notes VALUES ('no')", ())
        .await
        .is_err());
}

/// Issue 32: a query without rows still names its columns (the crate reads them from the
/// cursor's `step_begin`), and the URL as the API gives it, trailing slash included, works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_result_names_its_columns_and_the_url_may_end_with_a_slash() {
    let server = start().await;
    let url = server.database("hollow").await;
    let token = server.token("hollow", "").await;
    let db = remote!(format!("{url}/"), token).build().await.unwrap();
    let conn = db.connect().unwrap();
    conn.execute("CREATE TABLE e (a TEXT, b INTEGER)", ())
        .await
        .unwrap();
    let mut rows = conn.query("SELECT a, b FROM e", ()).await.unwrap();
    assert_eq!(rows.column_count(), 2);
    assert_eq!(rows.column_name(0), Some("a"));
    assert_eq!(rows.column_name(1), Some("b"));
    assert!(rows.next().await.unwrap().is_none());
}

/// A database encrypted with its customer's key (`remote_encryption` on create): the crate's
/// `remote_encryption` sends the key with every request; without it, or with another key,
/// nothing is served (docs/ENCRYPTION.md).
#[tokio::test]
async fn an_encrypted_database_answers_the_crate_with_its_key_only() {
    use base64::Engine;
    use libsql::{EncryptionContext, EncryptionKey};
    let server = start().await;
    let key = base64::engine::general_purpose::STANDARD.encode([42u8; 32]);
    let url = server
        .database_with(json!({"name": "vault", "remote_encryption": {"encryption_key": key, "encryption_cipher": "aes256gcm"}}))
        .await;
    let token = server.token("vault", "").await;
    let with = |key: EncryptionKey| EncryptionContext { key };

    let db = remote!(url.clone(), token.clone())
        .remote_encryption(with(EncryptionKey::Base64Encoded(key.clone())))
        .build()
        .await
        .unwrap();
    let conn = db.connect().unwrap();
    conn.execute_batch(
        "CREATE TABLE secrets (v TEXT); INSERT INTO secrets VALUES ('launch codes');",
    )
    .await
    .unwrap();
    let tx = conn.transaction().await.unwrap();
    tx.execute("INSERT INTO secrets VALUES (?1)", params!["more codes"])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut rows = conn
        .query("SELECT count(*) FROM secrets", ())
        .await
        .unwrap();
    let row = rows.next().await.unwrap().unwrap();
    assert_eq!(row.get_value(0).unwrap(), Value::Integer(2));

    // The key as bytes is the same key.
    let bytes = remote!(url.clone(), token.clone())
        .remote_encryption(with(EncryptionKey::Bytes(vec![42u8; 32])))
        .build()
        .await
        .unwrap();
    let mut rows = bytes
        .connect()
        .unwrap()
        .query("SELECT v FROM secrets ORDER BY rowid", ())
        .await
        .unwrap();
    let row = rows.next().await.unwrap().unwrap();
    assert_eq!(
        row.get_value(0).unwrap(),
        Value::Text("launch codes".into())
    );

    let keyless = remote!(url.clone(), token.clone()).build().await.unwrap();
    let refused = keyless
        .connect()
        .unwrap()
        .query("SELECT v FROM secrets", ())
        .await;
    let Err(refused) = refused else {
        panic!("served without the key")
    };
    let message = refused.to_string();
    assert!(
        message.contains("401") || message.contains("encrypted"),
        "{message}"
    );
    let wrong = remote!(url, token)
        .remote_encryption(with(EncryptionKey::Bytes(vec![7u8; 32])))
        .build()
        .await
        .unwrap();
    let refused = wrong
        .connect()
        .unwrap()
        .execute("INSERT INTO secrets VALUES ('forged')", ())
        .await;
    let Err(refused) = refused else {
        panic!("served with another key")
    };
    let message = refused.to_string();
    assert!(
        message.contains("403") || message.contains("not the key"),
        "{message}"
    );
    let mut rows = conn
        .query("SELECT count(*) FROM secrets", ())
        .await
        .unwrap();
    assert_eq!(
        rows.next().await.unwrap().unwrap().get_value(0).unwrap(),
        Value::Integer(2)
    );
}
