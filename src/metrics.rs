//! `--metrics-addr HOST:PORT`: Prometheus metrics at `/metrics`, for the cluster's monitoring
//! to see a hang on rank 517 without anyone logging in to its node.
//!
//! The consumer of the samples (the aggregator thread of `attach`, `top`'s loop, `watch`'s loop)
//! updates a [`Metrics`] behind a mutex, once per batch; the HTTP server (tiny_http) runs on its
//! own thread and only takes the lock to render the page. The sampler never sees either: it
//! goes on sending to its channel with `try_send`, whatever a scraper does.

mod memory;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use stackscope_aggregate::{
    is_hung, is_spin_wait, works_at_read, GpuTag, GpuTagger, ProcessMotion,
};
use stackscope_event::{Event, Frames, RankInfo, StackSample, Timestamp};

/// What `/metrics` shows, kept up to date by the consumer of the samples.
#[derive(Debug)]
pub struct MetricsState {
    host: String,
    hang_after_nanos: u64,
    /// When each process last moved, by the hang rule's own comparison.
    motion: ProcessMotion,
    /// Each process's rank, read once: its environment does not change.
    ranks: BTreeMap<u32, Option<u32>>,
    samples: u64,
    errors: u64,
    dropped: u64,
    /// The latest utilization of each GPU, for its gauge.
    gpu_utilization: BTreeMap<u32, f32>,
    /// The GPU state of each stack read, by the recording's own rule: stacks are held (as
    /// nothing else) until the readings covering them are in. `None` where the consumer tags
    /// the stacks itself and hands them over tagged (`top`, [`MetricsState::count_tagged`]).
    gpu: Option<GpuTagger<()>>,
    gpu_idle_samples: u64,
    /// Each process's memory and the job's memory cgroup, at their latest readings.
    memory: memory::MemoryGauges,
    /// Each process's read in progress: its instant (a read's stacks share it) and the threads
    /// read in it. A read of the process at a later instant completes it: the threads not in it
    /// ended, and their last stacks go.
    reads: BTreeMap<u32, (Timestamp, Vec<u64>)>,
}

impl MetricsState {
    /// A state that tags the stacks it is given itself.
    pub fn new(hang_after_secs: f64, idle_below: f32) -> MetricsState {
        MetricsState {
            gpu: Some(GpuTagger::new(idle_below)),
            ..MetricsState::told_tags(hang_after_secs)
        }
    }

    /// A state told each stack's GPU state by its consumer ([`MetricsState::count_tagged`]).
    pub fn told_tags(hang_after_secs: f64) -> MetricsState {
        MetricsState {
            host: stackscope_event::host_name().unwrap_or_default(),
            hang_after_nanos: (hang_after_secs * 1e9) as u64,
            motion: ProcessMotion::default(),
            ranks: BTreeMap::new(),
            samples: 0,
            errors: 0,
            dropped: 0,
            gpu_utilization: BTreeMap::new(),
            gpu: None,
            gpu_idle_samples: 0,
            memory: memory::MemoryGauges::default(),
            reads: BTreeMap::new(),
        }
    }

    /// Takes one event from the sample channel.
    pub fn observe(&mut self, event: &Event) {
        match event {
            Event::Stack(sample) => {
                let gpu_busy = self
                    .gpu
                    .as_ref()
                    .is_some_and(|gpu| gpu.tag_at(sample.time).idle() == Some(false));
                self.observe_stack(
                    sample.pid,
                    sample.thread.python_thread_id,
                    &sample.frames,
                    sample.time,
                    working(sample, gpu_busy),
                )
            }
            Event::SampleError(error) => {
                self.errors += 1;
                if let Some(gpu) = self.gpu.as_mut() {
                    gpu.observe(error.time);
                }
                self.count_gpu_idle();
            }
            Event::Gpu(sample) => {
                if let Some(u) = sample.utilization {
                    self.gpu_utilization.insert(sample.device, u);
                }
                self.memory.observe(event);
                if let Some(gpu) = self.gpu.as_mut() {
                    gpu.add_gpu(sample);
                }
                self.count_gpu_idle();
            }
            Event::Process(process) => {
                if process.kind == stackscope_event::ProcessEventKind::Exited {
                    self.forget(process.pid, process.time);
                }
            }
            Event::Memory(_) | Event::Cgroup(_) => self.memory.observe(event),
        }
    }

