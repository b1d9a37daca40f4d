//! Finding 10: a copy of the metadata store (a leaked backup, a read of `meta.db`) gave
//! every private signing key, so its holder could mint database tokens for every
//! database. The keys are now sealed under the operator's secrets key: without it, the
//! store yields none of them.

use crate::harness::TestApp;
use atoll_meta::{SecretsKeyring, Store, StoreError};
use serde_json::json;

async fn mint(app: &TestApp, path: &str) -> String {
    let body = app
        .post(&format!("{path}/auth/tokens"), &app.admin_token, json!({}))
        .await
        .expect(200);
    body["jwt"].as_str().unwrap().to_string()
}

async fn select_one(app: &TestApp, token: &str) -> u16 {
    app.client
        .post(format!("{}/db/vault-admin/v2/pipeline", app.db_url))
        .bearer_auth(token)
        .json(&json!({"requests": [{"type": "execute", "stmt": {"sql": "SELECT 1"}}]}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// What someone holding the store but not the secrets key gets for the database and
/// its group: an error each, never a key.
async fn assert_no_key_without_the_secrets_key(thief: &Store, db_id: &str, group_id: &str) {
    let error = thief.database_by_id(db_id).await.unwrap_err();
    assert!(matches!(error, StoreError::Secrets(_)), "{error:?}");
    let error = thief.group_by_id(group_id).await.unwrap_err();
    assert!(matches!(error, StoreError::Secrets(_)), "{error:?}");
}

#[tokio::test]
async fn a_copy_of_the_store_without_the_secrets_key_yields_no_signing_key() {
    let app = app!();
    let org = "/v1/organizations/admin";
    app.database(org, &app.admin_token, "vault", "default")
        .await;
    let path = format!("{org}/databases/vault");
    let token = mint(&app, &path).await;
    let group_token = mint(&app, &format!("{org}/groups/default")).await;
    assert_eq!(select_one(&app, &token).await, 200);
    assert_eq!(select_one(&app, &group_token).await, 200);

    let owner = app.state.store.org_by_slug("admin").await.unwrap().unwrap();
    let db = app
        .state
        .store
        .database_by_name(&owner.id, "vault")
        .await
        .unwrap()
        .unwrap();
    assert!(
        !db.signing_key.is_empty(),
        "the server itself opens the key"
    );

    // The store read without a key, or with a key of the attacker's choosing.
    for thief in [
        app.state
            .store
            .clone()
            .with_secrets(SecretsKeyring::plaintext()),
        app.state
            .store
            .clone()
            .with_secrets(SecretsKeyring::random()),
    ] {
        assert_no_key_without_the_secrets_key(&thief, &db.id, &db.group_id).await;
    }

    // A rotated key is sealed as well, and the old token stops working.
    app.post(&format!("{path}/auth/rotate"), &app.admin_token, json!({}))
        .await
        .expect(200);
    assert_eq!(select_one(&app, &token).await, 401);
    let fresh = mint(&app, &path).await;
    assert_eq!(select_one(&app, &fresh).await, 200);
    let thief = app
        .state
        .store
        .clone()
        .with_secrets(SecretsKeyring::plaintext());
    assert_no_key_without_the_secrets_key(&thief, &db.id, &db.group_id).await;
}
