//! Records as the store keeps them. These are domain structs, not wire types: the control
//! plane turns them into `atoll_types` bodies.

use atoll_types::{Role, Scope};

#[derive(Debug, Clone, PartialEq)]
pub struct User {
    pub id: String,
    pub username: String,
    pub email: String,
    pub name: String,
    /// Argon2id PHC string. Never leaves the server.
    pub password_hash: String,
    /// Instance administrator: may create users.
    pub is_admin: bool,
    pub created_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrgKind {
    Personal,
    Team,
}

impl OrgKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OrgKind::Personal => "personal",
            OrgKind::Team => "team",
        }
    }
    pub(crate) fn parse(text: &str) -> OrgKind {
        if text == "personal" {
            OrgKind::Personal
        } else {
            OrgKind::Team
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Organization {
    pub id: String,
    pub slug: String,
    pub name: String,
    pub kind: OrgKind,
    pub overages: bool,
    pub require_mfa: bool,
    pub blocked_reads: bool,
    pub blocked_writes: bool,
    pub plan_id: String,
    pub plan_timeline: String,
    pub created_at: i64,
}

/// An organization together with the caller's role in it.
#[derive(Debug, Clone, PartialEq)]
pub struct OrgMembership {
    pub organization: Organization,
    pub role: Role,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub user_id: String,
    pub username: String,
    pub email: String,
    pub role: Role,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Invite {
    pub id: i64,
    pub org_id: String,
    pub org_slug: String,
    /// Empty when the invite names a username.
    pub email: String,
    /// Empty when the invite names an email.
    pub username: String,
    pub role: Role,
    pub invited_by: String,
    pub created_at: i64,
}

/// Who an invite is addressed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invitee {
    Email(String),
    Username(String),
}

#[derive(Clone, PartialEq)]
pub struct Group {
    pub id: String,
    pub org_id: String,
    pub name: String,
    pub primary_location: String,
    /// Every location of the group, the primary first.
    pub locations: Vec<String>,
    pub version: String,
    pub delete_protection: bool,
    pub archived: bool,
    pub created_at: i64,
    pub last_activity_at: i64,
    /// Ed25519 key signing the group's database tokens (URL-safe base64); empty until the
    /// first token or database needs it. Sealed at rest (see [`crate::secrets`]); `Debug`
    /// does not show it.
    pub signing_key: String,
    pub key_id: String,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("id", &self.id)
            .field("org_id", &self.org_id)
            .field("name", &self.name)
            .field("primary_location", &self.primary_location)
            .field("locations", &self.locations)
            .field("version", &self.version)
            .field("delete_protection", &self.delete_protection)
            .field("archived", &self.archived)
            .field("created_at", &self.created_at)
            .field("last_activity_at", &self.last_activity_at)
            .field("signing_key", &redacted(&self.signing_key))
            .field("key_id", &self.key_id)
            .finish()
    }
}

/// What `Debug` shows of a private key.
fn redacted(secret: &str) -> &'static str {
    if secret.is_empty() {
        ""
    } else {
        "<redacted>"
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// A platform API token minted by the user.
    Api,
    /// A login token from `POST /v1/auth/login` or `atoll dev`'s bootstrap.
    Login,
}

impl TokenKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TokenKind::Api => "api",
            TokenKind::Login => "login",
        }
    }
    pub(crate) fn parse(text: &str) -> TokenKind {
        if text == "login" {
            TokenKind::Login
        } else {
            TokenKind::Api
        }
    }
}

/// What a token may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRestriction {
    /// Every organization of its user (login tokens, and deprecated unrestricted API tokens).
    Unrestricted,
    Organization {
        org_id: String,
    },
    Group {
        org_id: String,
        group_id: String,
        scopes: Vec<Scope>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApiToken {
    pub id: String,
    pub user_id: String,
    pub name: String,
    pub kind: TokenKind,
    pub restriction: TokenRestriction,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// A token to store: the secret is already hashed by the caller.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub id: String,
    pub user_id: String,
    pub name: String,
    pub kind: TokenKind,
    pub secret_hash: String,
    pub restriction: TokenRestriction,
    pub expires_at: Option<i64>,
}

/// A token with the names a listing shows beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenListing {
    pub token: ApiToken,
    pub owner_username: String,
    pub owner_email: String,
    pub org_slug: Option<String>,
    pub group_name: Option<String>,
}

/// The result of looking a bearer secret up: the token and its user.
#[derive(Debug, Clone, PartialEq)]
pub struct Credential {
    pub token: ApiToken,
    pub user: User,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseState {
    /// Being placed on its node; a database left in this state by a crash is removed at
    /// the next start.
    Creating,
    AwaitingUpload,
    Active,
}

impl DatabaseState {
    pub fn as_str(self) -> &'static str {
        match self {
            DatabaseState::Creating => "creating",
            DatabaseState::AwaitingUpload => "awaiting_upload",
            DatabaseState::Active => "active",
        }
    }
    pub(crate) fn parse(text: &str) -> DatabaseState {
        match text {
            "creating" => DatabaseState::Creating,
            "awaiting_upload" => DatabaseState::AwaitingUpload,
            _ => DatabaseState::Active,
        }
    }
}

