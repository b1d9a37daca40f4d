//! Login throttling without lock-outs.
//!
//! Failed logins are counted per **(username, client address)**: after
//! [`LoginThrottleSettings::free_failures`] failures in a row, that pair must wait before
//! its next attempt (right password or not), and the wait doubles with every further
//! failure up to [`LoginThrottleSettings::max_delay`]. A guesser at one address slows only
//! itself: the same user logging in from anywhere else is never refused, so a wrong
//! password from a stranger cannot lock anyone out (the administrator included).
//!
//! One address may also fail at most [`LoginThrottleSettings::address_failures`] times per
//! [`LoginThrottleSettings::address_window`], whatever the usernames, so it cannot spray
//! guesses over many accounts.
//!
//! In memory, per control-plane process, and bounded: at most
//! [`LoginThrottleSettings::capacity`] pairs and as many addresses, the least recently
//! failed forgotten first. Attempts refused with 429 do not count as failures (the
//! password is not even checked), and a success forgets the pair's failures (not the
//! address's: one valid account must not reset a sprayer's budget).

use hashlink::LruCache;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How hard failed logins are slowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginThrottleSettings {
    /// Failures in a row for one username from one address before it must wait.
    pub free_failures: u32,
    /// The first wait; each further failure doubles it.
    pub base_delay: Duration,
    /// The longest wait. A pair with no failure for this long starts afresh.
    pub max_delay: Duration,
    /// Failures one address may make, all usernames together, per `address_window`.
    pub address_failures: u32,
    pub address_window: Duration,
    /// Most (username, address) pairs and most addresses remembered.
    pub capacity: usize,
}

/// Failed logins one address may make for one username before it waits.
pub const LOGIN_FAILURES_BEFORE_BACKOFF: u32 = 5;

impl Default for LoginThrottleSettings {
    fn default() -> Self {
        LoginThrottleSettings {
            free_failures: LOGIN_FAILURES_BEFORE_BACKOFF,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(15 * 60),
            address_failures: 100,
            address_window: Duration::from_secs(15 * 60),
            capacity: 100_000,
        }
    }
}

/// Why an attempt must wait, and for how long (whole seconds, at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This username from this address failed too often.
    Pair(u64),
    /// This address failed too often, over all usernames.
    Address(u64),
}

impl Refusal {
    pub fn seconds(self) -> u64 {
        match self {
            Refusal::Pair(s) | Refusal::Address(s) => s,
        }
    }
}

struct PairRecord {
    failures: u32,
    last_failure: Instant,
    blocked_until: Option<Instant>,
}

struct AddressRecord {
    window_start: Instant,
    failures: u32,
}

/// A client whose address is unknown (no connection info) is one client: the throttle
/// then fails safe, slowing all such clients together.
type Address = Option<IpAddr>;

struct Inner {
    pairs: LruCache<(String, Address), PairRecord>,
    addresses: LruCache<Address, AddressRecord>,
}

pub struct LoginThrottle {
    settings: LoginThrottleSettings,
    inner: Mutex<Inner>,
}

