//! The differential verdict: the call path that tells GPU-idle time from GPU-busy time.
//!
//! The innermost function of the GPU-idle samples is often a helper both phases share (a
//! tight loop, a tensor copy), so it names nothing. What distinguishes the idle time is the
//! call path whose share rises most from the GPU-busy samples to the GPU-idle ones. Paths are
//! walked over functions `(function, file)`, below the thread and process roots, with every
//! stack counted once per path.
//!
//! The path named starts where the rise begins (the topmost caller that carries most of it:
//! `load_batch`, not `main`, which both phases share) and goes down while each callee carries
//! the rise too and is, as a function, itself more frequent in idle than in busy samples: so a
//! shared innermost helper (`busy`, called by both phases) is left off the end.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::fold::{FunctionId, StackCounts, StackTable};
use crate::gpu::MIN_SIDE_SAMPLES;

/// A path is named only when its share of the GPU-idle samples exceeds its share of the
/// GPU-busy ones by at least this much (0 to 1).
pub const MIN_RISE: f64 = 0.1;
/// A caller or callee joins the path when its rise is at least this part of the best rise.
const PATH_RISE: f64 = 0.8;
/// A callee joins the path only when the function itself, anywhere on the stack, rises at
/// least this part of the best rise: a helper both phases call does not.
const FUNCTION_RISE: f64 = 0.5;
/// The longest path named.
const MAX_PATH: usize = 6;

/// One function of the path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathFunction {
    pub function: String,
    pub file: String,
}

/// The call path that runs while the GPU idles and much less while it is busy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdlePath {
    /// Outermost first.
    pub functions: Vec<PathFunction>,
    /// GPU-idle samples whose stack runs through the whole path.
    pub idle_samples: u64,
    /// Share of the GPU-idle samples, 0 to 1.
    pub idle_share: f64,
    /// GPU-busy samples whose stack runs through the whole path.
    pub busy_samples: u64,
    /// Share of the GPU-busy samples, 0 to 1 (0 when there are none).
    pub busy_share: f64,
}

impl IdlePath {
    /// `load_batch → decode_images`.
    pub fn label(&self) -> String {
        self.functions
            .iter()
            .map(|f| f.function.as_str())
            .collect::<Vec<_>>()
            .join(" → ")
    }

    /// The files of the path, each once, in order.
    pub fn files(&self) -> Vec<&str> {
        let mut files: Vec<&str> = Vec::new();
        for f in &self.functions {
            if !files.contains(&f.file.as_str()) {
                files.push(&f.file);
            }
        }
        files
    }

    /// The verdict's sentence on the code: the same words in summary.json, the terminal and
    /// the report.
    pub fn sentence(&self) -> String {
        format!(
            "What sets GPU-idle time apart is {} ({}): in {:.0}% of GPU-idle samples and {:.0}% of \
             GPU-busy ones.",
            self.label(),
            self.files().join(", "),
            self.idle_share * 100.0,
            self.busy_share * 100.0
        )
    }
}

impl IdlePath {
    /// The low-SM verdict's sentence, for a path found by contrasting the GPU-busy samples
    /// taken with low SM activity (the "idle" side) with the other GPU-busy ones.
    pub fn low_sm_sentence(&self) -> String {
        format!(
            "What sets low-SM time apart is {} ({}): in {:.0}% of the samples taken while SM \
             activity was low and {:.0}% of the other GPU-busy ones.",
            self.label(),
            self.files().join(", "),
            self.idle_share * 100.0,
            self.busy_share * 100.0
        )
    }
}

#[derive(Debug, Default)]
struct Node {
    function: FunctionId,
    parent: Option<usize>,
    depth: usize,
    idle: u64,
    busy: u64,
    children: Vec<usize>,
}

/// The path whose share rises most from the GPU-busy to the GPU-idle samples, when one rises
/// by at least [`MIN_RISE`].
pub fn idle_path(table: &StackTable) -> Option<IdlePath> {
    idle_path_by(table, |c| (c.gpu_idle, c.gpu_busy))
}

