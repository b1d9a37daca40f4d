//! The format of an encrypted page: what a page of a database under a customer's key holds
//! on disk, in the WAL, and so in the log in object storage.
//!
//! ```text
//! page 1:  [ header, 100 bytes, clear ][ ciphertext … ][ nonce ][ tag 16 ]
//! page n:  [ ciphertext …                               ][ nonce ][ tag 16 ]
//! ```
//!
//! The last [`Cipher::reserved_bytes`] of every page are SQLite's *reserved bytes* (the
//! database is created with them; SQLite never puts a row there), holding a fresh random
//! nonce (12 bytes for AES-GCM and ChaCha20-Poly1305, 16 for AEGIS-128*, 32 for AEGIS-256*)
//! and the 16-byte authentication tag: 28, 32 or 48 bytes, Turso's figures. The page
//! number is the associated data, so a page moved to another place fails its tag. Page
//! 1's first 100 bytes (the SQLite header: page size, reserved bytes, change counter,
//! schema cookie) stay in the clear and are not authenticated: connections without the
//! key (the shipper, restores, replicas, checkpoints) read and update them, and they hold
//! no row.

use super::Cipher;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use zeroize::Zeroizing;

/// Reserved bytes at the end of every page under the AES-GCM and ChaCha20-Poly1305
/// ciphers (a 12-byte nonce and the tag); the AEGIS ciphers reserve more
/// ([`Cipher::reserved_bytes`]).
pub const RESERVED_BYTES: usize = 28;
/// Bytes of every cipher's authentication tag.
pub const TAG_LEN: usize = 16;
/// Page 1's SQLite header, left in the clear.
const HEADER_BYTES: usize = 100;

/// A page that failed its tag: the wrong key, or damaged data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageAuthenticationFailed;

/// Encrypts and decrypts whole pages with one key; during a key rotation
/// ([`PageCipher::rotating`]), also decrypts pages still under the previous key.
pub struct PageCipher {
    key: PageKey,
    /// The key being rotated away from: a page that fails `key`'s tag is tried under it
    /// (a tag is a proof of the key a page was sealed with, so trying both is sound).
    previous: Option<PageKey>,
    random: SystemRandom,
}

/// A key ready for one cipher's pages.
enum PageKey {
    /// AES-GCM and ChaCha20-Poly1305 (`ring`; its key schedule is large, so boxed).
    Ring(Cipher, Box<LessSafeKey>),
    /// The AEGIS family: the raw key, set up with each page's nonce.
    Aegis(Cipher, Zeroizing<Vec<u8>>),
}

impl PageKey {
    fn new(cipher: Cipher, key: &[u8]) -> PageKey {
        assert_eq!(
            key.len(),
            cipher.key_len(),
            "the key's length was checked against its cipher"
        );
        let algorithm = match cipher {
            Cipher::Aes256Gcm => &ring::aead::AES_256_GCM,
            Cipher::Aes128Gcm => &ring::aead::AES_128_GCM,
            Cipher::ChaCha20Poly1305 => &ring::aead::CHACHA20_POLY1305,
            _ => return PageKey::Aegis(cipher, Zeroizing::new(key.to_vec())),
        };
        let unbound = UnboundKey::new(algorithm, key).expect("a key of its cipher's length");
        PageKey::Ring(cipher, Box::new(LessSafeKey::new(unbound)))
    }

    fn cipher(&self) -> Cipher {
        match self {
            PageKey::Ring(cipher, _) | PageKey::Aegis(cipher, _) => *cipher,
        }
    }

    /// Encrypts `body` in place under `nonce` with the page number as associated data.
    fn seal(&self, nonce: &[u8], aad: &[u8; 4], body: &mut [u8]) -> Option<[u8; TAG_LEN]> {
        match self {
            PageKey::Ring(_, key) => key
                .seal_in_place_separate_tag(
                    Nonce::try_assume_unique_for_key(nonce).ok()?,
                    Aad::from(*aad),
                    body,
                )
                .ok()
                .and_then(|tag| tag.as_ref().try_into().ok()),
            PageKey::Aegis(cipher, key) => Some(aegis_seal(*cipher, key, nonce, aad, body)?),
        }
    }

    /// Decrypts `body` in place; `false` when the tag does not match (the body is then
    /// unusable).
    fn open(&self, nonce: &[u8], tag: &[u8; TAG_LEN], aad: &[u8; 4], body: &mut [u8]) -> bool {
        match self {
            PageKey::Ring(_, key) => {
                let Ok(nonce) = Nonce::try_assume_unique_for_key(nonce) else {
                    return false;
                };
                key.open_in_place_separate_tag(nonce, Aad::from(*aad), Tag::from(*tag), body, 0..)
                    .is_ok()
            }
            PageKey::Aegis(cipher, key) => aegis_open(*cipher, key, nonce, tag, aad, body),
        }
    }
}

