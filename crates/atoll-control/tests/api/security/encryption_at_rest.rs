//! Encryption with the customer's key (Turso's `remote_encryption`, docs/ENCRYPTION.md;
//! finding 12 of the first review asked that it never be accepted and ignored).
//!
//! A create is checked whole before anything exists (cipher, key, seed); an encrypted
//! database serves only requests that carry its key (`x-turso-encryption-key`), also
//! while connections opened with the key are pooled; routes that cannot serve it yet say
//! so; and neither its rows nor its key are anywhere on the node's disk or in the audit log.

use crate::harness::TestApp;
use base64::Engine;
use serde_json::{json, Value};

const MARKER: &str = "TOP-SECRET-DIARY-ENTRY";

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// One statement through `/v2/pipeline` with `key` (or none): (status, body).
async fn execute(
    app: &TestApp,
    url: &str,
    token: &str,
    key: Option<&str>,
    sql: &str,
) -> (u16, Value) {
    let body = json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]});
    let mut request = app
        .client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(token)
        .json(&body);
    if let Some(key) = key {
        request = request.header("x-turso-encryption-key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn rows(body: &Value) -> &Value {
    &body["results"][0]["response"]["result"]["rows"]
}

#[tokio::test]
async fn a_create_asking_for_encryption_is_checked_whole_before_anything_exists() {
    let app = app!();
    let key = base64(&[7u8; 32]);
    for (remote_encryption, status, code) in [
        (
            json!({"encryption_key": key, "encryption_cipher": "aegis512"}),
            400,
            "encryption_cipher_not_supported",
        ),
        (
            json!({"encryption_key": key, "encryption_cipher": "rot13"}),
            400,
            "encryption_cipher_not_supported",
        ),
        (
            json!({"encryption_key": base64(&[7u8; 16]), "encryption_cipher": "aes256gcm"}),
            400,
            "encryption_key_malformed",
        ),
        (
            json!({"encryption_key": key, "encryption_cipher": "aes128gcm"}),
            400,
            "encryption_key_malformed",
        ),
        (
            json!({"encryption_key": "not base64!", "encryption_cipher": "aes256gcm"}),
            400,
            "encryption_key_malformed",
        ),
        (
            json!({"encryption_cipher": "chacha20poly1305"}),
            400,
            "encryption_key_malformed",
        ),
        (json!("aes256gcm"), 400, "encryption_key_malformed"),
        (
            json!({"encryption_key": 12}),
            400,
            "encryption_key_malformed",
        ),
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
            (status, code),
            "{remote_encryption}: {}",
            reply.body
        );
        let message = reply.body["error"].as_str().unwrap();
        assert!(
            !message.contains(&key),
            "the key is never echoed: {message}"
        );
        if code == "encryption_cipher_not_supported" {
            assert!(
                message.contains("aes256gcm, aes128gcm, chacha20poly1305"),
                "{message}"
            );
        }
        assert_eq!(
            app.get("/v1/databases/secret-diary", &app.admin_token)
                .await
                .status,
            404,
            "nothing was created"
        );
    }
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

#[tokio::test]
async fn an_encrypted_database_serves_only_requests_with_its_key() {
    let app = app!();
    for (name, cipher, key_bytes) in [
        ("diary-aes256", "aes256gcm", [1u8; 32].to_vec()),
        ("diary-aes128", "aes128gcm", [2u8; 16].to_vec()),
        ("diary-chacha", "chacha20poly1305", [3u8; 32].to_vec()),
        ("diary-aegis256", "aegis256", [4u8; 32].to_vec()),
        ("diary-aegis128l", "aegis128l", [5u8; 16].to_vec()),
    ] {
        let key = base64(&key_bytes);
        app.post(
            "/v1/databases",
            &app.admin_token,
            json!({"name": name, "remote_encryption": {"encryption_key": key, "encryption_cipher": cipher}}),
        )
        .await
        .expect(200);
        let shown = app
            .get(&format!("/v1/databases/{name}"), &app.admin_token)
            .await
            .expect(200);
        assert_eq!(shown["database"]["encryption_cipher"], cipher, "{shown}");
        let (url, token) = database_access(&app, name).await;

        let (status, body) = execute(
            &app,
            &url,
            &token,
            Some(&key),
            "CREATE TABLE diary(entry TEXT)",
        )
        .await;
        assert_eq!(status, 200, "{cipher}: {body}");
        assert_eq!(body["results"][0]["type"], "ok", "{cipher}: {body}");
        for i in 0..50 {
            let sql = format!("INSERT INTO diary VALUES ('{MARKER}-{i}')");
            let (status, body) = execute(&app, &url, &token, Some(&key), &sql).await;
            assert_eq!(
                (status, body["results"][0]["type"].as_str()),
                (200, Some("ok")),
                "{body}"
            );
        }
        let (status, body) =
            execute(&app, &url, &token, Some(&key), "SELECT count(*) FROM diary").await;
        assert_eq!(status, 200);
        assert_eq!(rows(&body)[0][0]["value"], "50", "{cipher}: {body}");

        // Connections opened with the key are pooled now: still nothing without it.
        let wrong = base64(&vec![9u8; key_bytes.len()]);
        for (sent, status, code) in [
            (None, 401, "ENCRYPTION_KEY_REQUIRED"),
            (Some(wrong.as_str()), 403, "ENCRYPTION_KEY_INVALID"),
            (Some("%%%"), 400, "ENCRYPTION_KEY_MALFORMED"),
            (
                Some(base64(&[1u8; 8]).as_str()),
                400,
                "ENCRYPTION_KEY_MALFORMED",
            ),
        ] {
            for sql in [
                "SELECT entry FROM diary",
                "INSERT INTO diary VALUES ('forged')",
            ] {
                let (got, body) = execute(&app, &url, &token, sent, sql).await;
                assert_eq!(
                    (got, body["code"].as_str()),
                    (status, Some(code)),
                    "{cipher} {sent:?}: {body}"
                );
                assert!(!body.to_string().contains(MARKER), "{body}");
            }
        }
        let (_, body) = execute(&app, &url, &token, Some(&key), "SELECT count(*) FROM diary").await;
        assert_eq!(
            rows(&body)[0][0]["value"],
            "50",
            "nothing was written without the key"
        );

        // Hrana 1 (`/v1/execute`) serves it with the key too.
        let response = app
            .client
            .post(format!("{url}v1/execute"))
            .bearer_auth(&token)
            .header("x-turso-encryption-key", &key)
            .json(&json!({"stmt": {"sql": "SELECT entry FROM diary ORDER BY rowid LIMIT 1"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["result"]["rows"][0][0]["value"],
            format!("{MARKER}-0"),
            "{body}"
        );

        // What cannot serve an encrypted database yet says so, with or without the key.
        // The dump, read with the key, streamed (no copy on the node's disk).
        let response = app
            .client
            .get(format!("{url}dump"))
            .bearer_auth(&token)
            .header("x-turso-encryption-key", &key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let dump = response.text().await.unwrap();
        assert!(
            dump.contains("CREATE TABLE diary") && dump.contains(&format!("{MARKER}-49")),
            "{dump}"
        );
        let response = app
            .client
            .get(format!("{url}dump"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "no dump without the key");

        // The file export, with the key: a plain SQLite file, decrypted on its way out.
        let response = app
            .client
            .get(format!("{url}export/1"))
            .bearer_auth(&token)
            .header("x-turso-encryption-key", &key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{name}");
        let exported = response.bytes().await.unwrap();
        let file =
            std::env::temp_dir().join(format!("atoll-export-{name}-{}.db", std::process::id()));
        std::fs::write(&file, &exported).unwrap();
        {
            let conn = rusqlite::Connection::open(&file).unwrap();
            let (count, first): (i64, String) = conn
                .query_row("SELECT count(*), min(entry) FROM diary", [], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .unwrap();
            assert_eq!(count, 50, "{name}");
            assert!(first.starts_with(MARKER), "{first}");
            let check: String = conn
                .query_row("PRAGMA integrity_check", [], |row| row.get(0))
                .unwrap();
            assert_eq!(check, "ok", "{name}");
        }
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
        }
        let response = app
            .client
            .get(format!("{url}export/1"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "no export without the key");

        for (method, path) in [(reqwest::Method::POST, "pull-updates")] {
            let response = app
                .client
                .request(method.clone(), format!("{url}{path}"))
                .bearer_auth(&token)
                .header("x-turso-encryption-key", &key)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            assert_eq!(
                (status, body["code"].as_str()),
                (400, Some("ENCRYPTION_NOT_AVAILABLE")),
                "{path}: {body}"
            );
        }
    }

    // What needs the rows without the key is refused, and says why: a transfer.
    for (path, body) in [(
        "/v1/databases/diary-aes256/transfer",
        json!({"org": "somebody"}),
    )] {
        let reply = app.post(path, &app.admin_token, body.clone()).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "encryption_not_available"),
            "{path} {body}: {}",
            reply.body
        );
    }
    assert_eq!(
        app.get("/v1/databases/copy", &app.admin_token).await.status,
        404
    );

    // A plain database refuses a key: its client believes it encrypted.
    app.post("/v1/databases", &app.admin_token, json!({"name": "plain"}))
        .await
        .expect(200);
    let shown = app
        .get("/v1/databases/plain", &app.admin_token)
        .await
        .expect(200);
    assert!(
        shown["database"].get("encryption_cipher").is_none(),
        "{shown}"
    );
    let (url, token) = database_access(&app, "plain").await;
    let (status, body) = execute(&app, &url, &token, Some(&base64(&[1u8; 32])), "SELECT 1").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("ENCRYPTION_NOT_AVAILABLE")),
        "{body}"
    );

    // Neither a row nor a key on the node's disk (files, WAL, object storage); the audit
    // log names the cipher, never the key.
    let db = app
        .node
        .by_label("diary-aes256-admin")
        .expect("on the node");
    let node_dir = db
        .file_path()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let plain_dir = app
        .node
        .by_label("plain-admin")
        .unwrap()
        .dir()
        .to_path_buf();
    assert_nowhere_under(
        &node_dir,
        &[
            MARKER.as_bytes(),
            b"CREATE TABLE diary",
            base64(&[1u8; 32]).as_bytes(),
            &[1u8; 32],
        ],
        Some(&plain_dir),
    );
    let audit = audit_log(&app).await;
    assert!(audit.contains("aes256gcm"), "{audit}");
    assert!(
        !audit.contains(&base64(&[1u8; 32])),
        "the key is in the audit log"
    );
}

/// Fails when a file under `dir` (but none under `except`, a plain database's directory)
/// holds one of `needles`: a row or a key in the clear on the node's disk.
fn assert_nowhere_under(
    dir: &std::path::Path,
    needles: &[&[u8]],
    except: Option<&std::path::Path>,
) {
    for file in walk(dir) {
        if except.is_some_and(|except| file.starts_with(except)) {
            continue;
        }
        let bytes = std::fs::read(&file).unwrap_or_default();
        for needle in needles {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == *needle),
                "{} holds {:?}",
                file.display(),
                String::from_utf8_lossy(needle)
            );
        }
    }
}

/// The organization's whole audit log, as text (audit logs are a paid plan's; the log is
/// written on every plan).
async fn audit_log(app: &TestApp) -> String {
    app.post(
        "/v1/admin/organizations/admin/plan",
        &app.admin_token,
        json!({"plan": "scaler"}),
    )
    .await
    .expect(200);
    app.get(
        "/v1/organizations/admin/audit-logs?page_size=1000",
        &app.admin_token,
    )
    .await
    .expect(200)
    .to_string()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// `POST …/encryption/rotate` (Atoll's): every page re-encrypted under the new key in
/// one step; from then on only the new key is served, also by connections pooled under
/// the old one; bad requests change nothing; a repeat of a finished rotation is harmless.
#[tokio::test]
async fn a_rotation_re_encrypts_the_database_under_the_new_key() {
    let app = app!();
    let old = base64(&[4u8; 16]);
    let new = base64(&[5u8; 32]);
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "ledger", "remote_encryption": {"encryption_key": old, "encryption_cipher": "aes128gcm"}}),
    )
    .await
    .expect(200);
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "open-book"}),
    )
    .await
    .expect(200);
    let (url, token) = database_access(&app, "ledger").await;
    let (status, _) = execute(
        &app,
        &url,
        &token,
        Some(&old),
        "CREATE TABLE entries(e TEXT)",
    )
    .await;
    assert_eq!(status, 200);
    for i in 0..300 {
        let sql = format!("INSERT INTO entries VALUES ('{MARKER}-{i}')");
        execute(&app, &url, &token, Some(&old), &sql).await;
    }
    let count = |body: &Value| rows(body)[0][0]["value"].clone();

    let rotate = "/v1/databases/ledger/encryption/rotate";
    for (path, body, status, code) in [
        (
            rotate,
            json!({"current_encryption_key": base64(&[6u8; 16]), "encryption_key": new, "encryption_cipher": "chacha20poly1305"}),
            403,
            "forbidden",
        ),
        (
            rotate,
            json!({"current_encryption_key": old, "encryption_key": new}),
            400,
            "encryption_key_malformed",
        ),
        (
            rotate,
            json!({"current_encryption_key": old, "encryption_key": "%%%"}),
            400,
            "encryption_key_malformed",
        ),
        (
            rotate,
            json!({"current_encryption_key": old, "encryption_key": new, "encryption_cipher": "rot13"}),
            400,
            "encryption_cipher_not_supported",
        ),
        (
            // AEGIS-256 reserves 48 bytes per page, AES-128-GCM 28: not in place.
            rotate,
            json!({"current_encryption_key": old, "encryption_key": new, "encryption_cipher": "aegis256"}),
            400,
            "encryption_cipher_not_supported",
        ),
        (
            rotate,
            json!({"current_encryption_key": old, "encryption_key": old}),
            400,
            "invalid_request",
        ),
        (
            "/v1/databases/open-book/encryption/rotate",
            json!({"current_encryption_key": old, "encryption_key": new}),
            400,
            "encryption_not_available",
        ),
    ] {
        let reply = app.post(path, &app.admin_token, body.clone()).await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{body}: {}",
            reply.body
        );
        assert!(!reply.body.to_string().contains(&old), "{}", reply.body);
    }
    // Nothing changed: the old key still reads everything.
    let (status, body) = execute(
        &app,
        &url,
        &token,
        Some(&old),
        "SELECT count(*) FROM entries",
    )
    .await;
    assert_eq!((status, count(&body)), (200, json!("300")), "{body}");

    // To ChaCha20-Poly1305 under a 32-byte key.
    let rotated = app
        .post(
            rotate,
            &app.admin_token,
            json!({"current_encryption_key": old, "encryption_key": new, "encryption_cipher": "chacha20poly1305"}),
        )
        .await
        .expect(200);
    assert_eq!(rotated["encryption_cipher"], "chacha20poly1305");
    assert!(
        rotated["pages_rewritten"].as_i64().unwrap() > 2,
        "{rotated}"
    );
    let shown = app
        .get("/v1/databases/ledger", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(shown["database"]["encryption_cipher"], "chacha20poly1305");

    // The old key's pooled connections are gone with it (a 16-byte key is not even a
    // ChaCha20-Poly1305 key), and a 32-byte stranger is refused as before.
    let (status, body) = execute(
        &app,
        &url,
        &token,
        Some(&old),
        "SELECT count(*) FROM entries",
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("ENCRYPTION_KEY_MALFORMED")),
        "{body}"
    );
    let stranger = base64(&[4u8; 32]);
    let (status, body) = execute(
        &app,
        &url,
        &token,
        Some(&stranger),
        "SELECT count(*) FROM entries",
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("ENCRYPTION_KEY_INVALID")),
        "{body}"
    );
    let (status, body) = execute(
        &app,
        &url,
        &token,
        Some(&new),
        "SELECT count(*) FROM entries",
    )
    .await;
    assert_eq!((status, count(&body)), (200, json!("300")), "{body}");
    let (status, _) = execute(
        &app,
        &url,
        &token,
        Some(&new),
        "INSERT INTO entries VALUES ('after')",
    )
    .await;
    assert_eq!(status, 200);

    // A repeat (a client that did not see the answer) is harmless; the old key no longer
    // starts a rotation.
    app.post(
        rotate,
        &app.admin_token,
        json!({"current_encryption_key": old, "current_encryption_cipher": "aes128gcm",
               "encryption_key": new, "encryption_cipher": "chacha20poly1305"}),
    )
    .await
    .expect(200);
    let reply = app
        .post(
            rotate,
            &app.admin_token,
            json!({"current_encryption_key": old, "current_encryption_cipher": "aes128gcm",
                   "encryption_key": base64(&[7u8; 32]), "encryption_cipher": "chacha20poly1305"}),
        )
        .await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    let (status, body) = execute(
        &app,
        &url,
        &token,
        Some(&new),
        "SELECT count(*) FROM entries",
    )
    .await;
    assert_eq!((status, count(&body)), (200, json!("301")), "{body}");

    // Neither key on the node's disk or in the audit log; the rotation is audited.
    let db = app.node.by_label("ledger-admin").expect("on the node");
    assert_nowhere_under(
        db.dir(),
        &[
            MARKER.as_bytes(),
            old.as_bytes(),
            new.as_bytes(),
            &[5u8; 32],
        ],
        None,
    );
    let audit = audit_log(&app).await;
    assert!(audit.contains("db-rotate-encryption-key"), "{audit}");
    assert!(!audit.contains(&old) && !audit.contains(&new));
}

