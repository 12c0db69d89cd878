//! Python's import machinery, folded for the eye: a job's start-up imports (torch's takes
//! ~170 frames) run `_find_and_load`, `_load_unlocked`, `exec_module`,
//! `_call_with_frames_removed`... of `<frozen importlib._bootstrap>` and
//! `<frozen importlib._bootstrap_external>` between each module's `<module>` frame and the next,
//! which draws a flamegraph taller than the screen with nothing to read in it. The drawings
//! (`flamegraph.svg`, report.html's flamegraph) show each run of those frames as one frame;
//! the module frames between them stay, so the chain of imports still reads. `stacks.folded`
//! and the exports keep every frame.

/// The one frame a run of import-machinery frames is drawn as.
pub const FOLDED_IMPORT_FRAME: &str = "[import machinery] (<frozen importlib>)";

/// Whether a frame label (`function (file:line)`) is a frame of the import machinery.
pub fn is_import_frame(label: &str) -> bool {
    label.contains("(<frozen importlib._bootstrap>")
        || label.contains("(<frozen importlib._bootstrap_external>")
}

/// `frames` with each run of import-machinery frames (`is_import`) replaced by `folded`.
pub fn fold_runs<T: Clone>(frames: &[T], is_import: impl Fn(&T) -> bool, folded: T) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(frames.len());
    let mut in_run = false;
    for frame in frames {
        let import = is_import(frame);
        if !(import && in_run) {
            out.push(if import {
                folded.clone()
            } else {
                frame.clone()
            });
        }
        in_run = import;
    }
    out
}

/// A folded line's stack (`root;frame;frame`) with its import runs folded.
pub fn fold_stack(stack: &str) -> String {
    let frames: Vec<&str> = stack.split(';').collect();
    fold_runs(&frames, |f| is_import_frame(f), FOLDED_IMPORT_FRAME).join(";")
}

/// Folded lines with their import runs folded, lines that became the same summed, in the
/// order each first appears.
pub fn fold_lines(lines: &[(String, u64)]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::with_capacity(lines.len());
    let mut at = std::collections::HashMap::new();
    for (stack, count) in lines {
        let stack = fold_stack(stack);
        match at.get(&stack) {
            Some(&i) => {
                let line: &mut (String, u64) = &mut out[i];
                line.1 += count;
            }
            None => {
                at.insert(stack.clone(), out.len());
                out.push((stack, *count));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIND: &str = "_find_and_load (<frozen importlib._bootstrap>:1176)";
    const EXEC: &str = "_LoaderBasics.exec_module (<frozen importlib._bootstrap_external>:940)";

    #[test]
    fn each_run_of_import_frames_is_one_frame_and_modules_stay() {
        let stack = format!(
            "MainThread;<module> (train.py:1);{FIND};{EXEC};<module> (torch/__init__.py:5);\
             {FIND};{EXEC};{FIND};<module> (torch/nn.py:2);load (torch/nn.py:9)"
        );
        assert_eq!(
            fold_stack(&stack),
            format!(
                "MainThread;<module> (train.py:1);{FOLDED_IMPORT_FRAME};\
                 <module> (torch/__init__.py:5);{FOLDED_IMPORT_FRAME};<module> (torch/nn.py:2);\
                 load (torch/nn.py:9)"
            )
        );
        // A stack without imports is left as it is; one that ends inside an import too.
        assert_eq!(
            fold_stack("MainThread;main (a.py:1)"),
            "MainThread;main (a.py:1)"
        );
        assert_eq!(
            fold_stack(&format!("MainThread;{FIND};{FIND}")),
            format!("MainThread;{FOLDED_IMPORT_FRAME}")
        );
    }

    #[test]
    fn lines_that_fold_alike_are_summed() {
        let lines = vec![
            (format!("T;{FIND};<module> (a.py:1)"), 2),
            ("T;main (b.py:3)".to_owned(), 5),
            (format!("T;{FIND};{EXEC};<module> (a.py:1)"), 3),
        ];
        assert_eq!(
            fold_lines(&lines),
            vec![
                (format!("T;{FOLDED_IMPORT_FRAME};<module> (a.py:1)"), 5),
                ("T;main (b.py:3)".to_owned(), 5),
            ]
        );
    }
}
