//! Per-function sample counts: self (innermost frame) and total (anywhere on the stack).

use serde::{Deserialize, Serialize};

use super::intern::{StackCounts, StackTable};

/// How many of the top functions a summary lists.
pub const TOP_FUNCTIONS: usize = 20;

/// One function's share of the samples. A function is `(function, file)`: its lines are merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionStat {
    pub function: String,
    pub file: String,
    /// Samples in which it was the innermost frame.
    pub self_samples: u64,
    /// `self_samples` over the samples considered, 0 to 1.
    pub self_share: f64,
    /// Samples in which it was anywhere on the stack, counted once however deep it recursed.
    pub total_samples: u64,
    pub total_share: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopFunctions {
    pub by_self: Vec<FunctionStat>,
    pub by_total: Vec<FunctionStat>,
}

/// Every function with at least one sample in the view `count` selects, unordered.
pub fn function_stats(
    table: &StackTable,
    count: impl Fn(&StackCounts) -> u64,
) -> Vec<FunctionStat> {
    let n = table.function_count();
    let mut self_counts = vec![0u64; n];
    let mut total_counts = vec![0u64; n];
    // The index of the last stack that counted a function, so recursion counts once per stack.
    let mut last_counted = vec![usize::MAX; n];
    let mut samples = 0u64;
    for (stack_index, stack) in table.stacks().iter().enumerate() {
        let c = count(&stack.counts);
        if c == 0 {
            continue;
        }
        samples += c;
        let functions = stack
            .frames
            .iter()
            .filter_map(|&f| table.frame(f).and_then(|frame| frame.function));
        let mut innermost = None;
        for function in functions {
            let i = function as usize;
            if last_counted[i] != stack_index {
                last_counted[i] = stack_index;
                total_counts[i] += c;
            }
            innermost = Some(i);
        }
        if let Some(i) = innermost {
            self_counts[i] += c;
        }
    }
    let share = |x: u64| {
        if samples == 0 {
            0.0
        } else {
            x as f64 / samples as f64
        }
    };
    (0..n)
        .filter(|&i| total_counts[i] > 0)
        .filter_map(|i| {
            let key = table.function(i as u32)?;
            Some(FunctionStat {
                function: key.function.to_string(),
                file: key.file.to_string(),
                self_samples: self_counts[i],
                self_share: share(self_counts[i]),
                total_samples: total_counts[i],
                total_share: share(total_counts[i]),
            })
        })
        .collect()
}

/// The top `limit` functions by self samples and by total samples. Ties are broken by name so
/// the output does not depend on hash order.
pub fn top_functions(
    table: &StackTable,
    count: impl Fn(&StackCounts) -> u64,
    limit: usize,
) -> TopFunctions {
    let stats = function_stats(table, count);
    let mut by_self: Vec<FunctionStat> = stats
        .iter()
        .filter(|s| s.self_samples > 0)
        .cloned()
        .collect();
    by_self.sort_by(|a, b| {
        b.self_samples
            .cmp(&a.self_samples)
            .then(b.total_samples.cmp(&a.total_samples))
            .then_with(|| (&a.function, &a.file).cmp(&(&b.function, &b.file)))
    });
    by_self.truncate(limit);
    let mut by_total = stats;
    by_total.sort_by(|a, b| {
        b.total_samples
            .cmp(&a.total_samples)
            .then(b.self_samples.cmp(&a.self_samples))
            .then_with(|| (&a.function, &a.file).cmp(&(&b.function, &b.file)))
    });
    by_total.truncate(limit);
    TopFunctions { by_self, by_total }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::Frame;

    fn add(table: &mut StackTable, frames: &[Frame], times: u64) {
        let root = table.thread_root("MainThread");
        let id = table.intern(&[root], &frames.into());
        for _ in 0..times {
            table.count(id);
        }
    }

    #[test]
    fn self_and_total_with_recursion() {
        let mut table = StackTable::default();
        let main = Frame::python("main", "m.py", 1);
        let fib_a = Frame::python("fib", "f.py", 3);
        let fib_b = Frame::python("fib", "f.py", 4);
        let work = Frame::python("work", "w.py", 9);
        // Innermost first: fib recursing into itself, then into work.
        add(
            &mut table,
            &[fib_b.clone(), fib_a.clone(), fib_a.clone(), main.clone()],
            6,
        );
        add(&mut table, &[work.clone(), fib_a.clone(), main.clone()], 3);
        add(&mut table, std::slice::from_ref(&main), 1);

        let top = top_functions(&table, |c| c.all, 20);
        let names: Vec<&str> = top.by_self.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, vec!["fib", "work", "main"]);
        let fib = &top.by_self[0];
        assert_eq!((fib.self_samples, fib.total_samples), (6, 9));
        assert!((fib.self_share - 0.6).abs() < 1e-9);
        assert!(
            (fib.total_share - 0.9).abs() < 1e-9,
            "recursion counted once"
        );

        let names: Vec<&str> = top.by_total.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, vec!["main", "fib", "work"]);
        assert_eq!(top.by_total[0].total_samples, 10);
        assert_eq!(top.by_total[0].self_samples, 1);
    }

    #[test]
    fn same_name_in_two_files_is_two_functions() {
        let mut table = StackTable::default();
        add(&mut table, &[Frame::python("run", "a.py", 1)], 2);
        add(&mut table, &[Frame::python("run", "b.py", 1)], 1);
        let top = top_functions(&table, |c| c.all, 1);
        assert_eq!(top.by_self.len(), 1);
        assert_eq!(top.by_self[0].file, "a.py");
    }

    #[test]
    fn empty_view_has_no_functions() {
        let mut table = StackTable::default();
        add(&mut table, &[Frame::python("run", "a.py", 1)], 2);
        let top = top_functions(&table, |c| c.gpu_idle, 20);
        assert!(top.by_self.is_empty() && top.by_total.is_empty());
    }
}
