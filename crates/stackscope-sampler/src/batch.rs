//! The sampler's side of the channel: events are gathered into a [`Batch`] and handed over
//! every [`MAX_AGE`] or [`MAX_SAMPLES`] samples, whichever comes first, so that the consumer
//! wakes about four times a second at 100 Hz (16 at 1000 Hz) instead of once per sample: on
//! a small machine each wake-up, with its context switches, costs more than reading the
//! stacks, and on a VM whose other CPU sleeps the kernel charges the woken thread tens of
//! microseconds for the CPU's way out of idle (docs/performance.md, "What waking costs").
//!
//! Handing over never blocks: a full channel costs the whole batch, and every event in it is
//! counted as dropped. A batch is only ever cut between samples, so a consumer sees each
//! sample whole.

use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use stackscope_event::{Batch, Event};

/// The most samples (ticks) in one batch: at 1000 Hz, a batch every 64 ms.
pub const MAX_SAMPLES: u32 = 64;

/// The oldest a batch's first event gets before it is handed over: well inside `top`'s
/// one-second refresh. (100 ms until session 10: the consumer's wake-ups then cost 6 µs a
/// sample at 100 Hz on this project's VM, 3 µs now.)
pub const MAX_AGE: Duration = Duration::from_millis(250);

/// What one hand-over did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Nothing was waiting.
    Empty,
    /// The batch went out, with this many stack samples in it.
    Sent { stacks: u64 },
    /// The channel was full: these events are lost (counted as dropped).
    Dropped { events: u64 },
    /// Nobody listens any more (the recording is ending): nothing to count.
    Disconnected,
}

/// Gathers the events of one batch.
pub struct Batcher {
    sender: Sender<Batch>,
    events: Batch,
    samples: u32,
    /// When the first event of the batch was added.
    since: Option<Instant>,
    max_samples: u32,
    max_age: Duration,
}

impl Batcher {
    pub fn new(sender: Sender<Batch>) -> Batcher {
        Batcher::with_limits(sender, MAX_SAMPLES, MAX_AGE)
    }

    pub fn with_limits(sender: Sender<Batch>, max_samples: u32, max_age: Duration) -> Batcher {
        Batcher {
            sender,
            events: Vec::new(),
            samples: 0,
            since: None,
            max_samples: max_samples.max(1),
            max_age,
        }
    }

    /// Adds one event to the batch in progress.
    pub fn push(&mut self, event: Event) {
        if self.since.is_none() {
            self.since = Some(Instant::now());
        }
        self.events.push(event);
    }

    /// Ends one sample (all the events of one tick have been pushed); hands the batch over
    /// when it holds [`MAX_SAMPLES`] samples.
    pub fn end_sample(&mut self) -> Flushed {
        self.samples += 1;
        if self.samples >= self.max_samples {
            self.flush()
        } else {
            Flushed::Empty
        }
    }

    /// Hands the batch over when it would be older than [`MAX_AGE`] at `next`, the instant of
    /// the next sample: it is not kept waiting through a sleep that would make it late.
    pub fn flush_before(&mut self, next: Instant) -> Flushed {
        match self.since {
            Some(since) if next.saturating_duration_since(since) >= self.max_age => self.flush(),
            _ => Flushed::Empty,
        }
    }

    /// Hands over whatever is waiting, now.
    pub fn flush(&mut self) -> Flushed {
        self.samples = 0;
        self.since = None;
        if self.events.is_empty() {
            return Flushed::Empty;
        }
        // The next batch is likely the same size: start it with room for it.
        let capacity = self.events.len();
        let events = std::mem::replace(&mut self.events, Vec::with_capacity(capacity));
        let stacks = events
            .iter()
            .filter(|e| matches!(e, Event::Stack(_)))
            .count() as u64;
        let count = events.len() as u64;
        match self.sender.try_send(events) {
            Ok(()) => Flushed::Sent { stacks },
            Err(TrySendError::Full(_)) => Flushed::Dropped { events: count },
            Err(TrySendError::Disconnected(_)) => Flushed::Disconnected,
        }
    }

    /// Hands over whatever is waiting, even nothing: an empty batch tells the consumer to look
    /// at the sampler's counters now (the target was stopped or resumed).
    pub fn flush_even_empty(&mut self) -> Flushed {
        if !self.events.is_empty() {
            return self.flush();
        }
        match self.sender.try_send(Vec::new()) {
            Ok(()) => Flushed::Sent { stacks: 0 },
            Err(TrySendError::Full(_)) => Flushed::Dropped { events: 0 },
            Err(TrySendError::Disconnected(_)) => Flushed::Disconnected,
        }
    }

