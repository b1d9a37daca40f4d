//! The audit log: every handler that changes something calls [`record`] once the change
//! has succeeded. `GET …/audit-logs` (`routes::audit_logs`) reads it back.

use crate::auth::Access;
use crate::state::AppState;
use atoll_meta::{NewAuditEntry, Organization};
use atoll_types::audit::AuditCode;
use serde_json::Value;

/// Appends an entry to `org_id`'s audit log, authored by the caller, with the request's
/// origin. A failure is logged, never returned: the change it describes has happened,
/// and the caller must learn so.
pub async fn record(
    state: &AppState,
    access: &Access,
    org_id: &str,
    code: AuditCode,
    message: impl Into<String>,
    data: Value,
) {
    let entry = NewAuditEntry {
        org_id: org_id.to_string(),
        code: code.as_str().to_string(),
        message: message.into(),
        origin: access.origin.to_string(),
        author: access.principal.user.username.clone(),
        data: data.to_string(),
    };
    if let Err(error) = state.store.record_audit(entry).await {
        tracing::error!(%error, code = code.as_str(), "could not record an audit-log entry");
    }
}

/// Audit logs are a feature of paid plans.
pub fn available(org: &Organization) -> bool {
    !crate::config::ControlConfig::is_free_plan(&org.plan_id)
}
