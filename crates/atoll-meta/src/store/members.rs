use super::Store;
use crate::backend::{Conn, Row};
use crate::error::{Entity, Result, StoreError};
use crate::model::Member;
use atoll_types::Role;

const MEMBER_COLUMNS: &str = "u.id, u.username, u.email, m.role";

fn member_from_row(row: &Row) -> Member {
    Member {
        user_id: row.text(0),
        username: row.text(1),
        email: row.text(2),
        role: Role::parse(&row.text(3)).unwrap_or(Role::Viewer),
    }
}

pub(crate) fn insert_member(
    c: &mut dyn Conn,
    org_id: &str,
    user_id: &str,
    role: Role,
) -> Result<()> {
    c.execute(
        "INSERT INTO memberships (org_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)",
        &[
            org_id.into(),
            user_id.into(),
            role.as_str().into(),
            crate::now_millis().into(),
        ],
    )
    .map_err(|e| e.duplicate_is(Entity::Member))?;
    Ok(())
}

fn member_of(c: &mut dyn Conn, org_id: &str, user_id: &str) -> Result<Member> {
    let sql = format!(
        "SELECT {MEMBER_COLUMNS} FROM memberships m JOIN users u ON u.id = m.user_id
         WHERE m.org_id = $1 AND m.user_id = $2"
    );
    c.query_opt(&sql, &[org_id.into(), user_id.into()])?
        .map(|row| member_from_row(&row))
        .ok_or(StoreError::NotFound(Entity::Member))
}

/// Refuses a change that would leave the organization without an owner. Runs inside the
/// changing transaction, so two concurrent demotions cannot both pass.
fn ensure_other_owner(c: &mut dyn Conn, org_id: &str, user_id: &str) -> Result<()> {
    let others = c
        .query_one(
            "SELECT COUNT(*) FROM memberships WHERE org_id = $1 AND role = 'owner' AND user_id <> $2",
            &[org_id.into(), user_id.into()],
        )?
        .int(0);
    if others == 0 {
        return Err(StoreError::LastOwner);
    }
    Ok(())
}

impl Store {
    pub async fn list_members(&self, org_id: &str) -> Result<Vec<Member>> {
        let org_id = org_id.to_string();
        self.read("list_members", move |c| {
            let sql = format!(
                "SELECT {MEMBER_COLUMNS} FROM memberships m JOIN users u ON u.id = m.user_id
                 WHERE m.org_id = $1 ORDER BY u.username"
            );
            Ok(c.query(&sql, &[org_id.into()])?
                .iter()
                .map(member_from_row)
                .collect())
        })
        .await
    }

    pub async fn member(&self, org_id: &str, user_id: &str) -> Result<Member> {
        let (org_id, user_id) = (org_id.to_string(), user_id.to_string());
        self.read("member", move |c| member_of(c, &org_id, &user_id))
            .await
    }

    /// Adds a user to an organization; any pending invite for them there is consumed.
    pub async fn add_member(&self, org_id: &str, user_id: &str, role: Role) -> Result<Member> {
        let (org_id, user_id) = (org_id.to_string(), user_id.to_string());
        self.write("add_member", move |c| {
            insert_member(c, &org_id, &user_id, role)?;
            super::invites::delete_invites_for_user(c, &org_id, &user_id)?;
            member_of(c, &org_id, &user_id)
        })
        .await
    }

    pub async fn set_member_role(&self, org_id: &str, user_id: &str, role: Role) -> Result<Member> {
        let (org_id, user_id) = (org_id.to_string(), user_id.to_string());
        self.write_affecting_credentials("set_member_role", move |c| {
            let current = member_of(c, &org_id, &user_id)?;
            if current.role == Role::Owner && role != Role::Owner {
                ensure_other_owner(c, &org_id, &user_id)?;
            }
            c.execute(
                "UPDATE memberships SET role = $3 WHERE org_id = $1 AND user_id = $2",
                &[(&org_id).into(), (&user_id).into(), role.as_str().into()],
            )?;
            member_of(c, &org_id, &user_id)
        })
        .await
    }

    /// Removes a member and revokes the tokens they minted for this organization: a user
    /// who comes back does not get old credentials back.
    pub async fn remove_member(&self, org_id: &str, user_id: &str) -> Result<Member> {
        let (org_id, user_id) = (org_id.to_string(), user_id.to_string());
        self.write_affecting_credentials("remove_member", move |c| {
            let current = member_of(c, &org_id, &user_id)?;
            if current.role == Role::Owner {
                ensure_other_owner(c, &org_id, &user_id)?;
            }
            c.execute(
                "DELETE FROM memberships WHERE org_id = $1 AND user_id = $2",
                &[(&org_id).into(), (&user_id).into()],
            )?;
            c.execute(
                "UPDATE api_tokens SET revoked_at = $3
                 WHERE org_id = $1 AND user_id = $2 AND revoked_at IS NULL",
                &[org_id.into(), user_id.into(), crate::now_millis().into()],
            )?;
            Ok(current)
        })
        .await
    }
}
