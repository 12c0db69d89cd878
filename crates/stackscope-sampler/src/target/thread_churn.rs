//! A target that starts and ends threads all the time: what either reader keeps per thread is
//! released at the read that finds the thread gone, so it stays with the threads alive.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::*;

/// A Python process that starts four short threads every 10 ms, until dropped.
struct Churner(Child);

impl Churner {
    fn start() -> Churner {
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import threading, time\n\
                 def work():\n    time.sleep(0.005)\n\
                 print('ready', flush=True)\n\
                 while True:\n    \
                     for _ in range(4):\n        threading.Thread(target=work).start()\n    \
                     time.sleep(0.01)",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout).read_line(&mut line).expect("a line");
        assert_eq!(line.trim(), "ready");
        Churner(child)
    }
}

impl Drop for Churner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads `target` `reads` times; after each good read, what it keeps per thread is at most a
/// few entries per thread of that read. Returns the distinct threads seen.
fn churn(target: &mut PythonTarget, reads: usize) -> usize {
    let mut seen = HashSet::new();
    for _ in 0..reads {
        std::thread::sleep(Duration::from_millis(3));
        // A list that changed under the read: a transient failure, the next one reads.
        let Ok(stacks) = target.read_stacks() else {
            continue;
        };
        seen.extend(stacks.iter().filter_map(|s| s.thread.os_thread_id));
        // Idents, names (twice: ours and py-spy's or our reader's), first sightings of the
        // unnamed, open files and switch rings: no more than six tables hold a thread.
        let bound = 6 * stacks.len();
        assert!(
            target.thread_entries() <= bound,
            "{} entries kept for {} threads",
            target.thread_entries(),
            stacks.len()
        );
    }
    seen.len()
}

#[test]
fn what_either_reader_keeps_of_a_thread_goes_when_the_thread_ends() {
    let churner = Churner::start();
    let mut target =
        PythonTarget::attach(churner.0.id(), &TargetOptions::default()).expect("attach");
    assert_eq!(target.reader(), "stackscope");
    let ours = churn(&mut target, 300);
    assert!(ours > 50, "only {ours} threads seen: no churn");
    // py-spy's reader from here on.
    target.fast = None;
    let theirs = churn(&mut target, 300);
    assert!(theirs > 50, "only {theirs} threads seen: no churn");
}
