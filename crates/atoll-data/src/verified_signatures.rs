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

/// Whether `signature` of `message` is valid under the public key `key` (its 32 bytes as
/// tokens' keys travel), remembered for [`TTL`].
///
/// The key is decompressed into a curve point only when the signature is checked: a
/// database keeps its keys as the configuration carries them (~50 bytes each rather than
/// a ~200-byte point, which over 100,000 databases was ~80 MiB at rest), and the few
/// microseconds of decompression are paid once per token in use per minute.
pub fn verify(key: &[u8; 32], message: &[u8], signature: &Signature) -> bool {
    let digest = digest(key, message, signature);
    if lookup(&digest) {
        return true;
    }
    let Ok(point) = VerifyingKey::from_bytes(key) else {
        return false;
    };
    if point.verify(message, signature).is_err() {
        return false;
    }
    remember(digest);
    true
}

fn digest(key: &[u8; 32], message: &[u8], signature: &Signature) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(key);
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

    /// The public key's bytes, as a database's configuration carries them.
    fn public(key: &SigningKey) -> [u8; 32] {
        key.verifying_key().to_bytes()
    }

    #[test]
    fn a_remembered_signature_stands_only_for_its_own_key_message_and_signature() {
        let (signer, other) = (key(1), key(2));
        let signature = signer.sign(b"claims");
        assert!(verify(&public(&signer), b"claims", &signature));
        // Remembered now; none of its parts may be swapped for another.
        assert!(verify(&public(&signer), b"claims", &signature));
        assert!(!verify(&public(&other), b"claims", &signature));
        assert!(!verify(&public(&signer), b"claimz", &signature));
        let forged = Signature::from_bytes(&[7; 64]);
        assert!(!verify(&public(&signer), b"claims", &forged));
        // Bytes that are no point of the curve verify nothing.
        let not_a_point = (0..=u8::MAX)
            .map(|b| [b; 32])
            .find(|bytes| VerifyingKey::from_bytes(bytes).is_err())
            .expect("some repeated byte is no curve point");
        assert!(!verify(&not_a_point, b"claims", &signature));
    }

    #[test]
    fn failures_are_not_remembered() {
        let signer = key(3);
        let forged = Signature::from_bytes(&[9; 64]);
        assert!(!verify(&public(&signer), b"x", &forged));
        assert!(!lookup(&digest(&public(&signer), b"x", &forged)));
    }
}
