//! Nodes converge before they serve (docs/ARCHITECTURE.md, "Nodes converge before they
//! serve"). A node registered with a control plane (`--control-plane`) serves a database only
//! once it has confirmed the database's desired state with the control plane since it last
//! lost touch with it:
//!
//! - at start every database is unconfirmed;
//! - the node is out of touch once its last answered heartbeat was sent more than
//!   [`CONTACT_EXPIRY`] (25 s) ago (a pause, a partition, a control plane that is down):
//!   then no database is served, whatever its confirmation;
//! - the first heartbeat answered after that starts a new *epoch*: every database is
//!   unconfirmed until the registration loop has asked the control plane for the desired
//!   state of all of them (`POST /v1/internal/nodes/{name}/desired-state`) and applied it.
//!
//! Unconfirmed databases answer 503 with `Retry-After`, never their old configuration. A
//! node without a control plane (`atoll dev`, the static `--node` shape) serves as before:
//! nothing here is required of it.

use crate::error::DataError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A node whose last answered heartbeat was sent longer ago than this serves nothing: its
/// write lease (three heartbeats) ran out 10 s before, so writes were refused first with the
/// lease's own message; and the control plane fails a node's databases over only once a
/// lease and `LEASE_MARGIN_MS` (10 s) have passed since it received that heartbeat (after
/// the send), so the node stops serving before any other node may take them over.
pub const CONTACT_EXPIRY: Duration =
    Duration::from_millis(atoll_types::node::WRITE_LEASE_MS + 10_000);

/// The node's side of convergence: one per node, shared by its databases.
#[derive(Debug)]
pub struct Convergence {
    /// Whether the node has a control plane to confirm with.
    required: AtomicBool,
    /// Bumped every time the node regains touch: a database confirmed in an older epoch is
    /// unconfirmed.
    epoch: AtomicU64,
    /// When the last answered heartbeat was sent, in ms since [`origin`] plus one (0:
    /// never).
    contact_ms: AtomicU64,
}

impl Default for Convergence {
    fn default() -> Self {
        Convergence {
            required: AtomicBool::new(false),
            epoch: AtomicU64::new(1),
            contact_ms: AtomicU64::new(0),
        }
    }
}

/// The instant monotonic times of this process count from (a pause of the process does not
/// stop the monotonic clock, so a resumed node sees how long it was away).
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn monotonic_ms(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(origin()).as_millis()).unwrap_or(u64::MAX) + 1
}

impl Convergence {
    /// From now on databases are served only once confirmed (a node with a control plane).
    pub fn require(&self) {
        origin();
        self.required.store(true, Ordering::Release);
    }

    pub fn is_required(&self) -> bool {
        self.required.load(Ordering::Acquire)
    }

    /// The current epoch: what [`Convergence::confirmed`] databases hold.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether the node is in touch with a control plane at `now`.
    fn in_touch(&self, now: Instant) -> bool {
        let contact = self.contact_ms.load(Ordering::Acquire);
        contact != 0
            && monotonic_ms(now).saturating_sub(contact) <= CONTACT_EXPIRY.as_millis() as u64
    }

    /// Whether the node is in touch with a control plane now.
    pub fn is_in_touch(&self) -> bool {
        self.in_touch(Instant::now())
    }

