//! An organization's audit log: `GET /v1/organizations/{org}/audit-logs` (paid plans).
//! Entries are written by the handlers that change things (`crate::audit`).
//!
//! Filters (an Atoll extension; Turso's route has only the pages): `code`, `author`,
//! `origin` (exact matches), `from`/`to` (RFC 3339, `to` excluded). Pages and totals count
//! the matching entries; without filters the answer is Turso's.

use super::Route;
use crate::auth::{Access, Action};
use crate::body::Query;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_meta::AuditFilter;
use atoll_types::audit::{AuditLogList, AuditLogPagination};
use axum::extract::State;
use axum::http::Method;
use axum::Json;
use serde::Deserialize;

const DEFAULT_PAGE_SIZE: i64 = 100;
const MAX_PAGE_SIZE: i64 = 1000;

pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::GET,
        "/v1/organizations/{org}/audit-logs",
        Action::ReadAuditLogs,
        "The organization's audit log, newest first (paid plans; page-number pagination)",
        list,
    )
    .response::<AuditLogList>()
    .query(&[
        "page",
        "page_size",
        "code",
        "author",
        "origin",
        "from",
        "to",
    ])]
}

/// Read as text so a malformed number gets this API's JSON 400, not the framework's.
#[derive(Deserialize)]
struct ListQuery {
    page: Option<String>,
    page_size: Option<String>,
    code: Option<String>,
    author: Option<String>,
    origin: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

/// Longest filter value: codes, usernames and origins are far shorter.
const MAX_FILTER_CHARS: usize = 200;

/// An exact-match filter; an empty value (a form field left blank) filters nothing.
fn text_filter(name: &str, value: Option<String>) -> ApiResult<Option<String>> {
    match value {
        Some(v) if v.chars().count() > MAX_FILTER_CHARS => Err(ApiError::invalid(format!(
            "{name} must be at most {MAX_FILTER_CHARS} characters"
        ))),
        Some(v) if v.is_empty() => Ok(None),
        other => Ok(other),
    }
}

fn time_filter(name: &str, value: Option<&str>) -> ApiResult<Option<i64>> {
    match value {
        None | Some("") => Ok(None),
        Some(text) => {
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                .map(|t| Some((t.unix_timestamp_nanos() / 1_000_000) as i64))
                .map_err(|_| {
                    ApiError::invalid(format!(
                    "{name} must be an RFC 3339 instant like 2026-11-24T12:00:00Z, not {text:?}"
                ))
                })
        }
    }
}

fn filter(query: &mut ListQuery) -> ApiResult<AuditFilter> {
    let filter = AuditFilter {
        code: text_filter("code", query.code.take())?,
        author: text_filter("author", query.author.take())?,
        origin: text_filter("origin", query.origin.take())?,
        from: time_filter("from", query.from.as_deref())?,
        to: time_filter("to", query.to.as_deref())?,
    };
    if let (Some(from), Some(to)) = (filter.from, filter.to) {
        if from > to {
            return Err(ApiError::invalid("from must not be after to"));
        }
    }
    Ok(filter)
}

fn parse_bounded(name: &str, text: Option<&str>, default: i64, max: i64) -> ApiResult<i64> {
    let Some(text) = text else {
        return Ok(default);
    };
    match text.trim().parse::<i64>() {
        Ok(value) if (1..=max).contains(&value) => Ok(value),
        _ if max == i64::MAX => Err(ApiError::invalid(format!(
            "{name} must be a whole number of at least 1, not {text:?}"
        ))),
        _ => Err(ApiError::invalid(format!(
            "{name} must be a whole number from 1 to {max}, not {text:?}"
        ))),
    }
}

async fn list(
    State(state): State<AppState>,
    access: Access,
    Query(mut query): Query<ListQuery>,
) -> ApiResult<Json<AuditLogList>> {
    let org = access.org();
    if !crate::audit::available(org) {
        return Err(ApiError::PaidPlanRequired(
            "Audit logs are not available on the free plan: upgrade the organization's plan".into(),
        ));
    }
    let page = parse_bounded("page", query.page.as_deref(), 1, i64::MAX)?;
    let page_size = parse_bounded(
        "page_size",
        query.page_size.as_deref(),
        DEFAULT_PAGE_SIZE,
        MAX_PAGE_SIZE,
    )?;
    let filter = filter(&mut query)?;
    let (entries, total_rows) = state
        .store
        .list_audit_matching(&org.id, filter, page, page_size)
        .await?;
    let total_rows = u64::try_from(total_rows).unwrap_or(0);
    let page_size = page_size.unsigned_abs();
    Ok(Json(AuditLogList {
        audit_logs: entries.iter().map(wire::audit_log).collect(),
        pagination: AuditLogPagination {
            page: page.unsigned_abs(),
            page_size,
            total_pages: total_rows.div_ceil(page_size),
            total_rows,
        },
    }))
}
