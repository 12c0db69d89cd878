//! The verdict on memory: what there is to say about the job's processes, one rule each.
//!
//! - **OOM killed**: a process of the job the kernel's OOM killer ended, with its climb.
//! - **Steady growth** ([`MemoryFindingKind::Leak`]): a process whose resident memory rose all
//!   along the recording, not in one step, fast enough and far enough to matter, and in its
//!   own pages (not pages it maps with others).
//! - **Copy-on-write** in forked workers: private memory growing out of what a process shared
//!   with its parent while its resident memory stays where it was.
//! - **GPU memory that climbs**: the steady-growth rule over a process's GPU memory.
//!
//! Flat memory says nothing. The thresholds are about what a process does, each with why.

use stackscope_event::Timestamp;

use super::series::{rising_segments, trend, Fit, Level, Trend};
use super::text::{duration, range, rate, size};
use super::timeline::{Cgroup, GpuProcess, ProcessState};
use super::{MemoryFinding, MemoryFindingKind};

/// A line must explain this share of the level's variance (R²): one step halfway through (a
/// dataset loaded, a cache filled once) reaches 0.75 at best; a ramp under an allocator's
/// noise stays above 0.95.
pub(crate) const STEADY_MIN_EXPLAINED: f64 = 0.8;
/// The recording is cut into this many equal stretches ...
pub(crate) const STEADY_SEGMENTS: usize = 5;
/// ... and the level must rise in this many of them: growth all along (even stepwise, an
/// allocation every few seconds), not once or twice.
pub(crate) const STEADY_MIN_RISING: usize = 4;
/// Fewer readings, or a shorter span, cannot tell a climb from the allocator's and the
/// reader's noise (5 s is 50 readings at the default 10 Hz).
pub(crate) const STEADY_MIN_READINGS: u64 = 10;
pub(crate) const STEADY_MIN_SECS: f64 = 5.0;

/// Resident growth slower than this (360 MB an hour) takes days to use up the headroom of a
/// training host: not worth a line, however steady.
pub(crate) const LEAK_MIN_RATE: f64 = 100e3;
/// A process must grow by this share of its size at the start: less is its working set
/// settling (caches, allocator arenas filling), which every process does.
pub(crate) const LEAK_MIN_GROWTH_SHARE: f64 = 0.10;
/// And by this much at all: less is within one allocator arena, of no consequence anywhere.
pub(crate) const LEAK_MIN_GROWTH: u64 = 32 << 20;
/// Its private memory must account for this share of its resident growth where
/// `smaps_rollup` was read: resident growth in pages mapped with others (a memory-mapped
/// dataset read, a parent's pages faulted in) is not the process's own.
pub(crate) const LEAK_MIN_PRIVATE_SHARE: f64 = 0.5;

/// GPU memory growth slower than this takes days to fill a device: not worth a line.
pub(crate) const GPU_MIN_RATE: f64 = 100e3;
/// PyTorch's caching allocator reserves in segments of up to tens of MB: growth of a few
/// segments is the cache finding its size, not a climb.
pub(crate) const GPU_MIN_GROWTH: u64 = 64 << 20;
/// No floor against the process's own size on the GPU: its start is mostly weights and the
/// cache, which say nothing of how soon the device fills, and a steady climb past the floors
/// above is tensors kept alive whatever the size it started at.
pub(crate) const GPU_MIN_GROWTH_SHARE: f64 = 0.0;

/// A forked worker shares much with its parent at its first `smaps_rollup` reading: a bare
/// interpreter's fork shares some 10 MB, one holding a dataset hundreds.
pub(crate) const COW_MIN_SHARED: u64 = 64 << 20;
/// Its private memory grows by at least this ...
pub(crate) const COW_MIN_PRIVATE_GROWTH: u64 = 32 << 20;
/// ... and by this share of what it shared: a large part of the parent's pages copied.
pub(crate) const COW_MIN_SHARE_OF_SHARED: f64 = 0.2;
/// Its resident memory grows by at most this share of its private growth: a copied page
/// replaces a shared one in its resident set, which stays where it was.
pub(crate) const COW_MAX_RSS_SHARE: f64 = 0.25;
/// Its shared memory falls by at least this share of its private growth: the pages moved.
pub(crate) const COW_MIN_SHARED_DROP: f64 = 0.5;
/// How many pids a copy-on-write line names before "and N more".
const COW_PIDS_NAMED: usize = 8;

/// One process as the verdict reads it.
#[derive(Debug, Clone)]
pub(crate) struct Judged<'a> {
    pub pid: u32,
    pub role: String,
    /// Whether it forks the job's workers (the target, the trainer's process, a rank's).
    pub parent: bool,
    /// Its resident memory, when it was read.
    pub rss: Option<&'a ProcessState>,
    pub gpu: Option<&'a GpuProcess>,
    /// The function that ran most while it grew, and its share of its charged growth.
    pub top: Option<(String, f64)>,
    /// When the OOM killer ended it.
    pub oom_killed: Option<Timestamp>,
}

