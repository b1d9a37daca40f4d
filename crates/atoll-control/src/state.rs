//! What every handler and background task shares: the store, the operator's settings, the
//! data plane and the limits. Its own module so that the modules using it do not import
//! `server`, which imports every route.

use crate::config::ControlConfig;
use crate::data_plane::DataPlane;
use atoll_http::rate_limit::RateLimits;
use atoll_meta::Store;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub config: Arc<ControlConfig>,
    pub data_plane: Arc<DataPlane>,
    pub(crate) login_throttle: Arc<crate::login_throttle::LoginThrottle>,
    pub(crate) rate_limits: Arc<RateLimits>,
}

impl AppState {
    pub fn new(store: Store, config: ControlConfig, data_plane: DataPlane) -> AppState {
        let login_throttle = Arc::new(crate::login_throttle::LoginThrottle::new(
            config.login_throttle,
        ));
        AppState {
            login_throttle,
            rate_limits: Arc::new(RateLimits::new(
                config.rate_per_credential,
                config.rate_per_address,
            )),
            store,
            config: Arc::new(config),
            data_plane: Arc::new(data_plane),
        }
    }
}
