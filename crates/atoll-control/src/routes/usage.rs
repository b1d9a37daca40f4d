//! Usage: `/v1/organizations/{org}/databases/{db}/usage` (and `/v1/databases/{db}/usage`),
//! `/v1/organizations/{org}/usage` (and the personal `/v1/usage`).
//!
//! Rows read and written and bytes synced come from the nodes' meters, collected into
//! hourly buckets (see `crate::usage`); a usage question collects first, so it includes
//! everything run until then. `storage_bytes` is the database's size now.
//!
//! Usage over time (an Atoll extension): with `granularity=hour|day` both routes add a
//! `history`, interval by interval over `from`/`to`, with the storage the collector
//! sampled each hour (docs/API.md, "Usage over time").

use super::Route;
use crate::auth::{Access, Action};
use crate::body::Query;
use crate::error::{ApiError, ApiResult};
use crate::quotas::billing_cycle;
use crate::state::AppState;
use crate::wire;
use atoll_meta::{Database, InstanceUsageOf, Usage, UsageHour};
use atoll_types::usage::{
    DatabaseStats, DatabaseUsageObject, DatabaseUsageOutput, DatabaseUsageResponse, InstanceUsage,
    OrganizationUsage, OrganizationUsageObject, OrganizationUsageResponse, TopQuery, UsageInterval,
};
use atoll_types::ErrorCode;
use axum::extract::State;
use axum::http::Method;
use axum::Json;
use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub fn routes() -> Vec<Route> {
    let mut routes = Vec::new();
    for prefix in ["/v1/organizations/{org}", "/v1"] {
        routes.push(
            Route::new(
                Method::GET,
                format!("{prefix}/databases/{{db}}/usage"),
                Action::ReadDatabase,
                "A database's usage in a period (default: this month)",
                database_usage,
            )
            .response::<DatabaseUsageResponse>()
            .query(&["from", "to", "granularity"]),
        );
        routes.push(
            Route::new(
                Method::GET,
                format!("{prefix}/databases/{{db}}/stats"),
                Action::ReadDatabase,
                "The database's heaviest statements",
                stats,
            )
            .response::<DatabaseStats>(),
        );
        routes.push(
            Route::new(
                Method::GET,
                format!("{prefix}/databases/{{db}}/usage/queries"),
                Action::ReadDatabase,
                "The database's heaviest statements (Turso CLI form: a bare array)",
                queries,
            )
            .response_list::<TopQuery>()
            .query(&["from"]),
        );
        routes.push(
            Route::new(
                Method::GET,
                format!("{prefix}/usage"),
                Action::ReadOrganizationUsage,
                "The organization's usage this billing cycle, by database, with its plan's quotas",
                organization_usage,
            )
            .response::<OrganizationUsageResponse>()
            .query(&["from", "to", "granularity"]),
        );
    }
    routes
}

/// `from`/`to` (RFC 3339; default: the billing cycle) and the extension's `granularity`.
/// Read as text so a malformed value gets this API's JSON 400.
#[derive(Deserialize)]
struct Period {
    from: Option<String>,
    to: Option<String>,
    granularity: Option<String>,
}

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Most intervals one history answers: a month of hours, a year of days.
const MAX_HOURLY_INTERVALS: i64 = 31 * 24;
const MAX_DAILY_INTERVALS: i64 = 366;

/// A period's bounds in ms, and the length of its history's intervals if one is asked.
fn parse_period(period: &Period) -> ApiResult<(i64, i64, Option<i64>)> {
    let (cycle_from, cycle_to) = billing_cycle(atoll_meta::now_millis());
    let from = match period.from.as_deref() {
        Some(text) => parse_instant("from", text)?,
        None => cycle_from,
    };
    let to = match period.to.as_deref() {
        Some(text) => parse_instant("to", text)?,
        None => cycle_to,
    };
    if from > to {
        return Err(ApiError::invalid(
            "invalid from parameter: it is after `to`",
        ));
    }
    let step = match period.granularity.as_deref() {
        None => None,
        Some("hour") => Some(HOUR_MS),
        Some("day") => Some(DAY_MS),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "invalid granularity parameter: {other:?} is neither \"hour\" nor \"day\""
            )))
        }
    };
    if let Some(step) = step {
        let (count, max) = (
            Intervals::new(from, to, step).count,
            if step == HOUR_MS {
                MAX_HOURLY_INTERVALS
            } else {
                MAX_DAILY_INTERVALS
            },
        );
        if count > max {
            return Err(ApiError::invalid(format!(
                "invalid granularity parameter: from/to span {count} intervals, more than the {max} one history answers: narrow the period{}",
                if step == HOUR_MS { " or ask for granularity=day" } else { "" }
            )));
        }
    }
    Ok((from, to, step))
}

