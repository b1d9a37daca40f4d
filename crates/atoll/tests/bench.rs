//! `atoll bench` runs its own server and prints one line per figure (no timing asserted).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_atoll");

#[test]
fn bench_create_database_prints_one_line_per_figure() {
    let output = Command::new(BIN)
        .args(["bench", "--only", "create_database", "--samples", "5"])
        .output()
        .expect("run atoll bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "atoll bench failed\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let figures: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(figures.len(), 1, "one figure line expected: {stdout}");
    let line = figures[0];
    let rest = line
        .strip_prefix("create_database: p50 ")
        .unwrap_or_else(|| panic!("unexpected line: {line}"));
    let (p50, rest) = rest.split_once(" ms, p99 ").expect("p99 after p50");
    let (p99, rest) = rest.split_once(" ms (").expect("unit ms");
    assert!(p50.parse::<f64>().is_ok(), "{line}");
    assert!(p99.parse::<f64>().is_ok(), "{line}");
    assert!(rest.starts_with("5 samples"), "{line}");
    assert!(
        line.ends_with(": met") || line.ends_with(": MISSED"),
        "{line}"
    );
}

/// Runs `atoll bench` with `args`; its figure lines (not the `#` context lines).
fn figure_lines(args: &[&str]) -> Vec<String> {
    let output = Command::new(BIN)
        .arg("bench")
        .args(args)
        .output()
        .expect("run atoll bench");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "atoll bench failed\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn bench_seeds_an_organization_and_lists_its_first_page() {
    let lines = figure_lines(&[
        "--only",
        "list_databases",
        "--databases",
        "120",
        "--samples",
        "3",
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("list_databases: p50 ")
            && lines[0].contains("first page of 100 in an organization of 120 databases")
            && lines[0].ends_with(" at 120"),
        "{}",
        lines[0]
    );
}

/// The spread figure at two tiny scales: every database answered (no errors), each scale
/// adds to the previous one, and what the warm set costs is read off the process.
#[test]
fn bench_spreads_point_selects_over_many_databases() {
    let lines = figure_lines(&[
        "--only",
        "spread",
        "--spread-databases",
        "24,12",
        "--duration-secs",
        "1",
        "--connections",
        "4",
    ]);
    let names: Vec<&str> = lines
        .iter()
        .map(|line| line.split(':').next().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "spread_warm_cost",
            "spread_idle_cpu_12",
            "spread_first_query",
            "spread_one_database_1",
            "spread_uniform_12_1",
            "spread_zipf_12_1_after_uniform",
            "spread_zipf_12_1",
            "spread_one_database_4",
            "spread_uniform_12_4",
            "spread_zipf_12_4_after_uniform",
            "spread_zipf_12_4",
            "spread_resources_12",
            "spread_resources_at_rest_12",
            "spread_warm_cost",
            "spread_idle_cpu_24",
            "spread_first_query",
            "spread_one_database_1",
            "spread_uniform_24_1",
            "spread_zipf_24_1_after_uniform",
            "spread_zipf_24_1",
            "spread_one_database_4",
            "spread_uniform_24_4",
            "spread_zipf_24_4_after_uniform",
            "spread_zipf_24_4",
            "spread_resources_24",
            "spread_resources_at_rest_24",
        ],
        "{lines:?}"
    );
    for line in lines.iter().filter(|l| l.contains(" req/s ")) {
        assert!(line.contains(", 0 errors)"), "{line}");
    }
    assert!(
        lines[0].contains("12 idle connections") || lines[0].contains("13 idle connections"),
        "{}",
        lines[0]
    );
    assert!(
        lines[2].contains("over 12 databases never queried before"),
        "{}",
        lines[2]
    );
}

#[test]
fn bench_measures_an_idle_atoll_dev_process() {
    let lines = figure_lines(&["--only", "rss_idle", "--idle-databases", "12"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    let mib = line
        .strip_prefix("rss_idle: ")
        .and_then(|rest| rest.split_once(" MiB"))
        .map(|(mib, _)| mib)
        .unwrap_or_else(|| panic!("unexpected line: {line}"));
    assert!(mib.parse::<f64>().is_ok_and(|m| m > 0.0), "{line}");
    assert!(
        line.contains("an atoll dev process with 12 databases"),
        "{line}"
    );
}

#[test]
fn bench_replica_sync_applies_and_verifies_what_it_pulled() {
    let lines = figure_lines(&["--only", "replica_sync", "--replica-mb", "3"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert!(
        line.starts_with("replica_sync: ") && line.contains("for 3 MiB of new WAL"),
        "{line}"
    );
    assert!(line.contains("applied and verified"), "{line}");
}

#[test]
fn bench_turso_sync_bootstraps_pulls_and_pushes() {
    let lines = figure_lines(&["--only", "turso_sync", "--sync-mb", "3"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert!(
        line.starts_with("turso_sync: bootstrap of 3 MiB in ")
            && line.contains("applied and verified"),
        "{line}"
    );
    assert!(line.contains("push of 1000 statements in"), "{line}");
}

/// `--replication` starts serve and two nodes as processes and prints its three figures
/// (skips, loudly, without PostgreSQL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_replication_prints_replica_reads_and_lag() {
    let Some(database_url) = atoll_meta::testing::fresh_postgres_url().await else {
        return;
    };
    let lines = tokio::task::spawn_blocking(move || {
        figure_lines(&[
            "--replication",
            &database_url,
            "--duration-secs",
            "1",
            "--connections",
            "2",
            "--replication-rate",
            "100",
        ])
    })
    .await
    .unwrap();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].starts_with("replica_read_1conn: "), "{lines:?}");
    assert!(lines[1].starts_with("replica_read_2conn: "), "{lines:?}");
    assert!(
        lines[2].starts_with("replication_lag: p50 ") && lines[2].contains("over 100 inserts"),
        "{lines:?}"
    );
}
