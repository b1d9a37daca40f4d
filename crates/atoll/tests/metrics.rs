//! Prometheus metrics of `atoll dev` on `--metrics-listen` (issue 14, item 9).

mod support;

use serde_json::json;
use support::{free_port, start_dev_with};

#[tokio::test]
async fn metrics_count_requests_statements_and_store_operations() {
    let port = free_port();
    let metrics_listen = format!("127.0.0.1:{port}");
    let server = start_dev_with(
        "metrics",
        &["--metrics-listen", &metrics_listen],
        "http",
        reqwest::Client::new(),
    )
    .await;
    let client = reqwest::Client::new();
    let (db_url, jwt) = server.database_with_token("counted").await;
    let queried = client
        .post(format!("{db_url}v2/pipeline"))
        .bearer_auth(jwt)
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": "SELECT 1"}}, {"type": "close"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(queried.status(), 200);

    let response = client
        .get(format!("http://{metrics_listen}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = response.text().await.unwrap();
    for expected in [
        "atoll_http_requests_total{plane=\"api\",method=\"GET\",route=\"/v1/databases/{db}\",status=\"200\"}",
        "atoll_http_requests_total{plane=\"data\",method=\"POST\",route=\"/v2/pipeline\",status=\"200\"}",
        "atoll_http_request_duration_seconds_bucket{plane=\"api\"",
        "atoll_sql_statements_total",
        "atoll_store_operation_duration_seconds_bucket{operation=",
    ] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
    // Route templates only: the names in URLs never become labels.
    assert!(!text.contains("counted"), "{text}");
    // Metrics stay off the public listeners.
    let public = client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 404);
}
