//! The policy table: every action, and who may perform it.
//!
//! Each route of the route table names one [`Action`]; [`Access`] (the extractor every
//! protected handler takes) authenticates the caller and calls [`authorize`], which reads
//! only this table. Rules, in order:
//!
//! 1. The target organization is the one in the path, or the caller's personal
//!    organization on the un-prefixed routes (`/v1/groups…`). An organization that does
//!    not exist, or of which the user is not a member, answers **404** (its existence is
//!    not revealed).
//! 2. The token must reach it: an organization-scoped token only its organization, a
//!    group-scoped token only its group and only with the scope the action names. Otherwise
//!    **403**.
//! 3. The user's *current* role must be at least the action's role, so a token never does
//!    more than its user may do today. Otherwise **403**.

use super::principal::{authenticate, Principal};
use crate::error::ApiError;
use crate::state::AppState;
use atoll_meta::{Database, Group, Organization, TokenRestriction};
use atoll_types::audit::origin_from_user_agent;
use atoll_types::{ErrorCode, Role, Scope};
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use std::collections::HashMap;

/// Everything a route can do. The route table gives each route exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    // Public.
    Health,
    ReadOpenApi,
    Login,
    /// Ending the console session of the request's cookie (`DELETE /v1/auth/session`):
    /// public, since the credential it ends is the cookie itself, which it checks.
    EndSession,
    ClosestRegion,
    /// The turso CLI's update check (`GET /releases/latest`).
    ReadLatestRelease,
    // The caller's own account.
    ReadUser,
    ValidateToken,
    /// Revoking every login token of the caller (`turso auth logout --all`).
    InvalidateLoginTokens,
    ListOwnApiTokens,
    CreateApiToken,
    RevokeOwnApiToken,
    ListOrganizations,
    CreateOrganization,
    ListOwnInvites,
    AcceptInvite,
    ReadLocations,
    CreateUser,
    // One organization.
    ReadOrganization,
    UpdateOrganization,
    DeleteOrganization,
    ReadMembers,
    ManageMembers,
    /// Removing a member: anyone may leave; removing someone else needs `ManageMembers`.
    RemoveMember,
    ReadInvites,
    ManageInvites,
    ListOrganizationTokens,
    RevokeOrganizationToken,
    ReadOrganizationLocations,
    // Groups.
    ListGroups,
    CreateGroup,
    ReadGroup,
    DeleteGroup,
    TransferGroup,
    ConfigureGroup,
    MintGroupToken,
    RotateGroupCredentials,
    /// Starting or aborting a group's migration to AWS (never on a self-hosted server, but
    /// only those who could transfer the group are told so).
    MigrateGroupToAws,
    /// Moving a group's primary location (failover): the databases' primaries move, and
    /// with `force` a lost node's unstored writes may be given up, so admins only.
    FailOverGroup,
    // Databases.
    ListDatabases,
    /// The group comes from the body: the handler checks a group-scoped token against it.
    CreateDatabase,
    UploadDump,
    ReadDatabase,
    DeleteDatabase,
    ConfigureDatabase,
    /// Moving a database to another organization gives its data away, so it takes what
    /// moving a group takes (`TransferGroup`): admins, and never a group-scoped token. The
    /// handler also wants the member role in the receiving organization.
    TransferDatabase,
    MintDatabaseToken,
    RotateDatabaseCredentials,
    RotateDatabaseEncryptionKey,
    ListDeletedDatabases,
    /// The group is the deleted database's: the handler checks a group-scoped token against it.
    RestoreDatabase,
    /// Backups in object storage and the restorable window.
    ReadDatabaseBackups,
    /// Restoring a database in place to an instant of its history: it replaces the data
    /// (undoably), so it takes what deleting takes.
    RestoreDatabaseInPlace,
    SetOrganizationPlan,
    /// The data nodes and their quarantines (instance administrators).
    ReadNodes,
    ReadQuarantine,
    PurgeQuarantine,
    /// Draining a node (moving its databases away) and undoing it.
    DrainNode,
    /// The data nodes' own calls: heartbeats, where a database lives, and which databases
    /// the store places on the calling node (node secret).
    NodeHeartbeat,
    ResolveDatabaseRoute,
    ReadNodePlacement,
    ReadOrganizationUsage,
    ReadInvoices,
    /// The payment provider's side of an organization: billing portal, billing contact,
    /// plan changes by its members.
    ManageBilling,
    ReadPlans,
    ReadAuditLogs,
    /// An organization's key sets (JWKS) and the claims template of its auth provider.
    ReadJwks,
    /// Registering or removing a key set: its keys can sign tokens for every database of
    /// the organization.
    ManageJwks,
}

