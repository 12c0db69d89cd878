//! The verdict's rules over shapes generated from parameters: rates, durations and process
//! counts across their ranges, not one fixture's figures.

use stackscope_event::{HowEnded, OomEvidence};

use super::tests::{meta, Proc, Sim};
use super::{MemoryFinding, MemoryFindingKind};
use crate::fold::Aggregator;

const MB: u64 = 1_000_000;

fn findings(agg: &Aggregator, target: u32) -> Vec<MemoryFinding> {
    agg.summary(&meta(target))
        .memory
        .map(|m| m.verdict)
        .unwrap_or_default()
}

fn kinds(findings: &[MemoryFinding]) -> Vec<MemoryFindingKind> {
    findings.iter().map(|f| f.kind).collect()
}

/// A small deterministic wobble in [-1, 1]: an allocator's and a reader's noise.
fn wobble(t: f64, seed: u32) -> f64 {
    ((t * 7.3 + f64::from(seed)).sin() + (t * 2.9 + f64::from(seed) * 1.7).sin()) / 2.0
}

#[test]
fn steady_growth_in_one_process_is_called_a_leak_with_its_rate_and_function() {
    for (i, &rate) in [2e6, 7e6, 23e6, 48e6, 150e6].iter().enumerate() {
        for (j, &secs) in [10.0, 20.0, 45.0, 90.0].iter().enumerate() {
            // Siblings vary with the case rather than multiply the cases.
            for &siblings in &[[0u32, 2, 8][(i + j) % 3]] {
                let mut procs = vec![Proc::flat(100, 1_500 * MB, "train_step")];
                for i in 0..siblings {
                    let mut s = Proc::flat(200 + i, 300 * MB, "decode");
                    s.rss = Box::new(move |t| (300.0e6 + 5e6 * wobble(t, i)) as u64);
                    procs.push(s);
                }
                let start = 400 * MB;
                let mut leaking = Proc::growing(150, start, rate, "augment");
                leaking.rss =
                    Box::new(move |t| (start as f64 + rate * t + 1e6 * wobble(t, 99)) as u64);
                procs.push(leaking);
                let mut sim = Sim::new(secs, procs);
                sim.stack_hz = 50.0;
                let agg = sim.run();
                let found = findings(&agg, 100);
                let case = format!("{rate} B/s for {secs} s beside {siblings}: {found:?}");
                // Below the floors (32 MiB, a tenth of its start) it is not worth a line.
                let grew = rate * secs;
                if grew < 0.9 * 40e6 {
                    assert!(found.is_empty(), "{case}");
                    continue;
                }
                assert_eq!(kinds(&found), [MemoryFindingKind::Leak], "{case}");
                let leak = &found[0];
                assert_eq!(leak.pid, 150, "{case}");
                assert!(
                    (leak.growth_bytes_per_s / rate - 1.0).abs() < 0.05,
                    "{case}"
                );
                assert_eq!(
                    leak.top_function.as_deref(),
                    Some("augment (job.py:40)"),
                    "{case}"
                );
                assert!(leak.top_function_share.is_some_and(|s| s > 0.95), "{case}");
                assert!(
                    leak.text.contains("leak") && leak.text.contains("augment"),
                    "{case}"
                );
                assert!(
                    leak.secs_to_limit.is_none() && !leak.text.contains("limit"),
                    "{case}"
                );
            }
        }
    }
}

#[test]
fn a_leak_says_when_it_reaches_the_cgroups_limit() {
    for &(rate, limit) in &[(48e6, 4_000 * MB), (9e6, 16_000 * MB)] {
        let mut sim = Sim::new(
            20.0,
            vec![
                Proc::flat(1, 800 * MB, "step"),
                Proc::growing(2, 1_000 * MB, rate, "augment"),
            ],
        );
        sim.limit = Some(limit);
        let agg = sim.run();
        let found = findings(&agg, 1);
        assert_eq!(kinds(&found), [MemoryFindingKind::Leak]);
        let usage = 800.0e6 + 1_000.0e6 + rate * 20.0;
        let expected = (limit as f64 - usage) / rate;
        let secs = found[0].secs_to_limit.expect("a limit");
        assert!((secs / expected - 1.0).abs() < 0.05, "{secs} vs {expected}");
        assert!(
            found[0].text.contains("limit in about"),
            "{}",
            found[0].text
        );
    }
}

