//! Plans, subscription and invoices: `/v1/plans`, `/v1/organizations/{org}/plans`,
//! `…/subscription`, `…/invoices` (and the personal `/v1/subscription`, `/v1/invoices`).
//! Atoll has no payment provider: invoices are computed from the plan's price per
//! billing cycle (calendar month) and are never marked paid.
//!
//! The payment provider's routes the turso CLI calls (`POST /v1/organizations/stripe-customer`,
//! `…/billing/portal`, `…/billing/payment-methods`, `…/billing/customer`, `POST
//! …/subscription`) answer a harmless success where the CLI only needs one to go on
//! (`turso org create`), and a clear 400 `not_available_on_self_hosted` otherwise.

use super::Route;
use crate::auth::{Access, Action};
use crate::body::{LenientJson, Query};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire;
use atoll_types::hosted::{
    BillingCustomer, PaymentMethods, StripeCustomer, StripeCustomerRequest,
    UpdateSubscriptionRequest,
};
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
    routes.push(
        Route::new(
            Method::POST,
            "/v1/organizations/stripe-customer",
            Action::CreateOrganization,
            "The turso CLI's first step of `org create`: no payment provider, an empty id",
            stripe_customer,
        )
        .request::<StripeCustomerRequest>()
        .response::<StripeCustomer>(),
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
                Method::POST,
                format!("{prefix}/subscription"),
                Action::ManageBilling,
                "Keep the current plan (200); other plans are set by an instance administrator",
                update_subscription,
            )
            .request::<UpdateSubscriptionRequest>()
            .response::<SubscriptionResponse>(),
        );
        routes.push(Route::new(
            Method::POST,
            format!("{prefix}/billing/portal"),
            Action::ManageBilling,
            "Not available on a self-hosted server (400): there is no payment provider",
            billing_portal,
        ));
        routes.push(
            Route::new(
                Method::GET,
                format!("{prefix}/billing/payment-methods"),
                Action::ReadInvoices,
                "Always `exists: true`: nothing waits for a payment method",
                payment_methods,
            )
            .response::<PaymentMethods>(),
        );
        routes.push(
            Route::new(
                Method::GET,
                format!("{prefix}/billing/customer"),
                Action::ReadInvoices,
                "The billing contact: empty, as no payment provider keeps one",
                billing_customer,
            )
            .response::<BillingCustomer>(),
        );
        routes.push(
            Route::new(
                Method::PUT,
                format!("{prefix}/billing/customer"),
                Action::ManageBilling,
                "Not available on a self-hosted server (400): there is no payment provider",
                update_billing_customer,
            )
            .request::<BillingCustomer>(),
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

/// Why a payment-provider route cannot be honoured, in words the turso CLI prints.
fn no_payment_provider(what: &str) -> ApiError {
    ApiError::NotOnSelfHosted(format!(
        "{what} is not available on a self-hosted server: there is no payment provider; \
         plans are set by an instance administrator (POST /v1/admin/organizations/{{org}}/plan)"
    ))
}

async fn stripe_customer(
    _access: Access,
    LenientJson(_request): LenientJson<StripeCustomerRequest>,
) -> Json<StripeCustomer> {
    Json(StripeCustomer::default())
}

/// `turso org create` may ask for the plan it chose: keeping the current plan succeeds;
/// another one is refused with the way to get it.
async fn update_subscription(
    access: Access,
    LenientJson(request): LenientJson<UpdateSubscriptionRequest>,
) -> ApiResult<Json<SubscriptionResponse>> {
    let org = access.org();
    if !request.plan.is_empty() && request.plan != org.plan_id {
        return Err(ApiError::NotOnSelfHosted(format!(
            "changing the plan of {} from {} to {} is not available to members on a \
             self-hosted server: an instance administrator sets it \
             (POST /v1/admin/organizations/{}/plan)",
            org.slug, org.plan_id, request.plan, org.slug
        )));
    }
    Ok(subscription(access).await)
}

async fn billing_portal(_access: Access) -> ApiError {
    no_payment_provider("the billing portal")
}

async fn payment_methods(_access: Access) -> Json<PaymentMethods> {
    Json(PaymentMethods { exists: true })
}

async fn billing_customer(_access: Access) -> Json<BillingCustomer> {
    Json(BillingCustomer::default())
}

async fn update_billing_customer(
    _access: Access,
    LenientJson(_customer): LenientJson<BillingCustomer>,
) -> ApiError {
    no_payment_provider("billing details")
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
    let (current_start, _) = crate::quotas::billing_cycle(atoll_meta::now_millis());
    let mut cycles = Vec::new();
    let mut start = crate::quotas::billing_cycle(org.created_at).0;
    while start <= current_start {
        let end = crate::quotas::billing_cycle(start).1;
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