/// What the verdict reads.
#[derive(Debug, Clone)]
pub(crate) struct VerdictInput<'a> {
    /// The recording's start: times are said from it.
    pub start: Timestamp,
    /// Readings before this are a `record`'s start-up, left out of the climbs judged.
    pub since: Option<Timestamp>,
    pub processes: Vec<Judged<'a>>,
    pub cgroup: Option<&'a Cgroup>,
    /// The GPU's memory at its latest reading, `(total, used)`, where one GPU was polled: what a
    /// process whose GPU memory climbs has left before the allocator fails.
    pub gpu_memory: Option<(u64, u64)>,
}

/// A level's climb over the readings judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Climb {
    pub rate: f64,
    pub from: u64,
    pub to: u64,
    pub secs: f64,
}

/// Floors a steady climb must pass.
#[derive(Debug, Clone, Copy)]
struct Floors {
    rate: f64,
    growth: u64,
    share: f64,
}

/// Every finding, OOM kills first, then by kind, the fastest first within a kind.
pub(crate) fn verdict(input: &VerdictInput<'_>) -> Vec<MemoryFinding> {
    let mut out: Vec<MemoryFinding> = input
        .processes
        .iter()
        .filter_map(|p| oom_killed(input, p))
        .collect();
    let mut leaks: Vec<MemoryFinding> = input
        .processes
        .iter()
        .filter(|p| p.oom_killed.is_none())
        .filter_map(|p| leak(input, p))
        .collect();
    by_rate(&mut leaks);
    out.extend(leaks);
    out.extend(copy_on_write(input));
    let mut gpu: Vec<MemoryFinding> = input
        .processes
        .iter()
        .filter_map(|p| gpu_growth(input, p))
        .collect();
    by_rate(&mut gpu);
    out.extend(gpu);
    out
}

fn by_rate(findings: &mut [MemoryFinding]) {
    findings.sort_by(|a, b| {
        b.growth_bytes_per_s
            .total_cmp(&a.growth_bytes_per_s)
            .then(a.pid.cmp(&b.pid))
    });
}

/// The steady climb of a level, judged over its trend ([`trend`]: from `since` on, without
/// the fall at a process's exit). How far it went is the line's (rate × time): one reading
/// at either end says little.
fn steady_climb<T: Level>(
    points: &[T],
    fit: &Fit,
    since: Option<Timestamp>,
    floors: Floors,
) -> Option<Climb> {
    let Trend { points, fit } = trend(points, fit, since)?;
    let (first, last) = (points.first()?, points.last()?);
    let secs = last.time().seconds_since(first.time());
    let rate = fit.slope()?;
    let grew = rate * secs;
    let steady = fit.readings() >= STEADY_MIN_READINGS
        && secs >= STEADY_MIN_SECS
        && fit.explained()? >= STEADY_MIN_EXPLAINED
        && rising_segments(points, STEADY_SEGMENTS) >= STEADY_MIN_RISING;
    let far = grew >= floors.growth as f64 && grew >= floors.share * first.level() as f64;
    (steady && far && rate >= floors.rate).then_some(Climb {
        rate,
        from: first.level(),
        to: last.level(),
        secs,
    })
}

/// Whether the verdict may speak of a process by its own figures alone: a steady climb of its
/// resident or GPU memory, pages copied from its parent. One that ended is then kept whole
/// ([`super::ended`]), so that what is found of it outlives it.
pub(crate) fn may_speak_of(rss: &ProcessState, gpu: Option<&GpuProcess>) -> bool {
    let leak = Floors {
        rate: LEAK_MIN_RATE,
        growth: LEAK_MIN_GROWTH,
        share: LEAK_MIN_GROWTH_SHARE,
    };
    let climbs_on_gpu = |g: &GpuProcess| {
        let floors = Floors {
            rate: GPU_MIN_RATE,
            growth: GPU_MIN_GROWTH,
            share: GPU_MIN_GROWTH_SHARE,
        };
        steady_climb(&g.points(), &g.fit, None, floors).is_some()
    };
    steady_climb(&rss.points(), &rss.fit, None, leak).is_some()
        || copied(rss).is_some()
        || gpu.is_some_and(climbs_on_gpu)
}