#[test]
fn a_leak_that_frees_its_memory_as_it_exits_is_still_a_leak_at_its_rate() {
    for &(rate, secs) in &[(16e6, 8.0), (35e6, 13.0)] {
        // Its last reading, as it exits, is back at its start.
        let mut p = Proc::growing(4, 15 * MB, rate, "grow_cache");
        p.rss = Box::new(move |t| {
            if t >= secs - 0.01 {
                16 * MB
            } else {
                15 * MB + (rate * t) as u64
            }
        });
        let agg = Sim::new(secs, vec![p]).run();
        let memory = agg.summary(&meta(4)).memory.expect("memory read");
        assert_eq!(kinds(&memory.verdict), [MemoryFindingKind::Leak]);
        let named = memory.processes[0].growth_bytes_per_s;
        assert!((named / rate - 1.0).abs() < 0.02, "{named} vs {rate}");
        assert_eq!(memory.processes[0].rss_end, 16 * MB);
    }
}

#[test]
fn slow_growth_over_a_long_recording_is_a_leak_too() {
    // Half a megabyte a second for half an hour: 900 MB, the series thinned on the way.
    let mut sim = Sim::new(
        1_800.0,
        vec![Proc::growing(8, 1_000 * MB, 0.5e6, "cache_put")],
    );
    sim.stack_hz = 5.0;
    let agg = sim.run();
    let found = findings(&agg, 8);
    assert_eq!(kinds(&found), [MemoryFindingKind::Leak], "{found:?}");
    assert!(found[0].text.contains("30 min"), "{}", found[0].text);
}