/// What an action acts on, which decides how the target is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// No credentials needed.
    Public,
    /// The caller's own account; no organization involved.
    Account,
    /// One organization (from the path, or the caller's personal one).
    Organization,
    /// One group of one organization.
    Group,
    /// One database (and so its group) of one organization.
    Database,
    /// A data node, authenticated with the node secret ([`super::node::NodeCaller`]); no
    /// user token is ever accepted.
    Node,
}

/// Which kinds of token may perform an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRule {
    /// Any valid token.
    Any,
    /// Login tokens only: actions on the user's sessions. Not even an unrestricted API
    /// token: a credential made for automation must not end (or keep ending) the
    /// person's sessions.
    LoginOnly,
    /// Login tokens and unrestricted API tokens only: actions on the user's own
    /// credentials and account, which a scoped token must never widen.
    UserLevel,
    /// Unrestricted tokens and tokens scoped to the target organization; never a
    /// group-scoped token.
    OrganizationLevel,
    /// As `OrganizationLevel`, and also group-scoped tokens holding this scope (for the
    /// pinned group only).
    GroupScope(Scope),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub target: Target,
    pub tokens: TokenRule,
    /// Least role in the target organization (ignored for `Public` and `Account`).
    pub min_role: Role,
    /// Only instance administrators.
    pub instance_admin: bool,
}

const fn rule(target: Target, tokens: TokenRule, min_role: Role) -> Rule {
    Rule {
        target,
        tokens,
        min_role,
        instance_admin: false,
    }
}

