//! Tombstones: databases the store forgot whose node may still hold them. Written in the
//! transaction that forgets them, removed by the reconciler once the node has deleted
//! them, so a delete that could not reach its node is finished later, by id, and never
//! mistaken for an unknown database (which is quarantined, not deleted).

use super::Store;
use crate::backend::Conn;
use crate::error::Result;

/// A database to delete from its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    pub id: String,
    pub node: String,
    pub forgotten_at: i64,
}

/// Records a tombstone for every database matching `filter` (a condition on `databases`
/// with `$1` bound to `value`), before they are deleted.
pub(super) fn bury(c: &mut dyn Conn, filter: &str, value: &str) -> Result<()> {
    c.execute(
        &format!(
            "INSERT INTO database_tombstones (id, node, forgotten_at)
             SELECT id, node, $2 FROM databases WHERE {filter}
             ON CONFLICT (id) DO NOTHING"
        ),
        &[value.into(), crate::now_millis().into()],
    )?;
    Ok(())
}

impl Store {
    /// The tombstones of databases that were on `node`.
    pub async fn tombstones(&self, node: &str) -> Result<Vec<Tombstone>> {
        let node = node.to_string();
        self.read("tombstones", move |c| {
            Ok(c.query(
                "SELECT id, node, forgotten_at FROM database_tombstones WHERE node = $1 ORDER BY id",
                &[node.into()],
            )?
            .iter()
            .map(|row| Tombstone {
                id: row.text(0),
                node: row.text(1),
                forgotten_at: row.int(2),
            })
            .collect())
        })
        .await
    }

    /// Whether the store forgot database `id` on purpose (it has a tombstone).
    pub async fn is_tombstoned(&self, id: &str) -> Result<bool> {
        let id = id.to_string();
        self.read("is_tombstoned", move |c| {
            Ok(c.query_opt(
                "SELECT 1 FROM database_tombstones WHERE id = $1",
                &[id.into()],
            )?
            .is_some())
        })
        .await
    }

    /// Removes a tombstone: its node no longer holds the database.
    pub async fn remove_tombstone(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        self.write("remove_tombstone", move |c| {
            c.execute(
                "DELETE FROM database_tombstones WHERE id = $1",
                &[id.into()],
            )?;
            Ok(())
        })
        .await
    }
}
