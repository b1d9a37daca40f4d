//! Usage: `…/databases/{db}/usage`, `…/organizations/{org}/usage`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a database consumed in a period (`storage_bytes`: its size now).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct DatabaseUsageObject {
    pub rows_read: u64,
    pub rows_written: u64,
    pub storage_bytes: u64,
    pub bytes_synced: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct InstanceUsage {
    pub uuid: String,
    pub usage: DatabaseUsageObject,
}

/// The spec's `DatabaseUsageOutput`; the aggregate is under both `total` (the spec) and
/// `usage` (what the Turso CLI and the TypeScript SDK read).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct DatabaseUsageOutput {
    pub uuid: String,
    pub instances: Vec<InstanceUsage>,
    pub total: DatabaseUsageObject,
    pub usage: DatabaseUsageObject,
    /// The period interval by interval, oldest first (an Atoll extension, present only
    /// when asked for with `granularity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<UsageInterval>>,
}

/// One interval of a usage history (an Atoll extension; docs/API.md, "Usage over time"):
/// what was consumed in `[start, end)` and the storage measured in it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct UsageInterval {
    /// RFC 3339 bounds of the interval.
    pub start: String,
    pub end: String,
    pub rows_read: u64,
    pub rows_written: u64,
    pub bytes_synced: u64,
    /// The largest size measured in the interval (the collector keeps one per database
    /// and hour; an organization's is the sum of its databases'); `null` when none was
    /// measured: before the database existed, or older than the samples are kept.
    pub storage_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseUsageResponse {
    pub database: DatabaseUsageOutput,
}

/// An organization's consumption in the current billing cycle.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct OrganizationUsageObject {
    pub rows_read: u64,
    pub rows_written: u64,
    pub databases: u64,
    pub locations: u64,
    pub storage_bytes: u64,
    pub groups: u64,
    pub bytes_synced: u64,
}

/// What a plan allows per billing cycle (`None`: unlimited).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct PlanQuotas {
    pub rows_read: Option<u64>,
    pub rows_written: Option<u64>,
    pub databases: Option<u64>,
    pub locations: Option<u64>,
    pub storage_bytes: Option<u64>,
    pub groups: Option<u64>,
    pub bytes_synced: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OrganizationUsage {
    pub uuid: String,
    /// What the organization consumed this billing cycle.
    pub usage: OrganizationUsageObject,
    /// What its plan allows (an Atoll extension): compare with `usage`.
    pub quotas: PlanQuotas,
    /// `plan_id` of the organization.
    pub plan: String,
    /// RFC 3339 bounds of the billing cycle (the calendar month).
    pub from: String,
    pub to: String,
    pub databases: Vec<DatabaseUsageOutput>,
    /// The organization's usage interval by interval (an Atoll extension, present only
    /// when asked for with `granularity`; `from`/`to` bound it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<UsageInterval>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OrganizationUsageResponse {
    pub organization: OrganizationUsage,
}

/// A plan as `GET /v1/plans` shows it (the Turso CLI's camelCase quotas).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Plan {
    pub name: String,
    /// USD per month.
    pub price: String,
    pub prices: Vec<PlanPrice>,
    pub quotas: PlanQuotasCamel,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct PlanPrice {
    pub value: String,
    pub timeline: String,
}

/// Quotas in the plan listing's casing; `null` is unlimited.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanQuotasCamel {
    pub rows_read: Option<u64>,
    pub rows_written: Option<u64>,
    pub databases: Option<u64>,
    pub locations: Option<u64>,
    pub storage: Option<u64>,
    pub groups: Option<u64>,
    pub bytes_synced: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlanList {
    pub plans: Vec<Plan>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Subscription {
    pub name: String,
    pub overages: bool,
    pub plan: String,
    pub timeline: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SubscriptionResponse {
    pub subscription: Subscription,
}

/// An invoice, computed from the plan's price and the cycle's usage (Atoll has no payment
/// provider: nothing is ever marked paid).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Invoice {
    pub invoice_number: String,
    /// USD.
    pub amount_due: String,
    pub due_date: String,
    pub paid_at: Option<String>,
    pub payment_failed_at: Option<String>,
    pub invoice_pdf: String,
    /// `upcoming` (the current cycle) or `issued` (a past one).
    pub status: String,
    pub hosted_invoice_url: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InvoiceList {
    pub invoices: Vec<Invoice>,
}

/// A statement text and the rows it read and wrote (`…/stats`, `…/usage/queries`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct TopQuery {
    pub query: String,
    pub rows_read: u64,
    pub rows_written: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseStats {
    pub top_queries: Vec<TopQuery>,
    /// Atoll: bytes the database's backups take in object storage (snapshots and log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_bytes: Option<u64>,
    /// Atoll: commits on its node not in object storage yet, and the age of the oldest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_lag: Option<crate::backups::BackupLag>,
}
