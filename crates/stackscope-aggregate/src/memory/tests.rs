//! Memory over synthetic jobs fed to a real aggregator as the channel delivers them: each
//! memory reading at once, stacks in the sampler's 250 ms batches (so a reading comes before
//! the stacks of its interval), the cgroup and GPU readings at once.

use stackscope_event::{
    CgroupSample, Event, GpuSample, HowEnded, MemorySample, ProcessEvent, ProcessEventKind,
    ProcessGpuMemory, Timestamp,
};
use stackscope_testkit::events::{self, SEC};

use crate::fold::{AggregateConfig, Aggregator, Limits, StackView};
use crate::RecordingMeta;

/// A level over time (seconds since the start): bytes.
pub(super) type Curve = Box<dyn Fn(f64) -> u64>;
/// Private and shared memory over time.
pub(super) type Smaps = Box<dyn Fn(f64) -> (u64, u64)>;

/// One process of a synthetic job.
pub(super) struct Proc {
    pub pid: u32,
    pub command: &'static str,
    /// Its resident memory.
    pub rss: Curve,
    /// Its private and shared memory, read with every fifth reading.
    pub smaps: Option<Smaps>,
    /// Its GPU memory, listed with every GPU reading.
    pub gpu: Option<Curve>,
    /// The innermost function of its main thread at `t`; `None` when it waits (its samples
    /// are not kept).
    pub runs: Box<dyn Fn(f64) -> Option<&'static str>>,
    /// When it ended, and how: no readings or stacks after.
    pub ended: Option<(f64, HowEnded)>,
}

impl Proc {
    /// A process at `rss` bytes throughout, running `function`.
    pub fn flat(pid: u32, rss: u64, function: &'static str) -> Proc {
        Proc {
            pid,
            command: "python3 job.py",
            rss: Box::new(move |_| rss),
            smaps: None,
            gpu: None,
            runs: Box::new(move |_| Some(function)),
            ended: None,
        }
    }

    /// A process growing `rate` bytes a second from `start`, running `function`.
    pub fn growing(pid: u32, start: u64, rate: f64, function: &'static str) -> Proc {
        Proc {
            rss: Box::new(move |t| start + (rate * t) as u64),
            ..Proc::flat(pid, start, function)
        }
    }
}

/// A synthetic job and how it is recorded.
pub(super) struct Sim {
    pub procs: Vec<Proc>,
    pub secs: f64,
    pub memory_hz: f64,
    pub stack_hz: f64,
    /// The cgroup's limit; the cgroup is read when set (usage: the processes' sum).
    pub limit: Option<u64>,
    /// The GPU's total memory; its readings then say it, and the processes' sum as used.
    pub gpu_total: Option<u64>,
    /// How much later than their time the memory readings arrive.
    pub reading_delay_ms: u64,
    /// `--subprocesses`: process roots and the process table.
    pub process_root: bool,
    pub limits: Limits,
}

impl Sim {
    pub fn new(secs: f64, procs: Vec<Proc>) -> Sim {
        Sim {
            procs,
            secs,
            memory_hz: 10.0,
            stack_hz: 100.0,
            limit: None,
            gpu_total: None,
            reading_delay_ms: 0,
            process_root: true,
            limits: Limits::default(),
        }
    }

