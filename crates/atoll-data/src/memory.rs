//! Hands the heap memory a finished burst freed back to the operating system.
//!
//! glibc's allocator keeps what threads free in their arenas for reuse: after 64
//! concurrent clients the node stayed at the burst's peak resident memory for good, though
//! the connections and buffers behind it were gone (PERFORMANCE.md, "Memory after a
//! burst"). `malloc_trim` gives the free pages of every arena back. It takes the arenas'
//! locks while it walks them, so it runs only after the idle sweeper closed connections,
//! that is when a burst has ended, never per request; and the thresholds glibc would
//! otherwise raise on its own are pinned at start ([`pin_allocator_thresholds`]). This
//! module and `storage::wal_insert` hold the workspace's only `unsafe`.
#![allow(unsafe_code)]

/// The free memory glibc may keep at the top of an arena before it gives it back: its
/// default, 128 KiB, as a fixed value.
const TRIM_THRESHOLD: libc::c_int = 128 * 1024;

/// Pins glibc's trim threshold at [`TRIM_THRESHOLD`], once, before the process starts its
/// threads. Left alone, glibc raises it (and the size above which allocations get their
/// own mapping) every time a large block is freed, up to 64 MiB; and `malloc_trim` never
/// shrinks the top of a thread's arena, only the main one's. After a burst, each arena
/// then kept up to the largest buffer freed twice over (object storage and upload buffers
/// of 1–8 MiB): 78–95 MiB of resident memory at rest where the heap held under 2 MiB,
/// against 34 MiB with the threshold pinned and no loss of throughput (PERFORMANCE.md,
/// "Memory after a burst: the allocator's thresholds").
pub fn pin_allocator_thresholds() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` takes two integers and changes the allocator's parameters under
    // its own lock; called before other threads exist, with a documented parameter.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Returns the allocator's free memory to the system (glibc; elsewhere nothing to do).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer and touches only the allocator's own free
    // lists, under the allocator's locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
