//! `/v2/organizations/{org}/jwks…` and `…/jwks-template`: an organization's own auth
//! provider. Key sets generated here (RSA from a fixture, ECDSA P-256 and Ed25519 made per
//! run) sign end users' JWTs, which then query databases over Hrana (`/v2/pipeline`) as
//! their claims allow, and nothing more.

use crate::harness::{test_config, unique, TestApp};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key of an end users' auth provider, and its public JWK.
enum Signer {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
    Ed(Ed25519KeyPair),
}

struct ProviderKey {
    kid: String,
    signer: Signer,
    jwk: Value,
}

impl ProviderKey {
    fn rsa(kid: &str) -> ProviderKey {
        let fixture: Value =
            serde_json::from_str(include_str!("../fixtures/rsa-test-key.json")).unwrap();
        let der = URL_SAFE_NO_PAD
            .decode(fixture["pkcs8"].as_str().unwrap())
            .unwrap();
        ProviderKey {
            kid: kid.into(),
            signer: Signer::Rsa(RsaKeyPair::from_pkcs8(&der).unwrap()),
            jwk: json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": fixture["n"], "e": fixture["e"]}),
        }
    }

    fn ec(kid: &str) -> ProviderKey {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref().to_vec();
        ProviderKey {
            kid: kid.into(),
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "x": b64(&point[1..33]), "y": b64(&point[33..])}),
            signer: Signer::Ec(pair),
        }
    }

    fn ed(kid: &str) -> ProviderKey {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        ProviderKey {
            kid: kid.into(),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(pair.public_key().as_ref())}),
            signer: Signer::Ed(pair),
        }
    }

    fn alg(&self) -> &'static str {
        match self.signer {
            Signer::Rsa(_) => "RS256",
            Signer::Ec(_) => "ES256",
            Signer::Ed(_) => "EdDSA",
        }
    }

    /// A token with `claims`, its header naming this key.
    fn sign(&self, claims: Value) -> String {
        self.sign_with_header(
            json!({"alg": self.alg(), "typ": "JWT", "kid": self.kid}),
            claims,
        )
    }

    fn sign_with_header(&self, header: Value, claims: Value) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match &self.signer {
            Signer::Rsa(pair) => {
                let mut out = vec![0; pair.public().modulus_len()];
                pair.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    input.as_bytes(),
                    &mut out,
                )
                .unwrap();
                out
            }
            Signer::Ec(pair) => pair.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
            Signer::Ed(pair) => pair.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", b64(&signature))
    }
}

fn key_set(keys: &[&ProviderKey]) -> Value {
    json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn in_an_hour() -> i64 {
    now() + 3600
}

async fn put(
    app: &TestApp,
    org: &str,
    token: &str,
    name: &str,
    body: Value,
) -> crate::harness::Reply {
    app.call(
        reqwest::Method::PUT,
        &format!("/v2/organizations/{org}/jwks/{name}"),
        Some(token),
        Some(body),
    )
    .await
}

/// A database of `org`: (its id, its data-plane URL).
async fn database(
    app: &TestApp,
    org: &str,
    token: &str,
    name: &str,
    group: &str,
) -> (String, String) {
    app.database(&format!("/v1/organizations/{org}"), token, name, group)
        .await;
    let got = app
        .get(&format!("/v1/organizations/{org}/databases/{name}"), token)
        .await
        .expect(200);
    (
        got["database"]["DbId"].as_str().unwrap().to_string(),
        got["database"]["http_url"].as_str().unwrap().to_string(),
    )
}

/// Runs one statement through `/v2/pipeline`: the HTTP status, and the execute result or
/// the error.
async fn execute(app: &TestApp, url: &str, token: &str, sql: &str) -> (u16, Value) {
    let body = json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]});
    let response = app
        .client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status != 200 {
        return (status, body);
    }
    let result = &body["results"][0];
    if result["type"] == "ok" {
        (200, result["response"]["result"].clone())
    } else {
        (200, json!({"error": result["error"]}))
    }
}

