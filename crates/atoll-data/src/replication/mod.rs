//! Embedded replicas: libSQL clients that keep a local copy of a database and sync it from
//! Atoll (`docs/DATA-PLANE.md`, "Embedded replicas").
//!
//! Every frame a replica receives comes from the database's durable log in object storage
//! (`storage`): the generations (snapshots) and the segments of frames numbered globally.
//! Nothing is read from the node's WAL: a sync first waits (bounded) until every commit
//! made before it is stored, then serves the log, so a replica sees everything
//! acknowledged before its sync began and never a frame that a lost disk could take back.
//!
//! - [`log`]: reading frames and states out of the stored log, with small caches so that
//!   replicas pulling in batches do not download a segment once per batch.
//! - [`sync_http`]: the HTTP routes of synced databases (`/info`, `/export/{generation}`,
//!   `/sync/{generation}/{start}/{end}`), which the Rust `libsql` crate uses for
//!   `Builder::new_synced_database` and (by default) for `Builder::new_remote_replica`.
//! - [`push`]: offline writes the crate's synced databases push back (`POST /sync/…`),
//!   checked in a scratch copy and written into the WAL frame for frame.
//! - [`grpc`]: the older gRPC-web `wal_log.ReplicationLog` protocol (`new_remote_replica`
//!   without the crate's `sync` feature, or with `SyncProtocol::V1`).
//! - [`follow`]: replicas on nodes of the group's other locations, which follow the
//!   primary's WAL (not only the stored log: their lag is a round trip); [`frames`]: the
//!   primary's frame endpoint they follow; [`routing`]: which requests a replica serves
//!   from its copy and which go to the primary.

pub mod follow;
pub mod frames;
pub mod grpc;
pub mod log;
pub mod push;
pub mod routing;
pub mod sync_http;