impl Action {
    /// **The policy table.**
    pub const fn rule(self) -> Rule {
        use Role::*;
        use Target::*;
        use TokenRule::*;
        match self {
            Action::Health
            | Action::ReadOpenApi
            | Action::Login
            | Action::EndSession
            | Action::ClosestRegion
            | Action::ReadLatestRelease => rule(Public, Any, Viewer),
            Action::ReadUser | Action::ValidateToken | Action::ListOrganizations => {
                rule(Account, Any, Viewer)
            }
            Action::ReadLocations => rule(Account, Any, Viewer),
            Action::InvalidateLoginTokens => rule(Account, LoginOnly, Viewer),
            Action::ListOwnApiTokens
            | Action::CreateApiToken
            | Action::RevokeOwnApiToken
            | Action::CreateOrganization
            | Action::ListOwnInvites
            | Action::AcceptInvite => rule(Account, UserLevel, Viewer),
            Action::CreateUser => Rule {
                target: Account,
                tokens: UserLevel,
                min_role: Viewer,
                instance_admin: true,
            },

            Action::ReadOrganization | Action::ReadMembers => {
                rule(Organization, OrganizationLevel, Viewer)
            }
            Action::UpdateOrganization => rule(Organization, OrganizationLevel, Admin),
            Action::DeleteOrganization => rule(Organization, OrganizationLevel, Owner),
            Action::ManageMembers | Action::ReadInvites | Action::ManageInvites => {
                rule(Organization, OrganizationLevel, Admin)
            }
            Action::RemoveMember => rule(Organization, OrganizationLevel, Viewer),
            // Members and viewers see and revoke only their own tokens (the handler
            // narrows the listing); admins and owners see all.
            Action::ListOrganizationTokens | Action::RevokeOrganizationToken => {
                rule(Organization, OrganizationLevel, Viewer)
            }
            Action::ReadOrganizationLocations => {
                rule(Organization, GroupScope(Scope::Read), Viewer)
            }

            Action::ListGroups => rule(Organization, GroupScope(Scope::Read), Viewer),
            Action::CreateGroup => rule(Organization, OrganizationLevel, Member),
            Action::ReadGroup => rule(Group, GroupScope(Scope::Read), Viewer),
            Action::DeleteGroup => rule(Group, OrganizationLevel, Member),
            Action::TransferGroup => rule(Group, OrganizationLevel, Admin),
            Action::ConfigureGroup => rule(Group, GroupScope(Scope::GroupConfigure), Member),
            Action::MintGroupToken => rule(Group, GroupScope(Scope::GroupMintToken), Member),
            Action::RotateGroupCredentials => {
                rule(Group, GroupScope(Scope::GroupRotateCreds), Member)
            }
            Action::MigrateGroupToAws => rule(Group, OrganizationLevel, Admin),
            Action::FailOverGroup => rule(Group, GroupScope(Scope::GroupConfigure), Admin),

            Action::ListDatabases => rule(Organization, GroupScope(Scope::Read), Viewer),
            Action::CreateDatabase | Action::UploadDump => {
                rule(Organization, GroupScope(Scope::DbCreate), Member)
            }
            Action::ReadDatabase => rule(Database, GroupScope(Scope::Read), Viewer),
            Action::DeleteDatabase => rule(Database, GroupScope(Scope::DbDelete), Member),
            Action::ReadDatabaseBackups => rule(Database, GroupScope(Scope::Read), Viewer),
            Action::RestoreDatabaseInPlace => rule(Database, GroupScope(Scope::DbDelete), Member),
            Action::ConfigureDatabase => rule(Database, GroupScope(Scope::DbConfigure), Member),
            Action::TransferDatabase => rule(Database, OrganizationLevel, Admin),
            Action::MintDatabaseToken => rule(Database, GroupScope(Scope::DbMintToken), Member),
            // The caller must also know the current key.
            Action::RotateDatabaseCredentials | Action::RotateDatabaseEncryptionKey => {
                rule(Database, GroupScope(Scope::DbRotateCreds), Member)
            }
            Action::ListDeletedDatabases => rule(Organization, OrganizationLevel, Viewer),
            Action::ReadOrganizationUsage => rule(Organization, OrganizationLevel, Viewer),
            Action::ReadInvoices | Action::ManageBilling => {
                rule(Organization, OrganizationLevel, Admin)
            }
            Action::ReadPlans => rule(Account, Any, Viewer),
            Action::RestoreDatabase => rule(Organization, GroupScope(Scope::DbCreate), Member),
            Action::SetOrganizationPlan
            | Action::ReadNodes
            | Action::ReadQuarantine
            | Action::PurgeQuarantine
            | Action::DrainNode => Rule {
                target: Account,
                tokens: UserLevel,
                min_role: Viewer,
                instance_admin: true,
            },
            Action::NodeHeartbeat | Action::ResolveDatabaseRoute | Action::ReadNodePlacement => {
                rule(Node, Any, Viewer)
            }
            // Paid plans only: the handler refuses organizations on the free plan.
            Action::ReadAuditLogs => rule(Organization, OrganizationLevel, Admin),
            Action::ReadJwks => rule(Organization, OrganizationLevel, Viewer),
            Action::ManageJwks => rule(Organization, OrganizationLevel, Admin),
        }
    }
}

/// An authorized request: the caller, and the organization and group of the path.
#[derive(Debug, Clone)]
pub struct Access {
    pub principal: Principal,
    pub org: Option<Organization>,
    pub role: Option<Role>,
    pub group: Option<Group>,
    pub database: Option<Database>,
    /// The audit-log `origin` of the request, from its `User-Agent`: `cli`, `web` or `api`.
    pub origin: &'static str,
}

impl Access {
    /// The organization of the path. Only call on routes whose target is an organization
    /// or a group.
    pub fn org(&self) -> &Organization {
        self.org
            .as_ref()
            .expect("organization routes resolve their organization")
    }

    pub fn group(&self) -> &Group {
        self.group
            .as_ref()
            .expect("group routes resolve their group")
    }

    pub fn database(&self) -> &Database {
        self.database
            .as_ref()
            .expect("database routes resolve their database")
    }

    /// For actions whose group is not in the path (creating a database in the group named
    /// by the body): a group-scoped token must be pinned to that group.
    pub fn check_group(&self, group: &Group) -> Result<(), ApiError> {
        match self.pinned_group_id() {
            Some(pinned) if pinned != group.id => Err(ApiError::Forbidden(
                "this token is restricted to another group".into(),
            )),
            _ => Ok(()),
        }
    }

