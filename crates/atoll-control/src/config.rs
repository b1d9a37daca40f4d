//! Settings of the control plane that the operator chooses.

use atoll_http::rate_limit::RateLimit;
use std::time::Duration;

/// One entry of the location catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub code: String,
    pub description: String,
    /// Grouping key of `/v2/organizations/{org}/locations` (`local`, `aws`, `fly`, …).
    pub platform: String,
}

impl Location {
    pub fn new(code: &str, description: &str) -> Location {
        let platform = if code == "local" {
            "local"
        } else if code.starts_with("aws-") {
            "aws"
        } else {
            "atoll"
        };
        Location {
            code: code.to_string(),
            description: description.to_string(),
            platform: platform.to_string(),
        }
    }

    /// Parses the operator's catalog: `code=Description,code2=Description 2`.
    pub fn parse_catalog(text: &str) -> Result<Vec<Location>, String> {
        let mut catalog = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (code, description) = entry.split_once('=').unwrap_or((entry, entry));
            let code = code.trim();
            atoll_types::names::validate_resource_name("location", code)?;
            if catalog.iter().any(|l: &Location| l.code == code) {
                return Err(format!("location {code} is listed twice"));
            }
            catalog.push(Location::new(code, description.trim()));
        }
        if catalog.is_empty() {
            return Err("the location catalog is empty".to_string());
        }
        Ok(catalog)
    }

    /// The catalog of a fresh install: this machine, plus a few codes so multi-location
    /// set-ups can be tried locally.
    pub fn default_catalog() -> Vec<Location> {
        vec![
            Location::new("local", "Local (this server)"),
            Location::new("aws-us-east-1", "AWS US East (Virginia)"),
            Location::new("aws-eu-west-1", "AWS EU West (Ireland)"),
            Location::new("aws-ap-south-1", "AWS AP South (Mumbai)"),
        ]
    }
}

#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// Every location groups may use.
    pub locations: Vec<Location>,
    /// Where this server runs: its answer to "closest region", and the location of
    /// groups created for new users.
    pub server_location: String,
    /// Version label given to new groups.
    pub group_version: String,
    /// Largest JSON body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Largest SQL dump accepted by `POST …/databases/dumps`, in bytes.
    pub max_dump_bytes: usize,
    /// Public URL of this API, used in the dump URLs it hands out.
    pub public_url: String,
    /// How often usage is collected from the nodes into the store.
    pub usage_collect_interval: std::time::Duration,
    /// How often the lifecycle jobs run (archive, purge, report).
    pub jobs_interval: std::time::Duration,
    /// How often a reconcile pass converges the nodes to the store (`crate::reconciler`).
    pub reconcile_interval: std::time::Duration,
    /// How long a database may stay `creating` before a reconcile pass takes its creator
    /// for dead and removes it. Longer than any create takes (a dump load is bounded by
    /// the node's dump timeout), so a pass never removes one another replica is creating.
    pub creating_grace: std::time::Duration,
    /// What each plan allows per billing cycle.
    pub plans: std::collections::BTreeMap<String, atoll_types::usage::PlanQuotas>,
    /// The plan new organizations (personal and team) start on.
    pub default_plan: String,
    /// Monthly price of each plan, USD (e.g. `"29"`).
    pub plan_prices: std::collections::BTreeMap<String, String>,
    /// Requests per credential (the hash of the `Authorization` header); `None`: no limit.
    pub rate_per_credential: Option<RateLimit>,
    /// Requests per client address, for requests without a credential.
    pub rate_per_address: Option<RateLimit>,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: std::time::Duration,
    /// How long a JSON body may take to arrive in full; also how long a dump upload may
    /// go without sending anything.
    pub body_read_timeout: std::time::Duration,
    /// How failed logins are slowed (per username and client address).
    pub login_throttle: crate::login_throttle::LoginThrottleSettings,
    /// How long an uploaded dump stays usable; the lifecycle jobs delete it after.
    pub dump_lifetime: std::time::Duration,
    /// Dumps an organization may hold at once (not yet used nor expired).
    pub max_dumps_per_org: u64,
    /// Bytes of dumps an organization may hold at once.
    pub max_dump_bytes_per_org: u64,
    /// Organizations' key sets (JWKS): allowed URLs, refresh, limits.
    pub jwks: JwksSettings,
}

/// Uploaded dumps stay usable a day.
pub const DEFAULT_DUMP_LIFETIME: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// Dumps one organization may hold at once.
pub const DEFAULT_MAX_DUMPS_PER_ORG: u64 = 10;
/// Bytes of dumps one organization may hold at once: 1 GiB.
pub const DEFAULT_MAX_DUMP_BYTES_PER_ORG: u64 = 1 << 30;

