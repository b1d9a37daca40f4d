//! Hrana-over-HTTP streams and their batons.
//!
//! A stream is a connection kept between HTTP requests. The client names it with a
//! baton: 16 bytes (stream id, sequence number; both big-endian u64) followed by their
//! HMAC-SHA256 under a key drawn at startup, base64 without padding. Batons are thus
//! unforgeable and die with the process. Each request bumps the sequence number, so a
//! baton works exactly once: replaying one is refused. The baton a busy stream will answer
//! to next (a cursor's head gives it out before the cursor ends) waits for the stream, at
//! most [`BUSY_WAIT`]: a client may act on a cursor's rows before the server has finished
//! it. A stream idle for [`IDLE_TIMEOUT`] expires (its connection goes back to the
//! pool, rolling back any open transaction); its id is remembered for
//! [`EXPIRED_MEMORY`] so late batons get a clear `STREAM_EXPIRED` rather than "invalid".
//! When the node's streams are all taken, a tenant holding less than its fair share may
//! have another tenant's longest-idle stream expired early for it
//! ([`acquire_stream_permit`]).

use super::exec::ClientConnection;
use super::open_limit::{LimitReached, Permit};
use super::sql_store::{SqlStore, MAX_HTTP_STORED_SQL};
use super::HranaError;
use crate::database::Database;
use crate::DataPlaneState;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a stream may sit unused between requests (what sqld and its clients expect).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an expired stream's baton is still recognised.
pub const EXPIRED_MEMORY: Duration = Duration::from_secs(300);
/// How long a request carrying a busy stream's next baton waits for the request before it
/// to hand the stream back (on its SQL thread; one such request per stream).
pub const BUSY_WAIT: Duration = Duration::from_secs(5);
/// Idle streams one new stream may expire early before it gives up (others may take the
/// places it frees).
const MAX_RECLAIMS: usize = 3;

/// Open Hrana streams of this node, by baton.
pub struct StreamRegistry {
    baton_key: [u8; 32],
    idle_timeout: Duration,
    busy_wait: Duration,
    streams: Mutex<HashMap<u64, Slot>>,
    /// Signalled whenever a stream stops being in use.
    handed_back: Condvar,
    sweeper_started: AtomicBool,
}

/// What a stream carries between requests.
pub(crate) struct HttpStream {
    id: u64,
    /// The sequence number the next baton must carry.
    baton_seq: u64,
    /// The database the stream is bound to: its baton is worthless elsewhere.
    db_id: String,
    /// `None` once a `close` request ran.
    pub(crate) conn: Option<ClientConnection>,
    pub(crate) sqls: SqlStore,
    /// Its place among the open streams, freed with the stream (closed, expired, failed).
    permit: Permit,
}

impl HttpStream {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn db_id(&self) -> &str {
        &self.db_id
    }
}

enum Slot {
    Idle {
        stream: Box<HttpStream>,
        expires_at: Instant,
    },
    /// Taken by a request in progress; `next_seq` is the sequence number of the baton it
    /// will answer to next, `awaited` whether a request with that baton is waiting.
    InUse {
        next_seq: u64,
        awaited: bool,
    },
    Expired {
        forget_at: Instant,
    },
}

impl StreamRegistry {
    pub fn new() -> StreamRegistry {
        StreamRegistry::with_idle_timeout(IDLE_TIMEOUT)
    }

    pub fn with_idle_timeout(idle_timeout: Duration) -> StreamRegistry {
        StreamRegistry::with_timeouts(idle_timeout, BUSY_WAIT)
    }

    fn with_timeouts(idle_timeout: Duration, busy_wait: Duration) -> StreamRegistry {
        StreamRegistry {
            baton_key: rand::random(),
            idle_timeout,
            busy_wait,
            streams: Mutex::new(HashMap::new()),
            handed_back: Condvar::new(),
            sweeper_started: AtomicBool::new(false),
        }
    }

    /// Number of streams that hold a connection (idle or in use).
    pub fn open_count(&self) -> usize {
        self.lock()
            .values()
            .filter(|slot| !matches!(slot, Slot::Expired { .. }))
            .count()
    }

