//! Processes that end: what they held leaves the live tables, a few are kept whole, the others
//! are folded by kind, and however many come and go the tables hold what is alive plus a fixed
//! number of ended ones.

use stackscope_event::{
    Event, HowEnded, OomEvidence, ProcessEvent, ProcessEventKind, StackSample, Timestamp,
};
use stackscope_testkit::events::{self, SEC};

use super::ended::{KEPT_LARGEST, KEPT_NOTABLE, KEPT_RECENT};
use super::tests::{growth_in, meta, Proc, Sim};
use super::MemoryFindingKind;
use crate::fold::{AggregateConfig, Aggregator};

const MB: u64 = 1_000_000;
const PARENT: u32 = 100;
const WORKER_COMMAND: &str = "python -c from multiprocessing.spawn import spawn_main; \
                              spawn_main(tracker_fd=5, pipe_handle=11) --multiprocessing-fork";

fn aggregator() -> Aggregator {
    let config = AggregateConfig {
        gpu_enabled: false,
        process_root: true,
        ..AggregateConfig::default()
    };
    Aggregator::new(config, Timestamp(0))
}

/// Hands `event` to the aggregator, and a process event to memory too: what the aggregator
/// does with `Event::Process` (told twice, it counts once). Without `told`, memory hears of no
/// process event: processes the sampler does not follow.
fn feed(agg: &mut Aggregator, event: Event, told: bool) {
    let process = match &event {
        Event::Process(p) if told => Some(p.clone()),
        _ => None,
    };
    agg.handle(event);
    if let Some(p) = process {
        agg.memory.process_event(&p, &mut agg.buckets);
    }
}

fn exited(time: Timestamp, pid: u32, how: Option<HowEnded>) -> Event {
    Event::Process(ProcessEvent {
        how,
        ..match events::process(time, pid, WORKER_COMMAND, ProcessEventKind::Exited) {
            Event::Process(e) => e,
            _ => unreachable!("a process event"),
        }
    })
}

fn stack(time: Timestamp, pid: u32, function: &str) -> Event {
    let thread = events::thread(1, Some(u64::from(pid)), Some("MainThread"), true);
    events::stack(
        time,
        pid,
        &thread,
        &[(function, "job.py", 40), ("main", "job.py", 5)],
    )
}

/// A job whose parent lives throughout and starts `per_sec` workers a second, each living
/// `life_ms`, for `secs`: memory read at 10 Hz, stacks at 20 Hz; worker `k` is pid
/// `1000 + k`. Every event in time order.
fn churn(secs: u64, per_sec: u64, life_ms: u64) -> Vec<Event> {
    let mut out: Vec<(u64, u8, Event)> = Vec::new();
    let workers = secs * per_sec;
    let start_of = |k: u64| k * 1000 / per_sec;
    out.push((
        0,
        0,
        events::process(
            Timestamp(0),
            PARENT,
            "python train.py",
            ProcessEventKind::Attached,
        ),
    ));
    for k in 0..workers {
        let (from, to) = (start_of(k), start_of(k) + life_ms);
        let pid = 1000 + k as u32;
        let ms = |t: u64| Timestamp(t * 1_000_000);
        out.push((
            from,
            0,
            events::process(ms(from), pid, WORKER_COMMAND, ProcessEventKind::Attached),
        ));
        out.push((to, 3, exited(ms(to), pid, None)));
        // Every worker grows a little while it lives; some grow higher than others.
        let peak = 50 * MB + (k % 7) * MB;
        for t in (from.div_ceil(100) * 100..to).step_by(100) {
            let rss = peak * (t - from + 100) / (life_ms + 100);
            out.push((t, 1, events::rss_event(ms(t), pid, rss)));
        }
        for t in (from.div_ceil(50) * 50..to).step_by(50) {
            out.push((t + 3, 2, stack(ms(t + 3), pid, "load_batch")));
        }
    }
    for t in (0..secs * 1000).step_by(100) {
        let ms = Timestamp(t * 1_000_000);
        out.push((t, 1, events::rss_event(ms, PARENT, 900 * MB)));
        out.push((
            t + 3,
            2,
            stack(Timestamp(ms.0 + 3_000_000), PARENT, "train_step"),
        ));
    }
    out.sort_by_key(|(t, order, _)| (*t, *order));
    out.into_iter().map(|(_, _, e)| e).collect()
}

