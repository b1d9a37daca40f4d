//! Which metadata store a node belongs to.
//!
//! A node is stamped with the id of the first store whose control plane talks to it
//! (`<data-dir>/store-id`) and from then on refuses orders carrying another id. A control
//! plane started on an empty or wrong `--database-url` has a store of its own, with its
//! own id: it can no longer list, let alone delete, the databases of the store the node
//! belongs to. Re-assigning a node to another store is deliberate: remove the file.

use crate::error::DataError;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The stamp's file name in a node's data directory.
pub const STAMP_FILE: &str = "store-id";

pub struct StoreStamp {
    path: PathBuf,
    /// The stamped id; `None` until the first order.
    current: Mutex<Option<String>>,
}

impl StoreStamp {
    /// Reads the stamp of `data_dir`, if it has one.
    pub fn open(data_dir: &Path) -> Result<StoreStamp, DataError> {
        let path = data_dir.join(STAMP_FILE);
        let current = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text.trim().to_string()).filter(|id| !id.is_empty()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        Ok(StoreStamp {
            path,
            current: Mutex::new(current),
        })
    }

    /// The id this node belongs to, once stamped.
    pub fn current(&self) -> Option<String> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Accepts an order from the store `store_id`: stamps the node on first contact,
    /// refuses (403) an order from any other store afterwards.
    pub fn claim(&self, store_id: &str) -> Result<(), DataError> {
        if store_id.is_empty()
            || store_id.len() > 64
            || !store_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(DataError::BadRequest(format!(
                "invalid store id {store_id:?}"
            )));
        }
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        match current.as_deref() {
            Some(stamped) if stamped == store_id => Ok(()),
            Some(stamped) => Err(DataError::Forbidden(format!(
                "this node belongs to metadata store {stamped}, not {store_id}: check the \
                 control plane's --database-url (to move the node to another store on \
                 purpose, remove {} from its data directory)",
                self.path.display()
            ))),
            None => {
                write_atomically(&self.path, store_id)?;
                tracing::info!(store = %store_id, "node stamped with its metadata store");
                *current = Some(store_id.to_string());
                Ok(())
            }
        }
    }
}

fn write_atomically(path: &Path, text: &str) -> Result<(), DataError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    {
        let mut file = std::fs::File::create(&tmp)?;
        writeln!(file, "{text}")?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        atoll_storage::sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_store_stamps_the_node_and_others_are_refused() {
        let dir = std::env::temp_dir().join(format!("atoll-stamp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let stamp = StoreStamp::open(&dir).unwrap();
        assert_eq!(stamp.current(), None);
        stamp.claim("store-a").unwrap();
        stamp.claim("store-a").unwrap();
        assert!(matches!(
            stamp.claim("store-b"),
            Err(DataError::Forbidden(_))
        ));
        // The stamp outlives the process.
        let reopened = StoreStamp::open(&dir).unwrap();
        assert_eq!(reopened.current().as_deref(), Some("store-a"));
        assert!(reopened.claim("store-b").is_err());
        assert!(matches!(
            reopened.claim("../etc"),
            Err(DataError::BadRequest(_))
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
