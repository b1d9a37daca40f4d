//! The data nodes as callers: routes whose action targets [`Target::Node`] take
//! [`NodeCaller`], which accepts the node secret (`atoll serve --node-secret`, the one the
//! control plane presents to the nodes) and nothing else — no user token, however
//! privileged.

use super::{Action, Target};
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

/// A request from a data node: its bearer is the node secret.
#[derive(Debug, Clone, Copy)]
pub struct NodeCaller;

impl FromRequestParts<AppState> for NodeCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let action = *parts
            .extensions
            .get::<Action>()
            .ok_or_else(|| ApiError::Internal("route registered outside the route table".into()))?;
        if action.rule().target != Target::Node {
            return Err(ApiError::Internal(format!(
                "{action:?} is not a data node's action"
            )));
        }
        let presented = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if presented.is_empty() || !state.data_plane.accepts_node_secret(presented) {
            return Err(ApiError::Unauthenticated("node secret expected".into()));
        }
        Ok(NodeCaller)
    }
}
