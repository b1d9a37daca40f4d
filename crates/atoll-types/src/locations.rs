//! Locations: where groups (and their databases) can live.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `GET /v1/locations`: `{"locations": {"<code>": "<description>"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LocationMap {
    pub locations: BTreeMap<String, String>,
}

/// `GET /v2/organizations/{org}/locations`: codes grouped by platform
/// (`{"locations": {"local": {"<code>": "<description>"}}}`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LocationsByPlatform {
    pub locations: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct LocationSummary {
    pub code: String,
    pub description: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LocationDetail {
    pub code: String,
    pub description: String,
    /// The other locations, nearest first.
    pub closest: Vec<LocationSummary>,
}

/// `GET /v1/locations/{code}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LocationResponse {
    pub location: LocationDetail,
}

/// `GET /v1/closest-region`: the location of this server, as `region.turso.io` answers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ClosestRegion {
    pub server: String,
    pub client: String,
}
