//! Databases encrypted with their customer's key (Turso's `remote_encryption`; design and
//! decisions in `docs/ENCRYPTION.md`).
//!
//! - [`Cipher`]: the ciphers this server supports, by Turso's names.
//! - [`EncryptionKey`]: a key as a request carries it; never stored, zeroed when dropped,
//!   never printed. What is stored is its [`Verifier`], which tells a wrong key from damaged
//!   data without the key.
//! - [`page`]: what an encrypted page holds.
//! - [`engine`]: the engine's side — connections that read and write through the key
//!   ([`open`], [`create`]).
//!
//! A connection opened without the key (the ordinary VFS) still opens an encrypted
//! database, reads its header, recovers and checkpoints its WAL, copies its frames and pages
//! as bytes — everything the log, restores, replicas and moves do — but cannot read a row.

pub mod engine;
pub mod page;

pub use engine::{create, open};

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use ring::aead::Algorithm;
use ring::hmac;
use zeroize::Zeroizing;

/// A cipher of encrypted databases' pages, by the names Turso's API and clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    Aes256Gcm,
    Aes128Gcm,
    ChaCha20Poly1305,
}

/// Turso's cipher names this server cannot do (the AEGIS family): refused by name, with
/// the list of what it can, never accepted and ignored.
const NOT_SUPPORTED: [&str; 6] = [
    "aegis128l",
    "aegis128x2",
    "aegis128x4",
    "aegis256",
    "aegis256x2",
    "aegis256x4",
];

/// A cipher name this server does not support (known to Turso or not).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "encryption cipher `{name}` is not supported by this server; supported: {}",
    Cipher::supported_names()
)]
pub struct UnsupportedCipher {
    pub name: String,
    /// One of Turso's names (AEGIS), rather than an unknown word.
    pub known_to_turso: bool,
}

impl Cipher {
    pub const ALL: [Cipher; 3] = [
        Cipher::Aes256Gcm,
        Cipher::Aes128Gcm,
        Cipher::ChaCha20Poly1305,
    ];

    /// Turso's name of the cipher.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Aes256Gcm => "aes256gcm",
            Cipher::Aes128Gcm => "aes128gcm",
            Cipher::ChaCha20Poly1305 => "chacha20poly1305",
        }
    }

    pub fn from_name(name: &str) -> Result<Cipher, UnsupportedCipher> {
        let lower = name.trim().to_ascii_lowercase();
        Cipher::ALL
            .into_iter()
            .find(|cipher| cipher.name() == lower)
            .ok_or_else(|| UnsupportedCipher {
                name: name.to_owned(),
                known_to_turso: NOT_SUPPORTED.contains(&lower.as_str()),
            })
    }

    /// The supported names, comma-separated (for errors and documentation).
    pub fn supported_names() -> String {
        Cipher::ALL.map(Cipher::name).join(", ")
    }

    /// Bytes of a raw key of this cipher.
    pub fn key_len(self) -> usize {
        self.algorithm().key_len()
    }

    fn algorithm(self) -> &'static Algorithm {
        match self {
            Cipher::Aes256Gcm => &ring::aead::AES_256_GCM,
            Cipher::Aes128Gcm => &ring::aead::AES_128_GCM,
            Cipher::ChaCha20Poly1305 => &ring::aead::CHACHA20_POLY1305,
        }
    }
}

/// Why a key sent by a client is not a key of its cipher.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the encryption key is not base64")]
    NotBase64,
    #[error("the encryption key has {got} bytes; {cipher} needs {expected}")]
    WrongLength {
        cipher: &'static str,
        expected: usize,
        got: usize,
    },
}

/// A database's key, as a request carries it (base64 of the raw key bytes, Turso's
/// `x-turso-encryption-key`). Lives only as long as the request, or a pooled connection,
/// that holds it.
pub struct EncryptionKey {
    cipher: Cipher,
    bytes: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptionKey")
            .field("cipher", &self.cipher)
            .field("bytes", &"<redacted>")
            .finish()
    }
}

/// Standard base64, padded or not (clients differ).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

