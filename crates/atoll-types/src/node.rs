//! The node admin API: what the control plane tells a data node about its databases.
//! The control plane reaches a node only through these messages (in process for
//! `atoll dev`, over HTTP with a shared node secret for `atoll node`).

use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Where a database is in its life, as the data plane enforces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatabaseState {
    /// Created for an upload that has not landed: counts towards quotas, refuses queries.
    AwaitingUpload,
    Active,
    /// Archived with its group: refuses queries until the group is unarchived.
    Archived,
    /// Deleted but restorable: refuses queries, keeps its files.
    Deleted,
}

/// A public key the data plane accepts database tokens from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenKey {
    /// Key id, carried in the token header (`kid`).
    pub kid: String,
    /// Raw 32-byte Ed25519 public key, URL-safe base64 without padding.
    pub public_key: String,
}

/// A public key of an organization's key set (JWKS): its JWK members that verification
/// needs, normalized by the control plane (`atoll_data::external_jwt::parse_key_set`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExternalKey {
    /// The key set's name in its organization.
    pub set: String,
    pub jwk: Jwk,
}

/// The public members of a JSON Web Key (RFC 7517, 7518, 8037) that verifying a
/// signature needs; nothing private is ever kept.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Jwk {
    /// `RSA`, `EC` or `OKP`.
    pub kty: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// The one algorithm the key may be used with, when the key set says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    /// `P-256`, `P-384` (EC) or `Ed25519` (OKP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crv: Option<String>,
    /// RSA modulus and exponent, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
    /// EC point coordinates or the Ed25519 public key, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
}

/// Everything a node needs to serve one database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseConfig {
    /// Database UUID: the directory name on the node, and the `id` claim of its tokens.
    pub id: String,
    pub name: String,
    pub org_id: String,
    /// Group UUID: the `gid` claim of group tokens.
    pub group_id: String,
    /// The first label of its hostname, `<db>-<org>`.
    pub label: String,
    pub state: DatabaseState,
    pub block_reads: bool,
    pub block_writes: bool,
    /// Why the database is blocked, appended to `BLOCKED` errors.
    #[serde(default)]
    pub block_reason: Option<String>,
    /// Largest size in bytes; `None` for no limit.
    pub size_limit: Option<u64>,
    /// Whether other databases may `ATTACH` this one (with a token allowing it).
    pub allow_attach: bool,
    /// Client addresses (IPs or CIDR ranges) allowed to reach the database; empty: any.
    #[serde(default)]
    pub allowed_ips: Vec<String>,
    /// Keys of the database and of its group.
    pub keys: Vec<TokenKey>,
    /// Public keys of its organization's key sets (JWKS, "bring your own auth
    /// provider"): end users' JWTs signed by one of them may query the database as their
    /// claims allow. Shared (`Arc`), as every database of the organization carries the
    /// same: a node keeps one copy of each distinct value (`atoll_data::shared_credentials`).
    #[serde(default, skip_serializing_if = "slice_is_empty")]
    pub external_keys: Arc<[ExternalKey]>,
    /// Its organization's certificate authority for TLS client certificates (PEM), once
    /// the organization has one: a client certificate it issued for this database is an
    /// alternative to a token on TLS listeners. Shared as `external_keys` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<Arc<str>>,
    /// How its commits are acknowledged; `None`: the node's `--durability`.
    #[serde(default)]
    pub durability: Option<Durability>,
    /// Days its history stays restorable (its organization's plan); `None`: the node's
    /// default.
    #[serde(default)]
    pub pitr_retention_days: Option<u32>,
    /// The store's version of this configuration (docs/STORAGE.md, "The reconciler"): a
    /// node ignores a configuration older than the one it has, so a slow or retried push
    /// never undoes a newer one. 0 (from older control planes) is always applied.
    #[serde(default)]
    pub config_version: u64,
    /// When its current owner's history starts (ms since the epoch): set by a transfer
    /// (docs/STORAGE.md, "Transfers start the history anew"). The node then starts a new
    /// history in object storage, from a vacuumed copy of the live data, and serves nothing
    /// older: no point-in-time state, generation, frame or file export from before it.
    /// `None`: at its creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_starts_at_ms: Option<i64>,
    /// Encrypted with its customer's key: the cipher and the key's verifier (never the
    /// key, which every request carries in `x-turso-encryption-key`; docs/ENCRYPTION.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<DatabaseEncryption>,
}