/// Default request rate per API token: a ceiling above what one server can serve (and
/// what `atoll bench` drives), so only a lowered limit ever answers 429.
pub const DEFAULT_RATE_PER_CREDENTIAL: RateLimit = RateLimit {
    requests: 50_000,
    period: std::time::Duration::from_secs(1),
};

/// Default request rate per address without a credential (logins, probes, bad requests).
pub const DEFAULT_RATE_PER_ADDRESS: RateLimit = RateLimit {
    requests: 1_000,
    period: std::time::Duration::from_secs(60),
};

/// The free plan: its organizations get Turso's free-tier behaviours (idle groups are
/// archived, deletes are final, no audit logs) besides its quotas.
pub const FREE_PLAN: &str = "starter";

/// The plan new organizations start on unless the operator says otherwise: a self-hosted
/// instance is the operator's, so nothing is limited until they choose limits.
pub const DEFAULT_PLAN: &str = "enterprise";

/// The prices of a fresh install's plans, USD per month.
pub fn default_plan_prices() -> std::collections::BTreeMap<String, String> {
    [
        ("starter", "0"),
        ("developer", "5"),
        ("scaler", "29"),
        ("pro", "499"),
        ("enterprise", "0"),
    ]
    .into_iter()
    .map(|(name, price)| (name.to_string(), price.to_string()))
    .collect()
}

/// The operator's plans file: `{"<plan>": {"price": "29", "quotas": {"databases": 10, …},
/// "default": true}}` (a quota left out or `null` is unlimited; at most one plan is the
/// `default` new organizations start on). Plans not in the file keep their defaults.
pub fn apply_plans_file(config: &mut ControlConfig, text: &str) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct PlanFile {
        #[serde(default)]
        price: Option<String>,
        #[serde(default)]
        quotas: atoll_types::usage::PlanQuotas,
        #[serde(default)]
        default: bool,
    }
    let plans: std::collections::BTreeMap<String, PlanFile> =
        serde_json::from_str(text).map_err(|e| format!("invalid plans file: {e}"))?;
    let defaults: Vec<&String> = plans
        .iter()
        .filter(|(_, p)| p.default)
        .map(|(n, _)| n)
        .collect();
    match defaults.as_slice() {
        [] => {}
        [name] => config.default_plan = name.to_string(),
        _ => {
            return Err(format!(
                "invalid plans file: only one plan can be the default, not {}",
                defaults
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ))
        }
    }
    for (name, plan) in plans {
        atoll_types::names::validate_resource_name("plan", &name)?;
        config.plans.insert(name.clone(), plan.quotas);
        config
            .plan_prices
            .insert(name, plan.price.unwrap_or_else(|| "0".to_string()));
    }
    Ok(())
}

/// The plans of a fresh install. Allowances per calendar month; `None` is unlimited.
pub fn default_plans() -> std::collections::BTreeMap<String, atoll_types::usage::PlanQuotas> {
    use atoll_types::usage::PlanQuotas;
    const GB: u64 = 1_000_000_000;
    let plan = |databases,
                groups,
                locations,
                storage_gb: Option<u64>,
                rows_read,
                rows_written,
                synced_gb: Option<u64>| PlanQuotas {
        rows_read,
        rows_written,
        databases,
        locations,
        storage_bytes: storage_gb.map(|g| g * GB),
        groups,
        bytes_synced: synced_gb.map(|g| g * GB),
    };
    [
        (
            "starter",
            plan(
                Some(100),
                Some(1),
                Some(1),
                Some(5),
                Some(500_000_000),
                Some(10_000_000),
                Some(3),
            ),
        ),
        (
            "developer",
            plan(
                Some(500),
                Some(3),
                Some(3),
                Some(9),
                Some(2_500_000_000),
                Some(25_000_000),
                Some(10),
            ),
        ),
        (
            "scaler",
            plan(
                Some(10_000),
                Some(10),
                Some(6),
                Some(24),
                Some(100_000_000_000),
                Some(100_000_000),
                Some(24),
            ),
        ),
        (
            "pro",
            plan(
                None,
                Some(100),
                None,
                Some(50),
                Some(250_000_000_000),
                Some(250_000_000),
                Some(100),
            ),
        ),
        ("enterprise", plan(None, None, None, None, None, None, None)),
    ]
    .into_iter()
    .map(|(name, quotas)| (name.to_string(), quotas))
    .collect()
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            locations: Location::default_catalog(),
            server_location: "local".to_string(),
            group_version: concat!("v", env!("CARGO_PKG_VERSION")).to_string(),
            max_body_bytes: 1024 * 1024,
            max_dump_bytes: 256 * 1024 * 1024,
            public_url: "http://127.0.0.1:8080".to_string(),
            usage_collect_interval: std::time::Duration::from_secs(10),
            jobs_interval: std::time::Duration::from_secs(60),
            reconcile_interval: std::time::Duration::from_secs(30),
            creating_grace: std::time::Duration::from_secs(15 * 60),
            plans: default_plans(),
            default_plan: DEFAULT_PLAN.to_string(),
            plan_prices: default_plan_prices(),
            rate_per_credential: Some(DEFAULT_RATE_PER_CREDENTIAL),
            rate_per_address: Some(DEFAULT_RATE_PER_ADDRESS),
            header_read_timeout: atoll_http::listener::DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: std::time::Duration::from_secs(60),
            login_throttle: crate::login_throttle::LoginThrottleSettings::default(),
            dump_lifetime: DEFAULT_DUMP_LIFETIME,
            max_dumps_per_org: DEFAULT_MAX_DUMPS_PER_ORG,
            max_dump_bytes_per_org: DEFAULT_MAX_DUMP_BYTES_PER_ORG,
            jwks: JwksSettings::default(),
        }
    }
}

