//! Database tokens: compact JWS signed with Ed25519 (`alg: EdDSA`), as libSQL servers verify
//! them.
//!
//! Claims: `a` (`rw` or `ro`), `id` (database UUID, for database tokens) or `gid` (group
//! UUID, for group tokens), `p.roa.ns` (database UUIDs the token may `ATTACH` read-only),
//! `iat`, and `exp` (absent: never expires). The header carries the signing key's `kid`.
//! Platform API tokens share nothing with these.

use atoll_types::node::TokenKey;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// `rw` or `ro`.
    pub a: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<Permissions>,
    #[serde(default)]
    pub iat: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permissions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roa: Option<Namespaces>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespaces {
    #[serde(default)]
    pub ns: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    alg: String,
    typ: String,
    #[serde(default)]
    kid: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("The JWT is invalid")]
    Invalid,
    #[error("The JWT has expired")]
    Expired,
    /// A well-formed database or group token that none of this database's keys signed:
    /// one minted for another database or group (or before the keys were rotated). Told
    /// apart from `Invalid` by the token's own claims only, so it reveals nothing of the
    /// database.
    #[error("The JWT is not signed by this database's keys: a token of another database or group, or one invalidated since")]
    NotForThisDatabase,
}

/// A new random signing key.
pub fn generate_key() -> SigningKey {
    SigningKey::generate(&mut rand::rngs::OsRng)
}

pub fn encode_key(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn decode_signing_key(encoded: &str) -> Option<SigningKey> {
    let bytes: [u8; 32] = URL_SAFE_NO_PAD.decode(encoded).ok()?.try_into().ok()?;
    Some(SigningKey::from_bytes(&bytes))
}

/// The 32 bytes of a public key as a [`TokenKey`] carries it (whether they are a point of
/// the curve is seen when a signature is checked).
pub fn decode_public_key(encoded: &str) -> Option<[u8; 32]> {
    URL_SAFE_NO_PAD.decode(encoded).ok()?.try_into().ok()
}

pub fn sign(claims: &Claims, key: &SigningKey, kid: &str) -> String {
    let header = Header {
        alg: "EdDSA".into(),
        typ: "JWT".into(),
        kid: Some(kid.into()),
    };
    let header = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).expect("header serializes"));
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims serialize"));
    let signing_input = format!("{header}.{payload}");
    let signature = key.sign(signing_input.as_bytes());
    format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signature.to_bytes())
    )
}

/// Verifies `token` against `keys` (a database's configuration's) at time `now` (Unix
/// seconds). The header's `kid` picks the key; a token without one is tried against each.
pub fn verify(token: &str, keys: &[TokenKey], now: i64) -> Result<Claims, JwtError> {
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Invalid);
    };
    let header: Header = decode_json(header_b64)?;
    if header.alg != "EdDSA" {
        return Err(JwtError::Invalid);
    }
    let signature: [u8; 64] = URL_SAFE_NO_PAD
        .decode(signature_b64.trim_end_matches('='))
        .map_err(|_| JwtError::Invalid)?
        .try_into()
        .map_err(|_| JwtError::Invalid)?;
    let signature = Signature::from_bytes(&signature);
    let signing_input = &token[..header_b64.len() + 1 + payload_b64.len()];
    let verified = keys
        .iter()
        .filter(|key| header.kid.as_ref().is_none_or(|kid| *kid == key.kid))
        .filter_map(|key| decode_public_key(&key.public_key))
        .any(|key| crate::verified_signatures::verify(&key, signing_input.as_bytes(), &signature));
    if !verified {
        let names_a_database = decode_json::<Claims>(payload_b64)
            .is_ok_and(|claims| claims.id.is_some() || claims.gid.is_some());
        return Err(if names_a_database {
            JwtError::NotForThisDatabase
        } else {
            JwtError::Invalid
        });
    }
    let claims: Claims = decode_json(payload_b64)?;
    if claims.exp.is_some_and(|exp| exp <= now) {
        return Err(JwtError::Expired);
    }
    Ok(claims)
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Result<T, JwtError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|_| JwtError::Invalid)?;
    serde_json::from_slice(&bytes).map_err(|_| JwtError::Invalid)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Claims of a read-write database token (for tests of what keeps them, too).
    pub(crate) fn claims() -> Claims {
        Claims {
            a: "rw".into(),
            id: Some("db".into()),
            gid: None,
            p: None,
            iat: 1,
            exp: Some(100),
        }
    }

    #[test]
    fn round_trip_and_failures() {
        let key = generate_key();
        let other = generate_key();
        let keys = vec![TokenKey {
            kid: "k1".into(),
            public_key: encode_key(key.verifying_key().as_bytes()),
        }];
        let token = sign(&claims(), &key, "k1");
        assert_eq!(verify(&token, &keys, 50), Ok(claims()));
        assert_eq!(verify(&token, &keys, 100), Err(JwtError::Expired));
        // A database token signed by other keys: one of another database or group.
        let foreign = sign(&claims(), &other, "k1");
        assert_eq!(
            verify(&foreign, &keys, 50),
            Err(JwtError::NotForThisDatabase)
        );
        let wrong_kid = sign(&claims(), &key, "k2");
        assert_eq!(
            verify(&wrong_kid, &keys, 50),
            Err(JwtError::NotForThisDatabase)
        );
        // Without a database or group claim it is no token of ours at all.
        let no_database = Claims {
            id: None,
            ..claims()
        };
        let forged = sign(&no_database, &other, "k1");
        assert_eq!(verify(&forged, &keys, 50), Err(JwtError::Invalid));
        assert_eq!(verify("a.b", &keys, 50), Err(JwtError::Invalid));
        assert_eq!(verify("", &keys, 50), Err(JwtError::Invalid));
        // Tampering with the payload breaks the signature.
        let mut parts: Vec<&str> = token.split('.').collect();
        let mut tampered = claims();
        tampered.a = "ro".into();
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&tampered).unwrap());
        parts[1] = &payload;
        assert_eq!(
            verify(&parts.join("."), &keys, 50),
            Err(JwtError::NotForThisDatabase)
        );
    }

    #[test]
    fn keys_encode_and_decode() {
        let key = generate_key();
        let encoded = encode_key(&key.to_bytes());
        assert_eq!(
            decode_signing_key(&encoded).unwrap().to_bytes(),
            key.to_bytes()
        );
        let public = encode_key(key.verifying_key().as_bytes());
        assert_eq!(
            &decode_public_key(&public).unwrap(),
            key.verifying_key().as_bytes()
        );
        assert!(decode_public_key("short").is_none());
    }
}
