//! Organizations' key sets (JWKS) from URLs: which URLs the operator allows, fetching them
//! without letting a tenant reach what it should not (SSRF), and the periodic refresh.
//!
//! A key set URL is chosen by a tenant and fetched by the server, from inside the
//! operator's network. So: no URL is fetched unless it starts with one of the operator's
//! prefixes (`--jwks-allowed-urls`; none by default: key sets are then given inline),
//! the host's addresses must all be public unless the operator says otherwise
//! (`--jwks-allow-private-addresses`), the connection goes to the address that was checked
//! (no second lookup a rebinding DNS server could answer differently), redirects are not
//! followed, proxies from the environment are not used, and the answer is bounded in size
//! and time.

use crate::config::JwksSettings;
use crate::data_plane::push_org_databases;
use crate::error::{ApiError, ApiResult};
use crate::periodic::{self, Schedule};
use crate::state::AppState;
use atoll_types::node::Jwk;
use atoll_types::ErrorCode;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

fn not_allowed(message: String) -> ApiError {
    ApiError::Invalid(ErrorCode::JwksUrlNotAllowed, message)
}

/// Reads the operator's list of allowed URL prefixes (comma-separated).
pub fn parse_allowed_urls(text: &str) -> Result<Vec<String>, String> {
    let mut prefixes = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let url = reqwest::Url::parse(entry)
            .map_err(|e| format!("--jwks-allowed-urls: {entry:?} is not a URL: {e}"))?;
        if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
            return Err(format!(
                "--jwks-allowed-urls: {entry:?} must be an http(s) URL with a host"
            ));
        }
        prefixes.push(url.to_string());
    }
    Ok(prefixes)
}

/// Checks a tenant's key set URL against the operator's prefixes; answers it normalized.
pub fn check_url(settings: &JwksSettings, text: &str) -> ApiResult<reqwest::Url> {
    let url = reqwest::Url::parse(text.trim()).map_err(|e| {
        ApiError::Invalid(
            ErrorCode::InvalidJwks,
            format!("jwks_url is not a URL: {e}"),
        )
    })?;
    if !matches!(url.scheme(), "https" | "http")
        || url.host_str().is_none()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidJwks,
            "jwks_url must be an http(s) URL with a host and no credentials".into(),
        ));
    }
    if settings.allowed_urls.is_empty() {
        return Err(not_allowed(
            "this server fetches no key set from a URL: give the key set inline (`jwks`: {\"keys\": [...]}), or ask the operator to allow its URL (--jwks-allowed-urls)".into(),
        ));
    }
    if !settings
        .allowed_urls
        .iter()
        .any(|prefix| url.as_str().starts_with(prefix.as_str()))
    {
        return Err(not_allowed(format!(
            "this server does not fetch key sets from {url}: the operator allows {} (--jwks-allowed-urls)",
            settings.allowed_urls.join(", ")
        )));
    }
    Ok(url)
}

/// Whether an address is on the public internet (not loopback, private, link-local,
/// shared, documentation, multicast or reserved).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 198 && (18..20).contains(&b))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first == 0x2001 && v6.segments()[1] == 0x0db8)
                || (first == 0x0064 && v6.segments()[1] == 0xff9b))
        }
    }
}

/// Fetches and reads the key set at `url` (already checked with [`check_url`]).
pub async fn fetch(settings: &JwksSettings, url: &reqwest::Url) -> Result<Vec<Jwk>, String> {
    let host = url.host_str().ok_or("no host")?.to_string();
    let port = url.port_or_known_default().ok_or("no port")?;
    let bare_host = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = match bare_host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::time::timeout(
            settings.fetch_timeout,
            tokio::net::lookup_host((host.as_str(), port)),
        )
        .await
        .map_err(|_| format!("resolving {host} timed out"))?
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect(),
    };
    let Some(first) = addresses.first().copied() else {
        return Err(format!("{host} has no address"));
    };
    if !settings.allow_private_addresses {
        if let Some(private) = addresses.iter().find(|a| !is_public(a.ip())) {
            return Err(format!(
                "{host} resolves to {}, which is not a public address (the operator may allow private addresses with --jwks-allow-private-addresses)",
                private.ip()
            ));
        }
    }
    let client = reqwest::Client::builder()
        .resolve(&host, first)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(settings.fetch_timeout)
        .timeout(settings.fetch_timeout)
        .user_agent(concat!("atoll/", env!("CARGO_PKG_VERSION"), " (jwks)"))
        .build()
        .map_err(|e| e.to_string())?;
    let mut response = client
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("cannot fetch {url}: {}", without_url(&e)))?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(format!("{url} answered {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("cannot read {url}: {}", without_url(&e)))?
    {
        if body.len() + chunk.len() > settings.max_bytes {
            return Err(format!(
                "{url} answered more than {} bytes; a key set is smaller",
                settings.max_bytes
            ));
        }
        body.extend_from_slice(&chunk);
    }
    atoll_data::external_jwt::parse_key_set(&body)
}

fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(&format!(" ({url})"), "");
    }
    if error.is_timeout() {
        text = "timed out".into();
    }
    text
}

