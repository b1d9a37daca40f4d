//! The authorization matrix: every route of the route table × every kind of principal,
//! asserting the exact status.
//!
//! The expectations below are written independently of the server's policy table: they
//! restate, route by route, who may do what. A route without an entry here fails the test,
//! and so does an entry for a route that no longer exists.
//!
//! Every cell runs with a request that would succeed for an allowed caller (the fixture
//! prepares what the route needs), so "allowed" is asserted as exactly 200.

use crate::harness::{unique, TestApp, PASSWORD};
use atoll_control::routes::{table, RouteSpec};
use atoll_types::Scope;
use atoll_types::{Role, Scope as S};
use reqwest::Method;
use serde_json::{json, Value};

/// The kinds of caller of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    NoToken,
    Malformed,
    Expired,
    Revoked,
    /// The owner's unrestricted (deprecated) API token.
    Unrestricted,
    /// Organization-scoped to the organization of the path (minted by the owner).
    OrgScoped,
    /// Organization-scoped to another organization of the owner.
    OtherOrgScoped,
    /// Group-scoped to the group of the path, with one scope (minted by the owner).
    GroupScoped(Scope),
    /// Group-scoped (full access) to another group of the same organization.
    OtherGroupScoped,
    /// Login tokens of members of the organization with each role.
    Login(Role),
    /// The instance administrator, who is not a member of the test organization.
    InstanceAdmin,
    /// The web console: a viewer's login token in the session cookie, with the CSRF
    /// header. It must be exactly the viewer's login token.
    Session,
    /// The owner's login token in the session cookie *without* the CSRF header, as a
    /// forged cross-site request would send it: refused (403) wherever a credential counts.
    SessionWithoutCsrf,
}

fn kinds() -> Vec<Kind> {
    let mut kinds = vec![
        Kind::NoToken,
        Kind::Malformed,
        Kind::Expired,
        Kind::Revoked,
        Kind::Unrestricted,
        Kind::OrgScoped,
        Kind::OtherOrgScoped,
    ];
    kinds.extend(Scope::ALL.into_iter().map(Kind::GroupScoped));
    kinds.push(Kind::OtherGroupScoped);
    kinds.extend(Role::ALL.into_iter().map(Kind::Login));
    kinds.push(Kind::InstanceAdmin);
    kinds.push(Kind::Session);
    kinds.push(Kind::SessionWithoutCsrf);
    kinds
}

/// Which tokens may act, as the matrix expects it.
#[derive(Debug, Clone, Copy)]
enum Tokens {
    Any,
    /// Login and unrestricted tokens only.
    UserLevel,
    /// Login tokens only (not even unrestricted API tokens).
    LoginOnly,
    /// Never group-scoped tokens.
    OrgLevel,
    /// Group-scoped tokens with this scope too.
    Scope(Scope),
}

#[derive(Debug, Clone, Copy)]
enum Who {
    Public,
    /// The data nodes' own routes: the node secret only, never a user's token (401).
    NodeOnly,
    Account(Tokens),
    InstanceAdminOnly,
    /// A route of the test team organization.
    Team {
        tokens: Tokens,
        min_role: Role,
        group_in_path: bool,
    },
    /// An un-prefixed route acting on the caller's personal organization.
    Personal,
}

