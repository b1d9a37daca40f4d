//! Hrana over HTTP, JSON: a request body as `/v2/pipeline`, `/v3/pipeline` and
//! `/v3/cursor` decode it, then every statement read as the executor reads it.
#![no_main]

use atoll_data::hrana::{inspect_request, Encoding, RequestKind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    // Decoding may fail (that is a 400 for the client); it must never panic.
    let _ = inspect_request(RequestKind::Pipeline, Encoding::Json, body);
    let _ = inspect_request(RequestKind::Cursor, Encoding::Json, body);
});
