use super::{new_uuid, Store};
use crate::backend::{Conn, Row, Value};
use crate::error::{Entity, Result, StoreError};
use crate::model::{OrgKind, OrgMembership, Organization};
use crate::store::NewGroup;
use atoll_types::Role;

pub(crate) const ORG_COLUMNS: &str = "o.id, o.slug, o.name, o.kind, o.overages, o.require_mfa, \
     o.blocked_reads, o.blocked_writes, o.plan_id, o.plan_timeline, o.created_at";

pub(crate) fn org_from_row(row: &Row, offset: usize) -> Organization {
    Organization {
        id: row.text(offset),
        slug: row.text(offset + 1),
        name: row.text(offset + 2),
        kind: OrgKind::parse(&row.text(offset + 3)),
        overages: row.bool(offset + 4),
        require_mfa: row.bool(offset + 5),
        blocked_reads: row.bool(offset + 6),
        blocked_writes: row.bool(offset + 7),
        plan_id: row.text(offset + 8),
        plan_timeline: row.text(offset + 9),
        created_at: row.int(offset + 10),
    }
}

/// Inserts an organization with `owner_id` as its owner, on `plan` (`None`: the
/// column's default, `starter`).
pub(crate) fn insert_org(
    c: &mut dyn Conn,
    slug: &str,
    name: &str,
    kind: OrgKind,
    owner_id: &str,
    plan: Option<&str>,
) -> Result<Organization> {
    let now = crate::now_millis();
    let id = new_uuid();
    c.execute(
        "INSERT INTO organizations (id, slug, name, kind, created_at) VALUES ($1, $2, $3, $4, $5)",
        &[
            (&id).into(),
            slug.into(),
            name.into(),
            kind.as_str().into(),
            now.into(),
        ],
    )?;
    if let Some(plan) = plan {
        c.execute(
            "UPDATE organizations SET plan_id = $2 WHERE id = $1",
            &[(&id).into(), plan.into()],
        )?;
    }
    c.execute(
        "INSERT INTO memberships (org_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)",
        &[
            (&id).into(),
            owner_id.into(),
            Role::Owner.as_str().into(),
            now.into(),
        ],
    )?;
    org_by_id(c, &id)?.ok_or(StoreError::NotFound(Entity::Organization))
}

pub(crate) fn org_by_id(c: &mut dyn Conn, id: &str) -> Result<Option<Organization>> {
    let sql = format!("SELECT {ORG_COLUMNS} FROM organizations o WHERE o.id = $1");
    Ok(c.query_opt(&sql, &[id.into()])?
        .map(|row| org_from_row(&row, 0)))
}

/// Marks every token restricted to the organization as revoked.
pub(crate) fn revoke_org_tokens(c: &mut dyn Conn, org_id: &str) -> Result<u64> {
    c.execute(
        "UPDATE api_tokens SET revoked_at = $2 WHERE org_id = $1 AND revoked_at IS NULL",
        &[org_id.into(), crate::now_millis().into()],
    )
}

impl Store {
    /// Creates a team organization owned by `owner_id`, on `plan` (`None`: `starter`) and,
    /// when asked, with a first group: all or nothing.
    pub async fn create_team_org(
        &self,
        owner_id: &str,
        slug: &str,
        name: &str,
        plan: Option<&str>,
        first_group: Option<NewGroup>,
    ) -> Result<Organization> {
        let (owner_id, slug, name) = (owner_id.to_string(), slug.to_string(), name.to_string());
        let plan = plan.map(str::to_string);
        self.write("create_team_org", move |c| {
            // Usernames and organization slugs share one namespace (personal orgs).
            let taken =
                c.query_opt("SELECT 1 FROM users WHERE username = $1", &[(&slug).into()])?;
            if taken.is_some() {
                return Err(StoreError::AlreadyExists(Entity::Organization));
            }
            let org = insert_org(c, &slug, &name, OrgKind::Team, &owner_id, plan.as_deref())
                .map_err(|e| e.duplicate_is(Entity::Organization))?;
            if let Some(group) = &first_group {
                super::groups::insert_group(c, &org.id, group)?;
            }
            Ok(org)
        })
        .await
    }

    pub async fn org_by_slug(&self, slug: &str) -> Result<Option<Organization>> {
        let slug = slug.to_string();
        self.read("org_by_slug", move |c| {
            let sql = format!("SELECT {ORG_COLUMNS} FROM organizations o WHERE o.slug = $1");
            Ok(c.query_opt(&sql, &[slug.into()])?
                .map(|row| org_from_row(&row, 0)))
        })
        .await
    }

    pub async fn org_by_id(&self, id: &str) -> Result<Option<Organization>> {
        let id = id.to_string();
        self.read("org_by_id", move |c| org_by_id(c, &id)).await
    }

