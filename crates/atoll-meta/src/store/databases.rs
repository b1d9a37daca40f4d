use super::Store;
use crate::backend::{Conn, Row, Value};
use crate::error::{Entity, Result, StoreError};
use crate::model::{Database, DatabaseEncryption, DatabaseState};
use crate::secrets::{SealedRecord, SecretsKeyring};

const DATABASE_COLUMNS: &str = "d.id, d.org_id, d.group_id, d.name, d.label, d.state, d.location, d.node, \
     d.size_limit, d.block_reads, d.block_writes, d.delete_protection, d.allow_attach, d.allowed_ips, \
     d.parent_id, d.parent_name, d.branched_at, d.signing_key, d.key_id, d.created_at, d.deleted_at, d.config_version, d.durability, \
     d.history_starts_at, d.encryption_cipher, d.encryption_verifier";

/// A database from its row, its signing key opened.
fn database_from_row(row: &Row, secrets: &SecretsKeyring) -> Result<Database> {
    let id = row.text(0);
    let signing_key = secrets.open(SealedRecord::Database(&id), &row.text(17))?;
    let parent = match (row.opt_text(14), row.opt_text(15)) {
        (Some(id), Some(name)) => Some((id, name, row.int(16))),
        _ => None,
    };
    Ok(Database {
        id,
        org_id: row.text(1),
        group_id: row.text(2),
        name: row.text(3),
        label: row.text(4),
        state: DatabaseState::parse(&row.text(5)),
        location: row.text(6),
        node: row.text(7),
        size_limit: row.opt_int(8),
        block_reads: row.bool(9),
        block_writes: row.bool(10),
        delete_protection: row.bool(11),
        allow_attach: row.bool(12),
        allowed_ips: row
            .text(13)
            .split(',')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        parent,
        signing_key,
        key_id: row.text(18),
        created_at: row.int(19),
        deleted_at: row.opt_int(20),
        config_version: row.int(21),
        durability: row.opt_text(22),
        history_starts_at: row.opt_int(23),
        encryption: match (row.opt_text(24), row.opt_text(25)) {
            (Some(cipher), Some(verifier)) => Some(DatabaseEncryption { cipher, verifier }),
            _ => None,
        },
    })
}

fn databases_from_rows(rows: &[Row], secrets: &SecretsKeyring) -> Result<Vec<Database>> {
    rows.iter()
        .map(|row| database_from_row(row, secrets))
        .collect()
}

fn database_by_id(
    c: &mut dyn Conn,
    id: &str,
    secrets: &SecretsKeyring,
) -> Result<Option<Database>> {
    let sql = format!("SELECT {DATABASE_COLUMNS} FROM databases d WHERE d.id = $1");
    c.query_opt(&sql, &[id.into()])?
        .map(|row| database_from_row(&row, secrets))
        .transpose()
}

/// Changes to a database; `None` leaves a field as it is (`size_limit: Some(None)` clears
/// the limit).
#[derive(Debug, Clone, Default)]
pub struct DatabaseChanges {
    pub state: Option<DatabaseState>,
    pub size_limit: Option<Option<i64>>,
    pub block_reads: Option<bool>,
    pub block_writes: Option<bool>,
    pub delete_protection: Option<bool>,
    pub allow_attach: Option<bool>,
    pub allowed_ips: Option<Vec<String>>,
    /// A new signing key and its id (rotation).
    pub signing_key: Option<(String, String)>,
    /// `Some(None)` goes back to the node's durability.
    pub durability: Option<Option<String>>,
    /// A rotated customer key's cipher and verifier (only ever replaces one: a database is
    /// encrypted at its creation or never).
    pub encryption: Option<DatabaseEncryption>,
}

/// What to look for in [`Store::list_databases`].
#[derive(Debug, Clone, Default)]
pub struct DatabaseFilter {
    pub group_id: Option<String>,
    pub parent_id: Option<String>,
    /// Names strictly after this one (the cursor).
    pub after_name: Option<String>,
    pub limit: Option<i64>,
}

/// What [`Store::insert_database_within`] did.
#[derive(Debug)]
pub enum DatabaseInsert {
    Inserted(Box<Database>),
    /// The organization already has as many live databases as the limit allows: nothing
    /// was stored.
    LimitReached,
}