#[derive(Clone, PartialEq)]
pub struct Database {
    pub id: String,
    pub org_id: String,
    pub group_id: String,
    pub name: String,
    /// `<name>-<org slug>`, the first label of its hostname.
    pub label: String,
    pub state: DatabaseState,
    pub location: String,
    /// The data node holding it.
    pub node: String,
    pub size_limit: Option<i64>,
    pub block_reads: bool,
    pub block_writes: bool,
    pub delete_protection: bool,
    pub allow_attach: bool,
    pub allowed_ips: Vec<String>,
    /// The database it was copied from: id, name, when.
    pub parent: Option<(String, String, i64)>,
    /// Ed25519 key signing its database tokens (URL-safe base64). Sealed at rest (see
    /// [`crate::secrets`]); `Debug` does not show it.
    pub signing_key: String,
    pub key_id: String,
    pub created_at: i64,
    /// When it was deleted, for a database that can still be restored.
    pub deleted_at: Option<i64>,
    /// Version of its node configuration: bumped by every change the node must see (set
    /// by the store; a new record starts at 1 whatever this says).
    pub config_version: i64,
    /// How its commits are acknowledged: `lag` or `sync`; `None` follows its node.
    pub durability: Option<String>,
    /// When its current owner's history starts (ms): set by a transfer, which starts the
    /// database's history anew so the new owner can never restore, copy or sync a state
    /// of the old owner's. `None`: at its creation. Set by the store only.
    pub history_starts_at: Option<i64>,
    /// Encrypted with its customer's key (Turso's `remote_encryption`); `None`: not.
    /// Set at creation only.
    pub encryption: Option<DatabaseEncryption>,
}

/// What is stored of an encrypted database's key: never the key, only its cipher and
/// its verifier (`atoll_storage::encryption::Verifier`, hex), which tells a wrong key
/// from damaged data (docs/ENCRYPTION.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseEncryption {
    /// Turso's cipher name (`aes256gcm`, …).
    pub cipher: String,
    pub verifier: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("id", &self.id)
            .field("org_id", &self.org_id)
            .field("group_id", &self.group_id)
            .field("name", &self.name)
            .field("label", &self.label)
            .field("state", &self.state)
            .field("location", &self.location)
            .field("node", &self.node)
            .field("size_limit", &self.size_limit)
            .field("block_reads", &self.block_reads)
            .field("block_writes", &self.block_writes)
            .field("delete_protection", &self.delete_protection)
            .field("allow_attach", &self.allow_attach)
            .field("allowed_ips", &self.allowed_ips)
            .field("parent", &self.parent)
            .field("signing_key", &redacted(&self.signing_key))
            .field("key_id", &self.key_id)
            .field("created_at", &self.created_at)
            .field("deleted_at", &self.deleted_at)
            .field("durability", &self.durability)
            .field("history_starts_at", &self.history_starts_at)
            .field("encryption", &self.encryption)
            .finish()
    }
}

/// One entry of an organization's audit log.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub id: i64,
    pub org_id: String,
    /// What happened: `db-create`, `org-member-add`, … (the contract's vocabulary).
    pub code: String,
    pub message: String,
    /// Where the request came from: `cli`, `web` or `api`.
    pub origin: String,
    /// Username of the caller.
    pub author: String,
    /// A JSON object naming what was acted on.
    pub data: String,
    pub created_at: i64,
}

/// An entry to append to an organization's audit log.
#[derive(Debug, Clone)]
pub struct NewAuditEntry {
    pub org_id: String,
    pub code: String,
    pub message: String,
    pub origin: String,
    pub author: String,
    /// A JSON object; the store keeps it as text.
    pub data: String,
}

/// An uploaded SQL dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dump {
    pub sql: String,
    pub created_at: i64,
}

/// What an organization holds in dumps not yet expired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingDumps {
    pub count: u64,
    /// Their total size.
    pub bytes: u64,
    /// Upload time of the oldest, when there is one.
    pub oldest_created_at: Option<i64>,
}

/// A key set (JWKS) an organization registered: end users' JWTs signed by one of its keys
/// may query the organization's databases, as their claims allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrgKeySet {
    pub org_id: String,
    pub name: String,
    /// Where it is fetched (and refreshed) from; `None` for a key set given inline.
    pub url: Option<String>,
    /// The public keys: a JSON array of JWKs, normalized by the control plane.
    pub keys: String,
    pub created_at: i64,
    /// The last successful fetch, or the registration of an inline key set.
    pub refreshed_at: i64,
    /// Why the last refresh failed; `None` once one succeeded.
    pub last_error: Option<String>,
}

/// What registering a key set did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySetPut {
    Created,
    /// One of the same name was replaced.
    Replaced,
    /// The organization already holds as many key sets as it may.
    LimitReached,
}

/// An organization's certificate authority for TLS client certificates (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCa {
    pub certificate: String,
    pub private_key: String,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("certificate", &self.certificate)
            .field("private_key", &"<redacted>")
            .finish()
    }
}
