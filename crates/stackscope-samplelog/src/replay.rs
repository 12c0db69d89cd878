//! The reader's side of interning: replays records into the tables and turns samples back into
//! [`Event`]s with their full frames and thread.

use std::sync::Arc;

use stackscope_event::{
    Event, Frame, GpuSample, ProcessEvent, SampleError, StackSample, ThreadInfo, Timestamp,
};

use crate::error::DecodeError;
use crate::intern::InternLimits;
use crate::record::{Record, ThreadRecord};

#[derive(Debug, Clone)]
struct ThreadDef {
    pid: u32,
    python_thread_id: u64,
    os_thread_id: Option<u64>,
    name: Option<Arc<str>>,
}

/// The tables and time bases as the writer had them after the same records.
#[derive(Debug, Default)]
pub struct Replay {
    strings: Vec<Arc<str>>,
    string_bytes: usize,
    frames: Vec<Frame>,
    /// Frame ids, innermost first.
    stacks: Vec<Box<[u32]>>,
    stack_frames: usize,
    threads: Vec<ThreadDef>,
    tick_base: u64,
    gpu_base: u64,
}

impl Replay {
    /// Applies one record; returns the event it stands for, if it is one.
    pub fn apply(&mut self, record: Record<'_>) -> Result<Option<Event>, DecodeError> {
        let limits = InternLimits::HARD;
        match record {
            Record::Header(_) => return Err(DecodeError::Misplaced("header")),
            Record::Reset => *self = Replay::default(),
            Record::String(s) => {
                check(self.strings.len() < limits.strings, "string")?;
                self.string_bytes += s.len();
                check(self.string_bytes <= limits.string_bytes, "string")?;
                self.strings.push(Arc::from(s));
            }
            Record::Frame {
                function,
                file,
                line,
                native,
            } => {
                check(self.frames.len() < limits.frames, "frame")?;
                let frame = Frame {
                    function: self.string(function)?.clone(),
                    file: self.string(file)?.clone(),
                    line,
                    native,
                };
                self.frames.push(frame);
            }
            Record::Stack(ids) => {
                check(self.stacks.len() < limits.stacks, "stack")?;
                self.stack_frames += ids.len();
                check(self.stack_frames <= limits.stack_frames, "stack")?;
                let stack = ids
                    .into_iter()
                    .map(|id| match u32::try_from(id) {
                        Ok(index) if (index as usize) < self.frames.len() => Ok(index),
                        _ => Err(DecodeError::UndefinedId { what: "frame", id }),
                    })
                    .collect::<Result<Box<[u32]>, DecodeError>>()?;
                self.stacks.push(stack);
            }
            Record::Thread(thread) => self.define_thread(thread)?,
            Record::Sample {
                delta,
                thread,
                stack,
                active,
                owns_gil,
            } => {
                let time = advance(&mut self.tick_base, delta);
                let def = self.thread(thread)?;
                let ids = self
                    .stacks
                    .get(index(stack)?)
                    .ok_or(DecodeError::UndefinedId {
                        what: "stack",
                        id: stack,
                    })?;
                // Ids were checked when the stack was defined.
                let frames = ids
                    .iter()
                    .filter_map(|&id| self.frames.get(id as usize).cloned())
                    .collect();
                return Ok(Some(Event::Stack(StackSample {
                    time,
                    pid: def.pid,
                    thread: ThreadInfo {
                        os_thread_id: def.os_thread_id,
                        python_thread_id: def.python_thread_id,
                        name: def.name.clone(),
                        active,
                        owns_gil,
                    },
                    frames,
                })));
            }
            Record::Error {
                delta,
                pid,
                kind,
                message,
            } => {
                let time = advance(&mut self.tick_base, delta);
                return Ok(Some(Event::SampleError(SampleError {
                    time,
                    pid,
                    kind,
                    message: self.string(message)?.to_string(),
                })));
            }
            Record::Process {
                delta,
                pid,
                kind,
                command_line,
            } => {
                let time = advance(&mut self.tick_base, delta);
                return Ok(Some(Event::Process(ProcessEvent {
                    time,
                    pid,
                    command_line: command_line.to_owned(),
                    kind,
                    // The log does not keep ranks: a rebuilt report names processes by pid.
                    rank: Default::default(),
                })));
            }
            Record::Gpu { delta, sample } => {
                let time = advance(&mut self.gpu_base, delta);
                return Ok(Some(Event::Gpu(GpuSample { time, ..sample })));
            }
        }
        Ok(None)
    }

    fn define_thread(&mut self, record: ThreadRecord) -> Result<(), DecodeError> {
        let name = record.name.map(|id| self.string(id).cloned()).transpose()?;
        let def = ThreadDef {
            pid: record.pid,
            python_thread_id: record.python_thread_id,
            os_thread_id: record.os_thread_id,
            name,
        };
        let id = index(record.id)?;
        if let Some(slot) = self.threads.get_mut(id) {
            *slot = def;
        } else if id == self.threads.len() {
            check(self.threads.len() < InternLimits::HARD.threads, "thread")?;
            self.threads.push(def);
        } else {
            // The writer numbers threads densely: a gap is corruption.
            return Err(DecodeError::UndefinedId {
                what: "thread",
                id: record.id,
            });
        }
        Ok(())
    }

    fn string(&self, id: u64) -> Result<&Arc<str>, DecodeError> {
        self.strings
            .get(index(id)?)
            .ok_or(DecodeError::UndefinedId { what: "string", id })
    }

    fn thread(&self, id: u64) -> Result<&ThreadDef, DecodeError> {
        self.threads
            .get(index(id)?)
            .ok_or(DecodeError::UndefinedId { what: "thread", id })
    }
}

fn index(id: u64) -> Result<usize, DecodeError> {
    usize::try_from(id).map_err(|_| DecodeError::Overflow)
}

fn check(ok: bool, what: &'static str) -> Result<(), DecodeError> {
    if ok {
        Ok(())
    } else {
        Err(DecodeError::TableTooLarge { what })
    }
}

/// Moves `base` by `delta` (wrapping, as the writer computed it) and returns the new time.
fn advance(base: &mut u64, delta: i64) -> Timestamp {
    *base = base.wrapping_add(delta as u64);
    Timestamp(*base)
}
