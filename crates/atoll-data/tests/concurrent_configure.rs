//! Configuration changes of one database from many threads at once (the control plane
//! sends one per request, and requests run concurrently): every one succeeds, and the file
//! on disk ends up as the configuration in memory.

use atoll_data::node::Node;
use atoll_types::node::{CreateDatabase, DatabaseConfig, DatabaseState, Seed};
use std::sync::Arc;

#[test]
fn concurrent_configures_of_one_database_all_succeed() {
    let dir = std::env::temp_dir().join(format!(
        "atoll-configure-test-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let node = Arc::new(Node::open(&dir).unwrap());
    let config = DatabaseConfig {
        id: uuid::Uuid::new_v4().to_string(),
        name: "app".into(),
        org_id: "org".into(),
        group_id: "group".into(),
        label: "app-acme".into(),
        state: DatabaseState::Active,
        block_reads: false,
        block_writes: false,
        block_reason: None,
        size_limit: None,
        allow_attach: false,
        allowed_ips: vec![],
        keys: vec![],
        external_keys: Default::default(),
        client_ca: None,
        durability: None,
        pitr_retention_days: None,
        config_version: 0,
        history_starts_at_ms: None,
        encryption: None,
    };
    let db = node
        .create_database(CreateDatabase {
            config: config.clone(),
            seed: Seed::Empty,
        })
        .unwrap();

    let threads: Vec<_> = (0..8)
        .map(|thread| {
            let (node, mut config) = (Arc::clone(&node), config.clone());
            std::thread::spawn(move || {
                for i in 0..50 {
                    config.block_writes = (thread + i) % 2 == 0;
                    node.configure(config.clone())
                        .unwrap_or_else(|e| panic!("configure {thread}/{i}: {e}"));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }

    let on_disk: DatabaseConfig =
        serde_json::from_slice(&std::fs::read(db.dir().join("config.json")).unwrap()).unwrap();
    assert_eq!(on_disk.block_writes, db.config().block_writes);
    let _ = std::fs::remove_dir_all(&dir);
}
