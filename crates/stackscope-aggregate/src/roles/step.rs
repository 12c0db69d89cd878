//! The trainer's step, broken down by what the loop does with its time: `summary.json`'s
//! `gpu.step` (shares of its samples, which are taken at a fixed rate: shares of wall time) and
//! `gpu.step_gil_holder`.
//!
//! Every trainer sample counts, waits included. A sample is classified by its stack, in order:
//!
//! - `input_wait`: it is inside a hand-off from other threads or processes: a queue's `get`,
//!   a pipe or connection's receive, a future's result, a pool's results (`handoff.rs`), or
//!   anywhere in the loader call that makes those hand-offs again and again (under the
//!   loader's `__next__`);
//! - `gpu_wait`: it is inside a GPU synchronisation (a `synchronize` frame, CUDA's blocking
//!   copies and NCCL waits in native frames), or it waits, neither in a hand-off nor a lock,
//!   while the GPU is busy (`.item()` and `.cpu()` have no Python frame of their own);
//! - `inline_load`: inside the loop (below the frame every sample of the loop holds), it runs
//!   the loop's own data path: an iterator's `__next__`, a dataset's `__getitem__`, torch's
//!   `utils/data`, or a function named for loading (read, load, fetch, decode, collate,
//!   augment, transform, preprocess, tokenize), running or blocked in a read;
//! - `gil_wait`: it waits, outside a hand-off or a lock, for the GIL another thread of its
//!   process holds: at a stack where it runs itself (its own Python, its launch work: the one
//!   rule of `gil/`) whatever the GPU does; elsewhere in its code while the GPU is not busy
//!   (a write or a sleep returns into a wait for the GIL). A wait in a blocking call
//!   (`.item()`, a copy) with the GIL elsewhere while the GPU is busy is the GPU's;
//! - `other_wait`: any other wait (sleeps, locks, events);
//! - `python`: any other running sample (the step's own Python, launching kernels).
//!
//! A sample inside an import made inside the loop (importlib's frames) is start-up work, not
//! the step's data: a module's loader and its `_find_and_load` are named for loading, and an
//! import may wait on a queue (a compile pool's), but neither is the loop's input. Such a
//! sample is `python` when it runs and `other_wait` when it waits.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use stackscope_event::FileOrigin;

use super::handoff::{is_handoff, MIN_ENTRIES};
use crate::fold::{Activity, FrameId, FunctionId, StackTable};

/// The loop is where the call path at least this share of the trainer's samples share from
/// their root ends (some are outside it: start-up's tail, the exit).
const LOOP_PRESENCE: f64 = 0.8;
/// `gpu.step_gil_holder` is given when the GIL waits are at least this share of the step.
pub const GIL_HOLDER_MIN_SHARE: f64 = 0.1;

/// Standard-library files whose waits are locks, events and joins.
const LOCKS: &[&str] = &["threading.py"];
/// Words a data-path function's name starts a word with.
const LOAD_WORDS: &[&str] = &[
    "load",
    "read",
    "fetch",
    "decode",
    "collate",
    "augment",
    "transform",
    "preprocess",
    "tokeniz",
    "getitem",
    "next",
];

/// `summary.json`'s `gpu.step`: shares of the trainer's samples, summing to 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepBreakdown {
    pub input_wait: f64,
    pub inline_load: f64,
    pub gpu_wait: f64,
    pub python: f64,
    pub gil_wait: f64,
    pub other_wait: f64,
}

impl StepBreakdown {
    /// The parts with their names, in `gpu.step`'s order.
    pub fn parts(&self) -> [(&'static str, f64); 6] {
        [
            ("input_wait", self.input_wait),
            ("inline_load", self.inline_load),
            ("gpu_wait", self.gpu_wait),
            ("python", self.python),
            ("gil_wait", self.gil_wait),
            ("other_wait", self.other_wait),
        ]
    }

    /// The part named `name` (`input_wait`, ...); 0 for a name that is none.
    pub fn part(&self, name: &str) -> f64 {
        self.parts()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map_or(0.0, |(_, v)| v)
    }

    /// "input_wait 72%, python 20%, gpu_wait 8%": the parts of at least 1%, largest first.
    pub fn describe(&self) -> String {
        let mut parts: Vec<(&str, f64)> = self
            .parts()
            .into_iter()
            .filter(|(_, v)| *v >= 0.005)
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1));
        parts
            .iter()
            .map(|(name, v)| format!("{name} {:.0}%", v * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `summary.json`'s `gpu.step_gil_holder`: who held the GIL while the loop waited for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GilHolder {
    pub thread: String,
    /// `function (file:line)`: where the holder ran most.
    pub frame: Option<String>,
    /// Of the loop's GIL waits, the share this thread held it.
    pub share: f64,
}

/// Where the loop spends one part of its step: its innermost frame of the job's own code
/// there, and the call it makes from it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPlace {
    /// `function (file:line)`.
    pub frame: String,
    /// The call just inside `frame`, `function (file:line)`, when there is one.
    pub calls: Option<String>,
    /// Of the part's samples, the share that waited.
    pub waiting_share: f64,
}

/// The step of one trainer.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub breakdown: StepBreakdown,
    /// The samples it is read from.
    pub samples: u64,
    /// Where it waits for input, and where it loads inline.
    pub input_at: Option<StepPlace>,
    pub inline_at: Option<StepPlace>,
}

