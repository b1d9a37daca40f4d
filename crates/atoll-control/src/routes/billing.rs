//! Plans, subscription and invoices: `/v1/plans`, `/v1/organizations/{org}/plans`,
//! `…/subscription`, `…/invoices` (and the personal `/v1/subscription`, `/v1/invoices`).
//! Atoll has no payment provider: invoices are computed from the plan's price per
//! billing cycle (calendar month) and are never marked paid.

use super::Route;
use crate::auth::{Access, Action};
use crate::body::Query;
use crate::error::ApiResult;
use crate::server::AppState;
use crate::wire;
use atoll_types::usage::{
    Invoice, InvoiceList, Plan, PlanList, PlanPrice, PlanQuotasCamel, Subscription,
    SubscriptionResponse,
};
use axum::extract::State;
use axum::http::Method;
use axum::Json;
use serde::Deserialize;

pub fn routes() -> Vec<Route> {
    let mut routes = vec![Route::new(
        Method::GET,
        "/v1/plans",
        Action::ReadPlans,
        "The plans of this instance, with prices and quotas",
        plans,
    )
    .response::<PlanList>()];
    routes.push(
        Route::new(
            Method::GET,
            "/v1/organizations/{org}/plans",
            Action::ReadOrganization,
            "The plans an organization can be on",
            plans,
        )
        .response::<PlanList>(),
    );
    for prefix in ["/v1/organizations/{org}", "/v1"] {
        routes.push(
            Route::new(
                Method::GET,
                format!("{prefix}/subscription"),
                Action::ReadOrganization,
                "The organization's plan",
                subscription,
            )
            .response::<SubscriptionResponse>(),
        );
        routes.push(
            Route::new(
                Method::GET,
                format!("{prefix}/invoices"),
                Action::ReadInvoices,
                "Invoices per billing cycle, computed from the plan",
                invoices,
            )
            .response::<InvoiceList>()
            .query(&["type"]),
        );
    }
    routes
}

async fn plans(State(state): State<AppState>, _access: Access) -> Json<PlanList> {
    let plans = atoll_types::organizations::PLANS
        .iter()
        .filter_map(|name| {
            let quotas = state.config.plans.get(*name)?;
            let price = state
                .config
                .plan_prices
                .get(*name)
                .cloned()
                .unwrap_or_else(|| "0".to_string());
            Some(Plan {
                name: name.to_string(),
                prices: vec![PlanPrice {
                    value: price.clone(),
                    timeline: "monthly".to_string(),
                }],
                price,
                quotas: PlanQuotasCamel {
                    rows_read: quotas.rows_read,
                    rows_written: quotas.rows_written,
                    databases: quotas.databases,
                    locations: quotas.locations,
                    storage: quotas.storage_bytes,
                    groups: quotas.groups,
                    bytes_synced: quotas.bytes_synced,
                },
            })
        })
        .collect();
    Json(PlanList { plans })
}

async fn subscription(access: Access) -> Json<SubscriptionResponse> {
    let org = access.org();
    Json(SubscriptionResponse {
        subscription: Subscription {
            name: org.plan_id.clone(),
            overages: org.overages,
            plan: org.plan_id.clone(),
            timeline: org.plan_timeline.clone(),
        },
    })
}

#[derive(Deserialize)]
struct InvoiceQuery {
    #[serde(rename = "type")]
    kind: Option<String>,
}

async fn invoices(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<InvoiceQuery>,
) -> ApiResult<Json<InvoiceList>> {
    let org = access.org();
    let price = state
        .config
        .plan_prices
        .get(&org.plan_id)
        .cloned()
        .unwrap_or_else(|| "0".to_string());
    let kind = query.kind.unwrap_or_else(|| "all".to_string());
    if !matches!(kind.as_str(), "all" | "upcoming" | "issued") {
        return Err(crate::error::ApiError::invalid(
            "type must be all, upcoming or issued",
        ));
    }
    // One invoice per calendar month since the organization was created; the current one
    // is upcoming. Each is due at the end of its cycle.
    let (current_start, _) = super::billing_cycle(atoll_meta::now_millis());
    let mut cycles = Vec::new();
    let mut start = super::billing_cycle(org.created_at).0;
    while start <= current_start {
        let end = super::billing_cycle(start).1;
        cycles.push((start, end));
        start = end;
    }
    let invoices = cycles
        .into_iter()
        .rev()
        .map(|(start, end)| {
            let status = if start == current_start {
                "upcoming"
            } else {
                "issued"
            };
            let number = format!("{}-{}", org.slug, &wire::rfc3339(start)[..7]);
            Invoice {
                invoice_number: number,
                amount_due: price.clone(),
                due_date: wire::rfc3339(end),
                paid_at: None,
                payment_failed_at: None,
                invoice_pdf: String::new(),
                status: status.to_string(),
                hosted_invoice_url: String::new(),
            }
        })
        .filter(|invoice| kind == "all" || invoice.status == kind)
        .collect();
    Ok(Json(InvoiceList { invoices }))
}