fn expectation(method: &Method, path: &str) -> Option<Who> {
    use Tokens::*;
    use Who::*;
    let team = |tokens, min_role| Team {
        tokens,
        min_role,
        group_in_path: false,
    };
    let team_group = |tokens, min_role| Team {
        tokens,
        min_role,
        group_in_path: true,
    };
    let m = method.as_str();
    Some(match (m, path) {
        ("GET", "/health" | "/openapi.json" | "/v1/closest-region")
        | ("POST", "/v1/auth/login" | "/v1/auth/session")
        | ("DELETE", "/v1/auth/session") => Public,
        (
            "GET",
            "/v1/auth/validate" | "/v1/auth/api-tokens/validate" | "/v1/user" | "/v1/current-user",
        ) => Account(Any),
        (
            "GET",
            "/v1/organizations"
            | "/v2/organizations"
            | "/v1/locations"
            | "/v1/locations/{location}",
        ) => Account(Any),
        ("GET", "/v1/auth/api-tokens")
        | ("POST", "/v1/auth/api-tokens/{name}" | "/v2/auth/api-tokens/{name}") => {
            Account(UserLevel)
        }
        ("DELETE", "/v1/auth/api-tokens/{name}") => Account(UserLevel),
        ("GET", "/v1/user/invites")
        | ("POST", "/v1/user/invites/{org}/accept" | "/v1/organizations") => Account(UserLevel),
        ("POST", "/v1/admin/users") => InstanceAdminOnly,
        ("POST", "/v1/auth/invalidate") => Account(LoginOnly),

        ("GET", "/v1/organizations/{org}") => team(OrgLevel, Role::Viewer),
        ("PATCH", "/v1/organizations/{org}") => team(OrgLevel, Role::Admin),
        ("DELETE", "/v1/organizations/{org}") => team(OrgLevel, Role::Owner),
        (
            "GET",
            "/v1/organizations/{org}/members" | "/v1/organizations/{org}/members/{username}",
        ) => team(OrgLevel, Role::Viewer),
        (
            "POST",
            "/v1/organizations/{org}/members" | "/v1/organizations/{org}/members/{username}",
        ) => team(OrgLevel, Role::Admin),
        ("PATCH" | "DELETE", "/v1/organizations/{org}/members/{username}") => {
            team(OrgLevel, Role::Admin)
        }
        ("GET" | "POST", "/v2/organizations/{org}/invites") => team(OrgLevel, Role::Admin),
        (
            "DELETE",
            "/v2/organizations/{org}/invites/{email}" | "/v1/organizations/{org}/invites/{email}",
        ) => team(OrgLevel, Role::Admin),
        ("POST", "/v1/organizations/{org}/invite") | ("GET", "/v1/organizations/{org}/invites") => {
            team(OrgLevel, Role::Admin)
        }
        ("GET", "/v1/organizations/{org}/api-tokens")
        | ("DELETE", "/v1/organizations/{org}/api-tokens/{token_id}") => {
            team(OrgLevel, Role::Viewer)
        }
        ("GET", "/v1/organizations/{org}/audit-logs") => team(OrgLevel, Role::Admin),
        ("GET", "/v2/organizations/{org}/locations") => team(Scope(S::Read), Role::Viewer),
        ("GET", "/v2/locations") => Personal,

        ("GET", "/v1/organizations/{org}/groups") => team(Scope(S::Read), Role::Viewer),
        ("POST", "/v1/organizations/{org}/groups") => team(OrgLevel, Role::Member),
        (
            "GET",
            "/v1/organizations/{org}/groups/{group}"
            | "/v1/organizations/{org}/groups/{group}/configuration",
        ) => team_group(Scope(S::Read), Role::Viewer),
        ("GET", "/v1/organizations/{org}/groups/{group}/locations/{location}/wait") => {
            team_group(Scope(S::Read), Role::Viewer)
        }
        ("DELETE", "/v1/organizations/{org}/groups/{group}") => team_group(OrgLevel, Role::Member),
        ("POST", "/v1/organizations/{org}/groups/{group}/transfer") => {
            team_group(OrgLevel, Role::Admin)
        }
        ("PATCH", "/v1/organizations/{org}/groups/{group}/configuration")
        | ("POST", "/v1/organizations/{org}/groups/{group}/unarchive")
        | ("POST", "/v1/organizations/{org}/groups/{group}/rename")
        | ("POST", "/v1/organizations/{org}/groups/{group}/update")
        | ("POST" | "DELETE", "/v1/organizations/{org}/groups/{group}/locations/{location}") => {
            team_group(Scope(S::GroupConfigure), Role::Member)
        }
        ("POST", "/v1/organizations/{org}/groups/{group}/failover") => {
            team_group(Scope(S::GroupConfigure), Role::Admin)
        }
        ("POST", "/v1/organizations/{org}/groups/{group}/auth/tokens") => {
            team_group(Scope(S::GroupMintToken), Role::Member)
        }
        ("POST", "/v1/organizations/{org}/groups/{group}/auth/rotate") => {
            team_group(Scope(S::GroupRotateCreds), Role::Member)
        }

        ("GET", "/v1/organizations/{org}/databases") => team(Scope(S::Read), Role::Viewer),
        // The group is named in the body: a token pinned to another group is refused.
        ("POST", "/v1/organizations/{org}/databases") => {
            team_group(Scope(S::DbCreate), Role::Member)
        }
        ("POST", "/v1/organizations/{org}/databases/dumps") => {
            team(Scope(S::DbCreate), Role::Member)
        }
        ("GET", "/v1/organizations/{org}/databases/{db}")
        | ("GET", "/v1/organizations/{org}/databases/{db}/configuration")
        | ("GET", "/v1/organizations/{org}/databases/{db}/instances")
        | ("GET", "/v1/organizations/{org}/databases/{db}/instances/{instance}") => {
            team_group(Scope(S::Read), Role::Viewer)
        }
        ("DELETE", "/v1/organizations/{org}/databases/{db}")
        | ("POST", "/v1/organizations/{org}/databases/{db}/restore") => {
            team_group(Scope(S::DbDelete), Role::Member)
        }
        ("GET", "/v1/organizations/{org}/databases/{db}/backups") => {
            team_group(Scope(S::Read), Role::Viewer)
        }
        ("PATCH", "/v1/organizations/{org}/databases/{db}/configuration")
        | ("POST", "/v1/organizations/{org}/databases/{db}/wakeup")
        | ("POST", "/v1/organizations/{org}/databases/{db}/update") => {
            team_group(Scope(S::DbConfigure), Role::Member)
        }
        // As a group transfer: it gives the data away (issue 26).
        ("POST", "/v1/organizations/{org}/databases/{db}/transfer") => {
            team_group(OrgLevel, Role::Admin)
        }
        ("POST", "/v1/organizations/{org}/databases/{db}/auth/tokens")
        | ("POST", "/v1/organizations/{org}/databases/{db}/auth/certificates") => {
            team_group(Scope(S::DbMintToken), Role::Member)
        }
        ("POST", "/v1/organizations/{org}/databases/{db}/auth/rotate")
        | ("POST", "/v1/organizations/{org}/databases/{db}/encryption/rotate") => {
            team_group(Scope(S::DbRotateCreds), Role::Member)
        }
        ("GET", "/v1/organizations/{org}/deleted-databases") => team(OrgLevel, Role::Viewer),
        ("GET", "/v1/organizations/{org}/databases/{db}/usage")
        | ("GET", "/v1/organizations/{org}/databases/{db}/stats")
        | ("GET", "/v1/organizations/{org}/databases/{db}/usage/queries") => {
            team_group(Scope(S::Read), Role::Viewer)
        }
        ("GET", "/v1/organizations/{org}/usage") => team(OrgLevel, Role::Viewer),
        ("GET", "/v1/usage" | "/v1/subscription" | "/v1/invoices") => Personal,
        ("GET", "/v1/plans") => Account(Any),
        ("GET", "/v1/organizations/{org}/plans" | "/v1/organizations/{org}/subscription") => {
            team(OrgLevel, Role::Viewer)
        }
        ("GET", "/v1/organizations/{org}/invoices") => team(OrgLevel, Role::Admin),
        ("POST", "/v1/organizations/{org}/deleted-databases/{id}/restore") => {
            team_group(Scope(S::DbCreate), Role::Member)
        }
        ("POST", "/v1/admin/organizations/{org}/plan") => InstanceAdminOnly,
        // v3: records by id, authorized as their v1 twins.
        ("GET", "/v3/organizations/{orgId}/databases" | "/v3/organizations/{orgId}/groups") => {
            team(Scope(S::Read), Role::Viewer)
        }
        ("POST", "/v3/organizations/{orgId}/databases")
        | ("POST", "/v3/organizations/{orgId}/databases/{dbId}/restore") => {
            team_group(Scope(S::DbCreate), Role::Member)
        }
        ("GET", "/v3/organizations/{orgId}/databases/{dbId}")
        | ("GET", "/v3/organizations/{orgId}/groups/{groupId}") => {
            team_group(Scope(S::Read), Role::Viewer)
        }
        ("DELETE", "/v3/organizations/{orgId}/databases/{dbId}") => {
            team_group(Scope(S::DbDelete), Role::Member)
        }
        ("POST", "/v3/organizations/{orgId}/databases/{dbId}/auth/tokens") => {
            team_group(Scope(S::DbMintToken), Role::Member)
        }
        ("POST", "/v3/organizations/{orgId}/groups/{groupId}/auth/tokens") => {
            team_group(Scope(S::GroupMintToken), Role::Member)
        }
        // The hosted service's routes the turso CLI calls (docs/API.md).
        ("GET", "/releases/latest") => Public,
        ("POST", "/v1/organizations/stripe-customer") => Account(UserLevel),
        (
            "POST",
            "/v1/organizations/{org}/subscription" | "/v1/organizations/{org}/billing/portal",
        )
        | ("GET" | "PUT", "/v1/organizations/{org}/billing/customer")
        | ("GET", "/v1/organizations/{org}/billing/payment-methods") => team(OrgLevel, Role::Admin),
        ("POST", "/v1/subscription" | "/v1/billing/portal")
        | ("GET" | "PUT", "/v1/billing/customer")
        | ("GET", "/v1/billing/payment-methods") => Personal,
        ("POST", "/v1/organizations/{org}/databases/{db}/instances")
        | ("DELETE", "/v1/organizations/{org}/databases/{db}/instances/{instance}") => {
            team_group(Scope(S::DbConfigure), Role::Member)
        }
        ("GET", "/v1/organizations/{org}/databases/{db}/instances/{instance}/wait")
        | ("GET", "/v1/organizations/{org}/groups/{group}/aws/migration/info") => {
            team_group(Scope(S::Read), Role::Viewer)
        }
        (
            "POST",
            "/v1/organizations/{org}/groups/{group}/aws/migration/start"
            | "/v1/organizations/{org}/groups/{group}/aws/migration/abort",
        ) => team_group(OrgLevel, Role::Admin),
        ("GET", "/v2/organizations/{org}/jwks" | "/v2/organizations/{org}/jwks-template") => {
            team(OrgLevel, Role::Viewer)
        }
        ("PUT" | "DELETE", "/v2/organizations/{org}/jwks/{name}") => team(OrgLevel, Role::Admin),
        ("GET", "/v1/admin/nodes" | "/v1/admin/quarantine")
        | ("POST", "/v1/admin/quarantine/purge")
        | ("POST" | "DELETE", "/v1/admin/nodes/{node}/drain") => InstanceAdminOnly,
        ("POST", "/v1/internal/nodes/heartbeat" | "/v1/internal/nodes/{node}/desired-state")
        | ("GET", "/v1/internal/routes/{label}" | "/v1/internal/nodes/{node}/databases") => {
            NodeOnly
        }
        (_, p)
            if p.starts_with("/v1/groups")
                || p.starts_with("/v1/databases")
                || p.starts_with("/v1/deleted-databases") =>
        {
            Personal
        }
        _ => return None,
    })
}