fn slice_is_empty<T>(slice: &Arc<[T]>) -> bool {
    slice.is_empty()
}

/// How a database is encrypted with its customer's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseEncryption {
    /// Turso's cipher name (`aes256gcm`, `aes128gcm`, `chacha20poly1305`).
    pub cipher: String,
    /// HMAC-SHA256 keyed by the key over a label and the database's id (hex): tells a
    /// wrong key from damaged data.
    pub verifier: String,
}

/// When a commit is acknowledged (`docs/STORAGE.md`, "Durability modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Once it is in the node's WAL; object storage has it within `--durability-lag`.
    Lag,
    /// Only once object storage has it.
    Sync,
}

/// How a new database starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Seed {
    /// An empty database.
    Empty,
    /// Nothing until a file is uploaded (state `awaiting_upload`).
    Upload,
    /// A copy of another database on the same node.
    Copy { source_id: String },
    /// An SQL dump, run in one transaction.
    Dump { sql: String },
    /// Another database (or this one's own history) as it was at `timestamp_ms`, or as the
    /// end of its log (`None`), rebuilt from object storage: works on any node, and for a
    /// source that was deleted or whose node is gone.
    PointInTime {
        source_id: String,
        timestamp_ms: Option<i64>,
        /// When the source's current history starts (its `history_starts_at_ms`): the
        /// restoring node refuses a state from before it, and waits until the source's
        /// node has started that history in object storage.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        history_starts_at_ms: Option<i64>,
    },
}

impl Seed {
    /// Whether creating from this seed runs a tenant's SQL (a dump), which the node runs in
    /// its SQL sandbox, on its SQL threads.
    pub fn runs_tenant_sql(&self) -> bool {
        matches!(self, Seed::Dump { .. })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateDatabase {
    pub config: DatabaseConfig,
    pub seed: Seed,
}

/// The header of a create order for an encrypted database (`config.encryption`) that
/// carries its key, which the node needs once to write the new file's first pages and
/// forgets when the order is done; the same header as clients' requests.
pub const ENCRYPTION_KEY_HEADER: &str = "x-turso-encryption-key";

/// The header of a key rotation order that carries the database's new key (the current
/// one travels in [`ENCRYPTION_KEY_HEADER`]); never in a body.
pub const NEW_ENCRYPTION_KEY_HEADER: &str = "x-atoll-new-encryption-key";

/// `POST /v1/databases/{id}/encryption/rotate` of the node admin API: re-encrypt the
/// database under a new key (docs/ENCRYPTION.md, "Rotation"). The keys travel in headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RotateEncryptionKey {
    /// The cipher of the current key (the node's configuration may already name the new
    /// one, pushed before the order).
    pub from_cipher: String,
    /// The database's configuration once rotated: its `encryption` names the new cipher
    /// and the new key's verifier.
    pub config: DatabaseConfig,
}

/// What a key rotation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncryptionKeyRotated {
    /// Pages written again under the new key.
    pub pages: i64,
}

/// Live figures of a database on its node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseStats {
    pub storage_bytes: u64,
    /// Bytes its backups take in object storage; `None` where the node has no storage.
    #[serde(default)]
    pub backup_bytes: Option<u64>,
    /// Commits not yet in object storage, and the age of the oldest of them.
    #[serde(default)]
    pub replication_lag_commits: Option<u64>,
    #[serde(default)]
    pub replication_lag_ms: Option<u64>,
    /// Being rebuilt from object storage (its files were missing or damaged): not served
    /// until done.
    #[serde(default)]
    pub recovering: bool,
    /// The state on the node: an upload turns `awaiting_upload` into `active` there first.
    pub state: Option<DatabaseState>,
    /// The last committed frame of its log, as of this answer (`None` where the node has no
    /// object storage): what a replica must have applied to hold every acknowledged write.
    #[serde(default)]
    pub head_frame_no: Option<u64>,
}

