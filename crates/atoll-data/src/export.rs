//! Exports: `GET /info`, `GET /export/{generation}`, `GET /dump`. (Being written.)

use crate::DataPlaneState;
use axum::Router;
use std::sync::Arc;

pub fn routes() -> Router<Arc<DataPlaneState>> {
    Router::new()
}
