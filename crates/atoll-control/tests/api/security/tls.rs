//! Finding 14: Atoll spoke plain HTTP only, so the `libsql://` URLs of every client (TLS by
//! default) failed against it. With `--tls-cert`/`--tls-key` the platform API and the
//! database hosts speak TLS (HTTP, Hrana over HTTP and over WebSocket), the URLs the API
//! gives are `https://`, and a renewed certificate is served without a restart while a
//! broken renewal leaves the working one in service.

use crate::harness::TestApp;
use atoll_http::tls::ServerTls;
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::pem::PemObject;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_tungstenite::tungstenite;

/// A self-signed certificate for `localhost` and `127.0.0.1`.
struct TestCertificate {
    certificate_pem: String,
    key_pem: String,
}

impl TestCertificate {
    fn generate() -> TestCertificate {
        let generated =
            rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
                .expect("generate a certificate");
        TestCertificate {
            certificate_pem: generated.cert.pem(),
            key_pem: generated.key_pair.serialize_pem(),
        }
    }

    /// A client that trusts this certificate and nothing else (not the system roots).
    fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.certificate_pem.as_bytes()).unwrap(),
            )
            .build()
            .unwrap()
    }

    fn rustls_client(&self) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for certificate in
            rustls::pki_types::CertificateDer::pem_slice_iter(self.certificate_pem.as_bytes())
        {
            roots.add(certificate.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }
}

/// The certificate files a server is started with, in a directory of their own.
struct CertificateFiles {
    dir: PathBuf,
}

impl CertificateFiles {
    fn new(certificate: &TestCertificate) -> CertificateFiles {
        let dir = std::env::temp_dir().join(format!(
            "atoll-tls-{}",
            crate::harness::unique(&std::process::id().to_string())
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let files = CertificateFiles { dir };
        files.replace(&certificate.certificate_pem, &certificate.key_pem);
        files
    }

    fn certificate(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    fn key(&self) -> PathBuf {
        self.dir.join("key.pem")
    }

    /// Writes both files the way renewal tools do: a new file renamed over the old one.
    fn replace(&self, certificate_pem: &str, key_pem: &str) {
        write_by_rename(&self.certificate(), certificate_pem);
        write_by_rename(&self.key(), key_pem);
    }

    fn server_tls(&self) -> ServerTls {
        ServerTls::from_files(&self.certificate(), &self.key()).expect("load the certificate")
    }
}

impl Drop for CertificateFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_by_rename(path: &Path, contents: &str) {
    let staged = path.with_extension("new");
    std::fs::write(&staged, contents).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// Whether a fresh connection from `client` (so a new TLS handshake) gets an answer.
async fn answers(client: &reqwest::Client, url: &str) -> bool {
    match client.get(format!("{url}/health")).send().await {
        Ok(response) => response.status() == 200,
        Err(_) => false,
    }
}

/// A server with TLS on both listeners (`None`: PostgreSQL asked for but unreachable).
async fn start(files: &CertificateFiles, certificate: &TestCertificate) -> Option<TestApp> {
    TestApp::start_with_tls(files.server_tls(), certificate.client()).await
}

/// Creates database `name` in the admin's organization: (its `http_url`, a token).
async fn database(app: &TestApp, name: &str) -> (String, String) {
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": name, "group": "default"}),
    )
    .await
    .expect(200);
    let got = app
        .get(&format!("/v1/databases/{name}"), &app.admin_token)
        .await
        .expect(200);
    let token = app
        .post(
            &format!("/v1/databases/{name}/auth/tokens"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    (
        got["database"]["http_url"].as_str().unwrap().to_string(),
        token["jwt"].as_str().unwrap().to_string(),
    )
}

async fn pipeline(client: &reqwest::Client, url: &str, token: &str, sql: &str) -> Value {
    let response = client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]}))
        .send()
        .await
        .expect("pipeline over https");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["results"][0]["type"], "ok", "{body}");
    body["results"][0]["response"]["result"].clone()
}

