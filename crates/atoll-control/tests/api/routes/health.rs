//! `/health`, `/openapi.json`, unknown routes and the HTTP conventions.

use reqwest::Method;

#[tokio::test]
async fn health_answers_200_without_credentials() {
    let app = app!();
    let body = app
        .call(Method::GET, "/health", None, None)
        .await
        .expect(200);
    assert_eq!(body["status"], "ok");
}

#[tokio::test]
async fn every_answer_carries_a_request_id() {
    let app = app!();
    let response = app
        .client
        .get(format!("{}/health", app.url))
        .send()
        .await
        .unwrap();
    let id = response
        .headers()
        .get("x-request-id")
        .expect("request id")
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(id.len(), 36, "{id}");
    let response = app
        .client
        .get(format!("{}/health", app.url))
        .header("x-request-id", "mine")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "mine");
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json_errors() {
    let app = app!();
    let reply = app.call(Method::GET, "/v1/nope", None, None).await;
    assert_eq!((reply.status, reply.code()), (404, "route_not_found"));
    // A path that exists, with a method it does not have: 405 and the methods it has.
    let response = app
        .client
        .put(format!("{}/v1/organizations", app.url))
        .bearer_auth(&app.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    let mut allowed: Vec<String> = response.headers()["allow"]
        .to_str()
        .unwrap()
        .split(',')
        .map(|m| m.trim().to_string())
        .collect();
    allowed.sort();
    assert_eq!(allowed, ["GET", "HEAD", "POST"]);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["code"], "method_not_allowed");
    // Without credentials too: the method is wrong whoever asks.
    let reply = app.call(Method::DELETE, "/v1/plans", None, None).await;
    assert_eq!((reply.status, reply.code()), (405, "method_not_allowed"));
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let app = app!();
    let huge = "x".repeat(2 * 1024 * 1024);
    let reply = app
        .post(
            "/v1/organizations",
            &app.admin_token,
            serde_json::json!({"name": huge}),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (413, "payload_too_large"));
}

#[tokio::test]
async fn openapi_documents_every_route_of_the_table() {
    let app = app!();
    let doc = app
        .call(Method::GET, "/openapi.json", None, None)
        .await
        .expect(200);
    assert_eq!(doc["info"]["title"], "Atoll platform API");
    for route in atoll_control::routes::table() {
        let method = route.method.as_str().to_lowercase();
        let operation = &doc["paths"][&route.path][&method];
        assert!(
            operation.is_object(),
            "{} {} is not documented",
            route.method,
            route.path
        );
        assert!(operation["responses"]["200"].is_object());
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in [
        "Group",
        "Organization",
        "ErrorBody",
        "CreateApiTokenRequest",
        "Scope",
    ] {
        assert!(schemas.contains_key(name), "schema {name} missing");
    }
    // Every reference points at a defined schema.
    let text = doc.to_string();
    for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = reference.split('"').next().unwrap();
        assert!(schemas.contains_key(name), "dangling reference to {name}");
    }
}

#[tokio::test]
async fn json_is_read_whatever_the_content_type() {
    let app = app!();
    let response = app
        .client
        .post(format!("{}/v1/groups", app.url))
        .header("Authorization", format!("Bearer {}", app.admin_token))
        .header("Content-Type", "text/plain;charset=UTF-8")
        .body("{\"Name\":\"plain\",\"Location\":\"local\",\"Version\":\"latest\"}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["group"]["name"], "plain");
}
