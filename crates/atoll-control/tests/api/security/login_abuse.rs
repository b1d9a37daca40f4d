//! Finding 11 — login abuse without lock-outs, and revocable login tokens.
//!
//! Failed logins slow the (username, client address) pair that made them, with a growing
//! wait, and one address is capped over all usernames; nobody can lock a user out from
//! another address. `POST /v1/auth/invalidate` (`turso auth logout --all`) revokes every
//! login token of the caller, and nothing else.
//!
//! The waits are set long here, so that no assertion depends on how fast the machine is.

use crate::harness::{client_from, test_config, unique, TestApp, ADMIN, PASSWORD};
use atoll_control::LoginThrottleSettings;
use std::net::IpAddr;
use std::time::Duration;

fn patient_throttle() -> LoginThrottleSettings {
    LoginThrottleSettings {
        base_delay: Duration::from_secs(600),
        max_delay: Duration::from_secs(3600),
        ..LoginThrottleSettings::default()
    }
}

async fn start(throttle: LoginThrottleSettings) -> Option<TestApp> {
    TestApp::start_with(atoll_control::ControlConfig {
        login_throttle: throttle,
        ..test_config()
    })
    .await
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

#[tokio::test]
async fn a_guesser_cannot_lock_the_administrator_out() {
    let Some(app) = start(patient_throttle()).await else {
        return;
    };
    let attacker = client_from(loopback(2));
    let mut statuses = Vec::new();
    for _ in 0..20 {
        let reply = app.login_with(&attacker, ADMIN, "not-the-password").await;
        if reply.status == 429 {
            assert!(reply.retry_after().is_some_and(|s| s >= 1), "{reply:?}");
            assert_eq!(reply.code(), "too_many_requests");
        }
        statuses.push(reply.status);
    }
    let free = atoll_control::LOGIN_FAILURES_BEFORE_BACKOFF as usize;
    assert!(statuses[..free].iter().all(|s| *s == 401), "{statuses:?}");
    assert!(statuses[free..].iter().all(|s| *s == 429), "{statuses:?}");

    // The attacker waits, even with the right password...
    let reply = app.login_with(&attacker, ADMIN, PASSWORD).await;
    assert_eq!(reply.status, 429, "{:?}", reply.body);
    let wait = reply.retry_after().expect("Retry-After");
    assert!((1..=600).contains(&wait), "{wait}");
    // ...while the administrator, from another address, logs in at once.
    let elsewhere = client_from(loopback(3));
    let reply = app.login_with(&elsewhere, ADMIN, PASSWORD).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let reply = app.login_with(&app.client, ADMIN, PASSWORD).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
}

#[tokio::test]
async fn one_address_cannot_spray_guesses_over_many_users() {
    let Some(app) = start(LoginThrottleSettings {
        address_failures: 8,
        address_window: Duration::from_secs(3600),
        ..patient_throttle()
    })
    .await
    else {
        return;
    };
    let victim = unique("victim");
    app.user(&victim).await;
    let sprayer = client_from(loopback(4));
    // One guess per username: no pair reaches its own limit, the address does.
    for n in 0..8 {
        let reply = app
            .login_with(&sprayer, &format!("user-{n}"), "guess")
            .await;
        assert_eq!(reply.status, 401, "{:?}", reply.body);
    }
    let reply = app.login_with(&sprayer, &victim, "guess").await;
    assert_eq!(reply.status, 429, "{:?}", reply.body);
    assert!(reply.retry_after().is_some());
    // Other addresses are not affected.
    let reply = app
        .login_with(&client_from(loopback(5)), &victim, PASSWORD)
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
}

#[tokio::test]
async fn logging_out_everywhere_revokes_every_login_token_and_nothing_else() {
    let app = app!();
    let name = unique("sessions");
    let laptop = app.user(&name).await;
    let phone = app.login(&name).await;
    let ci = app.api_token(&laptop, serde_json::json!({})).await;
    let other_user = app.user(&unique("bystander")).await;

    // An API token cannot end the user's sessions.
    let reply = app
        .post("/v1/auth/invalidate", &ci, serde_json::json!({}))
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (403, "forbidden"),
        "{:?}",
        reply.body
    );
    app.get("/v1/user", &phone).await.expect(200);

    let before = atoll_meta::now_millis() / 1000;
    let reply = app
        .call(
            reqwest::Method::POST,
            "/v1/auth/invalidate",
            Some(&laptop),
            None,
        )
        .await;
    let body = reply.expect(200);
    let valid_from = body["ValidFrom"].as_i64().expect("ValidFrom");
    assert!(valid_from >= before, "{body}");

    for token in [&laptop, &phone] {
        let reply = app.get("/v1/user", token).await;
        assert_eq!(
            (reply.status, reply.body["error"].as_str()),
            (401, Some("token has been revoked"))
        );
    }
    // API tokens and other users' sessions stay; a new login works.
    app.get("/v1/user", &ci).await.expect(200);
    app.get("/v1/user", &other_user).await.expect(200);
    let fresh = app.login(&name).await;
    app.get("/v1/user", &fresh).await.expect(200);
    // Without credentials: 401.
    let reply = app
        .call(reqwest::Method::POST, "/v1/auth/invalidate", None, None)
        .await;
    assert_eq!(reply.status, 401);
}
