//! The test node shared by the data plane's HTTP and WebSocket tests: a node on
//! 127.0.0.1 with databases signed by their own keys, and small clients for Hrana.
#![allow(dead_code)]

pub mod protobuf;

use atoll_data::jwt::{self, Claims};
use atoll_data::node::{Node, NodeSettings};
use atoll_data::{DataLimits, DataPlaneState};
use atoll_types::node::{CreateDatabase, DatabaseConfig, DatabaseState, Seed, TokenKey};
use ed25519_dalek::SigningKey;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_tungstenite::tungstenite;

pub const ORG: &str = "acme";

pub struct TestNode {
    pub dir: PathBuf,
    pub node: Arc<Node>,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    pub shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// Whether dropping it removes its data directory (not after [`TestNode::stop`]).
    remove_on_drop: bool,
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A database on the test node, with its own signing key.
pub struct TestDb {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    pub config: DatabaseConfig,
    pub key: SigningKey,
}

pub async fn start_node() -> TestNode {
    start_node_with(DataLimits::default()).await
}

pub async fn start_node_with(limits: DataLimits) -> TestNode {
    start_node_with_settings(limits, NodeSettings::default()).await
}

pub async fn start_node_with_settings(limits: DataLimits, settings: NodeSettings) -> TestNode {
    let dir = std::env::temp_dir().join(format!("atoll-hrana-{}", uuid::Uuid::new_v4()));
    serve_node(dir, limits, settings).await
}

/// A node on `dir` (a new one, or one a stopped node left), serving on a new port, with its
/// object storage started (databases missing from `dir` are rebuilt from it).
pub async fn serve_node(dir: PathBuf, limits: DataLimits, settings: NodeSettings) -> TestNode {
    let node = Arc::new(Node::open_with(&dir, settings).unwrap());
    atoll_data::node_storage::recover(&node).await.unwrap();
    atoll_data::node_storage::start(&node);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = DataPlaneState::with_limits(Arc::clone(&node), "localhost", limits);
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(atoll_data::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    TestNode {
        dir,
        node,
        addr,
        http: reqwest::Client::new(),
        shutdown: Some(shutdown),
        remove_on_drop: true,
    }
}

impl TestNode {
    /// Stops serving and keeps the data directory (to start a node on it again), answering it.
    pub fn stop(mut self) -> PathBuf {
        self.remove_on_drop = false;
        self.node.begin_shutdown();
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.dir.clone()
    }

    pub fn create_db(&self, name: &str) -> TestDb {
        self.create_db_with(name, |_| {})
    }

    pub fn create_db_with(&self, name: &str, adjust: impl FnOnce(&mut DatabaseConfig)) -> TestDb {
        self.create_db_from(name, Seed::Empty, adjust)
    }

    /// A database created from `seed` (it must succeed).
    pub fn create_db_seeded(&self, name: &str, seed: Seed) -> TestDb {
        self.create_db_from(name, seed, |_| {})
    }

    /// The configuration a new database `name` gets (without creating it).
    pub fn config_for(&self, name: &str) -> DatabaseConfig {
        let key = jwt::generate_key();
        config_with_key(name, &key)
    }

    fn create_db_from(
        &self,
        name: &str,
        seed: Seed,
        adjust: impl FnOnce(&mut DatabaseConfig),
    ) -> TestDb {
        let key = jwt::generate_key();
        let mut config = config_with_key(name, &key);
        adjust(&mut config);
        let request = CreateDatabase {
            config: config.clone(),
            seed,
        };
        if self.node.storage().is_some() {
            // Restores reach object storage through the runtime, as on the node's
            // blocking threads.
            tokio::task::block_in_place(|| self.node.create_database(request)).unwrap();
        } else {
            self.node.create_database(request).unwrap();
        }
        TestDb {
            addr: self.addr,
            http: self.http.clone(),
            config,
            key,
        }
    }

    /// A database encrypted with `key` (base64, `aes256gcm`); its client sends the key
    /// with every request, as libSQL clients do.
    pub fn create_encrypted_db(&self, name: &str, key: &str) -> TestDb {
        let signing = jwt::generate_key();
        let mut config = config_with_key(name, &signing);
        let cipher = atoll_storage::encryption::Cipher::Aes256Gcm;
        let verifier = atoll_storage::encryption::EncryptionKey::from_base64(cipher, key)
            .unwrap()
            .verifier(&config.id);
        config.encryption = Some(atoll_types::node::DatabaseEncryption {
            cipher: cipher.name().into(),
            verifier: verifier.to_hex(),
        });
        let request = CreateDatabase {
            config: config.clone(),
            seed: Seed::Empty,
        };
        tokio::task::block_in_place(|| self.node.create_database_with_key(request, Some(key)))
            .unwrap();
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-turso-encryption-key", key.parse().unwrap());
        TestDb {
            addr: self.addr,
            http: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .unwrap(),
            config,
            key: signing,
        }
    }

    pub fn configure(&self, db: &TestDb, adjust: impl FnOnce(&mut DatabaseConfig)) {
        let mut config = db.config.clone();
        adjust(&mut config);
        self.node.configure(config).unwrap();
    }
}

fn config_with_key(name: &str, key: &SigningKey) -> DatabaseConfig {
    DatabaseConfig {
        id: uuid::Uuid::new_v4().to_string(),
        name: name.to_string(),
        org_id: "org-1".into(),
        group_id: "group-1".into(),
        label: format!("{name}-{ORG}"),
        state: DatabaseState::Active,
        block_reads: false,
        block_writes: false,
        block_reason: None,
        size_limit: None,
        allow_attach: false,
        allowed_ips: vec![],
        keys: vec![TokenKey {
            kid: format!("{name}-key"),
            public_key: jwt::encode_key(key.verifying_key().as_bytes()),
        }],
        external_keys: Default::default(),
        client_ca: None,
        durability: None,
        pitr_retention_days: None,
        config_version: 0,
        history_starts_at_ms: None,
        encryption: None,
    }
}

impl TestDb {
    pub fn claims(&self, access: &str) -> Claims {
        Claims {
            a: access.into(),
            id: Some(self.config.id.clone()),
            gid: None,
            p: None,
            iat: 0,
            exp: None,
        }
    }

    pub fn sign(&self, claims: &Claims) -> String {
        jwt::sign(claims, &self.key, &self.config.keys[0].kid)
    }

    pub fn token(&self) -> String {
        self.sign(&self.claims("rw"))
    }

    pub fn read_only_token(&self) -> String {
        self.sign(&self.claims("ro"))
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn post_with(&self, path: &str, token: &str, body: Value) -> reqwest::Response {
        self.http
            .post(self.url(path))
            .header("x-namespace", &self.config.label)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.post_with(path, &self.token(), body).await
    }

    /// A pipeline that must succeed at the HTTP level.
    pub async fn pipeline(&self, version: &str, body: Value) -> Value {
        let response = self.post(&format!("/{version}/pipeline"), body).await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        assert_eq!(response.headers()["content-type"], "application/json");
        response.json().await.unwrap()
    }

    /// Runs statements on a fresh, closed stream and answers their results.
    pub async fn run(&self, statements: &[Value]) -> Vec<Value> {
        let mut requests: Vec<Value> = statements
            .iter()
            .map(|stmt| json!({"type": "execute", "stmt": stmt}))
            .collect();
        requests.push(json!({"type": "close"}));
        let body = self.pipeline("v2", json!({"requests": requests})).await;
        let mut results = body["results"].as_array().unwrap().clone();
        assert_eq!(results.pop().unwrap()["response"]["type"], "close");
        results
    }

    /// The result of one statement that must succeed.
    pub async fn query(&self, stmt: Value) -> Value {
        let result = self.run(&[stmt]).await.remove(0);
        assert_eq!(result["type"], "ok", "{result}");
        result["response"]["result"].clone()
    }

    /// The error of one statement that must fail.
    pub async fn query_error(&self, stmt: Value) -> Value {
        let result = self.run(&[stmt]).await.remove(0);
        assert_eq!(result["type"], "error", "{result}");
        result["error"].clone()
    }
}

pub fn sql(text: &str) -> Value {
    json!({"sql": text})
}

pub fn integer(value: i64) -> Value {
    json!({"type": "integer", "value": value.to_string()})
}

pub fn text(value: &str) -> Value {
    json!({"type": "text", "value": value})
}

pub async fn protocol_error(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 400);
    assert_eq!(response.headers()["content-type"], "text/plain");
    response.text().await.unwrap()
}

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub async fn connect(db: &TestDb, subprotocol: &str) -> Socket {
    use tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{}/", db.addr).into_client_request().unwrap();
    let headers = request.headers_mut();
    headers.insert("sec-websocket-protocol", subprotocol.parse().unwrap());
    headers.insert("x-namespace", db.config.label.parse().unwrap());
    let (socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], subprotocol);
    socket
}

pub async fn send(socket: &mut Socket, message: Value) {
    socket
        .send(tungstenite::Message::Text(message.to_string().into()))
        .await
        .unwrap();
}

pub async fn receive(socket: &mut Socket) -> Value {
    loop {
        match socket.next().await.unwrap().unwrap() {
            tungstenite::Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            tungstenite::Message::Close(frame) => {
                return json!({"closed": frame.map(|f| u16::from(f.code))})
            }
            _ => continue,
        }
    }
}

/// Sends a request and answers its response message.
pub async fn request(socket: &mut Socket, request_id: i32, request: Value) -> Value {
    send(
        socket,
        json!({"type": "request", "request_id": request_id, "request": request}),
    )
    .await;
    let response = receive(socket).await;
    assert_eq!(response["request_id"], request_id, "{response}");
    response
}
