//! Atoll's metadata store.
//!
//! [`Store`] is the one asynchronous API the control plane uses. Its operations (users,
//! organizations, members, invites, groups, tokens, databases, the audit log) are written once, in the SQL subset
//! that SQLite and PostgreSQL share, against the small synchronous [`Conn`] trait; each
//! backend ([`sqlite`], [`postgres`]) provides connections, transactions, its own
//! migrations and the mapping of its errors. Every operation runs on a blocking thread,
//! never on the async executor. The `conformance` suite runs the same checks on both
//! backends so they cannot drift apart; it and the `testing` helpers are compiled only with
//! the crate's `testing` feature (tests enable it), never into the server.

mod backend;
#[cfg(feature = "testing")]
pub mod conformance;
mod error;
mod model;
mod postgres;
pub mod secrets;
mod sqlite;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use backend::{Conn, Row, Value};
pub use error::{Entity, StoreError};
pub use model::*;
pub use secrets::{SealReport, SecretsKey, SecretsKeyring};
pub use store::{
    hour_bucket, BackendKind, DatabaseChanges, DatabaseFilter, DatabaseInsert, GroupChanges,
    InstanceUsageOf, NewGroup, NewUser, NodeHeartbeat, NodeRecord, Store, Tombstone, Usage,
    UsageEntry, CONTACT_TIMEOUT_MS, HEARTBEAT_TIMEOUT_MS,
};
pub use store::{AuditFilter, StorageSample, UsageHour, DEFAULT_POSTGRES_POOL_SIZE};

/// Milliseconds since the Unix epoch: the one time unit of the store.
pub fn now_millis() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}
