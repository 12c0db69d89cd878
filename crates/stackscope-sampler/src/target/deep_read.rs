//! Stacks with what a sample leaves out, read by our own reader: local variables and paths
//! (`dump`, the hang report) on the interpreters whose `_Py_DebugOffsets` describes them
//! (3.13 and later; py-spy's reader reads them before), and native frames (`--native`) on
//! every version our reader reads with data stacks (3.11 and later; py-spy's reader before).
//!
//! The process is stopped once around everything: the sample's read, the deep read of each
//! thread's frames ([`crate::fast`]'s `deep`) where paths or locals are asked for, and each
//! thread's native unwind, which must all come from one instant to be joined. Merging needs
//! only which frames entered the eval loop, which the sample's own walk tells: `--native`
//! alone reads nothing more than a sample does, but for the unwinds, and stops only the threads
//! that ran since their last unwind ([`super::native_kept`]). Whether a thread runs is read
//! from `/proc` before the stop, since during it every thread reads as stopped.

use std::any::Any;

use py_spy::StackTrace;
use stackscope_event::{Frame, Frames};
use stackscope_native::{merge, EntryFrame};

use super::{PythonTarget, ThreadStack};
use crate::error::{stop_failure, SampleFailure};
use crate::fast::{DeepFrame, DeepThread, FastReader, ThreadRead};
use crate::leader::LiveThreadsStop;

impl PythonTarget {
    /// Whether stacks are read by [`read_stacks_deep`](PythonTarget::read_stacks_deep):
    /// locals or native frames were asked for and our reader reads them for this version.
    pub(super) fn reads_deep(&self) -> bool {
        self.fast.as_ref().is_some_and(|f| {
            (self.keep_raw && f.reads_deep())
                || (self.native.is_some()
                    && (f.reads_deep() || (!self.keep_raw && f.knows_entries())))
        })
    }

    pub(super) fn read_stacks_deep(&mut self) -> Result<Vec<ThreadStack>, SampleFailure> {
        // Native frames alone need only the threads that ran stopped.
        if self.native.is_some()
            && !self.keep_raw
            && self.fast.as_ref().is_some_and(FastReader::knows_entries)
        {
            return self.read_stacks_native();
        }
        let stops = self.deep_read_stops();
        let Some(fast) = self.fast.as_mut() else {
            return Ok(Vec::new());
        };
        // Whether a thread runs comes from before the stop, by the reader's own rules.
        let states = stops.then(|| fast.states_before_stop());
        let stop = self.stop_for_deep_read()?;
        let Some(fast) = self.fast.as_mut() else {
            return Ok(Vec::new());
        };
        // The process is stopped (unless nonblocking was asked for): no copy can be torn.
        let read = match states {
            Some(states) if stop.is_some() => fast.read_stopped(states),
            _ => fast.read(false),
        };
        let threads = match read {
            Ok(threads) => threads,
            Err(e) => {
                drop(stop);
                return Err(self.fast_failed(&e));
            }
        };
        let mut deep = if self.keep_raw || !fast.knows_entries() {
            fast.read_deep(self.locals)
        } else {
            fast.entry_threads()
        };
        let native: Vec<Option<stackscope_native::NativeStack>> = threads
            .iter()
            .map(|t| {
                let unwinder = self.native.as_mut()?;
                let tid = u32::try_from(t.os_thread_id?).ok()?;
                unwinder.unwind(tid).ok()
            })
            .collect();
        drop(stop);
        Ok(threads
            .into_iter()
            .zip(native)
            .map(|(thread, native)| {
                let frames = matching_deep(&mut deep, &thread);
                let active = thread.active;
                self.deep_stack(thread, frames, native, active)
            })
            .collect())
    }

    /// Whether a deep read stops the process: always to merge native frames, else unless
    /// the target was attached nonblocking.
    fn deep_read_stops(&self) -> bool {
        self.blocking || self.native.is_some()
    }

    /// Stops the process (or, its leader gone, its live threads) for a deep read; nothing
    /// when the target was attached nonblocking.
    fn stop_for_deep_read(&mut self) -> Result<Option<Box<dyn Any>>, SampleFailure> {
        let pid = self.pid;
        if !self.deep_read_stops() {
            return Ok(None);
        }
        Ok(Some(if self.leader_exited() {
            Box::new(LiveThreadsStop::new(self.read_pid).map_err(|e| stop_failure(pid, e))?)
        } else {
            Box::new(self.spy.process.lock().map_err(|e| stop_failure(pid, e))?)
        }))
    }

