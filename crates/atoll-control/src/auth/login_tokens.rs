//! Login tokens: what `POST /v1/auth/login` and `atoll dev`'s first start hand out.

use crate::auth::secrets::{new_token_id, PlainToken};
use crate::error::ApiResult;
use atoll_meta::{NewToken, Store, TokenKind, TokenRestriction};

/// Login tokens live a week, as Turso's do.
pub const LOGIN_TOKEN_LIFETIME_MS: i64 = 7 * 24 * 3600 * 1000;

/// Stores a new login token of `user_id` and answers its secret (shown once).
pub(crate) async fn mint_login_token(store: &Store, user_id: &str) -> ApiResult<String> {
    let secret = PlainToken::generate();
    store
        .insert_token(NewToken {
            id: new_token_id(),
            user_id: user_id.to_string(),
            name: "login".to_string(),
            kind: TokenKind::Login,
            secret_hash: secret.hashed(),
            restriction: TokenRestriction::Unrestricted,
            expires_at: Some(atoll_meta::now_millis() + LOGIN_TOKEN_LIFETIME_MS),
        })
        .await?;
    Ok(secret.reveal())
}
