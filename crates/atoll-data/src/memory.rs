//! Hands the heap memory a finished burst freed back to the operating system.
//!
//! glibc's allocator keeps what threads free in their arenas for reuse: after 64
//! concurrent clients the node stayed at the burst's peak resident memory for good, though
//! the connections and buffers behind it were gone (PERFORMANCE.md, "Memory after a
//! burst"). `malloc_trim` gives the free pages of every arena back. It takes the arenas'
//! locks while it walks them, so it runs only after the idle sweeper closed connections,
//! that is when a burst has ended, never per request. This module and `storage::wal_insert`
//! hold the workspace's only `unsafe`.
#![allow(unsafe_code)]

/// Returns the allocator's free memory to the system (glibc; elsewhere nothing to do).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer and touches only the allocator's own free
    // lists, under the allocator's locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
