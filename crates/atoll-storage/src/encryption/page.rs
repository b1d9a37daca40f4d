//! The format of an encrypted page: what a page of a database under a customer's key holds
//! on disk, in the WAL, and so in the log in object storage.
//!
//! ```text
//! page 1:  [ header, 100 bytes, clear ][ ciphertext … ][ nonce 12 ][ tag 16 ]
//! page n:  [ ciphertext …                               ][ nonce 12 ][ tag 16 ]
//! ```
//!
//! The last [`RESERVED_BYTES`] of every page are SQLite's *reserved bytes* (the database is
//! created with them; SQLite never puts a row there), holding a fresh random nonce and the
//! authentication tag. The page number is the associated data, so a page moved to another
//! place fails its tag. Page 1's first 100 bytes (the SQLite header: page size, reserved
//! bytes, change counter, schema cookie) stay in the clear and are not authenticated:
//! connections without the key (the shipper, restores, replicas, checkpoints) read and
//! update them, and they hold no row.

use super::Cipher;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

/// Reserved bytes at the end of every page: a 12-byte nonce and a 16-byte tag, for every
/// cipher this server supports.
pub const RESERVED_BYTES: usize = NONCE_LEN + TAG_LEN;
const TAG_LEN: usize = 16;
/// Page 1's SQLite header, left in the clear.
const HEADER_BYTES: usize = 100;

/// A page that failed its tag: the wrong key, or damaged data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageAuthenticationFailed;

/// Encrypts and decrypts whole pages with one key; during a key rotation
/// ([`PageCipher::rotating`]), also decrypts pages still under the previous key.
pub struct PageCipher {
    key: LessSafeKey,
    /// The key being rotated away from: a page that fails `key`'s tag is tried under it
    /// (a tag is a proof of the key a page was sealed with, so trying both is sound).
    previous: Option<LessSafeKey>,
    random: SystemRandom,
}

impl std::fmt::Debug for PageCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCipher")
            .field("algorithm", self.key.algorithm())
            .finish_non_exhaustive()
    }
}

impl PageCipher {
    /// `key` must be [`Cipher::key_len`] bytes (checked by [`super::EncryptionKey`]).
    pub fn new(cipher: Cipher, key: &[u8]) -> Self {
        Self {
            key: aead_key(cipher, key),
            previous: None,
            random: SystemRandom::new(),
        }
    }

    /// Seals with `key` and opens pages sealed with either `key` or `previous`: the
    /// cipher of the connections that re-encrypt a database under a new key.
    pub fn rotating(cipher: Cipher, key: &[u8], previous: (Cipher, &[u8])) -> Self {
        Self {
            previous: Some(aead_key(previous.0, previous.1)),
            ..Self::new(cipher, key)
        }
    }

    /// Encrypts `page` (page number `pgno`, a whole page) in place.
    pub fn seal(&self, pgno: u32, page: &mut [u8]) -> Result<(), PageAuthenticationFailed> {
        let (body, nonce_at) = split(pgno, page)?;
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| PageAuthenticationFailed)?;
        let (content, reserved) = page.split_at_mut(nonce_at);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(pgno.to_be_bytes()),
                &mut content[body..],
            )
            .map_err(|_| PageAuthenticationFailed)?;
        reserved[..NONCE_LEN].copy_from_slice(&nonce);
        reserved[NONCE_LEN..].copy_from_slice(tag.as_ref());
        Ok(())
    }

    /// Decrypts `page` (page number `pgno`, a whole page) in place; fails, leaving the page
    /// unusable, when its tag does not match.
    pub fn open(&self, pgno: u32, page: &mut [u8]) -> Result<(), PageAuthenticationFailed> {
        let Some(previous) = &self.previous else {
            return open_with(&self.key, pgno, page);
        };
        // A failed open leaves the page unusable (ring zeroes it): keep the sealed bytes.
        let sealed = page.to_vec();
        open_with(&self.key, pgno, page).or_else(|_| {
            page.copy_from_slice(&sealed);
            open_with(previous, pgno, page)
        })
    }
}

fn aead_key(cipher: Cipher, key: &[u8]) -> LessSafeKey {
    let unbound = UnboundKey::new(cipher.algorithm(), key)
        .expect("the key's length was checked against its cipher");
    LessSafeKey::new(unbound)
}

/// Decrypts `page` in place with `key`.
fn open_with(
    key: &LessSafeKey,
    pgno: u32,
    page: &mut [u8],
) -> Result<(), PageAuthenticationFailed> {
    let (body, nonce_at) = split(pgno, page)?;
    let (content, reserved) = page.split_at_mut(nonce_at);
    let nonce = Nonce::try_assume_unique_for_key(&reserved[..NONCE_LEN])
        .map_err(|_| PageAuthenticationFailed)?;
    let tag: [u8; TAG_LEN] = reserved[NONCE_LEN..]
        .try_into()
        .map_err(|_| PageAuthenticationFailed)?;
    key.open_in_place_separate_tag(
        nonce,
        Aad::from(pgno.to_be_bytes()),
        Tag::from(tag),
        &mut content[body..],
        0..,
    )
    .map(|_| ())
    .map_err(|_| PageAuthenticationFailed)
}

/// Where a page's encrypted part starts, and where its reserved bytes start.
fn split(pgno: u32, page: &[u8]) -> Result<(usize, usize), PageAuthenticationFailed> {
    let body = if pgno == 1 { HEADER_BYTES } else { 0 };
    let nonce_at = page
        .len()
        .checked_sub(RESERVED_BYTES)
        .filter(|&at| pgno != 0 && at > body)
        .ok_or(PageAuthenticationFailed)?;
    Ok((body, nonce_at))
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
                assert_eq!(
                    sealed[..start],
                    plain[..start],
                    "{cipher:?}: header in the clear"
                );
                assert_ne!(
                    sealed[start..4096 - RESERVED_BYTES],
                    plain[start..4096 - RESERVED_BYTES]
                );
                codec.open(pgno, &mut sealed).unwrap();
                assert_eq!(
                    sealed[..4096 - RESERVED_BYTES],
                    plain[..4096 - RESERVED_BYTES],
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