#[test]
fn memory_that_does_not_climb_steadily_says_nothing() {
    type Shape = (&'static str, Box<dyn Fn(f64) -> u64>);
    let shapes = |secs: f64| -> Vec<Shape> {
        vec![
            ("flat", Box::new(|_| 700 * MB)),
            ("noise", Box::new(|t| (700e6 + 40e6 * wobble(t, 3)) as u64)),
            // A dataset loaded at some point, then flat.
            (
                "one step",
                Box::new(move |t| {
                    if t < secs * 0.45 {
                        300 * MB
                    } else {
                        1_800 * MB
                    }
                }),
            ),
            (
                "warm-up",
                Box::new(move |t| (300e6 + 1.2e9 * (t / (secs * 0.2)).min(1.0)) as u64),
            ),
            // A sawtooth: a buffer filled and released.
            (
                "sawtooth",
                Box::new(|t| 500 * MB + ((t % 4.0) * 100e6) as u64),
            ),
            // Too slow to matter.
            ("slow", Box::new(|t| 700 * MB + (t * 50e3) as u64)),
            // Steady but small against the process: 0.3% of 20 GB.
            ("small", Box::new(|t| 20_000 * MB + (t * 3e6) as u64)),
        ]
    };
    for &secs in &[8.0, 20.0, 60.0] {
        for (name, rss) in shapes(secs) {
            let mut p = Proc::flat(3, 0, "work");
            p.rss = rss;
            let agg = Sim::new(secs, vec![p]).run();
            let found = findings(&agg, 3);
            assert!(found.is_empty(), "{name} over {secs} s: {found:?}");
        }
    }
    // Steady and fast, but too short to tell.
    let agg = Sim::new(3.0, vec![Proc::growing(3, 100 * MB, 50e6, "f")]).run();
    assert!(findings(&agg, 3).is_empty());
}

/// A forked worker that shares `shared` with its parent at the start and copies `copied` of
/// it over `secs`, its resident memory flat.
fn cow_worker(pid: u32, base: u64, shared: u64, copied: f64, secs: f64) -> Proc {
    let mut p = Proc::flat(pid, base + shared, "__getitem__");
    p.smaps = Some(Box::new(move |t| {
        let moved = (shared as f64 * copied * (t / secs).min(1.0)) as u64;
        (base + moved, shared - moved)
    }));
    p
}

#[test]
fn forked_workers_copying_their_parents_pages_are_copy_on_write_not_leaks() {
    for &workers in &[1u32, 2, 4, 7] {
        for &(shared, copied) in &[(300 * MB, 0.4), (1_200 * MB, 0.9), (5_000 * MB, 0.25)] {
            for &secs in &[10.0, 40.0] {
                // The parent's pages turn private as its workers copy them: the same shape
                // seen from the other side, not its own copy-on-write.
                let mut parent = cow_worker(10, 200 * MB, shared, copied, secs);
                parent.runs = Box::new(|_| Some("train_step"));
                let mut procs = vec![parent];
                for i in 0..workers {
                    procs.push(cow_worker(11 + i, 30 * MB, shared, copied, secs));
                }
                let mut sim = Sim::new(secs, procs);
                // What they ran says nothing here.
                sim.stack_hz = 10.0;
                let agg = sim.run();
                let found = findings(&agg, 10);
                let case =
                    format!("{workers} workers sharing {shared} copying {copied}: {found:?}");
                assert_eq!(kinds(&found), [MemoryFindingKind::CopyOnWrite], "{case}");
                let cow = &found[0];
                assert_eq!(
                    cow.pids,
                    (0..workers).map(|i| 11 + i).collect::<Vec<_>>(),
                    "{case}"
                );
                assert_eq!(cow.pid, 11);
                assert!(!cow.pids.contains(&10), "{case}");
                assert!(cow.text.contains("copy-on-write") && cow.text.contains("not a leak"));
                assert!(cow.text.contains("arrays"), "{case}");
            }
        }
    }
}

#[test]
fn a_leak_in_a_forked_worker_is_a_leak_not_copy_on_write() {
    // Its private memory grows, and its resident memory with it.
    let shared = 800 * MB;
    let mut leaking = Proc::growing(21, 30 * MB + shared, 20e6, "augment");
    leaking.smaps = Some(Box::new(move |t| (30 * MB + (20e6 * t) as u64, shared)));
    let agg = Sim::new(20.0, vec![Proc::flat(20, 1_000 * MB, "step"), leaking]).run();
    assert_eq!(kinds(&findings(&agg, 20)), [MemoryFindingKind::Leak]);
}

#[test]
fn resident_growth_in_shared_pages_is_neither() {
    // A memory-mapped dataset read: resident and shared memory grow, private stays.
    let mut reader = Proc::growing(31, 200 * MB, 30e6, "read_shard");
    reader.smaps = Some(Box::new(|t| (150 * MB, 50 * MB + (30e6 * t) as u64)));
    let agg = Sim::new(20.0, vec![reader]).run();
    assert!(findings(&agg, 31).is_empty(), "{:?}", findings(&agg, 31));
}

#[test]
fn gpu_memory_that_climbs_is_named() {
    for &rate in &[5e6, 40e6] {
        for &secs in &[15.0, 60.0] {
            let mut trainer = Proc::flat(50, 2_000 * MB, "train_step");
            trainer.gpu = Some(Box::new(move |t| (3e9 + rate * t) as u64));
            let mut other = Proc::flat(51, 2_000 * MB, "train_step");
            // The caching allocator finding its size, then flat.
            other.gpu = Some(Box::new(move |t| (3e9 + 2e9 * (t / 2.0).min(1.0)) as u64));
            let agg = Sim::new(secs, vec![trainer, other]).run();
            let found = findings(&agg, 50);
            let case = format!("{rate} B/s for {secs} s: {found:?}");
            assert_eq!(kinds(&found), [MemoryFindingKind::GpuGrowth], "{case}");
            assert_eq!(found[0].pid, 50, "{case}");
            assert!(
                (found[0].growth_bytes_per_s / rate - 1.0).abs() < 0.05,
                "{case}"
            );
            assert!(found[0].text.contains("GPU memory"), "{case}");
            assert_eq!(found[0].secs_to_limit, None, "no total read: {case}");
        }
    }
}

#[test]
fn gpu_memory_that_climbs_says_when_the_gpu_is_full() {
    for &(rate, secs, total_gb) in &[(40e6, 20.0, 80u64), (250e6, 12.0, 24), (8e6, 40.0, 141)] {
        let start = 6e9;
        let mut trainer = Proc::flat(50, 2_000 * MB, "train_step");
        trainer.gpu = Some(Box::new(move |t| (start + rate * t) as u64));
        let mut sim = Sim::new(secs, vec![trainer]);
        let total = total_gb * 1_000 * MB;
        sim.gpu_total = Some(total);
        let found = findings(&sim.run(), 50);
        let case = format!("{rate} B/s for {secs} s on {total_gb} GB: {found:?}");
        assert_eq!(kinds(&found), [MemoryFindingKind::GpuGrowth], "{case}");
        let left = total as f64 - (start + rate * secs);
        let expected = left / rate;
        let said = found[0].secs_to_limit.expect("a time to full");
        assert!(
            (said / expected - 1.0).abs() < 0.05,
            "{said} vs {expected}: {case}"
        );
        assert!(found[0].text.contains("fills the GPU's"), "{case}");
    }
}

#[test]
fn a_process_killed_by_the_oom_killer_is_named_with_its_climb() {
    for &(rate, killed_at) in &[(60e6, 9.0), (15e6, 25.0)] {
        let mut victim = Proc::growing(61, 150 * MB, rate, "grow");
        victim.ended = Some((killed_at, HowEnded::OomKilled(OomEvidence::Cgroup(1))));
        let mut sim = Sim::new(30.0, vec![Proc::flat(60, 500 * MB, "step"), victim]);
        sim.limit = Some(2_000 * MB);
        let agg = sim.run();
        let found = findings(&agg, 60);
        assert_eq!(kinds(&found), [MemoryFindingKind::OomKilled], "{found:?}");
        let oom = &found[0];
        assert_eq!(oom.pid, 61);
        assert_eq!(oom.from_bytes, 150 * MB);
        assert!(
            (oom.growth_bytes_per_s / rate - 1.0).abs() < 0.05,
            "{oom:?}"
        );
        assert_eq!(oom.top_function.as_deref(), Some("grow (job.py:40)"));
        assert!(
            oom.text.contains("OOM killer") && oom.text.contains("grow"),
            "{}",
            oom.text
        );
    }
}

#[test]
fn flat_memory_says_nothing() {
    for &processes in &[1u32, 5, 17] {
        let procs = (0..processes)
            .map(|i| {
                let mut p = Proc::flat(70 + i, 100 * MB * u64::from(i + 1), "work");
                p.rss = Box::new(move |t| (1e8 * f64::from(i + 1) + 2e6 * wobble(t, i)) as u64);
                p.smaps = Some(Box::new(move |_| (50 * MB, 50 * MB)));
                p.gpu = Some(Box::new(|_| 4_000 * MB));
                p
            })
            .collect();
        let mut sim = Sim::new(30.0, procs);
        sim.limit = Some(64_000 * MB);
        let agg = sim.run();
        let memory = agg.summary(&meta(70)).memory.expect("memory read");
        assert!(memory.verdict.is_empty(), "{:?}", memory.verdict);
        assert_eq!(memory.processes.len(), processes as usize);
    }
}