#[tokio::test]
async fn the_api_and_the_database_hosts_speak_tls() {
    let certificate = TestCertificate::generate();
    let files = CertificateFiles::new(&certificate);
    let Some(app) = start(&files, &certificate).await else {
        return;
    };
    assert!(app.url.starts_with("https://"), "{}", app.url);
    app.get("/v1/user", &app.admin_token).await.expect(200);

    // The URLs the API gives say https: the clients must use TLS to reach the database.
    let (url, token) = database(&app, "secure").await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let instances = app
        .get("/v1/databases/secure/instances", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(instances["instances"][0]["http_url"], url.as_str());

    pipeline(&app.client, &url, &token, "CREATE TABLE t (x)").await;
    pipeline(&app.client, &url, &token, "INSERT INTO t VALUES (42)").await;
    let rows = pipeline(&app.client, &url, &token, "SELECT x FROM t").await;
    assert_eq!(rows["rows"][0][0]["value"], "42", "{rows}");

    // A client that does not trust the certificate is refused, on both listeners; so is
    // plain HTTP on a TLS port.
    let stranger = TestCertificate::generate().client();
    assert!(!answers(&stranger, &app.url).await);
    assert!(!answers(&stranger, &app.db_url).await);
    let plain = reqwest::Client::new();
    assert!(!answers(&plain, &app.url.replace("https://", "http://")).await);
    assert!(!answers(&plain, &app.db_url.replace("https://", "http://")).await);
    // The server is still fine after those failed handshakes.
    assert!(answers(&app.client, &app.db_url).await);
}

type TlsSocket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// Opens a Hrana 3 WebSocket over TLS to the database at `http_url` (`https://…/db/<x>/`).
async fn websocket(certificate: &TestCertificate, http_url: &str) -> TlsSocket {
    use tungstenite::client::IntoClientRequest;
    let address = http_url
        .strip_prefix("https://")
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_string();
    let tcp = tokio::net::TcpStream::connect(&address).await.unwrap();
    let server_name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = certificate
        .rustls_client()
        .connect(server_name, tcp)
        .await
        .expect("TLS handshake");
    let mut request = http_url
        .replace("https://", "wss://")
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "hrana3".parse().unwrap());
    let (socket, response) = tokio_tungstenite::client_async(request, tls)
        .await
        .expect("WebSocket upgrade over TLS");
    assert_eq!(response.headers()["sec-websocket-protocol"], "hrana3");
    socket
}

async fn send(socket: &mut TlsSocket, message: Value) -> Value {
    socket
        .send(tungstenite::Message::Text(message.to_string().into()))
        .await
        .unwrap();
    loop {
        match socket.next().await.unwrap().unwrap() {
            tungstenite::Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            tungstenite::Message::Close(frame) => panic!("socket closed: {frame:?}"),
            _ => continue,
        }
    }
}

#[tokio::test]
async fn hrana_websockets_work_over_tls() {
    let certificate = TestCertificate::generate();
    let files = CertificateFiles::new(&certificate);
    let Some(app) = start(&files, &certificate).await else {
        return;
    };
    let (url, token) = database(&app, "sockets").await;
    pipeline(&app.client, &url, &token, "CREATE TABLE t (x)").await;
    pipeline(
        &app.client,
        &url,
        &token,
        "INSERT INTO t VALUES ('over wss')",
    )
    .await;

    let mut socket = websocket(&certificate, &url).await;
    assert_eq!(
        send(&mut socket, json!({"type": "hello", "jwt": token})).await,
        json!({"type": "hello_ok"})
    );
    let opened = send(
        &mut socket,
        json!({"type": "request", "request_id": 1, "request": {"type": "open_stream", "stream_id": 1}}),
    )
    .await;
    assert_eq!(opened["type"], "response_ok", "{opened}");
    let selected = send(
        &mut socket,
        json!({"type": "request", "request_id": 2, "request": {
            "type": "execute", "stream_id": 1, "stmt": {"sql": "SELECT x FROM t", "want_rows": true}}}),
    )
    .await;
    assert_eq!(selected["type"], "response_ok", "{selected}");
    assert_eq!(
        selected["response"]["result"]["rows"][0][0]["value"],
        "over wss"
    );
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let old = TestCertificate::generate();
    let files = CertificateFiles::new(&old);
    let Some(app) = start(&files, &old).await else {
        return;
    };
    let (url, token) = database(&app, "renewed").await;
    assert!(answers(&old.client(), &app.url).await);
    assert!(answers(&old.client(), &app.db_url).await);

    let new = TestCertificate::generate();
    files.replace(&new.certificate_pem, &new.key_pem);

    // New connections (fresh clients: no pooled connection) see the new certificate on
    // both listeners, and only it.
    for listener in [&app.url, &app.db_url] {
        assert!(answers(&new.client(), listener).await, "{listener}");
        assert!(!answers(&old.client(), listener).await, "{listener}");
    }
    pipeline(&new.client(), &url, &token, "SELECT 1").await;
    // WebSockets too.
    let mut socket = websocket(&new, &url).await;
    assert_eq!(
        send(&mut socket, json!({"type": "hello", "jwt": token})).await,
        json!({"type": "hello_ok"})
    );
}

