//! Ed25519 signatures this process verified recently, whichever database the token was
//! presented to.
//!
//! A group token is signed by its group's key, and every database of the group accepts
//! it: a tenant's client (or a platform's backend) sends the same token to thousands of
//! databases. Each database remembers the tokens it verified (`Database::verify_token`),
//! but on a node with 100,000 databases most requests reach a database that has not seen
//! the token within that minute, and the signature check (~50 µs) was the largest part of
//! authenticating them (issue 31). Whether a signature is valid depends only on the
//! signed bytes, the signature and the public key, so the answer is shared by every
//! database that trusts that key: it is remembered here under a digest of all three.
//!
//! Nothing else is decided here: the caller picks the keys (a rotated-out key is not among
//! them, so nothing verified under it is ever found), and checks the expiry and what the
//! claims grant on every request. Only successes are remembered; a forged signature costs
//! its verification every time.

use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// How long a verified signature is remembered (as a database remembers a token).
const TTL: Duration = crate::database::VERIFIED_TOKEN_TTL;

/// Signatures remembered at most: 48 bytes each, a few MiB at worst. Distinct tokens in
/// use on one node within a minute are far fewer (one per client, not per database).
const CAPACITY: usize = 65_536;

static VERIFIED: LazyLock<Mutex<HashMap<[u8; 32], Instant>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Whether `signature` of `message` is valid under `key`, remembered for [`TTL`].
pub fn verify(key: &VerifyingKey, message: &[u8], signature: &Signature) -> bool {
    let digest = digest(key, message, signature);
    if lookup(&digest) {
        return true;
    }
    if key.verify(message, signature).is_err() {
        return false;
    }
    remember(digest);
    true
}

fn digest(key: &VerifyingKey, message: &[u8], signature: &Signature) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(key.as_bytes());
    hasher.update(signature.to_bytes());
    hasher.update(message);
    hasher.finalize().into()
}

fn lookup(digest: &[u8; 32]) -> bool {
    let verified = VERIFIED.lock().unwrap_or_else(|p| p.into_inner());
    verified.get(digest).is_some_and(|at| at.elapsed() < TTL)
}

fn remember(digest: [u8; 32]) {
    let mut verified = VERIFIED.lock().unwrap_or_else(|p| p.into_inner());
    if verified.len() >= CAPACITY {
        verified.retain(|_, at| at.elapsed() < TTL);
        // Still full of live entries: start over rather than track an order; the cost is
        // one verification per token in use.
        if verified.len() >= CAPACITY {
            verified.clear();
        }
    }
    verified.insert(digest, Instant::now());
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn a_remembered_signature_stands_only_for_its_own_key_message_and_signature() {
        let (signer, other) = (key(1), key(2));
        let signature = signer.sign(b"claims");
        assert!(verify(&signer.verifying_key(), b"claims", &signature));
        // Remembered now; none of its parts may be swapped for another.
        assert!(verify(&signer.verifying_key(), b"claims", &signature));
        assert!(!verify(&other.verifying_key(), b"claims", &signature));
        assert!(!verify(&signer.verifying_key(), b"claimz", &signature));
        let forged = Signature::from_bytes(&[7; 64]);
        assert!(!verify(&signer.verifying_key(), b"claims", &forged));
    }

    #[test]
    fn failures_are_not_remembered() {
        let signer = key(3);
        let forged = Signature::from_bytes(&[9; 64]);
        assert!(!verify(&signer.verifying_key(), b"x", &forged));
        assert!(!lookup(&digest(&signer.verifying_key(), b"x", &forged)));
    }
}
