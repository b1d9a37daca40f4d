//! Hrana over HTTP, protobuf: a request body as `/v3-protobuf/pipeline` and
//! `/v3-protobuf/cursor` decode it, then every statement read as the executor reads it.
#![no_main]

use atoll_data::hrana::{inspect_request, Encoding, RequestKind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let _ = inspect_request(RequestKind::Pipeline, Encoding::Protobuf, body);
    let _ = inspect_request(RequestKind::Cursor, Encoding::Protobuf, body);
});
