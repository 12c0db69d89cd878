//! Reads a process at a fixed rate with `PythonTarget`, for measuring the reader alone:
//! `cargo run --release --example read_loop -- PID RATE SECONDS`.
use std::time::{Duration, Instant};

use stackscope_sampler::{PythonTarget, SampleTimer, TargetOptions};

mod common;
use common::thread_cpu;
// The binary's one list of the reader's environment variables.
#[path = "../../../src/config/tuning.rs"]
mod reader_tuning;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pid: u32 = args.get(1).and_then(|a| a.parse().ok()).expect("PID");
    let rate: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100.0);
    let secs: f64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5.0);
    // The reader's switches from the environment, as the binary reads them.
    let options = TargetOptions {
        tuning: reader_tuning::reader_tuning_from_env(),
        ..TargetOptions::default()
    };
    let mut target = PythonTarget::attach(pid, &options).expect("attach");
    eprintln!("reader: {}", target.reader());
    let cpu0 = thread_cpu();
    let mut timer = SampleTimer::new(rate);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let (mut ok, mut err, mut busy) = (0u64, 0u64, Duration::ZERO);
    while timer.wait(Some(deadline)).is_some() {
        let t = Instant::now();
        match target.read_stacks() {
            Ok(stacks) => {
                ok += 1;
                if std::env::var_os("PRINT_STACKS").is_some() {
                    for s in &stacks {
                        let f: Vec<String> = s
                            .frames
                            .iter()
                            .map(|f| format!("{}:{}", f.function, f.line))
                            .collect();
                        eprintln!("{:?} {}", s.thread.name, f.join(" < "));
                    }
                }
            }
            Err(_) => err += 1,
        }
        busy += t.elapsed();
    }
    let cpu = thread_cpu() - cpu0;
    eprintln!(
        "{ok} reads, {err} errors, {:.1} us wall and {:.1} us CPU per read",
        busy.as_secs_f64() * 1e6 / (ok + err).max(1) as f64,
        cpu * 1e6 / (ok + err).max(1) as f64
    );
}