    /// Every event with when it arrives.
    pub(super) fn events(&self) -> Vec<(u64, Event)> {
        let mut out: Vec<(u64, Event)> = Vec::new();
        let alive = |p: &Proc, t: f64| p.ended.as_ref().is_none_or(|(end, _)| t < *end);
        for p in &self.procs {
            out.push((
                0,
                events::process(Timestamp(0), p.pid, p.command, ProcessEventKind::Attached),
            ));
            if let Some((end, how)) = &p.ended {
                let time = Timestamp((end * SEC as f64) as u64);
                let event = Event::Process(ProcessEvent {
                    how: Some(*how),
                    ..match events::process(time, p.pid, p.command, ProcessEventKind::Exited) {
                        Event::Process(e) => e,
                        _ => unreachable!("a process event"),
                    }
                });
                out.push((time.0, event));
            }
        }
        let readings = (self.secs * self.memory_hz) as u64;
        for k in 0..=readings {
            let t = k as f64 / self.memory_hz;
            let time = Timestamp((t * SEC as f64) as u64);
            let arrives = time.0 + self.reading_delay_ms * 1_000_000;
            let mut usage = 0;
            let mut listed = Vec::new();
            for p in self.procs.iter().filter(|p| alive(p, t)) {
                let rss = (p.rss)(t);
                usage += rss;
                let smaps = p.smaps.as_ref().filter(|_| k % 5 == 0).map(|f| f(t));
                out.push((
                    arrives,
                    Event::Memory(MemorySample {
                        time,
                        pid: p.pid,
                        rss_bytes: rss,
                        private_bytes: smaps.map(|s| s.0),
                        shared_bytes: smaps.map(|s| s.1),
                        swap_bytes: smaps.map(|_| 0),
                    }),
                ));
                if let Some(gpu) = &p.gpu {
                    listed.push(ProcessGpuMemory {
                        pid: p.pid,
                        bytes: gpu(t),
                    });
                }
            }
            if let Some(limit) = self.limit {
                out.push((
                    time.0,
                    Event::Cgroup(CgroupSample {
                        time,
                        usage_bytes: usage,
                        limit_bytes: Some(limit),
                        oom_kills: Some(3),
                    }),
                ));
            }
            if !listed.is_empty() {
                out.push((
                    time.0,
                    Event::Gpu(GpuSample {
                        compute_pids: Some(listed.iter().map(|p| p.pid).collect()),
                        memory_total_bytes: self.gpu_total,
                        memory_used_bytes: self
                            .gpu_total
                            .map(|_| listed.iter().map(|p| p.bytes).sum()),
                        process_memory: listed,
                        ..events::gpu(time, 0, 50.0)
                    }),
                ));
            }
        }
        self.stacks(&mut out, &alive);
        out.sort_by_key(|(arrives, _)| *arrives);
        out
    }

    /// Every process's main thread at `stack_hz`, 3 ms off the readings, in 250 ms batches.
    fn stacks(&self, out: &mut Vec<(u64, Event)>, alive: &dyn Fn(&Proc, f64) -> bool) {
        const BATCH: u64 = 250_000_000;
        let ticks = (self.secs * self.stack_hz) as u64;
        for j in 0..ticks {
            let t = j as f64 / self.stack_hz + 0.003;
            let time = Timestamp((t * SEC as f64) as u64);
            let arrives = (time.0 / BATCH + 1) * BATCH;
            for p in self.procs.iter().filter(|p| alive(p, t)) {
                let runs = (p.runs)(t);
                let thread = events::thread(
                    1,
                    Some(u64::from(p.pid)),
                    Some("MainThread"),
                    runs.is_some(),
                );
                let inner = runs.unwrap_or("wait");
                let frames = [(inner, "job.py", 40), ("main", "job.py", 5)];
                out.push((arrives, events::stack(time, p.pid, &thread, &frames)));
            }
        }
    }

    /// The job recorded, finished.
    pub fn run(&self) -> Aggregator {
        let mut agg = self.fed();
        agg.finish();
        agg
    }

    /// The job recorded, not finished: a checkpoint's view.
    pub fn fed(&self) -> Aggregator {
        let config = AggregateConfig {
            gpu_enabled: false,
            process_root: self.process_root,
            ..AggregateConfig::default()
        };
        let mut agg = Aggregator::with_limits(config, Timestamp(0), self.limits);
        for (_, event) in self.events() {
            agg.handle(event);
        }
        agg
    }
}