#[tokio::test]
async fn a_broken_renewal_keeps_the_working_certificate() {
    let old = TestCertificate::generate();
    let files = CertificateFiles::new(&old);
    let Some(app) = start(&files, &old).await else {
        return;
    };
    let other = TestCertificate::generate();

    // A key that is not the certificate's (a renewal that wrote one file of two), a file
    // that is not PEM, a missing key: the old certificate stays in service each time.
    let broken: [(&str, &str); 3] = [
        (&other.certificate_pem, &old.key_pem),
        ("not a certificate", &old.key_pem),
        (
            &other.certificate_pem,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        ),
    ];
    for (certificate_pem, key_pem) in broken {
        files.replace(certificate_pem, key_pem);
        assert!(answers(&old.client(), &app.url).await, "{certificate_pem}");
        assert!(
            answers(&old.client(), &app.db_url).await,
            "{certificate_pem}"
        );
        assert!(!answers(&other.client(), &app.url).await);
    }
    std::fs::remove_file(files.key()).unwrap();
    assert!(answers(&old.client(), &app.url).await);

    // Once the files are whole again, they are served.
    files.replace(&other.certificate_pem, &other.key_pem);
    assert!(answers(&other.client(), &app.url).await);
    assert!(answers(&other.client(), &app.db_url).await);
}

#[tokio::test]
async fn a_server_does_not_start_on_unusable_certificate_files() {
    let certificate = TestCertificate::generate();
    let other = TestCertificate::generate();
    let files = CertificateFiles::new(&certificate);
    files.replace(&certificate.certificate_pem, &other.key_pem);
    let mismatch = ServerTls::from_files(&files.certificate(), &files.key()).unwrap_err();
    assert!(mismatch.to_string().contains("does not fit"), "{mismatch}");
    files.replace("", &certificate.key_pem);
    let empty = ServerTls::from_files(&files.certificate(), &files.key()).unwrap_err();
    assert!(empty.to_string().contains("no certificate"), "{empty}");
    let missing = ServerTls::from_files(&files.dir.join("absent.pem"), &files.key()).unwrap_err();
    assert!(missing.to_string().contains("absent.pem"), "{missing}");
}

/// A client trusting the server's certificate and presenting `identity_pem` (certificate
/// and private key, PEM) as its own.
fn client_with_identity(server: &TestCertificate, identity_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem(server.certificate_pem.as_bytes()).unwrap(),
        )
        .identity(reqwest::Identity::from_pem(identity_pem.as_bytes()).unwrap())
        .build()
        .unwrap()
}

