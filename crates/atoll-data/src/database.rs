//! One database on this node: its configuration and its files.
//!
//! Layout: `<data-dir>/dbs/<uuid>/data` (the SQLite file, with `data-wal` and `data-shm`)
//! and `<data-dir>/dbs/<uuid>/config.json` (the last configuration the control plane sent),
//! so a node restarts without its control plane.

use crate::error::DataError;
use atoll_types::node::{DatabaseConfig, DatabaseState};
use ed25519_dalek::VerifyingKey;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::Duration;

/// SQLite page size of every Atoll database (uploads must match it).
pub const PAGE_SIZE: u64 = 4096;

pub struct Database {
    dir: PathBuf,
    config: RwLock<DatabaseConfig>,
    keys: RwLock<Vec<(String, VerifyingKey)>>,
}

impl Database {
    pub(crate) fn new(dir: PathBuf, config: DatabaseConfig) -> Database {
        let keys = decode_keys(&config);
        Database {
            dir,
            config: RwLock::new(config),
            keys: RwLock::new(keys),
        }
    }

    pub fn id(&self) -> String {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .id
            .clone()
    }

    /// A snapshot of the configuration; re-read at every program run, so flag changes
    /// apply from the next request.
    pub fn config(&self) -> DatabaseConfig {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_config(&self, config: DatabaseConfig) {
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = decode_keys(&config);
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
    }

    pub fn verifying_keys(&self) -> Vec<(String, VerifyingKey)> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The SQLite file.
    pub fn file_path(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub(crate) fn config_path(&self) -> PathBuf {
        self.dir.join("config.json")
    }

    /// Refuses queries unless the database is active, saying what to do.
    pub fn ensure_queryable(&self) -> Result<(), DataError> {
        let config = self.config();
        match config.state {
            DatabaseState::Active => Ok(()),
            DatabaseState::AwaitingUpload => Err(DataError::Unavailable(format!(
                "database {} is waiting for its upload: send the SQLite file to /v1/upload or the /v2/upload routes first",
                config.name
            ))),
                        DatabaseState::Deleted => Err(DataError::Unavailable(format!(
                "database {} was deleted: an organization admin can restore it for 5 days (POST /v1/organizations/{{org}}/deleted-databases/{{id}}/restore)",
                config.name
            ))),
            DatabaseState::Archived => Err(DataError::Unavailable(format!(

                "database {} is archived with its group: unarchive the group (POST /v1/organizations/{{org}}/groups/{{group}}/unarchive) to use it again",
                config.name
            ))),
        }
    }

    /// Opens a connection with the database's limits applied.
    pub fn open_connection(&self) -> Result<rusqlite::Connection, DataError> {
        let conn = rusqlite::Connection::open(self.file_path())?;
        conn.busy_timeout(Duration::from_secs(5))?;
        // WAL is persistent in the file; NORMAL keeps every commit across a process crash.
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")?;
        if let Some(limit) = self.config().size_limit {
            let pages = (limit / PAGE_SIZE).max(1);
            conn.pragma_update(None, "max_page_count", pages)?;
        }
        Ok(conn)
    }

    /// Bytes in use: pages in use (page count minus free pages) plus the WAL file.
    pub fn storage_bytes(&self) -> u64 {
        let wal = std::fs::metadata(self.dir.join("data-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
        let main = std::fs::metadata(self.file_path())
            .map(|m| m.len())
            .unwrap_or(0);
        main + wal
    }
}

fn decode_keys(config: &DatabaseConfig) -> Vec<(String, VerifyingKey)> {
    config
        .keys
        .iter()
        .filter_map(|k| {
            crate::jwt::decode_verifying_key(&k.public_key).map(|key| (k.kid.clone(), key))
        })
        .collect()
}