    /// Registers a new stream around `conn`, taken by the caller's request.
    pub(crate) fn create(
        &self,
        db_id: &str,
        conn: ClientConnection,
        permit: Permit,
    ) -> Box<HttpStream> {
        let mut streams = self.lock();
        let id = loop {
            let id = rand::random();
            if !streams.contains_key(&id) {
                break id;
            }
        };
        // A random start makes an old baton of a reused id worthless too.
        let baton_seq = rand::random();
        streams.insert(
            id,
            Slot::InUse {
                next_seq: baton_seq,
                awaited: false,
            },
        );
        Box::new(HttpStream {
            id,
            baton_seq,
            db_id: db_id.to_string(),
            conn: Some(conn),
            sqls: SqlStore::new(MAX_HTTP_STORED_SQL),
            permit,
        })
    }

    /// Takes the stream a baton names, for one request on database `db_id`. When the
    /// stream is still busy with the request that gave this baton out (a cursor the
    /// client acted on before its end), waits for it, at most the busy wait: blocks, so
    /// call it on an SQL thread.
    pub(crate) fn acquire(&self, baton: &str, db_id: &str) -> Result<Box<HttpStream>, HranaError> {
        let invalid = || HranaError::Protocol("Received an invalid baton".into());
        let (id, seq) = self.decode_baton(baton).ok_or_else(invalid)?;
        let deadline = Instant::now() + self.busy_wait;
        let mut streams = self.lock();
        loop {
            let slot = streams.get_mut(&id).ok_or_else(invalid)?;
            match slot {
                Slot::InUse { next_seq, awaited } if *next_seq == seq && !*awaited => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(HranaError::Protocol(
                            "Received a baton whose stream is still busy with the request before it"
                                .into(),
                        ));
                    }
                    *awaited = true;
                    streams = self
                        .handed_back
                        .wait_timeout(streams, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    if let Some(Slot::InUse { awaited, .. }) = streams.get_mut(&id) {
                        *awaited = false;
                    }
                    continue;
                }
                Slot::InUse { .. } => return Err(reused_baton()),
                Slot::Expired { .. } => return Err(HranaError::StreamExpired),
                Slot::Idle { stream, .. } if stream.db_id != db_id => return Err(invalid()),
                Slot::Idle { stream, .. } if stream.baton_seq != seq => return Err(reused_baton()),
                Slot::Idle { .. } => {}
            }
            let next_seq = seq.wrapping_add(1);
            let taken = Slot::InUse {
                next_seq,
                awaited: false,
            };
            let Slot::Idle { mut stream, .. } = std::mem::replace(slot, taken) else {
                unreachable!("the slot was just seen idle");
            };
            stream.baton_seq = next_seq;
            return Ok(stream);
        }
    }

    /// The baton the stream answers to next (after this request).
    pub(crate) fn baton(&self, stream: &HttpStream) -> String {
        let mut payload = [0u8; 16];
        payload[..8].copy_from_slice(&stream.id.to_be_bytes());
        payload[8..].copy_from_slice(&stream.baton_seq.to_be_bytes());
        let mut baton = payload.to_vec();
        baton.extend_from_slice(&self.mac(&payload).finalize().into_bytes());
        STANDARD_NO_PAD.encode(baton)
    }

    /// Ends a request on a stream: keeps it for the next request and answers its baton,
    /// or, when it was closed, forgets it and answers `None`.
    pub(crate) fn release(&self, stream: Box<HttpStream>) -> Option<String> {
        let mut streams = self.lock();
        self.handed_back.notify_all();
        if stream.conn.is_none() {
            streams.remove(&stream.id);
            return None;
        }
        let baton = self.baton(&stream);
        streams.insert(
            stream.id,
            Slot::Idle {
                expires_at: Instant::now() + self.idle_timeout,
                stream,
            },
        );
        Some(baton)
    }

    /// Forgets a stream whose request failed (its connection was disposed of with it).
    pub(crate) fn remove(&self, id: u64) {
        self.lock().remove(&id);
        self.handed_back.notify_all();
    }

    /// Expires idle streams past their time and forgets old expired ones; answers the
    /// connections to return to the pool, with their database ids.
    pub(crate) fn sweep(&self, now: Instant) -> Vec<(String, ClientConnection)> {
        let mut released = Vec::new();
        let mut streams = self.lock();
        streams.retain(|_, slot| match slot {
            Slot::Idle { expires_at, .. } if *expires_at <= now => {
                let expired = std::mem::replace(
                    slot,
                    Slot::Expired {
                        forget_at: now + EXPIRED_MEMORY,
                    },
                );
                // The stream (and with it its place among the open streams) ends here;
                // only its connection lives on, on its way back to the pool.
                if let Slot::Idle { mut stream, .. } = expired {
                    if let Some(conn) = stream.conn.take() {
                        released.push((std::mem::take(&mut stream.db_id), conn));
                    }
                }
                true
            }
            Slot::Expired { forget_at } => *forget_at > now,
            _ => true,
        });
        released
    }

    /// Expires, before its time, the idle stream of organization `org_id` that has been
    /// idle longest (fair shares: [`acquire_stream_permit`]); answers its connection to
    /// return to the pool, with its database id. Its client's next baton gets
    /// `STREAM_EXPIRED`, as after an idle timeout.
    pub(crate) fn expire_idle_of(&self, org_id: &str) -> Option<(String, ClientConnection)> {
        let mut streams = self.lock();
        let (_, id) = streams
            .iter()
            .filter_map(|(id, slot)| match slot {
                Slot::Idle { stream, expires_at } if stream.permit.org_id() == org_id => {
                    Some((*expires_at, *id))
                }
                _ => None,
            })
            .min()?;
        let expired = Slot::Expired {
            forget_at: Instant::now() + EXPIRED_MEMORY,
        };
        let Some(Slot::Idle { mut stream, .. }) = streams.insert(id, expired) else {
            unreachable!("the slot was just seen idle");
        };
        // The stream, and its place, end here; its connection goes back to the pool.
        let conn = stream.conn.take()?;
        Some((std::mem::take(&mut stream.db_id), conn))
    }

    /// Rolls back the transactions of idle streams that hold a database's write lock
    /// while another writer waits, for longer than `timeout` (`write_lock`). Their next
    /// request is told `TRANSACTION_TIMEOUT`.
    pub(crate) fn yield_write_locks(&self, node: &crate::node::Node, timeout: Duration) {
        let streams = self.lock();
        for slot in streams.values() {
            let Slot::Idle { stream, .. } = slot else {
                continue;
            };
            let (Some(conn), Some(db)) = (&stream.conn, node.by_id(&stream.db_id)) else {
                continue;
            };
            conn.yield_write_lock_if_due(&db, timeout);
        }
    }

    /// Whether the caller is the one to start the background sweep (once per registry).
    pub(crate) fn claim_sweeper(&self) -> bool {
        !self.sweeper_started.swap(true, Ordering::SeqCst)
    }

    fn decode_baton(&self, baton: &str) -> Option<(u64, u64)> {
        let bytes = STANDARD_NO_PAD.decode(baton).ok()?;
        if bytes.len() != 48 {
            return None;
        }
        let (payload, tag) = bytes.split_at(16);
        self.mac(payload).verify_slice(tag).ok()?;
        let id = u64::from_be_bytes(payload[..8].try_into().ok()?);
        let seq = u64::from_be_bytes(payload[8..].try_into().ok()?);
        Some((id, seq))
    }

    fn mac(&self, payload: &[u8]) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.baton_key).expect("HMAC takes keys of any size");
        mac.update(payload);
        mac
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Slot>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Default for StreamRegistry {
    fn default() -> Self {
        Self::new()
    }
}