/// `POST /v1/sizes` of the node admin API: the databases whose size is asked for. The
/// control plane's hourly sample of every database's size asks for many at once (one
/// request per database was 100,000 requests an hour on a full node).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizesRequest {
    pub ids: Vec<String>,
}

/// The answer to [`SizesRequest`]: each database's bytes on disk
/// ([`DatabaseStats::storage_bytes`]); a database the node does not hold is left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizes {
    pub storage_bytes: std::collections::BTreeMap<String, u64>,
}

/// Databases asked for in one [`SizesRequest`] at most.
pub const SIZES_PER_REQUEST: usize = 5_000;

/// `POST /v1/databases/{id}/restore` of the node admin API: the database goes back to its
/// state at `timestamp_ms`, written as a new transaction at the head of its log (so the
/// restore itself can be undone by restoring to a time before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreInPlace {
    pub timestamp_ms: i64,
}

/// What a restore in place did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreOutcome {
    /// The commit time of the last transaction of the state restored.
    pub restored_commit_ms: i64,
    /// The frame the restore was written at (the log's new head).
    pub frame_no: u64,
}

/// `GET /v1/databases/{id}/backups` of the node admin API: what object storage holds of a
/// database and how far behind it the node is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backups {
    pub storage_url: String,
    /// Generations, oldest first.
    pub generations: Vec<Generation>,
    /// The restorable window (ms since the epoch); `None` before the first snapshot.
    pub window_start_ms: Option<i64>,
    pub window_end_ms: Option<i64>,
    pub retention_days: u32,
    /// Bytes in object storage (snapshots and log).
    pub stored_bytes: u64,
    /// The last frame in object storage, and what is not there yet.
    pub durable_frame_no: u64,
    pub lag_commits: u64,
    pub lag_ms: u64,
    pub durability: Option<Durability>,
    /// The last shipping failure, if shipping fails now.
    pub last_error: Option<String>,
}

/// A snapshot in object storage and the log that follows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    /// The snapshot holds the database as of this frame.
    pub start_frame_no: u64,
    pub created_ms: i64,
    pub snapshot_bytes: u64,
}

/// `GET /v1/node` of the node admin API: who the node is and where clients reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeInfo {
    /// The node's name: the control plane records which node holds each database by it.
    pub name: String,
    pub location: String,

    /// Hostnames of its databases are `<db>-<org>.<hostname_suffix>`.
    pub hostname_suffix: String,
    /// Base URL of its database hosts (path-prefix form: `<http_url>/db/<db>-<org>/`).
    /// Nodes of one location may share it (a DNS name or load balancer in front of them):
    /// each forwards a request for a database it does not hold to the node that does.
    pub http_url: String,
    pub databases: usize,
    /// Its own database listener as other nodes reach it, when `http_url` is shared by
    /// the nodes of its location (empty: `http_url`).
    #[serde(default)]
    pub direct_url: String,
}

/// `POST /v1/internal/nodes/heartbeat` of the control plane: a node registers itself and
/// says it is alive (every [`HEARTBEAT_INTERVAL_SECS`]), authenticated with the node secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Heartbeat {
    #[serde(flatten)]
    pub info: NodeInfo,
    /// Where the control plane reaches its admin API.
    pub admin_url: String,
    /// How many databases it takes at most (0: no bound).
    #[serde(default)]
    pub capacity: u64,
}

/// The control plane's answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeartbeatAccepted {
    /// The metadata store the control plane serves: a node stamped with another refuses it.
    pub store_id: String,
    /// A write lease of this many milliseconds from when the heartbeat was sent, granted
    /// by control planes that fail lost nodes over (`--failover-after-secs`); absent: the
    /// node writes without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

/// How often a node sends its heartbeat.
pub const HEARTBEAT_INTERVAL_SECS: u64 = 5;

/// The write lease a heartbeat's answer grants: three heartbeats.
pub const WRITE_LEASE_MS: u64 = 15_000;

