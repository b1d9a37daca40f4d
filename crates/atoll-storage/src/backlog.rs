//! The logs of a node that have work for its shipper: so that a round of the shipper visits
//! the databases that were written (or owe a snapshot, a history, a `sync` wait), not every
//! database the node holds. On a node with 100,000 databases of which a few hundred are
//! written at a time, visiting them all four times a second was CPU spent all the time for
//! nothing (issue 31).
//!
//! A log is marked when it gets work ([`crate::shipper::DatabaseLog`] does it: the first
//! commit after a round, a snapshot or history asked for, a `sync` wait); the shipper
//! takes the marks each round and marks again whatever it leaves with work (not due yet,
//! commits that arrived during a round: the round marks it when it ends). The invariant: a
//! log with work is marked, or in a round that marks it again when it ends with work left.

use std::collections::HashSet;
use std::sync::Mutex;

/// Which logs have work, and the wake-up of the loop that does it.
#[derive(Default)]
pub struct Backlog {
    marked: Mutex<HashSet<String>>,
    wake: tokio::sync::Notify,
}

impl Backlog {
    pub fn new() -> Backlog {
        Backlog::default()
    }

    /// Log `id` has work; the loop finds it at its next tick.
    pub fn mark(&self, id: &str) {
        let mut marked = self.marked.lock().unwrap_or_else(|p| p.into_inner());
        if !marked.contains(id) {
            marked.insert(id.to_string());
        }
    }

    /// Log `id` has work that should not wait for the next tick (a `sync` commit waits, a
    /// snapshot is owed).
    pub fn mark_and_wake(&self, id: &str) {
        self.mark(id);
        self.wake.notify_one();
    }

    /// Wakes the loop without marking a log (the node's own work: its index).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Resolves when the loop is woken.
    pub async fn woken(&self) {
        self.wake.notified().await
    }

    /// Every log marked since the last call; the caller marks again what it leaves undone.
    pub fn take(&self) -> HashSet<String> {
        std::mem::take(&mut *self.marked.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// How many logs are marked now.
    pub fn len(&self) -> usize {
        self.marked.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_hands_over_each_mark_once_and_marks_after_it_are_kept() {
        let backlog = Backlog::new();
        backlog.mark("a");
        backlog.mark("a");
        backlog.mark_and_wake("b");
        let taken = backlog.take();
        assert_eq!(taken.len(), 2);
        assert!(taken.contains("a") && taken.contains("b"));
        assert!(backlog.is_empty());
        backlog.mark("a");
        assert_eq!(backlog.take().into_iter().collect::<Vec<_>>(), ["a"]);
    }
}