/// What an allowed caller gets: 200, except on the hosted service's routes a self-hosted
/// server cannot honour, which answer 400 `not_available_on_self_hosted` (only once the
/// caller is authorized: a refused caller still gets 401, 403 or 404).
fn allowed_status(method: &Method, template: &str) -> u16 {
    let template = template
        .strip_prefix("/v1/organizations/{org}")
        .or_else(|| template.strip_prefix("/v1"))
        .unwrap_or(template);
    match (method.as_str(), template) {
        ("POST", "/billing/portal")
        | ("PUT", "/billing/customer")
        | ("POST", "/databases/{db}/instances")
        | ("DELETE", "/databases/{db}/instances/{instance}")
        | ("POST", "/groups/{group}/aws/migration/start") => 400,
        // The matrix's database is not encrypted: nothing to rotate (authorized, refused).
        ("POST", "/databases/{db}/encryption/rotate") => 400,
        // `atoll dev` runs its one node in process: nothing to drain, nowhere to fail
        // over to.
        ("POST" | "DELETE", "/admin/nodes/{node}/drain") | ("POST", "/groups/{group}/failover") => {
            400
        }
        _ => 200,
    }
}

fn expected_status(who: Who, kind: Kind) -> u16 {
    if matches!(who, Who::Public) {
        return 200;
    }
    if matches!(who, Who::NodeOnly) {
        return 401;
    }
    if matches!(
        kind,
        Kind::NoToken | Kind::Malformed | Kind::Expired | Kind::Revoked
    ) {
        return 401;
    }
    if kind == Kind::SessionWithoutCsrf {
        return 403;
    }
    // A console session is its login token, nothing more and nothing less.
    let kind = if kind == Kind::Session {
        Kind::Login(Role::Viewer)
    } else {
        kind
    };
    let user_level = matches!(
        kind,
        Kind::Unrestricted | Kind::Login(_) | Kind::InstanceAdmin
    );
    match who {
        Who::Public => 200,
        Who::NodeOnly => 401,
        Who::Account(Tokens::Any) => 200,
        Who::Account(Tokens::LoginOnly) => {
            if matches!(kind, Kind::Login(_) | Kind::InstanceAdmin) {
                200
            } else {
                403
            }
        }
        Who::Account(_) => {
            if user_level {
                200
            } else {
                403
            }
        }
        Who::InstanceAdminOnly => {
            if kind == Kind::InstanceAdmin {
                200
            } else {
                403
            }
        }
        // The caller's own personal organization, of which they are the owner: only tokens
        // scoped to the team organization fall outside it.
        Who::Personal => {
            if user_level {
                200
            } else {
                403
            }
        }
        Who::Team {
            tokens,
            min_role,
            group_in_path,
        } => {
            // Scoped tokens and the unrestricted one are the owner's.
            let role = match kind {
                Kind::InstanceAdmin => return 404,
                Kind::OtherOrgScoped => return 403,
                Kind::Login(role) => role,
                _ => Role::Owner,
            };
            let token_ok = match (kind, tokens) {
                (Kind::GroupScoped(held), Tokens::Scope(needed)) => held == needed,
                (Kind::OtherGroupScoped, Tokens::Scope(_)) => !group_in_path,
                (Kind::GroupScoped(_) | Kind::OtherGroupScoped, _) => false,
                _ => true,
            };
            if !token_ok || role < min_role {
                403
            } else {
                200
            }
        }
    }
}