/// The intervals of a history: `count` of `step` ms from `from`'s hour, the last one
/// ending at `to`.
#[derive(Clone, Copy)]
struct Intervals {
    start: i64,
    to: i64,
    step: i64,
    count: i64,
}

impl Intervals {
    fn new(from: i64, to: i64, step: i64) -> Intervals {
        let start = atoll_meta::hour_bucket(from);
        let count = if to <= start {
            0
        } else {
            (to - start + step - 1) / step
        };
        Intervals {
            start,
            to,
            step,
            count,
        }
    }

    fn index(&self, bucket: i64) -> Option<usize> {
        let i = (bucket - self.start).div_euclid(self.step);
        (bucket >= self.start && bucket < self.to && i < self.count).then_some(i as usize)
    }

    /// One database's hours summed into the intervals: usage added up, storage the
    /// largest size measured.
    fn fold<'a>(&self, hours: impl Iterator<Item = &'a UsageHour>) -> Vec<(Usage, Option<i64>)> {
        let mut out = vec![(Usage::default(), None); self.count as usize];
        for hour in hours {
            if let Some(slot) = self.index(hour.bucket).and_then(|i| out.get_mut(i)) {
                slot.0.add(hour.usage);
                slot.1 = slot.1.max(hour.storage_bytes);
            }
        }
        out
    }

    fn wire(&self, sums: Vec<(Usage, Option<i64>)>) -> Vec<UsageInterval> {
        sums.into_iter()
            .enumerate()
            .map(|(i, (usage, storage))| {
                let start = self.start + i as i64 * self.step;
                UsageInterval {
                    start: wire::rfc3339(start),
                    end: wire::rfc3339((start + self.step).min(self.to)),
                    rows_read: u64::try_from(usage.rows_read).unwrap_or(0),
                    rows_written: u64::try_from(usage.rows_written).unwrap_or(0),
                    bytes_synced: u64::try_from(usage.bytes_synced).unwrap_or(0),
                    storage_bytes: storage.and_then(|b| u64::try_from(b).ok()),
                }
            })
            .collect()
    }
}

