//! The check every uploaded SQLite file passes before it replaces a database
//! (`/v1/upload` and chunked uploads): header checks, then SQLite's own quick_check.
#![no_main]

use atoll_data::upload::validate::check_database_file;
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;

fuzz_target!(|file: &[u8]| {
    // The validator reads a file, as the server reads the upload it wrote to disk. One
    // path per process; the WAL and shared-memory files SQLite leaves next to it are
    // removed first so one input's WAL is never replayed into the next.
    let path = std::env::temp_dir().join(format!("atoll-fuzz-upload-{}.db", std::process::id()));
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut side = path.clone().into_os_string();
        side.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(side));
    }
    std::fs::write(&path, file).expect("write the input file");
    // Refusals are the point; panics and crashes are the bugs.
    let _ = check_database_file(&path);
});
