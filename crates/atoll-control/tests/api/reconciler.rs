//! The reconciler (docs/STORAGE.md, "The reconciler"): what it removes, what it keeps.
//! The server's own reconciler runs too (at start, and when a pass is asked for), so the
//! tests check the state a pass leaves, not which pass did the work.

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
async fn stray_database(app: &TestApp) -> String {
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
        external_keys: Default::default(),
        client_ca: None,
        durability: None,
        pitr_retention_days: None,
        config_version: 0,
        history_starts_at_ms: None,
        encryption: None,
    };
    // On a blocking thread, as the node's admin API creates: the first generation goes to
    // object storage through the runtime.
    let node = node(app);
    tokio::task::spawn_blocking(move || {
        node.create_database(CreateDatabase {
            config,
            seed: Seed::Empty,
        })
    })
    .await
    .unwrap()
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
    let stray = stray_database(&app).await;
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
    assert!(report.deleted.is_empty(), "{report:?}");

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
    assert_eq!(pass(&app).await, Default::default());
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

async fn pass(app: &TestApp) -> atoll_control::data_plane::ReconcileReport {
    app.state
        .data_plane
        .reconcile(
            &app.state.store,
            Duration::from_secs(600),
            atoll_meta::now_millis(),
        )
        .await
        .unwrap()
}

async fn database_id(app: &TestApp, name: &str) -> String {
    app.get(&format!("/v1/databases/{name}"), &app.admin_token)
        .await
        .expect(200)["database"]["DbId"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_node_behind_the_store_is_brought_up_to_date() {
    let app = app!();
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "behind", "group": "default"}),
    )
    .await
    .expect(200);
    let id = database_id(&app, "behind").await;
    let node = node(&app);
    let before = node.by_id(&id).unwrap().config();
    assert!(before.config_version >= 1);

    app.patch(
        "/v1/databases/behind/configuration",
        &app.admin_token,
        json!({"block_writes": true}),
    )
    .await
    .expect(200);
    let after = node.by_id(&id).unwrap().config();
    assert!(after.block_writes);
    assert!(after.config_version > before.config_version);

    // A slow or retried push of an older configuration never undoes the newer one.
    node.configure(DatabaseConfig::clone(&before)).unwrap();
    assert!(node.by_id(&id).unwrap().config().block_writes);

    // A node that missed the change (here: it was given a configuration of no version,
    // as after a restore of its disk) is brought up to date by the next pass.
    let mut stale = DatabaseConfig::clone(&before);
    stale.config_version = 0;
    node.configure(stale).unwrap();
    pass(&app).await;
    let converged = node.by_id(&id).unwrap().config();
    assert!(converged.block_writes);
    assert_eq!(converged.config_version, after.config_version);
    // Converged: the next pass has nothing to do.
    assert_eq!(pass(&app).await, Default::default());
}

#[tokio::test]
async fn a_delete_the_node_missed_is_finished_from_its_tombstone() {
    let app = app!();
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "doomed", "group": "default"}),
    )
    .await
    .expect(200);
    let id = database_id(&app, "doomed").await;
    // The store forgets it, as a delete whose node call failed leaves it.
    app.state.store.delete_database(&id).await.unwrap();
    assert!(app.state.store.is_tombstoned(&id).await.unwrap());
    assert!(node(&app).by_id(&id).is_some());

    let report = pass(&app).await;
    assert!(
        report.quarantined.is_empty(),
        "deleted, not quarantined: {report:?}"
    );
    assert!(node(&app).by_id(&id).is_none());
    assert!(!node(&app).data_dir().join("quarantine").join(&id).exists());
    assert!(!app.state.store.is_tombstoned(&id).await.unwrap());
}

#[tokio::test]
async fn a_database_missing_from_its_node_is_reported_not_recreated() {
    let app = app!();
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "lost", "group": "default"}),
    )
    .await
    .expect(200);
    let id = database_id(&app, "lost").await;
    // Its files are gone (a lost disk): the store still wants it.
    node(&app).delete_database(&id).unwrap();
    let report = pass(&app).await;
    assert_eq!(report.missing, vec![("local".to_string(), id.clone())]);
    assert!(node(&app).by_id(&id).is_none(), "never recreated empty");
}

#[tokio::test]
async fn the_nodes_are_listed_with_their_databases() {
    let app = app!();
    app.post(
        "/v1/databases",
        &app.admin_token,
        json!({"name": "counted", "group": "default"}),
    )
    .await
    .expect(200);
    let listed = app
        .get("/v1/admin/nodes", &app.admin_token)
        .await
        .expect(200);
    let nodes = listed["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{listed}");
    assert_eq!(nodes[0]["name"], "local");
    assert_eq!(nodes[0]["databases"], 1);
    assert_eq!(nodes[0]["healthy"], true);
    assert_eq!(nodes[0]["http_url"], app.db_url.as_str());
}