/// As [`idle_path`], with the idle and busy counts of a stack chosen by `counts`.
pub fn idle_path_by(
    table: &StackTable,
    counts: impl Fn(&StackCounts) -> (u64, u64),
) -> Option<IdlePath> {
    let tree = CallTree::build(table, counts);
    if tree.idle_total < MIN_SIDE_SAMPLES || tree.busy_total < MIN_SIDE_SAMPLES {
        return None;
    }
    let best = tree.best()?;
    let best_rise = tree.node_rise(best);
    if best_rise < MIN_RISE {
        return None;
    }
    let top = tree.top_of(best, best_rise);
    let path = tree.down_from(top, best_rise);
    let last = &tree.nodes[*path.last()?];
    let functions = path
        .iter()
        .filter_map(|&n| table.function(tree.nodes[n].function))
        .map(|key| PathFunction {
            function: key.function.to_string(),
            file: key.file.to_string(),
        })
        .collect();
    Some(IdlePath {
        functions,
        idle_samples: last.idle,
        idle_share: share(last.idle, tree.idle_total),
        busy_samples: last.busy,
        busy_share: share(last.busy, tree.busy_total),
    })
}

/// `x` as a share of `total`; 0 of nothing.
fn share(x: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        x as f64 / total as f64
    }
}

/// The stacks' calls merged into one tree by function, with each node's and each function's
/// idle and busy samples (a function counted once per stack however often it recurses).
struct CallTree {
    nodes: Vec<Node>,
    function_counts: Vec<(u64, u64)>,
    idle_total: u64,
    busy_total: u64,
}

impl CallTree {
    fn build(table: &StackTable, counts: impl Fn(&StackCounts) -> (u64, u64)) -> CallTree {
        let mut index: HashMap<(Option<usize>, FunctionId), usize> = HashMap::new();
        let n_functions = table.function_count();
        let mut tree = CallTree {
            nodes: Vec::new(),
            function_counts: vec![(0u64, 0u64); n_functions],
            idle_total: 0,
            busy_total: 0,
        };
        let mut last_counted = vec![usize::MAX; n_functions];
        for (stack_index, stack) in table.stacks().iter().enumerate() {
            let (idle, busy) = counts(&stack.counts);
            if idle == 0 && busy == 0 {
                continue;
            }
            tree.idle_total += idle;
            tree.busy_total += busy;
            let mut parent: Option<usize> = None;
            let functions = stack
                .frames
                .iter()
                .filter_map(|&f| table.frame(f).and_then(|frame| frame.function));
            for function in functions {
                let id = tree.node(&mut index, parent, function);
                tree.nodes[id].idle += idle;
                tree.nodes[id].busy += busy;
                let f = function as usize;
                if last_counted[f] != stack_index {
                    last_counted[f] = stack_index;
                    tree.function_counts[f].0 += idle;
                    tree.function_counts[f].1 += busy;
                }
                parent = Some(id);
            }
        }
        tree
    }

    /// The node of `function` under `parent`, made (and linked to its parent) on first need.
    fn node(
        &mut self,
        index: &mut HashMap<(Option<usize>, FunctionId), usize>,
        parent: Option<usize>,
        function: FunctionId,
    ) -> usize {
        let depth = parent.map_or(0, |p| self.nodes[p].depth + 1);
        let nodes = &mut self.nodes;
        let id = *index.entry((parent, function)).or_insert_with(|| {
            nodes.push(Node {
                function,
                parent,
                depth,
                ..Node::default()
            });
            nodes.len() - 1
        });
        if let Some(p) = parent {
            if !self.nodes[p].children.contains(&id) {
                self.nodes[p].children.push(id);
            }
        }
        id
    }

    fn rise(&self, idle: u64, busy: u64) -> f64 {
        share(idle, self.idle_total) - share(busy, self.busy_total)
    }

    fn node_rise(&self, n: usize) -> f64 {
        self.rise(self.nodes[n].idle, self.nodes[n].busy)
    }

    fn function_rise(&self, f: FunctionId) -> f64 {
        let (i, b) = self.function_counts[f as usize];
        self.rise(i, b)
    }

    /// The best node; ties to the shallower, then the one with more idle samples.
    fn best(&self) -> Option<usize> {
        let nodes = &self.nodes;
        (0..nodes.len()).max_by(|&a, &b| {
            self.node_rise(a)
                .total_cmp(&self.node_rise(b))
                .then(nodes[b].depth.cmp(&nodes[a].depth))
                .then(nodes[a].idle.cmp(&nodes[b].idle))
                .then(b.cmp(&a))
        })
    }

