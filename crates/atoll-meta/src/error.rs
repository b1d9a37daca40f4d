use std::fmt;

/// The kinds of record the store keeps, named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    User,
    Organization,
    Member,
    Invite,
    Group,
    Token,
    Database,
    Dump,
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Entity::User => "user",
            Entity::Organization => "organization",
            Entity::Member => "member",
            Entity::Invite => "invite",
            Entity::Group => "group",
            Entity::Token => "token",
            Entity::Database => "database",
            Entity::Dump => "dump",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(Entity),
    #[error("{0} already exists")]
    AlreadyExists(Entity),
    /// A unique constraint fired where the operation did not expect one.
    #[error("duplicate record ({0})")]
    Duplicate(String),
    #[error("the last owner of an organization cannot be removed or demoted")]
    LastOwner,
    /// The backend failed (disk full, corrupt data, bad migration, a query it refused).
    #[error("metadata store unavailable: {0}")]
    Unavailable(String),
    /// The backend cannot be reached (PostgreSQL down, connection lost): a retry may
    /// succeed, and the store reconnects by itself.
    #[error("metadata store unreachable: {0}")]
    Unreachable(String),
    /// A sealed signing key that the configured secrets keys cannot open.
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
}

impl StoreError {
    /// Turns a unique-constraint violation into "this kind of record already exists".
    pub(crate) fn duplicate_is(self, entity: Entity) -> StoreError {
        match self {
            StoreError::Duplicate(_) => StoreError::AlreadyExists(entity),
            other => other,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