fn wait_seconds(until: Instant, now: Instant) -> u64 {
    let wait = until.saturating_duration_since(now);
    // Rounded up, so a client that waits as told is not refused again.
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

impl LoginThrottle {
    pub fn new(settings: LoginThrottleSettings) -> LoginThrottle {
        LoginThrottle {
            settings,
            inner: Mutex::new(Inner {
                pairs: LruCache::new(settings.capacity.max(1)),
                addresses: LruCache::new(settings.capacity.max(1)),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(username: &str, address: Address) -> (String, Address) {
        (username.trim().to_lowercase(), address)
    }

    /// `Err` while `username` may not be tried from `address`.
    pub fn check(&self, username: &str, address: Address, now: Instant) -> Result<(), Refusal> {
        let inner = self.lock();
        if let Some(record) = inner.addresses.peek(&address) {
            let window_end = record.window_start + self.settings.address_window;
            if window_end > now && record.failures >= self.settings.address_failures {
                return Err(Refusal::Address(wait_seconds(window_end, now)));
            }
        }
        if let Some(until) = inner
            .pairs
            .peek(&Self::key(username, address))
            .and_then(|r| r.blocked_until)
        {
            if until > now {
                return Err(Refusal::Pair(wait_seconds(until, now)));
            }
        }
        Ok(())
    }

    /// Records a wrong password (or unknown username) for `username` from `address`.
    pub fn failed(&self, username: &str, address: Address, now: Instant) {
        let settings = self.settings;
        let mut inner = self.lock();

        if !inner.addresses.contains_key(&address) {
            inner.addresses.insert(
                address,
                AddressRecord {
                    window_start: now,
                    failures: 0,
                },
            );
        }
        let record = inner.addresses.get_mut(&address).expect("just inserted");
        if record.window_start + settings.address_window <= now {
            *record = AddressRecord {
                window_start: now,
                failures: 0,
            };
        }
        record.failures = record.failures.saturating_add(1);

        let key = Self::key(username, address);
        if !inner.pairs.contains_key(&key) {
            inner.pairs.insert(
                key.clone(),
                PairRecord {
                    failures: 0,
                    last_failure: now,
                    blocked_until: None,
                },
            );
        }
        let record = inner.pairs.get_mut(&key).expect("just inserted");
        // Quiet for the longest wait: the pair starts afresh.
        if record.last_failure + settings.max_delay <= now {
            record.failures = 0;
        }
        record.failures = record.failures.saturating_add(1);
        record.last_failure = now;
        if record.failures >= settings.free_failures {
            let doublings = (record.failures - settings.free_failures).min(30);
            let delay = settings
                .base_delay
                .saturating_mul(1u32 << doublings)
                .min(settings.max_delay);
            record.blocked_until = Some(now + delay);
        }
    }

    /// The right password: the pair's failures are forgotten.
    pub fn succeeded(&self, username: &str, address: Address) {
        self.lock().pairs.remove(&Self::key(username, address));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> LoginThrottleSettings {
        LoginThrottleSettings {
            free_failures: 3,
            base_delay: Duration::from_secs(10),
            max_delay: Duration::from_secs(60),
            address_failures: 10,
            address_window: Duration::from_secs(100),
            capacity: 1000,
        }
    }

    fn ip(last: u8) -> Address {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn a_pair_waits_longer_after_each_failure_and_other_addresses_never_wait() {
        let throttle = LoginThrottle::new(settings());
        let t0 = Instant::now();
        for _ in 0..2 {
            assert!(throttle.check("Alice", ip(1), t0).is_ok());
            throttle.failed("alice", ip(1), t0);
        }
        assert!(throttle.check("alice", ip(1), t0).is_ok());
        throttle.failed("alice", ip(1), t0);
        // Three failures: 10 s, whatever the password.
        assert_eq!(throttle.check("ALICE", ip(1), t0), Err(Refusal::Pair(10)));
        // The same user from elsewhere, and another user from here, go on.
        assert!(throttle.check("alice", ip(2), t0).is_ok());
        assert!(throttle.check("bob", ip(1), t0).is_ok());

        let t1 = t0 + Duration::from_secs(10);
        assert!(throttle.check("alice", ip(1), t1).is_ok());
        throttle.failed("alice", ip(1), t1);
        assert_eq!(throttle.check("alice", ip(1), t1), Err(Refusal::Pair(20)));
        let t2 = t1 + Duration::from_secs(20);
        throttle.failed("alice", ip(1), t2);
        assert_eq!(throttle.check("alice", ip(1), t2), Err(Refusal::Pair(40)));
        let t3 = t2 + Duration::from_secs(40);
        throttle.failed("alice", ip(1), t3);
        // Capped at the longest wait.
        assert_eq!(throttle.check("alice", ip(1), t3), Err(Refusal::Pair(60)));

        // A success forgets the pair.
        throttle.succeeded("alice", ip(1));
        assert!(throttle.check("alice", ip(1), t3).is_ok());

        // Quiet for the longest wait: a failure starts the count again.
        throttle.failed("carol", ip(3), t0);
        throttle.failed("carol", ip(3), t0);
        let later = t0 + Duration::from_secs(61);
        throttle.failed("carol", ip(3), later);
        assert!(throttle.check("carol", ip(3), later).is_ok());
    }

    #[test]
    fn one_address_cannot_spray_many_usernames() {
        let throttle = LoginThrottle::new(settings());
        let t0 = Instant::now();
        for n in 0..10 {
            let user = format!("user{n}");
            assert!(throttle.check(&user, ip(9), t0).is_ok());
            throttle.failed(&user, ip(9), t0);
        }
        assert_eq!(
            throttle.check("someone-else", ip(9), t0),
            Err(Refusal::Address(100))
        );
        assert!(throttle.check("someone-else", ip(8), t0).is_ok());
        // The window ends.
        assert!(throttle
            .check("someone-else", ip(9), t0 + Duration::from_secs(100))
            .is_ok());
    }

    #[test]
    fn memory_is_bounded() {
        let throttle = LoginThrottle::new(LoginThrottleSettings {
            capacity: 50,
            ..settings()
        });
        let t0 = Instant::now();
        for n in 0..1000u32 {
            let address = Some(IpAddr::from(n.to_be_bytes()));
            throttle.failed(&format!("u{n}"), address, t0);
        }
        let inner = throttle.lock();
        assert_eq!((inner.pairs.len(), inner.addresses.len()), (50, 50));
    }
}
