//! `TestApp`: a real server on a loopback port, on the backend named by
//! `ATOLL_TEST_BACKEND` (`sqlite`, the default, or `postgres`), and a small HTTP client.

use atoll_control::{AppState, ControlConfig};
use atoll_meta::testing::{fresh_postgres_store, fresh_sqlite_store};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

pub const ADMIN: &str = "admin";
pub const PASSWORD: &str = "correct-horse-battery";

pub struct TestApp {
    pub url: String,
    /// The data plane: databases are at `{db_url}/db/<db>-<org>/`.
    pub db_url: String,
    /// The server's state, for tests that drive background jobs with a moved clock.
    pub state: AppState,
    /// The data node in the same process, to see what it holds.
    pub node: std::sync::Arc<atoll_data::node::Node>,
    pub client: reqwest::Client,
    /// Login token of the instance administrator `admin`.
    pub admin_token: String,
    _shutdown: tokio::sync::oneshot::Sender<()>,
    _db_shutdown: tokio::sync::oneshot::Sender<()>,
}

fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// An answer: status, headers and JSON body (`Value::Null` when the body is not JSON).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Reply {
    /// Asserts the status, showing the body when it differs.
    #[track_caller]
    pub fn expect(self, status: u16) -> Value {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.body
        );
        self.body
    }

    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }

    /// The `Retry-After` header, in seconds.
    pub fn retry_after(&self) -> Option<u64> {
        self.headers.get("retry-after")?.to_str().ok()?.parse().ok()
    }

    async fn of(response: reqwest::Response) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        Reply {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }
}

/// The configuration [`TestApp::start`] uses; tests that need other settings change it
/// and call [`TestApp::start_with`].
pub fn test_config() -> ControlConfig {
    // Tests create far more than a plan allows; quota tests choose their own plans.
    let unlimited = ControlConfig::default()
        .plans
        .keys()
        .map(|name| (name.clone(), atoll_types::usage::PlanQuotas::default()))
        .collect();
    ControlConfig {
        plans: unlimited,
        ..ControlConfig::default()
    }
}