/// The users every world shares.
struct Users {
    owner: String,
    admin: String,
    member: String,
    viewer: String,
    /// Added, changed and removed by the member routes.
    victim: String,
    /// A viewer who uses the console (the session cookie); a user of their own, so that
    /// logging out everywhere as the viewer does not end this session.
    browser: String,
    logins: std::collections::HashMap<String, String>,
}

/// A team organization with members of every role, two groups, and a second
/// organization; and the tokens scoped to them.
struct World {
    org: String,
    other_org: String,
    g1: String,
    org_scoped: String,
    other_org_scoped: String,
    group_scoped: Vec<(Scope, String)>,
    other_group_scoped: String,
}

async fn world(app: &TestApp, users: &Users) -> World {
    let owner = &users.logins[&users.owner];
    let org = app.team(owner, &unique("world")).await;
    let other_org = app.team(owner, &unique("elsewhere")).await;
    for (user, role) in [
        (&users.admin, "admin"),
        (&users.member, "member"),
        (&users.viewer, "viewer"),
        (&users.browser, "viewer"),
    ] {
        app.add_member(&org, owner, user, role).await;
        // Everyone may receive transferred groups in the other organization.
        app.add_member(&other_org, owner, user, "admin").await;
    }
    app.add_member(&other_org, owner, "admin", "admin").await;
    let (g1, g2) = (unique("g"), unique("g"));
    app.group(&org, owner, &g1).await;
    app.group(&org, owner, &g2).await;
    // Transferred databases land in the receiving organization's group of the same name.
    app.group(&other_org, owner, &g1).await;

    let mut group_scoped = Vec::new();
    for scope in Scope::ALL {
        let token = app
            .api_token(
                owner,
                json!({"organization": org, "group": g1, "scopes": [scope.as_str()]}),
            )
            .await;
        group_scoped.push((scope, token));
    }
    World {
        org_scoped: app.api_token(owner, json!({"organization": org})).await,
        other_org_scoped: app
            .api_token(owner, json!({"organization": other_org}))
            .await,
        other_group_scoped: app
            .api_token(
                owner,
                json!({"organization": org, "group": g2, "scopes": ["full-access"]}),
            )
            .await,
        group_scoped,
        org,
        other_org,
        g1,
    }
}

/// A prepared request, and what to undo after it succeeded.
struct Cell {
    method: Method,
    path: String,
    body: Option<Value>,
    /// A multipart `file` instead of a JSON body.
    file: Option<String>,
    undo: Option<(Method, String, Option<Value>)>,
}

impl Cell {
    fn new(spec: &RouteSpec, path: String, body: Option<Value>) -> Cell {
        Cell {
            method: spec.method.clone(),
            path,
            body,
            file: None,
            undo: None,
        }
    }
}

