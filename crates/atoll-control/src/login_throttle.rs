//! Login throttling: after too many failed logins for a username in a window, further
//! attempts (right password or not) are refused with 429 and `Retry-After` until the oldest
//! failure leaves the window. In memory, per control-plane process.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct LoginThrottle {
    max_failures: usize,
    window: Duration,
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl LoginThrottle {
    pub fn new(max_failures: usize, window: Duration) -> LoginThrottle {
        LoginThrottle {
            max_failures,
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn key(username: &str) -> String {
        username.trim().to_lowercase()
    }

    /// `Err(seconds to wait)` while the username is locked out.
    pub fn check(&self, username: &str) -> Result<(), u64> {
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let Some(recent) = failures.get_mut(&Self::key(username)) else {
            return Ok(());
        };
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            recent.pop_front();
        }
        if recent.len() < self.max_failures {
            return Ok(());
        }
        let oldest = recent.front().copied().unwrap_or(now);
        let wait = self.window.saturating_sub(now.duration_since(oldest));
        Err(wait.as_secs().max(1))
    }

    pub fn failed(&self, username: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded: an attacker cycling usernames cannot grow the map without limit.
        if failures.len() > 100_000 {
            failures.clear();
        }
        failures
            .entry(Self::key(username))
            .or_default()
            .push_back(Instant::now());
    }

    pub fn succeeded(&self, username: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&Self::key(username));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_out_after_the_limit_and_forgives_on_success() {
        let throttle = LoginThrottle::new(3, Duration::from_secs(60));
        for _ in 0..3 {
            assert!(throttle.check("Alice").is_ok());
            throttle.failed("alice");
        }
        let wait = throttle.check("ALICE").unwrap_err();
        assert!((1..=60).contains(&wait));
        assert!(throttle.check("bob").is_ok());
        throttle.succeeded("alice");
        assert!(throttle.check("alice").is_ok());
        let short = LoginThrottle::new(1, Duration::from_millis(10));
        short.failed("x");
        assert!(short.check("x").is_err());
        std::thread::sleep(Duration::from_millis(20));
        assert!(short.check("x").is_ok());
    }
}
