//! Each thread's scheduler state, from `/proc/TID/stat`. py-spy calls a thread active when
//! the scheduler says `R`; a thread stopped by a tracer or a signal (`t`, `T`) cannot run.
//!
//! py-spy lists `/proc/PID/task` and opens, reads and closes every thread's stat file for
//! every sample. The files stay open here and are re-read in place (`pread` at offset 0 makes
//! procfs render them afresh): one system call per thread. A file whose thread has exited
//! answers ESRCH, even if its id was reused, so it is opened again.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

#[derive(Default)]
pub(crate) struct Activity {
    files: HashMap<u64, File>,
    pub reads: u64,
}

impl Activity {
    /// The scheduler state letter of thread `tid` (`R` running, `S` sleeping, `t` stopped by
    /// a tracer, ...); None when it cannot be read (py-spy then counts the thread as active).
    pub(crate) fn state(&mut self, tid: u64) -> Option<u8> {
        for _ in 0..2 {
            let file = match self.files.get(&tid) {
                Some(f) => f,
                None => {
                    let f = File::open(format!("/proc/{tid}/stat")).ok()?;
                    self.files.entry(tid).or_insert(f)
                }
            };
            let mut buf = [0u8; 512];
            self.reads += 1;
            match file.read_at(&mut buf, 0) {
                Ok(n) if n > 0 => return state(&buf[..n]),
                _ => {
                    self.files.remove(&tid);
                }
            }
        }
        None
    }

    /// Closes the files of threads no longer sampled.
    pub(crate) fn retain(&mut self, live: &[u64]) {
        if self.files.len() > live.len() {
            self.files.retain(|tid, _| live.contains(tid));
        }
    }
}

/// The state letter: the first field after the command name, which is in parentheses and
/// may itself contain ") ".
fn state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

/// Whether a state letter is a stop (by a signal or a tracer): such a thread runs nothing.
pub(crate) fn is_stopped(state: Option<u8>) -> bool {
    matches!(state, Some(b't' | b'T'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_thread_runs_and_a_missing_one_is_unknown() {
        let mut activity = Activity::default();
        let tid = nix::unistd::gettid().as_raw() as u64;
        assert_eq!(activity.state(tid), Some(b'R'));
        assert_eq!(activity.state(tid), Some(b'R'));
        assert_eq!(activity.state(u64::from(u32::MAX - 1)), None);
        activity.retain(&[]);
        assert!(activity.files.is_empty());
    }

    #[test]
    fn the_state_follows_the_last_parenthesis() {
        assert_eq!(state(b"12 (a) b) S 1 2"), Some(b'S'));
        assert_eq!(state(b"12 (x) R 1"), Some(b'R'));
        assert_eq!(state(b"garbage"), None);
    }
}
