//! A synthetic recording for the sample log's and the report's tests: a "typical"
//! training-like target (threads, stacks, late GPU readings, errors, process events), its log
//! header, and a deterministic random source.

use std::collections::VecDeque;
use std::sync::Arc;

use stackscope_event::{
    Event, FileOrigin, Frame, GpuSample, ProcessEvent, ProcessEventKind, SampleError,
    SampleErrorKind, StackSample, ThreadInfo, Timestamp,
};
use stackscope_samplelog::LogHeader;

pub use crate::events::{MS, SEC};

pub const START: u64 = 1_000_000_000_000;

pub fn header(include_idle: bool, gpu: bool) -> LogHeader {
    LogHeader {
        start: Timestamp(START),
        started_at: "2024-05-01T10:00:00+00:00".into(),
        pid: 4242,
        command_line: "python train.py --epochs 90".into(),
        python_version: "3.11.8".into(),
        rate_hz: 100.0,
        include_idle,
        idle_below: 30.0,
        gpu_enabled: gpu,
        process_root: false,
        leave_out_startup: Some(false),
        expected_gpu_devices: Vec::new(),
        cpus_usable: None,
        processes_apart: false,
        threads_apart: false,
    }
}

/// xorshift64*: deterministic and dependency-free.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    // The generator's step; it is not an iterator (it never ends).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `distinct` stacks of `depth` frames sharing a common root, as a training loop's would.
pub fn stacks(distinct: usize, depth: usize) -> Vec<Vec<Frame>> {
    let shared: Vec<Arc<str>> = (0..depth)
        .map(|d| {
            Arc::from(format!(
                "/opt/venv/lib/python3.11/site-packages/torch/m{d}.py"
            ))
        })
        .collect();
    (0..distinct)
        .map(|s| {
            (0..depth)
                .map(|d| {
                    // Outer frames are shared by all stacks, inner ones vary.
                    let variant = if d < depth / 2 { s } else { 0 };
                    let native = d == 0 && s % 5 == 0;
                    Frame {
                        function: Arc::from(format!("fn_{d}_{variant}")),
                        file: shared[d].clone(),
                        line: (10 + d * 7 + variant) as u32,
                        native,
                        origin: if native {
                            FileOrigin::Native
                        } else {
                            FileOrigin::of_path(&shared[d], None)
                        },
                    }
                })
                .collect()
        })
        .collect()
}

/// A typical target: 4 threads sampled at 100 Hz (one instant per tick, at a random point of
/// the period), 50 distinct 20-frame stacks, one GPU read 6 times a second whose readings
/// arrive in batches half a second late, a square wave of utilization (10% / 90%, period 2 s),
/// a sampling error now and then, and process events at the start.
pub struct Typical {
    rng: Rng,
    stacks: Vec<stackscope_event::Frames>,
    tick: u64,
    ticks: u64,
    queue: VecDeque<Event>,
    gpu_next: u64,
    gpu_pending: Vec<GpuSample>,
    started: bool,
}

pub const GPU_PERIOD_NS: u64 = SEC / 6;

impl Typical {
    pub fn new(secs: u64, seed: u64) -> Typical {
        Typical {
            rng: Rng::new(seed),
            stacks: stacks(50, 20).into_iter().map(Into::into).collect(),
            tick: 0,
            ticks: secs * 100,
            queue: VecDeque::new(),
            gpu_next: START + GPU_PERIOD_NS,
            gpu_pending: Vec::new(),
            started: false,
        }
    }

    fn thread(&self, index: u64) -> (u64, Option<u64>, Option<String>) {
        let names = ["MainThread", "loader-0", "loader-1", "pin_memory"];
        (
            0x7f00_0000_1000 + index * 0x1000,
            Some(4242 + index),
            Some(names[index as usize].to_string()),
        )
    }

    fn gpu_at(time: u64) -> GpuSample {
        let phase = ((time - START) / SEC) % 2;
        let utilization = if phase == 0 { 10.0 } else { 90.0 };
        GpuSample {
            time: Timestamp(time),
            device: 0,
            utilization: Some(utilization),
            memory_utilization: Some(utilization / 3.0),
            memory_used_bytes: Some(30_000_000_000 + (time % 1000) * 4096),
            memory_total_bytes: Some(85_899_345_920),
            power_watts: Some(100.0 + utilization * 3.0),
            sm_clock_mhz: Some(1980),
            throttle_reasons: Some(0),
            process_utilization: Some(utilization - 1.0),
            ..GpuSample::default()
        }
    }

    fn fill(&mut self) {
        if !self.started {
            self.started = true;
            self.queue.push_back(Event::Process(ProcessEvent {
                time: Timestamp(START),
                pid: 4242,
                command_line: "python train.py --epochs 90".into(),
                kind: ProcessEventKind::Attached,
                rank: Default::default(),
                how: None,
            }));
        }
        if self.tick >= self.ticks {
            return;
        }
        let tick_start = START + self.tick * 10 * MS;
        let now = tick_start + self.rng.below(10 * MS);
        // Readings taken until now, delivered every half second.
        while self.gpu_next <= now {
            self.gpu_pending.push(Typical::gpu_at(self.gpu_next));
            self.gpu_next += GPU_PERIOD_NS;
        }
        if self.tick % 50 == 49 {
            for s in self.gpu_pending.drain(..) {
                self.queue.push_back(Event::Gpu(s));
            }
        }
        for index in 0..4u64 {
            let (python_thread_id, os_thread_id, name) = self.thread(index);
            let (stack, active) = match index {
                0 => (self.rng.below(20) as usize, true),
                1 | 2 => (20 + self.rng.below(20) as usize, self.rng.below(2) == 0),
                _ => (40 + self.rng.below(10) as usize, self.rng.below(10) == 0),
            };
            self.queue.push_back(Event::Stack(StackSample {
                time: Timestamp(now),
                pid: 4242,
                thread: ThreadInfo {
                    os_thread_id,
                    python_thread_id,
                    name: name.map(Into::into),
                    active,
                    owns_gil: active && self.rng.below(2) == 0,
                },
                frames: self.stacks[stack].clone(),
            }));
        }
        if self.tick % 997 == 500 {
            self.queue.push_back(Event::SampleError(SampleError {
                time: Timestamp(now),
                pid: 4242,
                kind: SampleErrorKind::TornRead,
                message: "frame changed while it was read".into(),
            }));
        }
        self.tick += 1;
    }
}

impl Iterator for Typical {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        while self.queue.is_empty() {
            if self.tick >= self.ticks {
                return None;
            }
            self.fill();
        }
        self.queue.pop_front()
    }
}
