//! The data report.html embeds: the recording's headline figures and verdict, the GPU series,
//! the time buckets of stacks, thread lanes and memory growth, and each process's memory (see
//! [`super::memory`]), as compact JSON the page's script reads.
//!
//! Stacks, frames and functions are renumbered densely for the page, so it carries only what
//! its buckets refer to. Bucket counts are exact: a window's flamegraph, of samples or of
//! bytes grown, is the sum of the buckets it covers. The aggregate bounds the buckets (see
//! [`stackscope_aggregate::TimeBuckets`]); the GPU series are averaged into at most
//! [`MAX_GPU_POINTS`] points per device and the memory lines thinned as bounded; so the page
//! is bounded whatever the recording's length.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use stackscope_aggregate::{
    Aggregator, Bucket, Cycle, GilSummary, IdlePath, IfFixed, LoopFoundBy, OddRank, RankRow,
    RecordingMeta, RecordingVerdict, Role, StackTable, StepBreakdown, Summary, ThreadRole, Verdict,
    VerdictClass,
};
use stackscope_event::{GpuSample, Timestamp};

use crate::import_frames::{fold_runs, is_import_frame, FOLDED_IMPORT_FRAME};
/// What a merged page carries beyond a single recording's.
#[derive(Debug, Serialize)]
pub struct MergedPage {
    /// `2 recordings merged, 8 ranks`.
    pub title: String,
    /// The recording directories, as given.
    pub sources: Vec<String>,
    /// The rank table, as `merge` prints it and its `summary.json` holds it.
    pub ranks: Vec<RankRow>,
    pub most_different: Option<OddRank>,
    /// Each recording's own verdict, by whose recording it is.
    pub verdicts: Vec<RecordingVerdict>,
}

/// GPU points per device at most: finer than any screen shows.
pub const MAX_GPU_POINTS: usize = 4000;
/// The prefix of a simulated device's UUID (`stackscope demo`): the page says so.
pub const SIMULATED_UUID_PREFIX: &str = "simulated";

#[derive(Debug, Serialize)]
pub struct PageData {
    pub pid: u32,
    pub command_line: String,
    pub python_version: String,
    pub started_at: String,
    pub duration_secs: f64,
    pub rate_hz: f64,
    pub samples: u64,
    pub errors: u64,
    pub dropped: u64,
    pub notices: Vec<String>,
    pub gpu_unavailable: Option<String>,
    /// Whether the GPU data is simulated (`stackscope demo`), not read from a device.
    pub simulated: bool,
    pub idle_below: f64,
    pub mean_utilization: Option<f64>,
    /// The verdict: `gpu.verdict`, or without GPU data the loop's own reading
    /// (`summary.verdict`).
    pub verdict: Option<Verdict>,
    pub verdict_class: Option<VerdictClass>,
    /// The loop's step broken down (`gpu.step`, or `summary.step` without GPU data), drawn as
    /// a bar beside the verdict.
    pub step: Option<StepBreakdown>,
    /// What fixing the bottleneck buys (`gpu.if_fixed`, or `summary.if_fixed`); the verdict's
    /// text says it in words.
    pub if_fixed: Option<IfFixed>,
    /// How the loop was found: by the GPU's correlation, or without GPU data by its hand-offs.
    pub loop_found_by: Option<LoopFoundBy>,
    pub idle_path: Option<IdlePath>,
    /// The GPU's cycle of busy bursts, when it has one (`gpu.cycle`).
    pub cycle: Option<Cycle>,
    /// Seconds of a `record`'s start-up left out of the GPU figures (`gpu.startup_secs`).
    pub startup_secs: f64,
    /// The roles in a line: `trainer pid 448 (MainThread); DataLoader workers pids 623, 624;
    /// 7 helper threads`.
    pub roles: Option<String>,
    /// Width of a bucket in seconds; bucket `i` covers `[i * w, (i + 1) * w)`.
    pub bucket_secs: f64,
    /// Frame labels (`function (file:line)`, thread and process roots as named).
    pub frames: Vec<String>,
    /// For each frame, its function's index in `functions`, or -1 for a root.
    pub frame_functions: Vec<i64>,
    /// Functions as `function (file)`.
    pub functions: Vec<String>,
    /// Frame indexes, root first.
    pub stacks: Vec<Vec<u32>>,
    pub buckets: Vec<PageBucket>,
    pub lanes: Vec<PageLane>,
    /// Each thread's GIL over the recording (`summary.gil`), drawn as a table beside the
    /// lanes; `None` when no sample said who held it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gil: Option<GilSummary>,
    pub gpus: Vec<PageGpu>,
    /// Every process's memory and the memory verdict; `None` without memory readings (then the
    /// page draws nothing of memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<super::memory::PageMemory>,
    /// What a page of merged recordings (`stackscope merge DIR...`) adds: its rank table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged: Option<MergedPage>,
}

