//! `/console/…` (the web console's files) and `/`.

use reqwest::Method;

#[tokio::test]
async fn the_console_is_served_with_a_strict_content_security_policy() {
    let app = app!();
    for (path, content_type) in [
        ("/console/", "text/html; charset=utf-8"),
        ("/console/app.js", "text/javascript; charset=utf-8"),
        ("/console/style.css", "text/css; charset=utf-8"),
    ] {
        let response = app
            .client
            .get(format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        assert_eq!(headers["content-type"], content_type, "{path}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {directive} not in {csp}");
        }
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["x-frame-options"], "DENY");
        assert_eq!(headers["referrer-policy"], "no-referrer");
    }
    let page = app
        .client
        .get(format!("{}/console/", app.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(r#"<script type="module" src="app.js">"#));
    // No inline script: the policy would refuse it.
    assert!(!page.contains("<script>"));

    let missing = app
        .client
        .get(format!("{}/console/nope.js", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn browsers_at_the_root_go_to_the_console() {
    let app = app!();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let browser = client
        .get(format!("{}/", app.url))
        .header("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(browser.status(), 303);
    assert_eq!(browser.headers()["location"], "/console/");
    let bare = client
        .get(format!("{}/console", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 308);
    assert_eq!(bare.headers()["location"], "/console/");

    // An API client at the root gets the API's JSON 404.
    let reply = app.call(Method::GET, "/", None, None).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.code(), "route_not_found");
}

/// The SQL editor calls the data plane from the API's origin: its preflight is answered
/// (bearer tokens only, never cookies), and a query's answer is readable cross-origin.
#[tokio::test]
async fn the_data_plane_lets_the_console_query_it_from_another_origin() {
    let app = app!();
    let db = crate::harness::unique("editor");
    app.database("/v1", &app.admin_token, &db, "default").await;
    let jwt = app
        .post(
            &format!("/v1/databases/{db}/auth/tokens?expiration=10m"),
            &app.admin_token,
            serde_json::json!({}),
        )
        .await
        .expect(200)["jwt"]
        .as_str()
        .unwrap()
        .to_string();
    let pipeline = format!("{}/db/{db}-admin/v2/pipeline", app.db_url);
    let preflight = app
        .client
        .request(Method::OPTIONS, &pipeline)
        .header("Origin", &app.url)
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let headers = preflight.headers();
    assert_eq!(headers["access-control-allow-origin"], "*");
    let allowed = headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("authorization"), "{allowed}");
    // Never credentials: a page gets nothing from the browser's cookies here.
    assert!(!headers.contains_key("access-control-allow-credentials"));

    let answer = app
        .client
        .post(&pipeline)
        .header("Origin", &app.url)
        .bearer_auth(&jwt)
        .json(&serde_json::json!({"requests": [
            {"type": "execute", "stmt": {"sql": "SELECT 1"}},
            {"type": "close"}
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["access-control-allow-origin"], "*");
}
