//! The reconciler (docs/STORAGE.md, "The reconciler"): what it removes, what it keeps.

use crate::harness::TestApp;
use atoll_control::DataPlane;
use atoll_meta::{DatabaseChanges, DatabaseState};
use atoll_types::node::{self as wire, CreateDatabase, DatabaseConfig, Seed};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn node(app: &TestApp) -> Arc<atoll_data::node::Node> {
    match &*app.state.data_plane {
        DataPlane::InProcess { node, .. } => Arc::clone(node),
        DataPlane::Remote { .. } => panic!("the test server runs its node in process"),
    }
}

/// A database on the node that the store has never heard of.
fn stray_database(app: &TestApp) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    let config = DatabaseConfig {
        id: id.clone(),
        name: "stray".into(),
        org_id: "some-org".into(),
        group_id: "some-group".into(),
        label: format!("stray-{}", &id[..8]),
        state: wire::DatabaseState::Active,
        block_reads: false,
        block_writes: false,
        block_reason: None,
        size_limit: None,
        allow_attach: false,
        allowed_ips: Vec::new(),
        keys: Vec::new(),
    };
    node(app)
        .create_database(CreateDatabase {
            config,
            seed: Seed::Empty,
        })
        .unwrap();
    id
}

#[tokio::test]
async fn abandoned_creates_are_removed_only_after_their_grace() {
    let app = app!();
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "half-made", "group": "default"}),
    )
    .await
    .expect(200);
    let org = app.state.store.org_by_slug("admin").await.unwrap().unwrap();
    let db = app
        .state
        .store
        .database_by_name(&org.id, "half-made")
        .await
        .unwrap()
        .unwrap();
    // As a replica that died between the store's row and its final state leaves it.
    let changes = DatabaseChanges {
        state: Some(DatabaseState::Creating),
        ..Default::default()
    };
    app.state
        .store
        .update_database(&db.id, changes)
        .await
        .unwrap();
    let grace = Duration::from_secs(600);

    // Within the grace period another replica may still be creating it: kept.
    let report = app
        .state
        .data_plane
        .reconcile(&app.state.store, grace, db.created_at + 599_000)
        .await
        .unwrap();
    assert!(report.abandoned_creates.is_empty(), "{report:?}");
    assert!(app
        .state
        .store
        .database_by_id(&db.id)
        .await
        .unwrap()
        .is_some());
    assert!(node(&app).by_id(&db.id).is_some());

    let report = app
        .state
        .data_plane
        .reconcile(&app.state.store, grace, db.created_at + 600_000)
        .await
        .unwrap();
    assert_eq!(report.abandoned_creates, vec![db.id.clone()]);
    assert!(app
        .state
        .store
        .database_by_id(&db.id)
        .await
        .unwrap()
        .is_none());
    assert!(node(&app).by_id(&db.id).is_none());
    // Its name is free again.
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "half-made", "group": "default"}),
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn unknown_databases_are_quarantined_never_deleted() {
    let app = app!();
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "known", "group": "default"}),
    )
    .await
    .expect(200);
    let stray = stray_database(&app);
    let report = app
        .state
        .data_plane
        .reconcile(
            &app.state.store,
            Duration::from_secs(600),
            atoll_meta::now_millis(),
        )
        .await
        .unwrap();
    assert_eq!(
        report.quarantined,
        vec![("local".to_string(), stray.clone())]
    );

    // No longer served, but its files are whole, aside.
    let node = node(&app);
    assert!(node.by_id(&stray).is_none());
    let aside = node.data_dir().join("quarantine").join(&stray);
    assert!(aside.join("data").is_file(), "{}", aside.display());
    assert!(!node.data_dir().join("dbs").join(&stray).exists());
    // What the store knows is untouched.
    app.get("/v1/databases/known", &app.admin_token)
        .await
        .expect(200);

    let listed = app
        .get("/v1/admin/quarantine", &app.admin_token)
        .await
        .expect(200);
    let databases = listed["databases"].as_array().unwrap();
    assert_eq!(databases.len(), 1, "{listed}");
    assert_eq!(databases[0]["id"], stray.as_str());
    assert_eq!(databases[0]["node"], "local");
    assert_eq!(databases[0]["name"], "stray");
    assert_eq!(databases[0]["purgeable"], false);
    assert!(databases[0]["bytes"].as_u64().unwrap() > 0);

    // A purge removes only what is past its retention (7 days by default): nothing yet.
    let purged = app
        .post("/v1/admin/quarantine/purge", &app.admin_token, json!({}))
        .await
        .expect(200);
    assert_eq!(purged["purged"], json!([]));
    let refused = app
        .post(
            "/v1/admin/quarantine/purge",
            &app.admin_token,
            json!({"id": stray}),
        )
        .await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.code(), "quarantine_retention");
    assert!(aside.join("data").is_file());
    let unknown = app
        .post(
            "/v1/admin/quarantine/purge",
            &app.admin_token,
            json!({"id": uuid::Uuid::new_v4().to_string()}),
        )
        .await;
    assert_eq!(unknown.status, 404);

    // A second pass has nothing more to do.
    let again = app
        .state
        .data_plane
        .reconcile(
            &app.state.store,
            Duration::from_secs(600),
            atoll_meta::now_millis(),
        )
        .await
        .unwrap();
    assert_eq!(again, Default::default());
}

#[tokio::test]
async fn a_data_directory_stamped_by_another_store_is_refused() {
    let app = app!();
    app.state
        .data_plane
        .reconcile(
            &app.state.store,
            Duration::from_secs(600),
            atoll_meta::now_millis(),
        )
        .await
        .unwrap();
    let ours = app.state.store.store_id().await.unwrap();
    let stamped = std::fs::read_to_string(node(&app).data_dir().join("store-id")).unwrap();
    assert_eq!(stamped.trim(), ours);
    app.state.data_plane.claim_store(&ours).unwrap();
    let other = uuid::Uuid::new_v4().to_string();
    let refused = app.state.data_plane.claim_store(&other).unwrap_err();
    assert!(
        refused.to_string().contains("belongs to metadata store"),
        "{refused}"
    );
}
