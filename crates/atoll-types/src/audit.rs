//! Audit logs: `GET /v1/organizations/{org}/audit-logs`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One entry of an organization's audit log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct AuditLog {
    /// What happened: one of [`AuditCode`]'s values, e.g. `db-create`.
    pub code: String,
    pub message: String,
    /// Where the request came from, by its `User-Agent`: `cli`, `web` or `api`.
    pub origin: String,
    /// Username of the caller.
    pub author: String,
    /// RFC 3339.
    pub created_at: String,
    /// What was acted on, by name: `{"database": "x", "group": "default"}`.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// Page-number pagination (1-based `page`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct AuditLogPagination {
    pub page: u64,
    pub page_size: u64,
    pub total_pages: u64,
    pub total_rows: u64,
}

/// `GET /v1/organizations/{org}/audit-logs`: newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditLogList {
    pub audit_logs: Vec<AuditLog>,
    pub pagination: AuditLogPagination,
}

/// The codes of audit-log entries: the contract's vocabulary (typo `db-aunrchive`
/// included), then Atoll's own for actions the contract names no code for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditCode {
    // The contract's codes.
    UserSignup,
    DbCreate,
    DbDelete,
    DbProtect,
    DbUnprotect,
    DbTokenCreate,
    GroupTokenCreate,
    UserTokenCreate,
    InstanceCreate,
    InstanceDelete,
    OrgCreate,
    OrgDelete,
    OrgMemberAdd,
    OrgMemberRm,
    OrgMemberLeave,
    OrgPlanUpdate,
    OrgSetOverages,
    GroupCreate,
    GroupDelete,
    GroupUnarchive,
    GroupProtect,
    GroupUnprotect,
    DbUnarchive,
    UserDelete,
    // Atoll's additions.
    DbConfigure,
    DbTransfer,
    DbRestore,
    DbRotateCreds,
    DbRotateEncryptionKey,
    DbDumpUpload,
    GroupRename,
    GroupTransfer,
    GroupLocationAdd,
    GroupLocationRm,
    GroupFailover,
    GroupRotateCreds,
    OrgMemberRoleUpdate,
    OrgInviteCreate,
    OrgInviteRm,
    UserTokenRevoke,
    OrgJwksSave,
    OrgJwksRm,
}

