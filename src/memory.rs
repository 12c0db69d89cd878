//! The memory side of a live command: starts the memory poller on the target's process tree
//! (unless `--memory-rate 0`), and reports its drops and notices for the summary.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crossbeam_channel::Sender;
use stackscope_event::Batch;
use stackscope_memory::{MemoryConfig, MemoryError, MemoryPoller};

/// What the recording learns from the memory side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryReport {
    /// Readings the channel refused because it was full.
    pub dropped: u64,
    pub notices: Vec<String>,
}

pub enum MemoryHandle {
    Polling(MemoryPoller),
    /// Off: as asked (`--memory-rate 0`, no notice), or the thread could not start (why, for
    /// the summary's notices).
    Off(Option<String>),
}

impl MemoryHandle {
    /// Starts reading the memory of `pid`'s tree `rate_hz` times a second. Never fails: a
    /// thread that cannot start is said once, and the recording goes on without memory.
    pub fn start(
        rate_hz: f64,
        pid: u32,
        sender: Sender<Batch>,
        stop: Arc<AtomicBool>,
    ) -> MemoryHandle {
        let config = MemoryConfig {
            rate_hz,
            ..MemoryConfig::default()
        };
        // The same tree as the GPU side's: the target and its descendants.
        let tree = Arc::new(move || crate::gpu::process_tree(pid));
        match MemoryPoller::start(&config, pid, tree, sender, stop) {
            Ok(poller) => MemoryHandle::Polling(poller),
            Err(MemoryError::Disabled) => MemoryHandle::Off(None),
            Err(e) => {
                eprintln!("stackscope: memory data unavailable: {e}");
                MemoryHandle::Off(Some(format!("no memory data: {e}")))
            }
        }
    }

    /// What the memory side knows so far, for a checkpoint while it runs.
    pub fn snapshot(&self) -> MemoryReport {
        match self {
            MemoryHandle::Polling(poller) => MemoryReport {
                dropped: poller.dropped(),
                notices: poller.notices(),
            },
            MemoryHandle::Off(why) => MemoryReport::off(why.as_deref()),
        }
    }

    /// Waits for the thread (after the session set the stop flag) and reports.
    pub fn join(self) -> MemoryReport {
        match self {
            MemoryHandle::Polling(poller) => {
                let report = poller.join();
                MemoryReport {
                    dropped: report.dropped,
                    notices: report.notices,
                }
            }
            MemoryHandle::Off(why) => MemoryReport::off(why.as_deref()),
        }
    }
}

impl MemoryReport {
    fn off(why: Option<&str>) -> MemoryReport {
        MemoryReport {
            dropped: 0,
            notices: why.map(str::to_owned).into_iter().collect(),
        }
    }
}