    /// The organization with this slug and the user's role in it (`None` when the user is
    /// not a member). `Ok(None)` when no such organization exists.
    pub async fn org_with_role(
        &self,
        slug: &str,
        user_id: &str,
    ) -> Result<Option<(Organization, Option<Role>)>> {
        let (slug, user_id) = (slug.to_string(), user_id.to_string());
        self.read("org_with_role", move |c| {
            let sql = format!(
                "SELECT {ORG_COLUMNS}, m.role FROM organizations o
                 LEFT JOIN memberships m ON m.org_id = o.id AND m.user_id = $2
                 WHERE o.slug = $1"
            );
            Ok(c.query_opt(&sql, &[slug.into(), user_id.into()])?
                .map(|row| {
                    let role = row.opt_text(11).and_then(|r| Role::parse(&r));
                    (org_from_row(&row, 0), role)
                }))
        })
        .await
    }

    /// Every organization the user belongs to, personal first, then by slug.
    pub async fn orgs_of_user(&self, user_id: &str) -> Result<Vec<OrgMembership>> {
        let user_id = user_id.to_string();
        self.read("orgs_of_user", move |c| {
            let sql = format!(
                "SELECT {ORG_COLUMNS}, m.role FROM organizations o
                 JOIN memberships m ON m.org_id = o.id
                 WHERE m.user_id = $1
                 ORDER BY CASE WHEN o.kind = 'personal' THEN 0 ELSE 1 END, o.slug"
            );
            Ok(c.query(&sql, &[user_id.into()])?
                .iter()
                .map(|row| OrgMembership {
                    organization: org_from_row(row, 0),
                    role: Role::parse(&row.text(11)).unwrap_or(Role::Viewer),
                })
                .collect())
        })
        .await
    }

    /// Changes the organization's toggles; `None` leaves a field as it is.
    pub async fn update_org(
        &self,
        org_id: &str,
        overages: Option<bool>,
        require_mfa: Option<bool>,
    ) -> Result<Organization> {
        let org_id = org_id.to_string();
        self.write("update_org", move |c| {
            c.execute(
                "UPDATE organizations SET overages = COALESCE($2, overages),
                        require_mfa = COALESCE($3, require_mfa)
                 WHERE id = $1",
                &[
                    (&org_id).into(),
                    Value::from(overages),
                    Value::from(require_mfa),
                ],
            )?;
            org_by_id(c, &org_id)?.ok_or(StoreError::NotFound(Entity::Organization))
        })
        .await
    }

    /// Records whether the organization's consumption blocks its databases.
    pub async fn set_org_blocks(
        &self,
        org_id: &str,
        blocked_reads: bool,
        blocked_writes: bool,
    ) -> Result<Organization> {
        let org_id = org_id.to_string();
        self.write("set_org_blocks", move |c| {
            c.execute(
                "UPDATE organizations SET blocked_reads = $2, blocked_writes = $3 WHERE id = $1",
                &[
                    (&org_id).into(),
                    blocked_reads.into(),
                    blocked_writes.into(),
                ],
            )?;
            // The blocks are part of every database's node configuration.
            c.execute(
                "UPDATE databases SET config_version = config_version + 1 WHERE org_id = $1",
                &[(&org_id).into()],
            )?;
            org_by_id(c, &org_id)?.ok_or(StoreError::NotFound(Entity::Organization))
        })
        .await
    }

    /// Sets the organization's plan (instance administrators; plans gate paid features).
    pub async fn set_org_plan(&self, org_id: &str, plan_id: &str) -> Result<Organization> {
        let (org_id, plan_id) = (org_id.to_string(), plan_id.to_string());
        self.write("set_org_plan", move |c| {
            c.execute(
                "UPDATE organizations SET plan_id = $2 WHERE id = $1",
                &[(&org_id).into(), plan_id.into()],
            )?;
            org_by_id(c, &org_id)?.ok_or(StoreError::NotFound(Entity::Organization))
        })
        .await
    }

    /// Deletes an organization with its members, invites and groups, and revokes every
    /// token restricted to it.
    pub async fn delete_org(&self, org_id: &str) -> Result<()> {
        let org_id = org_id.to_string();
        self.write_affecting_credentials("delete_org", move |c| {
            revoke_org_tokens(c, &org_id)?;
            super::tombstones::bury(c, "org_id = $1", &org_id)?;
            let deleted = c.execute("DELETE FROM organizations WHERE id = $1", &[org_id.into()])?;
            if deleted == 0 {
                return Err(StoreError::NotFound(Entity::Organization));
            }
            Ok(())
        })
        .await
    }
}