/// What a refresh pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RefreshReport {
    pub ran: bool,
    /// `(organization id, key set name)` of key sets whose keys changed.
    pub changed: Vec<(String, String)>,
    pub failed: Vec<(String, String)>,
}

/// Fetches every key set that has a URL again; one whose keys changed is pushed to its
/// organization's databases. A failed fetch keeps the keys of the last good one and is
/// recorded (`last_error`, shown by `GET …/jwks`). One replica at a time (a lease).
pub async fn refresh_once(state: &AppState, holder: &str, now: i64) -> ApiResult<RefreshReport> {
    let mut report = RefreshReport::default();
    let interval_ms = i64::try_from(state.config.jwks.refresh_interval.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    if !state
        .store
        .acquire_lease("jwks-refresh", holder, now, now + interval_ms / 2 + 1)
        .await?
    {
        return Ok(report);
    }
    report.ran = true;
    for set in state.store.url_key_sets().await? {
        let Some(url) = set.url.as_deref() else {
            continue;
        };
        let outcome = match check_url(&state.config.jwks, url) {
            Ok(checked) => fetch(&state.config.jwks, &checked).await,
            // The operator narrowed the allow-list since: the keys stay until the key set
            // is replaced or removed, and the reason is shown.
            Err(e) => Err(e.to_string()),
        };
        let outcome = outcome.map(|keys| serde_json::to_string(&keys).unwrap_or_default());
        if let Err(error) = &outcome {
            tracing::warn!(org = %set.org_id, key_set = %set.name, %error, "cannot refresh a key set; its last keys stay in service");
            report.failed.push((set.org_id.clone(), set.name.clone()));
        }
        let changed = state
            .store
            .record_key_set_refresh(&set.org_id, &set.name, url, outcome)
            .await?;
        if changed {
            tracing::info!(org = %set.org_id, key_set = %set.name, "a key set's keys changed");
            if let Some(org) = state.store.org_by_id(&set.org_id).await? {
                push_org_databases(&state.data_plane, &state.store, &org).await?;
            }
            report.changed.push((set.org_id, set.name));
        }
    }
    Ok(report)
}

/// Refreshes key sets every `interval`, as `holder` (unique per replica).
pub fn spawn_refresher(state: AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    let holder = uuid::Uuid::new_v4().to_string();
    // Not at once: key sets were fetched when registered.
    periodic::spawn(
        Schedule::after_each(interval),
        "refreshing key sets failed; retrying at the next tick",
        move || {
            let (state, holder) = (state.clone(), holder.clone());
            async move {
                refresh_once(&state, &holder, atoll_meta::now_millis())
                    .await
                    .map(|_| ())
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_addresses() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "2001:db8::1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["1.1.1.1", "8.8.8.8", "2606:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn urls_need_an_allowed_prefix() {
        let mut settings = JwksSettings::default();
        let url = "https://app.clerk.accounts.dev/.well-known/jwks.json";
        assert!(check_url(&settings, url).is_err());
        settings.allowed_urls = parse_allowed_urls("https://app.clerk.accounts.dev").unwrap();
        assert!(check_url(&settings, url).is_ok());
        for refused in [
            "https://app.clerk.accounts.dev.evil.example/.well-known/jwks.json",
            "http://app.clerk.accounts.dev/.well-known/jwks.json",
            "https://user:pw@app.clerk.accounts.dev/x",
            "file:///etc/passwd",
            "not a url",
        ] {
            assert!(check_url(&settings, refused).is_err(), "{refused}");
        }
        assert!(parse_allowed_urls("ftp://x/").is_err());
    }
}