/// Samples of one part of the step, by place.
#[derive(Default)]
struct Places {
    by_place: HashMap<(FrameId, Option<FrameId>), u64>,
    running: u64,
    waiting: u64,
}

impl Places {
    fn add(&mut self, place: Option<(FrameId, Option<FrameId>)>, running: u64, waiting: u64) {
        self.running += running;
        self.waiting += waiting;
        if let Some(place) = place {
            *self.by_place.entry(place).or_default() += running + waiting;
        }
    }

    fn most(&self, table: &StackTable) -> Option<StepPlace> {
        let (&(frame, calls), _) = self
            .by_place
            .iter()
            .max_by_key(|(&k, &n)| (n, std::cmp::Reverse(k)))?;
        let label = |f: FrameId| table.frame(f).map(|e| e.label.clone());
        Some(StepPlace {
            frame: label(frame)?,
            calls: calls.and_then(label),
            waiting_share: self.waiting as f64 / (self.running + self.waiting).max(1) as f64,
        })
    }
}

/// A stack's innermost frame of the job's own code, and the code frame just inside it.
fn place_of(table: &StackTable, frames: &[FrameId]) -> Option<(FrameId, Option<FrameId>)> {
    let at = frames
        .iter()
        .rposition(|&f| table.frame(f).is_some_and(|e| e.origin == FileOrigin::Job))?;
    let inside = frames[at + 1..]
        .iter()
        .find(|&&f| {
            table
                .frame(f)
                .is_some_and(|e| e.function.is_some() && e.origin != FileOrigin::Native)
        })
        .copied();
    Some((frames[at], inside))
}

/// What a stack is doing, before its samples' states are looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StackKind {
    Handoff,
    GpuSync,
    Load,
    Lock,
    Plain,
}

/// The trainer's step from its activity; `None` without samples.
pub fn step(table: &StackTable, activity: &Activity) -> Option<Step> {
    let loop_at = loop_of(table, activity);
    let loaders = loader_calls(table, activity, loop_at);
    let (mut input_at, mut inline_at) = (Places::default(), Places::default());
    let mut counts = [0u64; 6];
    let [input, load, gpu, python, gil, other] = &mut counts;
    for (&stack, c) in &activity.stacks {
        let Some(entry) = table.stacks().get(stack as usize) else {
            continue;
        };
        let running = c.gpu_idle.running + c.gpu_busy.running + c.gpu_unknown.running;
        let waiting = c.gpu_idle.waiting + c.gpu_busy.waiting + c.gpu_unknown.waiting;
        // The loop's GIL waits: where it runs (`gil/`), the GPU busy or not; and while the GPU
        // is not busy, any wait in its own code with the GIL elsewhere (a write's, a sleep's
        // return waits for the GIL; a blocking call while the GPU is busy is the GPU's).
        let gil_waits_gpu_busy = c.gil_waiting_gpu_busy;
        let gil_waits = (gil_waits_gpu_busy + c.held_elsewhere_not_busy).min(waiting);
        let place = || place_of(table, &entry.frames);
        match kind_of(table, &entry.frames, loop_at, &loaders) {
            StackKind::Handoff => {
                *input += running + waiting;
                input_at.add(place(), running, waiting);
            }
            StackKind::GpuSync => *gpu += running + waiting,
            StackKind::Load => {
                *load += running + waiting - gil_waits;
                *gil += gil_waits;
                inline_at.add(place(), running, waiting - gil_waits);
            }
            StackKind::Lock => {
                *python += running;
                *other += waiting;
            }
            StackKind::Plain => {
                // GPU-busy waits that are not GIL waits are the GPU's.
                let gpu_waits = c.gpu_busy.waiting.saturating_sub(gil_waits_gpu_busy);
                *python += running;
                *gil += gil_waits;
                *gpu += gpu_waits;
                *other += waiting.saturating_sub(gil_waits + gpu_waits);
            }
        }
    }
    let samples: u64 = counts.iter().sum();
    if samples == 0 {
        return None;
    }
    let share = |n: u64| n as f64 / samples as f64;
    Some(Step {
        breakdown: StepBreakdown {
            input_wait: share(counts[0]),
            inline_load: share(counts[1]),
            gpu_wait: share(counts[2]),
            python: share(counts[3]),
            gil_wait: share(counts[4]),
            other_wait: share(counts[5]),
        },
        samples,
        input_at: input_at.most(table),
        inline_at: inline_at.most(table),
    })
}