/// Steady growth of a process's resident memory, in its own pages.
fn leak(input: &VerdictInput<'_>, p: &Judged<'_>) -> Option<MemoryFinding> {
    let state = p.rss?;
    let floors = Floors {
        rate: LEAK_MIN_RATE,
        growth: LEAK_MIN_GROWTH,
        share: LEAK_MIN_GROWTH_SHARE,
    };
    let climb = steady_climb(&state.points(), &state.fit, input.since, floors)?;
    if let (Some(a), Some(b)) = (state.smaps_first, state.smaps_last) {
        let private = b.private?.saturating_sub(a.private?) as f64;
        let resident = b.rss.saturating_sub(a.rss) as f64;
        if b.time > a.time && resident > 0.0 && private < LEAK_MIN_PRIVATE_SHARE * resident {
            return None;
        }
    }
    let limit = input.cgroup.and_then(|c| Some((c.limit()?, c.last.usage)));
    let secs_to_limit = limit.map(|(limit, usage)| limit.saturating_sub(usage) as f64 / climb.rate);
    let mut text = format!(
        "pid {} ({}) grew {} for {} ({}){}: steady growth, like a leak (or a cache without \
         bound)",
        p.pid,
        p.role,
        rate(climb.rate),
        duration(climb.secs),
        range(climb.from, climb.to),
        ran_while(p.top.as_ref()),
    );
    if let (Some((limit, _)), Some(secs)) = (limit, secs_to_limit) {
        if secs > 0.0 {
            text.push_str(&format!(
                "; at this rate it reaches the cgroup's {} limit in about {}",
                size(limit),
                duration(secs)
            ));
        } else {
            text.push_str(&format!("; the cgroup is at its {} limit", size(limit)));
        }
    }
    Some(finding(
        MemoryFindingKind::Leak,
        p,
        climb,
        secs_to_limit,
        text,
    ))
}

/// ` while it ran `f (a.py:1)` (91% of its growth)`, or nothing.
fn ran_while(top: Option<&(String, f64)>) -> String {
    top.map_or_else(String::new, |(function, share)| {
        format!(
            " while it ran `{function}` ({:.0}% of its growth)",
            share * 100.0
        )
    })
}

fn finding(
    kind: MemoryFindingKind,
    p: &Judged<'_>,
    climb: Climb,
    secs_to_limit: Option<f64>,
    text: String,
) -> MemoryFinding {
    MemoryFinding {
        kind,
        pid: p.pid,
        role: p.role.clone(),
        pids: vec![p.pid],
        growth_bytes_per_s: climb.rate,
        from_bytes: climb.from,
        to_bytes: climb.to,
        secs: climb.secs,
        top_function: p.top.as_ref().map(|t| t.0.clone()),
        top_function_share: p.top.as_ref().map(|t| t.1),
        secs_to_limit,
        text,
    }
}

/// A process the OOM killer ended: its climb from its first reading to its last.
fn oom_killed(input: &VerdictInput<'_>, p: &Judged<'_>) -> Option<MemoryFinding> {
    let at = p.oom_killed?;
    let when = at.seconds_since(input.start).max(0.0);
    let head = format!(
        "pid {} ({}) was killed by the OOM killer at {when:.1} s",
        p.pid, p.role
    );
    let Some(state) = p.rss else {
        let text = format!("{head}; its memory was not read");
        let climb = Climb {
            rate: 0.0,
            from: 0,
            to: 0,
            secs: 0.0,
        };
        return Some(finding(MemoryFindingKind::OomKilled, p, climb, None, text));
    };
    let secs = state.last.time.seconds_since(state.first.time);
    let climb = Climb {
        rate: if secs > 0.0 {
            (state.last.rss as f64 - state.first.rss as f64) / secs
        } else {
            0.0
        },
        from: state.first.rss,
        to: state.last.rss,
        secs,
    };
    let limit = input
        .cgroup
        .and_then(Cgroup::limit)
        .map_or_else(String::new, |l| {
            format!(", in a cgroup limited to {}", size(l))
        });
    let text = format!(
        "{head}: its resident memory went from {} over the {} before ({}){}{limit}",
        range(climb.from, climb.to),
        duration(secs),
        rate(climb.rate),
        ran_while(p.top.as_ref()),
    );
    Some(finding(MemoryFindingKind::OomKilled, p, climb, None, text))
}