impl AuditCode {
    /// Every code, the contract's first.
    pub const ALL: [AuditCode; 42] = [
        Self::UserSignup,
        Self::DbCreate,
        Self::DbDelete,
        Self::DbProtect,
        Self::DbUnprotect,
        Self::DbTokenCreate,
        Self::GroupTokenCreate,
        Self::UserTokenCreate,
        Self::InstanceCreate,
        Self::InstanceDelete,
        Self::OrgCreate,
        Self::OrgDelete,
        Self::OrgMemberAdd,
        Self::OrgMemberRm,
        Self::OrgMemberLeave,
        Self::OrgPlanUpdate,
        Self::OrgSetOverages,
        Self::GroupCreate,
        Self::GroupDelete,
        Self::GroupUnarchive,
        Self::GroupProtect,
        Self::GroupUnprotect,
        Self::DbUnarchive,
        Self::UserDelete,
        Self::DbConfigure,
        Self::DbTransfer,
        Self::DbRestore,
        Self::DbRotateCreds,
        Self::DbRotateEncryptionKey,
        Self::DbDumpUpload,
        Self::GroupRename,
        Self::GroupTransfer,
        Self::GroupLocationAdd,
        Self::GroupLocationRm,
        Self::GroupFailover,
        Self::GroupRotateCreds,
        Self::OrgMemberRoleUpdate,
        Self::OrgInviteCreate,
        Self::OrgInviteRm,
        Self::UserTokenRevoke,
        Self::OrgJwksSave,
        Self::OrgJwksRm,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::UserSignup => "user-signup",
            Self::DbCreate => "db-create",
            Self::DbDelete => "db-delete",
            Self::DbProtect => "db-protect",
            Self::DbUnprotect => "db-unprotect",
            Self::DbTokenCreate => "db-token-create",
            Self::GroupTokenCreate => "group-token-create",
            Self::UserTokenCreate => "user-token-create",
            Self::InstanceCreate => "instance-create",
            Self::InstanceDelete => "instance-delete",
            Self::OrgCreate => "org-create",
            Self::OrgDelete => "org-delete",
            Self::OrgMemberAdd => "org-member-add",
            Self::OrgMemberRm => "org-member-rm",
            Self::OrgMemberLeave => "org-member-leave",
            Self::OrgPlanUpdate => "org-plan-update",
            Self::OrgSetOverages => "org-set-overages",
            Self::GroupCreate => "group-create",
            Self::GroupDelete => "group-delete",
            Self::GroupUnarchive => "group-unarchive",
            Self::GroupProtect => "group-protect",
            Self::GroupUnprotect => "group-unprotect",
            // Sic: the contract's spelling.
            Self::DbUnarchive => "db-aunrchive",
            Self::UserDelete => "user-delete",
            Self::DbConfigure => "db-configure",
            Self::DbTransfer => "db-transfer",
            Self::DbRestore => "db-restore",
            Self::DbRotateCreds => "db-rotate-creds",
            Self::DbRotateEncryptionKey => "db-rotate-encryption-key",
            Self::DbDumpUpload => "db-dump-upload",
            Self::GroupRename => "group-rename",
            Self::GroupTransfer => "group-transfer",
            Self::GroupLocationAdd => "group-location-add",
            Self::GroupLocationRm => "group-location-rm",
            Self::GroupFailover => "group-failover",
            Self::GroupRotateCreds => "group-rotate-creds",
            Self::OrgMemberRoleUpdate => "org-member-role-update",
            Self::OrgInviteCreate => "org-invite-create",
            Self::OrgInviteRm => "org-invite-rm",
            Self::UserTokenRevoke => "user-token-revoke",
            Self::OrgJwksSave => "org-jwks-save",
            Self::OrgJwksRm => "org-jwks-rm",
        }
    }

    pub fn parse(text: &str) -> Option<AuditCode> {
        Self::ALL.into_iter().find(|c| c.as_str() == text)
    }

    /// Whether the contract names this code (the others are Atoll's).
    pub fn in_contract(self) -> bool {
        !matches!(
            self,
            Self::DbConfigure
                | Self::DbTransfer
                | Self::DbRestore
                | Self::DbRotateCreds
                | Self::DbRotateEncryptionKey
                | Self::DbDumpUpload
                | Self::GroupRename
                | Self::GroupTransfer
                | Self::GroupLocationAdd
                | Self::GroupLocationRm
                | Self::GroupFailover
                | Self::GroupRotateCreds
                | Self::OrgMemberRoleUpdate
                | Self::OrgInviteCreate
                | Self::OrgInviteRm
                | Self::UserTokenRevoke
                | Self::OrgJwksSave
                | Self::OrgJwksRm
        )
    }
}

impl std::fmt::Display for AuditCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `origin` of an entry, from the request's `User-Agent`: the Turso CLI (or Atoll's) is
/// `cli`, a browser is `web`, anything else (SDKs, scripts) is `api`.
pub fn origin_from_user_agent(user_agent: Option<&str>) -> &'static str {
    match user_agent.map(str::trim_start) {
        Some(ua) if ua.starts_with("turso-cli") || ua.starts_with("atoll-cli") => "cli",
        Some(ua) if ua.starts_with("Mozilla") => "web",
        _ => "api",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_keep_the_contract_spelling() {
        for code in AuditCode::ALL {
            assert_eq!(AuditCode::parse(code.as_str()), Some(code));
        }
        let contract = "user-signup db-create db-delete db-protect db-unprotect db-token-create \
             group-token-create user-token-create instance-create instance-delete org-create \
             org-delete org-member-add org-member-rm org-member-leave org-plan-update \
             org-set-overages group-create group-delete group-unarchive group-protect \
             group-unprotect db-aunrchive user-delete";
        let ours: Vec<_> = AuditCode::ALL
            .into_iter()
            .filter(|c| c.in_contract())
            .map(AuditCode::as_str)
            .collect();
        assert_eq!(ours, contract.split_whitespace().collect::<Vec<_>>());
    }

    #[test]
    fn origin_follows_the_user_agent() {
        let cases = [
            (Some("turso-cli/1.0.0 (linux/amd64)"), "cli"),
            (Some("turso-cli/dev (darwin/arm64)"), "cli"),
            (Some("atoll-cli/0.1.0"), "cli"),
            (
                Some("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36"),
                "web",
            ),
            (Some("@tursodatabase/api"), "api"),
            (Some("curl/8.5.0"), "api"),
            (Some(""), "api"),
            (None, "api"),
        ];
        for (ua, origin) in cases {
            assert_eq!(origin_from_user_agent(ua), origin, "{ua:?}");
        }
    }
}