/// Runs `sql` on the database at `url` with no token: the TLS client certificate is the
/// credential. Answers the HTTP status and the first result.
async fn with_certificate(client: &reqwest::Client, url: &str, sql: &str) -> (u16, Value) {
    let response = client
        .post(format!("{url}v2/pipeline"))
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]}))
        .send()
        .await
        .expect("pipeline over https");
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// Issues a client certificate through the API: (certificate + key PEM, the answer).
async fn issue(app: &TestApp, prefix: &str, db: &str, query: &str) -> (String, Value) {
    let issued = app
        .post(
            &format!("{prefix}/databases/{db}/auth/certificates{query}"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    let identity = format!(
        "{}{}",
        issued["certificate"].as_str().unwrap(),
        issued["private_key"].as_str().unwrap()
    );
    (identity, issued)
}

#[tokio::test]
async fn client_certificates_stand_in_for_tokens_for_their_database_only() {
    let certificate = TestCertificate::generate();
    let files = CertificateFiles::new(&certificate);
    let Some(app) = start(&files, &certificate).await else {
        return;
    };
    let (url_a, _) = database(&app, "cert-a").await;
    let (url_b, _) = database(&app, "cert-b").await;

    let (identity, issued) = issue(&app, "/v1", "cert-a", "").await;
    assert_eq!(issued["authorization"], "full-access");
    assert!(issued["ca_certificate"]
        .as_str()
        .unwrap()
        .contains("BEGIN CERTIFICATE"));
    let client = client_with_identity(&certificate, &identity);
    let (status, body) = with_certificate(&client, &url_a, "CREATE TABLE t (x)").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["type"], "ok", "{body}");
    let (status, _) = with_certificate(&client, &url_a, "INSERT INTO t VALUES (1)").await;
    assert_eq!(status, 200);
    // Another database of the same organization: not this certificate's (404, as a token
    // of another database).
    let (status, _) = with_certificate(&client, &url_b, "SELECT 1").await;
    assert_eq!(status, 404);
    // Without a certificate or a token: 401, as before.
    let (status, _) = with_certificate(&certificate.client(), &url_a, "SELECT 1").await;
    assert_eq!(status, 401);

    // Read-only: reads, cannot write.
    let (read_only, _) = issue(&app, "/v1", "cert-a", "?authorization=read-only").await;
    let reader = client_with_identity(&certificate, &read_only);
    let (status, body) = with_certificate(&reader, &url_a, "SELECT count(*) FROM t").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["results"][0]["response"]["result"]["rows"][0][0]["value"], "1",
        "{body}"
    );
    let (status, _) = with_certificate(&reader, &url_a, "INSERT INTO t VALUES (2)").await;
    assert_eq!(status, 403);

    // Expired.
    let (short, _) = issue(&app, "/v1", "cert-a", "?expiration=1s").await;
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let (status, body) = with_certificate(
        &client_with_identity(&certificate, &short),
        &url_a,
        "SELECT 1",
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.to_string().contains("expired"), "{body}");

    // Issued by another organization's CA (for a database of that organization).
    let team = app.team(&app.admin_token, "certs-elsewhere").await;
    app.group(&team, &app.admin_token, "g1").await;
    app.database(
        &format!("/v1/organizations/{team}"),
        &app.admin_token,
        "far",
        "g1",
    )
    .await;
    let (foreign, _) = issue(&app, &format!("/v1/organizations/{team}"), "far", "").await;
    let (status, body) = with_certificate(
        &client_with_identity(&certificate, &foreign),
        &url_a,
        "SELECT 1",
    )
    .await;
    assert_eq!(status, 401, "{body}");

    // Self-signed, whatever it names.
    let forged =
        rcgen::generate_simple_self_signed(vec!["rw.key.cert-a.db.atoll.invalid".into()]).unwrap();
    let forged = format!("{}{}", forged.cert.pem(), forged.key_pair.serialize_pem());
    let (status, _) = with_certificate(
        &client_with_identity(&certificate, &forged),
        &url_a,
        "SELECT 1",
    )
    .await;
    assert_eq!(status, 401);

    // Certificates live at most 30 days and never forever.
    for query in ["?expiration=never", "?expiration=31d", "?expiration=soon"] {
        let reply = app
            .post(
                &format!("/v1/databases/cert-a/auth/certificates{query}"),
                &app.admin_token,
                json!({}),
            )
            .await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.body);
    }

    // Rotating the database's credentials ends its certificates too.
    app.post(
        "/v1/databases/cert-a/auth/rotate",
        &app.admin_token,
        json!({}),
    )
    .await
    .expect(200);
    let (status, _) = with_certificate(&client, &url_a, "SELECT 1").await;
    assert_ne!(status, 200);
    let (fresh, _) = issue(&app, "/v1", "cert-a", "").await;
    let (status, _) = with_certificate(
        &client_with_identity(&certificate, &fresh),
        &url_a,
        "SELECT 1",
    )
    .await;
    assert_eq!(status, 200);
}
