//! End users' JWTs signed by an organization's own auth provider ("bring your own auth
//! provider", the JWKS routes of the control plane).
//!
//! An organization registers key sets (JWKS); the control plane normalizes them with
//! [`parse_key_set`] and sends their public keys to the nodes inside each database's
//! configuration (`DatabaseConfig::external_keys`). A token signed by one of them is
//! accepted with the claims the organization's template describes — the same claims as
//! Atoll's own database tokens: `a` (`rw` or `ro`), `id` (database UUID) or `gid` (group
//! UUID), and `exp`, which is required here (an auth provider always sets it).
//!
//! Algorithms: `RS256`/`RS384`/`RS512`, `PS256`/`PS384`/`PS512` (RSA of 2048 to 8192 bits),
//! `ES256` (P-256), `ES384` (P-384) and `EdDSA` (Ed25519), verified with `ring`. `none`,
//! the HMAC algorithms (a public key set cannot hold their secret) and anything else are
//! refused, and an algorithm must fit the key's type and its `alg` when the key set names
//! one, so a token cannot pick how its key is used.

use crate::jwt::Claims;
use atoll_types::node::{ExternalKey, Jwk};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;

/// Most keys one key set may hold (providers publish two or three: current and next).
pub const MAX_KEYS_PER_SET: usize = 32;

/// Seconds of clock difference allowed on `exp` and `nbf`.
pub const LEEWAY_SECONDS: i64 = 60;

/// Why an end user's JWT is refused. The messages name what is wrong with the token, never
/// anything of the key set beyond its name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExternalJwtError {
    #[error("The JWT is invalid")]
    Invalid,
    #[error("The JWT is invalid: {0}")]
    Claims(String),
    #[error("The JWT has expired")]
    Expired,
    #[error("The JWT is not valid yet (nbf)")]
    NotYetValid,
}

/// Reads a JWKS document (`{"keys": [...]}`) into the public keys it holds that can
/// verify signatures. Refuses a document with private key material (a key set must be
/// public: whoever holds it could sign tokens), keys too weak or malformed, and a set with
/// no usable key; skips keys made for encryption (`use: enc`).
pub fn parse_key_set(document: &[u8]) -> Result<Vec<Jwk>, String> {
    #[derive(Deserialize)]
    struct Document {
        keys: Vec<serde_json::Map<String, serde_json::Value>>,
    }
    let document: Document = serde_json::from_slice(document)
        .map_err(|e| format!("not a JSON Web Key Set ({{\"keys\": [...]}}): {e}"))?;
    if document.keys.len() > MAX_KEYS_PER_SET {
        return Err(format!(
            "the key set holds {} keys; at most {MAX_KEYS_PER_SET} are accepted",
            document.keys.len()
        ));
    }
    let mut keys = Vec::new();
    for (index, member) in document.keys.iter().enumerate() {
        let text = |name: &str| -> Result<Option<String>, String> {
            match member.get(name) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("key {index}: `{name}` must be a string")),
            }
        };
        for private in ["d", "p", "q", "dp", "dq", "qi", "oth", "k"] {
            if member.contains_key(private) {
                return Err(format!(
                    "key {index} holds private key material (`{private}`): register the provider's public key set only"
                ));
            }
        }
        if text("use")?.is_some_and(|u| u != "sig") {
            continue;
        }
        let jwk = Jwk {
            kty: text("kty")?.ok_or_else(|| format!("key {index} has no `kty`"))?,
            kid: text("kid")?,
            alg: text("alg")?,
            crv: text("crv")?,
            n: text("n")?,
            e: text("e")?,
            x: text("x")?,
            y: text("y")?,
        };
        check_key(&jwk).map_err(|why| format!("key {index}: {why}"))?;
        keys.push(jwk);
    }
    if keys.is_empty() {
        return Err("the key set holds no signature key".into());
    }
    Ok(keys)
}

/// The algorithms a key can verify.
fn algorithms_of(jwk: &Jwk) -> &'static [&'static str] {
    match (jwk.kty.as_str(), jwk.crv.as_deref()) {
        ("RSA", _) => &["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"],
        ("EC", Some("P-256")) => &["ES256"],
        ("EC", Some("P-384")) => &["ES384"],
        ("OKP", Some("Ed25519")) => &["EdDSA"],
        _ => &[],
    }
}

