//! Usage meters of a node: rows read and written by every statement, bytes served by the
//! export routes, aggregated in memory per database until the control plane collects them.
//!
//! Collection is exactly-once: [`Meters::collect`] seals what accumulated into a batch with
//! an id and hands the *same* batch out again until it is acknowledged. The control plane
//! stores a batch and its id in one transaction (a batch id it has seen is skipped), then
//! acknowledges it; so a crash on either side never counts a batch twice, and stored
//! counters never go backwards. What a node had not handed out when it crashed is lost:
//! usage is under-counted rather than invented.

use atoll_types::node::{DatabaseUsage, QueryStats, UsageBatch};
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

pub struct Meters {
    /// Distinguishes batch ids across restarts of the node.
    epoch: String,
    next: AtomicU64,
    pending: Mutex<HashMap<String, DatabaseUsage>>,
    sealed: Mutex<Option<UsageBatch>>,
    /// Per database, the heaviest statements by text (in memory: reset by a restart).
    /// A list rather than a map by text: most databases run a handful of statements, and
    /// a map of one entry (its table, and the text stored as key and in the figures) was
    /// ~490 bytes per database, ~47 MiB at rest over 100,000 (PERFORMANCE.md, "What a
    /// node holds at rest").
    queries: Mutex<HashMap<String, Vec<StatementStats>>>,
}

/// One statement text's figures, found by the hash of its text first (a lookup compares
/// integers, and a text only when its hash matches).
struct StatementStats {
    hash: u64,
    stats: QueryStats,
}

/// The hash of a statement text: fixed keys, as it is never exposed and a collision costs
/// one comparison of texts.
fn text_hash(sql: &str) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(sql)
}

/// Distinct statement texts remembered per database; the lightest goes first.
const MAX_QUERIES_PER_DATABASE: usize = 100;

impl Default for Meters {
    fn default() -> Self {
        Self::new()
    }
}

impl Meters {
    pub fn new() -> Meters {
        Meters {
            epoch: uuid::Uuid::new_v4().simple().to_string(),
            next: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            sealed: Mutex::new(None),
            queries: Mutex::new(HashMap::new()),
        }
    }

