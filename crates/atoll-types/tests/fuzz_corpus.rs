//! Replays the committed fuzz corpus (`fuzz/corpus/expiration`, `fuzz/corpus/size_limit`)
//! through the parsers with the fuzz targets' own assertions, on stable.

use atoll_types::expiration::parse_expiration;
use atoll_types::sizes::parse_size;
use std::path::Path;

fn corpus(target: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut texts: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        // The targets take `&str`: libFuzzer skips inputs that are not UTF-8.
        .filter_map(|bytes| String::from_utf8(bytes).ok())
        .collect();
    texts.sort();
    assert!(!texts.is_empty(), "no corpus in {}", dir.display());
    texts
}

#[test]
fn expiration_corpus() {
    for text in corpus("expiration") {
        if let Ok(Some(seconds)) = parse_expiration(&text) {
            assert!(seconds > 0, "{text:?} parsed as a zero lifetime");
        }
    }
}

#[test]
fn size_limit_corpus() {
    for text in corpus("size_limit") {
        if let Ok(bytes) = parse_size(&text) {
            assert!(
                text.trim().starts_with(|c: char| c.is_ascii_digit()),
                "{text:?} parsed as {bytes} bytes"
            );
        }
    }
}
