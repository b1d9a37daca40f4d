//! `/v1/auth/…`: login, validation, and the Authentication rules of the spec.

use crate::harness::{unique, PASSWORD};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn login_gives_a_week_long_token() {
    let app = app!();
    let name = unique("alice");
    app.user(&name).await;
    let reply = app
        .call(
            Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({"username": name, "password": PASSWORD})),
        )
        .await;
    let body = reply.expect(200);
    let token = body["token"].as_str().unwrap();
    assert!(token.starts_with("atoll_"));
    let exp = app.get("/v1/auth/validate", token).await.expect(200)["exp"]
        .as_i64()
        .unwrap();
    let week = 7 * 24 * 3600;
    let now = (atoll_meta::now_millis() / 1000) as i64;
    assert!(
        (exp - now - week).abs() < 60,
        "exp {exp} is not a week from now"
    );
}

#[tokio::test]
async fn bad_credentials_are_refused_alike() {
    let app = app!();
    let name = unique("bob");
    app.user(&name).await;
    for (username, password) in [(name.as_str(), "wrong-password"), ("nobody-here", PASSWORD)] {
        let reply = app
            .call(
                Method::POST,
                "/v1/auth/login",
                None,
                Some(json!({"username": username, "password": password})),
            )
            .await;
        assert_eq!(reply.status, 401);
        assert_eq!(reply.body["error"], "invalid username or password");
    }
    let reply = app
        .call(
            Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({"username": name})),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (400, "invalid_request"));
}

#[tokio::test]
async fn unusable_credentials_answer_401_with_a_reason() {
    let app = app!();
    let cases = [
        (None, "missing Authorization header"),
        (
            Some("Basic abc".to_string()),
            "malformed Authorization header",
        ),
        (Some("Bearer not-a-token".to_string()), "malformed token"),
        (
            Some(format!("Bearer atoll_{}", "A".repeat(43))),
            "invalid token",
        ),
    ];
    for (header, reason) in cases {
        let mut request = app.client.get(format!("{}/v1/user", app.url));
        if let Some(header) = header {
            request = request.header("Authorization", header);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401);
        let body: serde_json::Value = response.json().await.unwrap();
        assert!(
            body["error"].as_str().unwrap().starts_with(reason),
            "{body}"
        );
        assert_eq!(body["code"], "unauthorized");
    }
}

#[tokio::test]
async fn expired_and_revoked_tokens_answer_401() {
    let app = app!();
    let expired = app
        .api_token(&app.admin_token, json!({"expiration": "1s"}))
        .await;
    app.get("/v1/user", &expired).await.expect(200);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let reply = app.get("/v1/user", &expired).await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (401, Some("token has expired"))
    );

    let name = unique("t");
    let minted = app
        .post(
            &format!("/v1/auth/api-tokens/{name}"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200);
    let secret = minted["token"].as_str().unwrap();
    app.delete(&format!("/v1/auth/api-tokens/{name}"), &app.admin_token)
        .await
        .expect(200);
    let reply = app.get("/v1/user", secret).await;
    assert_eq!(
        (reply.status, reply.body["error"].as_str()),
        (401, Some("token has been revoked"))
    );
}

#[tokio::test]
async fn validate_reports_expiry_or_minus_one() {
    let app = app!();
    let never = app.api_token(&app.admin_token, json!({})).await;
    for path in ["/v1/auth/validate", "/v1/auth/api-tokens/validate"] {
        assert_eq!(app.get(path, &never).await.expect(200)["exp"], -1);
    }
    let day = app
        .api_token(&app.admin_token, json!({"expiration": "1d"}))
        .await;
    let exp = app.get("/v1/auth/validate", &day).await.expect(200)["exp"]
        .as_i64()
        .unwrap();
    assert!(exp > (atoll_meta::now_millis() / 1000) as i64 + 86_000);
}

#[tokio::test]
async fn repeated_failed_logins_are_throttled() {
    // A first wait long enough that no assertion depends on the machine's speed.
    let config = atoll_control::ControlConfig {
        login_throttle: atoll_control::LoginThrottleSettings {
            base_delay: std::time::Duration::from_secs(600),
            ..Default::default()
        },
        ..crate::harness::test_config()
    };
    let Some(app) = crate::harness::TestApp::start_with(config).await else {
        return;
    };
    let name = unique("guessed");
    app.user(&name).await;
    let attempt = |password: &'static str| {
        app.client
            .post(format!("{}/v1/auth/login", app.url))
            .json(&json!({"username": name, "password": password}))
            .send()
    };
    for _ in 0..atoll_control::LOGIN_FAILURES_BEFORE_BACKOFF {
        assert_eq!(attempt("wrong-guess").await.unwrap().status(), 401);
    }
    // This client waits now, even with the right password, and is told for how long.
    let locked = attempt(PASSWORD).await.unwrap();
    assert_eq!(locked.status(), 429);
    let wait: u64 = locked.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=600).contains(&wait), "{wait}");
    let body: serde_json::Value = locked.json().await.unwrap();
    assert_eq!(body["code"], "too_many_requests");
    // Other users are not affected.
    let other = unique("innocent");
    app.user(&other).await;
    app.login(&other).await;
}