    /// Adds a statement's rows to the statistics of its text.
    pub fn record_query(&self, db_id: &str, sql: &str, rows_read: u64, rows_written: u64) {
        let hash = text_hash(sql);
        let mut queries = self.queries.lock().unwrap_or_else(|p| p.into_inner());
        // Runs for every statement: the usual case (a known database and text) allocates
        // nothing.
        let statements = match queries.get_mut(db_id) {
            Some(statements) => statements,
            // Room for one: most databases never run a second text.
            None => queries
                .entry(db_id.to_string())
                .or_insert_with(|| Vec::with_capacity(1)),
        };
        let known = statements
            .iter()
            .position(|s| s.hash == hash && s.stats.query == sql);
        let index = match known {
            Some(index) => index,
            None => {
                if statements.len() >= MAX_QUERIES_PER_DATABASE {
                    if let Some(lightest) = statements
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, s)| s.stats.rows_read + s.stats.rows_written)
                        .map(|(index, _)| index)
                    {
                        statements.swap_remove(lightest);
                    }
                }
                statements.push(StatementStats {
                    hash,
                    stats: QueryStats {
                        query: sql.to_string(),
                        ..Default::default()
                    },
                });
                statements.len() - 1
            }
        };
        let stats = &mut statements[index].stats;
        stats.rows_read += rows_read;
        stats.rows_written += rows_written;
        stats.count += 1;
    }

    /// The `limit` heaviest statement texts of a database (rows read plus written).
    pub fn top_queries(&self, db_id: &str, limit: usize) -> Vec<QueryStats> {
        let queries = self.queries.lock().unwrap_or_else(|p| p.into_inner());
        let mut top: Vec<QueryStats> = queries
            .get(db_id)
            .map(|statements| statements.iter().map(|s| s.stats.clone()).collect())
            .unwrap_or_default();
        top.sort_by(|a, b| {
            (b.rows_read + b.rows_written)
                .cmp(&(a.rows_read + a.rows_written))
                .then(a.query.cmp(&b.query))
        });
        top.truncate(limit);
        top
    }

    /// Forgets a deleted database's statistics.
    pub fn forget(&self, db_id: &str) {
        self.queries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(db_id);
    }

    /// One executed statement. As sqld bills, a statement that read and wrote nothing
    /// still counts one row read.
    pub fn record_statement(&self, db_id: &str, rows_read: u64, rows_written: u64) {
        // Node-wide figures for Prometheus (no database label: bounded cardinality).
        metrics::counter!("atoll_sql_statements_total").increment(1);
        metrics::counter!("atoll_sql_rows_read_total").increment(rows_read);
        metrics::counter!("atoll_sql_rows_written_total").increment(rows_written);
        let rows_read = if rows_read == 0 && rows_written == 0 {
            1
        } else {
            rows_read
        };
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        // Runs for every statement: only a database's first statement allocates its key.
        if let Some(usage) = pending.get_mut(db_id) {
            usage.rows_read += rows_read;
            usage.rows_written += rows_written;
            return;
        }
        let usage = pending.entry(db_id.to_string()).or_default();
        usage.rows_read += rows_read;
        usage.rows_written += rows_written;
    }

    /// Bytes of the database served by export routes.
    pub fn record_synced(&self, db_id: &str, bytes: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.entry(db_id.to_string()).or_default().bytes_synced += bytes;
    }

    /// The batch to store: the unacknowledged one again, or what accumulated since.
    pub fn collect(&self) -> UsageBatch {
        let mut sealed = self.sealed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(batch) = sealed.as_ref() {
            return batch.clone();
        }
        let drained: HashMap<String, DatabaseUsage> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        let mut databases: Vec<_> = drained.into_iter().collect();
        databases.sort_by(|a, b| a.0.cmp(&b.0));
        let batch = UsageBatch {
            id: format!(
                "{}-{}",
                self.epoch,
                self.next.fetch_add(1, Ordering::Relaxed)
            ),
            databases,
        };
        if !batch.databases.is_empty() {
            *sealed = Some(batch.clone());
        }
        batch
    }

    /// The control plane stored the batch: forget it.
    pub fn acknowledge(&self, batch_id: &str) {
        let mut sealed = self.sealed.lock().unwrap_or_else(|p| p.into_inner());
        if sealed.as_ref().is_some_and(|b| b.id == batch_id) {
            *sealed = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_counted_by_text_and_the_lightest_gives_way() {
        let meters = Meters::new();
        meters.record_query("a", "SELECT 1", 1, 0);
        meters.record_query("a", "SELECT 1", 2, 0);
        meters.record_query("a", "INSERT", 0, 5);
        meters.record_query("b", "SELECT 1", 7, 0);
        let top = meters.top_queries("a", 10);
        let figures: Vec<_> = top
            .iter()
            .map(|q| (q.query.as_str(), q.rows_read, q.rows_written, q.count))
            .collect();
        assert_eq!(figures, [("INSERT", 0, 5, 1), ("SELECT 1", 3, 0, 2)]);
        assert_eq!(meters.top_queries("a", 1).len(), 1);
        assert_eq!(meters.top_queries("b", 10)[0].rows_read, 7);
        // Full: a new text takes the place of the lightest, never of a heavier one.
        for i in 2..MAX_QUERIES_PER_DATABASE {
            meters.record_query("a", &format!("SELECT {i}"), 10 + i as u64, 0);
        }
        meters.record_query("a", "SELECT 'new'", 1_000, 0);
        let texts: Vec<String> = meters
            .top_queries("a", usize::MAX)
            .into_iter()
            .map(|q| q.query)
            .collect();
        assert_eq!(texts.len(), MAX_QUERIES_PER_DATABASE);
        assert_eq!(texts[0], "SELECT 'new'");
        assert!(
            !texts.contains(&"SELECT 1".to_string()),
            "the lightest stays: {texts:?}"
        );
        assert!(texts.contains(&"INSERT".to_string()));
        meters.forget("a");
        assert!(meters.top_queries("a", 10).is_empty());
    }

    #[test]
    fn batches_are_handed_out_until_acknowledged() {
        let meters = Meters::new();
        assert!(meters.collect().databases.is_empty());
        meters.record_statement("a", 3, 1);
        meters.record_statement("a", 0, 0);
        meters.record_statement("b", 0, 2);
        meters.record_synced("b", 4096);
        let first = meters.collect();
        assert_eq!(first.databases.len(), 2);
        assert_eq!(
            first.databases[0].1,
            DatabaseUsage {
                rows_read: 4,
                rows_written: 1,
                bytes_synced: 0
            }
        );
        assert_eq!(
            first.databases[1].1,
            DatabaseUsage {
                rows_read: 0,
                rows_written: 2,
                bytes_synced: 4096
            }
        );
        // Work done meanwhile waits for the next batch.
        meters.record_statement("a", 5, 0);
        assert_eq!(meters.collect(), first);
        meters.acknowledge("someone-else");
        assert_eq!(meters.collect(), first);
        meters.acknowledge(&first.id);
        let second = meters.collect();
        assert_ne!(second.id, first.id);
        assert_eq!(
            second.databases,
            vec![(
                "a".to_string(),
                DatabaseUsage {
                    rows_read: 5,
                    rows_written: 0,
                    bytes_synced: 0
                }
            )]
        );
    }
}
