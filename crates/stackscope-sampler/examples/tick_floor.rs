//! What a sampling tick costs at the least on this machine, whatever the reader does: a thread
//! that wakes at RATE and then does only the system calls a sample of our reader makes at the
//! least (one `pread` of a thread's `stat` file and one `process_vm_readv` of BYTES from the
//! target's heap), or nothing at all. Compared with `read_loop` on the same target, it tells
//! what of a sample's CPU time is the machine's price of waking (cold caches after the CPU
//! slept), not the reader's work.
//!
//! `cargo run --release --example tick_floor -- PID RATE SECONDS [BYTES]`; prints the CPU time
//! per tick of the waking thread for four loops, one after the other: sleeping only, with the
//! copy alone (the machine's floor for a sample: `scripts/bench-overhead`'s floor row), with
//! the `pread` alone, with both.
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use stackscope_sampler::SampleTimer;

mod common;
use common::thread_cpu;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pid: u32 = args.get(1).and_then(|a| a.parse().ok()).expect("PID");
    let rate: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100.0);
    let secs: f64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let bytes: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(8192);
    let heap = heap_start(pid).expect("the target's [heap] in its maps");
    let stat = File::open(format!("/proc/{pid}/task/{pid}/stat")).expect("stat");
    let mut buf = vec![0u8; bytes.max(1024)];
    for (label, with_pread, with_copy) in [
        ("sleep only", false, false),
        ("sleep + process_vm_readv", false, true),
        ("sleep + pread", true, false),
        ("sleep + pread + process_vm_readv", true, true),
    ] {
        let cpu0 = thread_cpu();
        let mut timer = SampleTimer::new(rate);
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        let mut ticks = 0u64;
        while timer.wait(Some(deadline)).is_some() {
            ticks += 1;
            if with_pread {
                let _ = stat.read_at(&mut buf[..1024], 0);
            }
            if with_copy {
                copy(pid, heap, &mut buf[..bytes]);
            }
        }
        let cpu = thread_cpu() - cpu0;
        println!(
            "{label}: {ticks} ticks, {:.1} us CPU per tick",
            cpu * 1e6 / ticks.max(1) as f64
        );
    }
}

fn heap_start(pid: u32) -> Option<usize> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps.lines().find(|l| l.ends_with("[heap]"))?;
    usize::from_str_radix(line.split('-').next()?, 16).ok()
}

fn copy(pid: u32, address: usize, buf: &mut [u8]) {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local buffer of the stated length, written by the kernel only.
    unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
}
