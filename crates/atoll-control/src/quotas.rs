//! Plan quotas: what an organization may create (checked before creating) and what it may
//! consume (checked after each usage collection, enforced on the data plane).

use crate::data_plane::push_org_databases;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_meta::Organization;
use time::OffsetDateTime;

fn refuse(org: &Organization, what: &str, limit: u64) -> ApiError {
    ApiError::QuotaExceeded(format!(
        "the {} plan of organization {} allows {limit} {what}: delete some, or move to a bigger plan",
        org.plan_id, org.slug
    ))
}

/// How many live databases the organization's plan allows (`None`: no limit).
/// Databases created for an upload count, uploaded or not.
pub fn database_limit(state: &AppState, org: &Organization) -> Option<u64> {
    state.config.quotas(&org.plan_id).databases
}

/// The refusal of a database past the plan's limit.
pub fn database_limit_reached(org: &Organization, limit: u64) -> ApiError {
    refuse(org, "databases", limit)
}

/// Before a database joins the organization other than by a create (a transfer, a
/// restore); a create checks in the same transaction as its insert
/// (`Store::insert_database_within`).
pub async fn check_database(state: &AppState, org: &Organization) -> ApiResult<()> {
    if let Some(limit) = database_limit(state, org) {
        if state.store.live_database_count(&org.id).await? >= limit {
            return Err(database_limit_reached(org, limit));
        }
    }
    Ok(())
}

/// Before creating (or receiving) a group.
pub async fn check_group(state: &AppState, org: &Organization) -> ApiResult<()> {
    if let Some(limit) = state.config.quotas(&org.plan_id).groups {
        if state.store.list_groups(&org.id).await?.len() as u64 >= limit {
            return Err(refuse(org, "groups", limit));
        }
    }
    Ok(())
}

/// Before a group of the organization starts using `location`.
pub async fn check_location(state: &AppState, org: &Organization, location: &str) -> ApiResult<()> {
    if let Some(limit) = state.config.quotas(&org.plan_id).locations {
        let mut used: Vec<String> = state
            .store
            .list_groups(&org.id)
            .await?
            .into_iter()
            .flat_map(|g| g.locations)
            .collect();
        used.sort();
        used.dedup();
        if !used.iter().any(|l| l == location) && used.len() as u64 >= limit {
            return Err(refuse(org, "locations", limit));
        }
    }
    Ok(())
}

/// After usage was collected: an organization past its monthly rows quota (without
/// overages) is blocked from reading and writing; past its storage quota, from writing.
/// The organization's `blocked_reads`/`blocked_writes` record it, and its databases' nodes
/// learn it when it changes.
pub async fn enforce_consumption(state: &AppState, org_id: &str) -> ApiResult<()> {
    let Some(org) = state.store.org_by_id(org_id).await? else {
        return Ok(());
    };
    let quotas = state.config.quotas(&org.plan_id);
    let (from, to) = billing_cycle(atoll_meta::now_millis());
    let consumed = state.store.org_usage(&org.id, from, to).await?;
    let (mut read, mut written) = (0u64, 0u64);
    for (_, usage) in &consumed {
        read += u64::try_from(usage.rows_read).unwrap_or(0);
        written += u64::try_from(usage.rows_written).unwrap_or(0);
    }
    let over_rows = !org.overages
        && (quotas.rows_read.is_some_and(|q| read > q)
            || quotas.rows_written.is_some_and(|q| written > q));
    let over_storage = match quotas.storage_bytes {
        Some(limit) => {
            let mut storage = 0;
            for db in state.store.databases_in_org(&org.id).await? {
                if let Ok(stats) = state.data_plane.stats(&db.node, &db.id).await {
                    storage += stats.storage_bytes;
                }
            }
            storage > limit
        }
        None => false,
    };
    let (blocked_reads, blocked_writes) = (over_rows, over_rows || over_storage);
    if (blocked_reads, blocked_writes) != (org.blocked_reads, org.blocked_writes) {
        let org = state
            .store
            .set_org_blocks(&org.id, blocked_reads, blocked_writes)
            .await?;
        push_org_databases(&state.data_plane, &state.store, &org).await?;
    }
    Ok(())
}

/// The calendar month around `now`, in milliseconds: `[first day, first day of next)`.
pub fn billing_cycle(now: i64) -> (i64, i64) {
    let now = OffsetDateTime::from_unix_timestamp(now / 1000).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let start = now
        .replace_day(1)
        .map(|d| d.replace_time(time::Time::MIDNIGHT))
        .unwrap_or(now);
    let next = if start.month() == time::Month::December {
        start
            .replace_year(start.year() + 1)
            .and_then(|d| d.replace_month(time::Month::January))
    } else {
        start.replace_month(start.month().next())
    }
    .unwrap_or(start);
    (
        (start.unix_timestamp_nanos() / 1_000_000) as i64,
        (next.unix_timestamp_nanos() / 1_000_000) as i64,
    )
}

#[cfg(test)]
mod tests {
    use super::billing_cycle;

    #[test]
    fn billing_cycles_are_calendar_months() {
        // 2026-11-22T10:00:00Z
        let (from, to) = billing_cycle(1_795_341_600_000);
        assert_eq!(crate::wire::rfc3339(from), "2026-11-01T00:00:00Z");
        assert_eq!(crate::wire::rfc3339(to), "2026-12-01T00:00:00Z");
        // 2026-12-31T23:59:59Z
        let (from, to) = billing_cycle(1_798_761_599_000);
        assert_eq!(crate::wire::rfc3339(from), "2026-12-01T00:00:00Z");
        assert_eq!(crate::wire::rfc3339(to), "2027-01-01T00:00:00Z");
    }
}
