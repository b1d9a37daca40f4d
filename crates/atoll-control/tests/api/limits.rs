//! Abuse limits of the platform API: rate limits (429 + `Retry-After`), slow clients
//! (header and body timeouts), and the body limit of each route family (413).

use crate::harness::{TestApp, PASSWORD};
use atoll_control::ControlConfig;
use atoll_http::rate_limit::RateLimit;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn start(config: ControlConfig) -> Option<TestApp> {
    TestApp::start_with(config).await
}

/// Status, `Retry-After` and JSON body of a GET.
async fn get(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> (u16, Option<u64>, Value) {
    let mut request = client.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, retry_after, body)
}

#[tokio::test]
async fn requests_over_the_rate_limit_get_429_with_retry_after() {
    let Some(app) = start(ControlConfig {
        rate_per_credential: Some(RateLimit::per_minute(5)),
        rate_per_address: Some(RateLimit::per_minute(3)),
        ..ControlConfig::default()
    })
    .await
    else {
        return;
    };
    let user_url = format!("{}/v1/user", app.url);
    // One request of the administrator's five, and one of the address's three (login).
    let bob = app.user("bob").await;
    for _ in 0..4 {
        let (status, retry_after, _) = get(&app.client, &user_url, Some(&app.admin_token)).await;
        assert_eq!((status, retry_after), (200, None));
    }
    let (status, retry_after, body) = get(&app.client, &user_url, Some(&app.admin_token)).await;
    assert_eq!(status, 429, "{body}");
    // One request comes back every 12 seconds.
    let retry_after = retry_after.expect("Retry-After");
    assert!((1..=12).contains(&retry_after), "{retry_after}");
    assert_eq!(body["code"], "too_many_requests");
    assert!(
        body["error"].as_str().unwrap().contains("Retry-After"),
        "{body}"
    );

    // Another token has its own bucket.
    let (status, _, body) = get(&app.client, &user_url, Some(&bob)).await;
    assert_eq!(status, 200, "{body}");

    // Requests without a token are counted by address: two more of its three.
    let health = format!("{}/health", app.url);
    for _ in 0..2 {
        assert_eq!(get(&app.client, &health, None).await.0, 200);
    }
    let (status, retry_after, body) = get(&app.client, &health, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("too_many_requests"))
    );
    assert!(retry_after.is_some_and(|s| (1..=20).contains(&s)));
    let reply = app
        .call(
            reqwest::Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({"username": "bob", "password": PASSWORD})),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (429, "too_many_requests"));
    // A token from the same address is not held back by the address's bucket.
    assert_eq!(get(&app.client, &user_url, Some(&bob)).await.0, 200);
    // Another address (127.0.0.2 is loopback too) has its own.
    let elsewhere = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    assert_eq!(get(&elsewhere, &health, None).await.0, 200);
}

#[tokio::test]
async fn the_default_limits_leave_ordinary_use_alone() {
    let Some(app) = start(ControlConfig::default()).await else {
        return;
    };
    let user_url = format!("{}/v1/user", app.url);
    for _ in 0..200 {
        assert_eq!(
            get(&app.client, &user_url, Some(&app.admin_token)).await.0,
            200
        );
    }
}