/// A client whose connections come from `address` (any of 127.0.0.0/8 reaches the
/// loopback server on Linux): for per-address limits.
pub fn client_from(address: std::net::IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(address)
        .build()
        .expect("client")
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name no other call in this process has had: `prefix-<n>`.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

pub fn backend() -> String {
    std::env::var("ATOLL_TEST_BACKEND").unwrap_or_else(|_| "sqlite".to_string())
}

impl TestApp {
    /// Starts a server with a fresh store and the bootstrap administrator. `None` (after
    /// a loud warning) when the PostgreSQL backend is asked for but unreachable.
    pub async fn start() -> Option<TestApp> {
        TestApp::start_with(test_config()).await
    }

    /// Starts a server with this configuration.
    pub async fn start_with(config: ControlConfig) -> Option<TestApp> {
        TestApp::start_serving(config, None).await
    }

    /// Starts a server whose platform API and database hosts both speak TLS with `tls`;
    /// `client` (which must trust its certificate) becomes the app's client.
    pub async fn start_with_tls(
        tls: atoll_http::tls::ServerTls,
        client: reqwest::Client,
    ) -> Option<TestApp> {
        TestApp::start_serving(ControlConfig::default(), Some((tls, client))).await
    }

    async fn start_serving(
        config: ControlConfig,
        tls: Option<(atoll_http::tls::ServerTls, reqwest::Client)>,
    ) -> Option<TestApp> {
        let (tls, client) = match tls {
            Some((tls, client)) => (Some(tls), client),
            None => (None, reqwest::Client::new()),
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let store = match backend().as_str() {
            "postgres" => fresh_postgres_store().await?,
            "sqlite" => fresh_sqlite_store().await.0,
            other => panic!("ATOLL_TEST_BACKEND must be sqlite or postgres, not {other}"),
        };
        // A data node in the same process, serving on its own loopback port.
        let node_dir = std::env::temp_dir().join(format!("atoll-node-{}", uuid_like()));
        // With object storage, as every `atoll` command runs its nodes.
        let settings = atoll_data::node::NodeSettings {
            storage: Some(atoll_data::node_storage::StorageConfig {
                url: format!("file://{}", node_dir.join("storage").display()),
                node_name: "local".into(),
                settings: atoll_storage::StorageSettings::default(),
            }),
            ..Default::default()
        };
        let node = std::sync::Arc::new(
            atoll_data::node::Node::open_with(&node_dir, settings).expect("open node"),
        );
        atoll_data::node_storage::start(&node);
        let db_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let db_port = db_listener.local_addr().unwrap().port();
        let db_url = format!("{scheme}://127.0.0.1:{db_port}");
        let data_state = atoll_data::DataPlaneState::new(std::sync::Arc::clone(&node), "localhost");
        let (db_tx, db_rx) = tokio::sync::oneshot::channel::<()>();
        let db_tls = tls.as_ref().map(|t| {
            t.accepting_client_certificates()
                .expect("TLS asking for client certificates")
        });
        let db_listener = atoll_http::listener::Listener::new(db_listener, db_tls);
        tokio::spawn(atoll_data::serve(db_listener, data_state, async {
            let _ = db_rx.await;
        }));
        let state = AppState::new(
            store,
            config,
            atoll_control::DataPlane::in_process(
                std::sync::Arc::clone(&node),
                &db_url,
                &format!("localhost:{db_port}"),
            ),
        );
        // The administrator's organization is on the free plan, as an operator would put
        // it with `--default-plan starter`: the tests of the free plan's quotas and
        // behaviours use it. New users and team organizations get the instance's default.
        let outcome = atoll_control::bootstrap_user(
            &state,
            ADMIN,
            Some(PASSWORD.into()),
            None,
            Some(atoll_control::config::FREE_PLAN),
        )
        .await
        .expect("bootstrap");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let listener = atoll_http::listener::Listener::new(listener, tls);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server_state = state.clone();
        tokio::spawn(async move {
            atoll_control::serve(listener, server_state, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Some(TestApp {
            url,
            db_url,
            state,
            node,
            client,
            admin_token: outcome.token,
            _shutdown: tx,
            _db_shutdown: db_tx,
        })
    }

    /// Sends a request; `token` becomes `Authorization: Bearer <token>`.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        self.call_as(None, method, path, token, body).await
    }

    /// As [`TestApp::call`], sending `User-Agent: <user_agent>` (none by default).
    pub async fn call_as(
        &self,
        user_agent: Option<&str>,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut request = self.client.request(method, format!("{}{path}", self.url));
        if let Some(user_agent) = user_agent {
            request = request.header("User-Agent", user_agent);
        }
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Reply::of(request.send().await.expect("request")).await
    }

    /// Sends a request with exactly these extra headers (a session cookie, say) and no
    /// `Authorization` unless one of them is.
    pub async fn call_with_headers(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<Value>,
    ) -> Reply {
        let mut request = self.client.request(method, format!("{}{path}", self.url));
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Reply::of(request.send().await.expect("request")).await
    }

    /// `POST /v1/auth/login` with `client` (see [`client_from`]).
    pub async fn login_with(
        &self,
        client: &reqwest::Client,
        username: &str,
        password: &str,
    ) -> Reply {
        let response = client
            .post(format!("{}/v1/auth/login", self.url))
            .json(&json!({"username": username, "password": password}))
            .send()
            .await
            .expect("request");
        Reply::of(response).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Reply {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    pub async fn patch(&self, path: &str, token: &str, body: Value) -> Reply {
        self.call(Method::PATCH, path, Some(token), Some(body))
            .await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Reply {
        self.call(Method::DELETE, path, Some(token), None).await
    }

    /// Creates a user (with the shared test password) and logs them in.
    pub async fn user(&self, username: &str) -> String {
        self.post(
            "/v1/admin/users",
            &self.admin_token,
            json!({"username": username, "password": PASSWORD, "email": format!("{username}@example.com")}),
        )
        .await
        .expect(200);
        self.login(username).await
    }

    pub async fn login(&self, username: &str) -> String {
        let body = self
            .call(
                Method::POST,
                "/v1/auth/login",
                None,
                Some(json!({"username": username, "password": PASSWORD})),
            )
            .await
            .expect(200);
        body["token"].as_str().unwrap().to_string()
    }

    /// Creates a team organization owned by the holder of `owner_token`; returns its slug.
    pub async fn team(&self, owner_token: &str, name: &str) -> String {
        let body = self
            .post("/v1/organizations", owner_token, json!({"name": name}))
            .await
            .expect(200);
        body["org"]["slug"].as_str().unwrap().to_string()
    }

    pub async fn add_member(&self, org: &str, owner_token: &str, username: &str, role: &str) {
        self.post(
            &format!("/v1/organizations/{org}/members"),
            owner_token,
            json!({"username": username, "role": role}),
        )
        .await
        .expect(200);
    }

    pub async fn group(&self, org: &str, token: &str, name: &str) {
        self.post(
            &format!("/v1/organizations/{org}/groups"),
            token,
            json!({"name": name, "location": "local"}),
        )
        .await
        .expect(200);
    }

    /// Posts a multipart form with one `file` part.
    pub async fn post_file(&self, path: &str, token: &str, file: &str) -> Reply {
        self.post_file_with_headers(path, &[("Authorization", format!("Bearer {token}"))], file)
            .await
    }

    /// As [`TestApp::post_file`], with exactly these extra headers.
    pub async fn post_file_with_headers(
        &self,
        path: &str,
        headers: &[(&str, String)],
        file: &str,
    ) -> Reply {
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::text(file.to_string()).file_name("dump.sql"),
        );
        let mut request = self.client.post(format!("{}{path}", self.url));
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let response = request.multipart(form).send().await.expect("request");
        Reply::of(response).await
    }

    /// Creates a database; returns its name.
    pub async fn database(&self, prefix: &str, token: &str, name: &str, group: &str) -> String {
        self.post(
            &format!("{prefix}/databases"),
            token,
            json!({"name": name, "group": group}),
        )
        .await
        .expect(200);
        name.to_string()
    }

    /// Mints an API token with `body`; returns its secret.
    pub async fn api_token(&self, token: &str, body: Value) -> String {
        let name = unique("tok");
        let reply = self
            .post(&format!("/v1/auth/api-tokens/{name}"), token, body)
            .await
            .expect(200);
        reply["token"].as_str().unwrap().to_string()
    }
}

/// Starts the app or skips the test (PostgreSQL unreachable).
#[macro_export]
macro_rules! app {
    () => {
        match $crate::harness::TestApp::start().await {
            Some(app) => app,
            None => return,
        }
    };
}
