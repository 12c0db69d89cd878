//! What the memory poller's reads cost on a given process: `cargo run --release -p
//! stackscope-memory --example read_cost -- PID [ROUNDS]`. Prints the mean time of one read of
//! `statm` (opened each time, and kept open as the poller does), `smaps_rollup` and the
//! process's memory cgroup: the figures the crate's rates are chosen from.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use stackscope_memory::cgroup::CgroupFiles;
use stackscope_memory::procfs::{
    page_size, parse_smaps_rollup, parse_statm, read_from_start, read_into,
};

fn mean(rounds: u32, mut read: impl FnMut()) -> Duration {
    let started = Instant::now();
    for _ in 0..rounds {
        read();
    }
    started.elapsed() / rounds.max(1)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(pid) = args.next().and_then(|p| p.parse::<u32>().ok()) else {
        eprintln!("usage: read_cost PID [ROUNDS]");
        std::process::exit(2);
    };
    let rounds = args.next().and_then(|r| r.parse().ok()).unwrap_or(100);
    let dir = Path::new("/proc").join(pid.to_string());
    let mut text = String::new();
    let mut bytes = Vec::new();
    let opened = mean(rounds, || {
        let _ = read_into(&dir.join("statm"), &mut text);
        let _ = parse_statm(&text, 4096);
    });
    let Ok(statm) = File::open(dir.join("statm")) else {
        eprintln!("no process {pid}");
        std::process::exit(1);
    };
    let kept = mean(rounds, || {
        let _ = read_from_start(&statm, &mut bytes).map(|t| parse_statm(t, 4096));
    });
    let rss = read_from_start(&statm, &mut bytes)
        .ok()
        .and_then(|t| parse_statm(t, page_size()))
        .unwrap_or(0);
    let rollup = mean(rounds.min(50), || {
        let _ = read_into(&dir.join("smaps_rollup"), &mut text);
        let _ = parse_smaps_rollup(&text);
    });
    println!("pid {pid}: resident {} MB", rss >> 20);
    println!(
        "statm        {:>10.1} us opened each time, {:.1} us kept open",
        micros(opened),
        micros(kept)
    );
    println!("smaps_rollup {:>10.1} us", micros(rollup));
    let cgroup = std::fs::read_to_string(dir.join("cgroup"))
        .ok()
        .and_then(|text| CgroupFiles::locate(&text, Path::new("/sys/fs/cgroup")));
    match cgroup {
        Some(files) => {
            let tick = mean(rounds, || {
                let _ = files.read(false, &mut bytes);
            });
            let walk = mean(rounds, || {
                let _ = files.read(true, &mut bytes);
            });
            println!(
                "cgroup       {:>10.1} us ({:.1} us with the limit), {}",
                micros(tick),
                micros(walk),
                files.dir.display()
            );
        }
        None => println!("cgroup       none of its own"),
    }
}