    /// One thread's stack at `time`, to be tagged here, and whether it works at this read
    /// (`works_at_read`): what `watch`, which reads stacks itself, calls directly.
    pub fn observe_stack(
        &mut self,
        pid: u32,
        thread: u64,
        frames: &Frames,
        time: Timestamp,
        working: bool,
    ) {
        self.count_stack(pid, thread, frames, time, working);
        if let Some(gpu) = self.gpu.as_mut() {
            gpu.hold(time, ());
        }
        self.count_gpu_idle();
    }

    /// A stack sample its consumer has tagged: `top`, whose table tags each sample once.
    pub fn count_tagged(&mut self, sample: &StackSample, tag: GpuTag) {
        self.count_stack(
            sample.pid,
            sample.thread.python_thread_id,
            &sample.frames,
            sample.time,
            working(sample, tag.idle() == Some(false)),
        );
        self.gpu_idle_samples += u64::from(tag == GpuTag::Idle);
    }

    fn count_stack(
        &mut self,
        pid: u32,
        thread: u64,
        frames: &Frames,
        time: Timestamp,
        working: bool,
    ) {
        self.samples += 1;
        // A stack read before its process exited, handed over after the exit (`top` hands its
        // stacks over once the GPU readings covering them are in): the process is gone, and
        // its gauges must not come back.
        if self.memory.is_late(pid, time) {
            return;
        }
        self.ranks
            .entry(pid)
            .or_insert_with(|| RankInfo::of_process(pid).rank);
        self.note_read(pid, thread, time);
        self.motion.sample(pid, thread, frames, time, working);
    }

    /// Thread `thread` of `pid` was read at `time`: a read at a later instant completes the
    /// one before, and the threads not in it ended (`watch`, which reads whole processes
    /// itself, says so too: [`MetricsState::keep_threads`]).
    fn note_read(&mut self, pid: u32, thread: u64, time: Timestamp) {
        let read = self.reads.entry(pid).or_insert_with(|| (time, Vec::new()));
        if time > read.0 {
            let (at, alive) = std::mem::replace(read, (time, vec![thread]));
            self.motion.keep_threads(pid, &alive, at);
        } else if time == read.0 && !read.1.contains(&thread) {
            read.1.push(thread);
        }
    }

    /// Whether a thread of the job kept working since it last moved: busy, not stuck.
    pub fn any_working(&self) -> bool {
        self.motion.any_working()
    }

    /// After a full read of process `pid` found threads `alive`: those that ended moved.
    pub fn keep_threads(&mut self, pid: u32, alive: &[u64], time: Timestamp) {
        self.motion.keep_threads(pid, alive, time);
    }

    /// When the job last moved (a stack changed, a thread or process came or went).
    pub fn last_move(&self) -> Option<Timestamp> {
        self.motion.last_move()
    }

    /// The GPU readings and the rule that tag stacks here; `None` for a state told the tags.
    pub fn gpu(&self) -> Option<&GpuTagger<()>> {
        self.gpu.as_ref()
    }

    /// A process the consumer no longer follows, since `time`.
    pub fn forget(&mut self, pid: u32, time: Timestamp) {
        self.motion.forget(pid, time);
        self.ranks.remove(&pid);
        self.reads.remove(&pid);
        self.memory.forget(pid, time);
    }

    pub fn add_errors(&mut self, errors: u64) {
        self.errors += errors;
    }

    /// Events the producers could not send (counted by them; set as a total).
    pub fn set_dropped(&mut self, dropped: u64) {
        self.dropped = dropped;
    }

    /// Counts the held stacks whose GPU state is now known.
    fn count_gpu_idle(&mut self) {
        let idle = &mut self.gpu_idle_samples;
        if let Some(gpu) = self.gpu.as_mut() {
            gpu.release(|_, (), tag| *idle += u64::from(tag == GpuTag::Idle));
        }
    }

