//! The route table, and one module per resource named after its URL.
//!
//! | URL | module |
//! |---|---|
//! | `/health`, `/openapi.json` | [`health`], `crate::openapi` |
//! | `/v1/auth/login`, `/v1/auth/validate`, `/v1/auth/api-tokens/validate` | [`auth`] |
//! | `/v1/auth/api-tokens…`, `/v2/auth/api-tokens…` | [`api_tokens`] |
//! | `/v1/user`, `/v1/current-user`, `/v1/user/invites…` | [`user`] |
//! | `/v1/admin/users`, `/v1/admin/organizations/{org}/plan` | [`admin`] |
//! | `/v1/admin/nodes`, `/v1/admin/quarantine…` | [`nodes`] |
//! | `/v1/organizations`, `/v2/organizations`, `/v1/organizations/{org}` | [`organizations`] |
//! | `/v1/organizations/{org}/members…` | [`members`] |
//! | `/v2/organizations/{org}/invites…`, `/v1/organizations/{org}/invite(s)…` | [`invites`] |
//! | `/v1/organizations/{org}/api-tokens…` | [`organization_tokens`] |
//! | `/v1/organizations/{org}/audit-logs` | [`audit_logs`] |
//! | `/v1/locations…`, `/v2/…/locations`, `/v1/closest-region` | [`locations`] |
//! | `/v1/organizations/{org}/groups…` and `/v1/groups…` | [`groups`] |
//! | `…/groups/{group}/aws/migration/…` | [`aws_migration`] |
//! | `…/databases…` | [`databases`]; legacy `POST`/`DELETE …/instances…`, `…/wait`: [`instances`] |
//! | `/v1/plans`, `…/subscription`, `…/invoices`, `…/billing/…`, `/v1/organizations/stripe-customer` | [`billing`] |
//! | `/releases/latest` | [`releases`] |
//! | `/v3/organizations/{orgId}/…` | [`v3`] (the v1 handlers, records by id) |
//! | `/v2/organizations/{org}/jwks…`, `…/jwks-template` | [`jwks`] |
//! | `…/databases/{db}/auth/certificates` | [`client_certificates`] |
//!
//! Every route is declared once, in [`table`], with the [`Action`] it performs: the
//! router injects that action into the request, the [`crate::auth::Access`] extractor
//! authorizes it, the OpenAPI document and the authorization-matrix test read the same
//! table.

mod admin;
mod api_tokens;
mod audit_logs;
mod auth;
mod aws_migration;
mod backups;
mod billing;
mod client_certificates;
mod databases;
mod groups;
mod health;
mod instances;
mod internal;
mod invites;
mod jwks;
mod locations;
mod members;
mod nodes;
mod organization_tokens;
mod organizations;
mod releases;
pub(crate) mod usage;
mod user;
mod v3;

use crate::auth::Action;
use crate::state::AppState;
use axum::http::Method;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Extension, Router};
use utoipa::openapi::{RefOr, Schema};

/// Registers a body schema (and the schemas it refers to) and returns a reference to it.
pub type SchemaFn = fn(&mut Vec<(String, RefOr<Schema>)>) -> RefOr<Schema>;

/// An array of `T`, inline: utoipa names every `Vec<_>` "Vec", so registering vectors
/// under their name would let one list's schema stand for all the others.
pub(crate) fn list_schema<T: utoipa::ToSchema>(
    out: &mut Vec<(String, RefOr<Schema>)>,
) -> RefOr<Schema> {
    utoipa::openapi::ArrayBuilder::new()
        .items(schema::<T>(out))
        .into()
}

pub(crate) fn schema<T: utoipa::ToSchema>(out: &mut Vec<(String, RefOr<Schema>)>) -> RefOr<Schema> {
    let name = T::name().into_owned();
    out.push((name.clone(), T::schema()));
    T::schemas(out);
    RefOr::Ref(utoipa::openapi::Ref::from_schema_name(name))
}

/// One route: what the OpenAPI document and the authorization test need to know.
#[derive(Clone)]
pub struct RouteSpec {
    pub method: Method,
    /// Template in axum/OpenAPI syntax: `/v1/organizations/{org}/groups/{group}`.
    pub path: String,
    pub action: Action,
    pub summary: &'static str,
    pub request: Option<SchemaFn>,
    pub response: SchemaFn,
    /// Query parameters, documented.
    pub query: &'static [&'static str],
}

