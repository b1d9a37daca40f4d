//! Routes of the hosted Turso service that the turso CLI calls and that a self-hosted
//! server answers only for compatibility: the payment provider (Stripe customer, billing
//! portal, payment methods, billing customer, plan changes), the CLI's update check,
//! legacy per-database instances and the migration of a group to AWS. Each answers a
//! harmless success where the CLI only needs one, or a clear 400
//! `not_available_on_self_hosted` (docs/API.md, "Routes of the hosted service").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/organizations/stripe-customer` body: the organization about to be created.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct StripeCustomerRequest {
    #[serde(default)]
    pub name: String,
}

/// The customer id the CLI passes on to `POST /v1/organizations` (`stripe_id`). Always
/// empty here: there is no payment provider, and an empty id is one the CLI omits.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct StripeCustomer {
    #[serde(rename = "StripeCustomerId")]
    pub stripe_customer_id: String,
}

/// `GET …/billing/payment-methods`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct PaymentMethods {
    /// Always true: nothing on a self-hosted server waits for a payment method.
    pub exists: bool,
}

/// `GET`/`PUT …/billing/customer`: the billing contact of an organization.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct BillingCustomer {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub email: String,
    #[serde(default)]
    pub tax_id: TaxId,
    #[serde(default)]
    pub billing_address: BillingAddress,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct TaxId {
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub country: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct BillingAddress {
    #[serde(default)]
    pub line1: String,
    #[serde(default)]
    pub line2: String,
    #[serde(default)]
    pub city: String,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub postal_code: String,
    #[serde(default)]
    pub country: String,
}

/// `POST …/subscription`: the plan the organization should be on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct UpdateSubscriptionRequest {
    #[serde(default)]
    pub plan: String,
    /// `monthly` or `yearly`; ignored (Atoll bills nothing).
    #[serde(default)]
    pub timeline: Option<String>,
    #[serde(default)]
    pub overages: Option<bool>,
}

/// `GET /releases/latest`: the turso CLI's update check.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LatestRelease {
    /// This server's version, `v` first (`v0.1.0`): older than any turso CLI, so the
    /// CLI's check finds nothing to announce.
    pub latest: String,
}

/// `POST …/databases/{db}/instances` (legacy): `{"Location": "<code>"}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateInstanceRequest {
    #[serde(default)]
    pub location: String,
}

/// `GET …/groups/{group}/aws/migration/info`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AwsMigrationInfo {
    /// `none`: a self-hosted group never migrates.
    pub status: String,
    pub comment: String,
}