/// A place for a new stream of `db`, over HTTP or WebSocket. When the node is full and
/// the database's organization holds less than its fair share, the longest-idle HTTP
/// stream of the organization holding the most is expired early to make room (its
/// connection is handed back on an SQL thread, charged to that organization). Never
/// blocks.
pub(crate) fn acquire_stream_permit(
    state: &DataPlaneState,
    db: &Database,
) -> Result<Permit, LimitReached> {
    let config = db.config();
    let mut reclaimed = 0;
    loop {
        let refused = match state.open_streams.acquire(db.id(), &config.org_id) {
            Ok(permit) => return Ok(permit),
            Err(refused) => refused,
        };
        let Some(over_share) = refused.reclaim_from.as_deref() else {
            return Err(refused);
        };
        if reclaimed == MAX_RECLAIMS {
            return Err(refused);
        }
        let Some((expired_db, conn)) = state.streams.expire_idle_of(over_share) else {
            return Err(refused);
        };
        reclaimed += 1;
        tracing::debug!(
            org = over_share,
            for_org = config.org_id,
            "expired an idle stream early: the node is full and its organization holds more than a fair share"
        );
        let node = Arc::clone(&state.node);
        state
            .node
            .sql()
            .spawn_for(over_share, move || conn.give_back(&node, &expired_db));
    }
}