    /// One thread's stack: its Python frames, joined with its native ones where they were
    /// unwound and its deep read lines up, and py-spy's shape of its frames (paths,
    /// locals) for the dump.
    fn deep_stack(
        &mut self,
        thread: ThreadRead,
        deep: Option<Vec<DeepFrame>>,
        native: Option<stackscope_native::NativeStack>,
        active: bool,
    ) -> ThreadStack {
        let frames: Frames = match (&deep, native) {
            (Some(deep), Some(native)) => self.merge_native(&thread.frames, deep, &native),
            // Without a native stack, or one whose eval frames cannot be told from the deep
            // read, the Python frames alone.
            _ => thread.frames.clone(),
        };
        // Kept for a dump only: not built for every sample of `--native`.
        let raw = if self.keep_raw {
            raw_frames(&thread.frames, deep.as_deref(), self.locals)
        } else {
            Vec::new()
        };
        let trace = read_trace(self.pid, &thread, active, raw);
        self.thread_stack(trace, frames, active)
    }

    /// A thread's Python frames with its native stack merged in, where the deep read (or the
    /// sample's walk) says which Python frames entered the eval loop.
    pub(super) fn merge_native(
        &mut self,
        python: &[Frame],
        deep: &[DeepFrame],
        native: &stackscope_native::NativeStack,
    ) -> Frames {
        let python: Vec<EntryFrame> = python
            .iter()
            .zip(deep)
            .map(|(frame, d)| EntryFrame {
                frame: frame.clone(),
                entry: d.entry,
            })
            .collect();
        self.merged(&python, native)
    }

    /// `python`'s frames with `native`'s merged in, native names shortened.
    pub(super) fn merged(
        &mut self,
        python: &[EntryFrame],
        native: &stackscope_native::NativeStack,
    ) -> Frames {
        merge(python, &native.frames)
            .frames
            .into_iter()
            .map(|f| self.strings.shorten_native(f))
            .collect()
    }
}

/// The trace of `thread` as read, `frames` the raw ones a dump keeps (none for a sample).
pub(super) fn read_trace(
    pid: u32,
    thread: &ThreadRead,
    active: bool,
    frames: Vec<py_spy::Frame>,
) -> StackTrace {
    StackTrace {
        pid: pid as py_spy::Pid,
        thread_id: thread.thread_id,
        thread_name: thread.name.as_deref().map(str::to_owned),
        os_thread_id: thread.os_thread_id,
        active,
        owns_gil: thread.owns_gil,
        frames,
        process_info: None,
    }
}

/// The deep read of `thread`, when it has exactly the thread's frames (a thread that moved
/// between the two reads, possible only unstopped, has none).
pub(super) fn matching_deep(
    deep: &mut Vec<DeepThread>,
    thread: &ThreadRead,
) -> Option<Vec<DeepFrame>> {
    let at = deep.iter().position(|d| d.thread_id == thread.thread_id)?;
    let found = deep.swap_remove(at);
    (found.frames.len() == thread.frames.len()).then_some(found.frames)
}

/// py-spy's shape of a thread's Python frames, which the dump reads paths (and, with
/// `locals`, local variables) from.
fn raw_frames(frames: &[Frame], deep: Option<&[DeepFrame]>, locals: bool) -> Vec<py_spy::Frame> {
    frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let d = deep.and_then(|d| d.get(i));
            py_spy::Frame {
                name: f.function.to_string(),
                filename: d
                    .and_then(|d| d.path.clone())
                    .unwrap_or_else(|| f.file.to_string()),
                module: None,
                short_filename: Some(f.file.to_string()),
                line: i32::try_from(f.line).unwrap_or(0),
                locals: d.filter(|_| locals).map(|d| {
                    d.locals
                        .iter()
                        .map(|l| py_spy::stack_trace::LocalVariable {
                            name: l.name.clone(),
                            addr: 0,
                            arg: l.arg,
                            repr: Some(l.repr.clone()),
                        })
                        .collect()
                }),
                is_entry: d.is_some_and(|d| d.entry),
                is_shim_entry: false,
            }
        })
        .collect()
}
