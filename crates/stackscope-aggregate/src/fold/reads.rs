//! Reads: the samples of one process taken at one instant, held until the read is complete so
//! that each knows who held the GIL at its instant (`gil/`), then counted (each thread's GIL,
//! its lane's, its process's) and passed on to the GPU tagger.

use stackscope_event::StackSample;

use super::aggregator::Aggregator;
use super::tagged::Held;
use super::threads::{thread_key, ThreadKey};
use crate::gil::{GilCounts, GilRead, GilSample, GilState};
use crate::gpu::GpuTag;

/// A sample held for its read: folded, with the tag `top` gave it, if any.
pub(crate) type ReadItem = (Held, Option<GpuTag>);
/// A sample of a completed read, with its GIL state.
pub(crate) type ReadDone = (GilSample<ThreadKey>, ReadItem, GilRead<ThreadKey>);

impl Aggregator {
    /// Whether the sample's thread runs at its stack (`gil/`: only there is a wait one for
    /// the GIL).
    pub(super) fn where_it_runs(
        &mut self,
        mut gil: GilSample<ThreadKey>,
        held: &Held,
    ) -> GilSample<ThreadKey> {
        gil.runs_here = match (self.threads.get_mut(&held.thread), held.stack) {
            (Some(thread), Some(stack)) => thread.runs_at.observe(stack, held.running),
            _ => false,
        };
        gil
    }

    /// Holds a folded sample until its read is complete; the samples of the read before go on
    /// to be tagged, each knowing who held the GIL at its instant.
    pub(super) fn hold_for_read(
        &mut self,
        gil: GilSample<ThreadKey>,
        held: Held,
        tag: Option<GpuTag>,
    ) {
        let done = &mut self.read_done;
        self.reads.push(gil, (held, tag), &mut |item, s, read| {
            done.push((s, item, read))
        });
        self.pass_read();
    }

    /// Ends the read held (another kind of event came, or the recording ended).
    pub(super) fn complete_read(&mut self) {
        let done = &mut self.read_done;
        self.reads
            .flush(&mut |item, s, read| done.push((s, item, read)));
        self.pass_read();
    }

    /// Counts a completed read's GIL (each thread's, its lane's and its process's) and passes
    /// its samples on to the tagger.
    fn pass_read(&mut self) {
        let mut done = std::mem::take(&mut self.read_done);
        let Some((first, _, _)) = done.first() else {
            self.read_done = done;
            return;
        };
        let (pid, time) = (first.pid, first.time.as_nanos());
        self.threads
            .note_read(pid, time, done.iter().map(|(_, (held, _), _)| held.thread));
        let mut process = GilCounts::default();
        for (sample, (mut held, tag), read) in done.drain(..) {
            held.gil_waited = read.state == GilState::Waited;
            // A holder of a kind read as one is its kind: churning holders are one holder.
            held.gil_holder = read.held_elsewhere.map(|k| self.threads.as_holder(k));
            process.add(read.state);
            if let Some(thread) = self.threads.get_mut(&held.thread) {
                thread.gil.add(read.state);
                if let Some(lane) = thread.lane {
                    self.buckets.count_lane_gil(sample.time, lane, read.state);
                }
            }
            match tag {
                Some(tag) => self.released.push((sample.time, held, tag)),
                None if self.config.gpu_enabled => self.tagger.hold(sample.time, held),
                None => {
                    self.tagger.observe(sample.time);
                    self.released.push((sample.time, held, GpuTag::Unknown));
                }
            }
        }
        self.read_done = done;
        self.count_process_read(pid, process);
        self.release_tagged();
        self.end_missing_threads();
    }

    /// One read of a process: whether a thread held the GIL at it, and whether one waited.
    fn count_process_read(&mut self, pid: u32, read: GilCounts) {
        let full = self.gil_by_process.len() >= self.limits.max_processes;
        if full && !self.gil_by_process.contains_key(&pid) {
            return;
        }
        let counts = self.gil_by_process.entry(pid).or_default();
        counts.samples += 1;
        counts.held += u64::from(read.held > 0);
        counts.waited += u64::from(read.waited > 0);
    }
}

/// A stack sample as the GIL rule reads it; where its thread runs is known once it is folded
/// ([`Aggregator::where_it_runs`]).
pub(super) fn gil_sample(sample: &StackSample) -> GilSample<ThreadKey> {
    GilSample::of(sample, thread_key(sample.pid, &sample.thread), false)
}