    /// Events waiting to be handed over.
    pub fn pending(&self) -> usize {
        self.events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::{SampleError, SampleErrorKind, StackSample, ThreadInfo, Timestamp};

    fn stack(n: u64) -> Event {
        Event::Stack(StackSample {
            time: Timestamp(n),
            pid: 1,
            thread: ThreadInfo {
                os_thread_id: Some(1),
                python_thread_id: 1,
                name: None,
                active: true,
                owns_gil: true,
            },
            frames: Vec::new().into(),
        })
    }

    fn error(n: u64) -> Event {
        Event::SampleError(SampleError {
            time: Timestamp(n),
            pid: 1,
            kind: SampleErrorKind::TornRead,
            message: String::new(),
        })
    }

    fn times(batch: &Batch) -> Vec<u64> {
        batch
            .iter()
            .map(|e| match e {
                Event::Stack(s) => s.time.as_nanos(),
                Event::SampleError(s) => s.time.as_nanos(),
                _ => u64::MAX,
            })
            .collect()
    }

    #[test]
    fn a_batch_goes_out_at_64_samples_and_not_before() {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let mut batcher = Batcher::with_limits(sender, MAX_SAMPLES, Duration::from_secs(3600));
        for tick in 0..MAX_SAMPLES as u64 {
            // Two threads a sample.
            batcher.push(stack(tick * 2));
            batcher.push(stack(tick * 2 + 1));
            let flushed = batcher.end_sample();
            if tick + 1 < MAX_SAMPLES as u64 {
                assert_eq!(flushed, Flushed::Empty);
                assert!(receiver.try_recv().is_err(), "sent early at sample {tick}");
            } else {
                assert_eq!(flushed, Flushed::Sent { stacks: 128 });
            }
        }
        let batch = receiver.try_recv().expect("one batch");
        assert_eq!(times(&batch), (0..128).collect::<Vec<_>>());
        assert_eq!(batcher.pending(), 0);
    }

    #[test]
    fn a_batch_goes_out_when_the_next_sample_would_make_it_too_old() {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let age = Duration::from_millis(100);
        let mut batcher = Batcher::with_limits(sender, MAX_SAMPLES, age);
        let start = Instant::now();
        batcher.push(stack(1));
        batcher.end_sample();
        // The next sample is well within the bound: the batch waits for it.
        assert_eq!(
            batcher.flush_before(start + Duration::from_millis(10)),
            Flushed::Empty
        );
        assert!(receiver.try_recv().is_err());
        batcher.push(error(2));
        batcher.end_sample();
        // The one after falls past it: out now, before the sleep.
        assert_eq!(
            batcher.flush_before(Instant::now() + age),
            Flushed::Sent { stacks: 1 }
        );
        assert_eq!(times(&receiver.try_recv().expect("a batch")), vec![1, 2]);
        // Nothing waiting: nothing sent, however late.
        assert_eq!(
            batcher.flush_before(Instant::now() + 10 * age),
            Flushed::Empty
        );
        assert!(receiver.try_recv().is_err());
    }

    #[test]
    fn the_last_partial_batch_goes_out_on_flush_and_nothing_is_lost() {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let mut batcher = Batcher::new(sender);
        let mut sent = 0;
        for n in 0..1000 {
            batcher.push(stack(n));
            if let Flushed::Sent { stacks } = batcher.end_sample() {
                sent += stacks;
            }
        }
        // 1000 = 15 * 64 + 40: the last 40 wait for the stop.
        assert_eq!(batcher.pending(), 40);
        assert_eq!(batcher.flush(), Flushed::Sent { stacks: 40 });
        sent += 40;
        assert_eq!(sent, 1000);
        let all: Vec<u64> = receiver.try_iter().flat_map(|b| times(&b)).collect();
        assert_eq!(all, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn a_full_channel_costs_the_batch_and_says_how_many_events() {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let mut batcher = Batcher::new(sender);
        batcher.push(stack(1));
        assert_eq!(batcher.flush(), Flushed::Sent { stacks: 1 });
        batcher.push(stack(2));
        batcher.push(error(3));
        assert_eq!(batcher.flush(), Flushed::Dropped { events: 2 });
        drop(receiver);
        batcher.push(stack(4));
        assert_eq!(batcher.flush(), Flushed::Disconnected);
    }
}
