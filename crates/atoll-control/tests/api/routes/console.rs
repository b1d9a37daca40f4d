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
