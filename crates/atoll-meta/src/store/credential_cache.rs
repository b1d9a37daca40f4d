//! The credential cache: bearer-secret hash → the token and its user, so an authenticated
//! request does not cost a store round trip (on PostgreSQL, a network round trip) each time.
//!
//! - **Bounded**: at most [`CAPACITY`] credentials, least recently used evicted first.
//! - **Short-lived**: an entry is trusted for [`TTL`] after it was read from the store.
//!   That is the staleness bound between *processes*: a token revoked through another
//!   `atoll serve` replica stops working here at most `TTL` later.
//! - **Invalidated at once in this process**: every store operation that revokes tokens or
//!   changes what a credential may do (revoking a token, removing a member or changing
//!   their role, deleting an organization, deleting or transferring a group) empties the
//!   cache when it commits, so the next request reads the store again. These are rare, so
//!   emptying the whole cache is cheaper than being clever about which entries they touch.
//!
//! A lookup that started before an invalidation must not put what it read (possibly the
//! state before the revocation) into the cache after it: every invalidation bumps a
//! generation, and a lookup only inserts if the generation it saw before reading the store
//! is still current.
//!
//! - **Suspended while deaf to other replicas**: on PostgreSQL the cache trusts nothing
//!   until this replica listens for other replicas' changes, nor while it reconnects that
//!   listener. A credential cached before the `LISTEN` took effect would miss a revocation
//!   committed in between and stay trusted for the whole TTL.

use crate::model::Credential;
use hashlink::LruCache;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a credential read from the store is trusted without reading it again.
pub const TTL: Duration = Duration::from_secs(10);
/// Credentials kept at most (one entry is a token and a user: well under 1 KiB).
pub const CAPACITY: usize = 10_000;

pub(crate) struct CredentialCache {
    inner: Mutex<Inner>,
    ttl: Duration,
}

struct Inner {
    entries: LruCache<String, Entry>,
    generation: u64,
    /// Nothing is served from the cache or put into it (see the module's notes).
    suspended: bool,
}

struct Entry {
    credential: Credential,
    loaded_at: Instant,
}

/// Where a lookup that missed stands, to be handed back to [`CredentialCache::insert`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Generation(u64);

