//! The one shape of a periodic producer (the GPU poller, the memory poller, `demo`'s simulated
//! GPU): a named thread that reads something every interval, hands what it read to the
//! aggregator as one [`Batch`] per poll, and never blocks.
//!
//! - **Sending** is `try_send`: a full channel costs that batch, and every event in it is
//!   counted as dropped ([`Producer::dropped`]), which the summary reports. A disconnected
//!   channel (nobody listens any more) ends the thread. A batch holds one poll's events, or
//!   those of several polls ([`Schedule::batched`]) for a producer that polls often: every
//!   hand-over wakes the consumer, and on a small machine a wake-up costs more than a cheap
//!   reading.
//! - **Stopping** is the caller's: set the `stop` flag given to [`Producer::spawn`], then
//!   [`Producer::join`]. Joining wakes the thread from its wait at once (its wake channel
//!   disconnects); the thread then makes one last poll, so what happened in the recording's
//!   final moments is not lost. Dropping the handle without joining leaves the thread running
//!   until the flag is set (it looks at the flag every [`STOP_CHECK`] once its handle is gone).
//! - **The schedule** is fixed-rate: poll `n` is due at `start + n × interval`. A poll that
//!   falls behind (a slow driver call, a suspended process) resumes the schedule from now rather
//!   than catch up in a burst.
//! - **Late by design**: a poll may come up to [`Schedule::slack`] (a tenth of the interval)
//!   after it is due. The kernel then ends the thread's wait with another timer that fires in
//!   that window (the sampler's next tick, on a CPU already awake) rather than wake a sleeping
//!   CPU for it alone: on a VM such a wake-up costs tens of microseconds, and at 100 Hz the
//!   memory poller's own wake-ups were 7% of the whole process's CPU per sample
//!   (docs/performance.md, "What waking costs").
//! - **Borrowed resources**: the body receives a [`Ticker`] and calls [`Ticker::run`] itself, so
//!   what it sets up before (an NVML library and the device handles that borrow it) lives on
//!   the thread's own stack for the whole loop, and is torn down after, in the body's order.
//!
//! ```
//! # use std::sync::{atomic::AtomicBool, Arc};
//! # use std::time::Duration;
//! # use stackscope_event::producer::{FirstPoll, Flow, Producer, Schedule};
//! let (sender, receiver) = crossbeam_channel::bounded(16);
//! let stop = Arc::new(AtomicBool::new(false));
//! let schedule = Schedule::every(Duration::from_millis(10), FirstPoll::Now);
//! let producer = Producer::spawn("example", schedule, sender, stop.clone(), |ticker| {
//!     let mut reads = 0;
//!     ticker.run(|_tick| {
//!         reads += 1;
//!         Flow::Continue
//!     });
//! })
//! .unwrap();
//! stop.store(true, std::sync::atomic::Ordering::SeqCst);
//! let report = producer.join();
//! assert!(report.polls >= 1);
//! # drop(receiver);
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};

use crate::Batch;

/// The longest the thread sleeps without looking at the stop flag once its handle is gone
/// (dropped without a join, so nothing will wake it).
pub const STOP_CHECK: Duration = Duration::from_millis(20);

/// When a producer polls, and how many polls go in one hand-over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// From one poll to the next (at least a millisecond).
    pub interval: Duration,
    pub first: FirstPoll,
    /// Polls whose events go in one batch (at least 1); the last poll's events go out at
    /// once whatever the count.
    pub polls_per_batch: u32,
}

/// When the first poll is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstPoll {
    /// As soon as the thread runs: a reading that stands on its own (a process's memory).
    Now,
    /// One interval after the start: a reading of what happened since the previous one (the
    /// GPU's utilization ring) has nothing to say at once.
    AfterInterval,
}

impl Schedule {
    /// A poll every `interval`, each handed over on its own.
    pub fn every(interval: Duration, first: FirstPoll) -> Schedule {
        Schedule {
            interval: interval.max(Duration::from_millis(1)),
            first,
            polls_per_batch: 1,
        }
    }

    /// The same, handing over the events of as many polls as fit in `max_age` at once (at
    /// least one).
    pub fn batched(self, max_age: Duration) -> Schedule {
        let polls = max_age.as_nanos() / self.interval.as_nanos().max(1);
        Schedule {
            polls_per_batch: u32::try_from(polls).unwrap_or(u32::MAX).max(1),
            ..self
        }
    }

    /// How late a poll may come: a tenth of the interval, so the rate holds within 10%.
    pub fn slack(&self) -> Duration {
        self.interval / SLACK_SHARE
    }
}

/// The share of its interval a poll may come late by ([`Schedule::slack`]).
const SLACK_SHARE: u32 = 10;

/// What the body says after a poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Poll again at the next interval.
    Continue,
    /// Nothing more to read (every device lost): this poll's batch goes out, then the loop
    /// ends.
    Stop,
}

/// One poll: what the body fills.
pub struct Tick<'a> {
    /// The batch in progress: the body adds this poll's events (it may hold earlier polls'
    /// too, [`Schedule::batched`]); handed over in one `try_send` after the body returns, when
    /// it is due and not empty.
    pub batch: &'a mut Batch,
    /// Lines for the summary (a metric switched off, a device lost), kept in order.
    pub notices: &'a mut Vec<String>,
    /// Whether this is the final poll, made after the stop flag was seen.
    pub last: bool,
}

