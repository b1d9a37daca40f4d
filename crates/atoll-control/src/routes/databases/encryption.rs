//! `POST …/databases/{db}/encryption/rotate`: a new customer key for a database encrypted
//! with one (Atoll's, beyond Turso; docs/ENCRYPTION.md, "Rotation").
//!
//! The store is changed first, the node re-encrypts second (`atoll_data::key_rotation`):
//! the store is what every later configuration push, move and failover reads, so it must
//! never name a key older than the pages'. If the node fails, the store goes back to the
//! current key. Every state a failure can leave is finished by repeating the rotation
//! with the same keys: a repeat is recognised by the *new* key matching the stored
//! verifier.

use super::configure::push_config;
use crate::audit;
use crate::auth::Access;
use crate::body::LenientJson;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use atoll_meta::{Database, DatabaseChanges, DatabaseEncryption};
use atoll_storage::encryption::{Cipher, EncryptionKey, Verifier};
use atoll_types::audit::AuditCode;
use atoll_types::databases::{EncryptionKeyRotated, RotateEncryptionKeyRequest};
use atoll_types::node::RotateEncryptionKey;
use atoll_types::ErrorCode;
use axum::extract::State;
use axum::Json;
use serde_json::json;
use zeroize::Zeroizing;

pub(super) async fn rotate(
    State(state): State<AppState>,
    access: Access,
    LenientJson(request): LenientJson<RotateEncryptionKeyRequest>,
) -> ApiResult<Json<EncryptionKeyRotated>> {
    let db = access.database().clone();
    let Some(stored) = db.encryption.clone() else {
        return Err(ApiError::Invalid(
            ErrorCode::EncryptionNotAvailable,
            format!(
                "database {} is not encrypted with a customer key: there is no key to rotate (create a database with remote_encryption)",
                db.name
            ),
        ));
    };
    let stored_cipher = Cipher::from_name(&stored.cipher)
        .map_err(|e| ApiError::Internal(format!("database {}: {e}", db.id)))?;
    let stored_verifier = Verifier::from_hex(&stored.verifier).ok_or_else(|| {
        ApiError::Internal(format!("database {} has a malformed key verifier", db.id))
    })?;
    let new_cipher = match &request.encryption_cipher {
        Some(name) => Cipher::from_name(name).map_err(|e| {
            ApiError::Invalid(ErrorCode::EncryptionCipherNotSupported, e.to_string())
        })?,
        None => stored_cipher,
    };
    if new_cipher.reserved_bytes() != stored_cipher.reserved_bytes() {
        let same_layout: Vec<&str> = Cipher::ALL
            .into_iter()
            .filter(|c| c.reserved_bytes() == stored_cipher.reserved_bytes())
            .map(Cipher::name)
            .collect();
        return Err(ApiError::Invalid(
            ErrorCode::EncryptionCipherNotSupported,
            format!(
                "a rotation keeps the layout of the pages: {} reserves {} bytes per page and {} {}; rotate to one of {}, or dump the database into a new one",
                stored_cipher.name(),
                stored_cipher.reserved_bytes(),
                new_cipher.name(),
                new_cipher.reserved_bytes(),
                same_layout.join(", ")
            ),
        ));
    }
    let new = key(new_cipher, &request.encryption_key, "encryption_key")?;
    // A repeat (the store already names the new key) of a rotation whose cipher changed
    // names the current cipher; otherwise it is the stored one.
    let current_cipher = match &request.current_encryption_cipher {
        Some(name) => Cipher::from_name(name).map_err(|e| {
            ApiError::Invalid(ErrorCode::EncryptionCipherNotSupported, e.to_string())
        })?,
        None => stored_cipher,
    };
    let current = key(
        current_cipher,
        &request.current_encryption_key,
        "current_encryption_key",
    )?;
    let fresh = current.matches(&db.id, &stored_verifier);
    let repeat = new.matches(&db.id, &stored_verifier);
    if fresh && repeat {
        return Err(ApiError::invalid(
            "encryption_key is the database's current key: send a new one",
        ));
    }
    if !fresh && !repeat {
        return Err(ApiError::Forbidden(format!(
            "current_encryption_key is not the key of database {}",
            db.name
        )));
    }
    let rotated = DatabaseEncryption {
        cipher: new_cipher.name().to_string(),
        verifier: new.verifier(&db.id).to_hex(),
    };
    let changes = |encryption: DatabaseEncryption| DatabaseChanges {
        encryption: Some(encryption),
        ..Default::default()
    };
    let updated = if fresh {
        state
            .store
            .update_database(&db.id, changes(rotated.clone()))
            .await?
    } else {
        db.clone()
    };
    let config =
        crate::data_plane::database_config(&state.store, &updated, access.group(), access.org())
            .await?;
    let order = RotateEncryptionKey {
        from_cipher: current_cipher.name().to_string(),
        config,
    };
    let outcome = state
        .data_plane
        .rotate_encryption_key(
            &db.node,
            order,
            Zeroizing::new(request.current_encryption_key.clone()),
            Zeroizing::new(request.encryption_key.clone()),
        )
        .await;
    let rotated_outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            if fresh {
                // Back to the current key, which the pages are under unless the node
                // committed and then failed to answer: a repeat finishes that case.
                match state.store.update_database(&db.id, changes(stored)).await {
                    Ok(reverted) => {
                        push_config(&state, &reverted, access.group(), access.org()).await
                    }
                    Err(store) => {
                        tracing::warn!(database = %db.id, error = %store, "cannot put back the current key after a failed rotation: repeat the rotation")
                    }
                }
            }
            return Err(e);
        }
    };
    // Replicas and anything that missed it get the new verifier.
    push_config(&state, &updated, access.group(), access.org()).await;
    audit::record(
        &state,
        &access,
        &db.org_id,
        AuditCode::DbRotateEncryptionKey,
        format!(
            "rotated the encryption key of database {} ({} pages re-encrypted)",
            db.name, rotated_outcome.pages
        ),
        json!({
            "database": db.name,
            "group": access.group().name,
            "cipher": rotated.cipher,
        }),
    )
    .await;
    Ok(Json(EncryptionKeyRotated {
        encryption_cipher: rotated.cipher,
        pages_rewritten: rotated_outcome.pages,
    }))
}

