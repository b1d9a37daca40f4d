use super::users::NewGroup;
use super::{new_uuid, Store};
use crate::backend::{Conn, Row, Value};
use crate::error::{Entity, Result, StoreError};
use crate::model::Group;
use crate::secrets::{SealedRecord, SecretsKeyring};

pub(crate) const GROUP_COLUMNS: &str =
    "g.id, g.org_id, g.name, g.primary_location, g.locations, g.version, \
     g.delete_protection, g.archived, g.created_at, g.last_activity_at, g.signing_key, g.key_id";

/// A group from its row, its signing key opened.
pub(crate) fn group_from_row(row: &Row, secrets: &SecretsKeyring) -> Result<Group> {
    let id = row.text(0);
    let signing_key = secrets.open(SealedRecord::Group(&id), &row.text(10))?;
    Ok(Group {
        id,
        org_id: row.text(1),
        name: row.text(2),
        primary_location: row.text(3),
        locations: row
            .text(4)
            .split(',')
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect(),
        version: row.text(5),
        delete_protection: row.bool(6),
        archived: row.bool(7),
        created_at: row.int(8),
        last_activity_at: row.int(9),
        signing_key,
        key_id: row.text(11),
    })
}

pub(crate) fn groups_from_rows(rows: &[Row], secrets: &SecretsKeyring) -> Result<Vec<Group>> {
    rows.iter()
        .map(|row| group_from_row(row, secrets))
        .collect()
}

pub(crate) fn insert_group(c: &mut dyn Conn, org_id: &str, new: &NewGroup) -> Result<Group> {
    let now = crate::now_millis();
    let id = new_uuid();
    c.execute(
        "INSERT INTO org_groups (id, org_id, name, primary_location, locations, version,
                                 created_at, last_activity_at)
         VALUES ($1, $2, $3, $4, $4, $5, $6, $6)",
        &[
            (&id).into(),
            org_id.into(),
            (&new.name).into(),
            (&new.location).into(),
            (&new.version).into(),
            now.into(),
        ],
    )
    .map_err(|e| e.duplicate_is(Entity::Group))?;
    // A new group has no signing key yet: there is nothing to open.
    group_by_id(c, &id, &SecretsKeyring::plaintext())?.ok_or(StoreError::NotFound(Entity::Group))
}

fn group_by_id(c: &mut dyn Conn, id: &str, secrets: &SecretsKeyring) -> Result<Option<Group>> {
    let sql = format!("SELECT {GROUP_COLUMNS} FROM org_groups g WHERE g.id = $1");
    c.query_opt(&sql, &[id.into()])?
        .map(|row| group_from_row(&row, secrets))
        .transpose()
}

/// Revokes every token pinned to the group: they must not outlive it, nor follow it to
/// another organization.
fn revoke_group_tokens(c: &mut dyn Conn, group_id: &str) -> Result<u64> {
    c.execute(
        "UPDATE api_tokens SET revoked_at = $2 WHERE group_id = $1 AND revoked_at IS NULL",
        &[group_id.into(), crate::now_millis().into()],
    )
}

/// Changes to a group; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct GroupChanges {
    pub name: Option<String>,
    pub delete_protection: Option<bool>,
    pub archived: Option<bool>,
    /// Every location, the primary first.
    pub locations: Option<Vec<String>>,
}

impl Store {
    pub async fn create_group(&self, org_id: &str, new: NewGroup) -> Result<Group> {
        let org_id = org_id.to_string();
        self.write("create_group", move |c| insert_group(c, &org_id, &new))
            .await
    }

    pub async fn list_groups(&self, org_id: &str) -> Result<Vec<Group>> {
        let org_id = org_id.to_string();
        let secrets = self.secrets();
        self.read("list_groups", move |c| {
            let sql = format!(
                "SELECT {GROUP_COLUMNS} FROM org_groups g WHERE g.org_id = $1 ORDER BY g.name"
            );
            groups_from_rows(&c.query(&sql, &[org_id.into()])?, &secrets)
        })
        .await
    }

    /// Every group of every organization that is in more than one location (its
    /// databases have replicas: the reconciler places them).
    pub async fn groups_in_several_locations(&self) -> Result<Vec<Group>> {
        let secrets = self.secrets();
        self.read("groups_in_several_locations", move |c| {
            let sql = format!(
                "SELECT {GROUP_COLUMNS} FROM org_groups g WHERE g.locations LIKE '%,%' ORDER BY g.id"
            );
            groups_from_rows(&c.query(&sql, &[])?, &secrets)
        })
        .await
    }

    pub async fn group_by_name(&self, org_id: &str, name: &str) -> Result<Option<Group>> {
        let (org_id, name) = (org_id.to_string(), name.to_string());
        let secrets = self.secrets();
        self.read("group_by_name", move |c| {
            let sql = format!(
                "SELECT {GROUP_COLUMNS} FROM org_groups g WHERE g.org_id = $1 AND g.name = $2"
            );
            c.query_opt(&sql, &[org_id.into(), name.into()])?
                .map(|row| group_from_row(&row, &secrets))
                .transpose()
        })
        .await
    }

    pub async fn group_by_id(&self, id: &str) -> Result<Option<Group>> {
        let id = id.to_string();
        let secrets = self.secrets();
        self.read("group_by_id", move |c| group_by_id(c, &id, &secrets))
            .await
    }

