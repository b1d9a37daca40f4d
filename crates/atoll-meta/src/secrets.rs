//! Signing keys sealed at rest.
//!
//! The private Ed25519 keys that sign database tokens are the most valuable thing in the
//! metadata store: whoever reads one mints tokens for its database or group. The store
//! never writes them in the clear when it has a [`SecretsKeyring`]: each one is sealed
//! with XChaCha20-Poly1305 under the operator's secrets key, with a random nonce per
//! value and the record it belongs to as associated data, so a sealed value copied onto
//! another database's or group's row does not open there.
//!
//! A sealed value is the text `v1:<key id>:<base64url(nonce ‖ ciphertext ‖ tag)>`. The key
//! id is derived from the key itself (a hash prefix, never the key), so rotation needs no
//! naming: the keyring holds the current key, which seals, and previous keys, which only
//! open; [`crate::Store::seal_signing_keys`] re-seals every value under the current key.
//! Values without the `v1:` prefix are plaintext written by an older version (or by a
//! store run with `--insecure-plaintext-secrets`); they are read as they are and sealed by
//! the same pass.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::fmt;

/// Bytes of a secrets key.
pub const SECRETS_KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;
const ENVELOPE_VERSION: &str = "v1";

/// Why a secrets key or a sealed value could not be used. The messages name key ids and
/// records, never key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretsError {
    #[error("invalid secrets key: {0}")]
    InvalidKey(String),
    #[error(
        "the {record} has a signing key sealed with secrets key {key_id}, but no secrets key \
         is configured: give it with --secrets-key or --secrets-key-file"
    )]
    NoKeyConfigured { record: String, key_id: String },
    #[error(
        "the {record} has a signing key sealed with secrets key {key_id}, which is neither the \
         current secrets key ({current}) nor one of the previous ones: start with the key it \
         was sealed with (as --secrets-key or in --previous-secrets-keys)"
    )]
    UnknownKey {
        record: String,
        key_id: String,
        current: String,
    },
    #[error(
        "the sealed signing key of the {record} does not open with secrets key {key_id}: it \
         was altered or copied from another record"
    )]
    Tampered { record: String, key_id: String },
    #[error("the sealed signing key of the {record} is malformed")]
    Malformed { record: String },
}

/// One secrets key (32 random bytes). `Debug` shows its id only.
#[derive(Clone)]
pub struct SecretsKey {
    id: String,
    cipher: XChaCha20Poly1305,
}

impl SecretsKey {
    /// Reads a key written in base64 (standard or URL-safe, padded or not).
    pub fn from_base64(text: &str) -> Result<SecretsKey, SecretsError> {
        let text = text.trim();
        let bytes = [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(text).ok())
            .ok_or_else(|| SecretsError::InvalidKey("it is not base64".into()))?;
        let bytes: [u8; SECRETS_KEY_BYTES] = bytes.try_into().map_err(|bytes: Vec<u8>| {
            SecretsError::InvalidKey(format!(
                "it is {} bytes long, not {SECRETS_KEY_BYTES} (make one with `head -c 32 /dev/urandom | base64`)",
                bytes.len()
            ))
        })?;
        Ok(SecretsKey::from_bytes(&bytes))
    }

    pub fn from_bytes(bytes: &[u8; SECRETS_KEY_BYTES]) -> SecretsKey {
        let digest = Sha256::new()
            .chain_update(b"atoll secrets key id\0")
            .chain_update(bytes)
            .finalize();
        let id = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        SecretsKey {
            id,
            cipher: XChaCha20Poly1305::new(bytes.into()),
        }
    }

    /// A new random key, base64-encoded (the form the flags and key files take).
    pub fn generate_base64() -> String {
        let mut bytes = [0u8; SECRETS_KEY_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        STANDARD.encode(bytes)
    }

    /// The key's id: the first bytes of a hash of it, in hex. Safe to log.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretsKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The record a sealed value belongs to: its associated data.
#[derive(Debug, Clone, Copy)]
pub enum SealedRecord<'a> {
    Database(&'a str),
    Group(&'a str),
    /// The private key of an organization's client-certificate authority.
    ClientCa(&'a str),
}

impl SealedRecord<'_> {
    fn associated_data(self) -> Vec<u8> {
        let (kind, id) = match self {
            SealedRecord::Database(id) => ("database", id),
            SealedRecord::Group(id) => ("group", id),
            SealedRecord::ClientCa(id) => ("client ca", id),
        };
        format!("atoll signing key\0{kind}\0{id}").into_bytes()
    }
}

impl fmt::Display for SealedRecord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SealedRecord::Database(id) => write!(f, "database {id}"),
            SealedRecord::Group(id) => write!(f, "group {id}"),
            SealedRecord::ClientCa(id) => {
                write!(f, "client certificate authority of organization {id}")
            }
        }
    }
}

/// How a value is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredForm<'a> {
    /// No key yet (a group before its first token).
    Empty,
    /// In the clear: written by an older version or without a secrets key.
    Plaintext,
    /// Sealed under the key with this id.
    Sealed(&'a str),
}

