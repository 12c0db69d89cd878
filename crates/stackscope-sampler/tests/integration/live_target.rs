//! The sampler against a real interpreter: attach, read, and leave it running.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::Fixture;

use stackscope_sampler::{dump_process, procfs, AttachError, PythonTarget, TargetOptions};

/// A Python process (`python3 -c CODE`), ready when it prints its first line, killed on Drop.
struct Python(Fixture);

impl Python {
    fn start(code: &str) -> Python {
        Python(Fixture::start_code("python3", code))
    }

    fn pid(&self) -> u32 {
        self.0.pid
    }
}

const SPINNER: &str = r#"
import sys, threading
def inner_spin():
    while True:
        pass
def outer_spin():
    inner_spin()
t = threading.Thread(target=outer_spin, name="spinner")
t.start()
print("ready", flush=True)
t.join()
"#;

#[test]
fn reads_the_named_thread_innermost_first_and_leaves_the_process_running() {
    let python = Python::start(SPINNER);
    let mut target = PythonTarget::attach(python.pid(), &TargetOptions::default()).expect("attach");
    assert!(target.python_version().starts_with("3."));
    let deadline = Instant::now() + Duration::from_secs(10);
    let spinner = loop {
        let stacks = target.read_stacks().expect("read");
        if let Some(s) = stacks
            .into_iter()
            .find(|s| s.thread.name.as_deref() == Some("spinner"))
        {
            break s;
        }
        assert!(Instant::now() < deadline, "no spinner thread seen");
    };
    let names: Vec<&str> = spinner.frames.iter().map(|f| &*f.function).collect();
    assert_eq!(&names[..2], ["inner_spin", "outer_spin"], "{names:?}");
    assert!(
        spinner.frames[0].line >= 4,
        "line {}",
        spinner.frames[0].line
    );
    assert!(spinner.thread.os_thread_id.is_some());
    drop(target);
    assert!(procfs::is_alive(python.pid()));
    assert!(!procfs::is_stopped(python.pid()));
}

#[test]
fn dump_with_locals_shows_reprs() {
    let python = Python::start(
        "import time\ndef hold(marker):\n    secret = 'sesame'\n    print('ready', flush=True)\n    time.sleep(100)\nhold(41 + 1)\n",
    );
    let options = TargetOptions {
        locals: true,
        ..TargetOptions::default()
    };
    // "ready" is printed just before the sleep: the thread may still be on its
    // way into it, so read until it sleeps; one that never reads idle fails.
    let deadline = Instant::now() + Duration::from_secs(10);
    let dump = loop {
        let dump = dump_process(python.pid(), &options).expect("dump");
        if !dump.threads[0].active {
            break dump;
        }
        assert!(Instant::now() < deadline, "a sleeping thread is idle");
        std::thread::sleep(Duration::from_millis(20));
    };
    let main = &dump.threads[0];
    let hold = main
        .frames
        .iter()
        .find(|f| f.function == "hold")
        .expect("hold frame");
    let locals = hold.locals.as_ref().expect("locals");
    let secret = locals.iter().find(|l| l.name == "secret").expect("secret");
    assert_eq!(secret.repr.as_deref(), Some("\"sesame\""));
    let marker = locals.iter().find(|l| l.name == "marker").expect("marker");
    assert!(marker.arg);
    assert_eq!(marker.repr.as_deref(), Some("42"));
}

#[test]
fn a_process_that_is_not_python_is_named() {
    let mut sleep = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = sleep.id();
    // Let exec finish so the mappings are sleep's, not the forked test binary's.
    let deadline = Instant::now() + Duration::from_secs(5);
    while procfs::exe(pid)
        .map(|p| !p.ends_with("sleep"))
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    let err = PythonTarget::attach(pid, &TargetOptions::default()).err();
    let _ = sleep.kill();
    let _ = sleep.wait();
    match err {
        Some(AttachError::NotPython { exe, .. }) => assert!(exe.ends_with("sleep"), "{exe}"),
        other => panic!("expected NotPython, got {other:?}"),
    }
}
