//! Threads of our own for the unit tests of what watches a target's threads.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A thread that sleeps on and on: each message on `go` wakes it for 20 ms of work, then it
/// sleeps again; dropping `go` ends it. Its id, `go`, and the handle to join.
pub(crate) fn sleeper() -> (u64, mpsc::Sender<()>, JoinHandle<()>) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw() as u64).unwrap();
        while go_rx.recv().is_ok() {
            let until = Instant::now() + Duration::from_millis(20);
            while Instant::now() < until {}
        }
    });
    (tid_rx.recv().unwrap(), go_tx, thread)
}