impl<'a> StoredForm<'a> {
    pub fn of(stored: &'a str) -> StoredForm<'a> {
        if stored.is_empty() {
            return StoredForm::Empty;
        }
        // Plaintext keys are URL-safe base64, which has no `:`.
        match stored.split(':').collect::<Vec<_>>().as_slice() {
            [ENVELOPE_VERSION, key_id, _] => StoredForm::Sealed(key_id),
            _ => StoredForm::Plaintext,
        }
    }
}

/// The keys the store seals and opens signing keys with.
#[derive(Debug, Clone, Default)]
pub struct SecretsKeyring {
    current: Option<SecretsKey>,
    previous: Vec<SecretsKey>,
}

impl SecretsKeyring {
    /// No key: signing keys are written in the clear (`--insecure-plaintext-secrets`, and
    /// stores opened by tests that do not care). Sealed values cannot be opened.
    pub fn plaintext() -> SecretsKeyring {
        SecretsKeyring::default()
    }

    /// Seals with `current`; opens what `current` or any of `previous` sealed.
    pub fn new(current: SecretsKey, previous: Vec<SecretsKey>) -> SecretsKeyring {
        let previous = previous
            .into_iter()
            .filter(|key| key.id != current.id)
            .collect();
        SecretsKeyring {
            current: Some(current),
            previous,
        }
    }

    /// A keyring with a fresh random key (tests).
    pub fn random() -> SecretsKeyring {
        let key = SecretsKey::from_base64(&SecretsKey::generate_base64())
            .expect("a generated key is valid");
        SecretsKeyring::new(key, Vec::new())
    }

    /// The id of the key that seals, if any.
    pub fn current_key_id(&self) -> Option<&str> {
        self.current.as_ref().map(|key| key.id.as_str())
    }

    pub fn previous_key_ids(&self) -> Vec<&str> {
        self.previous.iter().map(|key| key.id.as_str()).collect()
    }

    /// The form a signing key is written to the store in: sealed under the current key,
    /// or as it is without one. The empty value (no key yet) stays empty.
    pub fn seal(&self, record: SealedRecord<'_>, plaintext: &str) -> String {
        let Some(key) = &self.current else {
            return plaintext.to_string();
        };
        if plaintext.is_empty() {
            return String::new();
        }
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let aad = record.associated_data();
        let ciphertext = key
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &aad,
                },
            )
            .expect("XChaCha20-Poly1305 seals any message of this size");
        let mut sealed = Vec::with_capacity(NONCE_BYTES + ciphertext.len());
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        format!(
            "{ENVELOPE_VERSION}:{}:{}",
            key.id,
            URL_SAFE_NO_PAD.encode(sealed)
        )
    }

    /// The signing key of `record` from what the store holds.
    pub fn open(&self, record: SealedRecord<'_>, stored: &str) -> Result<String, SecretsError> {
        let key_id = match StoredForm::of(stored) {
            StoredForm::Empty | StoredForm::Plaintext => return Ok(stored.to_string()),
            StoredForm::Sealed(key_id) => key_id,
        };
        let key = self.key(record, key_id)?;
        let malformed = || SecretsError::Malformed {
            record: record.to_string(),
        };
        let encoded = stored.rsplit(':').next().ok_or_else(malformed)?;
        let sealed = URL_SAFE_NO_PAD.decode(encoded).map_err(|_| malformed())?;
        if sealed.len() < NONCE_BYTES {
            return Err(malformed());
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
        let aad = record.associated_data();
        let plaintext = key
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| SecretsError::Tampered {
                record: record.to_string(),
                key_id: key_id.to_string(),
            })?;
        String::from_utf8(plaintext).map_err(|_| malformed())
    }

    /// Whether a stored value should be sealed again: plaintext while a key is configured,
    /// or sealed under a key other than the current one.
    pub fn needs_resealing(&self, stored: &str) -> bool {
        match (StoredForm::of(stored), self.current_key_id()) {
            (StoredForm::Empty, _) | (_, None) => false,
            (StoredForm::Plaintext, Some(_)) => true,
            (StoredForm::Sealed(key_id), Some(current)) => key_id != current,
        }
    }

    fn key(&self, record: SealedRecord<'_>, key_id: &str) -> Result<&SecretsKey, SecretsError> {
        let Some(current) = &self.current else {
            return Err(SecretsError::NoKeyConfigured {
                record: record.to_string(),
                key_id: key_id.to_string(),
            });
        };
        std::iter::once(current)
            .chain(&self.previous)
            .find(|key| key.id == key_id)
            .ok_or_else(|| SecretsError::UnknownKey {
                record: record.to_string(),
                key_id: key_id.to_string(),
                current: current.id.clone(),
            })
    }
}

