//! The journal's slots, mapped into memory (`MAP_SHARED`): writing a slot before a
//! statement and emptying it after are two stores into memory, no system call, and the
//! kernel keeps the pages of a process that died (they are the file's, in the page cache),
//! so the next start reads what was running. The signal handler marks a slot with one
//! store too. This module, `signal`, `memory` and `atoll_storage::wal_insert` hold the
//! workspace's only `unsafe`.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

pub(super) struct MappedSlots {
    base: NonNull<u8>,
    len: usize,
    /// Kept open for the mapping's life (the mapping alone would do; this documents it).
    _file: File,
}

// SAFETY: the mapping is plain shared memory owned by this value; writers touch disjoint
// slots (a slot belongs to one running statement, taken from and given back to a free list
// under a lock), and every access is bounds-checked against `len`.
unsafe impl Send for MappedSlots {}
// SAFETY: as above.
unsafe impl Sync for MappedSlots {}

impl MappedSlots {
    /// Maps the first `len` bytes of `file` (which must be at least that long).
    pub(super) fn map(file: File, len: usize) -> std::io::Result<MappedSlots> {
        // SAFETY: a new shared read-write mapping of an open file of at least `len` bytes;
        // nothing else in this process maps it, and the result is checked.
        let pointer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if pointer == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(pointer.cast::<u8>())
            .ok_or_else(|| std::io::Error::other("mmap answered a null mapping"))?;
        Ok(MappedSlots {
            base,
            len,
            _file: file,
        })
    }

    /// Copies `bytes` to `offset`.
    pub(super) fn write(&self, offset: usize, bytes: &[u8]) {
        assert!(
            offset + bytes.len() <= self.len,
            "a slot outside the journal"
        );
        // SAFETY: in bounds (checked above); the slot is this caller's alone (see `Sync`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.base.as_ptr().add(offset),
                bytes.len(),
            );
        }
    }

    /// The address of the byte at `offset`, for the signal handler ([`mark`]).
    pub(super) fn address(&self, offset: usize) -> usize {
        assert!(offset < self.len, "a slot outside the journal");
        self.base.as_ptr() as usize + offset
    }
}

/// Writes `byte` at `address` (one the journal's mapping answered by
/// [`MappedSlots::address`]): what the signal handler does to the dying thread's slot.
pub(super) fn mark(address: usize, byte: u8) {
    // SAFETY: the address is in a mapping that lives as long as the node (the journal is
    // the node's), and a single volatile byte store is async-signal-safe.
    unsafe { std::ptr::write_volatile(address as *mut u8, byte) }
}

impl Drop for MappedSlots {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `map` made; no reference into it outlives
        // `self` (the signal handler's address is cleared when its statement ends).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
