use super::{new_uuid, Store};
use crate::backend::{Conn, Row, Value};
use crate::error::{Entity, Result};
use crate::model::{Group, OrgKind, Organization, User};

/// A user to create. The caller hashes the password.
#[derive(Debug, Clone)]
pub struct NewUser {
    pub username: String,
    pub email: String,
    pub name: String,
    pub password_hash: String,
    pub is_admin: bool,
    /// The plan of their personal organization; `None`: `starter`.
    pub plan: Option<String>,
}

/// A group to create; also the group every new organization starts with.
#[derive(Debug, Clone)]
pub struct NewGroup {
    pub name: String,
    pub location: String,
    pub version: String,
}

pub(crate) const USER_COLUMNS: &str =
    "u.id, u.username, u.email, u.name, u.password_hash, u.is_admin, u.created_at";

pub(crate) fn user_from_row(row: &Row, offset: usize) -> User {
    User {
        id: row.text(offset),
        username: row.text(offset + 1),
        email: row.text(offset + 2),
        name: row.text(offset + 3),
        password_hash: row.text(offset + 4),
        is_admin: row.bool(offset + 5),
        created_at: row.int(offset + 6),
    }
}

impl Store {
    /// Creates a user with their personal organization (slug = username, the user its
    /// owner) and, when asked, a first group in it: all or nothing.
    pub async fn create_user(
        &self,
        new: NewUser,
        first_group: Option<NewGroup>,
    ) -> Result<(User, Organization, Option<Group>)> {
        self.write("create_user", move |c| {
            let now = crate::now_millis();
            let user = User {
                id: new_uuid(),
                username: new.username,
                email: new.email,
                name: new.name,
                password_hash: new.password_hash,
                is_admin: new.is_admin,
                created_at: now,
            };
            c.execute(
                "INSERT INTO users (id, username, email, name, password_hash, is_admin, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    (&user.id).into(),
                    (&user.username).into(),
                    (&user.email).into(),
                    (&user.name).into(),
                    (&user.password_hash).into(),
                    user.is_admin.into(),
                    now.into(),
                ],
            )
            .map_err(|e| e.duplicate_is(Entity::User))?;
            // The personal organization shares the username's slug; a team organization
            // already holding it makes the username unavailable.
            let org = super::organizations::insert_org(
                c,
                &user.username,
                &user.username,
                OrgKind::Personal,
                &user.id,
                new.plan.as_deref(),
            )
            .map_err(|e| e.duplicate_is(Entity::User))?;
            let group = match first_group {
                Some(g) => Some(super::groups::insert_group(c, &org.id, &g)?),
                None => None,
            };
            Ok((user, org, group))
        })
        .await
    }

    pub async fn user_by_username(&self, username: &str) -> Result<Option<User>> {
        let username = username.to_string();
        self.read("user_by_username", move |c| {
            user_where(c, "u.username = $1", username)
        })
        .await
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<User>> {
        let id = id.to_string();
        self.read("user_by_id", move |c| user_where(c, "u.id = $1", id))
            .await
    }
}

fn user_where(c: &mut dyn Conn, condition: &str, value: String) -> Result<Option<User>> {
    let sql = format!("SELECT {USER_COLUMNS} FROM users u WHERE {condition}");
    Ok(c.query_opt(&sql, &[Value::Text(value)])?
        .map(|row| user_from_row(&row, 0)))
}
