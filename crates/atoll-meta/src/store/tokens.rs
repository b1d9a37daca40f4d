use super::users::{user_from_row, USER_COLUMNS};
use super::Store;
use crate::backend::{Conn, Row, Value};
use crate::error::{Entity, Result, StoreError};
use crate::model::{ApiToken, Credential, NewToken, TokenKind, TokenListing, TokenRestriction};
use atoll_types::Scope;

const TOKEN_COLUMNS: &str = "t.id, t.user_id, t.name, t.kind, t.org_id, t.group_id, t.scopes, \
     t.created_at, t.expires_at, t.last_used_at, t.revoked_at";
const TOKEN_COLUMN_COUNT: usize = 11;

/// A listing row: the token, its owner, and the names of its organization and group.
const LISTING_SELECT: &str = "SELECT t.id, t.user_id, t.name, t.kind, t.org_id, t.group_id, \
     t.scopes, t.created_at, t.expires_at, t.last_used_at, t.revoked_at, \
     u.username, u.email, o.slug, g.name
     FROM api_tokens t
     JOIN users u ON u.id = t.user_id
     LEFT JOIN organizations o ON o.id = t.org_id
     LEFT JOIN org_groups g ON g.id = t.group_id";

/// Seconds between two recorded uses of the same token: `last_used_at` is informative,
/// and writing it on every request would make each read a write.
const LAST_USED_RESOLUTION_MS: i64 = 60_000;

fn token_from_row(row: &Row) -> ApiToken {
    let org_id = row.opt_text(4);
    let group_id = row.opt_text(5);
    let restriction = match (org_id, group_id) {
        (Some(org_id), Some(group_id)) => TokenRestriction::Group {
            org_id,
            group_id,
            scopes: row.text(6).split(',').filter_map(Scope::parse).collect(),
        },
        (Some(org_id), None) => TokenRestriction::Organization { org_id },
        _ => TokenRestriction::Unrestricted,
    };
    ApiToken {
        id: row.text(0),
        user_id: row.text(1),
        name: row.text(2),
        kind: TokenKind::parse(&row.text(3)),
        restriction,
        created_at: row.int(7),
        expires_at: row.opt_int(8),
        last_used_at: row.opt_int(9),
        revoked_at: row.opt_int(10),
    }
}

fn listing_from_row(row: &Row) -> TokenListing {
    TokenListing {
        token: token_from_row(row),
        owner_username: row.text(11),
        owner_email: row.text(12),
        org_slug: row.opt_text(13),
        group_name: row.opt_text(14),
    }
}

fn listing_by_id(c: &mut dyn Conn, id: &str) -> Result<TokenListing> {
    let sql = format!("{LISTING_SELECT} WHERE t.id = $1");
    c.query_opt(&sql, &[id.into()])?
        .map(|row| listing_from_row(&row))
        .ok_or(StoreError::NotFound(Entity::Token))
}

fn revoke(c: &mut dyn Conn, id: &str) -> Result<()> {
    c.execute(
        "UPDATE api_tokens SET revoked_at = $2 WHERE id = $1",
        &[id.into(), crate::now_millis().into()],
    )?;
    Ok(())
}