/// A copy of an encrypted database, now or at a point in time (Turso's `seed: {type:
/// "database"}`), is encrypted under the source's key and cipher: its pages are copied as
/// they are, without the key on the node. What a copy asks for must say so.
#[tokio::test]
async fn a_copy_of_an_encrypted_database_keeps_its_key() {
    let app = app!();
    let key = base64(&[8u8; 32]);
    let remote =
        |key: &str, cipher: &str| json!({"encryption_key": key, "encryption_cipher": cipher});
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "vault", "remote_encryption": remote(&key, "chacha20poly1305")}),
    )
    .await
    .expect(200);
    app.post("/v1/databases", &app.admin_token, json!({"name": "plain"}))
        .await
        .expect(200);
    let (url, token) = database_access(&app, "vault").await;
    execute(&app, &url, &token, Some(&key), "CREATE TABLE t(x TEXT)").await;
    for i in 0..20 {
        let sql = format!("INSERT INTO t VALUES ('{MARKER}-{i}')");
        execute(&app, &url, &token, Some(&key), &sql).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let twenty = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    execute(
        &app,
        &url,
        &token,
        Some(&key),
        "DELETE FROM t WHERE rowid > 5",
    )
    .await;

    let copy = |name: &str, timestamp: Option<&str>, remote_encryption: Value| {
        let mut seed = json!({"type": "database", "name": "vault"});
        if let Some(at) = timestamp {
            seed["timestamp"] = json!(at);
        }
        json!({"name": name, "seed": seed, "remote_encryption": remote_encryption})
    };
    for (body, status, code) in [
        (
            copy("c1", None, Value::Null),
            400,
            "encryption_key_malformed",
        ),
        (
            copy("c1", None, remote(&base64(&[9u8; 32]), "chacha20poly1305")),
            403,
            "forbidden",
        ),
        (
            copy(
                "c1",
                Some(&twenty),
                remote(&base64(&[9u8; 32]), "chacha20poly1305"),
            ),
            403,
            "forbidden",
        ),
        (
            copy("c1", None, remote(&key, "aes256gcm")),
            400,
            "encryption_cipher_not_supported",
        ),
        (
            json!({"name": "c1", "seed": {"type": "database", "name": "plain"}, "remote_encryption": remote(&key, "aes256gcm")}),
            400,
            "encryption_not_available",
        ),
    ] {
        let reply = app
            .post("/v1/databases", &app.admin_token, body.clone())
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{body}: {}",
            reply.body
        );
        assert!(!reply.body.to_string().contains(&key));
        assert_eq!(
            app.get("/v1/databases/c1", &app.admin_token).await.status,
            404
        );
    }

    // Now, and as it was before the delete: each read with the source's key only.
    for (name, timestamp, expected_rows) in [
        ("copy-now", None, "5"),
        ("copy-then", Some(twenty.as_str()), "20"),
    ] {
        let created = app
            .post(
                "/v1/databases",
                &app.admin_token,
                copy(name, timestamp, remote(&key, "chacha20poly1305")),
            )
            .await
            .expect(200);
        assert_eq!(created["database"]["Name"], name, "{created}");
        let shown = app
            .get(&format!("/v1/databases/{name}"), &app.admin_token)
            .await
            .expect(200);
        assert_eq!(
            shown["database"]["encryption_cipher"], "chacha20poly1305",
            "{shown}"
        );
        let (url, token) = database_access(&app, name).await;
        let (status, body) =
            execute(&app, &url, &token, Some(&key), "SELECT count(*) FROM t").await;
        assert_eq!(
            (status, rows(&body)[0][0]["value"].clone()),
            (200, json!(expected_rows)),
            "{name}: {body}"
        );
        let (status, _) = execute(&app, &url, &token, None, "SELECT count(*) FROM t").await;
        assert_eq!(status, 401, "{name}: the copy is encrypted");
        let (status, _) = execute(
            &app,
            &url,
            &token,
            Some(&key),
            "INSERT INTO t VALUES ('copy')",
        )
        .await;
        assert_eq!(status, 200, "{name}: writable");
        // Its own verifier: a rotation of the copy leaves the source's key alone.
        let new = base64(&[10u8; 32]);
        app.post(
            &format!("/v1/databases/{name}/encryption/rotate"),
            &app.admin_token,
            json!({"current_encryption_key": key, "encryption_key": new}),
        )
        .await
        .expect(200);
        let (status, _) = execute(&app, &url, &token, Some(&new), "SELECT count(*) FROM t").await;
        assert_eq!(status, 200);
    }
    let (status, body) = execute(&app, &url, &token, Some(&key), "SELECT count(*) FROM t").await;
    assert_eq!(
        (status, rows(&body)[0][0]["value"].clone()),
        (200, json!("5"))
    );

    // A restore in place writes the past pages under the key, which it needs.
    let restore = "/v1/databases/vault/restore";
    for (body, status, code) in [
        (
            json!({"timestamp": twenty}),
            400,
            "encryption_key_malformed",
        ),
        (
            json!({"timestamp": twenty, "encryption_key": base64(&[9u8; 32])}),
            403,
            "forbidden",
        ),
    ] {
        let reply = app.post(restore, &app.admin_token, body.clone()).await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{body}: {}",
            reply.body
        );
    }
    let reply = app
        .post(
            "/v1/databases/plain/restore",
            &app.admin_token,
            json!({"timestamp": twenty, "encryption_key": key}),
        )
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (400, "encryption_not_available"),
        "{}",
        reply.body
    );
    app.post(
        restore,
        &app.admin_token,
        json!({"timestamp": twenty, "encryption_key": key}),
    )
    .await
    .expect(200);
    let (status, body) = execute(&app, &url, &token, Some(&key), "SELECT count(*) FROM t").await;
    assert_eq!(
        (status, rows(&body)[0][0]["value"].clone()),
        (200, json!("20")),
        "{body}"
    );

    // Neither the copies' rows nor the key on the node's disk.
    let dir = app
        .node
        .by_label("vault-admin")
        .unwrap()
        .dir()
        .parent()
        .unwrap()
        .to_path_buf();
    let plain_dir = app
        .node
        .by_label("plain-admin")
        .unwrap()
        .dir()
        .to_path_buf();
    assert_nowhere_under(&dir, &[MARKER.as_bytes(), key.as_bytes()], Some(&plain_dir));
}

