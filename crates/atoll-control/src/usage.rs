//! Usage collection: the control plane pulls the meters of every node into the store's
//! hourly buckets, in the background and before answering a usage question.

use crate::error::ApiResult;
use crate::server::AppState;
use atoll_meta::{Usage, UsageEntry};
use std::time::Duration;

/// Moves every node's pending usage into the store, each batch exactly once.
pub async fn collect(state: &AppState) -> ApiResult<()> {
    for (node, batch) in state.data_plane.collect_usage().await? {
        if batch.databases.is_empty() {
            continue;
        }
        let mut entries: Vec<UsageEntry> = Vec::with_capacity(batch.databases.len());
        for (database_id, usage) in batch.databases {
            // Usage belongs to the organization the database is in when it is collected;
            // and it is activity, which keeps a free-plan group from being archived.
            let record = state.store.database_by_id(&database_id).await?;
            if let Some(db) = &record {
                state
                    .store
                    .touch_group(&db.group_id, atoll_meta::now_millis())
                    .await?;
            }
            let org_id = record.map(|d| d.org_id).unwrap_or_default();
            entries.push(UsageEntry {
                database_id,
                org_id,
                usage: Usage {
                    rows_read: saturating_i64(usage.rows_read),
                    rows_written: saturating_i64(usage.rows_written),
                    bytes_synced: saturating_i64(usage.bytes_synced),
                },
            });
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
    Ok(())
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Collects every `interval` until the process ends.
pub fn spawn_collector(state: AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if let Err(e) = collect(&state).await {
                tracing::warn!(error = %e, "usage collection failed; retrying at the next tick");
            }
        }
    })
}
