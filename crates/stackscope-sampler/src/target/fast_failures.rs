//! A target read by our reader keeps it through any run of failures that come and go, and
//! gives it up for py-spy's only after failures that say its layout does not fit.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use super::*;
use crate::fast::ReadError;

/// A Python process that sleeps until dropped.
struct Sleeper(Child);

impl Sleeper {
    /// Started, and past the point where it says so (its interpreter is up).
    fn start() -> Sleeper {
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import threading, time\n\
                 threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n\
                 print('ready', flush=True)\n\
                 time.sleep(600)",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout).read_line(&mut line).expect("a line");
        assert_eq!(line.trim(), "ready");
        Sleeper(child)
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_burst_of_transient_failures_keeps_our_reader_and_misfits_give_it_up() {
    let sleeper = Sleeper::start();
    let pid = sleeper.0.id();
    let mut target = PythonTarget::attach(pid, &TargetOptions::default()).expect("attach");
    assert_eq!(target.reader(), "stackscope");
    // Far more transient failures in a row than the misfit limit: a pool that starts a
    // thread per task, say. Each is lost as one sample, never as the reader.
    for i in 0..500 {
        let e = match i % 4 {
            0 => ReadError::Torn,
            1 => ReadError::ThreadGone,
            2 => ReadError::ListKeepsChanging,
            _ => ReadError::io("read", std::io::Error::from_raw_os_error(libc::EIO)),
        };
        assert!(matches!(
            target.fast_failed(&e),
            SampleFailure::Transient { .. }
        ));
    }
    assert_eq!(target.reader(), "stackscope");
    let stacks = target.read_stacks().expect("our reader reads");
    assert_eq!(stacks.len(), 2);
    // A good read starts the count of misfits again: a few, then a read, then the limit.
    for _ in 0..Misfits::LIMIT - 1 {
        let _ = target.fast_failed(&ReadError::Layout("garbage".into()));
    }
    target.read_stacks().expect("our reader reads");
    assert_eq!(target.reader(), "stackscope");
    for _ in 0..Misfits::LIMIT {
        let _ = target.fast_failed(&ReadError::Layout("garbage".into()));
    }
    assert_eq!(target.reader(), "py-spy");
    let stacks = target.read_stacks().expect("py-spy's reader reads");
    assert_eq!(stacks.len(), 2);
}

#[test]
fn a_target_whose_first_read_of_ours_failed_gets_our_reader_when_a_try_is_due() {
    let sleeper = Sleeper::start();
    let pid = sleeper.0.id();
    let mut target = PythonTarget::attach(pid, &TargetOptions::default()).expect("attach");
    // As attach leaves a target caught while its interpreter started.
    target.fast = None;
    target.fast_retry = Some(attach::FastRetry::due_now());
    assert_eq!(target.reader(), "py-spy");
    let stacks = target.read_stacks().expect("a read");
    assert_eq!(stacks.len(), 2);
    assert_eq!(target.reader(), "stackscope");
    assert!(target.fast_retry.is_none());
}