/// The HTTP URL and a full-access token of database `name`.
async fn database_access(app: &TestApp, name: &str) -> (String, String) {
    let shown = app
        .get(&format!("/v1/databases/{name}"), &app.admin_token)
        .await
        .expect(200);
    let url = shown["database"]["http_url"].as_str().unwrap().to_string();
    let token = app
        .post(
            &format!("/v1/databases/{name}/auth/tokens"),
            &app.admin_token,
            json!({}),
        )
        .await
        .expect(200)["jwt"]
        .as_str()
        .unwrap()
        .to_string();
    (url, token)
}

/// A dump (Turso's `seed: {type: "dump"}`) loads into an encrypted database through a
/// connection holding its key, in the sandbox like any dump: the rows reach the node's disk
/// encrypted only, and the crash journal keeps no excerpt of the dump's statements.
#[tokio::test]
async fn a_dump_seeds_an_encrypted_database() {
    let app = app!();
    let key = base64(&[11u8; 32]);
    let uploaded = app
        .post_file(
            "/v1/databases/dumps",
            &app.admin_token,
            &format!(
                "CREATE TABLE diary (entry TEXT);\nINSERT INTO diary VALUES ('{MARKER}-a');\nINSERT INTO diary VALUES ('{MARKER}-b');\n"
            ),
        )
        .await;
    let url = uploaded.body["dump_url"].as_str().unwrap().to_string();
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "from-dump", "seed": {"type": "dump", "url": url},
               "remote_encryption": {"encryption_key": key}}),
    )
    .await
    .expect(200);
    let (db_url, token) = database_access(&app, "from-dump").await;
    let (status, body) = execute(
        &app,
        &db_url,
        &token,
        Some(&key),
        "SELECT count(*) FROM diary",
    )
    .await;
    assert_eq!(
        (status, rows(&body)[0][0]["value"].clone()),
        (200, json!("2")),
        "{body}"
    );
    let (status, _) = execute(&app, &db_url, &token, None, "SELECT count(*) FROM diary").await;
    assert_eq!(status, 401);

    let db = app.node.by_label("from-dump-admin").expect("on the node");
    let node_dir = db.dir().parent().unwrap().parent().unwrap().to_path_buf();
    assert_nowhere_under(&node_dir, &[MARKER.as_bytes(), key.as_bytes()], None);
}