impl EncryptionKey {
    pub fn from_base64(cipher: Cipher, text: &str) -> Result<Self, KeyError> {
        let bytes = Zeroizing::new(
            BASE64
                .decode(text.trim())
                .map_err(|_| KeyError::NotBase64)?,
        );
        if bytes.len() != cipher.key_len() {
            return Err(KeyError::WrongLength {
                cipher: cipher.name(),
                expected: cipher.key_len(),
                got: bytes.len(),
            });
        }
        Ok(Self { cipher, bytes })
    }

    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// This key's verifier for database `database_id`.
    pub fn verifier(&self, database_id: &str) -> Verifier {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.bytes);
        let tag = hmac::sign(&key, &verifier_message(database_id));
        Verifier(tag.as_ref().to_vec())
    }

    /// Whether this is the key `stored` was made from (compared in constant time).
    pub fn matches(&self, database_id: &str, stored: &Verifier) -> bool {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.bytes);
        hmac::verify(&key, &verifier_message(database_id), &stored.0).is_ok()
    }
}

/// Whether the file at `path` is an encrypted database, from its header (which stays in
/// the clear): Atoll's encrypted databases, and only they, reserve
/// [`page::RESERVED_BYTES`] at the end of every page (byte 20). An empty or missing file
/// is not.
pub fn is_encrypted_file(path: &std::path::Path) -> std::io::Result<bool> {
    use std::io::Read;
    let mut header = [0u8; 21];
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match file.read_exact(&mut header) {
        Ok(()) => Ok(header.starts_with(b"SQLite format 3\0")
            && usize::from(header[20]) == page::RESERVED_BYTES),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

fn verifier_message(database_id: &str) -> Vec<u8> {
    [
        b"atoll remote encryption v1\0".as_slice(),
        database_id.as_bytes(),
    ]
    .concat()
}

/// HMAC-SHA256, keyed by a database's key, over a fixed label and the database's id:
/// stored with the database to tell a wrong key (403) from damaged data. The keys are
/// random 128- or 256-bit values, so it cannot be searched for the key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Verifier(Vec<u8>);

impl Verifier {
    pub fn from_hex(text: &str) -> Option<Self> {
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        (0..32)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok())
            .collect::<Option<Vec<u8>>>()
            .map(Verifier)
    }

    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Verifier({})", &self.to_hex()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turso_cipher_names_are_supported_or_refused_by_name() {
        assert_eq!(Cipher::from_name("aes256gcm"), Ok(Cipher::Aes256Gcm));
        assert_eq!(
            Cipher::from_name("ChaCha20Poly1305"),
            Ok(Cipher::ChaCha20Poly1305)
        );
        let aegis = Cipher::from_name("aegis256").unwrap_err();
        assert!(aegis.known_to_turso);
        assert!(aegis
            .to_string()
            .contains("aes256gcm, aes128gcm, chacha20poly1305"));
        assert!(!Cipher::from_name("rot13").unwrap_err().known_to_turso);
    }

    #[test]
    fn keys_are_checked_against_their_cipher_and_never_printed() {
        let key32 = BASE64.encode([1u8; 32]);
        let key = EncryptionKey::from_base64(Cipher::Aes256Gcm, &key32).unwrap();
        assert!(!format!("{key:?}").contains(&key32));
        assert!(matches!(
            EncryptionKey::from_base64(Cipher::Aes128Gcm, &key32),
            Err(KeyError::WrongLength {
                expected: 16,
                got: 32,
                ..
            })
        ));
        assert_eq!(
            EncryptionKey::from_base64(Cipher::Aes256Gcm, "not base64!").unwrap_err(),
            KeyError::NotBase64
        );
        let unpadded = key32.trim_end_matches('=');
        assert!(EncryptionKey::from_base64(Cipher::Aes256Gcm, unpadded).is_ok());
    }

    #[test]
    fn a_verifier_tells_the_right_key_for_its_database_only() {
        let key = EncryptionKey::from_base64(Cipher::Aes256Gcm, &BASE64.encode([1u8; 32])).unwrap();
        let other =
            EncryptionKey::from_base64(Cipher::Aes256Gcm, &BASE64.encode([2u8; 32])).unwrap();
        let stored = key.verifier("db-1");
        assert!(key.matches("db-1", &stored));
        assert!(!other.matches("db-1", &stored));
        assert!(!key.matches("db-2", &stored));
        assert_eq!(Verifier::from_hex(&stored.to_hex()), Some(stored));
        assert_eq!(Verifier::from_hex("zz"), None);
    }
}
