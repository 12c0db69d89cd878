//! Hand-offs: the calls in which a thread waits for work another thread or process made (a
//! queue's `get`, a pipe's receive, a future's result, a pool's results, a `DataLoader`'s next
//! batch). One list, read by the step (`input_wait`, `step.rs`) and by the roles, which find
//! the loop by its hand-offs where there is no GPU data.
//!
//! A loop is a thread that, again and again, takes work through a hand-off and then does
//! something with it: it enters its hand-off at least [`MIN_ENTRIES`] times, spends at least
//! [`MIN_ELSEWHERE`] of its samples outside it (computing, or waiting on something else: a
//! GPU, a write) and runs there. A thread that only relays (a logging queue's listener) is
//! nearly always in its `get`; a program with no hand-off (a formatter going through files, a
//! web server answering requests) has no loop.

use crate::fold::{Activity, FrameId, StackTable};

/// Calls in which a thread waits for another thread's or process's result: (file suffix,
/// function; `*` for any function of the file). A connection's sends are not among them: the
/// queue's feeder thread sends, it does not wait for work.
const HANDOFFS: &[(&str, &str)] = &[
    ("queue.py", "get"),
    ("multiprocessing/queues.py", "get"),
    ("multiprocessing/connection.py", "recv"),
    ("multiprocessing/connection.py", "recv_bytes"),
    ("multiprocessing/connection.py", "_recv"),
    ("multiprocessing/connection.py", "_recv_bytes"),
    ("multiprocessing/connection.py", "poll"),
    ("multiprocessing/connection.py", "_poll"),
    ("multiprocessing/connection.py", "wait"),
    ("concurrent/futures/_base.py", "result"),
    ("concurrent/futures/_base.py", "as_completed"),
    ("concurrent/futures/_base.py", "wait"),
    ("concurrent/futures/_base.py", "_result_or_cancel"),
    ("multiprocessing/pool.py", "get"),
    ("multiprocessing/pool.py", "next"),
    ("utils/data/dataloader.py", "_try_get_data"),
    ("utils/data/dataloader.py", "_get_data"),
];

/// A loop enters its hand-off at least this many times in a recording.
pub const MIN_ENTRIES: u64 = 3;
/// A loop spends at least this share of its samples outside its hand-offs.
pub const MIN_ELSEWHERE: f64 = 0.05;

/// Whether a call (function, file) is a hand-off.
pub fn is_handoff(function: &str, file: &str) -> bool {
    HANDOFFS
        .iter()
        .any(|&(f, name)| file.ends_with(f) && (name == "*" || super::named(function, name)))
}

/// Whether a stack is inside a hand-off.
pub fn stack_in_handoff(table: &StackTable, frames: &[FrameId]) -> bool {
    super::calls_of(table, frames).any(|(key, _)| is_handoff(&key.function, &key.file))
}

/// What a thread did through hand-offs over the recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandOffs {
    /// Its samples inside a hand-off.
    pub samples: u64,
    /// How often it arrived in a hand-off's stack.
    pub entries: u64,
    /// Its samples that ran outside hand-offs.
    pub computing: u64,
    /// Its samples outside hand-offs, running or not.
    pub elsewhere: u64,
    /// All its samples.
    pub total: u64,
}

impl HandOffs {
    /// A thread's hand-offs, from its followed stacks.
    pub fn of(table: &StackTable, activity: &Activity) -> HandOffs {
        let mut h = HandOffs {
            total: activity.totals.all().total(),
            ..HandOffs::default()
        };
        for (&stack, counts) in &activity.stacks {
            let Some(entry) = table.stacks().get(stack as usize) else {
                continue;
            };
            if stack_in_handoff(table, &entry.frames) {
                h.samples += counts.all().total();
                h.entries += counts.entries;
            } else {
                h.computing += counts.all().running;
                h.elsewhere += counts.all().total();
            }
        }
        h
    }

    /// Whether the thread is a loop fed through its hand-offs.
    pub fn is_loop(&self) -> bool {
        self.entries >= MIN_ENTRIES
            && self.computing > 0
            && self.elsewhere as f64 >= MIN_ELSEWHERE * self.total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_offs_by_file_and_function() {
        assert!(is_handoff("get", "queue.py"));
        assert!(is_handoff("Queue.get", "queue.py"));
        assert!(is_handoff("Future.result", "concurrent/futures/_base.py"));
        assert!(!is_handoff("Queue.get_nowait", "queue.py"));
        assert!(is_handoff("_recv_bytes", "multiprocessing/connection.py"));
        assert!(is_handoff(
            "_MultiProcessingDataLoaderIter._get_data",
            "torch/utils/data/dataloader.py"
        ));
        // Without workers the loader's `_next_data` loads inline: not a hand-off.
        assert!(!is_handoff(
            "_SingleProcessDataLoaderIter._next_data",
            "torch/utils/data/dataloader.py"
        ));
        assert!(!is_handoff("put", "queue.py"));
        assert!(!is_handoff("_send_bytes", "multiprocessing/connection.py"));
    }

    #[test]
    fn a_loop_comes_back_to_its_hand_off_and_computes() {
        let looping = HandOffs {
            samples: 700,
            entries: 40,
            computing: 250,
            elsewhere: 300,
            total: 1000,
        };
        assert!(looping.is_loop());
        // A listener that relays what it gets is nearly always in its `get`.
        let relay = HandOffs {
            computing: 10,
            elsewhere: 12,
            ..looping
        };
        assert!(!relay.is_loop());
        // One long wait (a pool's map) is not a loop.
        let once = HandOffs {
            entries: 1,
            ..looping
        };
        assert!(!once.is_loop());
    }
}
