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