/// The loop itself: the end of the call path at least [`LOOP_PRESENCE`] of the trainer's
/// samples share from their root (by function: the loop runs over several lines of it), at its
/// innermost function of the job's code. What runs below it is the step. A helper every phase
/// calls (a shared inner loop) is below where the samples part ways, so it is never the loop.
#[derive(Debug, Clone, Copy)]
struct Loop {
    depth: usize,
    function: FunctionId,
}

impl Loop {
    /// Where the step starts in a stack: just inside the loop's frame; `None` for a stack
    /// outside the loop.
    fn inside(&self, table: &StackTable, frames: &[FrameId]) -> Option<usize> {
        let at = frames.get(self.depth)?;
        (table.frame(*at)?.function == Some(self.function)).then_some(self.depth + 1)
    }
}

fn loop_of(table: &StackTable, activity: &Activity) -> Option<Loop> {
    // Each stack as its frames' functions (`None` for roots), with its samples; and the
    // functions of the job's own code.
    let mut job_functions: Vec<FunctionId> = Vec::new();
    let mut stacks: Vec<(Vec<Option<FunctionId>>, u64)> = Vec::new();
    for (&stack, c) in &activity.stacks {
        let Some(entry) = table.stacks().get(stack as usize) else {
            continue;
        };
        let mut functions = Vec::with_capacity(entry.frames.len());
        for &f in entry.frames.iter() {
            let e = table.frame(f);
            let function = e.and_then(|e| e.function);
            if let (Some(function), Some(FileOrigin::Job)) = (function, e.map(|e| e.origin)) {
                job_functions.push(function);
            }
            functions.push(function);
        }
        stacks.push((functions, c.all().total()));
    }
    job_functions.sort_unstable();
    job_functions.dedup();
    let is_job = |f: FunctionId| job_functions.binary_search(&f).is_ok();
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let mut prefix: Vec<Option<FunctionId>> = Vec::new();
    let mut found = None;
    loop {
        let depth = prefix.len();
        let mut next: HashMap<Option<FunctionId>, u64> = HashMap::new();
        for (functions, n) in &stacks {
            if functions.len() > depth && functions[..depth] == prefix[..] {
                *next.entry(functions[depth]).or_default() += n;
            }
        }
        let Some((&function, &n)) = next.iter().max_by_key(|(&f, &n)| (n, std::cmp::Reverse(f)))
        else {
            break;
        };
        if (n as f64) < LOOP_PRESENCE * total as f64 {
            break;
        }
        if let Some(f) = function.filter(|&f| is_job(f)) {
            found = Some(Loop { depth, function: f });
        }
        prefix.push(function);
    }
    found
}

/// Where a stack enters the step: the function of its first frame inside the loop's frame.
fn step_entry(table: &StackTable, frames: &[FrameId], loop_at: Option<Loop>) -> Option<FunctionId> {
    let at = loop_at?.inside(table, frames)?;
    table.frame(*frames.get(at)?)?.function
}

/// The calls through which the loop gets its batches from feeders: the step entries of its
/// hand-off stacks (`DataLoader.__next__`, the job's own loader's `__next__`), entered again
/// and again as a loop enters its hand-off ([`MIN_ENTRIES`]). All the time in them is input
/// time, the hand-off's own Python included (unpickling, submitting the next task). A call
/// that made one hand-off is not one: in a job's start-up, where what holds every sample is
/// the module and not a loop, `main` waits once for its first batch.
fn loader_calls(table: &StackTable, activity: &Activity, loop_at: Option<Loop>) -> Vec<FunctionId> {
    let mut entries: HashMap<FunctionId, u64> = HashMap::new();
    for (&stack, counts) in &activity.stacks {
        let Some(entry) = table.stacks().get(stack as usize) else {
            continue;
        };
        if kind_of(table, &entry.frames, loop_at, &[]) != StackKind::Handoff {
            continue;
        }
        if let Some(call) = step_entry(table, &entry.frames, loop_at) {
            *entries.entry(call).or_default() += counts.entries;
        }
    }
    let mut calls: Vec<FunctionId> = entries
        .into_iter()
        .filter(|&(_, n)| n >= MIN_ENTRIES)
        .map(|(call, _)| call)
        .collect();
    calls.sort_unstable();
    calls
}