/// A lane's entry in a page bucket's `l`: `[lane, active, idle, gil_held, gil_waited]`.
pub(super) const LANE_CELL: usize = 5;

/// One bucket: `s` is `[stack, gpu_idle, gpu_busy, gpu_unknown]` repeated; `l` is
/// `[lane, active, idle, gil_held, gil_waited]` repeated (active less held: ran without the
/// GIL); `g` is `[stack, bytes]` repeated, the resident memory
/// that grew while the stack ran (absent without memory readings).
#[derive(Debug, Serialize)]
pub struct PageBucket {
    pub i: u64,
    pub s: Vec<u64>,
    pub l: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub g: Vec<u64>,
}

#[derive(Debug, Serialize)]
pub struct PageLane {
    /// The thread's own name.
    pub name: String,
    /// What the lane is called on the page: `pid 448 · trainer (MainThread)`,
    /// `pid 623 · DataLoader worker 0`, `pid 448 · helper: QueueFeederThread`; on a merged
    /// page, prefixed by whose recording it is.
    pub label: String,
    /// The thread's role; `None` for a lane no role was worked out for (`[other threads]`).
    pub role: Option<Role>,
    /// Where the lane stands among its recording's lanes: the trainer first, then its feeders
    /// (by role, then pid), then the helpers, grouped by process in that order.
    pub order: u32,
    pub pid: u32,
    pub thread_id: u64,
    pub active: u64,
    pub idle: u64,
    /// For a lane of many threads (a pool read as one, a group's thread), the most of them
    /// alive at once: the page draws the lane's height as the share of them alive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_a_time: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct PageGpu {
    pub index: u32,
    pub name: String,
    /// Whose device it is, on a page of merged recordings: `rank 3 on node-b`, or the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Seconds since the recording's start.
    pub t: Vec<f64>,
    /// Percent; null where the reading had none.
    pub utilization: Vec<Option<f32>>,
    /// Memory used, percent of the device's memory.
    pub memory: Vec<Option<f32>>,
    pub power_watts: Vec<Option<f32>>,
    /// GPM SM activity, percent (Hopper and later; all null elsewhere).
    pub sm_active: Vec<Option<f32>>,
}