/// One AEGIS variant's `new(key, nonce)`, with the key and nonce sized for it.
macro_rules! with_aegis {
    ($cipher:expr, $key:expr, $nonce:expr, |$state:ident| $body:expr) => {{
        use aegis::{aegis128l, aegis128x2, aegis128x4, aegis256, aegis256x2, aegis256x4};
        match $cipher {
            Cipher::Aegis128L => {
                let $state = aegis128l::Aegis128L::<TAG_LEN>::new(
                    $key.try_into().ok()?,
                    $nonce.try_into().ok()?,
                );
                $body
            }
            Cipher::Aegis128X2 => {
                let $state = aegis128x2::Aegis128X2::<TAG_LEN>::new(
                    $key.try_into().ok()?,
                    $nonce.try_into().ok()?,
                );
                $body
            }
            Cipher::Aegis128X4 => {
                let $state = aegis128x4::Aegis128X4::<TAG_LEN>::new(
                    $key.try_into().ok()?,
                    $nonce.try_into().ok()?,
                );
                $body
            }
            Cipher::Aegis256 => {
                let $state = aegis256::Aegis256::<TAG_LEN>::new(
                    $key.try_into().ok()?,
                    $nonce.try_into().ok()?,
                );
                $body
            }
            Cipher::Aegis256X2 => {
                let $state = aegis256x2::Aegis256X2::<TAG_LEN>::new(
                    $key.try_into().ok()?,
                    $nonce.try_into().ok()?,
                );
                $body
            }
            Cipher::Aegis256X4 => {
                let $state = aegis256x4::Aegis256X4::<TAG_LEN>::new(
                    $key.try_into().ok()?,
                    $nonce.try_into().ok()?,
                );
                $body
            }
            Cipher::Aes256Gcm | Cipher::Aes128Gcm | Cipher::ChaCha20Poly1305 => None,
        }
    }};
}

fn aegis_seal(
    cipher: Cipher,
    key: &[u8],
    nonce: &[u8],
    aad: &[u8; 4],
    body: &mut [u8],
) -> Option<[u8; TAG_LEN]> {
    with_aegis!(cipher, key, nonce, |state| Some(
        state.encrypt_in_place(body, aad)
    ))
}

fn aegis_open(
    cipher: Cipher,
    key: &[u8],
    nonce: &[u8],
    tag: &[u8; TAG_LEN],
    aad: &[u8; 4],
    body: &mut [u8],
) -> bool {
    let opened: Option<bool> = (|| {
        with_aegis!(cipher, key, nonce, |state| Some(
            state.decrypt_in_place(body, tag, aad).is_ok()
        ))
    })();
    opened.unwrap_or(false)
}

impl std::fmt::Debug for PageCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCipher")
            .field("cipher", &self.key.cipher())
            .finish_non_exhaustive()
    }
}

impl PageCipher {
    /// `key` must be [`Cipher::key_len`] bytes (checked by [`super::EncryptionKey`]).
    pub fn new(cipher: Cipher, key: &[u8]) -> Self {
        Self {
            key: PageKey::new(cipher, key),
            previous: None,
            random: SystemRandom::new(),
        }
    }

    /// Seals with `key` and opens pages sealed with either `key` or `previous`: the
    /// cipher of the connections that re-encrypt a database under a new key. Both
    /// ciphers reserve the same bytes (a rotation keeps the page layout).
    pub fn rotating(cipher: Cipher, key: &[u8], previous: (Cipher, &[u8])) -> Self {
        Self {
            previous: Some(PageKey::new(previous.0, previous.1)),
            ..Self::new(cipher, key)
        }
    }

    /// Encrypts `page` (page number `pgno`, a whole page) in place.
    pub fn seal(&self, pgno: u32, page: &mut [u8]) -> Result<(), PageAuthenticationFailed> {
        let cipher = self.key.cipher();
        let (body, reserved_at) = split(cipher, pgno, page)?;
        let mut nonce = [0u8; 32];
        let nonce = &mut nonce[..cipher.nonce_len()];
        self.random
            .fill(nonce)
            .map_err(|_| PageAuthenticationFailed)?;
        let (content, reserved) = page.split_at_mut(reserved_at);
        let tag = self
            .key
            .seal(nonce, &pgno.to_be_bytes(), &mut content[body..])
            .ok_or(PageAuthenticationFailed)?;
        reserved[..nonce.len()].copy_from_slice(nonce);
        reserved[nonce.len()..].copy_from_slice(&tag);
        Ok(())
    }

    /// Decrypts `page` (page number `pgno`, a whole page) in place; fails, leaving the page
    /// unusable, when its tag does not match.
    pub fn open(&self, pgno: u32, page: &mut [u8]) -> Result<(), PageAuthenticationFailed> {
        let Some(previous) = &self.previous else {
            return open_with(&self.key, pgno, page);
        };
        // A failed open leaves the page unusable: keep the sealed bytes.
        let sealed = page.to_vec();
        open_with(&self.key, pgno, page).or_else(|_| {
            page.copy_from_slice(&sealed);
            open_with(previous, pgno, page)
        })
    }
}

