//! `GET /openapi.json`: the OpenAPI document, generated from the route table and the wire
//! types, so it cannot disagree with the router.

use crate::auth::{Action, Target};
use crate::routes::{schema, table, Route, RouteSpec};
use atoll_types::ErrorBody;
use axum::http::Method;
use axum::Json;
use utoipa::openapi::path::{
    HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::{ResponseBuilder, ResponsesBuilder};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, PathsBuilder, Required,
};

pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::GET,
        "/openapi.json",
        Action::ReadOpenApi,
        "This OpenAPI document",
        serve,
    )]
}

async fn serve() -> Json<OpenApi> {
    Json(document())
}

pub fn document() -> OpenApi {
    let mut schemas = Vec::new();
    let error_ref = schema::<ErrorBody>(&mut schemas);
    let mut paths: Vec<(String, PathItem)> = Vec::new();
    for spec in table() {
        let operation = operation(&spec, &mut schemas, &error_ref);
        let method = http_method(&spec.method);
        match paths.iter_mut().find(|(p, _)| *p == spec.path) {
            Some((_, item)) => item.merge_operations(PathItem::new(method, operation)),
            None => paths.push((spec.path.clone(), PathItem::new(method, operation))),
        }
    }
    let mut builder = PathsBuilder::new();
    for (path, item) in paths {
        builder = builder.path(path, item);
    }
    let mut components = ComponentsBuilder::new().security_scheme(
        "bearerAuth",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    for (name, schema) in schemas {
        components = components.schema(name, schema);
    }
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Atoll platform API")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Turso-compatible control plane of Atoll. Errors are {\"error\", \"code\"}.",
                ))
                .build(),
        )
        .paths(builder.build())
        .components(Some(components.build()))
        .build()
}

fn http_method(method: &Method) -> HttpMethod {
    match *method {
        Method::POST => HttpMethod::Post,
        Method::PUT => HttpMethod::Put,
        Method::PATCH => HttpMethod::Patch,
        Method::DELETE => HttpMethod::Delete,
        _ => HttpMethod::Get,
    }
}

fn operation(
    spec: &RouteSpec,
    schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::Schema>)>,
    error_ref: &utoipa::openapi::RefOr<utoipa::openapi::Schema>,
) -> utoipa::openapi::path::Operation {
    let json = |schema| ContentBuilder::new().schema(Some(schema)).build();
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content("application/json", json(error_ref.clone()))
            .build()
    };
    let mut responses = ResponsesBuilder::new().response(
        "200",
        ResponseBuilder::new()
            .description("Success")
            .content("application/json", json((spec.response)(schemas)))
            .build(),
    );
    let rule = spec.action.rule();
    let public = rule.target == Target::Public;
    if !public {
        responses = responses
            .response(
                "401",
                error("Missing, malformed, unknown, expired or revoked token"),
            )
            .response(
                "403",
                error("The token or the user's role does not allow this"),
            );
    }
    // A body (even an undocumented one, like a multipart upload), a query or a path
    // parameter can each be malformed.
    let takes_input = spec.request.is_some()
        || !spec.query.is_empty()
        || spec.path.contains('{')
        || matches!(spec.method, Method::POST | Method::PUT | Method::PATCH);
    if takes_input {
        responses = responses.response("400", error("Invalid request"));
    }
    if matches!(
        spec.action,
        Action::UpdateOrganization
            | Action::ConfigureDatabase
            | Action::CreateDatabase
            | Action::RestoreDatabase
    ) || spec.path.ends_with("/jwks-template")
    {
        // Settings Turso has and Atoll does not (`require_mfa`, `allowed_aws_vpc_ids`,
        // `seed.timestamp`, restoring under a new name, fine-grained permissions in a JWKS
        // template) are refused rather than ignored: see docs/API.md.
        responses = responses.response(
            "501",
            error("Asks for a feature this server does not have (code not_available)"),
        );
    }
    if spec.action == Action::Login {
        // Public, but it checks the credentials it is given, throttles guessing, and
        // refuses browsers' requests from other sites (login CSRF).
        responses = responses
            .response("401", error("Wrong username or password"))
            .response(
                "403",
                error("A browser request from another site (Sec-Fetch-Site, or a foreign Origin)"),
            )
            .response(
                "429",
                error("Too many failed logins for this username: wait Retry-After seconds"),
            );
    }
    // Resources named by the path, and the quarantined database a purge may name in its
    // body.
    if matches!(rule.target, Target::Organization | Target::Group)
        || spec.path.contains('{')
        || spec.action == Action::PurgeQuarantine
    {
        responses = responses.response("404", error("Not found"));
    }
    if matches!(spec.method, Method::POST | Method::PATCH | Method::DELETE) && !public {
        responses = responses.response("409", error("Conflicts with the current state"));
    }
    let mut builder = OperationBuilder::new()
        .summary(Some(spec.summary))
        .operation_id(Some(operation_id(spec)))
        .responses(responses.build());
    for name in path_parameters(&spec.path) {
        builder = builder.parameter(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .schema(Some(
                    utoipa::openapi::ObjectBuilder::new()
                        .schema_type(utoipa::openapi::Type::String),
                ))
                .build(),
        );
    }
    for name in spec.query {
        builder = builder.parameter(
            ParameterBuilder::new()
                .name(*name)
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .schema(Some(
                    utoipa::openapi::ObjectBuilder::new()
                        .schema_type(utoipa::openapi::Type::String),
                ))
                .build(),
        );
    }
    if let Some(request) = spec.request {
        builder = builder.request_body(Some(
            RequestBodyBuilder::new()
                .content("application/json", json(request(schemas)))
                .required(Some(Required::False))
                .build(),
        ));
    }
    if !public {
        builder = builder.security(SecurityRequirement::new("bearerAuth", Vec::<String>::new()));
    }
    builder.build()
}

fn path_parameters(path: &str) -> Vec<String> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(String::from)
        .collect()
}

fn operation_id(spec: &RouteSpec) -> String {
    let mut id = spec.method.as_str().to_lowercase();
    for segment in spec.path.split('/').filter(|s| !s.is_empty()) {
        id.push('_');
        id.push_str(&segment.replace(['{', '}', '.'], "").replace('-', "_"));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Components are referred to by name: two different schemas registered under one name
    /// would make one stand for the other (as `Vec<Organization>` and `Vec<TopQuery>`,
    /// both named "Vec" by utoipa, once did).
    #[test]
    fn every_component_name_has_one_schema() {
        let mut schemas = Vec::new();
        for spec in table() {
            (spec.response)(&mut schemas);
            if let Some(request) = spec.request {
                request(&mut schemas);
            }
        }
        let mut seen: HashMap<String, String> = HashMap::new();
        for (name, schema) in schemas {
            let json = serde_json::to_string(&schema).unwrap();
            if let Some(previous) = seen.insert(name.clone(), json.clone()) {
                assert_eq!(previous, json, "two schemas named {name}");
            }
        }
    }
}
