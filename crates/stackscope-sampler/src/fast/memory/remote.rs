//! Reading the target's memory in batches: many ranges, one `process_vm_readv`.
//!
//! Each system call into another process's memory costs about as much as copying a few
//! kilobytes, so the reader gathers every range it needs at one step (all threads' states,
//! all frames, all code headers) and reads them together. A range that is not mapped (a
//! pointer read from a torn frame) fails alone: the kernel stops at the first range it cannot
//! read, and the batch carries on from the one after it.

use std::cell::RefCell;
use std::io;

/// At most this many ranges in one call (`IOV_MAX` on Linux).
const MAX_IOVECS: usize = 1024;

/// Copies of a range's bytes kept for the next sample ([`Batch::copy`]): a sample's chunk
/// copy (5 KB at 31 frames) is past the allocator's per-thread cache, and allocating and
/// freeing it each sample took more than the copy.
const SPARE_COPIES: usize = 16;
/// A copy this large is not kept (a deep stack's rare whole chunk).
const SPARE_MAX: usize = 256 << 10;

/// Calls of at most this many ranges (a steady sample's: 7 to 10) pass their iovecs from the
/// stack rather than a fresh allocation.
const STACK_IOVECS: usize = 32;

/// A batch refuses single ranges this large: a garbage length read from a torn object must
/// not make us allocate gigabytes.
pub(crate) const MAX_RANGE: usize = 4 << 20;

/// Where a range's bytes went in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(usize);

#[derive(Debug, Clone, Copy)]
struct Range {
    addr: usize,
    len: usize,
    offset: usize,
    ok: bool,
}

/// Ranges to read at once, and, after [`Batch::run`], their bytes.
#[derive(Default)]
pub(crate) struct Batch {
    ranges: Vec<Range>,
    /// The ranges' bytes, back to back, in `buf[..used]`. A recycled batch keeps its
    /// buffer's length: the kernel overwrites what it reads, so the bytes are not zeroed
    /// again each sample.
    buf: Vec<u8>,
    used: usize,
    /// The ranges of one call, kept with the batch so that a recycled one allocates nothing.
    window: Vec<usize>,
    /// Buffers for [`Batch::copy`], handed back with [`Batch::take_back`].
    spare: RefCell<Vec<Vec<u8>>>,
}

/// The process we read, and how many system calls reading it took.
pub(crate) struct Remote {
    pid: libc::pid_t,
    pub syscalls: u64,
    /// The ranges those calls read (iovecs): each pins its pages anew.
    pub ranges: u64,
    pub bytes: u64,
    /// Thread CPU time inside `process_vm_readv`, measured only when `timed`.
    pub syscall_ns: u64,
    timed: bool,
    /// A sample's batch, kept for the next one: its buffer (tens of KiB at many threads)
    /// then does not grow again, copying itself at each doubling, every sample.
    spare: Option<Batch>,
}

impl Remote {
    pub(crate) fn new(pid: u32) -> Remote {
        Remote {
            pid: pid as libc::pid_t,
            syscalls: 0,
            ranges: 0,
            bytes: 0,
            syscall_ns: 0,
            timed: false,
            spare: None,
        }
    }

    /// Times each `process_vm_readv` ([`crate::ReaderTuning::stats`]) where `timed`.
    pub(crate) fn timed(mut self, timed: bool) -> Remote {
        self.timed = timed;
        self
    }

    /// An empty batch, with the room of the last one handed back.
    pub(crate) fn batch(&mut self) -> Batch {
        let mut batch = self.spare.take().unwrap_or_default();
        batch.clear();
        batch
    }

    /// Hands a batch back for the next [`Remote::batch`].
    pub(crate) fn recycle(&mut self, batch: Batch) {
        self.spare = Some(batch);
    }

    /// Reads one range at once, outside any batch.
    pub(crate) fn read(&mut self, addr: usize, len: usize) -> io::Result<Vec<u8>> {
        let mut batch = Batch::default();
        let slot = batch.add(addr, len);
        batch.run(self)?;
        batch
            .get(slot)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
    }
}

