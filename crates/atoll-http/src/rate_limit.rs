//! Request rate limits per client, shared by the control plane and the data plane.
//!
//! A client is its credential when the request carries one (the SHA-256 of the whole
//! `Authorization` header: the secret itself is never kept), else its IP address. Each
//! client has a token bucket: it holds up to `requests` tokens, refills at `requests` per
//! `period`, and every request takes one; an empty bucket answers "wait this long".
//!
//! Memory is bounded: a bucket that has refilled completely is indistinguishable from a
//! new one, so idle clients are forgotten on the next sweep, and at most
//! [`MAX_TRACKED_CLIENTS`] are tracked at once (beyond that new clients are let through
//! untracked rather than locked out: the limit is a brake on runaway clients, not a gate).

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Clients tracked at once per limiter (about 100 bytes each).
pub const MAX_TRACKED_CLIENTS: usize = 100_000;

/// `requests` per `period`, in bursts of up to `requests`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub requests: u32,
    pub period: Duration,
}

impl RateLimit {
    pub fn per_second(requests: u32) -> RateLimit {
        RateLimit {
            requests,
            period: Duration::from_secs(1),
        }
    }

    pub fn per_minute(requests: u32) -> RateLimit {
        RateLimit {
            requests,
            period: Duration::from_secs(60),
        }
    }

    fn tokens_per_second(&self) -> f64 {
        f64::from(self.requests) / self.period.as_secs_f64()
    }
}

impl std::fmt::Display for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.period.as_secs() {
            1 => write!(f, "{}/s", self.requests),
            60 => write!(f, "{}/min", self.requests),
            3600 => write!(f, "{}/h", self.requests),
            _ => write!(f, "{}/{}ms", self.requests, self.period.as_millis()),
        }
    }
}

/// A limit as written in flags: `100/s`, `6000/min`, `10000/h`, or `off`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimitSetting(pub Option<RateLimit>);

impl FromStr for RateLimitSetting {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") || text == "0" {
            return Ok(RateLimitSetting(None));
        }
        let usage = || {
            format!("invalid rate limit {text:?}: write <requests>/s, <requests>/min, <requests>/h, or off")
        };
        let (count, unit) = text.split_once('/').ok_or_else(usage)?;
        let requests: u32 = count.trim().parse().map_err(|_| usage())?;
        let period = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            _ => return Err(usage()),
        };
        if requests == 0 {
            return Ok(RateLimitSetting(None));
        }
        Ok(RateLimitSetting(Some(RateLimit { requests, period })))
    }
}

impl std::fmt::Display for RateLimitSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(limit) => limit.fmt(f),
            None => f.write_str("off"),
        }
    }
}

/// Who a request is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    /// SHA-256 of the credential.
    Credential([u8; 32]),
    Address(IpAddr),
    /// Neither a credential nor a known address (requests not from a socket, in tests).
    Unknown,
}

impl Client {
    /// The credential of `authorization` (any scheme), else the peer address.
    pub fn of(authorization: Option<&[u8]>, peer: Option<IpAddr>) -> Client {
        match authorization {
            Some(value) if !value.is_empty() => Client::Credential(Sha256::digest(value).into()),
            _ => peer.map_or(Client::Unknown, |ip| Client::Address(canonical(ip))),
        }
    }

    pub fn has_credential(&self) -> bool {
        matches!(self, Client::Credential(_))
    }
}

/// IPv4 clients arriving on an IPv6 socket share their IPv4 bucket.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// Token buckets of one limit, by client.
pub struct RateLimiter {
    limit: Option<RateLimit>,
    max_clients: usize,
    buckets: Mutex<HashMap<Client, Bucket>>,
}

impl RateLimiter {
    pub fn new(limit: Option<RateLimit>) -> RateLimiter {
        RateLimiter::with_capacity(limit, MAX_TRACKED_CLIENTS)
    }

    fn with_capacity(limit: Option<RateLimit>, max_clients: usize) -> RateLimiter {
        RateLimiter {
            limit,
            max_clients,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn limit(&self) -> Option<RateLimit> {
        self.limit
    }

    /// Takes one request from `client`'s bucket; `Err(seconds to wait)` when it is empty.
    pub fn check(&self, client: Client) -> Result<(), u64> {
        self.check_at(client, Instant::now())
    }

    fn check_at(&self, client: Client, now: Instant) -> Result<(), u64> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let capacity = f64::from(limit.requests);
        let rate = limit.tokens_per_second();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.contains_key(&client) && buckets.len() >= self.max_clients {
            // Forget every client whose bucket is full again: they are as good as new.
            buckets.retain(|_, bucket| refilled(bucket, now, rate, capacity) < capacity);
            if buckets.len() >= self.max_clients {
                return Ok(());
            }
        }
        let bucket = buckets.entry(client).or_insert(Bucket {
            tokens: capacity,
            updated: now,
        });
        bucket.tokens = refilled(bucket, now, rate, capacity);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / rate;
            // Retry-After is whole seconds; rounding up never invites a retry too early.
            Err((wait.ceil() as u64).max(1))
        }
    }

