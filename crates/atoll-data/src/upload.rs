//! Uploads of SQLite files: `POST /v1/upload` and the chunked `PUT /v2/upload/…`. (Being written.)

use crate::DataPlaneState;
use axum::Router;
use std::sync::Arc;

/// Chunked uploads in progress.
pub struct Uploads {}

impl Uploads {
    pub fn new() -> Uploads {
        Uploads {}
    }
}

impl Default for Uploads {
    fn default() -> Self {
        Self::new()
    }
}

pub fn routes() -> Router<Arc<DataPlaneState>> {
    Router::new()
}
