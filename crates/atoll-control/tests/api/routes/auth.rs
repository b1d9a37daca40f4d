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

/// The session cookie of a `POST /v1/auth/session` answer, checked for its attributes.
fn session_cookie_of(reply: &crate::harness::Reply) -> String {
    let set_cookie = reply
        .headers
        .get("set-cookie")
        .expect("a Set-Cookie header")
        .to_str()
        .unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=604800"] {
        assert!(
            set_cookie.split("; ").any(|a| a == attribute),
            "{attribute} missing from {set_cookie}"
        );
    }
    // Plain HTTP here: `Secure` would make the browser drop it.
    assert!(!set_cookie.contains("Secure"), "{set_cookie}");
    let pair = set_cookie.split(';').next().unwrap();
    let token = pair
        .strip_prefix("atoll_session=")
        .expect("the session cookie");
    assert!(token.starts_with("atoll_"));
    token.to_string()
}

async fn start_session(app: &crate::harness::TestApp, username: &str) -> String {
    let reply = app
        .call(
            Method::POST,
            "/v1/auth/session",
            None,
            Some(json!({"username": username, "password": PASSWORD})),
        )
        .await;
    let token = session_cookie_of(&reply);
    let body = reply.expect(200);
    assert_eq!(body["username"], username);
    // The token is in the cookie only: the page's scripts never see it.
    assert!(body.get("token").is_none(), "{body}");
    assert!(!body.to_string().contains(&token));
    token
}

fn cookie(token: &str) -> (&'static str, String) {
    ("Cookie", format!("theme=dark; atoll_session={token}"))
}

fn csrf() -> (&'static str, String) {
    ("X-Atoll-CSRF", "1".to_string())
}

#[tokio::test]
async fn a_console_session_is_a_login_token_in_an_http_only_cookie() {
    let app = app!();
    let name = unique("carol");
    app.user(&name).await;
    let token = start_session(&app, &name).await;

    // With the CSRF header, the cookie is the user's credential on every route.
    let who = app
        .call_with_headers(Method::GET, "/v1/user", &[cookie(&token), csrf()], None)
        .await
        .expect(200);
    assert_eq!(who["user"]["username"], name);
    app.call_with_headers(
        Method::POST,
        "/v1/organizations",
        &[cookie(&token), csrf()],
        Some(json!({"name": unique("Console Org")})),
    )
    .await
    .expect(200);
    // It is the same login token a script would hold.
    app.get("/v1/auth/validate", &token).await.expect(200);

    // Wrong username or password: refused like the plain login, and no cookie.
    let refused = app
        .call(
            Method::POST,
            "/v1/auth/session",
            None,
            Some(json!({"username": name, "password": "not-the-password"})),
        )
        .await;
    assert!(refused.headers.get("set-cookie").is_none());
    assert_eq!(refused.expect(401)["code"], "unauthorized");

    // Behind a TLS-terminating proxy the cookie is `Secure`.
    let proxied = app
        .call_with_headers(
            Method::POST,
            "/v1/auth/session",
            &[("X-Forwarded-Proto", "https".to_string())],
            Some(json!({"username": name, "password": PASSWORD})),
        )
        .await;
    let set_cookie = proxied.headers["set-cookie"].to_str().unwrap().to_string();
    assert!(set_cookie.ends_with("; Secure"), "{set_cookie}");
    proxied.expect(200);
}

#[tokio::test]
async fn a_session_cookie_without_the_csrf_header_is_refused() {
    let app = app!();
    let name = unique("dan");
    app.user(&name).await;
    let token = start_session(&app, &name).await;

    // What a forged cross-site request carries: the cookie, no custom header.
    for (method, path, body) in [
        (Method::GET, "/v1/user", None),
        (
            Method::POST,
            "/v1/organizations",
            Some(json!({"name": unique("Forged")})),
        ),
        (Method::POST, "/v1/auth/invalidate", None),
    ] {
        let reply = app
            .call_with_headers(method.clone(), path, &[cookie(&token)], body)
            .await;
        assert_eq!(reply.status, 403, "{method} {path}: {}", reply.body);
        assert!(
            reply.body["error"]
                .as_str()
                .unwrap()
                .contains("X-Atoll-CSRF"),
            "{}",
            reply.body
        );
    }
    // An empty header does not count.
    app.call_with_headers(
        Method::GET,
        "/v1/user",
        &[cookie(&token), ("X-Atoll-CSRF", String::new())],
        None,
    )
    .await
    .expect(403);
    // A browser that says the request came from another site is refused even with it.
    for site in ["cross-site", "same-site"] {
        app.call_with_headers(
            Method::GET,
            "/v1/user",
            &[cookie(&token), csrf(), ("Sec-Fetch-Site", site.to_string())],
            None,
        )
        .await
        .expect(403);
    }
    app.call_with_headers(
        Method::GET,
        "/v1/user",
        &[
            cookie(&token),
            csrf(),
            ("Sec-Fetch-Site", "same-origin".to_string()),
        ],
        None,
    )
    .await
    .expect(200);
    // Nothing was done by the refused requests: the session still works, and no forged
    // organization exists.
    let orgs = app.get("/v1/organizations", &token).await.expect(200);
    assert_eq!(orgs.as_array().unwrap().len(), 1, "{orgs}");
}

#[tokio::test]
async fn a_session_cookie_holds_only_login_tokens() {
    let app = app!();
    let name = unique("erin");
    let login = app.user(&name).await;
    let api_token = app.api_token(&login, json!({})).await;
    // An API token put in the cookie by hand is not a session.
    app.call_with_headers(Method::GET, "/v1/user", &[cookie(&api_token), csrf()], None)
        .await
        .expect(401);
    // An explicit Authorization header wins over the cookie.
    let token = start_session(&app, &name).await;
    app.call_with_headers(
        Method::GET,
        "/v1/user",
        &[
            cookie(&token),
            csrf(),
            ("Authorization", "Bearer not-a-token".to_string()),
        ],
        None,
    )
    .await
    .expect(401);
}

#[tokio::test]
async fn logging_out_revokes_the_session_and_clears_the_cookie() {
    let app = app!();
    let name = unique("frank");
    let other_session = app.user(&name).await;
    let token = start_session(&app, &name).await;

    // Without the CSRF header the cookie is cleared but the token is not revoked.
    let reply = app
        .call_with_headers(Method::DELETE, "/v1/auth/session", &[cookie(&token)], None)
        .await;
    let cleared = reply.headers["set-cookie"].to_str().unwrap().to_string();
    assert!(cleared.starts_with("atoll_session=;"), "{cleared}");
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    reply.expect(200);
    app.get("/v1/auth/validate", &token).await.expect(200);

    app.call_with_headers(
        Method::DELETE,
        "/v1/auth/session",
        &[cookie(&token), csrf()],
        None,
    )
    .await
    .expect(200);
    let after = app
        .call_with_headers(Method::GET, "/v1/user", &[cookie(&token), csrf()], None)
        .await;
    assert_eq!(after.status, 401);
    assert_eq!(after.body["error"], "token has been revoked");
    // Only that session ends: the user's other login stays.
    app.get("/v1/user", &other_session).await.expect(200);
    // Logging out with no session at all is fine, and still clears the cookie.
    let reply = app
        .call_with_headers(Method::DELETE, "/v1/auth/session", &[], None)
        .await;
    assert!(reply.headers.contains_key("set-cookie"));
    reply.expect(200);
}