/// `GET /v1/internal/nodes/{name}/databases` of the control plane: the databases the
/// store places on the node. A node that regains its lease quarantines the copies it
/// serves of any other (they were failed over while it was cut off).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PlacedDatabases {
    pub ids: Vec<String>,
}

/// `POST /v1/internal/nodes/{name}/desired-state` of the control plane: the databases a
/// node holds, whose desired state it asks for before it serves them (when it starts, and
/// when it reconnects after its heartbeats failed; docs/ARCHITECTURE.md, "Nodes converge
/// before they serve").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeldDatabaseIds {
    pub ids: Vec<String>,
}

/// The control plane's answer to [`HeldDatabaseIds`]: what the store wants of each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesiredState {
    pub databases: Vec<DesiredDatabase>,
    /// Every replica the node is to hold (as `PUT /v1/replicas` sends them).
    #[serde(default)]
    pub replicas: Vec<ReplicaSpec>,
}

/// What the store wants of one database a node holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesiredDatabase {
    pub id: String,
    #[serde(flatten)]
    pub placement: DesiredPlacement,
}

/// Where the store places a database a node holds, and so what the node does with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "placement", rename_all = "snake_case")]
pub enum DesiredPlacement {
    /// Placed on this node: it installs this configuration (unless it has a newer one)
    /// and serves it.
    Here { config: Box<DatabaseConfig> },
    /// Placed on this node, its create still in progress: the creator configures it.
    Creating,
    /// Deleted for good while the node was away: the node removes it (its history stays
    /// in object storage, as a delete by the reconciler leaves it).
    Deleted,
    /// Placed on another node (failed over or moved while this one was away) or unknown
    /// to the store: quarantined, never served.
    Elsewhere {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
}

/// `GET /v1/internal/routes/{label}` of the control plane: where a node forwards a request
/// for a database it does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatabaseRoute {
    /// The node that holds it.
    pub node: String,
    /// That node's database listener, as other nodes reach it.
    pub url: String,
}

/// `POST /v1/databases/{id}/hand-over` of the node admin API: the database stops taking
/// writes, everything committed is stored, and the node says up to which frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedOver {
    /// The last frame of its log in object storage.
    pub frame_no: u64,
}

/// `POST /v1/databases/{id}/adopt`: the node rebuilds a database from object storage and
/// takes it over (a move's second step).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdoptDatabase {
    pub config: DatabaseConfig,
    /// The frame the previous holder handed over at: the rebuilt database must reach it.
    pub frame_no: u64,
    /// Whether a handed-over copy already on the node (an earlier attempt of the same
    /// move) is replaced. Without it any copy on the node is a conflict: a rebuild of a
    /// missing database must never replace one a move just put there.
    #[serde(default)]
    pub replace: bool,
}

/// `GET /v1/databases` of the node admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseIds {
    pub ids: Vec<String>,
    /// What the node holds of each database, for the reconciler to compare with the store.
    #[serde(default)]
    pub databases: Vec<HeldDatabase>,
}

/// A database as its node holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldDatabase {
    pub id: String,
    /// The version of the configuration the node has.
    pub config_version: u64,
    pub state: DatabaseState,
    /// Handed over (a move's first step, or adopted and not yet serving) since this
    /// instant (ms): it takes no requests until resumed or released.
    #[serde(default)]
    pub handed_over_at: Option<i64>,
}

/// The answer of a node admin order that has nothing to report: `{}` (create, configure,
/// delete, resume, release, a usage acknowledgement).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderDone {}

/// The answer (`202 Accepted`) of a long order (a create, a restore in place, a move's
/// hand-over or adopt, the listing of backups): the node runs it in the background as an
/// operation, which `GET /v1/operations/{id}` reports on until it is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationStarted {
    pub operation: String,
}

/// What a long order asks, for the operator reading `GET /v1/operations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// `POST /v1/databases`: a database created, empty or from its seed.
    Create,
    /// `POST /v1/databases/{id}/restore`.
    Restore,
    /// `GET /v1/databases/{id}/backups`.
    Backups,
    /// `POST /v1/databases/{id}/hand-over`.
    HandOver,
    /// `POST /v1/databases/{id}/adopt`.
    Adopt,
    /// `POST /v1/databases/{id}/encryption/rotate`.
    RotateEncryptionKey,
}

