//! The running thread's own CPU time: what a budget of work on a shared thread counts
//! (`sandbox::Control::within_budget`). Wall-clock time would also count the time the
//! thread waited for a core — on a busy node, most of it — and turn a short read on a
//! preempted worker into an overrun. Like `memory`, one of the few modules allowed
//! `unsafe` (one call into the C library).
#![allow(unsafe_code)]

use std::time::Duration;

/// CPU time the calling thread has used since it started. The kernel's per-thread clock
/// (`CLOCK_THREAD_CPUTIME_ID`): a system call, not the vDSO — read it once per budget and
/// then only where a budget is checked (every `PROGRESS_INTERVAL` engine steps).
pub fn cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the duration of the call; the clock
    // id is a constant the kernel always knows (it cannot fail for the calling thread).
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_threads_own_work_and_not_its_sleep() {
        let before = cpu_time();
        std::thread::sleep(Duration::from_millis(30));
        let slept = cpu_time() - before;
        assert!(
            slept < Duration::from_millis(20),
            "sleeping counted {slept:?}"
        );
        let started = std::time::Instant::now();
        let mut spin = 0u64;
        while started.elapsed() < Duration::from_millis(30) {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        assert!(
            cpu_time() - before > Duration::ZERO,
            "spinning counted nothing"
        );
    }
}
