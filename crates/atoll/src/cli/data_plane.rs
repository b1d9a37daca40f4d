//! One database's data plane as the CLI reaches it: the address is the database's
//! `http_url` from the platform API (it works without wildcard DNS), and every request
//! carries a short-lived database token minted through the platform API, minted again
//! before it runs out so long uploads, exports and shell sessions keep working.

use super::client::{root_cause, CliError, Client};
use atoll_types::databases::{DatabaseResponse, DatabaseToken};
use reqwest::{Method, StatusCode, Url};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lifetime asked for each database token (the platform API's expiration syntax). Short,
/// so a token that leaks from a log or a crash dump is soon worthless.
const TOKEN_LIFETIME: &str = "15m";
/// A token older than this is replaced before the next request.
const TOKEN_REFRESH_AFTER: Duration = Duration::from_secs(10 * 60);

pub struct DataPlane<'a> {
    platform: &'a Client,
    pub name: String,
    /// The database's HTTP URL, ending with `/`.
    base: Url,
    http: reqwest::Client,
    token: Mutex<Option<(String, Instant)>>,
    /// The key of a database encrypted with its customer's key (base64), sent with every
    /// request as `x-turso-encryption-key`, as libSQL clients send it.
    encryption_key: Option<String>,
}

impl<'a> DataPlane<'a> {
    /// Looks the database up to learn its address.
    pub async fn open(platform: &'a Client, name: &str) -> Result<DataPlane<'a>, CliError> {
        let answer: DatabaseResponse = platform.get(platform.org_url(&["databases", name])).await?;
        let mut http_url = answer.database.http_url;
        if !http_url.ends_with('/') {
            http_url.push('/');
        }
        let base = Url::parse(&http_url).map_err(|e| {
            CliError::local(
                format!("the server gave database {name} an invalid HTTP URL {http_url:?}: {e}"),
                "check the server's --db-public-url setting",
            )
        })?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("atoll-cli/", env!("CARGO_PKG_VERSION")))
            // A data plane that does not even accept the connection is reported, not waited
            // on forever; transfers themselves have no time limit (they may be gigabytes).
            .connect_timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| CliError::local(format!("cannot build the HTTP client: {e}"), ""))?;
        Ok(DataPlane {
            platform,
            name: name.to_string(),
            base,
            http,
            token: Mutex::new(None),
            encryption_key: None,
        })
    }

    /// Sends `key` (base64) with every request: for a database encrypted with its
    /// customer's key (`atoll db create --remote-encryption-key`).
    pub fn with_encryption_key(mut self, key: Option<String>) -> Self {
        self.encryption_key = key;
        self
    }

    pub fn url(&self, path: &str) -> Url {
        self.base
            .join(path.trim_start_matches('/'))
            .expect("data-plane paths are relative URLs")
    }

    /// A current database token: the cached one, or a newly minted one.
    pub async fn token(&self) -> Result<String, CliError> {
        if let Some((token, minted)) = self.token.lock().expect("token lock").as_ref() {
            if minted.elapsed() < TOKEN_REFRESH_AFTER {
                return Ok(token.clone());
            }
        }
        let mut url = self
            .platform
            .org_url(&["databases", &self.name, "auth", "tokens"]);
        url.query_pairs_mut()
            .append_pair("expiration", TOKEN_LIFETIME);
        let minted: DatabaseToken = self.platform.post(url, &serde_json::json!({})).await?;
        *self.token.lock().expect("token lock") = Some((minted.jwt.clone(), Instant::now()));
        Ok(minted.jwt)
    }

    /// A request to `path` with a current token.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, CliError> {
        let token = self.token().await?;
        let request = self.http.request(method, self.url(path)).bearer_auth(token);
        Ok(match &self.encryption_key {
            Some(key) => request.header(atoll_types::node::ENCRYPTION_KEY_HEADER, key),
            None => request,
        })
    }

    /// Sends a request; a failure to reach the data plane becomes a one-line error.
    pub async fn send(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, CliError> {
        request.send().await.map_err(|e| self.unreachable(what, &e))
    }

    pub fn unreachable(&self, what: &str, error: &reqwest::Error) -> CliError {
        CliError::local(
            format!(
                "cannot {what}: the data plane at {} did not answer: {}",
                self.base,
                root_cause(error)
            ),
            "is the server running, and is its --db-public-url reachable from here?",
        )
    }
}

/// A data-plane failure answer as one line: the server's own message (`{"error": …}` from
/// the data plane, `{"message", "code"}` from Hrana) and the HTTP status.
pub fn failure(what: &str, status: StatusCode, body: &[u8]) -> CliError {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        code: Option<String>,
    }
    let (message, code) = match serde_json::from_slice::<Body>(body) {
        Ok(parsed) if parsed.error.is_some() || parsed.message.is_some() => (
            parsed.error.or(parsed.message).unwrap_or_default(),
            parsed.code.unwrap_or_default(),
        ),
        _ => (
            String::from_utf8_lossy(body).trim().to_string(),
            String::new(),
        ),
    };
    let message = if message.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string()
    } else {
        message
    };
    let code = if code.is_empty() {
        format!("http_{}", status.as_u16())
    } else {
        code
    };
    let hint = match status.as_u16() {
        401 | 403 => "the database token was refused: run `atoll auth login` and try again",
        404 => "run `atoll db list` to see the databases of the current organization",
        _ => "",
    };
    CliError {
        message: format!("{what}: {}", message.replace(['\n', '\r'], " ")),
        code,
        hint: hint.to_string(),
    }
}

/// Reads a failed response's body and turns it into a one-line error.
pub async fn failure_of(what: &str, response: reqwest::Response) -> CliError {
    let status = response.status();
    let body = response.bytes().await.unwrap_or_default();
    failure(what, status, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_keep_the_server_message_and_code() {
        let error = failure(
            "upload chunk 3",
            StatusCode::BAD_REQUEST,
            br#"{"error":"the file is\ncorrupt"}"#,
        );
        assert_eq!(
            error.to_string(),
            "Error: upload chunk 3: the file is corrupt (http_400)"
        );
        let error = failure(
            "run SQL",
            StatusCode::BAD_REQUEST,
            br#"{"message":"stream expired","code":"STREAM_EXPIRED"}"#,
        );
        assert_eq!(
            error.to_string(),
            "Error: run SQL: stream expired (STREAM_EXPIRED)"
        );
        let error = failure("export", StatusCode::BAD_GATEWAY, b"");
        assert_eq!(error.to_string(), "Error: export: Bad Gateway (http_502)");
    }
}