impl Batch {
    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
        self.used = 0;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges added so far.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Adds a range. A null address or an absurd length is recorded as failed, never read.
    pub(crate) fn add(&mut self, addr: usize, len: usize) -> Slot {
        let offset = self.used;
        let sane = addr != 0 && len <= MAX_RANGE && addr.checked_add(len).is_some();
        let len = if sane { len } else { 0 };
        self.used = offset + len;
        if self.buf.len() < self.used {
            self.buf.resize(self.used, 0);
        }
        self.ranges.push(Range {
            addr,
            len,
            offset,
            ok: false,
        });
        if !sane {
            // Marked so that run() skips it; get() then answers None.
            if let Some(r) = self.ranges.last_mut() {
                r.addr = 0;
            }
        }
        Slot(self.ranges.len() - 1)
    }

    /// The bytes of a range that was read in full.
    pub(crate) fn get(&self, slot: Slot) -> Option<&[u8]> {
        let r = self.ranges.get(slot.0)?;
        if !r.ok {
            return None;
        }
        self.buf.get(r.offset..r.offset + r.len)
    }

    /// The bytes of a range read in full, as a vector of their own (a region a walk keeps),
    /// in a buffer handed back earlier where there is one.
    pub(crate) fn copy(&self, slot: Slot) -> Option<Vec<u8>> {
        let bytes = self.get(slot)?;
        let mut out = self.spare.borrow_mut().pop().unwrap_or_default();
        out.clear();
        out.extend_from_slice(bytes);
        Some(out)
    }

    /// Keeps a copy's buffer for the next [`Batch::copy`] (a few, and none too large).
    pub(crate) fn take_back(&mut self, bytes: Vec<u8>) {
        let spare = self.spare.get_mut();
        if spare.len() < SPARE_COPIES && bytes.capacity() <= SPARE_MAX {
            spare.push(bytes);
        }
    }

    /// Reads every range. Ranges that cannot be read are left failed; the error is only for
    /// the process itself (gone, or no longer ours to read).
    pub(crate) fn run(&mut self, remote: &mut Remote) -> io::Result<()> {
        let mut next = 0;
        let mut window = std::mem::take(&mut self.window);
        while next < self.ranges.len() {
            // Up to MAX_IOVECS ranges from `next`, passing over those marked unreadable when
            // added: they hold no bytes of the buffer, so the others stay back to back in it
            // and one call reads them all.
            window.clear();
            window.extend(
                (next..self.ranges.len())
                    .filter(|&i| self.ranges[i].addr != 0)
                    .take(MAX_IOVECS),
            );
            let Some(&last) = window.last() else {
                break;
            };
            let done = match self.readv(remote, &window) {
                Ok(done) => done,
                Err(e) => {
                    self.window = window;
                    return Err(e);
                }
            };
            // The kernel reads whole ranges in order: the first `done` succeeded, the one
            // after (if any, within this call) is the one it could not read.
            for &i in &window[..done] {
                self.ranges[i].ok = true;
            }
            next = match window.get(done) {
                Some(&failed) => failed + 1,
                None => last + 1,
            };
        }
        self.window = window;
        Ok(())
    }