pub(crate) struct Route {
    pub spec: RouteSpec,
    pub handler: MethodRouter<AppState>,
}

impl Route {
    pub fn new<H, T>(
        method: Method,
        path: impl Into<String>,
        action: Action,
        summary: &'static str,
        handler: H,
    ) -> Route
    where
        H: axum::handler::Handler<T, AppState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone()).expect("standard method");
        Route {
            spec: RouteSpec {
                method,
                path: path.into(),
                action,
                summary,
                request: None,
                response: schema::<atoll_types::Empty>,
                query: &[],
            },
            handler: on(filter, handler),
        }
    }

    pub fn request<B: utoipa::ToSchema>(mut self) -> Route {
        self.spec.request = Some(schema::<B>);
        self
    }

    pub fn response<B: utoipa::ToSchema>(mut self) -> Route {
        self.spec.response = schema::<B>;
        self
    }

    /// Lifts the JSON body limit (`max_body_bytes`) for a handler that holds its body to
    /// a limit of its own while reading it.
    pub fn without_json_body_limit(mut self) -> Route {
        self.handler = self
            .handler
            .layer(axum::extract::DefaultBodyLimit::disable());
        self
    }

    /// A bare JSON array of `T` (use this, not `response::<Vec<T>>()`; see [`list_schema`]).
    pub fn response_list<T: utoipa::ToSchema>(mut self) -> Route {
        self.spec.response = list_schema::<T>;
        self
    }

    pub fn query(mut self, names: &'static [&'static str]) -> Route {
        self.spec.query = names;
        self
    }
}

fn all_routes() -> Vec<Route> {
    let mut routes = Vec::new();
    routes.extend(health::routes());
    routes.extend(crate::openapi::routes());
    routes.extend(auth::routes());
    routes.extend(api_tokens::routes());
    routes.extend(user::routes());
    routes.extend(admin::routes());
    routes.extend(nodes::routes());
    routes.extend(internal::routes());
    routes.extend(organizations::routes());
    routes.extend(members::routes());
    routes.extend(invites::routes());
    routes.extend(organization_tokens::routes());
    routes.extend(audit_logs::routes());
    routes.extend(locations::routes());
    routes.extend(groups::routes());
    routes.extend(databases::routes());
    routes.extend(backups::routes());
    routes.extend(usage::routes());
    routes.extend(billing::routes());
    routes.extend(instances::routes());
    routes.extend(aws_migration::routes());
    routes.extend(releases::routes());
    routes.extend(v3::routes());
    routes.extend(jwks::routes());
    routes.extend(client_certificates::routes());
    routes
}

/// Every route of the control plane.
pub fn table() -> Vec<RouteSpec> {
    all_routes().into_iter().map(|r| r.spec).collect()
}

pub(crate) fn router() -> Router<AppState> {
    let mut router = Router::new();
    for route in all_routes() {
        let handler = route.handler.layer(Extension(route.spec.action));
        router = router.route(&route.spec.path, handler);
    }
    router
}

/// How long a request waits for the store to answer after a change whose commit failed.
const READ_BACK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// After a write whose answer was lost (the store's connection ended around its commit),
/// what it did: `read` (the record as the store holds it now) asked again, with growing
/// pauses, until the store answers or [`READ_BACK_WAIT`] passes (`None`: still unknown).
pub(crate) async fn read_back<T, F, Fut>(what: &str, mut read: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, atoll_meta::StoreError>>,
{
    let deadline = tokio::time::Instant::now() + READ_BACK_WAIT;
    let mut delay = std::time::Duration::from_millis(50);
    loop {
        match read().await {
            Ok(now) => return Some(now),
            Err(e) if tokio::time::Instant::now() + delay < deadline => {
                tracing::warn!(what, error = %e, "cannot read back a change whose commit failed yet: retrying");
            }
            Err(e) => {
                tracing::warn!(what, error = %e, "cannot read back a change whose commit failed");
                return None;
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(1));
    }
}