    pub fn role(&self) -> Role {
        self.role.unwrap_or(Role::Viewer)
    }

    /// The group a group-scoped token is pinned to, if that is what the caller holds.
    pub fn pinned_group_id(&self) -> Option<&str> {
        match &self.principal.token.restriction {
            TokenRestriction::Group { group_id, .. } => Some(group_id),
            _ => None,
        }
    }

    /// Checks `action` on another group of the same organization: what the caller could do
    /// there if its path named that group. Reading a database of that group (to copy it,
    /// or to let a token attach it) answers as `GET` of the database would.
    pub fn require_in_group(&self, action: Action, group: &Group) -> Result<(), ApiError> {
        let rule = action.rule();
        check_token(&self.principal, rule, self.org.as_ref(), Some(group))?;
        check_role(rule, self.role)
    }

    /// Checks a further action on the same target (for handlers whose need depends on the
    /// request, such as removing oneself versus removing someone else).
    pub fn require(&self, action: Action) -> Result<(), ApiError> {
        let rule = action.rule();
        check_token(
            &self.principal,
            rule,
            self.org.as_ref(),
            self.group.as_ref(),
        )?;
        check_role(rule, self.role)
    }
}

impl FromRequestParts<AppState> for Access {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let action = *parts
            .extensions
            .get::<Action>()
            .ok_or_else(|| ApiError::Internal("route registered outside the route table".into()))?;
        let params = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map(|Path(params)| params)
            .unwrap_or_default();
        let principal = authenticate(parts, state).await?;
        let user_agent = parts
            .headers
            .get(axum::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        let names = names_of_v3_ids(state, action, &params).await?;
        let name = |key: &str| {
            names
                .get(key)
                .or_else(|| params.get(key))
                .map(String::as_str)
        };
        authorize(
            state,
            principal,
            action,
            origin_from_user_agent(user_agent),
            name("org"),
            name("group"),
            name("db"),
        )
        .await
    }
}

/// The v3 routes (`/v3/organizations/{orgId}/groups/{groupId}`, `…/databases/{dbId}`) name
/// records by id; the policy resolves names. This turns the ids of the path into the
/// slug and names [`authorize`] takes, so both versions share one authorization. An id
/// that names nothing of the organization answers 404 as an unknown name would (after
/// authentication, so it reveals nothing to a caller without credentials).
async fn names_of_v3_ids(
    state: &AppState,
    action: Action,
    params: &HashMap<String, String>,
) -> Result<HashMap<&'static str, String>, ApiError> {
    let mut names = HashMap::new();
    let Some(org_id) = params.get("orgId") else {
        return Ok(names);
    };
    let org = state.store.org_by_id(org_id).await?.ok_or_else(|| {
        ApiError::NotFound(
            ErrorCode::OrganizationNotFound,
            "organization not found".into(),
        )
    })?;
    let target = action.rule().target;
    if let (Some(id), Target::Group) = (params.get("groupId"), target) {
        let group = state
            .store
            .group_by_id(id)
            .await?
            .filter(|g| g.org_id == org.id)
            .ok_or_else(|| {
                ApiError::NotFound(ErrorCode::GroupNotFound, "group not found".into())
            })?;
        names.insert("group", group.name);
    }
    if let (Some(id), Target::Database) = (params.get("dbId"), target) {
        let db = state
            .store
            .database_by_id(id)
            .await?
            .filter(|d| d.org_id == org.id && d.deleted_at.is_none())
            .ok_or_else(|| database_not_found(id))?;
        names.insert("db", db.name);
    }
    names.insert("org", org.slug);
    Ok(names)
}