fn reused_baton() -> HranaError {
    HranaError::Protocol("Received a baton that has already been used".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection() -> ClientConnection {
        let shutdown = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sandboxed = crate::sandbox::open(
            std::path::Path::new(":memory:"),
            crate::sandbox::IfMissing::Create,
            crate::sandbox::Mode::ReadWrite,
            &crate::sandbox::SandboxSettings::default(),
            &shutdown,
            None,
            |_| Ok(()),
        )
        .unwrap();
        ClientConnection::new(sandboxed)
    }

    fn permit() -> Permit {
        super::super::OpenLimit::new("streams", 100, 100, 100)
            .acquire("db1", "org1")
            .unwrap()
    }

    fn registry(idle: Duration) -> StreamRegistry {
        StreamRegistry::with_timeouts(idle, Duration::from_millis(50))
    }

    fn protocol_message(result: Result<Box<HttpStream>, HranaError>) -> String {
        match result {
            Err(HranaError::Protocol(message)) => message,
            Err(other) => panic!("expected a protocol error, got {other:?}"),
            Ok(_) => panic!("expected a protocol error, got a stream"),
        }
    }

    #[test]
    fn batons_work_once_and_only_on_their_database() {
        let streams = registry(IDLE_TIMEOUT);
        let stream = streams.create("db1", connection(), permit());
        let first = streams.release(stream).unwrap();
        let stream = streams.acquire(&first, "db1").unwrap();
        // The stream is busy: its next baton waits for it, then gives up.
        let busy_baton = streams.baton(&stream);
        assert_eq!(
            protocol_message(streams.acquire(&busy_baton, "db1")),
            "Received a baton whose stream is still busy with the request before it"
        );
        assert_eq!(
            protocol_message(streams.acquire(&first, "db1")),
            "Received a baton that has already been used"
        );
        let second = streams.release(stream).unwrap();
        assert_ne!(first, second);
        assert_eq!(
            protocol_message(streams.acquire(&first, "db1")),
            "Received a baton that has already been used"
        );
        assert_eq!(
            protocol_message(streams.acquire(&second, "db2")),
            "Received an invalid baton"
        );
        // A refused attempt leaves the stream usable.
        let stream = streams.acquire(&second, "db1").unwrap();
        let mut tampered = STANDARD_NO_PAD.decode(streams.baton(&stream)).unwrap();
        tampered[15] ^= 1;
        assert_eq!(
            protocol_message(streams.acquire(&STANDARD_NO_PAD.encode(tampered), "db1")),
            "Received an invalid baton"
        );
        assert_eq!(
            protocol_message(streams.acquire("not a baton", "db1")),
            "Received an invalid baton"
        );
        // Batons of another process (another key) mean nothing here.
        let other = registry(IDLE_TIMEOUT);
        let foreign = other.release(other.create("db1", connection(), permit()));
        assert_eq!(
            protocol_message(streams.acquire(&foreign.unwrap(), "db1")),
            "Received an invalid baton"
        );
        assert_eq!(streams.open_count(), 1);
    }

    /// A cursor gives its baton out before it ends; a client that acts on its rows at once
    /// sends the next request while the stream is still busy (CI saw the official Rust
    /// client do it): that request waits for the stream instead of being refused.
    #[test]
    fn the_next_baton_of_a_busy_stream_waits_for_it() {
        let streams = std::sync::Arc::new(StreamRegistry::with_timeouts(
            IDLE_TIMEOUT,
            Duration::from_secs(10),
        ));
        let stream = streams.create("db1", connection(), permit());
        let next = streams.baton(&stream);
        let waiter = {
            let (streams, next) = (std::sync::Arc::clone(&streams), next.clone());
            std::thread::spawn(move || streams.acquire(&next, "db1").map(|s| s.id()))
        };
        // Once the waiter is parked on the stream, a second request with the same baton is
        // refused (only one of them could have it).
        let started = Instant::now();
        while !matches!(
            streams.lock().get(&stream.id()),
            Some(Slot::InUse { awaited: true, .. })
        ) {
            assert!(started.elapsed() < Duration::from_secs(5), "no waiter");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            protocol_message(streams.acquire(&next, "db1")),
            "Received a baton that has already been used"
        );
        let id = stream.id();
        streams.release(stream).unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), id);
    }

    #[test]
    fn closed_streams_are_forgotten() {
        let streams = registry(IDLE_TIMEOUT);
        let mut stream = streams.create("db1", connection(), permit());
        stream.conn = None;
        assert_eq!(streams.release(stream), None);
        assert_eq!(streams.open_count(), 0);
    }

    #[test]
    fn idle_streams_expire_and_are_remembered_for_a_while() {
        let streams = registry(Duration::from_millis(50));
        let baton = streams
            .release(streams.create("db1", connection(), permit()))
            .unwrap();
        let busy = streams.create("db1", connection(), permit());
        assert!(streams.sweep(Instant::now()).is_empty());
        let later = Instant::now() + Duration::from_millis(60);
        let released = streams.sweep(later);
        assert_eq!(released.len(), 1, "only the idle stream expires");
        assert_eq!(released[0].0, "db1");
        assert!(matches!(
            streams.acquire(&baton, "db1"),
            Err(HranaError::StreamExpired)
        ));
        assert!(streams.sweep(later + EXPIRED_MEMORY).is_empty());
        assert_eq!(
            protocol_message(streams.acquire(&baton, "db1")),
            "Received an invalid baton"
        );
        streams.remove(busy.id());
        assert_eq!(streams.open_count(), 0);
    }

    /// Fair shares: an organization's longest-idle stream can be expired before its time;
    /// its client is told the stream expired, and its place is free at once. Streams in use
    /// and other organizations' streams are left alone.
    #[test]
    fn an_organizations_longest_idle_stream_can_be_expired_early() {
        let limit = super::super::OpenLimit::new("streams", 10, 10, 10);
        let streams = registry(IDLE_TIMEOUT);
        let open =
            |db: &str, org: &str| streams.create(db, connection(), limit.acquire(db, org).unwrap());
        let older = streams.release(open("a1", "org-a")).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let newer = streams.release(open("a2", "org-a")).unwrap();
        let other = streams.release(open("b1", "org-b")).unwrap();
        let busy = open("a3", "org-a");
        let (db, _conn) = streams.expire_idle_of("org-a").unwrap();
        assert_eq!(db, "a1");
        assert_eq!(limit.open_for("org-a"), 2);
        assert!(matches!(
            streams.acquire(&older, "a1"),
            Err(HranaError::StreamExpired)
        ));
        let (db, _conn) = streams.expire_idle_of("org-a").unwrap();
        assert_eq!(db, "a2");
        assert!(matches!(
            streams.acquire(&newer, "a2"),
            Err(HranaError::StreamExpired)
        ));
        assert!(
            streams.expire_idle_of("org-a").is_none(),
            "only a stream in use is left"
        );
        assert_eq!(limit.open_for("org-a"), 1);
        assert_eq!(limit.open_for("org-b"), 1);
        assert!(streams.acquire(&other, "b1").is_ok());
        streams.remove(busy.id());
    }

    #[test]
    fn expired_and_closed_streams_give_their_place_back() {
        let limit = super::super::OpenLimit::new("streams", 2, 2, 2);
        let streams = registry(Duration::from_millis(50));
        let permit = || limit.acquire("db1", "org1").unwrap();
        let idle = streams.release(streams.create("db1", connection(), permit()));
        let mut closing = streams.create("db1", connection(), permit());
        assert!(
            limit.acquire("db1", "org1").is_err(),
            "two streams are open"
        );
        closing.conn = None;
        assert_eq!(streams.release(closing), None);
        assert_eq!(limit.open_on("db1"), 1);
        let released = streams.sweep(Instant::now() + Duration::from_millis(60));
        assert_eq!(released.len(), 1);
        assert_eq!(
            limit.open_on("db1"),
            0,
            "the expired stream is no longer counted"
        );
        assert!(matches!(
            streams.acquire(&idle.unwrap(), "db1"),
            Err(HranaError::StreamExpired)
        ));
    }
}
