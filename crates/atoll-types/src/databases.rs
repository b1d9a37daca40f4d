//! Databases: `/v1/organizations/{org}/databases…` and the personal `/v1/databases…`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A database as list and retrieve return it: the contract's casing (`Name`, `DbId`,
/// `Hostname` next to snake and camel case).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Database {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "DbId")]
    pub db_id: String,
    #[serde(rename = "Hostname")]
    pub hostname: String,
    pub block_reads: bool,
    pub block_writes: bool,
    pub allow_attach: bool,
    pub regions: Vec<String>,
    #[serde(rename = "primaryRegion")]
    pub primary_region: String,
    /// Always `logical`.
    #[serde(rename = "type")]
    pub kind: String,
    pub version: String,
    pub group: String,
    pub is_schema: bool,
    pub schema: String,
    pub sleeping: bool,
    pub archived: bool,
    pub delete_protection: bool,
    pub parent: Option<DatabaseParent>,
    /// `awaiting_upload` or `active` (an Atoll extension); retrieving one database asks its
    /// node, and says `recovering` while the node rebuilds it from object storage and
    /// `unavailable` while the node does not answer.
    pub state: String,
    /// An HTTP URL of the database that works without wildcard DNS (an Atoll extension):
    /// the data plane's address with the path prefix `/db/<db>-<org>/`.
    pub http_url: String,
    /// The cipher of a database encrypted with its customer's key (`remote_encryption`);
    /// absent otherwise, as in Turso's answers (the turso CLI prints it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_cipher: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct DatabaseParent {
    pub id: String,
    pub name: String,
    pub branched_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseList {
    pub databases: Vec<Database>,
    pub pagination: Pagination,
}

/// Cursor pagination: pass `next` back as `cursor` while it is not null.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Pagination {
    pub next: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseResponse {
    pub database: Database,
}

/// What create answers: only these three, as the contract shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct CreatedDatabase {
    #[serde(rename = "DbId")]
    pub db_id: String,
    #[serde(rename = "Hostname")]
    pub hostname: String,
    #[serde(rename = "Name")]
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct CreateDatabaseResponse {
    pub database: CreatedDatabase,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateDatabaseRequest {
    pub name: String,
    /// Name of an existing group; `default` when absent.
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub seed: Option<Seed>,
    /// Bytes, or with a unit: `1mb`, `256MB`, `1gb`.
    #[serde(default)]
    pub size_limit: Option<String>,
    /// Sent by the Turso CLI (may be empty); must be a location of the group when set.
    #[serde(default)]
    pub location: Option<String>,
    #[serde(default)]
    pub is_schema: Option<bool>,
    #[serde(default)]
    pub schema: Option<String>,
    #[serde(default)]
    pub remote_encryption: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct Seed {
    /// `database_upload`, `database` or `dump`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The database to copy (`database` seeds); the Turso CLI sends it as `value`.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    /// A dump URL from `POST …/databases/dumps` (`dump` seeds).
    #[serde(default)]
    pub url: Option<String>,
    /// Point-in-time restore: not available yet.
    #[serde(default)]
    pub timestamp: Option<String>,
}

/// `DELETE …/databases/{db}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeletedDatabase {
    pub database: String,
}

/// `GET|PATCH …/databases/{db}/configuration` (bare, not wrapped).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct DatabaseConfiguration {
    /// Bytes as a string; empty for no limit.
    pub size_limit: String,
    pub allow_attach: bool,
    pub block_reads: bool,
    pub block_writes: bool,
    pub delete_protection: bool,
    pub allowed_ips: Vec<String>,
    pub allowed_aws_vpc_ids: Vec<String>,
    /// Atoll: when a commit is acknowledged: `lag` (in the node's WAL; in object storage
    /// within the node's `--durability-lag`), `sync` (only once object storage has it), or
    /// `default` (the node's `--durability`). docs/OPERATIONS.md, "Backups and recovery".
    #[serde(default = "default_durability")]
    pub durability: String,
}

fn default_durability() -> String {
    "default".to_string()
}

/// Absent or `null` fields stay unchanged; `[]` clears a list.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct UpdateDatabaseConfiguration {
    #[serde(default)]
    pub size_limit: Option<String>,
    #[serde(default)]
    pub allow_attach: Option<bool>,
    #[serde(default)]
    pub block_reads: Option<bool>,
    #[serde(default)]
    pub block_writes: Option<bool>,
    #[serde(default)]
    pub delete_protection: Option<bool>,
    #[serde(default)]
    pub allowed_ips: Option<Vec<String>>,
    #[serde(default)]
    pub allowed_aws_vpc_ids: Option<Vec<String>>,
    /// Atoll: `lag`, `sync` or `default` (the node's mode).
    #[serde(default)]
    pub durability: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Instance {
    pub uuid: String,
    pub name: String,
    /// `primary` or `replica`.
    #[serde(rename = "type")]
    pub kind: String,
    pub region: String,
    pub hostname: String,
    /// As the database's `http_url` (an Atoll extension): the instance's URL in the path
    /// form, `https://` when its node has TLS.
    #[serde(default)]
    pub http_url: String,
    /// A replica's last applied frame of the primary's log (an Atoll extension; absent
    /// for the primary and for a replica whose node did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_index: Option<u64>,
    /// How long a replica has been behind its primary, in ms (an Atoll extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InstanceList {
    pub instances: Vec<Instance>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InstanceResponse {
    pub instance: Instance,
}

/// `POST …/databases/{db}/transfer` (`org`, as the Turso CLI sends it).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TransferDatabaseRequest {
    #[serde(default)]
    pub org: Option<String>,
    #[serde(default)]
    pub organization: Option<String>,
}

/// `POST …/databases/{db}/encryption/rotate` (Atoll's, beyond Turso): re-encrypt a
/// database encrypted with its customer's key under a new key (docs/ENCRYPTION.md).
/// Keys are base64 of the raw key bytes, as on create.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RotateEncryptionKeyRequest {
    /// The key the database is encrypted with now.
    pub current_encryption_key: String,
    /// The new key.
    pub encryption_key: String,
    /// The new key's cipher; the current cipher when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_cipher: Option<String>,
    /// The current key's cipher: needed only to repeat a rotation that changed the cipher
    /// (the database then already names the new one); the database's cipher when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_encryption_cipher: Option<String>,
}

/// What a key rotation did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EncryptionKeyRotated {
    /// The database's cipher from now on.
    pub encryption_cipher: String,
    /// Pages written again under the new key.
    pub pages_rewritten: i64,
}

/// `POST …/auth/tokens` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateDatabaseTokenRequest {
    #[serde(default)]
    pub permissions: Option<TokenPermissions>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct TokenPermissions {
    #[serde(default)]
    pub read_attach: Option<ReadAttach>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct ReadAttach {
    #[serde(default)]
    pub databases: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseToken {
    pub jwt: String,
}

/// `POST …/databases/dumps` answer: the URL to give as `seed.url`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DumpUploaded {
    pub dump_url: String,
}

/// A deleted database that can still be restored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct RestorableDatabase {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "DbId")]
    pub db_id: String,
    pub group: String,
    /// RFC 3339.
    pub deleted_at: String,
    /// RFC 3339: after this the database is purged and cannot come back.
    pub restorable_until: String,
}

/// `GET /v1/organizations/{org}/deleted-databases`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeletedDatabaseList {
    pub databases: Vec<RestorableDatabase>,
}
