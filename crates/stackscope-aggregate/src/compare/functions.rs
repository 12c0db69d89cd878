//! The two recordings' stacks matched by identity ([`crate::JobProcesses`]): functions by their
//! inclusive share of each recording's samples, and the matched stacks for the differential
//! flamegraph.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::noise::{Change, Measured};
use super::side::job_processes;
use super::CompareInput;
use crate::jobs::{frame_key, split_process_root, FrameMatch};

/// How many functions `compare.json` lists.
pub const COMPARED_FUNCTIONS: usize = 20;
/// A function is listed when it holds at least this share of either recording's samples.
const LISTED_MIN_SHARE: f64 = 0.01;

/// One function before and after: its inclusive share of each recording's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionChange {
    pub function: String,
    pub file: String,
    #[serde(flatten)]
    pub share: Change,
}

/// A stack of the two recordings, matched by identity, as shares of each one's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatchedStack {
    pub frames: Vec<String>,
    pub before: f64,
    pub after: f64,
}

/// The functions of both recordings, those that moved first, then by how far.
pub(crate) fn changes(
    before: &CompareInput,
    after: &CompareInput,
    frames: FrameMatch,
) -> Vec<FunctionChange> {
    let (b, a) = (inclusive(before, frames), inclusive(after, frames));
    let names: BTreeSet<&String> = b.counts.keys().chain(a.counts.keys()).collect();
    let mut out: Vec<FunctionChange> = deepest_of_chains(names, &b, &a)
        .into_iter()
        .map(|name| {
            let share = Change::of(
                &Measured::sample_share(b.share(name), before),
                &Measured::sample_share(a.share(name), after),
            );
            let (function, file) = split_function(name);
            FunctionChange {
                function,
                file,
                share,
            }
        })
        .filter(|f| f.share.before.max(f.share.after) >= LISTED_MIN_SHARE)
        .collect();
    // Those that moved by how far, then the rest by how large.
    let size = |f: &FunctionChange| {
        if f.share.moved {
            f.share.change.abs()
        } else {
            f.share.before.max(f.share.after)
        }
    };
    out.sort_by(|x, y| {
        y.share
            .moved
            .cmp(&x.share.moved)
            .then(size(y).total_cmp(&size(x)))
            .then(x.function.cmp(&y.function))
    });
    out.truncate(COMPARED_FUNCTIONS);
    out
}

/// Of the functions that are in exactly the same samples on both sides (a call chain:
/// `Thread._bootstrap → _bootstrap_inner → run`), the deepest one only: the others say nothing
/// more.
fn deepest_of_chains<'a>(
    names: BTreeSet<&'a String>,
    b: &Inclusive,
    a: &Inclusive,
) -> Vec<&'a String> {
    let mut chains: HashMap<(u64, u64), (&'a String, f64)> = HashMap::new();
    for name in names {
        let counts = (b.count(name), a.count(name));
        let depth = b.depth(name).max(a.depth(name));
        let deepest = chains.entry(counts).or_insert((name, depth));
        if depth > deepest.1 {
            *deepest = (name, depth);
        }
    }
    chains.into_values().map(|(name, _)| name).collect()
}

/// Samples per function (each counted once per stack it is in), its mean depth in them, and
/// the total.
struct Inclusive {
    counts: HashMap<String, u64>,
    /// Depth (frames above it) summed over its samples.
    depth_sums: HashMap<String, f64>,
    total: u64,
}

impl Inclusive {
    fn count(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    fn share(&self, name: &str) -> f64 {
        self.count(name) as f64 / self.total.max(1) as f64
    }

    /// Its mean depth; 0 when absent.
    fn depth(&self, name: &str) -> f64 {
        let n = self.count(name);
        if n == 0 {
            return 0.0;
        }
        self.depth_sums.get(name).copied().unwrap_or(0.0) / n as f64
    }
}

fn inclusive(input: &CompareInput, frames: FrameMatch) -> Inclusive {
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut depth_sums: HashMap<String, f64> = HashMap::new();
    let mut total = 0;
    for (stack, count) in &input.folded {
        total += count;
        let (_, rest) = split_process_root(stack);
        // The first frame left is the thread's; a recursive function counts once, outermost.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (depth, frame) in rest.split(';').skip(1).enumerate() {
            if !frame.is_empty() {
                seen.entry(frame_key(frame, frames)).or_insert(depth);
            }
        }
        for (key, depth) in seen {
            *depth_sums.entry(key.clone()).or_default() += (depth * *count as usize) as f64;
            *counts.entry(key).or_default() += count;
        }
    }
    Inclusive {
        counts,
        depth_sums,
        total,
    }
}

/// `function (file)` as its two parts; a frame with no file is all function.
fn split_function(key: &str) -> (String, String) {
    match key.rsplit_once(" (") {
        Some((function, file)) if key.ends_with(')') => {
            (function.to_owned(), file[..file.len() - 1].to_owned())
        }
        _ => (key.to_owned(), String::new()),
    }
}

/// Both recordings' stacks keyed by identity, as shares of each one's samples.
pub(crate) fn diff_stacks(
    before: &CompareInput,
    after: &CompareInput,
    frames: FrameMatch,
) -> Vec<MatchedStack> {
    let mut shares: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (input, is_after) in [(before, false), (after, true)] {
        let job = job_processes(&input.summary);
        let total: u64 = input.folded.iter().map(|(_, n)| n).sum();
        for (stack, count) in &input.folded {
            let share = *count as f64 / total.max(1) as f64;
            let entry = shares.entry(job.stack_key(stack, frames)).or_default();
            if is_after {
                entry.1 += share;
            } else {
                entry.0 += share;
            }
        }
    }
    shares
        .into_iter()
        .map(|(key, (before, after))| MatchedStack {
            frames: key.split(';').map(str::to_owned).collect(),
            before,
            after,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_keys_split_into_function_and_file() {
        assert_eq!(
            split_function("augment (train.py)"),
            ("augment".to_owned(), "train.py".to_owned())
        );
        assert_eq!(
            split_function("f (a.py:3)"),
            ("f".to_owned(), "a.py:3".to_owned())
        );
        assert_eq!(
            split_function("[idle]"),
            ("[idle]".to_owned(), String::new())
        );
    }
}
