//! Nothing to ship: this crate holds `tests/libsql_remote.rs`, which drives Atoll with the
//! official Rust `libsql` crate in remote mode (Hrana v3 pipelines and cursors).
