//! Token secrets and password hashes. Secrets are random, shown once, and stored only as
//! a SHA-256 digest (they carry 256 bits of entropy, so a slow hash adds nothing);
//! passwords are low-entropy and get Argon2id.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Every platform and login token starts with this, so secret scanners can find leaks.
pub const TOKEN_PREFIX: &str = "atoll_";
const SECRET_BYTES: usize = 32;

/// A freshly minted secret. `Debug` never shows it.
pub struct PlainToken(String);

impl PlainToken {
    pub fn generate() -> PlainToken {
        let mut bytes = [0u8; SECRET_BYTES];
        rand::thread_rng().fill_bytes(&mut bytes);
        PlainToken(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    pub fn hashed(&self) -> String {
        hash_secret(&self.0)
    }

    /// The secret itself, to be shown to its owner this once.
    pub fn reveal(self) -> String {
        self.0
    }
}

impl std::fmt::Debug for PlainToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlainToken(<redacted>)")
    }
}

/// Whether a bearer value has the shape of one of our secrets at all.
pub fn looks_like_token(bearer: &str) -> bool {
    bearer.strip_prefix(TOKEN_PREFIX).is_some_and(|rest| {
        rest.len() == 43
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// Lowercase hex of the secret's SHA-256: the key of the token in the store. Runs on
/// every authenticated request, so it writes into one buffer.
pub fn hash_secret(secret: &str) -> String {
    use std::fmt::Write;
    let digest = Sha256::digest(secret.as_bytes());
    let mut hex = String::with_capacity(digest.len() * 2);
    for byte in digest {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// A new 22-character token id, the shape Turso uses (`clGFZ4STEe6fljpFzIum8A`).
pub fn new_token_id() -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A random password for bootstrapped users. It never starts with `-` or `_`: users paste
/// it after `--password`, where a leading `-` reads as a flag to many tools.
pub fn generate_password() -> String {
    loop {
        let mut bytes = [0u8; 18];
        rand::thread_rng().fill_bytes(&mut bytes);
        let password = URL_SAFE_NO_PAD.encode(bytes);
        if password.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return password;
        }
    }
}

/// Argon2id with the crate's recommended parameters. CPU-heavy: call it on a blocking thread.
pub fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| e.to_string())
}

/// Constant-time verification (the argon2 crate compares digests in constant time).
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

/// [`hash_password`] on a blocking thread (Argon2 takes tens of milliseconds).
pub(crate) async fn hash_password_blocking(password: String) -> crate::error::ApiResult<String> {
    use crate::error::ApiError;
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(ApiError::Internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_a_recognisable_shape_and_hide_in_debug() {
        let token = PlainToken::generate();
        assert_eq!(format!("{token:?}"), "PlainToken(<redacted>)");
        let hash = token.hashed();
        let secret = token.reveal();
        assert!(looks_like_token(&secret), "{secret}");
        assert_eq!(hash_secret(&secret), hash);
        assert!(!looks_like_token("atoll_short"));
        assert!(!looks_like_token("eyJhbGciOiJFZERTQSJ9.e30.sig"));
        assert_eq!(
            hash_secret("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(new_token_id().len(), 22);
    }

    #[test]
    fn passwords() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("wrong", &hash));
        assert!(!verify_password("correct horse", "garbage"));
    }
}