    /// One system call for the ranges `which` (ascending, none marked unreadable); answers
    /// how many of them, from the first, were read in full.
    fn readv(&mut self, remote: &mut Remote, which: &[usize]) -> io::Result<usize> {
        let ranges = || which.iter().map(|&i| &self.ranges[i]);
        let total: usize = ranges().map(|r| r.len).sum();
        let first = ranges().next().map_or(0, |r| r.offset);
        let iovec = |r: &Range| libc::iovec {
            iov_base: r.addr as *mut libc::c_void,
            iov_len: r.len,
        };
        let mut on_stack = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; STACK_IOVECS];
        let on_heap: Vec<libc::iovec>;
        let remote_iov: &[libc::iovec] = if which.len() <= STACK_IOVECS {
            for (slot, r) in on_stack.iter_mut().zip(ranges()) {
                *slot = iovec(r);
            }
            &on_stack[..which.len()]
        } else {
            on_heap = ranges().map(iovec).collect();
            &on_heap
        };
        let local = libc::iovec {
            iov_base: self.buf[first..].as_mut_ptr().cast(),
            iov_len: total,
        };
        remote.syscalls += 1;
        remote.ranges += which.len() as u64;
        let started = if remote.timed {
            crate::cputime::thread_ns()
        } else {
            0
        };
        // SAFETY: the local iovec covers `total` bytes of our own buffer, which holds every
        // range of this call back to back; the remote iovecs are only read by the kernel.
        let n = unsafe {
            libc::process_vm_readv(
                remote.pid,
                &local,
                1,
                remote_iov.as_ptr(),
                remote_iov.len() as libc::c_ulong,
                0,
            )
        };
        if remote.timed {
            remote.syscall_ns += crate::cputime::thread_ns().saturating_sub(started);
        }
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                // The first range is not mapped: nothing of this call was read.
                Some(libc::EFAULT) => Ok(0),
                _ => Err(err),
            };
        }
        let mut read = n as usize;
        remote.bytes += read as u64;
        let mut done = 0;
        for r in ranges() {
            if read < r.len {
                break;
            }
            read -= r.len;
            done += 1;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_memory_in_one_call_and_isolates_a_bad_range() {
        let a = [1u8, 2, 3, 4];
        let b = [9u8; 100];
        let mut remote = Remote::new(std::process::id());
        let mut batch = Batch::default();
        let sa = batch.add(a.as_ptr() as usize, a.len());
        // Page zero is never mapped.
        let bad = batch.add(8, 16);
        let sb = batch.add(b.as_ptr() as usize, b.len());
        let null = batch.add(0, 8);
        batch.run(&mut remote).expect("our own process");
        assert_eq!(batch.get(sa), Some(&a[..]));
        assert_eq!(batch.get(bad), None);
        assert_eq!(batch.get(sb), Some(&b[..]));
        assert_eq!(batch.get(null), None);
        assert_eq!(remote.syscalls, 2, "one call, one more after the bad range");
    }

    #[test]
    fn absurd_lengths_are_not_allocated() {
        let mut batch = Batch::default();
        let s = batch.add(0x1000, usize::MAX / 2);
        let mut remote = Remote::new(std::process::id());
        batch.run(&mut remote).expect("run");
        assert_eq!(batch.get(s), None);
        assert_eq!(remote.syscalls, 0);
    }

    #[test]
    fn more_ranges_than_one_call_takes() {
        let data: Vec<u64> = (0..3000).collect();
        let mut batch = Batch::default();
        let slots: Vec<Slot> = data
            .iter()
            .map(|v| batch.add(v as *const u64 as usize, 8))
            .collect();
        let mut remote = Remote::new(std::process::id());
        batch.run(&mut remote).expect("run");
        for (v, s) in data.iter().zip(slots) {
            assert_eq!(batch.get(s), Some(&v.to_le_bytes()[..]));
        }
        assert_eq!(remote.syscalls, 3);
    }

    /// A region's copy reuses a buffer handed back, holds the range's bytes whatever the
    /// buffer held before, and a buffer too large to keep is let go.
    #[test]
    fn copies_reuse_the_buffers_handed_back() {
        let a = [7u8; 300];
        let b = [3u8; 40];
        let mut remote = Remote::new(std::process::id());
        let mut batch = remote.batch();
        let sa = batch.add(a.as_ptr() as usize, a.len());
        let sb = batch.add(b.as_ptr() as usize, b.len());
        batch.run(&mut remote).expect("read");
        let first = batch.copy(sa).expect("copied");
        assert_eq!(first, a);
        let at = first.as_ptr();
        batch.take_back(first);
        let second = batch.copy(sb).expect("copied");
        assert_eq!((second.as_ptr(), &second[..]), (at, &b[..]));
        // Too large to keep: the next copy gets a buffer of its own.
        batch.take_back(vec![0; SPARE_MAX + 1]);
        assert_eq!(batch.copy(sb).expect("copied").capacity(), b.len());
        // Kept across a recycle.
        batch.take_back(second);
        remote.recycle(batch);
        let batch = remote.batch();
        assert!(batch.spare.borrow().len() == 1);
    }
}