impl ControlConfig {
    /// The quotas of `plan` (an unknown plan has none: nothing is limited).
    pub fn quotas(&self, plan: &str) -> atoll_types::usage::PlanQuotas {
        self.plans.get(plan).copied().unwrap_or_default()
    }

    /// Whether the organization's plan is the free plan, with its behaviours.
    pub fn is_free_plan(plan: &str) -> bool {
        plan == FREE_PLAN
    }

    pub fn location(&self, code: &str) -> Option<&Location> {
        self.locations.iter().find(|l| l.code == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_parsing() {
        let catalog = Location::parse_catalog("local=Here, aws-us-east-1=Virginia,lhr").unwrap();
        assert_eq!(catalog.len(), 3);
        assert_eq!(catalog[1].platform, "aws");
        assert_eq!(catalog[2].description, "lhr");
        assert!(Location::parse_catalog("").is_err());
        assert!(Location::parse_catalog("a,a").is_err());
        assert!(Location::parse_catalog("Bad_Code").is_err());
    }

    #[test]
    fn plans_file_names_the_default_plan() {
        let mut config = ControlConfig::default();
        assert_eq!(config.default_plan, "enterprise");
        assert_eq!(config.quotas(&config.default_plan), Default::default());
        apply_plans_file(
            &mut config,
            r#"{"team": {"quotas": {"groups": 5}, "default": true}}"#,
        )
        .unwrap();
        assert_eq!(config.default_plan, "team");
        assert_eq!(config.quotas("team").groups, Some(5));
        let two = r#"{"a": {"default": true}, "b": {"default": true}}"#;
        let err = apply_plans_file(&mut config, two).unwrap_err();
        assert!(err.contains("only one plan can be the default"), "{err}");
        // A misspelt field is an error, not a silently ignored setting.
        assert!(apply_plans_file(&mut config, r#"{"a": {"defualt": true}}"#).is_err());
    }
}

/// The operator's settings for key sets.
#[derive(Debug, Clone)]
pub struct JwksSettings {
    /// URL prefixes key sets may be fetched from (`https://example.clerk.accounts.dev/`);
    /// empty: none (key sets are given inline).
    pub allowed_urls: Vec<String>,
    /// Whether a key set URL may resolve to a loopback, private, link-local or otherwise
    /// non-public address (an identity provider inside the operator's own network).
    pub allow_private_addresses: bool,
    /// How often key sets from URLs are fetched again.
    pub refresh_interval: Duration,
    /// How long one fetch may take, connection included.
    pub fetch_timeout: Duration,
    /// Largest key set document accepted, in bytes.
    pub max_bytes: usize,
    /// Key sets one organization may register.
    pub max_per_org: u64,
}

impl Default for JwksSettings {
    fn default() -> Self {
        JwksSettings {
            allowed_urls: Vec::new(),
            allow_private_addresses: false,
            refresh_interval: Duration::from_secs(10 * 60),
            fetch_timeout: Duration::from_secs(5),
            max_bytes: 64 * 1024,
            max_per_org: 10,
        }
    }
}