/// An upload into an encrypted database (Turso's contract: a plain SQLite file reserving
/// the cipher's bytes at the end of every page, the key in `x-turso-encryption-key`) is
/// checked like any upload, then sealed page by page: only ciphertext reaches the
/// database's file, and the key reads the rows.
#[tokio::test]
async fn an_upload_into_an_encrypted_database_is_sealed_on_arrival() {
    let app = app!();
    let key = base64(&[12u8; 32]);
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "uploaded", "seed": {"type": "database_upload"},
               "remote_encryption": {"encryption_key": key, "encryption_cipher": "aes256gcm"}}),
    )
    .await
    .expect(200);
    let (url, token) = database_access(&app, "uploaded").await;

    let dir = std::env::temp_dir().join(format!("atoll-encrypted-upload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let plain_file = |reserve: bool| {
        let path = dir.join(if reserve { "reserved.db" } else { "plain.db" });
        let _ = std::fs::remove_file(&path);
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA page_size = 4096; CREATE TABLE diary(entry TEXT);
             WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300)
             INSERT INTO diary SELECT '{MARKER}-' || x FROM c;"
        ))
        .unwrap();
        if reserve {
            atoll_storage::encryption::engine::reserve_for_encryption(
                &conn,
                atoll_storage::encryption::Cipher::Aes256Gcm,
            )
            .unwrap();
        }
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
        drop(conn);
        std::fs::read(&path).unwrap()
    };
    let upload = |bytes: Vec<u8>, key: Option<&str>, cipher: Option<&str>| {
        let mut request = app
            .client
            .post(format!("{url}v1/upload"))
            .bearer_auth(&token)
            .body(bytes);
        if let Some(key) = key {
            request = request.header("x-turso-encryption-key", key);
        }
        if let Some(cipher) = cipher {
            request = request.header("x-turso-encryption-cipher", cipher);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        }
    };
    let (status, body) = upload(plain_file(true), None, None).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = upload(plain_file(true), Some(&base64(&[13u8; 32])), None).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = upload(plain_file(true), Some(&key), Some("chacha20poly1305")).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = upload(plain_file(false), Some(&key), None).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("reserve_bytes 28"), "{body}");

    let (status, body) = upload(plain_file(true), Some(&key), Some("aes256gcm")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) =
        execute(&app, &url, &token, Some(&key), "SELECT count(*) FROM diary").await;
    assert_eq!(
        (status, rows(&body)[0][0]["value"].clone()),
        (200, json!("300")),
        "{body}"
    );
    let (status, _) = execute(
        &app,
        &url,
        &token,
        Some(&key),
        "INSERT INTO diary VALUES ('more')",
    )
    .await;
    assert_eq!(status, 200);

    let db = app.node.by_label("uploaded-admin").expect("on the node");
    let node_dir = db.dir().parent().unwrap().parent().unwrap().to_path_buf();
    assert_nowhere_under(&node_dir, &[MARKER.as_bytes()], None);
    let _ = std::fs::remove_dir_all(&dir);
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A Hrana 3 WebSocket to the database at `http_url`, sending `key` with the upgrade; the
/// upgrade's refusal status otherwise.
async fn socket(http_url: &str, key: Option<&str>) -> Result<Socket, u16> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = http_url
        .replace("http://", "ws://")
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "hrana3".parse().unwrap());
    if let Some(key) = key {
        request
            .headers_mut()
            .insert("x-turso-encryption-key", key.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(e) => panic!("{e}"),
    }
}

