//! One copy in memory of each organization's credentials, however many of its databases
//! the node holds.
//!
//! Every database's configuration carries its organization's key sets (JWKS public keys,
//! `DatabaseConfig::external_keys`) and client-certificate CA (`client_ca`): the same
//! values for each database of the organization. Each configuration arrives on its own (a
//! create, a change, the reconciler), so each came with its own copy: an RSA key is ~0.5
//! KiB and a CA certificate ~1 KiB, for every database — 150 MiB over 100,000 databases of
//! an organization that uses both, where the rest of a database's state at rest is ~3 KiB
//! (docs/PERFORMANCE.md, "A database's own state at rest"). [`share`] replaces a
//! configuration's copies with the one the node already holds when they are equal.
//!
//! Only weak references are kept here: a value no database uses any more is freed, and its
//! entry is swept once the table has doubled since the last sweep.

use atoll_types::node::{DatabaseConfig, ExternalKey};
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, Hash};
use std::sync::{Arc, LazyLock, Mutex, Weak};

static KEY_SETS: LazyLock<Mutex<Shared<[ExternalKey]>>> = LazyLock::new(Default::default);
static CERTIFICATES: LazyLock<Mutex<Shared<str>>> = LazyLock::new(Default::default);

/// Makes `config` hold the node's copy of its organization's credentials when the node has
/// one equal to them (and makes its own the node's copy otherwise).
pub fn share(config: &mut DatabaseConfig) {
    config.external_keys = lock(&KEY_SETS).share(&config.external_keys);
    if let Some(ca) = &config.client_ca {
        config.client_ca = Some(lock(&CERTIFICATES).share(ca));
    }
}

/// Values by the hash of their content, each held weakly.
struct Shared<T: ?Sized> {
    by_hash: HashMap<u64, Vec<Weak<T>>>,
    /// Weak references held, and how many there were after the last sweep.
    held: usize,
    held_after_sweep: usize,
}

impl<T: ?Sized> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            by_hash: HashMap::new(),
            held: 0,
            held_after_sweep: 0,
        }
    }
}

/// Entries held before the first sweep is considered.
const SWEEP_FLOOR: usize = 64;

impl<T: ?Sized + Hash + Eq> Shared<T> {
    fn share(&mut self, value: &Arc<T>) -> Arc<T> {
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(&**value);
        let candidates = self.by_hash.entry(hash).or_default();
        if let Some(existing) = candidates
            .iter()
            .filter_map(Weak::upgrade)
            .find(|existing| **existing == **value)
        {
            return existing;
        }
        candidates.push(Arc::downgrade(value));
        self.held += 1;
        if self.held > SWEEP_FLOOR.max(2 * self.held_after_sweep) {
            self.sweep();
        }
        Arc::clone(value)
    }

    /// Forgets the values no configuration holds any more.
    fn sweep(&mut self) {
        self.by_hash.retain(|_, candidates| {
            candidates.retain(|weak| weak.strong_count() > 0);
            !candidates.is_empty()
        });
        self.held = self.by_hash.values().map(Vec::len).sum();
        self.held_after_sweep = self.held;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_types::node::Jwk;

    fn key_set(modulus: &str) -> Arc<[ExternalKey]> {
        vec![ExternalKey {
            set: "auth0".into(),
            jwk: Jwk {
                kty: "RSA".into(),
                kid: Some("k1".into()),
                alg: Some("RS256".into()),
                crv: None,
                n: Some(modulus.into()),
                e: Some("AQAB".into()),
                x: None,
                y: None,
            },
        }]
        .into()
    }

    #[test]
    fn equal_credentials_end_up_as_one_copy_and_different_ones_stay_apart() {
        let mut shared = Shared::default();
        let first = shared.share(&key_set("n-one"));
        // Another database's configuration, decoded on its own: an equal copy.
        let again = shared.share(&key_set("n-one"));
        assert!(Arc::ptr_eq(&first, &again));
        let other = shared.share(&key_set("n-two"));
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(*other, *key_set("n-two"));

        let mut certificates: Shared<str> = Shared::default();
        let ca = certificates.share(&Arc::from("-----BEGIN CERTIFICATE-----"));
        let same = certificates.share(&Arc::from("-----BEGIN CERTIFICATE-----"));
        assert!(Arc::ptr_eq(&ca, &same));
    }

    #[test]
    fn values_no_one_holds_are_freed_and_swept() {
        let mut shared: Shared<str> = Shared::default();
        let kept = shared.share(&Arc::from("kept"));
        for i in 0..1_000 {
            // A value used once and dropped (a rotated-out CA): only its weak entry stays,
            // until a sweep.
            drop(shared.share(&Arc::from(format!("rotated {i}"))));
        }
        assert!(
            shared.held <= 2 * SWEEP_FLOOR + 1,
            "entries pile up: {}",
            shared.held
        );
        // What is still held is still shared.
        assert!(Arc::ptr_eq(&kept, &shared.share(&Arc::from("kept"))));
        // A freed value comes back as a new copy, and is shared from then on.
        let back = shared.share(&Arc::from("rotated 3"));
        assert!(Arc::ptr_eq(&back, &shared.share(&Arc::from("rotated 3"))));
    }

    #[test]
    fn a_configuration_gets_the_node_copy_of_its_organization_credentials() {
        let config = |keys: Arc<[ExternalKey]>, ca: &str| DatabaseConfig {
            external_keys: keys,
            client_ca: Some(Arc::from(ca)),
            ..serde_json::from_value(serde_json::json!({
                "id": "db", "name": "db", "org_id": "org", "group_id": "group",
                "label": "db-org", "state": "active", "block_reads": false,
                "block_writes": false, "size_limit": null, "allow_attach": false,
                "keys": []
            }))
            .expect("a minimal configuration")
        };
        let (mut a, mut b) = (
            config(key_set("shared-test"), "shared-test CA"),
            config(key_set("shared-test"), "shared-test CA"),
        );
        assert!(!Arc::ptr_eq(&a.external_keys, &b.external_keys));
        share(&mut a);
        share(&mut b);
        assert!(Arc::ptr_eq(&a.external_keys, &b.external_keys));
        assert!(Arc::ptr_eq(
            a.client_ca.as_ref().unwrap(),
            b.client_ca.as_ref().unwrap()
        ));
        assert_eq!(a, b);
    }
}
