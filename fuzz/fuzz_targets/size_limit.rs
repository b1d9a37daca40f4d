//! Sizes with units, as a database's `size_limit` takes them (`256mb`, `4MiB`).
#![no_main]

use atoll_types::sizes::parse_size;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(bytes) = parse_size(text) {
        // Whatever parsed is a number of bytes the text actually spelled out: digits first.
        assert!(
            text.trim().starts_with(|c: char| c.is_ascii_digit()),
            "{text:?} parsed as {bytes} bytes"
        );
    }
});