    pub async fn update_group(&self, group_id: &str, changes: GroupChanges) -> Result<Group> {
        let group_id = group_id.to_string();
        let secrets = self.secrets();
        self.write("update_group", move |c| {
            let locations = changes.locations.as_ref().map(|l| l.join(","));
            let primary = changes.locations.as_ref().and_then(|l| l.first().cloned());
            let updated = c
                .execute(
                    "UPDATE org_groups SET name = COALESCE($2, name),
                            delete_protection = COALESCE($3, delete_protection),
                            archived = COALESCE($4, archived),
                            locations = COALESCE($5, locations),
                            primary_location = COALESCE($6, primary_location),
                            last_activity_at = $7
                     WHERE id = $1",
                    &[
                        (&group_id).into(),
                        Value::from(changes.name),
                        Value::from(changes.delete_protection),
                        Value::from(changes.archived),
                        Value::from(locations),
                        Value::from(primary),
                        crate::now_millis().into(),
                    ],
                )
                .map_err(|e| e.duplicate_is(Entity::Group))?;
            if updated == 0 {
                return Err(StoreError::NotFound(Entity::Group));
            }
            bump_group_config_versions(c, &group_id)?;
            group_by_id(c, &group_id, &secrets)?.ok_or(StoreError::NotFound(Entity::Group))
        })
        .await
    }

    /// Deletes a group and revokes the tokens pinned to it.
    pub async fn delete_group(&self, group_id: &str) -> Result<Group> {
        let group_id = group_id.to_string();
        let secrets = self.secrets();
        self.write_affecting_credentials("delete_group", move |c| {
            let group =
                group_by_id(c, &group_id, &secrets)?.ok_or(StoreError::NotFound(Entity::Group))?;
            revoke_group_tokens(c, &group_id)?;
            super::tombstones::bury(c, "group_id = $1", &group_id)?;
            c.execute("DELETE FROM org_groups WHERE id = $1", &[group_id.into()])?;
            Ok(group)
        })
        .await
    }

    /// Sets the key that signs the group's database tokens (rotation).
    pub async fn set_group_key(
        &self,
        group_id: &str,
        signing_key: &str,
        key_id: &str,
    ) -> Result<Group> {
        self.store_group_key(group_id, signing_key, key_id, false)
            .await
    }

    /// Gives a group its first signing key, unless a concurrent request already did: the
    /// group's key as stored is returned either way.
    pub async fn ensure_group_key(
        &self,
        group_id: &str,
        signing_key: &str,
        key_id: &str,
    ) -> Result<Group> {
        self.store_group_key(group_id, signing_key, key_id, true)
            .await
    }

    async fn store_group_key(
        &self,
        group_id: &str,
        signing_key: &str,
        key_id: &str,
        only_if_unset: bool,
    ) -> Result<Group> {
        let (group_id, signing_key, key_id) = (
            group_id.to_string(),
            signing_key.to_string(),
            key_id.to_string(),
        );
        let secrets = self.secrets();
        self.write("store_group_key", move |c| {
            let sealed_key = secrets.seal(SealedRecord::Group(&group_id), &signing_key);
            c.execute(
                "UPDATE org_groups SET signing_key = $2, key_id = $3 WHERE id = $1 AND ($4 = 0 OR signing_key = '')",
                &[(&group_id).into(), sealed_key.into(), key_id.into(), only_if_unset.into()],
            )?;
            bump_group_config_versions(c, &group_id)?;
            group_by_id(c, &group_id, &secrets)?.ok_or(StoreError::NotFound(Entity::Group))
        })
        .await
    }

    /// Moves a group (with its databases) to another organization and revokes the tokens
    /// pinned to it. The history of each of its databases starts anew at `now`
    /// (`Database::history_starts_at`).
    pub async fn transfer_group(&self, group_id: &str, to_org_id: &str) -> Result<Group> {
        let (group_id, to_org_id) = (group_id.to_string(), to_org_id.to_string());
        let now = crate::now_millis();
        let secrets = self.secrets();
        self.write_affecting_credentials("transfer_group", move |c| {
            revoke_group_tokens(c, &group_id)?;
            let moved = c
                .execute(
                    "UPDATE org_groups SET org_id = $2 WHERE id = $1",
                    &[(&group_id).into(), (&to_org_id).into()],
                )
                .map_err(|e| e.duplicate_is(Entity::Group))?;
            if moved == 0 {
                return Err(StoreError::NotFound(Entity::Group));
            }
            // Its databases follow, with hostnames under the new organization's slug.
            c.execute(
                "UPDATE databases SET org_id = $2, config_version = config_version + 1,
                        label = name || '-' || (SELECT slug FROM organizations WHERE id = $2),
                        history_starts_at = $3
                 WHERE group_id = $1",
                &[(&group_id).into(), to_org_id.into(), now.into()],
            )
            .map_err(|e| e.duplicate_is(Entity::Database))?;
            group_by_id(c, &group_id, &secrets)?.ok_or(StoreError::NotFound(Entity::Group))
        })
        .await
    }
}

/// Every database of the group has a new node configuration (the group's keys or archive
/// state are part of it).
fn bump_group_config_versions(c: &mut dyn Conn, group_id: &str) -> Result<()> {
    c.execute(
        "UPDATE databases SET config_version = config_version + 1 WHERE group_id = $1",
        &[group_id.into()],
    )?;
    Ok(())
}