    /// Up from `best` to where the rise begins.
    fn top_of(&self, best: usize, best_rise: f64) -> usize {
        let mut top = best;
        while let Some(parent) = self.nodes[top].parent {
            if self.node_rise(parent) >= PATH_RISE * best_rise {
                top = parent;
            } else {
                break;
            }
        }
        top
    }

    /// Down from `top` while callees carry the rise and are not helpers both phases share.
    fn down_from(&self, top: usize, best_rise: f64) -> Vec<usize> {
        let mut path = vec![top];
        let mut current = top;
        while path.len() < MAX_PATH {
            let next = self.nodes[current]
                .children
                .iter()
                .copied()
                .max_by(|&a, &b| {
                    self.node_rise(a)
                        .total_cmp(&self.node_rise(b))
                        .then(b.cmp(&a))
                });
            match next {
                Some(child)
                    if self.node_rise(child) >= PATH_RISE * best_rise
                        && self.function_rise(self.nodes[child].function)
                            >= FUNCTION_RISE * best_rise =>
                {
                    path.push(child);
                    current = child;
                }
                _ => break,
            }
        }
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuTag;
    use stackscope_event::Frame;

    /// Adds `idle` GPU-idle and `busy` GPU-busy samples of a stack given outermost first.
    fn add(table: &mut StackTable, outer_first: &[&str], idle: u64, busy: u64) {
        let root = table.thread_root("MainThread");
        let frames: Vec<Frame> = outer_first
            .iter()
            .rev()
            .enumerate()
            .map(|(i, f)| Frame::python(f, "train_sim.py", 10 + i as u32))
            .collect();
        let id = table.intern(&[root], &frames.into());
        for _ in 0..idle {
            table.count(id);
            table.count_tag(id, GpuTag::Idle);
        }
        for _ in 0..busy {
            table.count(id);
            table.count_tag(id, GpuTag::Busy);
        }
    }

    fn names(path: &IdlePath) -> Vec<&str> {
        path.functions.iter().map(|f| f.function.as_str()).collect()
    }

    #[test]
    fn phases_sharing_their_innermost_function() {
        let mut table = StackTable::default();
        // Both phases spend their time in `busy`; only the data phase runs while idle.
        add(
            &mut table,
            &["main", "load_batch", "decode_images", "busy"],
            90,
            3,
        );
        add(&mut table, &["main", "load_batch", "set_gpu_state"], 4, 0);
        add(&mut table, &["main", "forward_backward", "busy"], 6, 97);
        let path = idle_path(&table).expect("a path");
        assert_eq!(names(&path), vec!["load_batch", "decode_images"]);
        assert_eq!(path.idle_samples, 90);
        assert_eq!(path.busy_samples, 3);
        assert!((path.idle_share - 0.9).abs() < 1e-9);
        assert!((path.busy_share - 0.03).abs() < 1e-9);
        let sentence = path.sentence();
        assert!(
            sentence.contains("load_batch → decode_images (train_sim.py)"),
            "{sentence}"
        );
        assert!(
            sentence.contains("90% of GPU-idle samples and 3% of GPU-busy"),
            "{sentence}"
        );
    }

    #[test]
    fn a_callee_that_does_not_carry_the_rise_is_left_off() {
        let mut table = StackTable::default();
        // load_batch splits its idle time over two callees: neither carries the rise alone.
        add(&mut table, &["main", "load_batch", "read"], 50, 0);
        add(&mut table, &["main", "load_batch", "parse"], 45, 5);
        add(&mut table, &["main", "step"], 5, 95);
        let path = idle_path(&table).expect("a path");
        assert_eq!(names(&path), vec!["load_batch"]);
    }

    #[test]
    fn no_path_when_idle_and_busy_look_alike() {
        let mut table = StackTable::default();
        add(&mut table, &["main", "a"], 50, 50);
        add(&mut table, &["main", "b"], 50, 52);
        assert_eq!(idle_path(&table), None);
    }

    #[test]
    fn no_path_without_idle_samples() {
        let mut table = StackTable::default();
        add(&mut table, &["main", "a"], 0, 50);
        assert_eq!(idle_path(&table), None);
    }

    #[test]
    fn no_path_without_busy_samples_to_contrast() {
        let mut table = StackTable::default();
        add(&mut table, &["main", "wait_for_data"], 80, 0);
        add(&mut table, &["main", "log"], 20, 0);
        assert_eq!(idle_path(&table), None);
    }
}