/// The key an operation on `db` that writes its pages (a restore in place) was sent,
/// checked against the database's verifier: `None` for a plain database, which refuses a
/// key (the client believes it encrypted), as the data plane does.
pub(crate) fn key_of_request(
    db: &Database,
    sent: Option<&str>,
) -> ApiResult<Option<Zeroizing<String>>> {
    let sent = sent.filter(|text| !text.is_empty());
    match (&db.encryption, sent) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ApiError::Invalid(
            ErrorCode::EncryptionNotAvailable,
            format!(
                "database {} is not encrypted with a customer key: send no encryption_key",
                db.name
            ),
        )),
        (Some(_), None) => Err(ApiError::Invalid(
            ErrorCode::EncryptionKeyMalformed,
            format!(
                "database {} is encrypted with its customer's key: send it as encryption_key",
                db.name
            ),
        )),
        (Some(stored), Some(text)) => {
            let cipher = Cipher::from_name(&stored.cipher)
                .map_err(|e| ApiError::Internal(format!("database {}: {e}", db.id)))?;
            let verifier = Verifier::from_hex(&stored.verifier).ok_or_else(|| {
                ApiError::Internal(format!("database {} has a malformed key verifier", db.id))
            })?;
            if !key(cipher, text, "encryption_key")?.matches(&db.id, &verifier) {
                return Err(ApiError::Forbidden(format!(
                    "encryption_key is not the key of database {}",
                    db.name
                )));
            }
            Ok(Some(Zeroizing::new(text.to_string())))
        }
    }
}

/// A key of the request (base64 of `cipher`'s raw key bytes), or a 400 naming `field`.
fn key(cipher: Cipher, text: &str, field: &str) -> ApiResult<EncryptionKey> {
    EncryptionKey::from_base64(cipher, text)
        .map_err(|e| ApiError::Invalid(ErrorCode::EncryptionKeyMalformed, format!("{field}: {e}")))
}