pub(super) fn meta(pid: u32) -> RecordingMeta {
    RecordingMeta {
        pid,
        rank: Default::default(),
        host: None,
        command_line: "python3 job.py".to_owned(),
        python_version: "3.12.1".to_owned(),
        reader: "stackscope".to_owned(),
        started_at: String::new(),
        duration_secs: 0.0,
        rate_hz: 100.0,
        ticks: 0,
        dropped: 0,
        late_ticks: 0,
        max_lateness_ms: 0.0,
        target_exited: false,
        exit_status: None,
        exit_signal: None,
        gpu_devices: Vec::new(),
        gpu_unavailable: None,
        notices: Vec::new(),
        cpus_usable: None,
    }
}

/// The growth charged to stacks whose innermost frame is `function`.
pub(super) fn growth_in(agg: &Aggregator, function: &str) -> u64 {
    let table = agg.stack_table();
    agg.memory_growth()
        .iter()
        .filter(|&&(stack, _)| {
            table.stacks().get(stack as usize).is_some_and(|s| {
                table
                    .folded_stack(s)
                    .ends_with(&format!(";{function} (job.py:40)"))
            })
        })
        .map(|&(_, bytes)| bytes)
        .sum()
}

const MB: u64 = 1_000_000;

#[test]
fn growth_is_charged_to_the_stacks_of_the_process_that_grew() {
    // The worker grows 30 MB/s in `augment`; its parent and a sibling stay flat, busy in
    // functions of their own.
    let sim = Sim::new(
        12.0,
        vec![
            Proc::flat(100, 900 * MB, "train_step"),
            Proc::growing(101, 200 * MB, 30e6, "augment"),
            Proc::flat(102, 200 * MB, "decode"),
        ],
    );
    let agg = sim.run();
    let growth = agg.memory_growth();
    let total: u64 = growth.iter().map(|g| g.1).sum();
    let grown = (sim.procs[1].rss)(12.0) - 200 * MB;
    assert_eq!(total, grown);
    assert_eq!(growth_in(&agg, "augment"), grown);
    let summary = agg.summary(&meta(100)).memory.expect("memory read");
    assert_eq!(summary.growth_unattributed_bytes, 0);
    // The page's window view holds the same bytes.
    let in_buckets: u64 = agg
        .time_buckets()
        .sorted()
        .iter()
        .flat_map(|(_, b)| b.growth.values())
        .sum();
    assert_eq!(in_buckets, grown);
}

#[test]
fn growth_is_split_by_the_samples_of_each_stack_in_the_interval() {
    // Three samples in `parse` for one in `resize`, every interval.
    let mut worker = Proc::growing(7, 100 * MB, 10e6, "");
    worker.runs = Box::new(|t| {
        if ((t * 100.0) as u64).is_multiple_of(4) {
            Some("resize")
        } else {
            Some("parse")
        }
    });
    let agg = Sim::new(8.0, vec![worker]).run();
    let (parse, resize) = (growth_in(&agg, "parse"), growth_in(&agg, "resize"));
    let share = parse as f64 / (parse + resize) as f64;
    assert!((share - 0.75).abs() < 0.01, "{share}");
}

#[test]
fn growth_with_no_kept_sample_is_unattributed() {
    let mut waiting = Proc::growing(9, 100 * MB, 20e6, "");
    waiting.runs = Box::new(|_| None);
    let agg = Sim::new(6.0, vec![waiting]).run();
    assert!(agg.memory_growth().is_empty());
    let summary = agg.summary(&meta(9)).memory.expect("memory read");
    assert_eq!(summary.growth_unattributed_bytes, 120 * MB);
}

#[test]
fn readings_that_arrive_after_their_stacks_still_match_by_time() {
    for delay_ms in [0, 180, 700, 1_900] {
        // Flat while the first readings are on their way, then 25 MB/s for 6 s.
        let mut grower = Proc::flat(2, 100 * MB, "grow");
        grower.rss = Box::new(|t| 100 * MB + (25e6 * (t - 2.0).max(0.0)) as u64);
        let mut sim = Sim::new(8.0, vec![Proc::flat(1, 500 * MB, "step"), grower]);
        sim.reading_delay_ms = delay_ms;
        let agg = sim.run();
        assert_eq!(growth_in(&agg, "grow"), 150 * MB, "delay {delay_ms} ms");
        assert_eq!(growth_in(&agg, "step"), 0, "delay {delay_ms} ms");
    }
}