fn decode(member: &Option<String>, name: &str) -> Result<Vec<u8>, String> {
    let text = member
        .as_deref()
        .ok_or_else(|| format!("missing `{name}`"))?;
    URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|_| format!("`{name}` is not base64url"))
}

fn check_key(jwk: &Jwk) -> Result<(), String> {
    let algorithms = algorithms_of(jwk);
    if algorithms.is_empty() {
        return Err(format!(
            "unsupported key type {} {}: use RSA, EC P-256/P-384 or OKP Ed25519",
            jwk.kty,
            jwk.crv.as_deref().unwrap_or("")
        ));
    }
    if let Some(alg) = &jwk.alg {
        if !algorithms.contains(&alg.as_str()) {
            return Err(format!("`alg` {alg} does not fit a {} key", jwk.kty));
        }
    }
    match jwk.kty.as_str() {
        "RSA" => {
            let n = decode(&jwk.n, "n")?;
            let bits = n.iter().skip_while(|b| **b == 0).count() * 8;
            if !(2048..=8192).contains(&bits) {
                return Err(format!(
                    "an RSA key of about {bits} bits; 2048 to 8192 are accepted"
                ));
            }
            if decode(&jwk.e, "e")?.is_empty() {
                return Err("empty `e`".into());
            }
        }
        "EC" => {
            let size = if jwk.crv.as_deref() == Some("P-256") {
                32
            } else {
                48
            };
            if decode(&jwk.x, "x")?.len() != size || decode(&jwk.y, "y")?.len() != size {
                return Err("`x` and `y` do not fit the curve".into());
            }
        }
        _ => {
            if decode(&jwk.x, "x")?.len() != 32 {
                return Err("an Ed25519 `x` is 32 bytes".into());
            }
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crit: Option<serde_json::Value>,
}

/// The claims of an end user's token. Numbers may come as floats from some providers.
#[derive(Deserialize)]
struct ExternalClaims {
    #[serde(default)]
    a: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    gid: Option<String>,
    #[serde(default)]
    exp: Option<serde_json::Number>,
    #[serde(default)]
    nbf: Option<serde_json::Number>,
    #[serde(default)]
    iat: Option<serde_json::Number>,
}

fn seconds(number: &serde_json::Number) -> Option<i64> {
    number
        .as_i64()
        .or_else(|| number.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
}

/// Whether any of `keys` could have signed `token` (its header's algorithm and key id
/// fit one): only then is the token one of the organization's provider's, to verify with
/// [`verify`]. A token that fits none is not one of theirs (the caller reports its own
/// verdict on it).
pub fn could_verify(token: &str, keys: &[ExternalKey]) -> bool {
    let Some(header) = token
        .split('.')
        .next()
        .and_then(|h| decode_json::<Header>(h).ok())
    else {
        return false;
    };
    let fits = candidates(&header, keys).next().is_some();
    fits
}

fn candidates<'a>(
    header: &'a Header,
    keys: &'a [ExternalKey],
) -> impl Iterator<Item = &'a ExternalKey> + 'a {
    keys.iter().filter(move |key| {
        let jwk = &key.jwk;
        algorithms_of(jwk).contains(&header.alg.as_str())
            && jwk.alg.as_ref().is_none_or(|alg| *alg == header.alg)
            && match (&header.kid, &jwk.kid) {
                (Some(wanted), Some(kid)) => wanted == kid,
                (Some(_), None) | (None, _) => true,
            }
    })
}

/// Verifies an end user's JWT against `keys` at `now` (Unix seconds) and answers its
/// claims in the form of Atoll's own database tokens. The signature is checked before
/// anything in the payload is believed.
pub fn verify(token: &str, keys: &[ExternalKey], now: i64) -> Result<Claims, ExternalJwtError> {
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ExternalJwtError::Invalid);
    };
    let header: Header = decode_json(header_b64)?;
    // Extensions the token says must be understood: none are.
    if header.crit.is_some() {
        return Err(ExternalJwtError::Invalid);
    }
    let signature = URL_SAFE_NO_PAD
        .decode(signature_b64)
        .map_err(|_| ExternalJwtError::Invalid)?;
    let signing_input = &token.as_bytes()[..header_b64.len() + 1 + payload_b64.len()];
    let verified = candidates(&header, keys)
        .any(|key| verify_signature(&header.alg, &key.jwk, signing_input, &signature));
    if !verified {
        return Err(ExternalJwtError::Invalid);
    }
    let claims: ExternalClaims = decode_json(payload_b64)?;
    let exp = claims.exp.as_ref().and_then(seconds).ok_or_else(|| {
        ExternalJwtError::Claims("a token of an auth provider must carry `exp`".into())
    })?;
    if exp + LEEWAY_SECONDS <= now {
        return Err(ExternalJwtError::Expired);
    }
    if claims
        .nbf
        .as_ref()
        .and_then(seconds)
        .is_some_and(|nbf| nbf > now + LEEWAY_SECONDS)
    {
        return Err(ExternalJwtError::NotYetValid);
    }
    let a = match claims.a.as_deref() {
        Some(a @ ("rw" | "ro")) => a.to_string(),
        Some(other) => {
            return Err(ExternalJwtError::Claims(format!(
                "claim `a` is {other:?}: use \"rw\" or \"ro\" (see GET /v2/organizations/{{org}}/jwks-template)"
            )))
        }
        None => {
            return Err(ExternalJwtError::Claims(
                "no claim `a` (\"rw\" or \"ro\"): configure the provider with the organization's template (GET /v2/organizations/{org}/jwks-template)".into(),
            ))
        }
    };
    if claims.id.is_none() && claims.gid.is_none() {
        return Err(ExternalJwtError::Claims(
            "no claim `id` (database) or `gid` (group): configure the provider with the organization's template (GET /v2/organizations/{org}/jwks-template)".into(),
        ));
    }
    Ok(Claims {
        a,
        id: claims.id,
        gid: claims.gid,
        // End users' tokens never attach other databases.
        p: None,
        iat: claims.iat.as_ref().and_then(seconds).unwrap_or(0),
        exp: Some(exp),
    })
}

