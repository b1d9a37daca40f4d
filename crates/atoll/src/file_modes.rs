//! Owner-only files: everything the server commands write (the metadata store, database
//! files, uploads in progress, admin credentials, the secrets key) is readable by the
//! user running Atoll and nobody else.
//!
//! Two halves: a process umask of 077, set first thing in `atoll dev`, `serve`, `node` and
//! `migrate`, so every file and directory created afterwards — by Atoll or by SQLite for
//! its `-wal` and `-shm` files — is 0600 or 0700 whoever creates it; and a pass at start
//! that tightens what older versions left with the default umask (0644 files, 0755
//! directories).

use std::path::{Path, PathBuf};

/// What Atoll writes at the top of a data directory (`dev`, `serve`'s own node, `node`).
/// Anything else found there is left alone.
const DATA_DIR_ENTRIES: &[&str] = &[
    "meta.db",
    "meta.db-wal",
    "meta.db-shm",
    "meta.db-journal",
    "admin.token",
    "admin.password",
    "secrets.key",
    "dbs",
    // The default object storage (`file://<data-dir>/storage`): every database's history.
    "storage",
    // The node's metadata-store stamp and the databases its store did not know.
    atoll_data::identity::STAMP_FILE,
    "quarantine",
    // Which tenant statement crashed the node, and the statements refused since.
    "crash-journal",
];

/// Makes every file and directory this process creates from now on owner-only.
pub fn restrict_new_files() {
    #[cfg(unix)]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
}

/// Tightens a data directory written by an older version: the directory itself, and
/// every file and directory Atoll keeps in it (recursively under `dbs/`). The directory
/// itself is only changed when it holds nothing but Atoll's entries: a `--data-dir` that
/// points at a shared directory gets a warning instead.
pub fn tighten_data_dir(data_dir: &Path) {
    let mut tightened = Vec::new();
    for name in DATA_DIR_ENTRIES {
        tighten_tree(&data_dir.join(name), &mut tightened);
    }
    if is_open_to_others(data_dir) {
        if holds_only_atoll_entries(data_dir) {
            tighten(data_dir, &mut tightened);
        } else {
            tracing::warn!(
                data_dir = %data_dir.display(),
                "the data directory is readable by other users and holds files that are not \
                 Atoll's, so its mode was left as it is: give Atoll a directory of its own, \
                 or `chmod 700` it"
            );
        }
    }
    report(&tightened);
}

/// Tightens one SQLite store file and its `-wal`, `-shm` and `-journal` companions
/// (`atoll serve` on a SQLite store outside the data directory).
pub fn tighten_sqlite_store(path: &Path) {
    let mut tightened = Vec::new();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        tighten(Path::new(&name), &mut tightened);
    }
    report(&tightened);
}

fn report(tightened: &[PathBuf]) {
    if tightened.is_empty() {
        return;
    }
    let shown: Vec<String> = tightened
        .iter()
        .take(5)
        .map(|p| p.display().to_string())
        .collect();
    tracing::info!(
        count = tightened.len(),
        first = %shown.join(", "),
        "made files and directories written by an older version owner-only (0600/0700)"
    );
}

fn holds_only_atoll_entries(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().all(|entry| {
        entry
            .file_name()
            .to_str()
            .is_some_and(|name| DATA_DIR_ENTRIES.contains(&name))
    })
}

/// `path` and, for a directory, everything under it. Symbolic links are neither followed
/// nor changed.
fn tighten_tree(path: &Path, tightened: &mut Vec<PathBuf>) {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return;
    };
    if metadata.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                tighten_tree(&entry.path(), tightened);
            }
        }
    }
    tighten(path, tightened);
}

#[cfg(unix)]
fn is_open_to_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

#[cfg(not(unix))]
fn is_open_to_others(_: &Path) -> bool {
    false
}

/// Clears the group and other permission bits of a regular file or directory.
#[cfg(unix)]
fn tighten(path: &Path, tightened: &mut Vec<PathBuf>) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return;
    };
    let mode = metadata.permissions().mode();
    if !(metadata.is_file() || metadata.is_dir()) || mode & 0o077 == 0 {
        return;
    }
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700)) {
        Ok(()) => tightened.push(path.to_path_buf()),
        Err(e) => tracing::warn!(
            path = %path.display(),
            error = %e,
            "cannot make this file owner-only: do it by hand (chmod go-rwx)"
        ),
    }
}

#[cfg(not(unix))]
fn tighten(_: &Path, _: &mut Vec<PathBuf>) {}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    fn set_mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_shared_directory_keeps_its_mode_but_atoll_files_in_it_are_tightened() {
        let dir = std::env::temp_dir().join(format!("atoll-modes-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("dbs/one")).unwrap();
        for file in ["meta.db", "dbs/one/data", "notes.txt"] {
            std::fs::write(dir.join(file), "x").unwrap();
            set_mode(&dir.join(file), 0o644);
        }
        for sub in ["", "dbs", "dbs/one"] {
            set_mode(&dir.join(sub), 0o755);
        }
        tighten_data_dir(&dir);
        assert_eq!(mode(&dir), 0o755, "not Atoll's alone: left as it is");
        assert_eq!(mode(&dir.join("notes.txt")), 0o644);
        assert_eq!(mode(&dir.join("meta.db")), 0o600);
        assert_eq!(mode(&dir.join("dbs")), 0o700);
        assert_eq!(mode(&dir.join("dbs/one")), 0o700);
        assert_eq!(mode(&dir.join("dbs/one/data")), 0o600);

        std::fs::remove_file(dir.join("notes.txt")).unwrap();
        tighten_data_dir(&dir);
        assert_eq!(mode(&dir), 0o700, "Atoll's alone: tightened");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
