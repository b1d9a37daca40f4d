//! SQL dumps uploaded with `POST …/databases/dumps`: kept until a create uses them or
//! they expire, and counted per organization (their size is stored beside them).

use super::Store;
use crate::backend::Value;
use crate::error::Result;
use crate::model::{Dump, PendingDumps};

impl Store {
    /// Stores a dump of `org_id`; its size is `sql`'s length in bytes.
    pub async fn insert_dump(&self, id: &str, org_id: &str, sql: String) -> Result<()> {
        let (id, org_id) = (id.to_string(), org_id.to_string());
        let bytes = i64::try_from(sql.len()).unwrap_or(i64::MAX);
        self.write("insert_dump", move |c| {
            c.execute(
                "INSERT INTO dumps (id, org_id, sql, bytes, created_at) VALUES ($1, $2, $3, $4, $5)",
                &[
                    id.into(),
                    org_id.into(),
                    sql.into(),
                    bytes.into(),
                    crate::now_millis().into(),
                ],
            )?;
            Ok(())
        })
        .await
    }

    /// A dump of `org_id`, expired or not (the caller decides, and says why).
    pub async fn dump(&self, org_id: &str, id: &str) -> Result<Option<Dump>> {
        let (org_id, id) = (org_id.to_string(), id.to_string());
        self.read("dump", move |c| {
            Ok(c.query_opt(
                "SELECT sql, created_at FROM dumps WHERE org_id = $1 AND id = $2",
                &[org_id.into(), id.into()],
            )?
            .map(|row| Dump {
                sql: row.text(0),
                created_at: row.int(1),
            }))
        })
        .await
    }

    /// The dumps of `org_id` uploaded after `created_after` (those not yet expired).
    pub async fn pending_dumps(&self, org_id: &str, created_after: i64) -> Result<PendingDumps> {
        let org_id = org_id.to_string();
        self.read("pending_dumps", move |c| {
            let row = c.query_opt(
                "SELECT COUNT(*), CAST(COALESCE(SUM(bytes), 0) AS BIGINT), MIN(created_at) FROM dumps
                 WHERE org_id = $1 AND created_at > $2",
                &[org_id.into(), Value::from(created_after)],
            )?;
            Ok(row.map_or(PendingDumps::default(), |row| PendingDumps {
                count: u64::try_from(row.int(0)).unwrap_or(0),
                bytes: u64::try_from(row.int(1)).unwrap_or(0),
                oldest_created_at: row.opt_int(2),
            }))
        })
        .await
    }

    /// Forgets a dump (a create used it). False when there was none.
    pub async fn delete_dump(&self, org_id: &str, id: &str) -> Result<bool> {
        let (org_id, id) = (org_id.to_string(), id.to_string());
        self.write("delete_dump", move |c| {
            Ok(c.execute(
                "DELETE FROM dumps WHERE org_id = $1 AND id = $2",
                &[org_id.into(), id.into()],
            )? > 0)
        })
        .await
    }

    /// Deletes every dump uploaded at or before `cutoff`; answers how many.
    pub async fn delete_dumps_created_before(&self, cutoff: i64) -> Result<u64> {
        self.write("delete_dumps_created_before", move |c| {
            c.execute(
                "DELETE FROM dumps WHERE created_at <= $1",
                &[Value::from(cutoff)],
            )
        })
        .await
    }
}