    /// Whether `client` could make a request now, without taking one.
    pub fn peek(&self, client: Client) -> Result<(), u64> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let Some(bucket) = buckets.get(&client) else {
            return Ok(());
        };
        let rate = limit.tokens_per_second();
        let tokens = refilled(bucket, Instant::now(), rate, f64::from(limit.requests));
        if tokens >= 1.0 {
            Ok(())
        } else {
            Err((((1.0 - tokens) / rate).ceil() as u64).max(1))
        }
    }

    /// Forgets idle clients (those whose bucket is full again); the sweep for a timer.
    pub fn forget_idle(&self) {
        let Some(limit) = self.limit else {
            return;
        };
        let now = Instant::now();
        let capacity = f64::from(limit.requests);
        let rate = limit.tokens_per_second();
        self.buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, bucket| refilled(bucket, now, rate, capacity) < capacity);
    }

    pub fn tracked_clients(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

fn refilled(bucket: &Bucket, now: Instant, rate: f64, capacity: f64) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
    (bucket.tokens + elapsed * rate).min(capacity)
}

/// The limits of a listener: per credential, and per address for requests without one.
///
/// Made-up credentials would each get a fresh bucket and so escape the address's limit;
/// therefore every refused credential (401) also counts against its address, and once an
/// address has used up its limit that way, its requests with credentials are refused too
/// until its bucket refills.
pub struct RateLimits {
    pub per_credential: RateLimiter,
    pub per_address: RateLimiter,
    refused_per_address: RateLimiter,
}

impl RateLimits {
    pub fn new(per_credential: Option<RateLimit>, per_address: Option<RateLimit>) -> RateLimits {
        RateLimits {
            per_credential: RateLimiter::new(per_credential),
            per_address: RateLimiter::new(per_address),
            refused_per_address: RateLimiter::new(per_address),
        }
    }

    pub fn disabled() -> RateLimits {
        RateLimits::new(None, None)
    }

    /// Charges one request to its client; `Err(seconds to wait)` when over the limit.
    /// `address` is where it came from.
    pub fn check(&self, client: Client, address: Option<IpAddr>) -> Result<(), u64> {
        if client.has_credential() {
            if let Some(address) = address {
                self.refused_per_address
                    .peek(Client::of(None, Some(address)))?;
            }
            self.per_credential.check(client)
        } else {
            self.per_address.check(client)
        }
    }

    /// Records that a request from `address` carried a credential that was refused.
    pub fn credential_refused(&self, address: Option<IpAddr>) {
        if let Some(address) = address {
            let _ = self
                .refused_per_address
                .check(Client::of(None, Some(address)));
        }
    }

    pub fn forget_idle(&self) {
        self.per_credential.forget_idle();
        self.per_address.forget_idle();
        self.refused_per_address.forget_idle();
    }

    /// Forgets idle clients every minute, for as long as `self` lives.
    pub fn spawn_sweeper(self: &std::sync::Arc<Self>) {
        let limits = std::sync::Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs(60));
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(limits) = limits.upgrade() else {
                    return;
                };
                limits.forget_idle();
            }
        });
    }
}

/// The client of a request: its `Authorization` header, else the peer address recorded
/// by the listener (`ConnectInfo`).
pub fn client_of<B>(request: &axum::http::Request<B>) -> Client {
    let authorization = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .map(|value| value.as_bytes());
    Client::of(authorization, address_of(request))
}