/// Where an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    Running,
    /// Finished: `result` is the order's answer.
    Done,
    /// Finished: `error` says why, with the status the order would have answered.
    Failed,
}

/// `GET /v1/operations/{id}` of the node admin API: a long order as it runs, and its
/// outcome for a while after (`atoll-data/src/admin/operations.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub id: String,
    pub kind: OperationKind,
    pub database_id: String,
    pub state: OperationState,
    /// What it is doing now (`queued`, `copying`, `restoring`, …; `done` or `failed` at
    /// the end).
    pub phase: String,
    /// How far it got, where the node can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<OperationProgress>,
    pub started_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    /// The order's answer once `done` (the body the order answered before it was an
    /// operation: `{}`, `RestoreOutcome`, `Backups`, `HandedOver`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<OperationError>,
}

/// How much of an operation's work is done, in `unit`s (`bytes`); `total` where known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationProgress {
    pub done: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    pub unit: String,
}

/// Why an operation failed: the status and message the order would have answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationError {
    pub status: u16,
    pub error: String,
}

/// `GET /v1/operations`: the node's running operations and those finished recently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operations {
    pub operations: Vec<Operation>,
}

/// The error body of the node admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeError {
    pub error: String,
}

/// Usage counted on a node for one database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseUsage {
    pub rows_read: u64,
    pub rows_written: u64,
    pub bytes_synced: u64,
}

/// `POST /v1/usage/collect` of the node admin API: usage since the last acknowledged
/// batch, by database id. The same batch comes back until `POST /v1/usage/{id}/ack`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageBatch {
    pub id: String,
    pub databases: Vec<(String, DatabaseUsage)>,
}

/// Rows a statement text read and wrote on a database, over all its runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryStats {
    pub query: String,
    pub rows_read: u64,
    pub rows_written: u64,
    pub count: u64,
}

/// The header every node admin request carries: the id of the control plane's metadata
/// store. A node is stamped with the first one it sees and refuses any other, so a control
/// plane on an empty or wrong store cannot manage another store's databases.
pub const STORE_ID_HEADER: &str = "x-atoll-store-id";

/// A database a node holds that its store did not know: moved aside, never deleted at
/// start-up, removed only by an explicit purge once its retention is over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedDatabase {
    pub id: String,
    /// From the database's last configuration on the node, when it had one.
    pub name: Option<String>,
    pub org_id: Option<String>,
    pub label: Option<String>,
    /// When it was moved aside, milliseconds since the epoch.
    pub quarantined_at: i64,
    /// Bytes of its files.
    pub bytes: u64,
    /// Whether its retention is over (a purge may remove it).
    pub purgeable: bool,
}

/// `GET /v1/quarantine` of the node admin API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    pub databases: Vec<QuarantinedDatabase>,
}

/// One replica a node is to hold: the database's configuration (the primary's) and
/// where its primary is (the database listener of the primary's node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaSpec {
    pub config: DatabaseConfig,
    pub primary_url: String,
}

/// `PUT /v1/replicas` on a node's admin API: every replica it is to hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicaSet {
    pub replicas: Vec<ReplicaSpec>,
}

/// How far one replica has applied its primary's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    pub id: String,
    pub primary_url: String,
    /// The last frame applied (its replication index).
    pub frame_no: u64,
    /// The primary's last committed frame, as last reported.
    pub primary_frame_no: u64,
    /// How long it has been behind that head (0: caught up).
    pub lag_ms: u64,
    /// When the primary last answered (ms since the epoch; 0: never).
    pub last_contact_ms: i64,
    /// It has a state to serve.
    pub ready: bool,
    pub state: String,
}

/// A node's replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatuses {
    pub replicas: Vec<ReplicaStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_with_nothing_to_report_answers_an_empty_object() {
        assert_eq!(serde_json::to_string(&OrderDone {}).unwrap(), "{}");
        assert_eq!(
            serde_json::from_str::<OrderDone>("{}").unwrap(),
            OrderDone {}
        );
    }
}