    /// The counters of the page: name, help and value.
    fn counters(&self) -> [(&'static str, &'static str, u64); 4] {
        [
            (
                "stackscope_samples_total",
                "Thread stacks read.",
                self.samples,
            ),
            (
                "stackscope_sampling_errors_total",
                "Stack reads that failed (torn reads, threads that ended mid-read).",
                self.errors,
            ),
            (
                "stackscope_dropped_samples_total",
                "Samples dropped because the aggregator fell behind.",
                self.dropped,
            ),
            (
                "stackscope_gpu_idle_samples_total",
                "Thread stacks read while the GPUs' mean utilization was below --idle-below (counted \
                 once the readings covering them are in).",
                self.gpu_idle_samples,
            ),
        ]
    }

    /// The page, in Prometheus's text exposition format (version 0.0.4).
    pub fn render(&self, now: Timestamp) -> String {
        let mut out = String::new();
        let header = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
        };
        let labels = |pid: u32| {
            let rank = self.ranks.get(&pid).copied().flatten();
            format!(
                "pid=\"{pid}\",rank=\"{}\",host=\"{}\"",
                rank.map(|r| r.to_string()).unwrap_or_default(),
                escape(&self.host)
            )
        };
        header(
            &mut out,
            "stackscope_hung",
            "gauge",
            "1 while no thread of the process has changed its Python stack for --hang-after \
             seconds and none keeps using CPU outside a wait (busy in compiled code is working), \
             whatever its GPU does (a rank stuck in a collective keeps it busy), else 0.",
        );
        for (pid, moved_at) in self.motion.processes() {
            let unchanged = now.0.saturating_sub(moved_at.0);
            let hung = is_hung(unchanged, self.hang_after_nanos, self.motion.working(pid));
            let _ = writeln!(out, "stackscope_hung{{{}}} {}", labels(pid), u8::from(hung));
        }
        header(
            &mut out,
            "stackscope_stack_unchanged_seconds",
            "gauge",
            "Seconds since any thread of the process last changed its stack.",
        );
        for (pid, moved_at) in self.motion.processes() {
            let unchanged = now.0.saturating_sub(moved_at.0) as f64 / 1e9;
            let _ = writeln!(
                out,
                "stackscope_stack_unchanged_seconds{{{}}} {unchanged:.3}",
                labels(pid)
            );
        }
        for (name, help, value) in self.counters() {
            header(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {value}");
        }
        header(
            &mut out,
            "stackscope_gpu_utilization_percent",
            "gauge",
            "The latest utilization of each GPU, in percent.",
        );
        for (gpu, u) in &self.gpu_utilization {
            let _ = writeln!(
                out,
                "stackscope_gpu_utilization_percent{{gpu=\"{gpu}\"}} {u}"
            );
        }
        self.memory.render(&mut out, &labels);
        out
    }
}

