//! Giving freed memory back to the system after a burst of allocation.
//!
//! A checkpoint builds every output in memory (folded stacks, flamegraphs, the page's data)
//! and frees it again, tens of MB for a rich profile. glibc's allocator keeps most of what was
//! freed: a burst's large blocks end up in the heap once its mmap threshold has risen, and
//! long-lived allocations made between bursts pin the heap's top, so a process attached for
//! days ratchets its RSS up to its largest checkpoint and beyond as the heap fragments. Asking
//! glibc to trim after each burst returns the free pages (`madvise(MADV_DONTNEED)` of every
//! free page, not only the top), so RSS follows what is live.

/// Returns the pages freed since the last call to the system, where the allocator allows.
pub fn give_back_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How often a view that runs for days gives back what it freed: `top` builds its table and
/// the verdict's aggregate every second, with no checkpoint to trim after.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Gives freed memory back at most every [`TRIM_EVERY`], for loops without checkpoints.
pub struct PeriodicTrim {
    last: std::time::Instant,
}

impl PeriodicTrim {
    pub fn new() -> PeriodicTrim {
        PeriodicTrim {
            last: std::time::Instant::now(),
        }
    }

    /// Trims when the last trim is [`TRIM_EVERY`] old.
    pub fn when_due(&mut self) {
        if self.last.elapsed() >= TRIM_EVERY {
            give_back_freed();
            self.last = std::time::Instant::now();
        }
    }
}