/// Builds the page's data from what the aggregator holds and the summary written beside it.
pub fn page_data(agg: &Aggregator, summary: &Summary, meta: &RecordingMeta) -> PageData {
    let table = agg.stack_table();
    let buckets = agg.time_buckets();
    let mut dense = Dense::default();
    let page_buckets: Vec<PageBucket> = buckets
        .sorted()
        .into_iter()
        .map(|(index, bucket)| page_bucket(index, bucket, table, &mut dense))
        .collect();
    let lanes = lanes_by_role(buckets.lanes(), summary);
    let gpu = summary.gpu.as_ref();
    let verdict = gpu
        .map(|g| &g.verdict)
        .or(summary.verdict.as_ref())
        .cloned();
    let simulated = meta
        .gpu_devices
        .iter()
        .any(|d| d.uuid.starts_with(SIMULATED_UUID_PREFIX));
    let names: HashMap<u32, String> = meta
        .gpu_devices
        .iter()
        .map(|d| (d.index, d.name.clone()))
        .collect();
    PageData {
        pid: summary.pid,
        command_line: summary.command_line.clone(),
        python_version: summary.python_version.clone(),
        started_at: summary.started_at.clone(),
        duration_secs: summary.duration_secs,
        rate_hz: summary.rate_hz,
        samples: summary.samples,
        errors: summary.errors.total,
        dropped: summary.dropped,
        notices: summary.notices.clone(),
        gpu_unavailable: summary.gpu_unavailable.clone(),
        simulated,
        idle_below: f64::from(agg.config().idle_below),
        mean_utilization: gpu.and_then(|g| g.mean_utilization),
        verdict_class: verdict.as_ref().map(|v| v.class),
        verdict,
        // The summary's loop fields mirror the GPU's where there is GPU data: the GPU's
        // first, so a summary written before they were kept still reads.
        step: gpu.and_then(|g| g.step).or(summary.step),
        if_fixed: gpu
            .and_then(|g| g.if_fixed.clone())
            .or_else(|| summary.if_fixed.clone()),
        loop_found_by: summary.loop_found_by,
        idle_path: gpu.and_then(|g| g.idle_path.clone()),
        cycle: gpu.and_then(|g| g.cycle),
        startup_secs: gpu.map_or(0.0, |g| g.startup_secs),
        roles: crate::roles_line(&summary.roles),
        bucket_secs: buckets.width_secs(),
        frames: dense.frame_labels,
        frame_functions: dense.frame_functions,
        functions: dense.function_labels,
        stacks: dense.stacks,
        buckets: page_buckets,
        lanes,
        gil: summary.gil.clone(),
        gpus: gpu_series(agg.gpu_timeline(), agg.start(), &names),
        memory: super::memory::page_memory(agg, summary),
        merged: None,
    }
}

/// One bucket as the page holds it: `[stack, idle, busy, unknown]`, `[lane, active, idle,
/// gil_held, gil_waited]` and `[stack, bytes grown]` runs, in the page's stack numbering, sorted.
fn page_bucket(index: u64, bucket: &Bucket, table: &StackTable, dense: &mut Dense) -> PageBucket {
    let mut stacks: Vec<(u32, u64, u64, u64)> = bucket
        .stacks
        .iter()
        .map(|(&stack, c)| {
            (
                dense.stack(table, stack),
                u64::from(c.gpu_idle),
                u64::from(c.gpu_busy),
                u64::from(c.gpu_unknown),
            )
        })
        .collect();
    stacks.sort_unstable();
    let mut lanes: Vec<(u32, [u32; 4])> = bucket
        .lanes
        .iter()
        .map(|(&lane, c)| (lane, [c.active, c.idle, c.gil_held, c.gil_waited]))
        .collect();
    lanes.sort_unstable();
    let mut growth: Vec<(u32, u64)> = bucket
        .growth
        .iter()
        .filter(|&(_, &bytes)| bytes > 0)
        .map(|(&stack, &bytes)| (dense.stack(table, stack), bytes))
        .collect();
    growth.sort_unstable();
    PageBucket {
        i: index,
        s: stacks
            .into_iter()
            .flat_map(|(s, i, b, u)| [u64::from(s), i, b, u])
            .collect(),
        l: lanes
            .into_iter()
            .flat_map(|(l, [a, i, h, w])| [l, a, i, h, w].map(u64::from))
            .collect(),
        g: growth
            .into_iter()
            .flat_map(|(s, b)| [u64::from(s), b])
            .collect(),
    }
}

