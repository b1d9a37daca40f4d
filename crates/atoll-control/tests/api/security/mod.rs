//! The adversarial suite of the control plane: each finding of issue 10 that the control
//! plane closes, tried as an attacker would (through the HTTP API, as the attacker used
//! it), plus the classes around it. A hole found later becomes a test here first. The
//! data plane's own suite is `crates/atoll-data/tests/sandbox.rs`.

mod copies_and_attach;
mod dumps;
mod encryption_at_rest;
mod login_abuse;
mod login_csrf;
mod quotas;
mod secrets_at_rest;
mod tenant_sql;
mod tls;
mod transfers;

use crate::harness::TestApp;
use serde_json::{json, Value};

/// The `http_url` of a database (`prefix` is `/v1` or `/v1/organizations/{org}`).
pub async fn http_url(app: &TestApp, prefix: &str, db: &str, token: &str) -> String {
    app.get(&format!("{prefix}/databases/{db}"), token)
        .await
        .expect(200)["database"]["http_url"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Mints a database or group token (`path` ends before `/auth/tokens`) with `body`.
pub async fn mint(app: &TestApp, path: &str, token: &str, body: Value) -> String {
    app.post(&format!("{path}/auth/tokens"), token, body)
        .await
        .expect(200)["jwt"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Runs statements through `/v2/pipeline`: the HTTP status and the body.
pub async fn pipeline(app: &TestApp, url: &str, token: &str, sql: &[&str]) -> (u16, Value) {
    let mut requests: Vec<Value> = sql
        .iter()
        .map(|sql| json!({"type": "execute", "stmt": {"sql": sql}}))
        .collect();
    requests.push(json!({"type": "close"}));
    let response = app
        .client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({ "requests": requests }))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}