/// What a producer reports when it ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerReport {
    /// Events in the batches the channel refused because it was full.
    pub dropped: u64,
    /// Polls made.
    pub polls: u64,
    /// The notices, oldest first.
    pub notices: Vec<String>,
    /// Whether the thread panicked (its data ends early); the caller words the notice.
    pub panicked: bool,
}

/// The handle of a running producer.
pub struct Producer {
    shared: Arc<Shared>,
    thread: JoinHandle<()>,
    /// Dropped by [`Producer::join`]: disconnects, which wakes the thread's wait at once.
    wake: Sender<()>,
}

/// The thread's side: what the body calls [`Ticker::run`] on.
pub struct Ticker {
    schedule: Schedule,
    sender: Sender<Batch>,
    stop: Arc<AtomicBool>,
    /// Disconnected when the handle is joined or dropped.
    wake: Receiver<()>,
    shared: Arc<Shared>,
}

/// State the thread updates and the handle reads.
#[derive(Default)]
struct Shared {
    dropped: AtomicU64,
    polls: AtomicU64,
    notices: Mutex<Vec<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data is a plain list; a panic while it was held leaves nothing half-updated worth
    // refusing to read.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Producer {
    /// Starts a thread named `name` that runs `body` with a [`Ticker`]; the body sets up what
    /// it reads, calls [`Ticker::run`], and tears down what it set up.
    pub fn spawn<F>(
        name: &str,
        schedule: Schedule,
        sender: Sender<Batch>,
        stop: Arc<AtomicBool>,
        body: F,
    ) -> std::io::Result<Producer>
    where
        F: FnOnce(Ticker) + Send + 'static,
    {
        let shared = Arc::new(Shared::default());
        // Rendezvous channel that never carries a message: only its disconnection matters.
        let (wake, wake_receiver) = crossbeam_channel::bounded(0);
        let ticker = Ticker {
            schedule,
            sender,
            stop,
            wake: wake_receiver,
            shared: Arc::clone(&shared),
        };
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || body(ticker))?;
        Ok(Producer {
            shared,
            thread,
            wake,
        })
    }

    /// Events the channel refused so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Polls made so far.
    pub fn polls(&self) -> u64 {
        self.shared.polls.load(Ordering::Relaxed)
    }

    /// The notices so far, oldest first.
    pub fn notices(&self) -> Vec<String> {
        lock(&self.shared.notices).clone()
    }

    /// Waits for the thread (after the caller set `stop`) and reports.
    pub fn join(self) -> ProducerReport {
        let Producer {
            shared,
            thread,
            wake,
        } = self;
        drop(wake);
        let panicked = thread.join().is_err();
        let notices = lock(&shared.notices).clone();
        ProducerReport {
            dropped: shared.dropped.load(Ordering::Relaxed),
            polls: shared.polls.load(Ordering::Relaxed),
            notices,
            panicked,
        }
    }
}

impl Ticker {
    /// Polls on the schedule until the stop flag is seen (then once more, with
    /// [`Tick::last`]), the body says [`Flow::Stop`], or nobody listens any more.
    pub fn run<F>(&self, mut poll: F)
    where
        F: FnMut(&mut Tick<'_>) -> Flow,
    {
        let interval = self.schedule.interval;
        // Best effort: a kernel that refuses keeps its default (50 µs), which only costs CPU.
        let _ = crate::wakeups::let_waits_end_late(self.schedule.slack());
        let mut next = Instant::now();
        if self.schedule.first == FirstPoll::AfterInterval {
            next += interval;
            self.wait_until(next);
        }
        let mut batch = Batch::new();
        let mut batched_polls = 0;
        loop {
            let last = self.stop.load(Ordering::SeqCst);
            let mut notices = Vec::new();
            let flow = poll(&mut Tick {
                batch: &mut batch,
                notices: &mut notices,
                last,
            });
            if !notices.is_empty() {
                lock(&self.shared.notices).extend(notices);
            }
            self.shared.polls.fetch_add(1, Ordering::Relaxed);
            batched_polls += 1;
            let ending = last || flow == Flow::Stop;
            let mut listening = true;
            if ending || batched_polls >= self.schedule.polls_per_batch {
                listening = self.hand_over(std::mem::take(&mut batch));
                batched_polls = 0;
            }
            if ending || !listening {
                break;
            }
            next += interval;
            let now = Instant::now();
            if next < now {
                // Fell behind: resume the schedule from now rather than poll in a burst.
                next = now + interval;
            }
            self.wait_until(next);
        }
    }

    /// Adds a notice outside a poll (while setting up or tearing down).
    pub fn notice(&self, line: impl Into<String>) {
        lock(&self.shared.notices).push(line.into());
    }

    /// Sends one poll's batch without blocking. False when nobody listens any more.
    fn hand_over(&self, batch: Batch) -> bool {
        if batch.is_empty() {
            return true;
        }
        let count = batch.len() as u64;
        match self.sender.try_send(batch) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.shared.dropped.fetch_add(count, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Sleeps until `deadline`, waking early when told to stop: at once when the handle is
    /// joined (the usual way: the flag, then [`Producer::join`]), else at the next look at the
    /// flag.
    fn wait_until(&self, deadline: Instant) {
        while !self.stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match self.wake.recv_deadline(deadline) {
                Err(RecvTimeoutError::Timeout) | Ok(()) => {}
                // Joined, or the handle dropped: the flag says whether to stop; without a
                // handle nothing wakes the thread, so it looks again after a short sleep.
                Err(RecvTimeoutError::Disconnected) => {
                    if !self.stop.load(Ordering::SeqCst) {
                        std::thread::sleep((deadline - now).min(STOP_CHECK));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