/// The peer address recorded by the listener (`ConnectInfo`).
pub fn address_of<B>(request: &axum::http::Request<B>) -> Option<IpAddr> {
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Client {
        Client::of(None, Some(IpAddr::from([10, 0, 0, last])))
    }

    #[test]
    fn settings_parse() {
        assert_eq!(
            "100/s".parse::<RateLimitSetting>().unwrap(),
            RateLimitSetting(Some(RateLimit::per_second(100)))
        );
        assert_eq!(
            " 6000/min ".parse::<RateLimitSetting>().unwrap(),
            RateLimitSetting(Some(RateLimit::per_minute(6000)))
        );
        assert_eq!(
            "OFF".parse::<RateLimitSetting>().unwrap(),
            RateLimitSetting(None)
        );
        assert_eq!(
            "0/s".parse::<RateLimitSetting>().unwrap(),
            RateLimitSetting(None)
        );
        for bad in ["", "100", "x/s", "10/week", "-1/s"] {
            assert!(bad.parse::<RateLimitSetting>().is_err(), "{bad:?}");
        }
        assert_eq!(
            RateLimitSetting(Some(RateLimit::per_minute(5))).to_string(),
            "5/min"
        );
    }

    #[test]
    fn the_bucket_empties_and_refills() {
        let limiter = RateLimiter::new(Some(RateLimit::per_minute(3)));
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.check_at(ip(1), start), Ok(()));
        }
        // One token comes back every 20 seconds.
        assert_eq!(limiter.check_at(ip(1), start), Err(20));
        assert_eq!(
            limiter.check_at(ip(1), start + Duration::from_secs(15)),
            Err(5)
        );
        assert_eq!(
            limiter.check_at(ip(1), start + Duration::from_secs(20)),
            Ok(())
        );
        // Another client has its own bucket.
        assert_eq!(limiter.check_at(ip(2), start), Ok(()));
        // Disabled: everything passes, nothing is tracked.
        let off = RateLimiter::new(None);
        for _ in 0..1000 {
            assert_eq!(off.check(ip(1)), Ok(()));
        }
        assert_eq!(off.tracked_clients(), 0);
    }

    #[test]
    fn credentials_are_hashed_and_distinct_from_addresses() {
        let a = Client::of(Some(b"Bearer secret-a"), Some(IpAddr::from([10, 0, 0, 1])));
        let b = Client::of(Some(b"Bearer secret-b"), Some(IpAddr::from([10, 0, 0, 1])));
        assert_ne!(a, b);
        let Client::Credential(hash) = a else {
            panic!("a credential is keyed by its hash");
        };
        assert!(!hash.windows(6).any(|w| w == b"secret"));
        assert_eq!(Client::of(Some(b""), None), Client::Unknown);
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(Client::of(None, Some(mapped)), ip(1));
        let limits = RateLimits::new(
            Some(RateLimit::per_minute(1)),
            Some(RateLimit::per_minute(2)),
        );
        let home = Some(IpAddr::from([10, 0, 0, 1]));
        assert_eq!(limits.check(a, home), Ok(()));
        assert!(limits.check(a, home).is_err());
        assert_eq!(limits.check(b, home), Ok(()));
        assert_eq!(limits.check(ip(1), home), Ok(()));
        assert_eq!(limits.check(ip(1), home), Ok(()));
        assert!(limits.check(ip(1), home).is_err());
    }

    #[test]
    fn refused_credentials_count_against_their_address() {
        let limits = RateLimits::new(
            Some(RateLimit::per_minute(100)),
            Some(RateLimit::per_minute(2)),
        );
        let attacker = Some(IpAddr::from([10, 0, 0, 9]));
        let elsewhere = Some(IpAddr::from([10, 0, 0, 10]));
        for n in 0..2 {
            let made_up = Client::of(Some(format!("Bearer guess-{n}").as_bytes()), attacker);
            assert_eq!(limits.check(made_up, attacker), Ok(()));
            limits.credential_refused(attacker);
        }
        let next = Client::of(Some(b"Bearer guess-2"), attacker);
        assert!(limits.check(next, attacker).is_err());
        assert_eq!(limits.check(next, elsewhere), Ok(()));
    }

    #[test]
    fn idle_clients_are_forgotten_and_the_map_is_bounded() {
        let limiter = RateLimiter::with_capacity(Some(RateLimit::per_second(1)), 2);
        let start = Instant::now();
        assert_eq!(limiter.check_at(ip(1), start), Ok(()));
        assert_eq!(limiter.check_at(ip(2), start), Ok(()));
        // Full: a third client passes untracked while the others are still active.
        assert_eq!(limiter.check_at(ip(3), start), Ok(()));
        assert_eq!(limiter.check_at(ip(3), start), Ok(()));
        assert_eq!(limiter.tracked_clients(), 2);
        // A second later both buckets are full again: they make room.
        let later = start + Duration::from_secs(1);
        assert_eq!(limiter.check_at(ip(3), later), Ok(()));
        assert_eq!(limiter.check_at(ip(3), later), Err(1));
        assert_eq!(limiter.tracked_clients(), 1);
    }
}
