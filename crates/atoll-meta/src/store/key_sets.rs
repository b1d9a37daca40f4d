//! Organizations' key sets (JWKS) for end users' JWTs. Every change to an organization's
//! keys bumps the `config_version` of each of its databases: the keys travel to the data
//! nodes inside each database's configuration, the path its own signing keys take.

use super::Store;
use crate::backend::{Conn, Row};
use crate::error::Result;
use crate::model::{KeySetPut, OrgKeySet};

const COLUMNS: &str = "org_id, name, url, keys, created_at, refreshed_at, last_error";

fn from_row(row: &Row) -> OrgKeySet {
    OrgKeySet {
        org_id: row.text(0),
        name: row.text(1),
        url: row.opt_text(2),
        keys: row.text(3),
        created_at: row.int(4),
        refreshed_at: row.int(5),
        last_error: row.opt_text(6),
    }
}

fn bump_org_config_versions(c: &mut dyn Conn, org_id: &str) -> Result<()> {
    c.execute(
        "UPDATE databases SET config_version = config_version + 1 WHERE org_id = $1",
        &[org_id.into()],
    )?;
    Ok(())
}

impl Store {
    /// Registers (or replaces) the key set `name` of `org_id`, unless the organization
    /// already holds `max_per_org` others.
    pub async fn put_org_key_set(
        &self,
        org_id: &str,
        name: &str,
        url: Option<&str>,
        keys: &str,
        max_per_org: u64,
    ) -> Result<KeySetPut> {
        let (org_id, name) = (org_id.to_string(), name.to_string());
        let (url, keys) = (url.map(str::to_string), keys.to_string());
        self.write("put_org_key_set", move |c| {
            let now = crate::now_millis();
            let replaced = c.execute(
                "UPDATE org_jwks SET url = $3, keys = $4, refreshed_at = $5, last_error = NULL
                 WHERE org_id = $1 AND name = $2",
                &[
                    (&org_id).into(),
                    (&name).into(),
                    url.clone().into(),
                    (&keys).into(),
                    now.into(),
                ],
            )? > 0;
            if !replaced {
                let held = c
                    .query_opt(
                        "SELECT COUNT(*) FROM org_jwks WHERE org_id = $1",
                        &[(&org_id).into()],
                    )?
                    .map_or(0, |row| row.int(0));
                if u64::try_from(held).unwrap_or(u64::MAX) >= max_per_org {
                    return Ok(KeySetPut::LimitReached);
                }
                c.execute(
                    "INSERT INTO org_jwks (org_id, name, url, keys, created_at, refreshed_at)
                     VALUES ($1, $2, $3, $4, $5, $5)",
                    &[
                        (&org_id).into(),
                        (&name).into(),
                        url.into(),
                        keys.into(),
                        now.into(),
                    ],
                )?;
            }
            bump_org_config_versions(c, &org_id)?;
            Ok(if replaced {
                KeySetPut::Replaced
            } else {
                KeySetPut::Created
            })
        })
        .await
    }

    /// The key sets of `org_id`, by name.
    pub async fn org_key_sets(&self, org_id: &str) -> Result<Vec<OrgKeySet>> {
        let org_id = org_id.to_string();
        self.read("org_key_sets", move |c| {
            let sql = format!("SELECT {COLUMNS} FROM org_jwks WHERE org_id = $1 ORDER BY name");
            Ok(c.query(&sql, &[org_id.into()])?
                .iter()
                .map(from_row)
                .collect())
        })
        .await
    }

    /// Removes the key set `name` of `org_id`; false when there was none.
    pub async fn delete_org_key_set(&self, org_id: &str, name: &str) -> Result<bool> {
        let (org_id, name) = (org_id.to_string(), name.to_string());
        self.write("delete_org_key_set", move |c| {
            let deleted = c.execute(
                "DELETE FROM org_jwks WHERE org_id = $1 AND name = $2",
                &[(&org_id).into(), name.into()],
            )? > 0;
            if deleted {
                bump_org_config_versions(c, &org_id)?;
            }
            Ok(deleted)
        })
        .await
    }

    /// Every key set fetched from a URL (the refresh job's list), oldest refresh first.
    pub async fn url_key_sets(&self) -> Result<Vec<OrgKeySet>> {
        self.read("url_key_sets", move |c| {
            let sql = format!(
                "SELECT {COLUMNS} FROM org_jwks WHERE url IS NOT NULL ORDER BY refreshed_at, org_id, name"
            );
            Ok(c.query(&sql, &[])?.iter().map(from_row).collect())
        })
        .await
    }

    /// Records a refresh of the key set `name` of `org_id` fetched from `url`: the keys it
    /// got (`Ok`) or why it failed (`Err`, the keys stay). Does nothing when the key set
    /// is gone or now comes from elsewhere (replaced while it was fetched). Answers whether
    /// its keys changed (the organization's databases then need their configuration).
    pub async fn record_key_set_refresh(
        &self,
        org_id: &str,
        name: &str,
        url: &str,
        outcome: std::result::Result<String, String>,
    ) -> Result<bool> {
        let (org_id, name, url) = (org_id.to_string(), name.to_string(), url.to_string());
        self.write("record_key_set_refresh", move |c| {
            let Some(row) = c.query_opt(
                "SELECT keys FROM org_jwks WHERE org_id = $1 AND name = $2 AND url = $3",
                &[(&org_id).into(), (&name).into(), (&url).into()],
            )?
            else {
                return Ok(false);
            };
            match outcome {
                Ok(keys) => {
                    let changed = row.text(0) != keys;
                    c.execute(
                        "UPDATE org_jwks SET keys = $3, refreshed_at = $4, last_error = NULL
                         WHERE org_id = $1 AND name = $2",
                        &[
                            (&org_id).into(),
                            (&name).into(),
                            keys.into(),
                            crate::now_millis().into(),
                        ],
                    )?;
                    if changed {
                        bump_org_config_versions(c, &org_id)?;
                    }
                    Ok(changed)
                }
                Err(error) => {
                    c.execute(
                        "UPDATE org_jwks SET last_error = $3 WHERE org_id = $1 AND name = $2",
                        &[(&org_id).into(), (&name).into(), error.into()],
                    )?;
                    Ok(false)
                }
            }
        })
        .await
    }
}