fn kind_of(
    table: &StackTable,
    frames: &[FrameId],
    loop_at: Option<Loop>,
    loaders: &[FunctionId],
) -> StackKind {
    // Each named frame once, with its place in the stack, for the whole stack and its inside.
    let keyed: Vec<(usize, (&str, &str, FileOrigin))> = frames
        .iter()
        .enumerate()
        .filter_map(|(i, &f)| {
            let e = table.frame(f)?;
            let key = table.function(e.function?)?;
            Some((i, (key.function.as_ref(), key.file.as_ref(), e.origin)))
        })
        .collect();
    let keys: Vec<(&str, &str, FileOrigin)> = keyed.iter().map(|&(_, k)| k).collect();
    // Inside the loop: frames after the loop's own (all of them when no frame is the loop's).
    let inside = loop_at.and_then(|l| l.inside(table, frames)).unwrap_or(0);
    let inner: Vec<(&str, &str, FileOrigin)> = keyed
        .iter()
        .filter(|&&(i, _)| i >= inside)
        .map(|&(_, k)| k)
        .collect();
    if inner.iter().any(|&(_, file, _)| is_import(file)) {
        return StackKind::Plain;
    }
    if keys
        .iter()
        .any(|&(function, file, _)| is_handoff(function, file))
    {
        return StackKind::Handoff;
    }
    if step_entry(table, frames, loop_at).is_some_and(|f| loaders.contains(&f)) {
        return StackKind::Handoff;
    }
    if keys
        .iter()
        .any(|&(function, _, origin)| is_gpu_sync(function, origin))
    {
        return StackKind::GpuSync;
    }
    if inner
        .iter()
        .any(|&(function, file, _)| is_data_path(function, file))
    {
        return StackKind::Load;
    }
    // Inside the loop only: a loop in a thread of its own runs under `threading`'s frames.
    let in_lock = inner.iter().any(|&(_, file, origin)| {
        origin == FileOrigin::Stdlib && LOCKS.iter().any(|l| file.ends_with(l))
    });
    if in_lock {
        StackKind::Lock
    } else {
        StackKind::Plain
    }
}

/// A GPU synchronisation: Python's `synchronize` (torch's device, stream and event), CUDA's
/// and NCCL's blocking calls in native frames.
pub(super) fn is_gpu_sync(function: &str, origin: FileOrigin) -> bool {
    let lower = function.to_ascii_lowercase();
    if lower.contains("synchronize") {
        return true;
    }
    origin == FileOrigin::Native
        && (lower.contains("nccl")
            || (lower.starts_with("cudamemcpy") && !lower.contains("async"))
            || lower.starts_with("cumemcpydtoh"))
}

/// Python's import system: `importlib`'s bootstrap, frozen (`<frozen importlib._bootstrap>`,
/// `..._external>`) or from its source files.
fn is_import(file: &str) -> bool {
    file.starts_with("<frozen importlib.")
        || file.ends_with("importlib/_bootstrap.py")
        || file.ends_with("importlib/_bootstrap_external.py")
}

/// The loop's own data path: the iterator protocol, torch's data package, or a function named
/// for loading (a word of its name starts with one of [`LOAD_WORDS`]).
fn is_data_path(function: &str, file: &str) -> bool {
    if file.contains("utils/data/") {
        return true;
    }
    function
        .split(['_', '.', ' '])
        .map(str::to_ascii_lowercase)
        .any(|word| LOAD_WORDS.iter().any(|w| word.starts_with(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_path_names_are_words_not_substrings() {
        assert!(is_data_path("read_record", "job.py"));
        assert!(is_data_path("__next__", "job.py"));
        assert!(is_data_path("InlineLoader.__next__", "job.py"));
        assert!(is_data_path("decode_sample", "job.py"));
        assert!(is_data_path("anything", "torch/utils/data/dataloader.py"));
        assert!(!is_data_path("spread_thread", "job.py"));
        assert!(!is_data_path("train_step", "job.py"));
        assert!(!is_data_path("save_checkpoint", "job.py"));
    }

    #[test]
    fn the_import_system_is_known_by_its_files() {
        assert!(is_import("<frozen importlib._bootstrap>"));
        assert!(is_import("<frozen importlib._bootstrap_external>"));
        assert!(is_import("/usr/lib/python3.10/importlib/_bootstrap.py"));
        assert!(!is_import("importlib_metadata/__init__.py"));
        assert!(!is_import("train.py"));
    }

    #[test]
    fn gpu_syncs() {
        assert!(is_gpu_sync("synchronize", FileOrigin::Package));
        assert!(is_gpu_sync("cudaStreamSynchronize", FileOrigin::Native));
        assert!(is_gpu_sync("ncclGroupEnd", FileOrigin::Native));
        assert!(!is_gpu_sync("cudaMemcpyAsync", FileOrigin::Native));
        assert!(!is_gpu_sync("nccl_setup", FileOrigin::Job));
    }
}
