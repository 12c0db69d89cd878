//! Each way of keeping stacks consistent, on the benchmark's known-depth target: every worker
//! stack read has the known shape, and the target is left running.
//!
//! The reader is chosen per attach ([`ReaderChoice`]), as `STACKSCOPE_READER` chooses it for
//! the benchmarks, so this runs beside the other tests of the binary.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use stackscope_sampler::{procfs, PythonTarget, ReaderChoice, TargetOptions, ThreadStack};

const DEPTH: usize = 12;

struct Target {
    child: Child,
    pid: u32,
    dir: PathBuf,
}

impl Target {
    fn start() -> Target {
        let fixture =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/bench_target.py");
        let dir =
            std::env::temp_dir().join(format!("stackscope-strategies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ready = dir.join("ready");
        let child = Command::new("python3")
            .arg(fixture)
            .arg(dir.join("iterations.log"))
            .arg(&ready)
            .args([
                "--threads",
                "3",
                "--depth",
                &DEPTH.to_string(),
                "--seconds",
                "60",
            ])
            .spawn()
            .expect("python3 starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        let pid = loop {
            if let Some(pid) = std::fs::read_to_string(&ready)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "the target did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Target { child, pid, dir }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn known_shape(stack: &ThreadStack) -> bool {
    let mut names: Vec<&str> = stack.frames.iter().rev().map(|f| &*f.function).collect();
    if names.last() == Some(&"leaf") {
        names.pop();
    }
    let mut expected = vec![
        "Thread._bootstrap",
        "Thread._bootstrap_inner",
        "Thread.run",
        "worker",
    ];
    expected.append(&mut vec!["descend"; DEPTH]);
    expected.push("spin");
    names == expected
}

/// Reads the target for a while; answers (worker stacks read, failed reads).
fn read_for(
    target: &Target,
    options: &TargetOptions,
    choice: ReaderChoice,
    reader: &str,
) -> (usize, usize) {
    let mut attached =
        PythonTarget::attach_with_reader(target.pid, options, choice).expect("attach");
    assert_eq!(attached.reader(), reader);
    let deadline = Instant::now() + Duration::from_secs(2);
    let (mut workers, mut failed) = (0, 0);
    while Instant::now() < deadline {
        match attached.read_stacks() {
            Ok(stacks) => {
                for s in stacks {
                    if s.thread
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("bench-worker-"))
                    {
                        assert!(known_shape(&s), "{reader}: torn stack {:?}", s.frames);
                        workers += 1;
                    }
                }
            }
            Err(_) => failed += 1,
        }
    }
    drop(attached);
    assert!(procfs::is_alive(target.pid));
    assert!(!procfs::is_stopped(target.pid), "left running");
    (workers, failed)
}

#[test]
fn every_strategy_reads_the_known_shape_and_leaves_the_target_running() {
    let target = Target::start();
    let blocking = TargetOptions::default();
    let nonblocking = TargetOptions {
        blocking: false,
        ..TargetOptions::default()
    };
    for (choice, options, reader) in [
        (ReaderChoice::StopGilHolders, &blocking, "stackscope"),
        (ReaderChoice::StopProcess, &blocking, "stackscope"),
        (ReaderChoice::StopGilHolders, &nonblocking, "stackscope"),
        (ReaderChoice::PySpy, &blocking, "py-spy"),
    ] {
        let (workers, failed) = read_for(&target, options, choice, reader);
        eprintln!(
            "{choice:?} (blocking {}): {workers} worker stacks, {failed} failed reads",
            options.blocking
        );
        assert!(workers > 30, "{choice:?}: {workers} worker stacks");
        assert_eq!(failed, 0, "{choice:?}");
    }
}
