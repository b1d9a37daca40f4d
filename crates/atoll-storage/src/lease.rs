//! A node's lease on writing (docs/STORAGE.md, "Failover").
//!
//! A control plane that fails databases over from lost nodes (`atoll serve
//! --failover-after-secs`) grants every registered node a lease with each heartbeat it
//! answers. A node whose lease ran out may have been declared lost, and its databases
//! taken over elsewhere from object storage: from then on it commits nothing (the commit
//! hook turns every commit into a rollback) and stores nothing (no segment, snapshot or
//! index entry, so the log has one writer). It serves reads meanwhile. The lease runs from
//! the moment the heartbeat was *sent*, so it always ends before the control plane's record
//! of it (the time it got the heartbeat, plus the lease) does; a control plane takes a
//! lost node's databases over only a margin after that.
//!
//! Once a node was granted a lease, it needs one: the marker file in its data directory
//! keeps the requirement across restarts, so a node restarted while cut off (or an old
//! disk put back) starts fenced until a control plane answers it and the databases the
//! store placed elsewhere meanwhile are quarantined (`registration`). A heartbeat answered
//! without a lease (failover turned off) lifts the requirement.

use crate::error::StorageError;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The file in a node's data directory that says the node writes only under a lease.
pub const LEASE_MARKER: &str = "write-lease";

/// A store write starts only with at least this much of the lease left, and is abandoned
/// when the lease ends: a put never lands long after the node lost its lease.
const LEAST_LEFT_TO_STORE: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct Lease {
    /// The marker file; `None` for nodes without a data directory of their own (tests).
    marker: Option<PathBuf>,
    state: Mutex<LeaseState>,
}

#[derive(Debug, Default)]
struct LeaseState {
    /// Writes need a lease (the marker exists).
    required: bool,
    /// Until when the last lease granted runs; `None`: none since the process started.
    until: Option<Instant>,
}

impl Lease {
    /// A node that never needs a lease (no failover manages it).
    pub fn unrequired() -> Lease {
        Lease {
            marker: None,
            state: Mutex::default(),
        }
    }

    /// The lease of the node whose data directory is `data_dir`: required when the marker
    /// is there, and then not held until a control plane grants one.
    pub fn load(data_dir: &Path) -> Lease {
        let marker = data_dir.join(LEASE_MARKER);
        let required = marker.exists();
        if required {
            tracing::warn!("this node writes under a lease: it commits nothing until a control plane answers its heartbeat");
        }
        Lease {
            marker: Some(marker),
            state: Mutex::new(LeaseState {
                required,
                until: None,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How much of the lease is left: `None` when writing needs none, zero when it ran out.
    pub fn remaining(&self) -> Option<Duration> {
        let state = self.state();
        if !state.required {
            return None;
        }
        Some(state.until.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        }))
    }

    /// Whether the node may commit now.
    pub fn holds(&self) -> bool {
        self.remaining() != Some(Duration::ZERO)
    }

    /// Whether the node writes only under a lease.
    pub fn is_required(&self) -> bool {
        self.state().required
    }

    /// A lease of `length` granted by the answer to a heartbeat sent at `sent_at`. The
    /// marker is written (and synced) before the lease counts, so a restart keeps it.
    pub fn grant(&self, sent_at: Instant, length: Duration) -> Result<(), StorageError> {
        if !self.is_required() {
            if let Some(marker) = &self.marker {
                std::fs::write(marker, b"writes need a lease from the control plane\n")?;
                std::fs::File::open(marker)?.sync_all()?;
                if let Some(dir) = marker.parent() {
                    crate::sync_dir(dir)?;
                }
            }
        }
        let mut state = self.state();
        state.required = true;
        let until = sent_at + length;
        state.until = Some(state.until.map_or(until, |was| was.max(until)));
        Ok(())
    }

    /// A heartbeat was answered without a lease: this control plane does not fail nodes
    /// over, so writing needs none.
    pub fn waive(&self) -> Result<(), StorageError> {
        if !self.is_required() {
            return Ok(());
        }
        if let Some(marker) = &self.marker {
            match std::fs::remove_file(marker) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mut state = self.state();
        state.required = false;
        state.until = None;
        tracing::info!(
            "the control plane grants no write lease (failover is off): writes need none"
        );
        Ok(())
    }

    /// Runs a write to object storage within the lease: refused when less than a second
    /// of it is left, abandoned the moment it ends (a renewal meanwhile extends it: a large
    /// snapshot outlives many heartbeats).
    pub async fn store<T>(
        &self,
        what: &str,
        write: impl std::future::Future<Output = Result<T, StorageError>>,
    ) -> Result<T, StorageError> {
        match self.remaining() {
            None => return write.await,
            Some(left) if left < LEAST_LEFT_TO_STORE => return Err(lapsed(what)),
            Some(_) => {}
        }
        let lapses = async {
            loop {
                match self.remaining() {
                    Some(left) if left.is_zero() => return,
                    Some(left) => tokio::time::sleep(left).await,
                    None => tokio::time::sleep(LEAST_LEFT_TO_STORE).await,
                }
            }
        };
        tokio::select! {
            written = write => written,
            () = lapses => Err(lapsed(what)),
        }
    }
}

fn lapsed(what: &str) -> StorageError {
    StorageError::ObjectStorage(format!(
        "cannot store {what}: this node's write lease ran out (no control plane answered its heartbeats), so another node may hold its databases now"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_needed_once_granted_and_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Lease::load(dir.path());
        assert!(lease.holds(), "a node never granted a lease needs none");
        lease
            .grant(Instant::now(), Duration::from_secs(60))
            .unwrap();
        assert!(lease.holds());
        lease
            .grant(
                Instant::now() - Duration::from_secs(120),
                Duration::from_secs(60),
            )
            .unwrap();
        assert!(lease.holds(), "an older grant never shortens the lease");

        let restarted = Lease::load(dir.path());
        assert!(restarted.is_required());
        assert!(
            !restarted.holds(),
            "a restarted node waits for a heartbeat's answer"
        );
        restarted
            .grant(
                Instant::now() - Duration::from_secs(120),
                Duration::from_secs(60),
            )
            .unwrap();
        assert!(!restarted.holds(), "a lease that ended is not held");

        restarted.waive().unwrap();
        assert!(restarted.holds());
        assert!(!Lease::load(dir.path()).is_required());
    }

    #[tokio::test]
    async fn nothing_is_stored_without_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Lease::load(dir.path());
        lease
            .grant(
                Instant::now() - Duration::from_secs(10),
                Duration::from_secs(5),
            )
            .unwrap();
        let stored = lease.store("a segment", async { Ok(()) }).await;
        assert!(
            matches!(stored, Err(StorageError::ObjectStorage(_))),
            "{stored:?}"
        );

        lease
            .grant(Instant::now(), Duration::from_secs(30))
            .unwrap();
        assert!(lease.store("a segment", async { Ok(()) }).await.is_ok());
    }
}
