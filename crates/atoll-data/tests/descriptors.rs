//! The warm set gives file descriptors back when the process runs short of them
//! (`warm_set.rs`): it may hold three quarters of the open-files limit (`--warm-files`), so
//! when something else takes the rest — client sockets, streams, uploads — a cold open or
//! a new client must not fail while idle connections hold descriptors that could be closed.
//!
//! A test binary of its own, with one test: it lowers the process's open-files limit.

mod support;

use atoll_data::node::NodeSettings;
use atoll_data::DataLimits;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use support::{integer, sql, start_node_with_settings};

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

fn set_open_files_limit(limit: u64) {
    let hard = getrlimit(Resource::Nofile).maximum;
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(limit),
            maximum: hard,
        },
    )
    .unwrap();
}

/// With the warm set's own budget out of the way (the files a connection holds are only
/// bounded by the process's limit here), queries to 120 databases need 240 descriptors
/// for their idle connections (two each: the database and its WAL) against ~130 free:
/// each open that finds none free closes an eighth of the idle connections and succeeds.
/// Then, with every descriptor taken, a new client is still served: `accept` fails short
/// of descriptors, the listener asks the warm set to give some back, and accepts again.
/// Before, the 44th database's open failed (`SQLITE_CANTOPEN`; three descriptors a
/// connection then), and the new client waited until idle connections went unused for 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_set_at_the_open_files_limit_yields_to_cold_opens_and_new_clients() {
    let mut settings = NodeSettings::default();
    settings.sandbox.max_idle_connections = 100_000;
    let node = start_node_with_settings(DataLimits::default(), settings).await;
    let dbs: Vec<_> = (0..120)
        .map(|i| node.create_db(&format!("warm{i}")))
        .collect();
    // A client made before descriptors run out (building one reads certificates).
    let newcomer = reqwest::Client::new();
    let before = getrlimit(Resource::Nofile).current;
    set_open_files_limit(open_descriptors() + 130);
    // The new client's socket, kept aside: the warm set may take every other descriptor
    // (two per idle connection fill the 130 exactly), and the client below must have one.
    let reserve = std::fs::File::open("/dev/null").unwrap();

    for db in &dbs {
        let one = db.query(sql("SELECT 1")).await;
        assert_eq!(one["rows"][0][0], integer(1), "{}: {one}", db.config.name);
    }
    let idle = node.node.pool.idle_count();
    assert!((1..=65).contains(&idle), "{idle} idle connections");

    // Every descriptor taken but one, which the new client's socket takes.
    let mut taken = Vec::new();
    while let Ok(file) = std::fs::File::open("/dev/null") {
        taken.push(file);
    }
    drop(reserve);
    let db = &dbs[119];
    let response = newcomer
        .post(db.url("/v2/pipeline"))
        .header("x-namespace", &db.config.label)
        .bearer_auth(db.token())
        .json(&serde_json::json!({"requests": [
            {"type": "execute", "stmt": sql("SELECT 2")}, {"type": "close"}]}))
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .expect("a new client is served while the warm set holds the descriptors");
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        body["results"][0]["response"]["result"]["rows"][0][0],
        integer(2),
        "{body}"
    );
    assert!(node.node.pool.idle_count() < idle, "nothing was given back");
    drop(taken);
    set_open_files_limit(before.unwrap_or(1024));
}
