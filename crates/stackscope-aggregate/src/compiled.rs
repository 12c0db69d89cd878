//! Time spent below a Python frame, in compiled code the Python stack does not show: a C
//! extension, Cython, a mypyc-compiled package (black, as pip installs it). Its profile is one
//! Python frame, the caller, and nothing of the work; `--native` shows the compiled functions.
//!
//! The rule, from what the sampler knows without native frames: a sample is kept only while
//! its thread runs on the CPU (idle samples are left out), and carries the line each Python
//! frame is at. Python code doing the work itself moves from line to line and call to call; a
//! thread that is on the CPU while its innermost Python frame stays at one and the same line,
//! sample after sample, is running one call made from that line: into compiled code. When
//! that is so for at least [`MIN_SHARE`] of a thread's kept samples (and [`MIN_SAMPLES`] of
//! them), the summary names the thread and the line and points at `--native`. Recordings that
//! keep idle samples (`--idle`: a sleeping thread also stays at one line) and stacks whose
//! innermost frame is native (`--native` already shows what runs) are left out. A known
//! limit of reading lines alone: a pure-Python loop whose body is one line (`acc += i * i`
//! under `for i in range(200)`) spends most of its samples at that line too, and can reach
//! the share.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use stackscope_event::FileOrigin;

use crate::{FrameId, StackTable};

/// The share of a thread's kept samples that must end at one Python line.
pub const MIN_SHARE: f64 = 2.0 / 3.0;
/// Fewer samples than this say nothing.
pub const MIN_SAMPLES: u64 = 20;

/// A thread whose time is below one Python line, in compiled code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompiledCode {
    /// The thread, as the flamegraphs root it (with its process root when there is one).
    pub thread: String,
    /// The innermost Python frame of those samples: `function (file:line)`.
    pub frame: String,
    /// Its share of the thread's kept samples.
    pub share: f64,
    /// The summary's line about it, naming `--native`.
    pub line: String,
}

/// The thread most of whose on-CPU samples end in a call into compiled code, if any.
pub fn compiled_code(table: &StackTable) -> Option<CompiledCode> {
    // Per thread (its root frames): kept samples, and those ending at each Python leaf.
    let mut threads: HashMap<Vec<FrameId>, (u64, HashMap<FrameId, u64>)> = HashMap::new();
    for stack in table.stacks() {
        let roots = stack
            .frames
            .iter()
            .take_while(|&&f| table.frame(f).is_some_and(|e| e.function.is_none()))
            .count();
        let (root, code) = stack.frames.split_at(roots);
        let entry = threads.entry(root.to_vec()).or_default();
        entry.0 += stack.counts.all;
        let leaf = code.last().filter(|&&f| {
            table
                .frame(f)
                .is_some_and(|e| e.origin != FileOrigin::Native)
        });
        if let Some(&leaf) = leaf {
            *entry.1.entry(leaf).or_default() += stack.counts.all;
        }
    }
    let (root, leaf, samples, total) = threads
        .into_iter()
        .filter_map(|(root, (total, leaves))| {
            let (leaf, samples) = leaves.into_iter().max_by_key(|&(f, n)| (n, f))?;
            Some((root, leaf, samples, total))
        })
        .filter(|&(_, _, samples, total)| {
            samples >= MIN_SAMPLES && samples as f64 >= MIN_SHARE * total as f64
        })
        .max_by_key(|&(_, _, samples, _)| samples)?;
    let label = |f: FrameId| table.frame(f).map_or("", |e| e.label.as_str()).to_owned();
    // `MainThread`, or `MainThread of process 412 python train.py` under a process root.
    let thread = match root.as_slice() {
        [.., process, thread] => format!("{} of {}", label(*thread), label(*process)),
        [thread] => label(*thread),
        [] => String::new(),
    };
    let frame = label(leaf);
    let share = samples as f64 / total as f64;
    let line = format!(
        "{:.0}% of the samples of {thread} are below {frame}, in compiled code (C, Cython, \
         mypyc) that Python frames do not show: --native shows it",
        share * 100.0
    );
    Some(CompiledCode {
        thread,
        frame,
        share,
        line,
    })
}