pub async fn authorize(
    state: &AppState,
    principal: Principal,
    action: Action,
    origin: &'static str,
    org_slug: Option<&str>,
    group_name: Option<&str>,
    database_name: Option<&str>,
) -> Result<Access, ApiError> {
    let rule = action.rule();
    if rule.target == Target::Node {
        return Err(ApiError::Unauthenticated(
            "the data nodes' routes take the node secret, not a user's token".into(),
        ));
    }
    if rule.instance_admin && !principal.user.is_admin {
        return Err(ApiError::Forbidden(
            "only instance administrators may do this".into(),
        ));
    }
    if matches!(rule.target, Target::Public | Target::Account) {
        check_token(&principal, rule, None, None)?;
        return Ok(Access {
            principal,
            org: None,
            role: None,
            group: None,
            database: None,
            origin,
        });
    }

    let slug = org_slug.unwrap_or(&principal.user.username).to_string();
    let not_found = || {
        ApiError::NotFound(
            ErrorCode::OrganizationNotFound,
            "organization not found".into(),
        )
    };
    let (org, role) = state
        .store
        .org_with_role(&slug, &principal.user.id)
        .await?
        .ok_or_else(not_found)?;
    let role = role.ok_or_else(not_found)?;

    let mut database = None;
    let group = match (rule.target, group_name, database_name) {
        (Target::Group, Some(name), _) => Some(
            state
                .store
                .group_by_name(&org.id, name)
                .await?
                .ok_or_else(|| {
                    ApiError::NotFound(ErrorCode::GroupNotFound, "group not found".into())
                })?,
        ),
        (Target::Database, _, Some(name)) => {
            let db = state
                .store
                .database_by_name(&org.id, name)
                .await?
                .ok_or_else(|| database_not_found(name))?;
            let group = state
                .store
                .group_by_id(&db.group_id)
                .await?
                .ok_or_else(|| database_not_found(name))?;
            database = Some(db);
            Some(group)
        }
        _ => None,
    };
    check_token(&principal, rule, Some(&org), group.as_ref())?;
    check_role(rule, Some(role))?;
    Ok(Access {
        principal,
        org: Some(org),
        role: Some(role),
        group,
        database,
        origin,
    })
}

/// The contract's text for an unknown database.
pub fn database_not_found(name: &str) -> ApiError {
    ApiError::NotFound(
        ErrorCode::DatabaseNotFound,
        format!("could not find database with name {name}: record not found"),
    )
}

fn check_token(
    principal: &Principal,
    rule: Rule,
    org: Option<&Organization>,
    group: Option<&Group>,
) -> Result<(), ApiError> {
    let restriction = &principal.token.restriction;
    match (rule.tokens, restriction) {
        (TokenRule::LoginOnly, _) if principal.is_login() => Ok(()),
        (TokenRule::LoginOnly, _) => Err(ApiError::Forbidden(
            "only a login token can do this (log in with `atoll auth login`); API tokens are revoked one by one"
                .into(),
        )),
        (_, TokenRestriction::Unrestricted) | (TokenRule::Any, _) => Ok(()),
        (TokenRule::UserLevel, _) => Err(ApiError::Forbidden(
            "a token restricted to an organization or group cannot do this; use a login token"
                .into(),
        )),
        (
            TokenRule::OrganizationLevel | TokenRule::GroupScope(_),
            TokenRestriction::Organization { org_id },
        ) => {
            if org.is_some_and(|o| &o.id == org_id) {
                Ok(())
            } else {
                Err(ApiError::Forbidden(
                    "this token is restricted to another organization".into(),
                ))
            }
        }
        (TokenRule::OrganizationLevel, TokenRestriction::Group { .. }) => Err(ApiError::Forbidden(
            "group-scoped tokens cannot do this; it needs an organization-level token".into(),
        )),
        (
            TokenRule::GroupScope(scope),
            TokenRestriction::Group {
                org_id,
                group_id,
                scopes,
            },
        ) => {
            if org.is_none_or(|o| &o.id != org_id) {
                return Err(ApiError::Forbidden(
                    "this token is restricted to another organization".into(),
                ));
            }
            if group.is_some_and(|g| &g.id != group_id) {
                return Err(ApiError::Forbidden(
                    "this token is restricted to another group".into(),
                ));
            }
            if !scopes.contains(&scope) {
                return Err(ApiError::Forbidden(format!(
                    "this token lacks the `{}` scope",
                    scope.as_str()
                )));
            }
            Ok(())
        }
    }
}

fn check_role(rule: Rule, role: Option<Role>) -> Result<(), ApiError> {
    match (rule.target, role) {
        (Target::Public | Target::Account, _) => Ok(()),
        (_, Some(role)) if role >= rule.min_role => Ok(()),
        _ => Err(ApiError::Forbidden(format!(
            "this needs the {} role or higher in the organization",
            rule.min_role
        ))),
    }
}