/// The buckets' lanes, labelled by process and role and ordered as the page shows them.
fn lanes_by_role(lanes: &[stackscope_aggregate::Lane], summary: &Summary) -> Vec<PageLane> {
    let roles = &summary.roles;
    // A group of like processes is named as such (`DataLoader workers (40 processes, 2 at a
    // time) · MainThread`), a process by its pid.
    let who = |pid: u32| stackscope_aggregate::process_name(pid, &summary.processes);
    let role_of = |l: &stackscope_aggregate::Lane| {
        roles
            .iter()
            .find(|r| r.pid == l.pid && r.python_thread_id == l.python_thread_id)
    };
    let at_a_time = |l: &stackscope_aggregate::Lane| {
        summary
            .threads
            .iter()
            .find(|t| t.pid == l.pid && t.python_thread_id == l.python_thread_id)
            .and_then(|t| t.at_a_time)
    };
    // Processes in the order of their first role lane: the trainer's, then the feeders'.
    let mut process_order: Vec<u32> = Vec::new();
    let mut by_role: Vec<&ThreadRole> = roles.iter().collect();
    by_role.sort_by_key(|r| (r.role, r.pid, r.python_thread_id));
    for r in by_role {
        if !process_order.contains(&r.pid) {
            process_order.push(r.pid);
        }
    }
    let mut out: Vec<PageLane> = lanes
        .iter()
        .map(|l| {
            let role = role_of(l);
            let label = match role {
                Some(r) if r.role == Role::Helper => {
                    format!("{} · helper: {}", who(l.pid), r.label)
                }
                Some(r) => format!("{} · {}", who(l.pid), r.label),
                None if l.pid == 0 => l.name.clone(),
                None => format!("{} · {}", who(l.pid), l.name),
            };
            PageLane {
                name: l.name.clone(),
                label,
                role: role.map(|r| r.role),
                order: 0,
                pid: l.pid,
                thread_id: l.python_thread_id,
                active: l.active,
                idle: l.idle,
                at_a_time: at_a_time(l),
            }
        })
        .collect();
    let mut index: Vec<usize> = (0..out.len()).collect();
    let class = |l: &PageLane| lane_class(l.role);
    let place = |pid: u32| {
        process_order
            .iter()
            .position(|&p| p == pid)
            .unwrap_or(usize::MAX)
    };
    index.sort_by(|&a, &b| {
        let (a, b) = (&out[a], &out[b]);
        let feeder_pid = |l: &PageLane| if class(l) < 3 { l.pid } else { 0 };
        (class(a), feeder_pid(a), place(a.pid), b.active, b.idle).cmp(&(
            class(b),
            feeder_pid(b),
            place(b.pid),
            a.active,
            a.idle,
        ))
    });
    for (order, i) in index.into_iter().enumerate() {
        out[i].order = order as u32;
    }
    out
}

/// Lanes' order by role: the trainer, DataLoader workers, other workers, then the rest.
pub(super) fn lane_class(role: Option<Role>) -> u8 {
    match role {
        Some(Role::Trainer) => 0,
        Some(Role::DataloaderWorker) => 1,
        Some(Role::Worker) | Some(Role::FeederThread) => 2,
        Some(Role::Helper) | None => 3,
    }
}

/// Page-local numbering of the stacks, frames and functions the buckets use.
#[derive(Default)]
struct Dense {
    stack_ids: HashMap<u32, u32>,
    stacks: Vec<Vec<u32>>,
    frame_ids: HashMap<u32, u32>,
    frame_labels: Vec<String>,
    frame_functions: Vec<i64>,
    function_ids: HashMap<u32, i64>,
    function_labels: Vec<String>,
    folded_import: Option<u32>,
}

impl Dense {
    fn stack(&mut self, table: &StackTable, stack: u32) -> u32 {
        if let Some(&id) = self.stack_ids.get(&stack) {
            return id;
        }
        let frames: Vec<u32> = table
            .stacks()
            .get(stack as usize)
            .map(|entry| entry.frames.iter().map(|&f| self.frame(table, f)).collect())
            .unwrap_or_default();
        // Drawn as the SVG draws it: each run of import-machinery frames as one frame.
        let folded = self.folded_import_frame();
        let labels = &self.frame_labels;
        let frames = fold_runs(&frames, |&f| is_import_frame(&labels[f as usize]), folded);
        let id = self.stacks.len() as u32;
        self.stacks.push(frames);
        self.stack_ids.insert(stack, id);
        id
    }

