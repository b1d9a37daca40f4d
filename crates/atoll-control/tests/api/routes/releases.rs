//! `GET /releases/latest`, the turso CLI's update check.

use reqwest::Method;

#[tokio::test]
async fn the_update_check_answers_without_credentials() {
    let app = app!();
    let body = app
        .call(Method::GET, "/releases/latest", None, None)
        .await
        .expect(200);
    assert_eq!(
        body,
        serde_json::json!({"latest": format!("v{}", env!("CARGO_PKG_VERSION"))})
    );
}
