//! Usage collection: the control plane pulls the meters of every node into the store's
//! hourly buckets, in the background and before answering a usage question; and samples
//! databases' sizes, so storage has a history too.

use crate::error::ApiResult;
use crate::periodic::{self, Schedule};
use crate::state::AppState;
use atoll_meta::{StorageSample, Usage, UsageEntry};
use atoll_types::node as wire;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// The hour this process last pruned storage samples in.
static LAST_PRUNED_HOUR: AtomicI64 = AtomicI64::new(0);

/// How long hourly storage samples are kept (docs/OPERATIONS.md, "Usage"): 90 days of
/// one row per database and hour.
pub const STORAGE_HISTORY_RETENTION_MS: i64 = 90 * 24 * 3_600_000;

/// Moves every node's pending usage into the store, each batch exactly once, then
/// samples the size of the databases that were written to. (The background collector
/// also measures, once an hour, the databases nobody wrote to: see [`spawn_collector`].)
pub async fn collect(state: &AppState) -> ApiResult<()> {
    let active = collect_batches(state).await?;
    sample_storage(state, active).await
}

/// [`collect`], and a size for every live database not measured yet in this hour: the
/// background collector's pass, so a usage question never waits for that sweep.
pub async fn collect_and_sweep(state: &AppState) -> ApiResult<()> {
    let mut due = collect_batches(state).await?;
    due.extend(
        state
            .store
            .databases_unsampled_in_hour(atoll_meta::now_millis())
            .await?,
    );
    sample_storage(state, due).await
}

/// The batches part of [`collect`]: answers the databases written to, `(id, org, node)`.
async fn collect_batches(state: &AppState) -> ApiResult<Vec<(String, String, String)>> {
    let mut active: Vec<(String, String, String)> = Vec::new();
    let records = state.store.nodes().await?;
    for (node, batch) in state.data_plane.collect_usage().await? {
        if batch.databases.is_empty() {
            continue;
        }
        // Usage per instance: an instance is its location, the metering node's.
        let node_location = records
            .iter()
            .find(|r| r.name == node)
            .map(|r| r.location.clone());
        let mut entries: Vec<UsageEntry> = Vec::with_capacity(batch.databases.len());
        // Each group once per batch: a batch holds every database a tenant's clients used
        // since the last collection (10,000 of one group after a burst), and a write per
        // database was most of the CPU a node's process spent at rest (issue 31).
        let mut active_groups: BTreeSet<String> = BTreeSet::new();
        let databases = state
            .store
            .databases_by_ids(batch.databases.iter().map(|(id, _)| id.clone()).collect())
            .await?;
        for (database_id, usage) in batch.databases {
            // Usage belongs to the organization the database is in when it is collected;
            // and it is activity, which keeps a free-plan group from being archived.
            let record = databases.get(&database_id);
            if let Some(db) = record {
                active_groups.insert(db.group_id.clone());
                if usage.rows_written > 0 && db.deleted_at.is_none() {
                    active.push((db.id.clone(), db.org_id.clone(), db.node.clone()));
                }
            }
            let instance = node_location
                .clone()
                .or_else(|| record.map(|d| d.location.clone()))
                .unwrap_or_default();
            let org_id = record.map(|d| d.org_id.clone()).unwrap_or_default();
            entries.push(UsageEntry {
                database_id,
                org_id,
                instance,
                usage: Usage {
                    rows_read: saturating_i64(usage.rows_read),
                    rows_written: saturating_i64(usage.rows_written),
                    bytes_synced: saturating_i64(usage.bytes_synced),
                },
            });
        }
        let now = atoll_meta::now_millis();
        for group_id in &active_groups {
            state.store.touch_group(group_id, now).await?;
        }
        let mut orgs: Vec<String> = entries
            .iter()
            .map(|e| e.org_id.clone())
            .filter(|o| !o.is_empty())
            .collect();
        orgs.sort();
        orgs.dedup();
        state
            .store
            .store_usage_batch(&batch.id, atoll_meta::now_millis(), entries)
            .await?;
        state.data_plane.acknowledge_usage(&node, &batch.id).await?;
        for org in orgs {
            crate::quotas::enforce_consumption(state, &org).await?;
        }
    }
    Ok(active)
}

/// Measures on their nodes the databases written to since the last collection and those
/// with no size recorded in this hour, records the sizes, and forgets samples older than
/// the retention. A node that cannot answer is asked again at the next collection.
///
/// Each node is asked for many databases at once ([`wire::SIZES_PER_REQUEST`]): the
/// hourly sample covers every database, and one request per database was 100,000 requests
/// an hour on a full node, most of a node's CPU at rest after a mass creation (issue 31).
async fn sample_storage(state: &AppState, mut due: Vec<(String, String, String)>) -> ApiResult<()> {
    let now = atoll_meta::now_millis();
    due.extend(state.store.databases_unsampled_in_hour(now).await?);
    due.sort();
    due.dedup_by(|a, b| a.0 == b.0);
    let mut by_node: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (database_id, org_id, node) in due {
        by_node.entry(node).or_default().push((database_id, org_id));
    }
    let mut samples = Vec::new();
    for (node, databases) in by_node {
        for chunk in databases.chunks(wire::SIZES_PER_REQUEST) {
            let ids = chunk.iter().map(|(id, _)| id.clone()).collect();
            match state.data_plane.sizes(&node, ids).await {
                Ok(sizes) => samples.extend(chunk.iter().filter_map(|(database_id, org_id)| {
                    let bytes = *sizes.storage_bytes.get(database_id)?;
                    Some(StorageSample {
                        database_id: database_id.clone(),
                        org_id: org_id.clone(),
                        storage_bytes: saturating_i64(bytes),
                    })
                })),
                Err(e) => {
                    tracing::debug!(error = %e, %node, "could not measure the sizes of a node's databases; trying again at the next collection");
                }
            }
        }
    }
    if !samples.is_empty() {
        state.store.record_storage_samples(now, samples).await?;
    }
    // Once an hour is enough: samples expire by the hour.
    let hour = atoll_meta::hour_bucket(now);
    if LAST_PRUNED_HOUR.swap(hour, Ordering::Relaxed) != hour {
        state
            .store
            .prune_storage_samples(hour - STORAGE_HISTORY_RETENTION_MS)
            .await?;
    }
    Ok(())
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Collects every `interval` until the process ends.
pub fn spawn_collector(state: AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    periodic::spawn(
        Schedule::every(interval),
        "usage collection failed; retrying at the next tick",
        move || {
            let state = state.clone();
            async move { collect_and_sweep(&state).await }
        },
    )
}
