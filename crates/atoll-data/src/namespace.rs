//! Which database a request is for: the path prefix `/db/<label>/…`, the `x-namespace`
//! header, or the Host `<label>.<db-domain>` — in that order. `<label>` is `<db>-<org>`.

use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::Uri;

/// The label taken from a `/db/<label>/…` prefix, which [`strip_db_prefix`] removed.
#[derive(Debug, Clone)]
pub struct PathLabel(pub String);

/// Rewrites `/db/<label>/rest` to `/rest` and remembers the label, so every data-plane
/// route also works behind a path prefix (Node clients on machines without wildcard DNS).
/// Doubled slashes are one: clients append `/info`, `/v2/pipeline`, … to the URL they
/// were given, and the URL the CLI prints ends with a slash.
pub fn strip_db_prefix(mut request: Request) -> Request {
    collapse_slashes(&mut request);
    let path = request.uri().path();
    let Some(rest) = path.strip_prefix("/db/") else {
        return request;
    };
    let (label, tail) = rest.split_once('/').unwrap_or((rest, ""));
    if label.is_empty() {
        return request;
    }
    let label = label.to_string();
    let mut new_path = format!("/{tail}");
    if let Some(query) = request.uri().query() {
        new_path.push('?');
        new_path.push_str(query);
    }
    let mut parts = request.uri().clone().into_parts();
    parts.path_and_query = new_path.parse().ok();
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
        request.extensions_mut().insert(PathLabel(label));
    }
    request
}

/// `//info` → `/info`: runs of slashes in the path become one (the query is kept).
fn collapse_slashes(request: &mut Request) {
    let path = request.uri().path();
    if !path.contains("//") {
        return;
    }
    let mut collapsed = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && collapsed.ends_with('/')) {
            collapsed.push(c);
        }
    }
    if let Some(query) = request.uri().query() {
        collapsed.push('?');
        collapsed.push_str(query);
    }
    let mut parts = request.uri().clone().into_parts();
    parts.path_and_query = collapsed.parse().ok();
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
}

/// The label of the database the request names, if it names one.
pub fn database_label(parts: &Parts, db_domain: &str) -> Option<String> {
    if let Some(PathLabel(label)) = parts.extensions.get::<PathLabel>() {
        return Some(label.clone());
    }
    if let Some(value) = parts
        .headers
        .get("x-namespace")
        .and_then(|v| v.to_str().ok())
    {
        if !value.is_empty() {
            return Some(value.to_string());
        }
    }
    let host = parts
        .headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| parts.uri.host())?;
    label_from_host(host, db_domain)
}

/// `mydb-acme.localhost:8081` with domain `localhost` → `mydb-acme`.
pub fn label_from_host(host: &str, db_domain: &str) -> Option<String> {
    let host = host
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(h, _)| h);
    let label = host.strip_suffix(db_domain)?.strip_suffix('.')?;
    (!label.is_empty() && !label.contains('.')).then(|| label.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_from_hosts() {
        assert_eq!(
            label_from_host("db-org.localhost:8081", "localhost").as_deref(),
            Some("db-org")
        );
        assert_eq!(
            label_from_host("db-org.example.com", "example.com").as_deref(),
            Some("db-org")
        );
        assert_eq!(label_from_host("localhost:8081", "localhost"), None);
        assert_eq!(label_from_host("a.b.localhost", "localhost"), None);
        assert_eq!(label_from_host("127.0.0.1:8081", "localhost"), None);
    }

    #[test]
    fn path_prefixes_are_stripped() {
        let request = Request::builder()
            .uri("/db/my-db-acme/v2/pipeline?x=1")
            .body(axum::body::Body::empty())
            .unwrap();
        let request = strip_db_prefix(request);
        assert_eq!(request.uri().path(), "/v2/pipeline");
        assert_eq!(request.uri().query(), Some("x=1"));
        assert_eq!(
            request.extensions().get::<PathLabel>().unwrap().0,
            "my-db-acme"
        );
        // The client URL ends with a slash, and clients append `/…` to it.
        for (uri, path, label) in [
            ("/db/my-db-acme//info", "/info", Some("my-db-acme")),
            (
                "/db/my-db-acme//wal_log.ReplicationLog/Hello",
                "/wal_log.ReplicationLog/Hello",
                Some("my-db-acme"),
            ),
            ("//v2//pipeline?x=1//", "/v2/pipeline", None),
            ("/db/my-db-acme/", "/", Some("my-db-acme")),
        ] {
            let request = Request::builder()
                .uri(uri)
                .body(axum::body::Body::empty())
                .unwrap();
            let request = strip_db_prefix(request);
            assert_eq!(request.uri().path(), path, "{uri}");
            assert_eq!(
                request
                    .extensions()
                    .get::<PathLabel>()
                    .map(|l| l.0.as_str()),
                label,
                "{uri}"
            );
        }
        let request = Request::builder()
            .uri("/v2/pipeline")
            .body(axum::body::Body::empty())
            .unwrap();
        assert!(strip_db_prefix(request)
            .extensions()
            .get::<PathLabel>()
            .is_none());
    }
}
