//! Issue 26 — login cross-site request forgery: a page of another site must not be able to
//! log the visitor's browser in (as the attacker, whose console the victim would then
//! fill). A browser says where a request comes from (`Sec-Fetch-Site`, `Origin`); both
//! logins refuse, with 403 and before any password is checked, what comes from elsewhere.
//! Clients that are not browsers send neither header and log in as before.

use crate::harness::{unique, TestApp, PASSWORD};
use reqwest::header::CONTENT_TYPE;

const LOGINS: [&str; 2] = ["/v1/auth/session", "/v1/auth/login"];

/// Posts the login body of `username` to `path` with these headers, as JSON unless a
/// `Content-Type` is among them (then the JSON text is sent under that type, as a form or
/// a "simple" `fetch` of another site would).
async fn log_in(
    app: &TestApp,
    path: &str,
    username: &str,
    headers: &[(&str, &str)],
) -> crate::harness::Reply {
    let body = serde_json::json!({"username": username, "password": PASSWORD}).to_string();
    let mut request = app.client.post(format!("{}{path}", app.url)).body(body);
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-type"))
    {
        request = request.header(CONTENT_TYPE, "application/json");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    crate::harness::Reply {
        status,
        body,
        headers,
    }
}

#[tokio::test]
async fn a_login_from_another_site_is_refused_and_sets_no_cookie() {
    let app = app!();
    // The attacker's own account: what a forged login would log the victim in as.
    let attacker = unique("attacker");
    app.user(&attacker).await;
    let text_plain = ("Content-Type", "text/plain;charset=UTF-8");
    let forged: [(&str, Vec<(&str, &str)>); 7] = [
        (
            "Sec-Fetch-Site: cross-site",
            vec![("Sec-Fetch-Site", "cross-site")],
        ),
        // Another origin of the same site: the data plane's port, say.
        (
            "Sec-Fetch-Site: same-site",
            vec![("Sec-Fetch-Site", "same-site")],
        ),
        ("a foreign Origin", vec![("Origin", "https://evil.example")]),
        ("the data plane's Origin", vec![("Origin", &app.db_url)]),
        ("Origin: null", vec![("Origin", "null")]),
        (
            "a text/plain form post",
            vec![text_plain, ("Origin", "https://evil.example")],
        ),
        (
            "a text/plain cross-site fetch",
            vec![
                text_plain,
                ("Origin", "https://evil.example"),
                ("Sec-Fetch-Site", "cross-site"),
                ("Sec-Fetch-Mode", "no-cors"),
            ],
        ),
    ];
    for path in LOGINS {
        for (what, headers) in &forged {
            let reply = log_in(&app, path, &attacker, headers).await;
            assert_eq!(
                (reply.status, reply.code()),
                (403, "forbidden"),
                "{path} with {what}: {}",
                reply.body
            );
            assert!(
                reply.body["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("another site") || e.contains("Origin")),
                "{}",
                reply.body
            );
            assert!(
                reply.headers.get("set-cookie").is_none(),
                "{path} with {what} set a cookie"
            );
            assert!(reply.body.get("token").is_none(), "{}", reply.body);
        }
    }
}

#[tokio::test]
async fn forged_logins_are_refused_before_the_password_and_count_as_no_failure() {
    let app = app!();
    let name = unique("target");
    app.user(&name).await;
    // Far more than the failures allowed before the backoff, all with a wrong password:
    // each is refused for its origin, none reaches the throttle.
    for _ in 0..atoll_control::LOGIN_FAILURES_BEFORE_BACKOFF * 2 {
        let reply = app
            .client
            .post(format!("{}/v1/auth/session", app.url))
            .header("Origin", "https://evil.example")
            .json(&serde_json::json!({"username": name, "password": "wrong"}))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), 403);
    }
    let reply = log_in(&app, "/v1/auth/login", &name, &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test]
async fn the_consoles_own_page_and_clients_without_a_browser_still_log_in() {
    let app = app!();
    let name = unique("eve");
    app.user(&name).await;
    let own_origin = app.url.clone();
    let browser = [
        ("Origin", own_origin.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
        ("Sec-Fetch-Mode", "cors"),
    ];
    // What the console's page sends, what a bookmark or address bar sends (`none`), what
    // the CLI and the SDKs send (nothing; the TypeScript SDK posts `text/plain`).
    let allowed: [(&str, &[(&str, &str)]); 4] = [
        ("the console's page", &browser),
        ("Sec-Fetch-Site: none", &[("Sec-Fetch-Site", "none")]),
        ("no browser headers", &[]),
        (
            "no browser headers, text/plain",
            &[("Content-Type", "text/plain;charset=UTF-8")],
        ),
    ];
    for (what, headers) in allowed {
        let session = log_in(&app, "/v1/auth/session", &name, headers).await;
        assert_eq!(session.status, 200, "session, {what}: {}", session.body);
        let cookie = session.headers["set-cookie"].to_str().unwrap();
        assert!(cookie.starts_with("atoll_session=atoll_"), "{cookie}");
        let login = log_in(&app, "/v1/auth/login", &name, headers).await;
        assert_eq!(login.status, 200, "login, {what}: {}", login.body);
        let token = login.body["token"].as_str().unwrap();
        app.get("/v1/user", token).await.expect(200);
    }
}