#[test]
fn a_checkpoint_counts_growth_still_waiting_for_its_stacks() {
    let sim = Sim::new(3.0, vec![Proc::growing(2, 100 * MB, 25e6, "grow")]);
    let waiting = sim.fed();
    let finished = sim.run();
    assert_eq!(growth_in(&waiting, "grow"), growth_in(&finished, "grow"));
}

#[test]
fn memory_stays_bounded_on_long_recordings_with_exact_start_peak_and_end() {
    // Three hours at 10 Hz: 108 000 readings, a spike at 1 h.
    let mut p = Proc::growing(5, 2_000 * MB, 50e3, "run");
    p.rss = Box::new(|t| {
        let base = 2_000 * MB + (50e3 * t) as u64;
        if (t - 3600.0).abs() < 0.05 {
            base + 3_000 * MB
        } else {
            base
        }
    });
    let mut sim = Sim::new(3.0 * 3600.0, vec![p]);
    sim.stack_hz = 0.5;
    let agg = sim.run();
    let points = agg.memory_points();
    assert!(
        points.len() <= super::timeline::MAX_POINTS_PER_PROCESS + 2,
        "{}",
        points.len()
    );
    assert!(
        points.iter().any(|p| p.rss >= 5_000 * MB),
        "the spike is drawn"
    );
    let summary = agg.summary(&meta(5)).memory.expect("memory read");
    let process = &summary.processes[0];
    assert_eq!(process.rss_start, 2_000 * MB);
    assert!(process.rss_peak >= 5_000 * MB);
    assert_eq!(process.rss_end, 2_000 * MB + (50e3 * 3.0 * 3600.0) as u64);
    assert!(
        (process.growth_bytes_per_s - 50e3).abs() < 1e3,
        "{}",
        process.growth_bytes_per_s
    );
    assert_eq!(points.last().map(|p| p.rss), Some(process.rss_end));
}

#[test]
fn processes_past_the_cap_drop_the_least_recently_read_and_say_so() {
    let procs = (0..20)
        .map(|i| Proc::flat(1000 + i, 50 * MB, "work"))
        .collect();
    let mut sim = Sim::new(2.0, procs);
    sim.limits = Limits {
        max_processes: 8,
        ..Limits::default()
    };
    let agg = sim.run();
    let summary = agg.summary(&meta(1000)).memory.expect("memory read");
    assert!(summary.processes.len() <= 8, "{}", summary.processes.len());
    assert!(
        agg.caps_reached().iter().any(|c| c.contains("memory")),
        "{:?}",
        agg.caps_reached()
    );
}

#[test]
fn points_carry_roles_and_the_gpu_memory_of_the_latest_gpu_reading() {
    let mut trainer = Proc::flat(40, 3_000 * MB, "train_step");
    trainer.gpu = Some(Box::new(|t| 1_000 * MB + (t * 10.0) as u64 * MB));
    let mut worker = Proc::flat(41, 300 * MB, "");
    worker.runs = Box::new(|_| Some("_worker_loop"));
    let sim = Sim::new(2.0, vec![trainer, worker]);
    let agg = sim.run();
    let points = agg.memory_points();
    let at = |pid: u32, secs: f64| {
        points
            .iter()
            .find(|p| p.pid == pid && (p.secs - secs).abs() < 1e-6)
            .cloned()
            .expect("a point")
    };
    assert_eq!(at(40, 1.0).role, "main");
    assert_eq!(at(40, 1.0).gpu_memory, Some(1_010 * MB));
    assert_eq!(at(41, 1.0).gpu_memory, None);
    // The worker's frame is not torch's DataLoader loop (not its file): a plain worker.
    assert_eq!(at(41, 1.0).role, "worker");
    let summary = agg.summary(&meta(40)).memory.expect("memory read");
    let trainer = summary
        .processes
        .iter()
        .find(|p| p.pid == 40)
        .expect("trainer");
    assert_eq!(trainer.gpu_memory_peak, Some(1_020 * MB));
}