async fn send(socket: &mut Socket, message: Value) -> Value {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    socket
        .send(Message::Text(message.to_string().into()))
        .await
        .unwrap();
    loop {
        match socket.next().await.unwrap().unwrap() {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            Message::Close(frame) => panic!("socket closed: {frame:?}"),
            _ => continue,
        }
    }
}

/// Hrana over WebSocket takes the key with the upgrade request, as every HTTP request
/// carries it; a socket whose key was rotated away opens no further stream.
#[tokio::test]
async fn hrana_over_websocket_takes_the_key_at_the_upgrade() {
    let app = app!();
    let key = base64(&[14u8; 32]);
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "socketed", "remote_encryption": {"encryption_key": key}}),
    )
    .await
    .expect(200);
    let (url, token) = database_access(&app, "socketed").await;
    execute(&app, &url, &token, Some(&key), "CREATE TABLE t(x TEXT)").await;
    execute(
        &app,
        &url,
        &token,
        Some(&key),
        "INSERT INTO t VALUES ('over a socket')",
    )
    .await;

    assert_eq!(socket(&url, None).await.err(), Some(401));
    assert_eq!(
        socket(&url, Some(&base64(&[15u8; 32]))).await.err(),
        Some(403)
    );

    let mut ws = socket(&url, Some(&key))
        .await
        .expect("upgraded with the key");
    let hello = send(&mut ws, json!({"type": "hello", "jwt": token})).await;
    assert_eq!(hello["type"], "hello_ok", "{hello}");
    let opened = send(
        &mut ws,
        json!({"type": "request", "request_id": 1, "request": {"type": "open_stream", "stream_id": 1}}),
    )
    .await;
    assert_eq!(opened["type"], "response_ok", "{opened}");
    let read = send(
        &mut ws,
        json!({"type": "request", "request_id": 2, "request": {"type": "execute", "stream_id": 1, "stmt": {"sql": "SELECT x FROM t", "want_rows": true}}}),
    )
    .await;
    assert_eq!(
        read["response"]["result"]["rows"][0][0]["value"], "over a socket",
        "{read}"
    );

    // The key is rotated: the socket's next stream is refused.
    app.post(
        "/v1/databases/socketed/encryption/rotate",
        &app.admin_token,
        json!({"current_encryption_key": key, "encryption_key": base64(&[16u8; 32])}),
    )
    .await
    .expect(200);
    let refused = send(
        &mut ws,
        json!({"type": "request", "request_id": 3, "request": {"type": "open_stream", "stream_id": 2}}),
    )
    .await;
    let opened_again = send(
        &mut ws,
        json!({"type": "request", "request_id": 4, "request": {"type": "execute", "stream_id": 2, "stmt": {"sql": "SELECT x FROM t", "want_rows": true}}}),
    )
    .await;
    assert_ne!(
        opened_again["type"], "response_ok",
        "{refused} {opened_again}"
    );
    assert!(
        !opened_again.to_string().contains("over a socket"),
        "{opened_again}"
    );
}