fn unix_millis(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

fn parse_instant(name: &str, text: &str) -> ApiResult<i64> {
    OffsetDateTime::parse(text, &Rfc3339)
        .map(unix_millis)
        .map_err(|e| {
            ApiError::Invalid(
                ErrorCode::InvalidRequest,
                format!("invalid {name} parameter: {text:?} is not an RFC 3339 date-time ({e})"),
            )
        })
}

fn usage_object(usage: Usage, storage_bytes: u64) -> DatabaseUsageObject {
    DatabaseUsageObject {
        rows_read: u64::try_from(usage.rows_read).unwrap_or(0),
        rows_written: u64::try_from(usage.rows_written).unwrap_or(0),
        storage_bytes,
        bytes_synced: u64::try_from(usage.bytes_synced).unwrap_or(0),
    }
}

async fn storage_of(state: &AppState, db: &Database) -> u64 {
    match state.data_plane.stats(&db.node, &db.id).await {
        Ok(stats) => stats.storage_bytes,
        Err(e) => {
            tracing::warn!(error = %e, database = %db.id, "could not read a database's size from its node");
            0
        }
    }
}

fn output(
    db: &Database,
    usage: DatabaseUsageObject,
    instances: Vec<InstanceUsage>,
) -> DatabaseUsageOutput {
    DatabaseUsageOutput {
        uuid: db.id.clone(),
        instances,
        total: usage,
        usage,
        history: None,
    }
}

/// What each of `db`'s instances served (`by_location`: the period's usage by the
/// location that metered it), with the uuids of the instances routes. Usage is metered
/// where it is served; what was served in a location that has no instance now (a
/// removed location, usage from before instances were metered) counts for the primary,
/// so the instances add up to the total. Storage: each instance holds a whole copy.
fn instance_usages(
    db: &Database,
    total: DatabaseUsageObject,
    by_location: &[(&str, Usage)],
    group_locations: &[String],
    records: &[atoll_meta::NodeRecord],
) -> Vec<InstanceUsage> {
    let mut primary = total;
    let mut replicas = Vec::new();
    for place in crate::data_plane::replicas::instances_of(db, group_locations, records)
        .into_iter()
        .filter(|p| !p.primary)
    {
        let served = by_location
            .iter()
            .filter(|(location, _)| *location == place.location)
            .fold(Usage::default(), |mut sum, (_, u)| {
                sum.add(*u);
                sum
            });
        let usage = usage_object(served, total.storage_bytes);
        primary.rows_read = primary.rows_read.saturating_sub(usage.rows_read);
        primary.rows_written = primary.rows_written.saturating_sub(usage.rows_written);
        primary.bytes_synced = primary.bytes_synced.saturating_sub(usage.bytes_synced);
        replicas.push(InstanceUsage {
            uuid: crate::data_plane::replicas::replica_uuid(&db.id, &place.location),
            usage,
        });
    }
    let mut out = vec![InstanceUsage {
        uuid: db.id.clone(),
        usage: primary,
    }];
    out.extend(replicas);
    out
}

async fn database_usage(
    State(state): State<AppState>,
    access: Access,
    Query(period): Query<Period>,
) -> ApiResult<Json<DatabaseUsageResponse>> {
    let (from, to, step) = parse_period(&period)?;
    crate::usage::collect(&state).await?;
    let db = access.database();
    let usage = state.store.database_usage(&db.id, from, to).await?;
    let storage = storage_of(&state, db).await;
    let total = usage_object(usage, storage);
    let by_instance = state
        .store
        .instance_usage(InstanceUsageOf::Database(db.id.clone()), from, to)
        .await?;
    let by_location: Vec<(&str, Usage)> = by_instance
        .iter()
        .map(|(_, location, usage)| (location.as_str(), *usage))
        .collect();
    let group_locations = state
        .store
        .group_by_id(&db.group_id)
        .await?
        .map(|g| g.locations)
        .unwrap_or_default();
    let records = state.store.nodes().await?;
    let instances = instance_usages(db, total, &by_location, &group_locations, &records);
    let mut database = output(db, total, instances);
    if let Some(step) = step {
        let intervals = Intervals::new(from, to, step);
        let hours = state.store.database_usage_hours(&db.id, from, to).await?;
        database.history = Some(intervals.wire(intervals.fold(hours.iter())));
    }
    Ok(Json(DatabaseUsageResponse { database }))
}

async fn organization_usage(
    State(state): State<AppState>,
    access: Access,
    Query(period): Query<Period>,
) -> ApiResult<Json<OrganizationUsageResponse>> {
    let org = access.org();
    // `from`/`to` bound the history only: the totals are the billing cycle's, as Turso's.
    let (history_from, history_to, step) = parse_period(&period)?;
    let (from, to) = billing_cycle(atoll_meta::now_millis());
    crate::usage::collect(&state).await?;
    let consumed = state.store.org_usage(&org.id, from, to).await?;
    let databases: Vec<Database> = state
        .store
        .databases_in_org(&org.id)
        .await?
        .into_iter()
        .filter(|d| d.deleted_at.is_none())
        .collect();
    let groups = state.store.list_groups(&org.id).await?;
    let mut total = OrganizationUsageObject {
        databases: databases.len() as u64,
        groups: groups.len() as u64,
        locations: {
            let mut locations: Vec<&String> =
                groups.iter().flat_map(|g| g.locations.iter()).collect();
            locations.sort();
            locations.dedup();
            locations.len() as u64
        },
        ..Default::default()
    };
    let by_instance = state
        .store
        .instance_usage(InstanceUsageOf::Organization(org.id.clone()), from, to)
        .await?;
    let records = state.store.nodes().await?;
    let mut outputs = Vec::new();
    for db in &databases {
        let usage = consumed
            .iter()
            .find(|(id, _)| *id == db.id)
            .map(|(_, u)| *u)
            .unwrap_or_default();
        let object = usage_object(usage, storage_of(&state, db).await);
        total.storage_bytes += object.storage_bytes;
        let by_location: Vec<(&str, Usage)> = by_instance
            .iter()
            .filter(|(id, _, _)| *id == db.id)
            .map(|(_, location, usage)| (location.as_str(), *usage))
            .collect();
        let group_locations = groups
            .iter()
            .find(|g| g.id == db.group_id)
            .map(|g| g.locations.clone())
            .unwrap_or_default();
        let instances = instance_usages(db, object, &by_location, &group_locations, &records);
        outputs.push(output(db, object, instances));
    }
    // Rows of databases deleted since count too: the organization consumed them.
    for (_, usage) in &consumed {
        total.rows_read += u64::try_from(usage.rows_read).unwrap_or(0);
        total.rows_written += u64::try_from(usage.rows_written).unwrap_or(0);
        total.bytes_synced += u64::try_from(usage.bytes_synced).unwrap_or(0);
    }
    Ok(Json(OrganizationUsageResponse {
        organization: OrganizationUsage {
            uuid: org.id.clone(),
            usage: total,
            quotas: state
                .config
                .plans
                .get(&org.plan_id)
                .copied()
                .unwrap_or_default(),
            plan: org.plan_id.clone(),
            from: wire::rfc3339(from),
            to: wire::rfc3339(to),
            databases: outputs,
            history: match step {
                Some(step) => Some(
                    organization_history(&state, &org.id, history_from, history_to, step).await?,
                ),
                None => None,
            },
        },
    }))
}

/// The organization's intervals: usage summed over its databases (deleted ones too), and
/// storage the sum of each database's largest size measured in the interval.
async fn organization_history(
    state: &AppState,
    org_id: &str,
    from: i64,
    to: i64,
    step: i64,
) -> ApiResult<Vec<UsageInterval>> {
    let intervals = Intervals::new(from, to, step);
    // Summed in the store: the answer does not grow with the number of databases.
    let sums = state
        .store
        .org_usage_intervals(org_id, intervals.start, to, step, intervals.count)
        .await?;
    Ok(intervals.wire(sums))
}

/// The heaviest statements since the node started (statistics are not persisted), by
/// rows read plus rows written, summed over every run of the same text.
async fn top_queries(state: &AppState, db: &Database) -> ApiResult<Vec<TopQuery>> {
    let queries = state.data_plane.top_queries(&db.node, &db.id).await?;
    Ok(queries
        .into_iter()
        .map(|q| TopQuery {
            query: q.query,
            rows_read: q.rows_read,
            rows_written: q.rows_written,
        })
        .collect())
}

async fn stats(State(state): State<AppState>, access: Access) -> ApiResult<Json<DatabaseStats>> {
    let db = access.database();
    let node_stats = state.data_plane.stats(&db.node, &db.id).await?;
    Ok(Json(DatabaseStats {
        top_queries: top_queries(&state, db).await?,
        backup_bytes: node_stats.backup_bytes,
        replication_lag: node_stats.replication_lag_commits.map(|commits| {
            atoll_types::backups::BackupLag {
                commits,
                seconds: node_stats.replication_lag_ms.unwrap_or(0) as f64 / 1000.0,
            }
        }),
    }))
}

async fn queries(State(state): State<AppState>, access: Access) -> ApiResult<Json<Vec<TopQuery>>> {
    Ok(Json(top_queries(&state, access.database()).await?))
}
