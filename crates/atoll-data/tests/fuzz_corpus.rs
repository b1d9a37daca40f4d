//! Replays the committed fuzz corpus (`fuzz/corpus/`) through the fuzz targets' entry
//! points on stable, so CI checks every input the fuzzers kept without nightly: none may
//! panic, and the valid seeds must still be accepted.

use atoll_data::hrana::{inspect_request, Encoding, RequestKind};
use atoll_data::upload::validate::check_database_file;
use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {}", dir.display());
    files
}

#[test]
fn hrana_json_corpus() {
    let mut decoded = 0;
    for file in corpus("hrana_json") {
        let body = std::fs::read(&file).unwrap();
        for kind in [RequestKind::Pipeline, RequestKind::Cursor] {
            decoded += usize::from(inspect_request(kind, Encoding::Json, &body).is_ok());
        }
    }
    assert!(decoded > 0, "no JSON body in the corpus decodes");
}

#[test]
fn hrana_protobuf_corpus() {
    let mut decoded = 0;
    for file in corpus("hrana_protobuf") {
        let body = std::fs::read(&file).unwrap();
        for kind in [RequestKind::Pipeline, RequestKind::Cursor] {
            decoded += usize::from(inspect_request(kind, Encoding::Protobuf, &body).is_ok());
        }
    }
    assert!(decoded > 0, "no protobuf body in the corpus decodes");
}

#[test]
fn a_pipeline_is_read_statement_by_statement() {
    let body = br#"{"requests": [
        {"type": "execute", "stmt": {"sql": "SELECT ?", "args": [{"type": "integer", "value": "1"}]}},
        {"type": "batch", "batch": {"steps": [{"stmt": {"sql": "BEGIN"}}, {"stmt": {"sql": "COMMIT"}}]}},
        {"type": "close"}
    ]}"#;
    assert_eq!(
        inspect_request(RequestKind::Pipeline, Encoding::Json, body),
        Ok(3)
    );
    assert!(inspect_request(RequestKind::Pipeline, Encoding::Json, b"{").is_err());
}

#[test]
fn upload_validator_corpus() {
    let dir = std::env::temp_dir().join(format!("atoll-fuzz-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut accepted = 0;
    for (i, file) in corpus("upload_validator").iter().enumerate() {
        // A copy: checking opens the file with SQLite, which leaves WAL files beside it.
        let copy = dir.join(format!("{i}.db"));
        std::fs::copy(file, &copy).unwrap();
        accepted += usize::from(check_database_file(&copy).is_ok());
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The hand-made seed of a valid database, at least, passes.
    assert!(
        accepted > 0,
        "the validator refuses every file in the corpus"
    );
}
