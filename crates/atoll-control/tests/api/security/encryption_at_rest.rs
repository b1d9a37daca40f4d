//! Finding 12 — a create that asks for encryption at rest (`remote_encryption`) is
//! refused with a 400 that says why, never accepted and ignored: the bundled libSQL has no
//! cipher support, and a user who asked for encryption must not believe they have it.

use serde_json::json;

#[tokio::test]
async fn asking_for_encryption_at_rest_is_refused_not_ignored() {
    let app = app!();
    let key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    for remote_encryption in [
        json!({"encryption_key": key, "encryption_cipher": "aes256gcm"}),
        json!({"encryption_key": key}),
        json!({"encryption_cipher": "chacha20poly1305"}),
        json!("aes256gcm"),
    ] {
        let reply = app
            .post(
                "/v1/databases",
                &app.admin_token,
                json!({"name": "secret-diary", "remote_encryption": remote_encryption}),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "encryption_not_available"),
            "{remote_encryption}: {}",
            reply.body
        );
        let message = reply.body["error"].as_str().unwrap();
        assert!(
            message.contains("not available on this server"),
            "{message}"
        );
        assert_eq!(
            app.get("/v1/databases/secret-diary", &app.admin_token)
                .await
                .status,
            404,
            "nothing was created"
        );
    }
    // The same with a seed for an upload (`turso db import --remote-encryption-key`).
    let reply = app
        .post(
            "/v1/databases",
            &app.admin_token,
            json!({"name": "imported", "seed": {"type": "database_upload"},
                   "remote_encryption": {"encryption_key": key, "encryption_cipher": "aes256gcm"}}),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.body);

    // Asking for nothing is not asking.
    for (name, remote_encryption) in [
        ("plain-null", json!(null)),
        ("plain-empty", json!({})),
        (
            "plain-blank",
            json!({"encryption_key": "", "encryption_cipher": ""}),
        ),
    ] {
        app.post(
            "/v1/databases",
            &app.admin_token,
            json!({"name": name, "remote_encryption": remote_encryption}),
        )
        .await
        .expect(200);
    }
}
