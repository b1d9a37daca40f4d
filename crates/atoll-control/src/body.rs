//! The JSON body extractor of every route.
//!
//! Real clients are sloppy: the TypeScript SDK posts JSON as `text/plain`, the Turso CLI
//! sends PascalCase keys (`{"Name": …}`) and bodies on GET requests, and some calls have
//! no body at all. So the body is parsed whatever the Content-Type, object keys are
//! matched case-insensitively (as Go's decoder does), and an empty body reads as `{}`.

use crate::error::ApiError;
use atoll_http::body::{read_body, BodyReadError};
use atoll_types::ErrorCode;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

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
        let bytes = read_body(req, state).await.map_err(|e| match e {
            BodyReadError::TimedOut(_) => ApiError::RequestTimeout(e.to_string()),
            BodyReadError::TooLarge => {
                ApiError::PayloadTooLarge("request body too large".to_string())
            }
            BodyReadError::Unreadable(_) => ApiError::invalid(e.to_string()),
        })?;
        parse_lenient(&bytes).map(LenientJson)
    }
}

/// 408 for a body that did not arrive within `timeout` (a multipart body read piece by
/// piece times each piece).
pub(crate) fn body_timed_out(timeout: std::time::Duration) -> ApiError {
    ApiError::RequestTimeout(BodyReadError::TimedOut(timeout).to_string())
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
