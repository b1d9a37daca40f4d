//! The HTTP client of the platform API, and the one-line errors every command reports.

use super::config::Settings;
use atoll_types::ErrorBody;
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;

/// A failure to report: `Error: <message> (<code>)`, then a hint when one is obvious.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub code: String,
    pub hint: String,
}

impl CliError {
    /// A failure detected by the client itself (no server code).
    pub fn local(message: impl Into<String>, hint: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            code: String::new(),
            hint: hint.into(),
        }
    }

    fn from_server(status: StatusCode, body: &[u8]) -> Self {
        let (message, code) = match serde_json::from_slice::<ErrorBody>(body) {
            Ok(body) => (body.error, body.code),
            Err(_) => {
                let text = String::from_utf8_lossy(body).trim().to_string();
                let message = if text.is_empty() {
                    status
                        .canonical_reason()
                        .unwrap_or("request failed")
                        .to_string()
                } else {
                    text
                };
                (message, format!("http_{}", status.as_u16()))
            }
        };
        let hint = hint_for(status, &code);
        CliError {
            message: in_cli_terms(&message).replace(['\n', '\r'], " "),
            code,
            hint: hint.to_string(),
        }
    }
}

/// The server's messages name API routes where the CLI has a command for the same thing.
fn in_cli_terms(message: &str) -> String {
    const ROUTES: [(&str, &str); 3] = [
        (
            "POST /v1/organizations/{org}/databases/dumps",
            "`atoll db create NAME --from-dump FILE`",
        ),
        ("POST /v1/organizations", "`atoll org create NAME`"),
        ("GET /v1/locations", "`atoll locations`"),
    ];
    let mut message = message.to_string();
    for (route, command) in ROUTES {
        message = message.replace(route, command);
    }
    message
}

/// The data plane answers a route it does not have with an empty 404, where the platform
/// API always answers JSON: an `--api-url` pointed at the database port.
fn looks_like_the_database_port(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::NOT_FOUND && body.is_empty()
}

fn hint_for(status: StatusCode, code: &str) -> &'static str {
    match (status.as_u16(), code) {
        (401, _) => "run `atoll auth login`",
        (_, "database_not_found") => {
            "run `atoll db list` to see the databases of the current organization"
        }
        (_, "group_not_found") => {
            "run `atoll group list` to see the groups of the current organization"
        }
        (_, "database_already_exists") => {
            "the name is taken: choose another, or free it with `atoll db destroy NAME` (`atoll db list` shows the databases)"
        }
        (_, "group_already_exists") => {
            "the name is taken: choose another (`atoll group list` shows the groups)"
        }
        (_, "organization_already_exists") => {
            "the name is taken: choose another (`atoll org list` shows yours; `atoll org switch SLUG` to use one)"
        }
        (_, "organization_not_found") => "run `atoll org list`, then `atoll org switch <slug>`",
        (_, "invalid_location" | "location_not_found") => {
            "run `atoll locations` to see the location codes"
        }
        (_, "invalid_expiration") => {
            "use `never` or `<n><unit>…` with units w d h m s, like `7d` or `2w1d`"
        }
        (_, "quota_exceeded") => {
            "the organization's plan allows no more: destroy something or change plan"
        }
        (_, "delete_protected") => {
            "turn it off first: `atoll db config NAME --delete-protection off` (or `atoll group config`)"
        }
        (_, "feature_not_available_for_starter_plan") => {
            "this is a feature of paid plans: ask the instance administrator to change the organization's plan"
        }
        (_, "token_not_found") => {
            "run `atoll org tokens list` or `atoll auth api-tokens list` to see the tokens"
        }
        (_, "primary_location") => "a group keeps its primary location; add others beside it",
        (403, _) => "ask an admin of the organization for a role that allows this",
        _ => "",
    }
}

impl CliError {
    /// Says which organization a database was looked for in, instead of the server's
    /// Turso-compatible "could not find database with name x: record not found".
    fn in_organization(mut self, organization: &str) -> Self {
        if self.code == "database_not_found" {
            if let Some(name) = self
                .message
                .strip_prefix("could not find database with name ")
                .and_then(|rest| rest.strip_suffix(": record not found"))
            {
                let organization = if organization.is_empty() {
                    "your personal organization".to_string()
                } else {
                    format!("organization {organization}")
                };
                self.message = format!("database {name} not found in {organization}");
            }
        }
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error: {}", self.message)?;
        if !self.code.is_empty() {
            write!(f, " ({})", self.code)?;
        }
        if !self.hint.is_empty() {
            write!(f, "; hint: {}", self.hint)?;
        }
        Ok(())
    }
}

impl std::error::Error for CliError {}

/// The platform API as the current settings reach it.
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    /// Current organization slug; empty for the personal organization.
    pub organization: String,
}

impl Client {
    pub fn new(settings: &Settings) -> Result<Self, CliError> {
        Self::with(
            settings.api_url(),
            settings.token(),
            settings.organization.clone(),
        )
    }

    pub fn with(
        api_url: String,
        token: Option<String>,
        organization: String,
    ) -> Result<Self, CliError> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("atoll-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::local(format!("cannot build the HTTP client: {e}"), ""))?;
        Url::parse(&api_url).map_err(|e| {
            CliError::local(
                format!("invalid API URL {api_url}: {e}"),
                "use `atoll auth login --api-url http://host:port` or set ATOLL_API_URL",
            )
        })?;
        Ok(Client {
            http,
            base: api_url.trim_end_matches('/').to_string(),
            token,
            organization,
        })
    }