    /// The page's one frame for a run of import-machinery frames, made when first needed.
    fn folded_import_frame(&mut self) -> u32 {
        if let Some(id) = self.folded_import {
            return id;
        }
        let function = self.function_labels.len() as i64;
        self.function_labels.push(FOLDED_IMPORT_FRAME.to_owned());
        let id = self.frame_labels.len() as u32;
        self.frame_labels.push(FOLDED_IMPORT_FRAME.to_owned());
        self.frame_functions.push(function);
        self.folded_import = Some(id);
        id
    }

    fn frame(&mut self, table: &StackTable, frame: u32) -> u32 {
        if let Some(&id) = self.frame_ids.get(&frame) {
            return id;
        }
        let entry = table.frame(frame);
        let label = entry.map(|e| e.label.clone()).unwrap_or_default();
        let function = match entry.and_then(|e| e.function) {
            Some(f) => self.function(table, f),
            None => -1,
        };
        let id = self.frame_labels.len() as u32;
        self.frame_labels.push(label);
        self.frame_functions.push(function);
        self.frame_ids.insert(frame, id);
        id
    }

    fn function(&mut self, table: &StackTable, function: u32) -> i64 {
        if let Some(&id) = self.function_ids.get(&function) {
            return id;
        }
        let label = table
            .function(function)
            .map(|k| format!("{} ({})", k.function, k.file))
            .unwrap_or_default();
        let id = self.function_labels.len() as i64;
        self.function_labels.push(label);
        self.function_ids.insert(function, id);
        id
    }
}

/// Each device's readings, averaged into at most [`MAX_GPU_POINTS`] equal slices of time.
fn gpu_series(
    samples: &[GpuSample],
    start: Timestamp,
    names: &HashMap<u32, String>,
) -> Vec<PageGpu> {
    let mut by_device: BTreeMap<u32, Vec<&GpuSample>> = BTreeMap::new();
    for s in samples {
        by_device.entry(s.device).or_default().push(s);
    }
    by_device
        .into_iter()
        .map(|(index, readings)| {
            let name = names.get(&index).cloned().unwrap_or_default();
            series(index, name, &readings, start)
        })
        .collect()
}

fn series(index: u32, name: String, readings: &[&GpuSample], start: Timestamp) -> PageGpu {
    let secs = |s: &GpuSample| s.time.seconds_since(start);
    let memory = |s: &GpuSample| match (s.memory_used_bytes, s.memory_total_bytes) {
        (Some(used), Some(total)) if total > 0 => Some((used as f64 * 100.0 / total as f64) as f32),
        _ => None,
    };
    let mut out = PageGpu {
        index,
        name,
        owner: None,
        t: Vec::new(),
        utilization: Vec::new(),
        memory: Vec::new(),
        power_watts: Vec::new(),
        sm_active: Vec::new(),
    };
    let per_point = readings.len().div_ceil(MAX_GPU_POINTS).max(1);
    for chunk in readings.chunks(per_point) {
        let mean = |f: &dyn Fn(&GpuSample) -> Option<f32>| {
            let values: Vec<f32> = chunk.iter().filter_map(|s| f(s)).collect();
            (!values.is_empty()).then(|| values.iter().sum::<f32>() / values.len() as f32)
        };
        // A point stands at its last reading: a reading describes the time before it.
        out.t.push(chunk.last().map_or(0.0, |s| round3(secs(s))));
        out.utilization.push(mean(&|s| s.utilization));
        out.memory.push(mean(&memory));
        out.power_watts.push(mean(&|s| s.power_watts));
        out.sm_active.push(mean(&|s| s.sm_active));
    }
    out
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