/// Steady climb of a process's GPU memory.
fn gpu_growth(input: &VerdictInput<'_>, p: &Judged<'_>) -> Option<MemoryFinding> {
    let gpu = p.gpu?;
    let floors = Floors {
        rate: GPU_MIN_RATE,
        growth: GPU_MIN_GROWTH,
        share: GPU_MIN_GROWTH_SHARE,
    };
    let climb = steady_climb(&gpu.points(), &gpu.fit, input.since, floors)?;
    let text = format!(
        "pid {} ({}): its GPU memory climbed steadily, {} for {} ({}): tensors kept from step \
         to step (a loss kept with its graph, a list of outputs, a cache without bound)",
        p.pid,
        p.role,
        rate(climb.rate),
        duration(climb.secs),
        range(climb.from, climb.to),
    );
    let secs_to_full = input
        .gpu_memory
        .map(|(total, used)| total.saturating_sub(used) as f64 / climb.rate);
    let mut text = text;
    if let (Some((total, _)), Some(secs)) = (input.gpu_memory, secs_to_full) {
        if secs > 0.0 {
            text.push_str(&format!(
                "; at this rate it fills the GPU's {} in about {}",
                size(total),
                duration(secs)
            ));
        } else {
            text.push_str(&format!("; the GPU's {} are full", size(total)));
        }
    }
    let mut found = finding(MemoryFindingKind::GpuGrowth, p, climb, secs_to_full, text);
    found.top_function = None;
    found.top_function_share = None;
    Some(found)
}

/// One worker's copy-on-write: private memory grown out of shared while resident stays.
#[derive(Debug, Clone, Copy)]
struct Copied {
    private_from: u64,
    private_to: u64,
    secs: f64,
}

fn copied(state: &ProcessState) -> Option<Copied> {
    let (a, b) = (state.smaps_first?, state.smaps_last?);
    let (shared_from, shared_to) = (a.shared?, b.shared?);
    let (private_from, private_to) = (a.private?, b.private?);
    let secs = b.time.seconds_since(a.time);
    let private_growth = private_to.saturating_sub(private_from);
    let resident_growth = b.rss.saturating_sub(a.rss) as f64;
    let shared_drop = shared_from.saturating_sub(shared_to) as f64;
    let is = secs > 0.0
        && shared_from >= COW_MIN_SHARED
        && private_growth >= COW_MIN_PRIVATE_GROWTH
        && private_growth as f64 >= COW_MIN_SHARE_OF_SHARED * shared_from as f64
        && resident_growth <= COW_MAX_RSS_SHARE * private_growth as f64
        && shared_drop >= COW_MIN_SHARED_DROP * private_growth as f64;
    is.then_some(Copied {
        private_from,
        private_to,
        secs,
    })
}

/// Every forked worker whose pages are being copied, in one finding.
fn copy_on_write(input: &VerdictInput<'_>) -> Option<MemoryFinding> {
    let mut workers: Vec<(&Judged<'_>, Copied)> = input
        .processes
        .iter()
        .filter(|p| !p.parent)
        .filter_map(|p| Some((p, copied(p.rss?)?)))
        .collect();
    workers.sort_by_key(|(p, _)| p.pid);
    let (first, _) = *workers.first()?;
    let from: u64 = workers.iter().map(|(_, c)| c.private_from).sum();
    let to: u64 = workers.iter().map(|(_, c)| c.private_to).sum();
    let secs = workers.iter().map(|(_, c)| c.secs).fold(0.0, f64::max);
    let rate_sum: f64 = workers
        .iter()
        .map(|(_, c)| c.private_to.saturating_sub(c.private_from) as f64 / c.secs)
        .sum();
    let pids: Vec<u32> = workers.iter().map(|(p, _)| p.pid).collect();
    let mut roles: Vec<&str> = workers.iter().map(|(p, _)| p.role.as_str()).collect();
    roles.dedup();
    let who = named_pids(&workers);
    let text = format!(
        "{who}: private memory grew from {} together in {} while resident memory stayed about \
         flat and shared memory fell: copy-on-write in forked workers, not a leak (reading the \
         parent's Python objects updates their reference counts, which copies the pages they \
         share); keeping the dataset in arrays (numpy, torch tensors, Arrow) rather than Python \
         lists and dicts avoids it",
        range(from, to),
        duration(secs),
    );
    Some(MemoryFinding {
        kind: MemoryFindingKind::CopyOnWrite,
        pid: first.pid,
        role: roles.join(", "),
        pids,
        growth_bytes_per_s: rate_sum,
        from_bytes: from,
        to_bytes: to,
        secs,
        top_function: None,
        top_function_share: None,
        secs_to_limit: None,
        text,
    })
}

/// `pid 12 (DataLoader worker 0)` or `pids 12, 13 (DataLoader worker 0, DataLoader worker 1)`,
/// the first few, and how many more.
fn named_pids(workers: &[(&Judged<'_>, Copied)]) -> String {
    let shown = &workers[..workers.len().min(COW_PIDS_NAMED)];
    let pids: Vec<String> = shown.iter().map(|(p, _)| p.pid.to_string()).collect();
    let roles: Vec<&str> = shown.iter().map(|(p, _)| p.role.as_str()).collect();
    let more = workers.len() - shown.len();
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let noun = if workers.len() == 1 { "pid" } else { "pids" };
    format!("{noun} {} ({}){more}", pids.join(", "), roles.join(", "))
}