impl Store {
    pub async fn insert_token(&self, new: NewToken) -> Result<TokenListing> {
        self.write("insert_token", move |c| {
            let (org_id, group_id, scopes) = match &new.restriction {
                TokenRestriction::Unrestricted => (None, None, String::new()),
                TokenRestriction::Organization { org_id } => {
                    (Some(org_id.clone()), None, String::new())
                }
                TokenRestriction::Group {
                    org_id,
                    group_id,
                    scopes,
                } => (
                    Some(org_id.clone()),
                    Some(group_id.clone()),
                    scopes
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            };
            c.execute(
                "INSERT INTO api_tokens (id, user_id, name, kind, secret_hash, org_id, group_id,
                                         scopes, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                &[
                    (&new.id).into(),
                    new.user_id.into(),
                    new.name.into(),
                    new.kind.as_str().into(),
                    new.secret_hash.into(),
                    Value::from(org_id),
                    Value::from(group_id),
                    scopes.into(),
                    crate::now_millis().into(),
                    Value::from(new.expires_at),
                ],
            )
            .map_err(|e| e.duplicate_is(Entity::Token))?;
            listing_by_id(c, &new.id)
        })
        .await
    }

    /// Looks a bearer secret up by its hash, with its user. Revoked and expired tokens are
    /// returned too: the caller decides, and says why. Answers from the credential cache
    /// when it can (see `credential_cache`: fresh for a few seconds, emptied by every
    /// revocation in this process).
    pub async fn credential_by_secret_hash(&self, secret_hash: &str) -> Result<Option<Credential>> {
        let seen = match self.credentials.get(secret_hash) {
            Ok(credential) => return Ok(Some(credential)),
            Err(seen) => seen,
        };
        let credential = self.credential_from_store(secret_hash).await?;
        if let Some(credential) = &credential {
            self.credentials
                .insert(secret_hash, credential.clone(), seen);
        }
        Ok(credential)
    }

    async fn credential_from_store(&self, secret_hash: &str) -> Result<Option<Credential>> {
        let secret_hash = secret_hash.to_string();
        self.read("credential_by_secret_hash", move |c| {
            let sql = format!(
                "SELECT {TOKEN_COLUMNS}, {USER_COLUMNS} FROM api_tokens t
                 JOIN users u ON u.id = t.user_id WHERE t.secret_hash = $1"
            );
            Ok(c.query_opt(&sql, &[secret_hash.into()])?
                .map(|row| Credential {
                    token: token_from_row(&row),
                    user: user_from_row(&row, TOKEN_COLUMN_COUNT),
                }))
        })
        .await
    }

    /// Records a use of the token whose secret hashes to `secret_hash`, at most once a
    /// minute.
    pub async fn touch_token(&self, secret_hash: &str, token: &ApiToken) -> Result<()> {
        let now = crate::now_millis();
        if token
            .last_used_at
            .is_some_and(|t| now - t < LAST_USED_RESOLUTION_MS)
        {
            return Ok(());
        }
        let id = token.id.clone();
        self.write("touch_token", move |c| {
            c.execute(
                "UPDATE api_tokens SET last_used_at = $2 WHERE id = $1",
                &[id.into(), now.into()],
            )?;
            Ok(())
        })
        .await?;
        self.credentials.record_use(secret_hash, now);
        Ok(())
    }

    /// The user's active platform API tokens (not login tokens), newest first.
    pub async fn list_user_tokens(&self, user_id: &str) -> Result<Vec<TokenListing>> {
        let user_id = user_id.to_string();
        self.read("list_user_tokens", move |c| {
            let sql = format!(
                "{LISTING_SELECT} WHERE t.user_id = $1 AND t.kind = 'api' AND t.revoked_at IS NULL
                 ORDER BY t.created_at DESC, t.name"
            );
            Ok(c.query(&sql, &[user_id.into()])?
                .iter()
                .map(listing_from_row)
                .collect())
        })
        .await
    }

    /// Revokes the user's active API token with this name.
    pub async fn revoke_user_token(&self, user_id: &str, name: &str) -> Result<ApiToken> {
        let (user_id, name) = (user_id.to_string(), name.to_string());
        self.write_affecting_credentials("revoke_user_token", move |c| {
            let sql = format!(
                "SELECT {TOKEN_COLUMNS} FROM api_tokens t
                 WHERE t.user_id = $1 AND t.name = $2 AND t.kind = 'api' AND t.revoked_at IS NULL"
            );
            let token = c
                .query_opt(&sql, &[user_id.into(), name.into()])?
                .map(|row| token_from_row(&row))
                .ok_or(StoreError::NotFound(Entity::Token))?;
            revoke(c, &token.id)?;
            Ok(token)
        })
        .await
    }

    /// Revokes every login token the user holds (`POST /v1/auth/invalidate`): each
    /// session ends, API tokens stay. Answers the time from which logins count again
    /// (now) and how many tokens were revoked.
    pub async fn revoke_login_tokens(&self, user_id: &str) -> Result<(i64, u64)> {
        let user_id = user_id.to_string();
        self.write_affecting_credentials("revoke_login_tokens", move |c| {
            let now = crate::now_millis();
            let revoked = c.execute(
                "UPDATE api_tokens SET revoked_at = $2
                 WHERE user_id = $1 AND kind = 'login' AND revoked_at IS NULL",
                &[user_id.into(), now.into()],
            )?;
            Ok((now, revoked))
        })
        .await
    }

    /// Revokes one login token, found by the hash of its secret (ending one console
    /// session). Answers whether an active login token was revoked; an API token, an
    /// unknown or an already revoked one is left alone.
    pub async fn revoke_login_token(&self, secret_hash: &str) -> Result<bool> {
        let secret_hash = secret_hash.to_string();
        self.write_affecting_credentials("revoke_login_token", move |c| {
            let revoked = c.execute(
                "UPDATE api_tokens SET revoked_at = $2
                 WHERE secret_hash = $1 AND kind = 'login' AND revoked_at IS NULL",
                &[secret_hash.into(), crate::now_millis().into()],
            )?;
            Ok(revoked > 0)
        })
        .await
    }

    /// Active organization- and group-scoped tokens of an organization; only those minted
    /// by `minted_by` when given.
    pub async fn list_org_tokens(
        &self,
        org_id: &str,
        minted_by: Option<&str>,
    ) -> Result<Vec<TokenListing>> {
        let (org_id, minted_by) = (org_id.to_string(), minted_by.map(String::from));
        self.read("list_org_tokens", move |c| {
            let sql = format!(
                "{LISTING_SELECT} WHERE t.org_id = $1 AND t.kind = 'api' AND t.revoked_at IS NULL
                   AND (CAST($2 AS TEXT) IS NULL OR t.user_id = $2)
                 ORDER BY t.created_at DESC, t.name"
            );
            Ok(c.query(&sql, &[org_id.into(), Value::from(minted_by)])?
                .iter()
                .map(listing_from_row)
                .collect())
        })
        .await
    }

    /// Revokes an organization's token by id; only one minted by `minted_by` when given.
    /// A token of another organization is "not found".
    pub async fn revoke_org_token(
        &self,
        org_id: &str,
        token_id: &str,
        minted_by: Option<&str>,
    ) -> Result<ApiToken> {
        let (org_id, token_id) = (org_id.to_string(), token_id.to_string());
        let minted_by = minted_by.map(String::from);
        self.write_affecting_credentials("revoke_org_token", move |c| {
            let sql = format!(
                "SELECT {TOKEN_COLUMNS} FROM api_tokens t
                 WHERE t.id = $1 AND t.org_id = $2 AND t.kind = 'api' AND t.revoked_at IS NULL
                   AND (CAST($3 AS TEXT) IS NULL OR t.user_id = $3)"
            );
            let token = c
                .query_opt(
                    &sql,
                    &[token_id.into(), org_id.into(), Value::from(minted_by)],
                )?
                .map(|row| token_from_row(&row))
                .ok_or(StoreError::NotFound(Entity::Token))?;
            revoke(c, &token.id)?;
            Ok(token)
        })
        .await
    }
}
