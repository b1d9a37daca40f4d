//! The expiration grammar of API and database tokens (`2w1d30m`, `never`).
#![no_main]

use atoll_types::expiration::parse_expiration;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    // A token that "expires" after zero seconds would be dead on arrival: never accepted.
    if let Ok(Some(seconds)) = parse_expiration(text) {
        assert!(seconds > 0, "{text:?} parsed as a zero lifetime");
    }
});
