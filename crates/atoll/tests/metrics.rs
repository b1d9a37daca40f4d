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
    let query = |sql: &str| {
        client
            .post(format!("{db_url}v2/pipeline"))
            .bearer_auth(&jwt)
            .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]}))
            .send()
    };
    // The first opens a connection on an SQL thread; the second finds it idle and is
    // answered on the async worker.
    for _ in 0..2 {
        assert_eq!(query("SELECT 1").await.unwrap().status(), 200);
    }
    // Far more than the inline budget of CPU time: interrupted there, answered whole by
    // an SQL thread.
    let heavy = query(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) \
         SELECT count(*) FROM c",
    )
    .await
    .unwrap();
    assert_eq!(heavy.status(), 200);
    let heavy: serde_json::Value = heavy.json().await.unwrap();
    assert_eq!(
        heavy["results"][0]["response"]["result"]["rows"][0][0]["value"], "300000",
        "{heavy}"
    );

    // Methods of a client's own making, on both listeners, without a token: counted under
    // one label, never a series each.
    for (n, base) in [&server.url, &db_url].into_iter().enumerate() {
        for i in 0..3 {
            let method = reqwest::Method::from_bytes(format!("GROW{n}X{i}").as_bytes()).unwrap();
            let refused = client.request(method, base.as_str()).send().await.unwrap();
            assert!(refused.status().is_client_error(), "{}", refused.status());
        }
    }

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
    let counted = |name: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
    };
    assert!(counted("atoll_sql_inline_reads_total") >= 1);
    assert_eq!(counted("atoll_sql_inline_overruns_total"), 1);
    // Route templates only: the names in URLs never become labels.
    assert!(!text.contains("counted"), "{text}");
    assert!(!text.contains("GROW"), "{text}");
    for plane in ["api", "data"] {
        let other = format!("atoll_http_requests_total{{plane=\"{plane}\",method=\"other\"");
        assert!(text.contains(&other), "{other} missing from:\n{text}");
    }
    // Metrics stay off the public listeners.
    let public = client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 404);
}