    /// A heartbeat sent at `sent_at` was answered. Answers the epoch the databases must be
    /// confirmed in, and whether that is a new one (the node was out of touch, or never in
    /// touch: everything it holds must be confirmed again before it is served).
    pub fn heartbeat_answered(&self, sent_at: Instant) -> (u64, bool) {
        // The epoch first, then the contact: a request that sees the node in touch again
        // sees the new epoch too (and so the database unconfirmed).
        let lost = !self.in_touch(sent_at);
        if lost {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        self.contact_ms
            .fetch_max(monotonic_ms(sent_at), Ordering::AcqRel);
        (self.epoch(), lost)
    }

    /// A control plane answered the heartbeat sent at `sent_at` that its metadata store is
    /// unavailable. No change can be made while it is (every change is a store write), so a
    /// node still in touch stays in touch: its databases are served on (writes stop with its
    /// lease, when it needs one). A node already out of touch is not helped: it may have
    /// missed changes made before the store went down, and cannot ask for them.
    pub fn store_down_answered(&self, sent_at: Instant) {
        if self.in_touch(sent_at) {
            self.contact_ms
                .fetch_max(monotonic_ms(sent_at), Ordering::AcqRel);
        }
    }

    /// Whether a database confirmed in epoch `confirmed` may be served now; the 503 to
    /// answer if not.
    pub fn check(&self, confirmed: u64, name: &str) -> Result<(), DataError> {
        self.check_at(confirmed, name, Instant::now())
    }

    fn check_at(&self, confirmed: u64, name: &str, now: Instant) -> Result<(), DataError> {
        if !self.is_required() {
            return Ok(());
        }
        // In touch first, then the epoch (see `heartbeat_answered`).
        if !self.in_touch(now) {
            let why = if self.contact_ms.load(Ordering::Acquire) == 0 {
                "this node has not reached its control plane since it started"
            } else {
                "this node has lost touch with its control plane"
            };
            return Err(DataError::Recovering(
                format!("database {name} is not served: {why}, so it cannot confirm the database's configuration; try again shortly"),
                5,
            ));
        }
        if confirmed != self.epoch() {
            return Err(DataError::Recovering(
                format!("database {name} is not served yet: this node is confirming its configuration with the control plane; try again shortly"),
                1,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_without_a_control_plane_serves_everything() {
        let c = Convergence::default();
        assert!(c.check(0, "db").is_ok());
    }

    #[test]
    fn nothing_is_served_before_the_first_heartbeat_and_its_confirmation() {
        let c = Convergence::default();
        c.require();
        assert!(matches!(c.check(0, "db"), Err(DataError::Recovering(_, 5))));
        let (epoch, new) = c.heartbeat_answered(Instant::now());
        assert!(new);
        assert!(matches!(c.check(0, "db"), Err(DataError::Recovering(_, 1))));
        assert!(c.check(epoch, "db").is_ok());
        // In touch all along: the same epoch.
        assert_eq!(c.heartbeat_answered(Instant::now()), (epoch, false));
        assert!(c.check(epoch, "db").is_ok());
    }

    #[test]
    fn a_store_down_answer_keeps_a_node_in_touch_but_never_brings_one_back() {
        let c = Convergence::default();
        c.require();
        let start = Instant::now();
        let (epoch, _) = c.heartbeat_answered(start);
        let later = start + CONTACT_EXPIRY - Duration::from_secs(1);
        c.store_down_answered(later);
        let past_first_expiry = start + CONTACT_EXPIRY + Duration::from_secs(5);
        assert!(c.check_at(epoch, "db", past_first_expiry).is_ok());
        // Out of touch first: a store-down answer does not bring it back.
        let away = later + CONTACT_EXPIRY + Duration::from_secs(1);
        c.store_down_answered(away);
        assert!(c.check_at(epoch, "db", away).is_err());
        assert_eq!(c.epoch(), epoch);
    }

    #[test]
    fn a_node_out_of_touch_serves_nothing_and_confirms_again() {
        let c = Convergence::default();
        c.require();
        let start = Instant::now();
        let (epoch, _) = c.heartbeat_answered(start);
        let later = start + CONTACT_EXPIRY - Duration::from_secs(1);
        assert!(c.check_at(epoch, "db", later).is_ok());
        // Paused, or cut off, past the expiry: nothing is served.
        let away = start + CONTACT_EXPIRY + Duration::from_secs(1);
        assert!(matches!(
            c.check_at(epoch, "db", away),
            Err(DataError::Recovering(_, 5))
        ));
        // Back: a new epoch, in which the database is not confirmed yet.
        let (next, new) = c.heartbeat_answered(away);
        assert!(new);
        assert!(matches!(
            c.check_at(epoch, "db", away),
            Err(DataError::Recovering(_, 1))
        ));
        assert!(c.check_at(next, "db", away).is_ok());
    }
}