/// Decrypts `page` in place with `key`.
fn open_with(key: &PageKey, pgno: u32, page: &mut [u8]) -> Result<(), PageAuthenticationFailed> {
    let cipher = key.cipher();
    let (body, reserved_at) = split(cipher, pgno, page)?;
    let (content, reserved) = page.split_at_mut(reserved_at);
    let (nonce, tag) = reserved.split_at(cipher.nonce_len());
    let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| PageAuthenticationFailed)?;
    if key.open(nonce, &tag, &pgno.to_be_bytes(), &mut content[body..]) {
        Ok(())
    } else {
        Err(PageAuthenticationFailed)
    }
}

/// Where a page's encrypted part starts, and where its reserved bytes start.
fn split(
    cipher: Cipher,
    pgno: u32,
    page: &[u8],
) -> Result<(usize, usize), PageAuthenticationFailed> {
    let body = if pgno == 1 { HEADER_BYTES } else { 0 };
    let reserved_at = page
        .len()
        .checked_sub(cipher.reserved_bytes())
        .filter(|&at| pgno != 0 && at > body)
        .ok_or(PageAuthenticationFailed)?;
    Ok((body, reserved_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(fill: u8) -> Vec<u8> {
        (0..4096).map(|i| (i as u8).wrapping_mul(fill)).collect()
    }

    #[test]
    fn every_cipher_round_trips_a_page_and_hides_it() {
        for cipher in Cipher::ALL {
            let key = vec![7u8; cipher.key_len()];
            let codec = PageCipher::new(cipher, &key);
            for pgno in [1u32, 2, 1000] {
                let plain = page(3);
                let mut sealed = plain.clone();
                codec.seal(pgno, &mut sealed).unwrap();
                let start = if pgno == 1 { HEADER_BYTES } else { 0 };
                let end = 4096 - cipher.reserved_bytes();
                assert_eq!(
                    sealed[..start],
                    plain[..start],
                    "{cipher:?}: header in the clear"
                );
                assert_ne!(sealed[start..end], plain[start..end]);
                codec.open(pgno, &mut sealed).unwrap();
                assert_eq!(sealed[..end], plain[..end], "{cipher:?}");
                // Another page number, or a flipped bit, fails the tag.
                let mut moved = sealed.clone();
                codec.seal(pgno, &mut moved).unwrap();
                assert_eq!(
                    codec.open(pgno + 1, &mut moved.clone()),
                    Err(PageAuthenticationFailed),
                    "{cipher:?}"
                );
                moved[start + 3] ^= 1;
                assert_eq!(
                    codec.open(pgno, &mut moved),
                    Err(PageAuthenticationFailed),
                    "{cipher:?}"
                );
            }
        }
    }

    #[test]
    fn a_wrong_key_a_moved_page_and_a_flipped_bit_fail_the_tag() {
        let codec = PageCipher::new(Cipher::Aes256Gcm, &[1; 32]);
        let other = PageCipher::new(Cipher::Aes256Gcm, &[2; 32]);
        let mut sealed = page(5);
        codec.seal(2, &mut sealed).unwrap();
        assert_eq!(
            other.open(2, &mut sealed.clone()),
            Err(PageAuthenticationFailed)
        );
        assert_eq!(
            codec.open(3, &mut sealed.clone()),
            Err(PageAuthenticationFailed)
        );
        let mut flipped = sealed.clone();
        flipped[10] ^= 1;
        assert_eq!(codec.open(2, &mut flipped), Err(PageAuthenticationFailed));
        assert_eq!(codec.open(2, &mut sealed), Ok(()));
    }

    #[test]
    fn a_rotating_cipher_opens_both_keys_pages_and_seals_with_the_new_one() {
        let old = PageCipher::new(Cipher::Aes128Gcm, &[1; 16]);
        let new = PageCipher::new(Cipher::ChaCha20Poly1305, &[2; 32]);
        let rotating = PageCipher::rotating(
            Cipher::ChaCha20Poly1305,
            &[2; 32],
            (Cipher::Aes128Gcm, &[1; 16]),
        );
        let plain = page(7);
        for sealer in [&old, &new] {
            let mut sealed = plain.clone();
            sealer.seal(9, &mut sealed).unwrap();
            rotating.open(9, &mut sealed).unwrap();
            assert_eq!(
                sealed[..4096 - RESERVED_BYTES],
                plain[..4096 - RESERVED_BYTES]
            );
        }
        let mut resealed = plain.clone();
        rotating.seal(9, &mut resealed).unwrap();
        assert_eq!(
            old.open(9, &mut resealed.clone()),
            Err(PageAuthenticationFailed)
        );
        assert_eq!(new.open(9, &mut resealed), Ok(()));
        let stranger = PageCipher::new(Cipher::Aes256Gcm, &[3; 32]);
        let mut foreign = plain.clone();
        stranger.seal(9, &mut foreign).unwrap();
        assert_eq!(
            rotating.open(9, &mut foreign),
            Err(PageAuthenticationFailed)
        );
    }

    #[test]
    fn the_same_page_sealed_twice_differs() {
        let codec = PageCipher::new(Cipher::ChaCha20Poly1305, &[9; 32]);
        let (mut a, mut b) = (page(1), page(1));
        codec.seal(4, &mut a).unwrap();
        codec.seal(4, &mut b).unwrap();
        assert_ne!(a, b, "a fresh nonce for every write");
    }
}
