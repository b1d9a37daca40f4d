//! The JSON body extractor of every route.
//!
//! Real clients are sloppy: the TypeScript SDK posts JSON as `text/plain`, the Turso CLI
//! sends PascalCase keys (`{"Name": …}`) and bodies on GET requests, and some calls have
//! no body at all. So the body is parsed whatever the Content-Type, object keys are
//! matched case-insensitively (as Go's decoder does), and an empty body reads as `{}`.

use crate::error::ApiError;
use atoll_types::ErrorCode;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// How long the request body may take (see `ControlConfig::body_read_timeout`), for the
/// extractors that read bodies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyReadTimeout(pub std::time::Duration);

pub struct LenientJson<T>(pub T);

/// The query-string extractor of every route: axum's `Query`, with its rejection answered
/// as the API's JSON error (axum's own is `text/plain`, which no client parses).
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Query(value))
            .map_err(|rejection| ApiError::invalid(rejection.body_text()))
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for LenientJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let timeout = req
            .extensions()
            .get::<BodyReadTimeout>()
            .map_or(DEFAULT_BODY_READ_TIMEOUT, |t| t.0);
        // A client trickling its body byte by byte must not hold the request forever.
        let read = tokio::time::timeout(timeout, Bytes::from_request(req, state))
            .await
            .map_err(|_| body_timed_out(timeout))?;
        let bytes = read.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge("request body too large".to_string())
            } else {
                ApiError::invalid(format!("cannot read the request body: {rejection}"))
            }
        })?;
        parse_lenient(&bytes).map(LenientJson)
    }
}

/// When no [`BodyReadTimeout`] was set (a router built without the admission layer).
const DEFAULT_BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

pub(crate) fn body_timed_out(timeout: std::time::Duration) -> ApiError {
    ApiError::RequestTimeout(format!(
        "the request body did not arrive within {} seconds",
        timeout.as_secs()
    ))
}

pub fn parse_lenient<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| ApiError::invalid("the request body is not UTF-8 text"))?;
    let value: serde_json::Value = if text.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(text).map_err(|e| {
            ApiError::Invalid(ErrorCode::InvalidRequest, format!("invalid JSON body: {e}"))
        })?
    };
    // No body and `null` both mean "nothing to say".
    let value = if value.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        value
    };
    serde_json::from_value(lowercase_keys(value)).map_err(|e| {
        ApiError::Invalid(
            ErrorCode::InvalidRequest,
            format!("invalid request body: {e}"),
        )
    })
}

/// Lower-cases object keys, keeping an exact lower-case key over a differently cased one.
fn lowercase_keys(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (key, value) in map {
                let lower = key.to_lowercase();
                let exact = lower == key;
                let value = lowercase_keys(value);
                if exact || !out.contains_key(&lower) {
                    out.insert(lower, value);
                }
            }
            serde_json::Value::Object(out)
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(lowercase_keys).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Group {
        name: String,
        location: String,
        #[serde(default)]
        version: Option<String>,
    }

    #[test]
    fn pascal_case_and_missing_bodies() {
        let g: Group = parse_lenient(br#"{"Name":"g","Location":"local","Version":""}"#).unwrap();
        assert_eq!(
            g,
            Group {
                name: "g".into(),
                location: "local".into(),
                version: Some(String::new())
            }
        );
        let g: Group = parse_lenient(br#"{"NAME":"x","name":"g","location":"l"}"#).unwrap();
        assert_eq!(g.name, "g");
        let empty: std::collections::HashMap<String, String> = parse_lenient(b"  \n").unwrap();
        assert!(empty.is_empty());
        assert!(parse_lenient::<Group>(b"{").is_err());
        assert!(parse_lenient::<Group>(br#"{"name":"g"}"#).is_err());
    }
}
