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
use ring::hmac;
use zeroize::Zeroizing;

/// A cipher of encrypted databases' pages, by the names Turso's API and clients use: all
/// nine of them. The AES-GCM and ChaCha20-Poly1305 ones run on `ring`, the AEGIS family
/// on the `aegis` crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    Aes256Gcm,
    Aes128Gcm,
    ChaCha20Poly1305,
    Aegis128L,
    Aegis128X2,
    Aegis128X4,
    Aegis256,
    Aegis256X2,
    Aegis256X4,
}

/// A cipher name this server does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "encryption cipher `{name}` is not supported by this server; supported: {}",
    Cipher::supported_names()
)]
pub struct UnsupportedCipher {
    pub name: String,
}

impl Cipher {
    pub const ALL: [Cipher; 9] = [
        Cipher::Aes256Gcm,
        Cipher::Aes128Gcm,
        Cipher::ChaCha20Poly1305,
        Cipher::Aegis128L,
        Cipher::Aegis128X2,
        Cipher::Aegis128X4,
        Cipher::Aegis256,
        Cipher::Aegis256X2,
        Cipher::Aegis256X4,
    ];

    /// Turso's name of the cipher.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Aes256Gcm => "aes256gcm",
            Cipher::Aes128Gcm => "aes128gcm",
            Cipher::ChaCha20Poly1305 => "chacha20poly1305",
            Cipher::Aegis128L => "aegis128l",
            Cipher::Aegis128X2 => "aegis128x2",
            Cipher::Aegis128X4 => "aegis128x4",
            Cipher::Aegis256 => "aegis256",
            Cipher::Aegis256X2 => "aegis256x2",
            Cipher::Aegis256X4 => "aegis256x4",
        }
    }

    pub fn from_name(name: &str) -> Result<Cipher, UnsupportedCipher> {
        let lower = name.trim().to_ascii_lowercase();
        Cipher::ALL
            .into_iter()
            .find(|cipher| cipher.name() == lower)
            .ok_or_else(|| UnsupportedCipher {
                name: name.to_owned(),
            })
    }

    /// The supported names, comma-separated (for errors and documentation).
    pub fn supported_names() -> String {
        Cipher::ALL.map(Cipher::name).join(", ")
    }

    /// Bytes of a raw key of this cipher: 16 for the 128-bit ones, 32 for the others.
    pub fn key_len(self) -> usize {
        match self {
            Cipher::Aes128Gcm | Cipher::Aegis128L | Cipher::Aegis128X2 | Cipher::Aegis128X4 => 16,
            _ => 32,
        }
    }

    /// Bytes of a page's nonce under this cipher.
    pub fn nonce_len(self) -> usize {
        match self {
            Cipher::Aes256Gcm | Cipher::Aes128Gcm | Cipher::ChaCha20Poly1305 => 12,
            Cipher::Aegis128L | Cipher::Aegis128X2 | Cipher::Aegis128X4 => 16,
            Cipher::Aegis256 | Cipher::Aegis256X2 | Cipher::Aegis256X4 => 32,
        }
    }

    /// Bytes reserved at the end of every page of a database under this cipher: its
    /// nonce and a 16-byte tag (Turso's figures: 28, 32 or 48). Fixed when the database
    /// is created; a rotation keeps it.
    pub fn reserved_bytes(self) -> usize {
        self.nonce_len() + page::TAG_LEN
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

    /// A page codec with this key, for code that reads encrypted pages as bytes (an
    /// export that decrypts a database's file on its way to the client).
    pub fn page_cipher(&self) -> page::PageCipher {
        page::PageCipher::new(self.cipher, &self.bytes)
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
/// the clear): Atoll's encrypted databases, and only they, reserve a cipher's
/// [`Cipher::reserved_bytes`] at the end of every page (byte 20). An empty or missing file
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
            && Cipher::ALL
                .iter()
                .any(|cipher| cipher.reserved_bytes() == usize::from(header[20]))),
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
        assert_eq!(Cipher::from_name("AEGIS256"), Ok(Cipher::Aegis256));
        for cipher in Cipher::ALL {
            assert_eq!(Cipher::from_name(cipher.name()), Ok(cipher));
        }
        assert!(Cipher::from_name("rot13")
            .unwrap_err()
            .to_string()
            .contains("aes256gcm, aes128gcm, chacha20poly1305, aegis128l"));
        // Turso's reserved bytes per cipher (its upload documentation).
        let reserved: Vec<usize> = Cipher::ALL.map(Cipher::reserved_bytes).to_vec();
        assert_eq!(reserved, [28, 28, 28, 32, 32, 32, 48, 48, 48]);
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