/// What [`crate::Store::seal_signing_keys`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealReport {
    /// Plaintext values (from an older version) now sealed.
    pub sealed_plaintext: u64,
    /// Values sealed under a previous key, now under the current one.
    pub resealed: u64,
    /// Values already under the current key (or left in the clear without a key).
    pub unchanged: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIGNING_KEY: &str = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A";

    fn key(byte: u8) -> SecretsKey {
        SecretsKey::from_bytes(&[byte; SECRETS_KEY_BYTES])
    }

    #[test]
    fn sealed_values_round_trip_and_hide_the_key() {
        let keyring = SecretsKeyring::new(key(1), Vec::new());
        let record = SealedRecord::Database("db-1");
        let sealed = keyring.seal(record, SIGNING_KEY);
        assert!(
            sealed.starts_with(&format!("v1:{}:", key(1).id())),
            "{sealed}"
        );
        assert!(!sealed.contains(SIGNING_KEY));
        assert_eq!(keyring.open(record, &sealed).unwrap(), SIGNING_KEY);
        // A random nonce per value: sealing twice gives two different texts.
        assert_ne!(keyring.seal(record, SIGNING_KEY), sealed);
        assert!(!keyring.needs_resealing(&sealed));
        assert_eq!(keyring.seal(record, ""), "");
    }

    #[test]
    fn a_wrong_key_fails_loudly() {
        let sealed =
            SecretsKeyring::new(key(1), Vec::new()).seal(SealedRecord::Group("g-1"), SIGNING_KEY);
        let error = SecretsKeyring::new(key(2), Vec::new())
            .open(SealedRecord::Group("g-1"), &sealed)
            .unwrap_err();
        assert!(matches!(&error, SecretsError::UnknownKey { key_id, .. } if key_id == key(1).id()));
        assert!(error.to_string().contains(key(1).id()), "{error}");
        let error = SecretsKeyring::plaintext()
            .open(SealedRecord::Group("g-1"), &sealed)
            .unwrap_err();
        assert!(matches!(error, SecretsError::NoKeyConfigured { .. }));
    }

    #[test]
    fn a_value_moved_to_another_record_does_not_open() {
        let keyring = SecretsKeyring::new(key(1), Vec::new());
        let sealed = keyring.seal(SealedRecord::Database("db-1"), SIGNING_KEY);
        for other in [SealedRecord::Database("db-2"), SealedRecord::Group("db-1")] {
            let error = keyring.open(other, &sealed).unwrap_err();
            assert!(matches!(error, SecretsError::Tampered { .. }), "{error}");
        }
        // A flipped bit anywhere in the ciphertext is caught too.
        let mut bytes = sealed.into_bytes();
        let last = bytes.len() - 1;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert!(keyring
            .open(SealedRecord::Database("db-1"), &tampered)
            .is_err());
    }

    #[test]
    fn previous_keys_open_and_only_the_current_one_seals() {
        let old = SecretsKeyring::new(key(1), Vec::new());
        let sealed_by_old = old.seal(SealedRecord::Database("db-1"), SIGNING_KEY);
        let rotated = SecretsKeyring::new(key(2), vec![key(1)]);
        assert!(rotated.needs_resealing(&sealed_by_old));
        assert_eq!(
            rotated
                .open(SealedRecord::Database("db-1"), &sealed_by_old)
                .unwrap(),
            SIGNING_KEY
        );
        let resealed = rotated.seal(SealedRecord::Database("db-1"), SIGNING_KEY);
        assert!(resealed.starts_with(&format!("v1:{}:", key(2).id())));
        assert!(!rotated.needs_resealing(&resealed));
        assert!(old.open(SealedRecord::Database("db-1"), &resealed).is_err());
    }

    #[test]
    fn plaintext_from_older_versions_is_read_and_marked_for_sealing() {
        let keyring = SecretsKeyring::new(key(1), Vec::new());
        assert_eq!(StoredForm::of(SIGNING_KEY), StoredForm::Plaintext);
        assert_eq!(
            keyring
                .open(SealedRecord::Database("db-1"), SIGNING_KEY)
                .unwrap(),
            SIGNING_KEY
        );
        assert!(keyring.needs_resealing(SIGNING_KEY));
        assert!(!keyring.needs_resealing(""));
        assert!(!SecretsKeyring::plaintext().needs_resealing(SIGNING_KEY));
        assert_eq!(
            SecretsKeyring::plaintext().seal(SealedRecord::Database("db-1"), SIGNING_KEY),
            SIGNING_KEY
        );
    }

    #[test]
    fn keys_are_parsed_strictly_and_never_shown() {
        let encoded = SecretsKey::generate_base64();
        let parsed = SecretsKey::from_base64(&format!("  {encoded}\n")).unwrap();
        let url_safe = URL_SAFE_NO_PAD.encode(STANDARD.decode(&encoded).unwrap());
        assert_eq!(
            SecretsKey::from_base64(&url_safe).unwrap().id(),
            parsed.id()
        );
        assert_eq!(parsed.id().len(), 8);
        assert!(!format!("{parsed:?}").contains(&encoded));
        let short = SecretsKey::from_base64(&STANDARD.encode([7u8; 16])).unwrap_err();
        assert!(short.to_string().contains("16 bytes"), "{short}");
        assert!(SecretsKey::from_base64("not base64!").is_err());
    }
}