    /// Fails with a login hint when there is no token.
    pub fn require_token(&self) -> Result<(), CliError> {
        if self.token.is_none() {
            return Err(CliError::local(
                "not logged in",
                "run `atoll auth login` (or set ATOLL_API_TOKEN)",
            ));
        }
        Ok(())
    }

    /// URL of `segments` (each percent-encoded) under the API base.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = Url::parse(&self.base).expect("checked in Client::with");
        url.path_segments_mut()
            .expect("http URLs have paths")
            .pop_if_empty()
            .extend(segments);
        url
    }

    /// URL under the current organization: `/v1/organizations/{org}/…`, or `/v1/…` for
    /// the personal organization.
    pub fn org_url(&self, segments: &[&str]) -> Url {
        let mut all = vec!["v1"];
        if !self.organization.is_empty() {
            all.push("organizations");
            all.push(&self.organization);
        }
        all.extend_from_slice(segments);
        self.url(&all)
    }

    pub async fn get<T: DeserializeOwned>(&self, url: Url) -> Result<T, CliError> {
        self.send::<T, ()>(Method::GET, url, None).await
    }

    pub async fn post<T: DeserializeOwned, B: Serialize>(
        &self,
        url: Url,
        body: &B,
    ) -> Result<T, CliError> {
        self.send(Method::POST, url, Some(body)).await
    }

    pub async fn patch<T: DeserializeOwned, B: Serialize>(
        &self,
        url: Url,
        body: &B,
    ) -> Result<T, CliError> {
        self.send(Method::PATCH, url, Some(body)).await
    }

    pub async fn delete<T: DeserializeOwned>(&self, url: Url) -> Result<T, CliError> {
        self.send::<T, ()>(Method::DELETE, url, None).await
    }

    async fn send<T: DeserializeOwned, B: Serialize>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<T, CliError> {
        let mut request = self.request(method, url.clone());
        if let Some(body) = body {
            request = request.json(body);
        }
        self.send_prepared(url, request).await
    }

    /// A request carrying this client's credentials, for bodies the JSON helpers cannot
    /// express (multipart uploads); send it with [`Client::send_prepared`].
    pub fn request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        let request = self.http.request(method, url);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends a request made by [`Client::request`] and decodes its JSON answer, with the
    /// same one-line errors as every other call.
    pub async fn send_prepared<T: DeserializeOwned>(
        &self,
        url: Url,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CliError> {
        let response = request.send().await.map_err(|e| {
            let cause = root_cause(&e);
            let hint = if cause.contains("certificate") {
                UNTRUSTED_CERTIFICATE_HINT
            } else {
                "is the server running? Point at it with `atoll auth login --api-url URL` or ATOLL_API_URL"
            };
            CliError::local(format!("cannot reach {}: {cause}", self.base), hint)
        })?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| CliError::local(format!("cannot read the answer of {url}: {e}"), ""))?;
        if looks_like_the_database_port(status, &bytes) {
            return Err(CliError::local(
                format!("{url} answered 404 with no body: this looks like the database port (the data plane), not the platform API"),
                "the API is at the `API URL` that `atoll dev` prints (by default http://127.0.0.1:8080): `atoll auth login --api-url URL`, or set ATOLL_API_URL",
            ));
        }
        if !status.is_success() {
            return Err(CliError::from_server(status, &bytes).in_organization(&self.organization));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            CliError::local(
                format!("unexpected answer from {url}: {e}"),
                "is ATOLL_API_URL an Atoll server of the same version?",
            )
        })
    }
}

/// What to do when the server's TLS certificate is not trusted (a self-signed or private
/// CA's certificate): the client trusts the system's roots, or those of SSL_CERT_FILE.
pub const UNTRUSTED_CERTIFICATE_HINT: &str =
    "the server's TLS certificate is not trusted here: set SSL_CERT_FILE to a PEM file with it (or its CA's certificate)";

pub fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_are_one_line_with_code_and_hint() {
        let error = CliError::from_server(
            StatusCode::UNAUTHORIZED,
            br#"{"error":"token expired","code":"unauthorized"}"#,
        );
        assert_eq!(
            error.to_string(),
            "Error: token expired (unauthorized); hint: run `atoll auth login`"
        );
        let error = CliError::from_server(
            StatusCode::FORBIDDEN,
            br#"{"error":"audit logs need a paid plan","code":"feature_not_available_for_starter_plan"}"#,
        );
        assert!(
            error.to_string().ends_with("hint: this is a feature of paid plans: ask the instance administrator to change the organization's plan"),
            "{error}"
        );
        let error = CliError::from_server(StatusCode::BAD_GATEWAY, b"bad\ngateway");
        assert_eq!(error.to_string(), "Error: bad gateway (http_502)");
    }

    #[test]
    fn personal_routes_drop_the_organization() {
        let client = Client::with("http://h:1/".into(), None, String::new()).unwrap();
        assert_eq!(
            client.org_url(&["databases", "a b"]).as_str(),
            "http://h:1/v1/databases/a%20b"
        );
        let client = Client::with("http://h:1".into(), None, "acme".into()).unwrap();
        assert_eq!(
            client.org_url(&["groups"]).as_str(),
            "http://h:1/v1/organizations/acme/groups"
        );
    }
}
