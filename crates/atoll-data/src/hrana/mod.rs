//! Hrana over HTTP (v1, v2, v3; JSON and protobuf) and WebSocket. (Being written.)

use crate::DataPlaneState;
use axum::Router;
use std::sync::Arc;

/// Open Hrana streams of this node, by baton.
pub struct StreamRegistry {}

impl StreamRegistry {
    pub fn new() -> StreamRegistry {
        StreamRegistry {}
    }
}

impl Default for StreamRegistry {
    fn default() -> Self {
        Self::new()
    }
}

pub fn routes() -> Router<Arc<DataPlaneState>> {
    Router::new()
}
