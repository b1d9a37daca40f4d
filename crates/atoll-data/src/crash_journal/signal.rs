//! The crash journal's signal handler: when a thread dies of a fatal signal, the slot of the
//! statement it was running is marked as the culprit, with one store into the journal's
//! mapping (async-signal-safe), and the signal then takes its default course
//! (`SA_RESETHAND`: the process ends exactly as it would have, core dump included). This
//! module, `mapped`, `memory` and `atoll_storage::wal_insert` hold the workspace's only `unsafe`.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::Once;

thread_local! {
    /// The address of the state byte of the slot of the statement this thread runs (`0`:
    /// none). A constant initialiser with no destructor: reading it in a signal handler
    /// allocates nothing and takes no lock.
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// What this thread ran before a statement entered the journal, restored when it leaves.
pub(super) struct Current {
    previous: Option<usize>,
}

impl Current {
    pub(super) fn none() -> Current {
        Current { previous: None }
    }

    pub(super) fn enter(address: usize) -> Current {
        let previous = CURRENT.with(|current| current.replace(address));
        Current {
            previous: Some(previous),
        }
    }

    pub(super) fn leave(&mut self) {
        if let Some(previous) = self.previous.take() {
            CURRENT.with(|current| current.set(previous));
        }
    }
}

/// Signals that mean the process is dying of its own fault (glibc's heap checks abort).
const FATAL: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGABRT,
    libc::SIGILL,
    libc::SIGFPE,
];

extern "C" fn mark_culprit(_signal: libc::c_int) {
    let address = CURRENT.with(Cell::get);
    if address != 0 {
        super::mapped::mark(address, super::CULPRIT);
    }
    // Returning with SA_RESETHAND set: the signal's default action ends the process (a
    // fault repeats at once; abort raises again).
}

/// Installs the handler, once per process.
pub(super) fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        for signal in FATAL {
            // SAFETY: a zeroed `sigaction` is a valid empty one; the handler only reads a
            // constant-initialised thread local and calls `pwrite`. SA_ONSTACK lets it run
            // on the alternate stack Rust gives its threads (a stack overflow); SA_RESETHAND
            // restores the default action before it runs, so the process still dies.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = mark_culprit as extern "C" fn(libc::c_int) as usize;
                action.sa_flags = libc::SA_RESETHAND | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                    tracing::warn!(signal, "cannot install the crash journal's signal handler");
                }
            }
        }
    });
}