#[test]
fn the_cgroup_counts_kills_during_the_recording_and_its_peak() {
    let mut sim = Sim::new(3.0, vec![Proc::growing(3, 100 * MB, 10e6, "f")]);
    sim.limit = Some(4_000 * MB);
    let agg = sim.run();
    let points = agg.cgroup_points();
    assert_eq!(points.len(), 31);
    assert_eq!(points[0].limit, Some(4_000 * MB));
    let cgroup = agg
        .summary(&meta(3))
        .memory
        .and_then(|m| m.cgroup)
        .expect("cgroup");
    assert_eq!(cgroup.usage_peak, 130 * MB);
    // Three kills counted before the recording, none during it.
    assert_eq!(cgroup.oom_kills, 0);
}

#[test]
fn nothing_of_memory_without_readings() {
    let agg = Sim {
        memory_hz: 0.000_001,
        ..Sim::new(1.0, vec![Proc::flat(1, 1, "f")])
    };
    // One reading at 0 only: a process read once, flat, nothing to say.
    let agg = agg.run();
    let summary = agg.summary(&meta(1)).memory.expect("one reading");
    assert!(summary.verdict.is_empty());
    let empty = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    assert!(empty.summary(&meta(1)).memory.is_none());
    assert!(empty.memory_points().is_empty());
    assert!(empty.folded(StackView::All).is_empty());
}

#[test]
fn roles_are_the_jobs_names_for_its_processes() {
    let config = AggregateConfig {
        gpu_enabled: false,
        process_root: true,
        ..AggregateConfig::default()
    };
    let mut agg = Aggregator::new(config, Timestamp(0));
    let loader = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py";
    let main = events::thread(1, Some(1), Some("MainThread"), true);
    for (pid, command) in [
        (10, "python3 train.py"),
        (11, "python3 train.py"),
        (12, "python3 train.py"),
    ] {
        agg.handle(events::process(
            Timestamp(0),
            pid,
            command,
            ProcessEventKind::Attached,
        ));
    }
    agg.handle(Event::Process(ProcessEvent {
        rank: stackscope_event::RankInfo {
            rank: Some(3),
            ..Default::default()
        },
        ..match events::process(
            Timestamp(0),
            13,
            "python3 train.py",
            ProcessEventKind::Attached,
        ) {
            Event::Process(e) => e,
            _ => unreachable!("a process event"),
        }
    }));
    for t in 0..20u64 {
        let time = Timestamp(t * 100_000_000);
        for pid in [10, 11, 12, 13] {
            agg.handle(Event::Memory(MemorySample {
                time,
                pid,
                rss_bytes: 100 * MB,
                ..MemorySample::default()
            }));
        }
        let at = Timestamp(time.0 + 5_000_000);
        agg.handle(events::stack(
            at,
            10,
            &main,
            &[("train_step", "train.py", 9)],
        ));
        for pid in [11, 12] {
            agg.handle(events::stack(
                at,
                pid,
                &main,
                &[("_worker_loop", loader, 300)],
            ));
        }
    }
    agg.finish();
    let roles: std::collections::BTreeMap<u32, String> = agg
        .memory_points()
        .into_iter()
        .map(|p| (p.pid, p.role))
        .collect();
    assert_eq!(roles[&10], "main");
    assert_eq!(roles[&11], "DataLoader worker 0");
    assert_eq!(roles[&12], "DataLoader worker 1");
    assert_eq!(roles[&13], "rank 3");
    let summary = agg.summary(&meta(10)).memory.expect("memory read");
    let named: Vec<(u32, &str)> = summary
        .processes
        .iter()
        .map(|p| (p.pid, p.role.as_str()))
        .collect();
    assert!(named.contains(&(11, "DataLoader worker 0")), "{named:?}");
}
