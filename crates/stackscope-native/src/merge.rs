//! Merging a thread's native frames with its Python frames into one stack in call order.
//!
//! The interpreter runs Python code in `_PyEval_EvalFrameDefault`. Up to 3.10 each call of it
//! runs one Python frame; from 3.11 one call runs a chain of Python frames, the outermost of
//! which is marked as the "entry" frame (py-spy's `is_entry`; from 3.12 the frame above a shim,
//! `is_shim_entry`). So, walking both stacks from the innermost frame, each native
//! `_PyEval_EvalFrameDefault` frame stands for the Python frames from the next unconsumed one
//! up to and including the next entry frame, and is replaced by them. The interpreter's other
//! frames (`PyObject_Call`, `_PyFunction_Vectorcall`, ...) are plumbing and dropped, except
//! those that say what a thread waits on (`PyThread_acquire_lock_timed`, `take_gil`,
//! `time_sleep`, ...). Frames of other modules (libc, a C extension, CUDA) are kept where they
//! are, so the wait of a blocked thread appears innermost, under the Python frame that
//! called it.

use std::collections::HashSet;
use std::sync::Arc;

use stackscope_event::{FileOrigin, Frame};

use crate::unwinder::NativeFrame;

/// A Python frame as the merge needs it: the frame itself, and whether it is an entry frame
/// (the outermost frame of one `_PyEval_EvalFrameDefault` call).
pub trait PythonFrame {
    fn to_frame(&self) -> Frame;
    fn is_entry(&self) -> bool;
}

impl PythonFrame for py_spy::Frame {
    fn to_frame(&self) -> Frame {
        Frame {
            function: Arc::from(self.name.as_str()),
            file: Arc::from(self.short_filename.as_deref().unwrap_or(&self.filename)),
            line: u32::try_from(self.line).unwrap_or(0),
            native: false,
            // Without the interpreter's prefix: the sampler converts its frames itself and
            // hands them over as [`EntryFrame`]s, with the origin its target's prefix decides.
            origin: FileOrigin::of_path(&self.filename, None),
        }
    }

    fn is_entry(&self) -> bool {
        self.is_entry || self.is_shim_entry
    }
}

/// A Python frame already converted (and its strings shared) by the sampler, with py-spy's
/// entry flag carried along: `entry: f.is_entry || f.is_shim_entry`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFrame {
    pub frame: Frame,
    pub entry: bool,
}

impl PythonFrame for EntryFrame {
    fn to_frame(&self) -> Frame {
        self.frame.clone()
    }

    fn is_entry(&self) -> bool {
        self.entry
    }
}

/// A merged stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// Innermost first, like `StackSample::frames`; native frames have `native: true`.
    pub frames: Vec<Frame>,
    /// Whether the evaluation-loop frames and the Python frames matched one for one. When
    /// not (a native stack cut short, an unusual interpreter), the Python frames that no
    /// native frame claimed are placed outermost, so native frames still come innermost.
    pub aligned: bool,
}

/// What the merge does with one native frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// An evaluation loop: replaced by the Python frames it runs.
    Eval,
    Keep,
    Drop,
}

/// Merges `python` (innermost first) with `native` (innermost first, as
/// [`crate::NativeUnwinder::unwind`] returns it) into one stack, innermost first.
pub fn merge<P: PythonFrame>(python: &[P], native: &[NativeFrame]) -> Merged {
    let roles = roles(native);
    let mut frames = Vec::with_capacity(python.len() + native.len());
    let mut next_python = 0;
    let mut idle_evals = 0;
    for (frame, role) in native.iter().zip(&roles) {
        match role {
            Role::Eval => {
                if next_python >= python.len() {
                    idle_evals += 1;
                }
                while let Some(p) = python.get(next_python) {
                    frames.push(p.to_frame());
                    next_python += 1;
                    if p.is_entry() {
                        break;
                    }
                }
            }
            Role::Keep => frames.push(native_frame(frame)),
            Role::Drop => {}
        }
    }
    let claimed_all = next_python == python.len();
    frames.extend(python.iter().skip(next_python).map(PythonFrame::to_frame));
    let evals = roles.iter().filter(|r| **r == Role::Eval).count();
    Merged {
        frames,
        aligned: claimed_all && idle_evals == 0 && (evals > 0 || python.is_empty()),
    }
}

/// The event frame for a native frame: `function (file:line)`, or `function (module)`.
pub fn native_frame(frame: &NativeFrame) -> Frame {
    let function = match &frame.function {
        Some(name) => name.clone(),
        None => Arc::from(frame.function_name()),
    };
    let (file, line) = match (&frame.file, frame.line) {
        (Some(file), Some(line)) => (file.clone(), line),
        _ => (Arc::from(frame.module_name()), 0),
    };
    Frame {
        function,
        file,
        line,
        native: true,
        origin: FileOrigin::Native,
    }
}

/// Decides each native frame's role.
fn roles(native: &[NativeFrame]) -> Vec<Role> {
    let is_eval = |f: &NativeFrame| {
        !f.inlined
            && matches!(
                f.function.as_deref(),
                Some("_PyEval_EvalFrameDefault" | "PyEval_EvalFrameEx")
            )
    };
    // The interpreter's modules: libpython, the python executable, and whatever module holds
    // the evaluation loop (an executable that embeds Python statically).
    let mut interpreter: HashSet<&str> = native
        .iter()
        .filter(|f| is_eval(f))
        .map(|f| &*f.module)
        .collect();
    interpreter.extend(
        native
            .iter()
            .filter(|f| {
                let name = f.module_name();
                name.starts_with("libpython") || name.starts_with("python")
            })
            .map(|f| &*f.module),
    );
    let outermost_eval = native.iter().rposition(is_eval);
    native
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if is_eval(f) {
                Role::Eval
            } else if outermost_eval.is_some_and(|e| i > e)
                && (interpreter.contains(&*f.module) || is_libc(f.module_name()))
            {
                // Process and thread start-up under the outermost Python frame: `_start`,
                // `__libc_start_main`, `Py_BytesMain`, `start_thread`, `clone3`.
                Role::Drop
            } else if interpreter.contains(&*f.module) {
                if f.function.as_deref().is_some_and(tells_a_wait) {
                    Role::Keep
                } else {
                    Role::Drop
                }
            } else {
                Role::Keep
            }
        })
        .collect()
}

fn is_libc(module_name: &str) -> bool {
    module_name.starts_with("libc.so")
        || module_name.starts_with("libc-")
        || module_name.starts_with("libpthread")
        || module_name.starts_with("ld-linux")
        || module_name.starts_with("ld-musl")
}

/// Whether an interpreter function says what the thread is doing (waiting on a lock, the GIL,
/// a sleep, a system call of the `os` module, a collection) rather than passing a call along.
fn tells_a_wait(function: &str) -> bool {
    const NAMES: &[&str] = &["take_gil", "drop_gil", "acquire_timed", "pysleep"];
    const FIRST_WORDS: &[&str] = &[
        "PyThread",
        "lock",
        "rlock",
        "PyGILState",
        "PyCOND",
        "PyMUTEX",
        "PyMutex",
        "PySemaphore",
        "PyParkingLot",
        "PyEvent",
        "time",
        "sys",
        "os",
        "gc",
        "sre",
    ];
    if NAMES.contains(&function) {
        return true;
    }
    function
        .split(['_', '.'])
        .find(|word| !word.is_empty())
        .is_some_and(|word| FIRST_WORDS.contains(&word))
}

#[cfg(test)]
mod tests;