/// Builds a request that succeeds for an allowed caller. `user` is the user behind the
/// principal, `login` their login token (for preparing what they will act on).
async fn prepare(
    app: &TestApp,
    users: &Users,
    world: &World,
    spec: &RouteSpec,
    user: &str,
    login: &str,
) -> Cell {
    let owner = &users.logins[&users.owner];
    let org = &world.org;
    let team_prefix = format!("/v1/organizations/{org}");
    let path = spec.path.replace("{org}", org);
    let method = spec.method.as_str();
    let template = spec.path.as_str();

    // v3 routes name the organization, the pinned group and a database of their own by id.
    if let Some(rest) = template.strip_prefix("/v3/organizations/{orgId}") {
        let org_id = app.get(&team_prefix, owner).await.expect(200)["organization"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let group_id = app
            .get(&format!("{team_prefix}/groups/{}", world.g1), owner)
            .await
            .expect(200)["group"]["uuid"]
            .as_str()
            .unwrap()
            .to_string();
        let base = format!("/v3/organizations/{org_id}");
        let database_id = |name: &str| {
            let path = format!("{team_prefix}/databases/{name}");
            async move {
                app.get(&path, owner).await.expect(200)["database"]["DbId"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        };
        let path = if rest.contains("{dbId}/restore") {
            // A paid plan keeps deleted databases restorable.
            app.post(
                &format!("/v1/admin/organizations/{org}/plan"),
                &app.admin_token,
                json!({"plan": "scaler"}),
            )
            .await
            .expect(200);
            let name = app
                .database(&team_prefix, owner, &unique("deleted"), &world.g1)
                .await;
            let id = database_id(&name).await;
            app.delete(&format!("{team_prefix}/databases/{name}"), owner)
                .await
                .expect(200);
            format!("{base}{}", rest.replace("{dbId}", &id))
        } else if rest.contains("{dbId}") {
            let name = app
                .database(&team_prefix, owner, &unique("db"), &world.g1)
                .await;
            let id = database_id(&name).await;
            format!("{base}{}", rest.replace("{dbId}", &id))
        } else {
            format!("{base}{}", rest.replace("{groupId}", &group_id))
        };
        let body = (method == "POST" && rest == "/databases")
            .then(|| json!({"name": unique("new-db"), "group_id": group_id}));
        return Cell::new(spec, path, body);
    }

    // Database routes, team and personal alike: each cell acts on a database of its own
    // (in the pinned group for team routes, in the caller's personal organization otherwise).
    if let Some(rest) = template
        .strip_prefix("/v1/organizations/{org}/databases")
        .or_else(|| template.strip_prefix("/v1/databases"))
    {
        let personal = template.starts_with("/v1/databases");
        let (prefix, prepare_token, group) = if personal {
            ("/v1".to_string(), login, "default".to_string())
        } else {
            (team_prefix.clone(), owner.as_str(), world.g1.clone())
        };
        let base = format!("{prefix}/databases");
        let db = unique("db");
        if rest.starts_with("/{db}") {
            app.database(&prefix, prepare_token, &db, &group).await;
        }
        let db_path = format!("{base}/{db}");
        let mut cell = match (method, rest) {
            ("GET", "") => Cell::new(spec, base.clone(), None),
            ("POST", "") => Cell::new(
                spec,
                base.clone(),
                Some(json!({"name": unique("new-db"), "group": group})),
            ),
            ("POST", "/dumps") => {
                let mut cell = Cell::new(spec, format!("{base}/dumps"), None);
                cell.file = Some("CREATE TABLE t (x);\nINSERT INTO t VALUES (1);\n".into());
                cell
            }
            ("PATCH", "/{db}/configuration") => Cell::new(
                spec,
                format!("{db_path}/configuration"),
                Some(json!({"block_reads": false})),
            ),
            ("POST", "/{db}/transfer") => Cell::new(
                spec,
                format!("{db_path}/transfer"),
                Some(json!({"org": world.other_org})),
            ),
            ("GET", "/{db}/instances/{instance}" | "/{db}/instances/{instance}/wait")
            | ("DELETE", "/{db}/instances/{instance}") => Cell::new(
                spec,
                format!(
                    "{db_path}{}",
                    rest.trim_start_matches("/{db}")
                        .replace("{instance}", "local")
                ),
                None,
            ),
            // To the present: inside the window of any database, and a no-op on its data.
            ("POST", "/{db}/restore") => Cell::new(
                spec,
                format!("{db_path}/restore"),
                Some(json!({"timestamp": time::OffsetDateTime::now_utc()
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap()})),
            ),
            (_, rest) => Cell::new(
                spec,
                format!("{db_path}{}", rest.trim_start_matches("/{db}")),
                None,
            ),
        };
        cell.method = spec.method.clone();
        return cell;
    }

    // Group routes, team and personal alike.
    if let Some(rest) = template
        .strip_prefix("/v1/organizations/{org}/groups")
        .or_else(|| template.strip_prefix("/v1/groups"))
    {
        let personal = template.starts_with("/v1/groups");
        let (prefix, prepare_token) = if personal {
            ("/v1".to_string(), login)
        } else {
            (team_prefix.clone(), owner.as_str())
        };
        let base = format!("{prefix}/groups");
        // Deleting and transferring need a group of their own; the rest act on the group
        // the scoped tokens are pinned to (and are undone where they change its name or
        // locations). Personal routes act on groups of the caller's personal organization.
        let consumes_group = matches!(
            (method, rest),
            ("DELETE", "/{group}") | ("POST", "/{group}/transfer")
        );
        let changes_group =
            rest == "/{group}/rename" || (rest.contains("/locations/") && method != "GET");
        let group = if rest.is_empty() {
            String::new()
        } else if consumes_group || (personal && changes_group) {
            let fresh = unique("fresh");
            app.post(
                &base,
                prepare_token,
                json!({"name": fresh, "location": "local"}),
            )
            .await
            .expect(200);
            fresh
        } else if personal {
            "default".to_string()
        } else {
            world.g1.clone()
        };
        let group_path = format!("{base}/{group}");
        let mut cell = match (method, rest) {
            ("GET", "") => Cell::new(spec, base.clone(), None),
            ("POST", "") => Cell::new(
                spec,
                base.clone(),
                Some(json!({"name": unique("new"), "location": "local"})),
            ),
            ("PATCH", "/{group}/configuration") => Cell::new(
                spec,
                format!("{group_path}/configuration"),
                Some(json!({"delete_protection": false})),
            ),
            ("POST", "/{group}/transfer") => Cell::new(
                spec,
                format!("{group_path}/transfer"),
                Some(json!({"organization": world.other_org})),
            ),
            ("POST", "/{group}/rename") => {
                let renamed = unique("renamed");
                let mut cell = Cell::new(
                    spec,
                    format!("{group_path}/rename"),
                    Some(json!({"Name": renamed})),
                );
                cell.undo = Some((
                    Method::POST,
                    format!("{base}/{renamed}/rename"),
                    Some(json!({"name": group})),
                ));
                cell
            }
            ("POST", "/{group}/locations/{location}") => {
                let mut cell =
                    Cell::new(spec, format!("{group_path}/locations/aws-us-east-1"), None);
                cell.undo = Some((
                    Method::DELETE,
                    format!("{group_path}/locations/aws-us-east-1"),
                    None,
                ));
                cell
            }
            ("DELETE", "/{group}/locations/{location}") => {
                app.post(
                    &format!("{group_path}/locations/aws-eu-west-1"),
                    prepare_token,
                    json!({}),
                )
                .await
                .expect(200);
                Cell::new(spec, format!("{group_path}/locations/aws-eu-west-1"), None)
            }
            ("POST", "/{group}/failover") => Cell::new(
                spec,
                format!("{group_path}/failover"),
                Some(json!({"location": "local"})),
            ),
            ("GET", "/{group}/locations/{location}/wait") => {
                Cell::new(spec, format!("{group_path}/locations/local/wait"), None)
            }
            (_, rest) => Cell::new(
                spec,
                format!("{group_path}{}", rest.trim_start_matches("/{group}")),
                None,
            ),
        };
        cell.method = spec.method.clone();
        return cell;
    }

    match (method, template) {
        ("POST", "/v1/auth/login" | "/v1/auth/session") => Cell::new(
            spec,
            path,
            Some(json!({"username": users.owner, "password": PASSWORD})),
        ),
        ("POST", "/v1/auth/api-tokens/{name}" | "/v2/auth/api-tokens/{name}") => {
            Cell::new(spec, path.replace("{name}", &unique("minted")), None)
        }
        ("DELETE", "/v1/auth/api-tokens/{name}") => {
            let name = unique("doomed");
            app.post(&format!("/v1/auth/api-tokens/{name}"), login, json!({}))
                .await
                .expect(200);
            Cell::new(spec, path.replace("{name}", &name), None)
        }
        ("POST", "/v1/user/invites/{org}/accept") => {
            let host = &users.logins[&users.victim];
            let inviting = app.team(host, &unique("inviting")).await;
            app.post(
                &format!("/v2/organizations/{inviting}/invites"),
                host,
                json!({"username": user}),
            )
            .await
            .expect(200);
            Cell::new(spec, format!("/v1/user/invites/{inviting}/accept"), None)
        }
        ("POST" | "DELETE", "/v1/admin/nodes/{node}/drain") => {
            Cell::new(spec, path.replace("{node}", "local"), None)
        }
        ("POST", "/v1/internal/nodes/heartbeat") => Cell::new(
            spec,
            path,
            Some(json!({
                "name": "intruder", "location": "aws-us-east-1", "hostname_suffix": "evil.example",
                "http_url": "http://evil.example", "databases": 0, "admin_url": "http://evil.example:8082"
            })),
        ),
        ("GET", "/v1/internal/routes/{label}") => {
            Cell::new(spec, path.replace("{label}", "anything-root"), None)
        }
        ("GET", "/v1/internal/nodes/{node}/databases") => {
            Cell::new(spec, path.replace("{node}", "local"), None)
        }
        ("POST", "/v1/internal/nodes/{node}/desired-state") => Cell::new(
            spec,
            path.replace("{node}", "local"),
            Some(json!({"ids": []})),
        ),
        ("POST", "/v1/admin/users") => Cell::new(
            spec,
            path,
            Some(json!({"username": unique("new-user"), "password": PASSWORD})),
        ),
        ("POST", "/v1/admin/organizations/{org}/plan") => {
            Cell::new(spec, path, Some(json!({"plan": "scaler"})))
        }
        ("GET", "/v1/organizations/{org}/audit-logs") => {
            // Audit logs are a feature of paid plans.
            app.post(
                &format!("/v1/admin/organizations/{org}/plan"),
                &app.admin_token,
                json!({"plan": "scaler"}),
            )
            .await
            .expect(200);
            Cell::new(spec, path, None)
        }
        (
            "POST",
            "/v1/organizations/{org}/deleted-databases/{id}/restore"
            | "/v1/deleted-databases/{id}/restore",
        ) => {
            // A paid plan keeps deleted databases restorable.
            let personal = template.starts_with("/v1/deleted-databases");
            let (slug, prefix, token, group) = if personal {
                (
                    user.to_string(),
                    "/v1".to_string(),
                    login,
                    "default".to_string(),
                )
            } else {
                (
                    org.clone(),
                    team_prefix.clone(),
                    owner.as_str(),
                    world.g1.clone(),
                )
            };
            app.post(
                &format!("/v1/admin/organizations/{slug}/plan"),
                &app.admin_token,
                json!({"plan": "scaler"}),
            )
            .await
            .expect(200);
            let name = unique("deleted");
            let created = app
                .post(
                    &format!("{prefix}/databases"),
                    token,
                    json!({"name": name, "group": group}),
                )
                .await
                .expect(200);
            app.delete(&format!("{prefix}/databases/{name}"), token)
                .await
                .expect(200);
            let id = created["database"]["DbId"].as_str().unwrap();
            Cell::new(spec, path.replace("{id}", id), None)
        }

        ("POST", "/v1/organizations") => {
            Cell::new(spec, path, Some(json!({"name": unique("Org")})))
        }
        ("GET", "/v1/locations/{location}") => {
            Cell::new(spec, path.replace("{location}", "local"), None)
        }
        ("PATCH", "/v1/organizations/{org}") => {
            Cell::new(spec, path, Some(json!({"overages": true})))
        }
        ("POST", "/v1/organizations/{org}/members") => {
            app.delete(&format!("{team_prefix}/members/{}", users.victim), owner)
                .await;
            Cell::new(
                spec,
                path,
                Some(json!({"username": users.victim, "role": "member"})),
            )
        }
        ("POST", "/v1/organizations/{org}/members/{username}") => {
            app.delete(&format!("{team_prefix}/members/{}", users.victim), owner)
                .await;
            Cell::new(
                spec,
                path.replace("{username}", &users.victim),
                Some(json!({"member": users.victim, "role": "member"})),
            )
        }
        ("GET", "/v1/organizations/{org}/members/{username}") => {
            Cell::new(spec, path.replace("{username}", &users.owner), None)
        }
        ("PATCH" | "DELETE", "/v1/organizations/{org}/members/{username}") => {
            app.post(
                &format!("{team_prefix}/members"),
                owner,
                json!({"username": users.victim, "role": "member"}),
            )
            .await;
            let body = (method == "PATCH").then(|| json!({"role": "viewer"}));
            Cell::new(spec, path.replace("{username}", &users.victim), body)
        }
        ("POST", "/v2/organizations/{org}/invites" | "/v1/organizations/{org}/invite") => {
            Cell::new(
                spec,
                path,
                Some(
                    json!({"email": format!("{}@example.com", unique("invitee")), "role": "viewer"}),
                ),
            )
        }
        (
            "DELETE",
            "/v2/organizations/{org}/invites/{email}" | "/v1/organizations/{org}/invites/{email}",
        ) => {
            let email = format!("{}@example.com", unique("uninvited"));
            app.post(
                &format!("/v2/organizations/{org}/invites"),
                owner,
                json!({"email": email}),
            )
            .await
            .expect(200);
            Cell::new(spec, path.replace("{email}", &email), None)
        }
        ("DELETE", "/v1/organizations/{org}/api-tokens/{token_id}") => {
            // The caller's own token; the instance administrator, who is no member, gets
            // the owner's to aim at.
            let own = app
                .post(
                    &format!("/v1/auth/api-tokens/{}", unique("own")),
                    login,
                    json!({"organization": org}),
                )
                .await;
            let minted = if own.status == 200 {
                own.body
            } else {
                app.post(
                    &format!("/v1/auth/api-tokens/{}", unique("own")),
                    owner,
                    json!({"organization": org}),
                )
                .await
                .expect(200)
            };
            Cell::new(
                spec,
                path.replace("{token_id}", minted["id"].as_str().unwrap()),
                None,
            )
        }
        // One name per world: a key set replaced again and again, never over the
        // organization's limit.
        ("PUT", "/v2/organizations/{org}/jwks/{name}") => Cell::new(
            spec,
            path.replace("{name}", "matrix"),
            Some(json!({"jwks": matrix_key_set()})),
        ),
        ("DELETE", "/v2/organizations/{org}/jwks/{name}") => {
            app.call(
                Method::PUT,
                &format!("/v2/organizations/{org}/jwks/doomed"),
                Some(owner),
                Some(json!({"jwks": matrix_key_set()})),
            )
            .await
            .expect(200);
            Cell::new(spec, path.replace("{name}", "doomed"), None)
        }
        ("GET", "/v2/organizations/{org}/jwks-template") => {
            Cell::new(spec, format!("{path}?group={}", world.g1), None)
        }
        _ => {
            assert!(!path.contains('{'), "no fixture for {method} {template}");
            Cell::new(spec, path, None)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_every_principal_as_the_policy_says() {
    let app = app!();
    // Logging out everywhere revokes the caller's login tokens, which the other routes'
    // cells still need: it runs last (and each principal kind uses its own user's login).
    let mut routes = table();
    routes.sort_by_key(|r| r.method == Method::POST && r.path == "/v1/auth/invalidate");

    // The table must cover every route, and only routes that exist.
    let missing: Vec<_> = routes
        .iter()
        .filter(|r| expectation(&r.method, &r.path).is_none())
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        missing.is_empty(),
        "routes without an authorization-matrix entry: {missing:#?}"
    );

    let mut logins = std::collections::HashMap::new();
    let names = ["owner", "admin", "member", "viewer", "victim", "browser"].map(unique);
    for name in &names {
        logins.insert(name.clone(), app.user(name).await);
    }
    let users = Users {
        owner: names[0].clone(),
        admin: names[1].clone(),
        member: names[2].clone(),
        viewer: names[3].clone(),
        victim: names[4].clone(),
        browser: names[5].clone(),
        logins,
    };
    let owner = users.logins[&users.owner].clone();
    let unrestricted = app.api_token(&owner, json!({})).await;
    let revoked_name = unique("revoked");
    let revoked = app
        .post(
            &format!("/v1/auth/api-tokens/{revoked_name}"),
            &owner,
            json!({}),
        )
        .await
        .expect(200)["token"]
        .as_str()
        .unwrap()
        .to_string();
    app.delete(&format!("/v1/auth/api-tokens/{revoked_name}"), &owner)
        .await
        .expect(200);
    let expired = app.api_token(&owner, json!({"expiration": "1s"})).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

    let mut failures = Vec::new();
    let mut cells = 0;
    for spec in &routes {
        let who = expectation(&spec.method, &spec.path).unwrap();
        // Deleting the organization ends the world; every other route shares one.
        let fresh_world_per_cell =
            spec.method == Method::DELETE && spec.path == "/v1/organizations/{org}";
        let mut shared = None;
        for kind in kinds() {
            let world = if fresh_world_per_cell || shared.is_none() {
                let w = world(&app, &users).await;
                if fresh_world_per_cell {
                    Some(w)
                } else {
                    shared = Some(w);
                    None
                }
            } else {
                None
            };
            let world = world.as_ref().or(shared.as_ref()).unwrap();
            let (token, user): (Option<String>, &str) = match kind {
                Kind::NoToken => (None, &users.owner),
                Kind::Malformed => (Some("not-a-token".into()), &users.owner),
                Kind::Expired => (Some(expired.clone()), &users.owner),
                Kind::Revoked => (Some(revoked.clone()), &users.owner),
                Kind::Unrestricted => (Some(unrestricted.clone()), &users.owner),
                Kind::OrgScoped => (Some(world.org_scoped.clone()), &users.owner),
                Kind::OtherOrgScoped => (Some(world.other_org_scoped.clone()), &users.owner),
                Kind::GroupScoped(scope) => (
                    Some(
                        world
                            .group_scoped
                            .iter()
                            .find(|(s, _)| *s == scope)
                            .unwrap()
                            .1
                            .clone(),
                    ),
                    &users.owner,
                ),
                Kind::OtherGroupScoped => (Some(world.other_group_scoped.clone()), &users.owner),
                Kind::Login(Role::Owner) => (Some(owner.clone()), &users.owner),
                Kind::Login(Role::Admin) => {
                    (Some(users.logins[&users.admin].clone()), &users.admin)
                }
                Kind::Login(Role::Member) => {
                    (Some(users.logins[&users.member].clone()), &users.member)
                }
                Kind::Login(Role::Viewer) => {
                    (Some(users.logins[&users.viewer].clone()), &users.viewer)
                }
                Kind::InstanceAdmin => (Some(app.admin_token.clone()), "admin"),
                // Logging out of the console revokes the cookie's login token: it gets
                // a session of its own, so the browser's stays for the other routes.
                Kind::Session
                    if spec.method == Method::DELETE && spec.path == "/v1/auth/session" =>
                {
                    (Some(app.login(&users.browser).await), &users.browser)
                }
                Kind::Session => (Some(users.logins[&users.browser].clone()), &users.browser),
                Kind::SessionWithoutCsrf => (Some(owner.clone()), &users.owner),
            };
            let login = if user == "admin" {
                app.admin_token.clone()
            } else {
                users.logins[user].clone()
            };
            let cell = prepare(&app, &users, world, spec, user, &login).await;
            // A console session sends its login token as the cookie; everyone else as a
            // bearer token.
            let headers: Vec<(&str, String)> = match (kind, token.as_deref()) {
                (Kind::Session | Kind::SessionWithoutCsrf, Some(token)) => {
                    let mut headers = vec![("Cookie", format!("atoll_session={token}"))];
                    if kind == Kind::Session {
                        headers.push(("X-Atoll-CSRF", "1".to_string()));
                    }
                    headers
                }
                (_, Some(token)) => vec![("Authorization", format!("Bearer {token}"))],
                (_, None) => Vec::new(),
            };
            let reply = match &cell.file {
                Some(file) => app.post_file_with_headers(&cell.path, &headers, file).await,
                None => {
                    app.call_with_headers(
                        cell.method.clone(),
                        &cell.path,
                        &headers,
                        cell.body.clone(),
                    )
                    .await
                }
            };

            cells += 1;
            let expected = match expected_status(who, kind) {
                200 => allowed_status(&spec.method, &spec.path),
                refused => refused,
            };
            if reply.status != expected {
                failures.push(format!(
                    "{} {} as {kind:?}: expected {expected}, got {} {}",
                    spec.method, spec.path, reply.status, reply.body
                ));
            }
            if reply.status == 200 {
                if let Some((method, path, body)) = cell.undo {
                    app.call(method, &path, Some(&login), body)
                        .await
                        .expect(200);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cells} cells wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "authorization matrix: {} routes × {} principals = {cells} cells",
        routes.len(),
        kinds().len()
    );
}

/// An inline key set of one Ed25519 public key.
fn matrix_key_set() -> Value {
    json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "matrix", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]})
}
