//! The aggregator: the one owner of a recording's state, fed event by event.

use std::collections::HashMap;

use stackscope_event::{Event, GpuSample, SampleErrorKind, StackSample, Timestamp};

use crate::intern::{GpuTag, StackCounts, StackTable};
use crate::summary::ErrorCounts;
use crate::tagging::GpuTagger;
use crate::timeline::GpuTimeline;

#[derive(Debug, Clone, PartialEq)]
pub struct AggregateConfig {
    /// Keep samples of threads that were sleeping or blocked (py-spy leaves them out).
    pub include_idle: bool,
    /// GPU utilization in percent below which a stack sample counts as "GPU idle".
    pub idle_below: f32,
    /// Whether GPU readings are expected; when not, stack samples are never held back.
    pub gpu_enabled: bool,
}

impl Default for AggregateConfig {
    /// The command line's defaults: idle threads left out, 30% idle threshold, GPU on (auto).
    fn default() -> Self {
        AggregateConfig {
            include_idle: false,
            idle_below: 30.0,
            gpu_enabled: true,
        }
    }
}

/// Which samples a folded profile covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StackView {
    All,
    GpuIdle,
    GpuBusy,
}

impl StackView {
    pub(crate) fn count(self, counts: &StackCounts) -> u64 {
        match self {
            StackView::All => counts.all,
            StackView::GpuIdle => counts.gpu_idle,
            StackView::GpuBusy => counts.gpu_busy,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ThreadStat {
    pub name: String,
    pub os_thread_id: Option<u64>,
    pub python_thread_id: u64,
    pub samples: u64,
}

/// Folds stack samples, keeps the GPU timeline and tags samples with the GPU's state.
///
/// Pure: no I/O, no threads, no clock reads; feed it [`Event`]s in roughly the order they were
/// taken and ask it for folded profiles and a summary at any time.
#[derive(Debug)]
pub struct Aggregator {
    pub(crate) config: AggregateConfig,
    pub(crate) start: Timestamp,
    pub(crate) table: StackTable,
    pub(crate) tagger: GpuTagger,
    pub(crate) timeline: GpuTimeline,
    /// By (pid, Python thread id): a Python thread id is only unique within its process.
    pub(crate) threads: HashMap<(u32, u64), ThreadStat>,
    pub(crate) samples: u64,
    pub(crate) idle_skipped: u64,
    pub(crate) errors: ErrorCounts,
}

impl Aggregator {
    pub fn new(config: AggregateConfig, start: Timestamp) -> Aggregator {
        let tagger = GpuTagger::new(config.idle_below);
        Aggregator {
            config,
            start,
            table: StackTable::default(),
            tagger,
            timeline: GpuTimeline::default(),
            threads: HashMap::new(),
            samples: 0,
            idle_skipped: 0,
            errors: ErrorCounts::default(),
        }
    }

    pub fn handle(&mut self, event: Event) {
        match event {
            Event::Stack(sample) => self.handle_stack(sample),
            Event::SampleError(error) => {
                self.errors.total += 1;
                match error.kind {
                    SampleErrorKind::TornRead => self.errors.torn_read += 1,
                    SampleErrorKind::ThreadGone => self.errors.thread_gone += 1,
                    SampleErrorKind::Other => self.errors.other += 1,
                }
                self.tagger.observe(error.time);
            }
            Event::Gpu(sample) => self.handle_gpu(sample),
            Event::Process(process) => self.tagger.observe(process.time),
        }
        self.release_tagged();
    }

    fn handle_stack(&mut self, sample: StackSample) {
        let name = sample.thread.display_name();
        let thread = self
            .threads
            .entry((sample.pid, sample.thread.python_thread_id))
            .or_insert_with(|| ThreadStat {
                name: String::new(),
                os_thread_id: None,
                python_thread_id: sample.thread.python_thread_id,
                samples: 0,
            });
        // A thread can be renamed after it starts; the latest name is the one people know.
        if thread.name != name {
            thread.name.clone_from(&name);
        }
        if sample.thread.os_thread_id.is_some() {
            thread.os_thread_id = sample.thread.os_thread_id;
        }
        if !sample.thread.active && !self.config.include_idle {
            self.idle_skipped += 1;
            self.tagger.observe(sample.time);
            return;
        }
        thread.samples += 1;
        self.samples += 1;
        let stack = self.table.intern(&name, &sample.frames);
        self.table.count(stack);
        if self.config.gpu_enabled {
            self.tagger.hold(sample.time, stack);
        } else {
            self.tagger.observe(sample.time);
            self.table.count_tag(stack, GpuTag::Unknown);
        }
    }

    fn handle_gpu(&mut self, sample: GpuSample) {
        if let Some(utilization) = sample.utilization {
            self.tagger
                .add_reading(sample.device, sample.time, utilization);
        } else {
            self.tagger.observe(sample.time);
        }
        self.timeline.push(sample);
    }

    fn release_tagged(&mut self) {
        let table = &mut self.table;
        self.tagger
            .release(|stack, tag| table.count_tag(stack, tag));
    }

    /// Names the devices the GPU poller watches, so that stack samples also wait for a device
    /// that has not reported yet; otherwise only devices already seen are waited for.
    pub fn expect_gpu_devices(&mut self, devices: &[u32]) {
        for &device in devices {
            self.tagger.expect_device(device);
        }
    }

    /// The end of the recording: tags every held sample with what is known.
    pub fn finish(&mut self) {
        let table = &mut self.table;
        self.tagger.flush(|stack, tag| table.count_tag(stack, tag));
    }

    /// Folded lines of one view, `thread;outer;...;inner` with their counts, sorted by stack.
    /// Samples still held for GPU tagging are in `All` but not yet in the GPU views.
    pub fn folded(&self, view: StackView) -> Vec<(String, u64)> {
        let mut lines: Vec<(String, u64)> = self
            .table
            .stacks()
            .iter()
            .filter_map(|stack| {
                let count = view.count(&stack.counts);
                (count > 0).then(|| (self.table.folded_stack(stack), count))
            })
            .collect();
        lines.sort_unstable();
        // Distinct frames can print alike (a native and a Python frame of one name), so equal
        // lines are merged to keep the folded format's one-line-per-stack rule.
        lines.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                earlier.1 += later.1;
                true
            } else {
                false
            }
        });
        lines
    }

    /// Every GPU reading kept, in time order.
    pub fn gpu_timeline(&self) -> &[GpuSample] {
        self.timeline.samples()
    }

    pub fn config(&self) -> &AggregateConfig {
        &self.config
    }

    /// The recording's start on the event clock, the zero of timeline times.
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// Stack samples kept (not skipped as idle).
    pub fn samples(&self) -> u64 {
        self.samples
    }

    pub fn idle_samples_skipped(&self) -> u64 {
        self.idle_skipped
    }

    pub fn errors(&self) -> &ErrorCounts {
        &self.errors
    }

    /// Stack samples waiting for the GPU readings that cover them.
    pub fn pending_gpu_tagging(&self) -> usize {
        self.tagger.pending_len()
    }

    /// Distinct stacks interned so far: what memory grows with.
    pub fn distinct_stacks(&self) -> usize {
        self.table.stacks().len()
    }
}