async fn group_id(app: &TestApp, org: &str, token: &str, group: &str) -> String {
    app.get(&format!("/v1/organizations/{org}/groups/{group}"), token)
        .await
        .expect(200)["group"]["uuid"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn key_sets_are_registered_listed_templated_and_removed() {
    let app = app!();
    let owner = app.user(&unique("jwksowner")).await;
    let org = app.team(&owner, &unique("jwks")).await;
    app.group(&org, &owner, "g1").await;
    let (db_id, _) = database(&app, &org, &owner, "one", "g1").await;
    let ed = ProviderKey::ed("ed-1");
    let ec = ProviderKey::ec("ec-1");

    let saved = put(
        &app,
        &org,
        &owner,
        "clerk",
        json!({"jwks": key_set(&[&ed, &ec])}),
    )
    .await
    .expect(200);
    assert_eq!(saved["jwks"]["jwks_name"], "clerk");
    assert_eq!(saved["jwks"]["key_ids"], json!(["ed-1", "ec-1"]));
    let list = app
        .get(&format!("/v2/organizations/{org}/jwks"), &owner)
        .await
        .expect(200);
    assert_eq!(list["jwks"][0]["jwks_name"], "clerk");
    assert_eq!(list["jwks"][0]["jwks_url"], "");
    assert!(list["jwks"][0]["last_error"].is_null());

    // The template: the claims the provider puts in its tokens. The turso CLI sends its
    // request as a JSON body on GET; the query string works too.
    let template = app
        .call(
            reqwest::Method::GET,
            &format!("/v2/organizations/{org}/jwks-template"),
            Some(&owner),
            Some(json!({"database": "one", "group": null, "scope": "full-access", "permissions": []})),
        )
        .await
        .expect(200);
    assert_eq!(template["template"], json!({"a": "rw", "id": db_id}));
    let gid = group_id(&app, &org, &owner, "g1").await;
    let template = app
        .get(
            &format!("/v2/organizations/{org}/jwks-template?group=g1&scope=read-only"),
            &owner,
        )
        .await
        .expect(200);
    assert_eq!(template["template"], json!({"a": "ro", "gid": gid}));
    for (query, status) in [
        ("", 400),
        ("?database=one&group=g1", 400),
        ("?database=nope", 404),
        ("?group=nope", 404),
        ("?database=one&scope=admin", 400),
    ] {
        let reply = app
            .get(
                &format!("/v2/organizations/{org}/jwks-template{query}"),
                &owner,
            )
            .await;
        assert_eq!(reply.status, status, "{query}: {}", reply.body);
    }
    let fine_grained = app
        .call(
            reqwest::Method::GET,
            &format!("/v2/organizations/{org}/jwks-template"),
            Some(&owner),
            Some(json!({"database": "one", "permissions": [{"t": ["all"], "a": ["data_read"]}]})),
        )
        .await;
    assert_eq!(fine_grained.status, 501, "{}", fine_grained.body);

    // Bad input: clear errors, nothing registered.
    let mut private = ec.jwk.clone();
    private["d"] = json!("c2VjcmV0");
    for (name, body, code) in [
        ("nothing", json!({}), "invalid_request"),
        (
            "both",
            json!({"jwks": key_set(&[&ed]), "jwks_url": "https://example.com/jwks.json"}),
            "invalid_request",
        ),
        (
            "private",
            json!({"jwks": {"keys": [private]}}),
            "invalid_jwks",
        ),
        ("empty", json!({"jwks": {"keys": []}}), "invalid_jwks"),
        (
            "hmac",
            json!({"jwks": {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}}),
            "invalid_jwks",
        ),
        ("garbage", json!({"jwks": "not a key set"}), "invalid_jwks"),
        (
            "url",
            json!({"jwks_url": "https://example.com/.well-known/jwks.json", "region": ""}),
            "jwks_url_not_allowed",
        ),
        ("Bad_Name", json!({"jwks": key_set(&[&ed])}), "invalid_name"),
    ] {
        let reply = put(&app, &org, &owner, name, body).await;
        assert_eq!(reply.status, 400, "{name}: {}", reply.body);
        assert_eq!(reply.code(), code, "{name}: {}", reply.body);
    }
    let list = app
        .get(&format!("/v2/organizations/{org}/jwks"), &owner)
        .await
        .expect(200);
    assert_eq!(list["jwks"].as_array().unwrap().len(), 1);

    // At most ten per organization.
    for i in 0..9 {
        put(
            &app,
            &org,
            &owner,
            &format!("set-{i}"),
            json!({"jwks": key_set(&[&ed])}),
        )
        .await
        .expect(200);
    }
    let reply = put(
        &app,
        &org,
        &owner,
        "eleventh",
        json!({"jwks": key_set(&[&ed])}),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.code(), "too_many_jwks");
    // Replacing one is not adding one.
    put(
        &app,
        &org,
        &owner,
        "set-0",
        json!({"jwks": key_set(&[&ec])}),
    )
    .await
    .expect(200);

    // Removing: the CLI sends `{"region"}` on DELETE; an unknown name is 404.
    app.call(
        reqwest::Method::DELETE,
        &format!("/v2/organizations/{org}/jwks/clerk"),
        Some(&owner),
        Some(json!({"region": ""})),
    )
    .await
    .expect(200);
    let again = app
        .delete(&format!("/v2/organizations/{org}/jwks/clerk"), &owner)
        .await;
    assert_eq!(again.status, 404);
    assert_eq!(again.code(), "jwks_not_found");

    // Both are audited.
    let logs = app
        .get(&format!("/v1/organizations/{org}/audit-logs"), &owner)
        .await
        .expect(200);
    let codes: Vec<&str> = logs["audit_logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"org-jwks-save"), "{codes:?}");
    assert!(codes.contains(&"org-jwks-rm"), "{codes:?}");
}

#[tokio::test]
async fn end_users_query_as_their_providers_tokens_allow_and_no_further() {
    let app = app!();
    let owner = app.user(&unique("byoa")).await;
    let org = app.team(&owner, &unique("byoa")).await;
    app.group(&org, &owner, "g1").await;
    app.group(&org, &owner, "g2").await;
    let (a_id, a_url) = database(&app, &org, &owner, "a", "g1").await;
    let (_, b_url) = database(&app, &org, &owner, "b", "g1").await;
    let (_, c_url) = database(&app, &org, &owner, "c", "g2").await;
    let g1 = group_id(&app, &org, &owner, "g1").await;
    let rsa = ProviderKey::rsa("rsa-1");
    let ec = ProviderKey::ec("ec-1");
    let ed = ProviderKey::ed("ed-1");

    // Before any key set is registered, the provider's token is nobody's.
    let rw_a = json!({"a": "rw", "id": a_id, "exp": in_an_hour(), "sub": "user_1"});
    let (status, _) = execute(&app, &a_url, &rsa.sign(rw_a.clone()), "SELECT 1").await;
    assert_eq!(status, 401);

    put(
        &app,
        &org,
        &owner,
        "provider",
        json!({"jwks": key_set(&[&rsa, &ec, &ed])}),
    )
    .await
    .expect(200);

    // Each algorithm: a read-write token for A writes and reads A.
    for key in [&rsa, &ec, &ed] {
        let token = key.sign(rw_a.clone());
        let (status, body) = execute(
            &app,
            &a_url,
            &token,
            "CREATE TABLE IF NOT EXISTS t (v TEXT)",
        )
        .await;
        assert_eq!(status, 200, "{}: {body}", key.alg());
        assert!(body.get("error").is_none(), "{}: {body}", key.alg());
        let (status, body) = execute(&app, &a_url, &token, "INSERT INTO t VALUES ('x')").await;
        assert_eq!(status, 200);
        assert_eq!(body["affected_row_count"], 1, "{body}");
    }

    // A read-only token reads and cannot write.
    let ro = ec.sign(json!({"a": "ro", "id": a_id, "exp": in_an_hour()}));
    let (status, body) = execute(&app, &a_url, &ro, "SELECT count(*) FROM t").await;
    assert_eq!(status, 200);
    assert_eq!(body["rows"][0][0]["value"], "3", "{body}");
    let (status, _) = execute(&app, &a_url, &ro, "INSERT INTO t VALUES ('no')").await;
    assert_eq!(status, 403);

    // A token for A does not reach B (404: a token never learns of other databases).
    let (status, _) = execute(&app, &b_url, &rsa.sign(rw_a.clone()), "SELECT 1").await;
    assert_eq!(status, 404);

    // A group token reaches the group's databases, not another group's.
    let group_token = ed.sign(json!({"a": "rw", "gid": g1, "exp": in_an_hour()}));
    for url in [&a_url, &b_url] {
        let (status, body) = execute(&app, url, &group_token, "SELECT 1").await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = execute(&app, &c_url, &group_token, "SELECT 1").await;
    assert_eq!(status, 404);

    // Refused: expired, no expiry, no rights claim, no database claim, `alg: none`, HMAC
    // keyed with the public key, a signature by a key that is not in the set (same kid),
    // a payload changed after signing, a key id the set does not have.
    let expired = rsa.sign(json!({"a": "rw", "id": a_id, "exp": now() - 3600}));
    let (status, body) = execute(&app, &a_url, &expired, "SELECT 1").await;
    assert_eq!(status, 401);
    assert!(body.to_string().contains("expired"), "{body}");
    for claims in [
        json!({"a": "rw", "id": a_id}),
        json!({"id": a_id, "exp": in_an_hour()}),
        json!({"a": "rw", "exp": in_an_hour()}),
        json!({"a": "superuser", "id": a_id, "exp": in_an_hour()}),
    ] {
        let (status, body) = execute(&app, &a_url, &ec.sign(claims.clone()), "SELECT 1").await;
        assert_eq!(status, 401, "{claims}: {body}");
    }
    let none = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT"}"#),
        b64(rw_a.to_string().as_bytes())
    );
    let hmac_input = format!(
        "{}.{}",
        b64(br#"{"alg":"HS256","typ":"JWT","kid":"ed-1"}"#),
        b64(rw_a.to_string().as_bytes())
    );
    let hmac_key = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        ed.jwk["x"].as_str().unwrap().as_bytes(),
    );
    let hmac = format!(
        "{hmac_input}.{}",
        b64(ring::hmac::sign(&hmac_key, hmac_input.as_bytes()).as_ref())
    );
    let impostor = ProviderKey::ec("ec-1").sign(rw_a.clone());
    let mut parts: Vec<String> = ec
        .sign(json!({"a": "ro", "id": a_id, "exp": in_an_hour()}))
        .split('.')
        .map(str::to_string)
        .collect();
    parts[1] = b64(rw_a.to_string().as_bytes());
    let tampered = parts.join(".");
    let unknown_kid = ed.sign_with_header(json!({"alg": "EdDSA", "kid": "ed-2"}), rw_a.clone());
    for (what, token) in [
        ("alg none", none),
        ("hmac", hmac),
        ("impostor", impostor),
        ("tampered", tampered),
        ("unknown kid", unknown_kid),
    ] {
        let (status, body) = execute(&app, &a_url, &token, "SELECT 1").await;
        assert_eq!(status, 401, "{what}: {body}");
    }

    // Another organization's provider: its key set is its own. A token it signs names A's
    // id; A never has that key. And this organization's provider cannot reach the other
    // organization's databases by naming them.
    let other_owner = app.user(&unique("rival")).await;
    let other_org = app.team(&other_owner, &unique("rival")).await;
    app.group(&other_org, &other_owner, "g1").await;
    let (x_id, x_url) = database(&app, &other_org, &other_owner, "x", "g1").await;
    let rival = ProviderKey::ec("rival-1");
    put(
        &app,
        &other_org,
        &other_owner,
        "provider",
        json!({"jwks": key_set(&[&rival])}),
    )
    .await
    .expect(200);
    let (status, _) = execute(&app, &a_url, &rival.sign(rw_a.clone()), "SELECT 1").await;
    assert_eq!(status, 401);
    let into_x = json!({"a": "rw", "id": x_id, "exp": in_an_hour()});
    let (status, _) = execute(&app, &x_url, &ec.sign(into_x.clone()), "SELECT 1").await;
    assert_eq!(status, 401);
    let (status, _) = execute(&app, &x_url, &rival.sign(into_x), "SELECT 1").await;
    assert_eq!(status, 200);

    // The database's own tokens still work beside the provider's.
    let own = app
        .post(
            &format!("/v1/organizations/{org}/databases/a/auth/tokens"),
            &owner,
            json!({}),
        )
        .await
        .expect(200)["jwt"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = execute(&app, &a_url, &own, "SELECT 1").await;
    assert_eq!(status, 200);

    // A database created after the key set gets its keys too.
    let (d_id, d_url) = database(&app, &org, &owner, "d", "g2").await;
    let into_d = ed.sign(json!({"a": "rw", "id": d_id, "exp": in_an_hour()}));
    let (status, _) = execute(&app, &d_url, &into_d, "SELECT 1").await;
    assert_eq!(status, 200);

    // Removing the key set ends its tokens at once.
    app.delete(&format!("/v2/organizations/{org}/jwks/provider"), &owner)
        .await
        .expect(200);
    let (status, _) = execute(&app, &a_url, &rsa.sign(rw_a.clone()), "SELECT 1").await;
    assert_eq!(status, 401);
    let (status, _) = execute(&app, &d_url, &into_d, "SELECT 1").await;
    assert_eq!(status, 401);
    let (status, _) = execute(&app, &b_url, &group_token, "SELECT 1").await;
    assert_eq!(status, 401);
}

/// A tiny auth provider: serves whatever key set it holds now at `/jwks.json`, a redirect
/// at `/moved`, and a document too large at `/huge`.
async fn provider_server(keys: Arc<Mutex<Value>>) -> String {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/jwks.json",
            get(move || {
                let keys = Arc::clone(&keys);
                async move { axum::Json(keys.lock().unwrap().clone()) }
            }),
        )
        .route(
            "/moved",
            get(|| async {
                (
                    axum::http::StatusCode::FOUND,
                    [(axum::http::header::LOCATION, "/jwks.json")],
                )
            }),
        )
        .route("/huge", get(|| async { "x".repeat(200 * 1024) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn key_sets_from_urls_are_fetched_refreshed_and_guarded() {
    let first = ProviderKey::ec("first");
    let second = ProviderKey::ed("second");
    let served = Arc::new(Mutex::new(key_set(&[&first])));
    let provider = provider_server(Arc::clone(&served)).await;

    let mut config = test_config();
    config.jwks.allowed_urls = vec![format!("{provider}/")];
    config.jwks.allow_private_addresses = true;
    let Some(app) = TestApp::start_with(config).await else {
        return;
    };
    let owner = app.user(&unique("urlowner")).await;
    let org = app.team(&owner, &unique("urls")).await;
    app.group(&org, &owner, "g1").await;
    let (db_id, db_url) = database(&app, &org, &owner, "one", "g1").await;
    let claims = json!({"a": "rw", "id": db_id, "exp": in_an_hour()});

    let saved = put(
        &app,
        &org,
        &owner,
        "auth0",
        json!({"jwks_url": format!("{provider}/jwks.json"), "region": ""}),
    )
    .await
    .expect(200);
    assert_eq!(saved["jwks"]["jwks_url"], format!("{provider}/jwks.json"));
    assert_eq!(saved["jwks"]["key_ids"], json!(["first"]));
    let (status, _) = execute(&app, &db_url, &first.sign(claims.clone()), "SELECT 1").await;
    assert_eq!(status, 200);

    // The provider rotates: after a refresh the new key works and the old one does not.
    *served.lock().unwrap() = key_set(&[&second]);
    let report = atoll_control::jwks::refresh_once(&app.state, "test", atoll_meta::now_millis())
        .await
        .unwrap();
    assert!(report.ran);
    assert_eq!(report.changed.len(), 1);
    let (status, _) = execute(&app, &db_url, &second.sign(claims.clone()), "SELECT 1").await;
    assert_eq!(status, 200);
    let (status, _) = execute(&app, &db_url, &first.sign(claims.clone()), "SELECT 1").await;
    assert_eq!(status, 401);

    // A refresh that fails keeps the last keys and says why.
    *served.lock().unwrap() = json!({"not": "a key set"});
    let report = atoll_control::jwks::refresh_once(&app.state, "test", atoll_meta::now_millis())
        .await
        .unwrap();
    assert_eq!(report.failed.len(), 1);
    let (status, _) = execute(&app, &db_url, &second.sign(claims.clone()), "SELECT 1").await;
    assert_eq!(status, 200);
    let list = app
        .get(&format!("/v2/organizations/{org}/jwks"), &owner)
        .await
        .expect(200);
    assert!(
        list["jwks"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("not a JSON Web Key Set"),
        "{list}"
    );

    // Guards: redirects are not followed, large answers are cut off, URLs outside the
    // operator's prefixes are not fetched.
    for (path, code) in [
        (format!("{provider}/moved"), "invalid_jwks"),
        (format!("{provider}/huge"), "invalid_jwks"),
        (
            "http://127.0.0.2:1/jwks.json".to_string(),
            "jwks_url_not_allowed",
        ),
        (
            "https://example.com/jwks.json".to_string(),
            "jwks_url_not_allowed",
        ),
    ] {
        let reply = put(&app, &org, &owner, "guarded", json!({"jwks_url": path})).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert_eq!(reply.code(), code, "{path}: {}", reply.body);
    }

    // Without the operator's leave, a URL on a private address is refused even when its
    // prefix is allowed (SSRF: a tenant must not make the server fetch from its network).
    let mut config = test_config();
    config.jwks.allowed_urls = vec![format!("{provider}/")];
    let Some(strict) = TestApp::start_with(config).await else {
        return;
    };
    let owner = strict.user(&unique("strict")).await;
    let org = strict.team(&owner, &unique("strict")).await;
    let reply = put(
        &strict,
        &org,
        &owner,
        "internal",
        json!({"jwks_url": format!("{provider}/jwks.json")}),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.code(), "jwks_url_not_allowed");
    assert!(reply.body["error"]
        .as_str()
        .unwrap()
        .contains("not a public address"));
}