/// Two new workers a second, each living a second, for ten minutes: 1,200 processes. With or
/// without their exit events, the tables hold the live ones and a fixed number of ended ones.
#[test]
fn under_process_churn_memory_keeps_what_is_alive_and_a_fixed_number_of_the_ended() {
    for exits in [true, false] {
        let mut agg = aggregator();
        let mut most_live = 0;
        for event in churn(600, 2, 1000) {
            let time = events_time(&event);
            feed(&mut agg, event, exits);
            if time.0.is_multiple_of(10 * SEC) {
                let entries = agg.memory.process_entries();
                most_live = most_live.max(entries.live);
                // Live: the parent and the workers of the last seconds (without exit events,
                // those not read for 10 s are still taken as alive).
                let bound = if exits { 4 } else { 24 };
                assert!(entries.live <= bound, "{exits}: {entries:?}");
                assert!(entries.matching <= bound, "{exits}: {entries:?}");
                assert!(entries.identities <= 4, "{exits}: {entries:?}");
                assert!(
                    entries.kept_ended <= KEPT_RECENT + KEPT_LARGEST + KEPT_NOTABLE,
                    "{entries:?}"
                );
                assert!(entries.folded_kinds <= 1, "{entries:?}");
            }
        }
        agg.finish();
        let entries = agg.memory.process_entries();
        assert!(entries.gpu == 0 && entries.folded_kinds == 1, "{entries:?}");
        let memory = agg.summary(&meta(PARENT)).memory.expect("memory read");
        let ended = memory.processes_ended;
        assert!(ended >= 1_150, "{exits}: {ended} ended");
        assert_eq!(
            ended,
            memory.processes_folded + (memory.processes.len() as u64 - 1 - live_workers(&agg)),
            "every ended process is kept whole or folded"
        );
        assert_eq!(memory.folded.len(), 1, "{:?}", memory.folded);
        let kind = &memory.folded[0];
        assert_eq!(kind.processes, memory.processes_folded);
        // The largest are kept whole: those folded peaked lower.
        let kept_peak = memory
            .processes
            .iter()
            .filter(|p| p.pid != PARENT)
            .map(|p| p.rss_peak)
            .max()
            .unwrap_or(0);
        assert!(kind.rss_peak <= kept_peak, "{kind:?}, {kept_peak}");
        assert!(kind.rss_peak >= kind.rss_peak_mean && kind.rss_peak_mean > 40 * MB);
        // The command line comes with the process's attach event, whether its exit is told
        // or found by the poller.
        assert!(
            kind.kind.contains("tracker_fd=N, pipe_handle=N"),
            "{kind:?}"
        );
        // The chart and the CSV: the live ones and the ended kept whole.
        let pids: std::collections::BTreeSet<u32> =
            agg.memory_points().iter().map(|p| p.pid).collect();
        assert_eq!(pids.len(), memory.processes.len());
        // Nothing of the growth is lost: every worker's was charged while it lived.
        assert!(growth_in(&agg, "load_batch") > 1_000 * 40 * MB);
        // Folding is a cap reached, and said.
        let caps = agg.memory.caps_reached(10_000);
        assert!(
            caps.iter().any(|c| c.contains("folded by kind")),
            "{caps:?}"
        );
        assert!(most_live >= 2);
    }
}

fn events_time(event: &Event) -> Timestamp {
    match event {
        Event::Stack(StackSample { time, .. }) => *time,
        Event::Memory(m) => m.time,
        Event::Process(p) => p.time,
        Event::Gpu(g) => g.time,
        Event::Cgroup(c) => c.time,
        Event::SampleError(e) => e.time,
    }
}

/// Workers alive at the end (listed in `processes`, not ended).
fn live_workers(agg: &Aggregator) -> u64 {
    agg.memory.processes.by_pid.len() as u64 - 1
}

/// A worker that ends leaves the live tables at once: its series, its GPU memory, its command
/// and its matching of growth to stacks; what it was stays in the summary, the CSV and the
/// growth charged to its function.
#[test]
fn an_ended_process_leaves_the_live_tables_and_stays_in_the_outputs() {
    let mut worker = Proc::growing(101, 200 * MB, 30e6, "augment");
    worker.gpu = Some(Box::new(|_| 500 * MB));
    worker.ended = Some((6.0, HowEnded::Exited(0)));
    let mut parent = Proc::flat(PARENT, 900 * MB, "train_step");
    parent.gpu = Some(Box::new(|_| 4_000 * MB));
    let sim = Sim::new(12.0, vec![parent, worker]);
    let mut agg = aggregator();
    for (_, event) in sim.events() {
        feed(&mut agg, event, true);
    }
    let entries = agg.memory.process_entries();
    assert_eq!(
        (
            entries.live,
            entries.gpu,
            entries.matching,
            entries.identities,
            entries.kept_ended
        ),
        (1, 1, 1, 1, 1),
        "{entries:?}"
    );
    agg.finish();
    let memory = agg.summary(&meta(PARENT)).memory.expect("memory read");
    let pids: Vec<u32> = memory.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [PARENT, 101]);
    let worker = &memory.processes[1];
    assert_eq!(worker.gpu_memory_peak, Some(500 * MB));
    assert!((worker.last_secs - 5.9).abs() < 0.05, "{worker:?}");
    assert_eq!((memory.processes_ended, memory.processes_folded), (1, 0));
    assert!(agg
        .memory_points()
        .iter()
        .any(|p| p.pid == 101 && p.gpu_memory == Some(500 * MB)));
    let grown = (sim.procs[1].rss)(5.9) - 200 * MB;
    let charged = growth_in(&agg, "augment");
    assert!(charged.abs_diff(grown) <= 3_000_000, "{charged} of {grown}");
}