/// Sends `head` (and `body`) on a raw connection, then waits, and answers what the server
/// sent before closing it (a generous bound, not a timing check).
async fn send_and_stall(url: &str, head: &str, body: &[u8]) -> String {
    let address = url.trim_start_matches("http://");
    let mut client = tokio::net::TcpStream::connect(address).await.unwrap();
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), client.read_to_end(&mut answer))
        .await
        .expect("the server never closed the stalled connection");
    // A reset counts as closed as well.
    let _ = read;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn bodies_that_stall_get_408() {
    let Some(app) = start(ControlConfig {
        body_read_timeout: Duration::from_secs(1),
        ..ControlConfig::default()
    })
    .await
    else {
        return;
    };
    let head = format!(
        "POST /v1/organizations/admin/groups HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
        app.admin_token
    );
    let answer = send_and_stall(&app.url, &head, br#"{"name": "#).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""code":"request_timeout""#), "{answer}");
}

#[tokio::test]
async fn clients_that_stall_in_their_headers_are_disconnected() {
    let Some(app) = start(ControlConfig {
        header_read_timeout: Duration::from_secs(1),
        ..ControlConfig::default()
    })
    .await
    else {
        return;
    };
    let answer = send_and_stall(
        &app.url,
        "GET /v1/user HTTP/1.1\r\nHost: localhost\r\nAuthoriz",
        b"",
    )
    .await;
    assert!(!answer.contains("200 OK"), "{answer}");
    // Complete requests are served as usual.
    assert_eq!(app.get("/v1/user", &app.admin_token).await.status, 200);
}

#[tokio::test]
async fn dumps_have_their_own_body_limit() {
    let Some(app) = start(ControlConfig {
        max_dump_bytes: 3 * 1024 * 1024,
        ..ControlConfig::default()
    })
    .await
    else {
        return;
    };
    // Larger than the 1 MiB of JSON bodies, within the dump limit.
    let dump = "INSERT INTO t VALUES (1);\n".repeat(2 * 1024 * 1024 / 26);
    let reply = app
        .post_file(
            "/v1/organizations/admin/databases/dumps",
            &app.admin_token,
            &dump,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let too_big = "INSERT INTO t VALUES (1);\n".repeat(4 * 1024 * 1024 / 26);
    let reply = app
        .post_file(
            "/v1/organizations/admin/databases/dumps",
            &app.admin_token,
            &too_big,
        )
        .await;
    assert_eq!((reply.status, reply.code()), (413, "payload_too_large"));
}

#[tokio::test]
async fn made_up_tokens_count_against_their_address() {
    let Some(app) = start(ControlConfig {
        rate_per_address: Some(RateLimit::per_minute(3)),
        ..ControlConfig::default()
    })
    .await
    else {
        return;
    };
    let user_url = format!("{}/v1/user", app.url);
    // Each guess would have a bucket of its own; refusals are charged to the address.
    for n in 0..3 {
        let (status, _, body) = get(&app.client, &user_url, Some(&format!("guess-{n}"))).await;
        assert_eq!(status, 401, "{body}");
    }
    let (status, retry_after, body) = get(&app.client, &user_url, Some("guess-3")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("too_many_requests"))
    );
    assert!(retry_after.is_some());
    // Other addresses are not affected.
    let elsewhere = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    assert_eq!(
        get(&elsewhere, &user_url, Some(&app.admin_token)).await.0,
        200
    );
    assert_eq!(get(&elsewhere, &user_url, Some("guess-4")).await.0, 401);
}

/// A console session is a credential with its own bucket, not its user's address; a
/// cookie that may not be used (no CSRF header) is the address's.
#[tokio::test]
async fn console_sessions_are_counted_as_credentials() {
    let Some(app) = start(ControlConfig {
        rate_per_credential: Some(RateLimit::per_minute(20)),
        rate_per_address: Some(RateLimit::per_minute(3)),
        ..ControlConfig::default()
    })
    .await
    else {
        return;
    };
    app.user("carol").await; // the address's first request (the login)
    let started = app
        .call(
            reqwest::Method::POST,
            "/v1/auth/session",
            None,
            Some(json!({"username": "carol", "password": PASSWORD})),
        )
        .await; // and its second
    let cookie = started.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    started.expect(200);
    for _ in 0..10 {
        app.call_with_headers(
            reqwest::Method::GET,
            "/v1/user",
            &[("Cookie", cookie.clone()), ("X-Atoll-CSRF", "1".into())],
            None,
        )
        .await
        .expect(200);
    }
    // Without the header the cookie is no credential: the address pays, and runs out.
    let forged = [("Cookie", cookie.clone())];
    app.call_with_headers(reqwest::Method::GET, "/v1/user", &forged, None)
        .await
        .expect(403);
    let reply = app
        .call_with_headers(reqwest::Method::GET, "/v1/user", &forged, None)
        .await;
    assert_eq!((reply.status, reply.code()), (429, "too_many_requests"));
}