/// The organization's databases that are not deleted (those awaiting an upload count).
fn live_databases(c: &mut dyn Conn, org_id: &str) -> Result<u64> {
    let count = c
        .query_opt(
            "SELECT COUNT(*) FROM databases WHERE org_id = $1 AND deleted_at IS NULL",
            &[org_id.into()],
        )?
        .map_or(0, |row| row.int(0));
    Ok(u64::try_from(count).unwrap_or(0))
}

impl Store {
    /// Stores a new database. A taken name, or a hostname label another organization's
    /// database already has, is `AlreadyExists(Database)`.
    pub async fn insert_database(&self, db: Database) -> Result<Database> {
        match self.insert_database_within(db, None).await? {
            DatabaseInsert::Inserted(db) => Ok(*db),
            DatabaseInsert::LimitReached => Err(StoreError::Unavailable(
                "a database insert without a limit reached one".into(),
            )),
        }
    }

    /// Stores a new database unless its organization already has `live_limit` live
    /// databases. The count and the insert are one transaction, and the organization's
    /// row is locked first when there is a limit, so concurrent creates cannot pass it
    /// together (each waits for the one before it to commit, then counts again).
    pub async fn insert_database_within(
        &self,
        db: Database,
        live_limit: Option<u64>,
    ) -> Result<DatabaseInsert> {
        let secrets = self.secrets();
        self.write("insert_database", move |c| {
            if let Some(limit) = live_limit {
                // A write to the row takes its lock until commit in PostgreSQL (the
                // SQLite store's writes are one at a time anyway).
                c.execute(
                    "UPDATE organizations SET plan_id = plan_id WHERE id = $1",
                    &[(&db.org_id).into()],
                )?;
                if live_databases(c, &db.org_id)? >= limit {
                    return Ok(DatabaseInsert::LimitReached);
                }
            }
            let sealed_key = secrets.seal(SealedRecord::Database(&db.id), &db.signing_key);
            let (parent_id, parent_name, branched_at) = match &db.parent {
                Some((id, name, at)) => (Some(id.clone()), Some(name.clone()), Some(*at)),
                None => (None, None, None),
            };
            c.execute(
                "INSERT INTO databases (id, org_id, group_id, name, label, state, location, node, size_limit,
                     block_reads, block_writes, delete_protection, allow_attach, allowed_ips, parent_id,
                     parent_name, branched_at, signing_key, key_id, created_at, encryption_cipher,
                     encryption_verifier)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
                     $21, $22)",
                &[
                    (&db.id).into(),
                    (&db.org_id).into(),
                    (&db.group_id).into(),
                    (&db.name).into(),
                    (&db.label).into(),
                    db.state.as_str().into(),
                    (&db.location).into(),
                    (&db.node).into(),
                    Value::from(db.size_limit),
                    db.block_reads.into(),
                    db.block_writes.into(),
                    db.delete_protection.into(),
                    db.allow_attach.into(),
                    db.allowed_ips.join(",").into(),
                    Value::from(parent_id),
                    Value::from(parent_name),
                    Value::from(branched_at),
                    sealed_key.into(),
                    (&db.key_id).into(),
                    crate::now_millis().into(),
                    Value::from(db.encryption.as_ref().map(|e| e.cipher.clone())),
                    Value::from(db.encryption.as_ref().map(|e| e.verifier.clone())),
                ],
            )
            .map_err(|e| e.duplicate_is(Entity::Database))?;
            database_by_id(c, &db.id, &secrets)?
                .map(|db| DatabaseInsert::Inserted(Box::new(db)))
                .ok_or(StoreError::NotFound(Entity::Database))
        })
        .await
    }

    /// How many databases of the organization are not deleted (the plan's limit counts
    /// these).
    pub async fn live_database_count(&self, org_id: &str) -> Result<u64> {
        let org_id = org_id.to_string();
        self.read("live_database_count", move |c| live_databases(c, &org_id))
            .await
    }

    pub async fn database_by_name(&self, org_id: &str, name: &str) -> Result<Option<Database>> {
        let (org_id, name) = (org_id.to_string(), name.to_string());
        let secrets = self.secrets();
        self.read("database_by_name", move |c| {
            let sql = format!(
                "SELECT {DATABASE_COLUMNS} FROM databases d WHERE d.org_id = $1 AND d.name = $2 AND d.deleted_at IS NULL"
            );
            c.query_opt(&sql, &[org_id.into(), name.into()])?
                .map(|row| database_from_row(&row, &secrets))
                .transpose()
        })
        .await
    }

    pub async fn database_by_id(&self, id: &str) -> Result<Option<Database>> {
        let id = id.to_string();
        let secrets = self.secrets();
        self.read("database_by_id", move |c| database_by_id(c, &id, &secrets))
            .await
    }

    /// Several databases by id in one read, as [`Store::database_by_id`] finds each: those
    /// found, by id. The usage collector looks up every database of a batch (thousands
    /// after a burst), and one read each was most of what a node's process did at rest.
    pub async fn databases_by_ids(
        &self,
        ids: Vec<String>,
    ) -> Result<std::collections::HashMap<String, Database>> {
        let secrets = self.secrets();
        self.read("databases_by_ids", move |c| {
            let mut found = std::collections::HashMap::with_capacity(ids.len());
            for id in ids {
                if let Some(db) = database_by_id(c, &id, &secrets)? {
                    found.insert(id, db);
                }
            }
            Ok(found)
        })
        .await
    }

    /// An organization's databases by name, filtered and paginated.
    pub async fn list_databases(
        &self,
        org_id: &str,
        filter: DatabaseFilter,
    ) -> Result<Vec<Database>> {
        let org_id = org_id.to_string();
        let secrets = self.secrets();
        self.read("list_databases", move |c| {
            let sql = format!(
                "SELECT {DATABASE_COLUMNS} FROM databases d
                 WHERE d.org_id = $1 AND d.deleted_at IS NULL
                   AND (CAST($2 AS TEXT) IS NULL OR d.group_id = $2)
                   AND (CAST($3 AS TEXT) IS NULL OR d.parent_id = $3)
                   AND (CAST($4 AS TEXT) IS NULL OR d.name > $4)
                 ORDER BY d.name
                 LIMIT $5"
            );
            let limit = filter.limit.unwrap_or(i64::MAX);
            let rows = c.query(
                &sql,
                &[
                    org_id.into(),
                    Value::from(filter.group_id),
                    Value::from(filter.parent_id),
                    Value::from(filter.after_name),
                    limit.into(),
                ],
            )?;
            databases_from_rows(&rows, &secrets)
        })
        .await
    }

    /// Every database of a group, deleted ones included (to reconfigure them all, or delete
    /// them with it).
    pub async fn databases_in_group(&self, group_id: &str) -> Result<Vec<Database>> {
        let group_id = group_id.to_string();
        let secrets = self.secrets();
        self.read("databases_in_group", move |c| {
            let sql = format!(
                "SELECT {DATABASE_COLUMNS} FROM databases d WHERE d.group_id = $1 ORDER BY d.name"
            );
            databases_from_rows(&c.query(&sql, &[group_id.into()])?, &secrets)
        })
        .await
    }

    /// Every database of an organization, deleted ones included.
    pub async fn databases_in_org(&self, org_id: &str) -> Result<Vec<Database>> {
        let org_id = org_id.to_string();
        let secrets = self.secrets();
        self.read("databases_in_org", move |c| {
            let sql = format!(
                "SELECT {DATABASE_COLUMNS} FROM databases d WHERE d.org_id = $1 ORDER BY d.name"
            );
            databases_from_rows(&c.query(&sql, &[org_id.into()])?, &secrets)
        })
        .await
    }

    /// An organization's deleted databases, most recently deleted first.
    pub async fn deleted_databases(&self, org_id: &str) -> Result<Vec<Database>> {
        let org_id = org_id.to_string();
        let secrets = self.secrets();
        self.read("deleted_databases", move |c| {
            let sql = format!(
                "SELECT {DATABASE_COLUMNS} FROM databases d
                 WHERE d.org_id = $1 AND d.deleted_at IS NOT NULL ORDER BY d.deleted_at DESC, d.name"
            );
            databases_from_rows(&c.query(&sql, &[org_id.into()])?, &secrets)
        })
        .await
    }

    /// Deleted databases whose restore window ended before `before`, in every organization.
    pub async fn databases_deleted_before(&self, before: i64) -> Result<Vec<Database>> {
        let secrets = self.secrets();
        self.read("databases_deleted_before", move |c| {
            let sql = format!(
                "SELECT {DATABASE_COLUMNS} FROM databases d WHERE d.deleted_at IS NOT NULL AND d.deleted_at < $1 ORDER BY d.id"
            );
            databases_from_rows(&c.query(&sql, &[before.into()])?, &secrets)
        })
        .await
    }

    /// Marks a database deleted (restorable): its name and hostname are free again.
    pub async fn soft_delete_database(&self, id: &str) -> Result<Database> {
        let id = id.to_string();
        let secrets = self.secrets();
        self.write("soft_delete_database", move |c| {
            let changed = c.execute(
                "UPDATE databases SET deleted_at = $2, config_version = config_version + 1
                 WHERE id = $1 AND deleted_at IS NULL",
                &[(&id).into(), crate::now_millis().into()],
            )?;
            if changed == 0 {
                return Err(StoreError::NotFound(Entity::Database));
            }
            database_by_id(c, &id, &secrets)?.ok_or(StoreError::NotFound(Entity::Database))
        })
        .await
    }

    /// Brings a deleted database back. Its name or hostname taken in the meantime is
    /// `AlreadyExists(Database)`.
    pub async fn restore_database(&self, id: &str) -> Result<Database> {
        let id = id.to_string();
        let secrets = self.secrets();
        self.write("restore_database", move |c| {
            let changed = c
                .execute("UPDATE databases SET deleted_at = NULL, config_version = config_version + 1 WHERE id = $1 AND deleted_at IS NOT NULL", &[(&id).into()])
                .map_err(|e| e.duplicate_is(Entity::Database))?;
            if changed == 0 {
                return Err(StoreError::NotFound(Entity::Database));
            }
            database_by_id(c, &id, &secrets)?.ok_or(StoreError::NotFound(Entity::Database))
        })
        .await
    }

    /// Every database the store places on `node` (deleted ones included: their node keeps
    /// them, refusing queries, until they are purged).
    pub async fn databases_on_node(&self, node: &str) -> Result<Vec<Database>> {
        let node = node.to_string();
        let secrets = self.secrets();
        self.read("databases_on_node", move |c| {
            let sql = format!(
                "SELECT {DATABASE_COLUMNS} FROM databases d WHERE d.node = $1 ORDER BY d.id"
            );
            databases_from_rows(&c.query(&sql, &[node.into()])?, &secrets)
        })
        .await
    }

    /// Databases a crash left half-created.
    pub async fn databases_in_state(&self, state: DatabaseState) -> Result<Vec<Database>> {
        let secrets = self.secrets();
        self.read("databases_in_state", move |c| {
            let sql = format!(
                "SELECT {DATABASE_COLUMNS} FROM databases d WHERE d.state = $1 ORDER BY d.id"
            );
            databases_from_rows(&c.query(&sql, &[state.as_str().into()])?, &secrets)
        })
        .await
    }

    pub async fn update_database(&self, id: &str, changes: DatabaseChanges) -> Result<Database> {
        let id = id.to_string();
        let secrets = self.secrets();
        self.write("update_database", move |c| {
            let current = database_by_id(c, &id, &secrets)?.ok_or(StoreError::NotFound(Entity::Database))?;
            let size_limit = match changes.size_limit {
                Some(limit) => limit,
                None => current.size_limit,
            };
            // A new key is sealed; without one the stored value stays as it is.
            let (signing_key, key_id) = match &changes.signing_key {
                Some((key, key_id)) => (
                    Some(secrets.seal(SealedRecord::Database(&id), key)),
                    Some(key_id.clone()),
                ),
                None => (None, None),
            };
            c.execute(
                "UPDATE databases SET config_version = config_version + 1, state = $2, size_limit = $3, block_reads = $4, block_writes = $5,
                        delete_protection = $6, allow_attach = $7, allowed_ips = $8,
                        signing_key = COALESCE(CAST($9 AS TEXT), signing_key), key_id = COALESCE(CAST($10 AS TEXT), key_id),
                        durability = $11,
                        encryption_cipher = CASE WHEN encryption_cipher IS NULL THEN NULL ELSE COALESCE(CAST($12 AS TEXT), encryption_cipher) END,
                        encryption_verifier = CASE WHEN encryption_verifier IS NULL THEN NULL ELSE COALESCE(CAST($13 AS TEXT), encryption_verifier) END
                 WHERE id = $1",
                &[
                    (&id).into(),
                    changes.state.unwrap_or(current.state).as_str().into(),
                    Value::from(size_limit),
                    changes.block_reads.unwrap_or(current.block_reads).into(),
                    changes.block_writes.unwrap_or(current.block_writes).into(),
                    changes.delete_protection.unwrap_or(current.delete_protection).into(),
                    changes.allow_attach.unwrap_or(current.allow_attach).into(),
                    changes.allowed_ips.unwrap_or(current.allowed_ips).join(",").into(),
                    Value::from(signing_key),
                    Value::from(key_id),
                    Value::from(changes.durability.unwrap_or(current.durability)),
                    Value::from(changes.encryption.as_ref().map(|e| e.cipher.clone())),
                    Value::from(changes.encryption.as_ref().map(|e| e.verifier.clone())),
                ],
            )?;
            database_by_id(c, &id, &secrets)?.ok_or(StoreError::NotFound(Entity::Database))
        })
        .await
    }

    /// Moves a database to another organization and group, under its new hostname label.
    /// Its history starts anew at `now` (`Database::history_starts_at`): nothing of the
    /// old owner's is restorable by the new one.
    pub async fn move_database(
        &self,
        id: &str,
        org_id: &str,
        group_id: &str,
        label: &str,
    ) -> Result<Database> {
        let (id, org_id, group_id, label) = (
            id.to_string(),
            org_id.to_string(),
            group_id.to_string(),
            label.to_string(),
        );
        let secrets = self.secrets();
        let now = crate::now_millis();
        self.write("move_database", move |c| {
            c.execute(
                "UPDATE databases SET org_id = $2, group_id = $3, label = $4, history_starts_at = $5,
                        config_version = config_version + 1
                 WHERE id = $1",
                &[
                    (&id).into(),
                    org_id.into(),
                    group_id.into(),
                    label.into(),
                    now.into(),
                ],
            )
            .map_err(|e| e.duplicate_is(Entity::Database))?;
            database_by_id(c, &id, &secrets)?.ok_or(StoreError::NotFound(Entity::Database))
        })
        .await
    }

    pub async fn delete_database(&self, id: &str) -> Result<Database> {
        let id = id.to_string();
        let secrets = self.secrets();
        self.write("delete_database", move |c| {
            let db =
                database_by_id(c, &id, &secrets)?.ok_or(StoreError::NotFound(Entity::Database))?;
            super::tombstones::bury(c, "id = $1", &id)?;
            c.execute("DELETE FROM databases WHERE id = $1", &[id.into()])?;
            Ok(db)
        })
        .await
    }

    /// The answer stored for an `Idempotency-Key`: `(fingerprint of the request, response)`.
    pub async fn idempotent_response(
        &self,
        org_id: &str,
        key: &str,
    ) -> Result<Option<(String, String)>> {
        let (org_id, key) = (org_id.to_string(), key.to_string());
        self.read("idempotent_response", move |c| {
            Ok(c.query_opt(
                "SELECT fingerprint, response FROM idempotency_keys WHERE org_id = $1 AND key = $2",
                &[org_id.into(), key.into()],
            )?
            .map(|row| (row.text(0), row.text(1))))
        })
        .await
    }

    /// Remembers the answer to an idempotent request. A concurrent twin that stored first
    /// wins; its answer is returned.
    pub async fn remember_response(
        &self,
        org_id: &str,
        key: &str,
        fingerprint: &str,
        response: &str,
    ) -> Result<()> {
        let (org_id, key, fingerprint, response) = (
            org_id.to_string(),
            key.to_string(),
            fingerprint.to_string(),
            response.to_string(),
        );
        self.write("remember_response", move |c| {
            c.execute(
                "INSERT INTO idempotency_keys (org_id, key, fingerprint, response, created_at)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (org_id, key) DO NOTHING",
                &[
                    org_id.into(),
                    key.into(),
                    fingerprint.into(),
                    response.into(),
                    crate::now_millis().into(),
                ],
            )?;
            Ok(())
        })
        .await
    }
}
