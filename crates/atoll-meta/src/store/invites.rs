use super::Store;
use crate::backend::{Conn, Row};
use crate::error::{Entity, Result, StoreError};
use crate::model::{Invite, Invitee};
use atoll_types::Role;

const INVITE_COLUMNS: &str =
    "i.id, i.org_id, o.slug, i.email, i.username, i.role, i.invited_by, i.created_at";

fn invite_from_row(row: &Row) -> Invite {
    Invite {
        id: row.int(0),
        org_id: row.text(1),
        org_slug: row.text(2),
        email: row.text(3),
        username: row.text(4),
        role: Role::parse(&row.text(5)).unwrap_or(Role::Member),
        invited_by: row.text(6),
        created_at: row.int(7),
    }
}

/// Deletes the invites of `org_id` addressed to this user, by username or by email.
pub(crate) fn delete_invites_for_user(
    c: &mut dyn Conn,
    org_id: &str,
    user_id: &str,
) -> Result<u64> {
    c.execute(
        "DELETE FROM invites WHERE org_id = $1 AND id IN (
             SELECT i.id FROM invites i, users u
             WHERE u.id = $2 AND i.org_id = $1
               AND ((i.username <> '' AND i.username = u.username)
                 OR (i.email <> '' AND LOWER(i.email) = LOWER(u.email))))",
        &[org_id.into(), user_id.into()],
    )
}

impl Store {
    /// Invites someone to an organization; a pending invite for the same address is
    /// replaced (new role, new date).
    pub async fn create_invite(
        &self,
        org_id: &str,
        invitee: Invitee,
        role: Role,
        invited_by: &str,
    ) -> Result<Invite> {
        let (org_id, invited_by) = (org_id.to_string(), invited_by.to_string());
        self.write("create_invite", move |c| {
            let (email, username) = match invitee {
                Invitee::Email(email) => (email, String::new()),
                Invitee::Username(username) => (String::new(), username),
            };
            c.execute(
                "DELETE FROM invites WHERE org_id = $1
                   AND ((email <> '' AND LOWER(email) = LOWER($2)) OR (username <> '' AND username = $3))",
                &[(&org_id).into(), (&email).into(), (&username).into()],
            )?;
            let id = c
                .query_one(
                    "INSERT INTO invites (org_id, email, username, role, invited_by, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                    &[
                        (&org_id).into(),
                        email.into(),
                        username.into(),
                        role.as_str().into(),
                        invited_by.into(),
                        crate::now_millis().into(),
                    ],
                )?
                .int(0);
            let sql = format!(
                "SELECT {INVITE_COLUMNS} FROM invites i JOIN organizations o ON o.id = i.org_id WHERE i.id = $1"
            );
            Ok(invite_from_row(&c.query_one(&sql, &[id.into()])?))
        })
        .await
    }

    pub async fn list_invites(&self, org_id: &str) -> Result<Vec<Invite>> {
        let org_id = org_id.to_string();
        self.read("list_invites", move |c| {
            let sql = format!(
                "SELECT {INVITE_COLUMNS} FROM invites i JOIN organizations o ON o.id = i.org_id
                 WHERE i.org_id = $1 ORDER BY i.id"
            );
            Ok(c.query(&sql, &[org_id.into()])?
                .iter()
                .map(invite_from_row)
                .collect())
        })
        .await
    }

    /// Deletes the pending invite addressed to `address` (an email or a username).
    pub async fn delete_invite(&self, org_id: &str, address: &str) -> Result<()> {
        let (org_id, address) = (org_id.to_string(), address.to_string());
        self.write("delete_invite", move |c| {
            let deleted = c.execute(
                "DELETE FROM invites WHERE org_id = $1
                   AND ((email <> '' AND LOWER(email) = LOWER($2)) OR (username <> '' AND username = $2))",
                &[org_id.into(), address.into()],
            )?;
            if deleted == 0 {
                return Err(StoreError::NotFound(Entity::Invite));
            }
            Ok(())
        })
        .await
    }

    /// The pending invites addressed to this user, by username or by email.
    pub async fn invites_for_user(&self, user_id: &str) -> Result<Vec<Invite>> {
        let user_id = user_id.to_string();
        self.read("invites_for_user", move |c| {
            let sql = format!(
                "SELECT {INVITE_COLUMNS} FROM invites i
                 JOIN organizations o ON o.id = i.org_id
                 JOIN users u ON u.id = $1
                 WHERE (i.username <> '' AND i.username = u.username)
                    OR (i.email <> '' AND LOWER(i.email) = LOWER(u.email))
                 ORDER BY i.id"
            );
            Ok(c.query(&sql, &[user_id.into()])?
                .iter()
                .map(invite_from_row)
                .collect())
        })
        .await
    }

    /// Accepts the user's pending invite to `org_id`: they become a member with the invited
    /// role, and the invite is consumed.
    pub async fn accept_invite(&self, org_id: &str, user_id: &str) -> Result<Role> {
        let (org_id, user_id) = (org_id.to_string(), user_id.to_string());
        self.write("accept_invite", move |c| {
            let sql = format!(
                "SELECT {INVITE_COLUMNS} FROM invites i
                 JOIN organizations o ON o.id = i.org_id
                 JOIN users u ON u.id = $2
                 WHERE i.org_id = $1
                   AND ((i.username <> '' AND i.username = u.username)
                     OR (i.email <> '' AND LOWER(i.email) = LOWER(u.email)))
                 ORDER BY i.id DESC"
            );
            let invite = c
                .query_opt(&sql, &[(&org_id).into(), (&user_id).into()])?
                .map(|row| invite_from_row(&row))
                .ok_or(StoreError::NotFound(Entity::Invite))?;
            delete_invites_for_user(c, &org_id, &user_id)?;
            super::members::insert_member(c, &org_id, &user_id, invite.role)?;
            Ok(invite.role)
        })
        .await
    }
}