impl CredentialCache {
    pub(crate) fn new(capacity: usize, ttl: Duration) -> CredentialCache {
        CredentialCache {
            inner: Mutex::new(Inner {
                entries: LruCache::new(capacity),
                generation: 0,
                suspended: false,
            }),
            ttl,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached credential for `secret_hash` if it is fresh; otherwise the generation a
    /// store lookup must present to cache what it reads.
    pub(crate) fn get(&self, secret_hash: &str) -> Result<Credential, Generation> {
        let mut inner = self.lock();
        let generation = Generation(inner.generation);
        if inner.suspended {
            return Err(generation);
        }
        match inner.entries.get(secret_hash) {
            Some(entry) if entry.loaded_at.elapsed() < self.ttl => Ok(entry.credential.clone()),
            Some(_) => {
                inner.entries.remove(secret_hash);
                Err(generation)
            }
            None => Err(generation),
        }
    }

    /// Caches what a lookup read, unless an invalidation happened since it started.
    pub(crate) fn insert(&self, secret_hash: &str, credential: Credential, seen: Generation) {
        let mut inner = self.lock();
        if inner.generation != seen.0 || inner.suspended {
            return;
        }
        inner.entries.insert(
            secret_hash.to_string(),
            Entry {
                credential,
                loaded_at: Instant::now(),
            },
        );
    }

    /// Notes a recorded use in the cached copy, so the once-a-minute `last_used_at` write
    /// is not repeated on every request until the entry expires.
    pub(crate) fn record_use(&self, secret_hash: &str, at: i64) {
        if let Some(entry) = self.lock().entries.get_mut(secret_hash) {
            entry.credential.token.last_used_at = Some(at);
        }
    }

    /// Forgets every credential: the next request of each token reads the store.
    pub(crate) fn invalidate_all(&self) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.entries.clear();
    }

    /// Forgets every credential and caches none until [`CredentialCache::resume`]: changes
    /// made elsewhere cannot reach this cache meanwhile.
    pub(crate) fn suspend(&self) {
        let mut inner = self.lock();
        inner.suspended = true;
        inner.generation += 1;
        inner.entries.clear();
    }

    /// Caches again, starting empty (a lookup begun while suspended puts nothing in).
    pub(crate) fn resume(&self) {
        let mut inner = self.lock();
        inner.suspended = false;
        inner.generation += 1;
        inner.entries.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ApiToken, TokenKind, TokenRestriction, User};

    fn credential(token_id: &str) -> Credential {
        Credential {
            token: ApiToken {
                id: token_id.into(),
                user_id: "u".into(),
                name: "t".into(),
                kind: TokenKind::Api,
                restriction: TokenRestriction::Unrestricted,
                created_at: 0,
                expires_at: None,
                last_used_at: None,
                revoked_at: None,
            },
            user: User {
                id: "u".into(),
                username: "alice".into(),
                email: "alice@example.com".into(),
                name: "Alice".into(),
                password_hash: String::new(),
                is_admin: false,
                created_at: 0,
            },
        }
    }

    #[test]
    fn hits_misses_and_capacity() {
        let cache = CredentialCache::new(2, TTL);
        let seen = cache.get("a").unwrap_err();
        cache.insert("a", credential("ta"), seen);
        assert_eq!(cache.get("a").unwrap().token.id, "ta");
        let seen = cache.get("b").unwrap_err();
        cache.insert("b", credential("tb"), seen);
        // Full: `c` evicts the least recently used, `a` (`b` came after its last use).
        let seen = cache.get("c").unwrap_err();
        cache.insert("c", credential("tc"), seen);
        assert_eq!(cache.len(), 2);
        assert!(cache.get("a").is_err());
        assert!(cache.get("b").is_ok() && cache.get("c").is_ok());
    }

    #[test]
    fn entries_expire() {
        let cache = CredentialCache::new(10, Duration::ZERO);
        let seen = cache.get("a").unwrap_err();
        cache.insert("a", credential("ta"), seen);
        assert!(cache.get("a").is_err());
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn a_suspended_cache_serves_and_keeps_nothing_until_resumed() {
        let cache = CredentialCache::new(10, TTL);
        let seen = cache.get("a").unwrap_err();
        cache.insert("a", credential("ta"), seen);
        cache.suspend();
        assert!(
            cache.get("a").is_err(),
            "suspending forgets what was cached"
        );
        let during = cache.get("a").unwrap_err();
        cache.insert("a", credential("ta"), during);
        assert!(cache.get("a").is_err(), "nothing is cached while suspended");
        // A lookup that began while suspended and ends after resuming read the store
        // while changes could be missed: it is not kept either.
        let begun = cache.get("a").unwrap_err();
        cache.resume();
        cache.insert("a", credential("ta"), begun);
        assert!(cache.get("a").is_err());
        let seen = cache.get("a").unwrap_err();
        cache.insert("a", credential("ta"), seen);
        assert_eq!(cache.get("a").unwrap().token.id, "ta");
    }

    #[test]
    fn a_lookup_racing_an_invalidation_is_not_cached() {
        let cache = CredentialCache::new(10, TTL);
        let before = cache.get("a").unwrap_err();
        // The token is revoked while the lookup reads the store.
        cache.invalidate_all();
        cache.insert("a", credential("ta"), before);
        assert!(
            cache.get("a").is_err(),
            "the pre-revocation read was cached"
        );
        let after = cache.get("a").unwrap_err();
        cache.insert("a", credential("ta"), after);
        assert!(cache.get("a").is_ok());
        cache.invalidate_all();
        assert!(cache.get("a").is_err());
    }

    #[test]
    fn uses_are_recorded_in_the_cached_copy() {
        let cache = CredentialCache::new(10, TTL);
        let seen = cache.get("a").unwrap_err();
        cache.insert("a", credential("ta"), seen);
        cache.record_use("a", 42);
        assert_eq!(cache.get("a").unwrap().token.last_used_at, Some(42));
    }
}
