use super::Store;
use crate::error::Result;

/// Usage counters: what a database (or an organization) consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub rows_read: i64,
    pub rows_written: i64,
    pub bytes_synced: i64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.rows_read += other.rows_read;
        self.rows_written += other.rows_written;
        self.bytes_synced += other.bytes_synced;
    }
}

/// One database's part of a collected batch.
#[derive(Debug, Clone)]
pub struct UsageEntry {
    pub database_id: String,
    pub org_id: String,
    pub usage: Usage,
}

/// The hour `millis` falls in.
pub fn hour_bucket(millis: i64) -> i64 {
    millis - millis.rem_euclid(3_600_000)
}

impl Store {
    /// Adds a batch collected from a node to the hourly buckets, once: a batch id already
    /// stored is skipped (`Ok(false)`), so re-collecting after a crash counts nothing twice.
    pub async fn store_usage_batch(
        &self,
        batch_id: &str,
        at: i64,
        entries: Vec<UsageEntry>,
    ) -> Result<bool> {
        let batch_id = batch_id.to_string();
        self.write("store_usage_batch", move |c| {
            let fresh = c.execute(
                "INSERT INTO usage_batches (batch_id, collected_at) VALUES ($1, $2) ON CONFLICT (batch_id) DO NOTHING",
                &[batch_id.into(), at.into()],
            )?;
            if fresh == 0 {
                return Ok(false);
            }
            let bucket = hour_bucket(at);
            for entry in entries {
                c.execute(
                    "INSERT INTO usage_buckets (database_id, org_id, bucket, rows_read, rows_written, bytes_synced)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (database_id, org_id, bucket) DO UPDATE SET
                         rows_read = usage_buckets.rows_read + excluded.rows_read,
                         rows_written = usage_buckets.rows_written + excluded.rows_written,
                         bytes_synced = usage_buckets.bytes_synced + excluded.bytes_synced",
                    &[
                        entry.database_id.into(),
                        entry.org_id.into(),
                        bucket.into(),
                        entry.usage.rows_read.into(),
                        entry.usage.rows_written.into(),
                        entry.usage.bytes_synced.into(),
                    ],
                )?;
            }
            Ok(true)
        })
        .await
    }

    /// An organization's usage by database, for buckets in `[from, to)`. (Sums are cast:
    /// PostgreSQL widens a sum of BIGINT to NUMERIC.)
    pub async fn org_usage(
        &self,
        org_id: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<(String, Usage)>> {
        let org_id = org_id.to_string();
        self.read("org_usage", move |c| {
            let rows = c.query(
                "SELECT database_id, CAST(SUM(rows_read) AS BIGINT), CAST(SUM(rows_written) AS BIGINT), CAST(SUM(bytes_synced) AS BIGINT)
                 FROM usage_buckets WHERE org_id = $1 AND bucket >= $2 AND bucket < $3
                 GROUP BY database_id ORDER BY database_id",
                &[org_id.into(), hour_bucket(from).into(), to.into()],
            )?;
            Ok(rows
                .iter()
                .map(|row| {
                    (row.text(0), Usage { rows_read: row.int(1), rows_written: row.int(2), bytes_synced: row.int(3) })
                })
                .collect())
        })
        .await
    }

    /// One database's usage for buckets in `[from, to)`, whatever organization it was in.
    pub async fn database_usage(&self, database_id: &str, from: i64, to: i64) -> Result<Usage> {
        let database_id = database_id.to_string();
        self.read("database_usage", move |c| {
            let row = c.query_one(
                "SELECT CAST(COALESCE(SUM(rows_read), 0) AS BIGINT), CAST(COALESCE(SUM(rows_written), 0) AS BIGINT),
                        CAST(COALESCE(SUM(bytes_synced), 0) AS BIGINT)
                 FROM usage_buckets WHERE database_id = $1 AND bucket >= $2 AND bucket < $3",
                &[database_id.into(), hour_bucket(from).into(), to.into()],
            )?;
            Ok(Usage { rows_read: row.int(0), rows_written: row.int(1), bytes_synced: row.int(2) })
        })
        .await
    }
}