fn verify_signature(alg: &str, jwk: &Jwk, message: &[u8], signature: &[u8]) -> bool {
    let bytes = |member: &Option<String>| {
        member
            .as_deref()
            .and_then(|m| URL_SAFE_NO_PAD.decode(m.trim_end_matches('=')).ok())
    };
    match jwk.kty.as_str() {
        "RSA" => {
            let (Some(n), Some(e)) = (bytes(&jwk.n), bytes(&jwk.e)) else {
                return false;
            };
            let params: &signature::RsaParameters = match alg {
                "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
                "PS256" => &signature::RSA_PSS_2048_8192_SHA256,
                "PS384" => &signature::RSA_PSS_2048_8192_SHA384,
                "PS512" => &signature::RSA_PSS_2048_8192_SHA512,
                _ => return false,
            };
            RsaPublicKeyComponents { n, e }
                .verify(params, message, signature)
                .is_ok()
        }
        "EC" => {
            let (Some(x), Some(y)) = (bytes(&jwk.x), bytes(&jwk.y)) else {
                return false;
            };
            let algorithm: &dyn signature::VerificationAlgorithm = match alg {
                "ES256" => &signature::ECDSA_P256_SHA256_FIXED,
                "ES384" => &signature::ECDSA_P384_SHA384_FIXED,
                _ => return false,
            };
            let mut point = Vec::with_capacity(1 + x.len() + y.len());
            point.push(0x04);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            UnparsedPublicKey::new(algorithm, point)
                .verify(message, signature)
                .is_ok()
        }
        "OKP" => {
            let Some(x) = bytes(&jwk.x) else {
                return false;
            };
            alg == "EdDSA"
                && UnparsedPublicKey::new(&signature::ED25519, x)
                    .verify(message, signature)
                    .is_ok()
        }
        _ => false,
    }
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Result<T, ExternalJwtError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| ExternalJwtError::Invalid)?;
    serde_json::from_slice(&bytes).map_err(|_| ExternalJwtError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn es256_key() -> (EcdsaKeyPair, Jwk) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref().to_vec();
        let jwk = Jwk {
            kty: "EC".into(),
            kid: Some("ec-1".into()),
            alg: None,
            crv: Some("P-256".into()),
            n: None,
            e: None,
            x: Some(b64(&point[1..33])),
            y: Some(b64(&point[33..])),
        };
        (pair, jwk)
    }

    fn sign_es256(pair: &EcdsaKeyPair, header: &str, claims: &str) -> String {
        let input = format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()));
        let signature = pair.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", b64(signature.as_ref()))
    }

    #[test]
    fn es256_tokens_and_their_failures() {
        let (pair, jwk) = es256_key();
        let keys = vec![ExternalKey {
            set: "clerk".into(),
            jwk,
        }];
        let header = r#"{"alg":"ES256","kid":"ec-1"}"#;
        let good = sign_es256(&pair, header, r#"{"a":"ro","id":"db-1","exp":2000}"#);
        assert!(could_verify(&good, &keys));
        let claims = verify(&good, &keys, 1000).unwrap();
        assert_eq!(claims.a, "ro");
        assert_eq!(claims.id.as_deref(), Some("db-1"));
        assert_eq!(
            verify(&good, &keys, 2000 + LEEWAY_SECONDS),
            Err(ExternalJwtError::Expired)
        );
        // No `exp`, no `a`, no database: refused even with a good signature.
        for claims in [
            r#"{"a":"rw","id":"db-1"}"#,
            r#"{"id":"db-1","exp":2000}"#,
            r#"{"a":"rw","exp":2000}"#,
            r#"{"a":"admin","id":"db-1","exp":2000}"#,
        ] {
            let token = sign_es256(&pair, header, claims);
            assert!(matches!(
                verify(&token, &keys, 1000),
                Err(ExternalJwtError::Claims(_))
            ));
        }
        // `alg: none` and HMAC with the public key as secret fit no key.
        let none = format!(
            "{}.{}.",
            b64(br#"{"alg":"none"}"#),
            b64(br#"{"a":"rw","id":"db-1","exp":2000}"#)
        );
        assert!(!could_verify(&none, &keys));
        assert_eq!(verify(&none, &keys, 1000), Err(ExternalJwtError::Invalid));
        let hs = sign_es256(
            &pair,
            r#"{"alg":"HS256"}"#,
            r#"{"a":"rw","id":"db-1","exp":2000}"#,
        );
        assert_eq!(verify(&hs, &keys, 1000), Err(ExternalJwtError::Invalid));
        // Another key of the same kind: the signature does not verify.
        let (other, _) = es256_key();
        let forged = sign_es256(&other, header, r#"{"a":"rw","id":"db-1","exp":2000}"#);
        assert_eq!(verify(&forged, &keys, 1000), Err(ExternalJwtError::Invalid));
        // A key id the set does not have.
        let unknown = sign_es256(
            &pair,
            r#"{"alg":"ES256","kid":"nope"}"#,
            r#"{"a":"rw","id":"x","exp":2000}"#,
        );
        assert!(!could_verify(&unknown, &keys));
        // A payload changed after signing.
        let mut parts: Vec<String> = good.split('.').map(str::to_string).collect();
        parts[1] = b64(br#"{"a":"rw","id":"db-1","exp":2000}"#);
        assert_eq!(
            verify(&parts.join("."), &keys, 1000),
            Err(ExternalJwtError::Invalid)
        );
        // `crit` extensions are not understood.
        let crit = sign_es256(
            &pair,
            r#"{"alg":"ES256","crit":["b64"],"b64":false}"#,
            r#"{"a":"rw","id":"db-1","exp":2000}"#,
        );
        assert_eq!(verify(&crit, &keys, 1000), Err(ExternalJwtError::Invalid));
    }

    #[test]
    fn key_sets_are_checked() {
        let (_, jwk) = es256_key();
        let public = serde_json::to_string(&serde_json::json!({"keys": [
            {"kty": "EC", "crv": "P-256", "kid": "ec-1", "x": jwk.x, "y": jwk.y, "use": "sig"},
            {"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"},
        ]}))
        .unwrap();
        let keys = parse_key_set(public.as_bytes()).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("ec-1"));

        let private = serde_json::json!({"keys": [
            {"kty": "EC", "crv": "P-256", "x": jwk.x, "y": jwk.y, "d": "secret"}
        ]});
        assert!(parse_key_set(private.to_string().as_bytes())
            .unwrap_err()
            .contains("private"));
        for bad in [
            r#"{"keys": []}"#,
            r#"not json"#,
            r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#,
            r#"{"keys": [{"kty": "oct"}]}"#,
            r#"{"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB"}]}"#,
            r#"{"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AQAB"}]}"#,
            r#"{"keys": [{"kty": "OKP", "crv": "Ed25519", "alg": "RS256", "x": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]}"#,
        ] {
            assert!(parse_key_set(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