/// A reading of a process taken before its end may come after its exit event: it is a late
/// one of it, not a new process. Its pid taken by a new process later is that process, and
/// what was kept under the pid is folded.
#[test]
fn a_late_reading_is_the_ended_process_and_a_pid_reused_is_another() {
    let mut agg = aggregator();
    let at = |s: u64| Timestamp(s * SEC);
    feed(
        &mut agg,
        events::process(at(0), 7, "python w.py 1", ProcessEventKind::Attached),
        true,
    );
    for s in 0..5 {
        feed(&mut agg, events::rss_event(at(s), 7, (10 + s) * MB), true);
    }
    feed(&mut agg, exited(at(5), 7, None), true);
    feed(
        &mut agg,
        events::rss_event(Timestamp(at(5).0 - 1), 7, 99 * MB),
        true,
    );
    // A zombie's reading: no memory.
    feed(&mut agg, events::rss_event(at(7), 7, 0), true);
    let entries = agg.memory.process_entries();
    assert_eq!((entries.live, entries.kept_ended), (0, 1), "{entries:?}");
    assert_eq!(
        agg.memory.ended.kept(7).map(|p| p.rss.peak),
        Some(99 * MB),
        "the late reading is its last"
    );
    // Much later, the pid is another process's.
    feed(&mut agg, events::rss_event(at(60), 7, 5 * MB), true);
    let entries = agg.memory.process_entries();
    assert_eq!((entries.live, entries.kept_ended), (1, 0), "{entries:?}");
    assert_eq!((agg.memory.ended.ended, agg.memory.ended.folded), (1, 1));
}

/// A worker the OOM killer ended stays whole among hundreds that end after it, and the verdict
/// still names it with its climb.
#[test]
fn an_oom_killed_process_outlives_the_churn_in_the_verdict() {
    let mut agg = aggregator();
    let mut events: Vec<Event> = Vec::new();
    let at = |ms: u64| Timestamp(ms * 1_000_000);
    events.push(events::process(
        at(0),
        9,
        "python victim.py",
        ProcessEventKind::Attached,
    ));
    for t in (0..9_000).step_by(100) {
        events.push(events::rss_event(at(t), 9, 100 * MB + t * 20_000));
        events.push(stack(at(t + 3), 9, "grow"));
    }
    events.push(exited(
        at(9_000),
        9,
        Some(HowEnded::OomKilled(OomEvidence::Cgroup(1))),
    ));
    for event in events {
        feed(&mut agg, event, true);
    }
    for event in churn(300, 2, 1000) {
        let shifted = shift(event, 10 * SEC);
        feed(&mut agg, shifted, true);
    }
    agg.finish();
    assert!(agg.memory.ended.folded > 400, "{}", agg.memory.ended.folded);
    let memory = agg.summary(&meta(PARENT)).memory.expect("memory read");
    let oom: Vec<_> = memory
        .verdict
        .iter()
        .filter(|f| f.kind == MemoryFindingKind::OomKilled)
        .collect();
    assert_eq!(oom.len(), 1, "{:?}", memory.verdict);
    assert_eq!(oom[0].pid, 9);
    assert_eq!(oom[0].from_bytes, 100 * MB);
    assert_eq!(oom[0].top_function.as_deref(), Some("grow (job.py:40)"));
}

/// The same event, `by` nanoseconds later.
fn shift(event: Event, by: u64) -> Event {
    let later = |t: Timestamp| Timestamp(t.0 + by);
    match event {
        Event::Stack(mut s) => {
            s.time = later(s.time);
            Event::Stack(s)
        }
        Event::Memory(mut m) => {
            m.time = later(m.time);
            Event::Memory(m)
        }
        Event::Process(mut p) => {
            p.time = later(p.time);
            Event::Process(p)
        }
        other => other,
    }
}
