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
    /// The location of the instance that served it (the node's); empty: not known, kept
    /// in the database's totals only.
    pub instance: String,
    pub usage: Usage,
}

/// Whose usage by instance [`Store::instance_usage`] answers.
#[derive(Debug, Clone)]
pub enum InstanceUsageOf {
    Database(String),
    Organization(String),
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
                if !entry.instance.is_empty() {
                    c.execute(
                        "INSERT INTO usage_instance_buckets (database_id, org_id, instance, bucket, rows_read, rows_written, bytes_synced)
                         VALUES ($1, $2, $3, $4, $5, $6, $7)
                         ON CONFLICT (database_id, org_id, instance, bucket) DO UPDATE SET
                             rows_read = usage_instance_buckets.rows_read + excluded.rows_read,
                             rows_written = usage_instance_buckets.rows_written + excluded.rows_written,
                             bytes_synced = usage_instance_buckets.bytes_synced + excluded.bytes_synced",
                        &[
                            entry.database_id.clone().into(),
                            entry.org_id.clone().into(),
                            entry.instance.into(),
                            bucket.into(),
                            entry.usage.rows_read.into(),
                            entry.usage.rows_written.into(),
                            entry.usage.bytes_synced.into(),
                        ],
                    )?;
                }
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

    /// Usage by database and instance (location) for buckets in `[from, to)`: of one
    /// database, or of every database of an organization.
    pub async fn instance_usage(
        &self,
        of: InstanceUsageOf,
        from: i64,
        to: i64,
    ) -> Result<Vec<(String, String, Usage)>> {
        self.read("instance_usage", move |c| {
            let (column, key) = match of {
                InstanceUsageOf::Database(id) => ("database_id", id),
                InstanceUsageOf::Organization(id) => ("org_id", id),
            };
            let rows = c.query(
                &format!(
                    "SELECT database_id, instance, CAST(SUM(rows_read) AS BIGINT), CAST(SUM(rows_written) AS BIGINT),
                            CAST(SUM(bytes_synced) AS BIGINT)
                     FROM usage_instance_buckets WHERE {column} = $1 AND bucket >= $2 AND bucket < $3
                     GROUP BY database_id, instance ORDER BY database_id, instance"
                ),
                &[key.into(), hour_bucket(from).into(), to.into()],
            )?;
            Ok(rows
                .iter()
                .map(|row| {
                    (
                        row.text(0),
                        row.text(1),
                        Usage { rows_read: row.int(2), rows_written: row.int(3), bytes_synced: row.int(4) },
                    )
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

/// A database's size as the usage collector measured it.
#[derive(Debug, Clone)]
pub struct StorageSample {
    pub database_id: String,
    pub org_id: String,
    pub storage_bytes: i64,
}

/// One hour of a database's history: what it consumed in the hour, and the last size
/// measured in it (`None`: not measured that hour).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageHour {
    /// Start of the hour, milliseconds since the epoch.
    pub bucket: i64,
    pub usage: Usage,
    pub storage_bytes: Option<i64>,
}

/// Every hour in `[from, to)` where `column` (`database_id` or `org_id`) is `value`, by
/// database and hour: usage buckets and storage samples merged. Hours with neither are
/// absent.
fn usage_hours(
    c: &mut dyn crate::backend::Conn,
    column: &'static str,
    value: String,
    from: i64,
    to: i64,
) -> Result<Vec<(String, UsageHour)>> {
    use std::collections::BTreeMap;
    let mut hours: BTreeMap<(String, i64), UsageHour> = BTreeMap::new();
    let from = hour_bucket(from);
    let rows = c.query(
        &format!(
            "SELECT database_id, bucket, rows_read, rows_written, bytes_synced FROM usage_buckets
             WHERE {column} = $1 AND bucket >= $2 AND bucket < $3"
        ),
        &[(&value).into(), from.into(), to.into()],
    )?;
    for row in rows {
        let bucket = row.int(1);
        let hour = hours.entry((row.text(0), bucket)).or_insert(UsageHour {
            bucket,
            ..UsageHour::default()
        });
        // A database moved between organizations has one bucket per organization.
        hour.usage.add(Usage {
            rows_read: row.int(2),
            rows_written: row.int(3),
            bytes_synced: row.int(4),
        });
    }
    let rows = c.query(
        &format!(
            "SELECT database_id, bucket, storage_bytes FROM storage_samples
             WHERE {column} = $1 AND bucket >= $2 AND bucket < $3"
        ),
        &[value.into(), from.into(), to.into()],
    )?;
    for row in rows {
        let bucket = row.int(1);
        hours
            .entry((row.text(0), bucket))
            .or_insert(UsageHour {
                bucket,
                ..UsageHour::default()
            })
            .storage_bytes = Some(row.int(2));
    }
    Ok(hours
        .into_iter()
        .map(|((database_id, _), hour)| (database_id, hour))
        .collect())
}

impl Store {
    /// Records databases' sizes measured at `at`, in the hour it falls in: a later
    /// measurement in the same hour replaces an earlier one.
    pub async fn record_storage_samples(&self, at: i64, samples: Vec<StorageSample>) -> Result<()> {
        self.write("record_storage_samples", move |c| {
            let bucket = hour_bucket(at);
            for sample in samples {
                c.execute(
                    "INSERT INTO storage_samples (database_id, org_id, bucket, storage_bytes)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (database_id, bucket) DO UPDATE SET
                         org_id = excluded.org_id, storage_bytes = excluded.storage_bytes",
                    &[
                        sample.database_id.into(),
                        sample.org_id.into(),
                        bucket.into(),
                        sample.storage_bytes.max(0).into(),
                    ],
                )?;
            }
            Ok(())
        })
        .await
    }

    /// Forgets storage samples of hours that started before `before`; answers how many.
    pub async fn prune_storage_samples(&self, before: i64) -> Result<u64> {
        self.write("prune_storage_samples", move |c| {
            c.execute(
                "DELETE FROM storage_samples WHERE bucket < $1",
                &[before.into()],
            )
        })
        .await
    }

    /// Live databases (not deleted, not being created or awaiting their upload) with no
    /// storage sample in the hour `at` falls in: `(id, org_id, node)`.
    pub async fn databases_unsampled_in_hour(
        &self,
        at: i64,
    ) -> Result<Vec<(String, String, String)>> {
        self.read("databases_unsampled_in_hour", move |c| {
            let rows = c.query(
                "SELECT d.id, d.org_id, d.node FROM databases d
                 WHERE d.deleted_at IS NULL AND d.state = 'active'
                   AND NOT EXISTS (SELECT 1 FROM storage_samples s WHERE s.database_id = d.id AND s.bucket = $1)
                 ORDER BY d.id",
                &[hour_bucket(at).into()],
            )?;
            Ok(rows
                .iter()
                .map(|row| (row.text(0), row.text(1), row.text(2)))
                .collect())
        })
        .await
    }

    /// One database's history in `[from, to)`, hour by hour, oldest first, whatever
    /// organization it was in. Hours with no usage and no size measured are absent.
    pub async fn database_usage_hours(
        &self,
        database_id: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<UsageHour>> {
        let database_id = database_id.to_string();
        self.read("database_usage_hours", move |c| {
            Ok(usage_hours(c, "database_id", database_id, from, to)?
                .into_iter()
                .map(|(_, hour)| hour)
                .collect())
        })
        .await
    }

    /// An organization's history summed into `count` intervals of `step` ms from `start`
    /// (an hour's start), in the store: per interval the usage of all its databases, and
    /// the sum of each database's largest size sampled in it (`None`: none sampled).
    /// Answers `count` entries, so the work sent back does not grow with the databases.
    /// Hours that start at `to` or later count in none.
    pub async fn org_usage_intervals(
        &self,
        org_id: &str,
        start: i64,
        to: i64,
        step: i64,
        count: i64,
    ) -> Result<Vec<(Usage, Option<i64>)>> {
        let org_id = org_id.to_string();
        let step = step.max(1);
        let count = count.max(0);
        let end = to.min(start.saturating_add(step.saturating_mul(count)));
        self.read("org_usage_intervals", move |c| {
            let mut out = vec![(Usage::default(), None); usize::try_from(count).unwrap_or(0)];
            let rows = c.query(
                "SELECT (bucket - $2) / $4, CAST(SUM(rows_read) AS BIGINT), CAST(SUM(rows_written) AS BIGINT),
                        CAST(SUM(bytes_synced) AS BIGINT)
                 FROM usage_buckets WHERE org_id = $1 AND bucket >= $2 AND bucket < $3
                 GROUP BY (bucket - $2) / $4",
                &[(&org_id).into(), start.into(), end.into(), step.into()],
            )?;
            for row in rows {
                if let Some(slot) = usize::try_from(row.int(0)).ok().and_then(|i| out.get_mut(i)) {
                    slot.0.add(Usage {
                        rows_read: row.int(1),
                        rows_written: row.int(2),
                        bytes_synced: row.int(3),
                    });
                }
            }
            let rows = c.query(
                "SELECT slot, CAST(SUM(largest) AS BIGINT) FROM (
                     SELECT database_id, (bucket - $2) / $4 AS slot, MAX(storage_bytes) AS largest
                     FROM storage_samples WHERE org_id = $1 AND bucket >= $2 AND bucket < $3
                     GROUP BY database_id, (bucket - $2) / $4
                 ) per_database GROUP BY slot",
                &[org_id.into(), start.into(), end.into(), step.into()],
            )?;
            for row in rows {
                if let Some(slot) = usize::try_from(row.int(0)).ok().and_then(|i| out.get_mut(i)) {
                    slot.1 = Some(row.int(1));
                }
            }
            Ok(out)
        })
        .await
    }
}