/// Whether a sample finds its thread working (`works_at_read`), with the GPU busy or not at
/// its instant.
fn working(sample: &StackSample, gpu_busy: bool) -> bool {
    let spin_wait = sample
        .frames
        .iter()
        .any(|f| is_spin_wait(&f.function, f.native));
    works_at_read(
        sample.thread.active,
        sample.thread.owns_gil,
        spin_wait,
        gpu_busy,
    )
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The state shared between the consumer and the server.
pub type SharedMetrics = Arc<Mutex<MetricsState>>;

/// A poisoned lock still holds consistent counters: take it as it is.
pub fn lock(metrics: &SharedMetrics) -> MutexGuard<'_, MetricsState> {
    metrics
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How long `attach` and `top` (which have no `--hang-after`) wait before a process counts as
/// hung in `stackscope_hung`: the hang rule's default.
pub use stackscope_aggregate::DEFAULT_HANG_AFTER_SECS;

/// The metrics and their server, when `--metrics-addr` asked for them. The server stops when
/// this is dropped.
pub struct MetricsEndpoint {
    pub state: SharedMetrics,
    _server: Option<MetricsServer>,
}

impl MetricsEndpoint {
    /// The state and its server when `addr` asks for them.
    pub fn start(
        addr: Option<&str>,
        hang_after_secs: f64,
        idle_below: f32,
    ) -> anyhow::Result<Option<MetricsEndpoint>> {
        addr.map(|addr| {
            MetricsEndpoint::serve(Some(addr), MetricsState::new(hang_after_secs, idle_below))
        })
        .transpose()
    }

    /// Shares `state`, and serves it where `addr` says: a consumer that keeps the state for
    /// itself too (`watch` reads its hang rule and GPU state from it).
    pub fn serve(addr: Option<&str>, state: MetricsState) -> anyhow::Result<MetricsEndpoint> {
        let state = Arc::new(Mutex::new(state));
        let server = match addr {
            Some(addr) => {
                let server = MetricsServer::start(addr, state.clone())?;
                eprintln!("stackscope: Prometheus metrics at http://{addr}/metrics");
                Some(server)
            }
            None => None,
        };
        Ok(MetricsEndpoint {
            state,
            _server: server,
        })
    }
}

/// The HTTP server's thread; dropping it stops the server.
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` and serves `metrics` at `/metrics`.
    pub fn start(addr: &str, metrics: SharedMetrics) -> anyhow::Result<MetricsServer> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("cannot serve metrics on {addr}"))?;
        let server = Arc::new(server);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let server = server.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("stackscope-metrics".into())
                .spawn(move || serve(&server, &metrics, &stop))
                .context("cannot start the metrics thread")?
        };
        Ok(MetricsServer {
            stop,
            server,
            thread: Some(thread),
        })
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(server: &tiny_http::Server, metrics: &SharedMetrics, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let request = match server.recv_timeout(Duration::from_millis(500)) {
            Ok(Some(request)) => request,
            Ok(None) => continue,
            Err(_) => break,
        };
        let path = request.url().split('?').next().unwrap_or("");
        let response = if path == "/metrics" {
            let body = lock(metrics).render(Timestamp::now());
            tiny_http::Response::from_string(body)
                .with_header(content_type("text/plain; version=0.0.4; charset=utf-8"))
        } else {
            tiny_http::Response::from_string("stackscope: metrics are at /metrics\n")
                .with_status_code(404)
                .with_header(content_type("text/plain; charset=utf-8"))
        };
        // A scraper that hung up is its own problem.
        let _ = request.respond(response);
    }
}

fn content_type(value: &str) -> tiny_http::Header {
    tiny_http::Header {
        field: "Content-Type"
            .parse()
            .unwrap_or_else(|_| unreachable!("a valid header name")),
        value: value
            .parse()
            .unwrap_or_else(|_| unreachable!("a valid header value")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(line: u32) -> Frames {
        vec![stackscope_event::Frame::python("step", "train.py", line)].into()
    }

    fn secs(s: u64) -> Timestamp {
        Timestamp(s * 1_000_000_000)
    }

    #[test]
    fn a_process_whose_stacks_stand_still_is_hung() {
        let mut m = MetricsState::new(10.0, 30.0);
        m.host = "node-a".into();
        m.observe_stack(1, 1, &frames(3), secs(0), false);
        m.observe_stack(2, 1, &frames(3), secs(0), false);
        m.observe_stack(3, 1, &frames(3), secs(0), true);
        for s in 1..=12 {
            m.observe_stack(1, 1, &frames(3), secs(s), false);
            m.observe_stack(2, 1, &frames(3 + (s as u32 % 2)), secs(s), false);
            // One frozen line, always running in compiled code: working.
            m.observe_stack(3, 1, &frames(3), secs(s), true);
        }
        let page = m.render(secs(12));
        assert!(
            page.contains("stackscope_hung{pid=\"3\",rank=\"\",host=\"node-a\"} 0\n"),
            "busy is not stuck: {page}"
        );
        assert!(
            page.contains("stackscope_hung{pid=\"1\",rank=\"\",host=\"node-a\"} 1\n"),
            "{page}"
        );
        assert!(page.contains("stackscope_hung{pid=\"2\",rank=\"\",host=\"node-a\"} 0\n"));
        assert!(page.contains(
            "stackscope_stack_unchanged_seconds{pid=\"1\",rank=\"\",host=\"node-a\"} 12.000\n"
        ));
        assert!(page.contains("stackscope_samples_total 39\n"));
        assert!(page.contains("# TYPE stackscope_samples_total counter\n"));
    }

    #[test]
    fn a_busy_gpu_does_not_veto_a_hang_and_idle_samples_are_counted() {
        let mut m = MetricsState::new(1.0, 30.0);
        let reading = |time, utilization| {
            Event::Gpu(stackscope_event::GpuSample {
                time,
                device: 0,
                utilization: Some(utilization),
                ..Default::default()
            })
        };
        m.observe_stack(1, 1, &frames(3), secs(0), false);
        m.observe(&reading(secs(4), 95.0));
        m.observe(&reading(secs(5), 95.0));
        // Stuck for 5 s with the GPU busy: hung (the NCCL signature), not vetoed.
        assert!(m
            .render(secs(5))
            .contains("stackscope_hung{pid=\"1\",rank=\"\",host=\""));
        assert!(
            m.render(secs(5)).contains("\"} 1\n"),
            "{}",
            m.render(secs(5))
        );
        // The stack at 5 s waits for the reading covering it (5 s to 6 s): idle.
        m.observe_stack(1, 1, &frames(3), Timestamp(5_000_000_001), false);
        assert!(m
            .render(secs(5))
            .contains("stackscope_gpu_idle_samples_total 0\n"));
        m.observe(&reading(secs(6), 5.0));
        let page = m.render(secs(6));
        assert!(
            page.contains("stackscope_gpu_idle_samples_total 1\n"),
            "{page}"
        );
        assert!(page.contains("stackscope_gpu_utilization_percent{gpu=\"0\"} 5\n"));
        assert!(page.contains("stackscope_hung{pid=\"1\""));
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    /// A thread that ended leaves nothing behind (its last stack goes at the read that finds
    /// it gone), nor does a process that exited: none of its labelled gauges, not even after
    /// a stack read before its exit comes late; nor a process whose memory is no longer read.
    #[test]
    fn what_ended_leaves_no_gauge_and_no_state_behind() {
        let mut m = MetricsState::told_tags(10.0);
        let worker_stack = frames(7);
        m.observe_stack(1, 1, &frames(3), secs(1), false);
        m.observe_stack(1, 2, &worker_stack, secs(1), true);
        assert_eq!(
            std::sync::Arc::strong_count(&worker_stack),
            2,
            "kept while it lives"
        );
        for s in 2..=3 {
            m.observe_stack(1, 1, &frames(3), secs(s), false);
        }
        assert_eq!(
            std::sync::Arc::strong_count(&worker_stack),
            1,
            "let go when it ended"
        );
        // A process whose memory is read, whose end nobody tells.
        m.observe(&stackscope_testkit::events::rss_event(secs(1), 50, 1 << 20));
        let exit = Event::Process(stackscope_event::ProcessEvent {
            time: secs(4),
            pid: 1,
            command_line: String::new(),
            kind: stackscope_event::ProcessEventKind::Exited,
            rank: Default::default(),
            how: None,
        });
        m.observe(&exit);
        let late = StackSample {
            time: Timestamp(3_500_000_000),
            pid: 1,
            thread: stackscope_testkit::events::thread(1, Some(1), Some("MainThread"), true),
            frames: frames(3),
        };
        m.count_tagged(&late, GpuTag::Unknown);
        // Another process lives on, its memory read for 15 s.
        for tenth in 10..160 {
            let t = Timestamp(tenth * 100_000_000);
            m.observe_stack(2, 1, &frames(4), t, true);
            m.observe(&stackscope_testkit::events::rss_event(t, 2, 1 << 20));
        }
        let page = m.render(secs(16));
        assert!(!page.contains("pid=\"1\""), "{page}");
        assert!(!page.contains("pid=\"50\""), "{page}");
        assert!(page.contains("stackscope_hung{pid=\"2\""), "{page}");
        assert!(m.ranks.keys().eq([&2]) && m.reads.keys().eq([&2]));
    }
}
