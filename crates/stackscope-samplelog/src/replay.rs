//! The reader's side of interning: replays records into the tables and turns samples back into
//! [`Event`]s with their full frames and thread.

use std::sync::Arc;

use stackscope_event::{
    CgroupSample, Event, FileOrigin, Frame, GpuSample, MemorySample, ProcessEvent, SampleError,
    SampleErrorKind, StackSample, ThreadInfo, Timestamp,
};

use crate::error::DecodeError;
use crate::intern::InternLimits;
use crate::record::{decode, Record, ThreadRecord};
use crate::sync::{BlockStart, Counts};
use crate::varint::Bytes;

#[derive(Debug, Clone)]
struct ThreadDef {
    pid: u32,
    python_thread_id: u64,
    os_thread_id: Option<u64>,
    name: Option<Arc<str>>,
}

/// The tables and time bases as the writer had them after the same records. A definition lost
/// in a damaged block is `None`: what refers to it is lost too (a frame whose string is lost, a
/// stack with a lost frame), and an event that uses it is left out and counted.
#[derive(Debug, Default)]
pub struct Replay {
    strings: Vec<Option<Arc<str>>>,
    string_bytes: usize,
    frames: Vec<Option<Frame>>,
    /// Frame ids, innermost first.
    stacks: Vec<Option<Box<[u32]>>>,
    stack_frames: usize,
    threads: Vec<Option<ThreadDef>>,
    tick_base: u64,
    gpu_base: u64,
    /// Time of the block's last memory or cgroup reading: 0 at each block start and reset
    /// (`memory_record.rs`).
    memory_base: u64,
    /// Resets so far (format 2's block starts say which epoch their block is in).
    epoch: u64,
    /// Whether records were lost since the last block start: the next one rebuilds from its
    /// copy instead of being checked against the tables.
    out_of_sync: bool,
    /// Events left out because a definition they use was lost.
    lost: u64,
}

impl Replay {
    /// Events left out so far because a definition they use was in a damaged block.
    pub fn lost_events(&self) -> u64 {
        self.lost
    }

    /// Records were lost (a damaged block): the next block start resynchronises.
    pub fn lose_sync(&mut self) {
        self.out_of_sync = true;
    }

    /// Applies one record; returns the event it stands for, if it is one.
    pub fn apply(&mut self, record: Record<'_>) -> Result<Option<Event>, DecodeError> {
        match record {
            Record::Header(_) => return Err(DecodeError::Misplaced("header")),
            // Read with the header, by the reader: anywhere else it is misplaced.
            Record::Segment(_) => return Err(DecodeError::Misplaced("segment")),
            Record::BlockStart(start) => self.block_start(&start)?,
            Record::Reset => {
                self.clear();
                self.epoch += 1;
            }
            Record::String(s) => self.define_string(s)?,
            Record::Frame {
                function,
                file,
                line,
                native,
                origin,
            } => self.define_frame(function, file, line, native, origin)?,
            Record::Stack(ids) => self.define_stack(ids)?,
            Record::Thread(thread) => self.define_thread(thread)?,
            Record::Sample {
                delta,
                thread,
                stack,
                active,
                owns_gil,
            } => {
                let time = advance(&mut self.tick_base, delta);
                return self.sample(time, thread, stack, active, owns_gil);
            }
            Record::Error {
                delta,
                pid,
                kind,
                message,
            } => {
                let time = advance(&mut self.tick_base, delta);
                return self.error(time, pid, kind, message);
            }
            Record::Process {
                delta,
                pid,
                kind,
                how,
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
                    how,
                })));
            }
            Record::Gpu { delta, sample } => {
                let time = advance(&mut self.gpu_base, delta);
                return Ok(Some(Event::Gpu(GpuSample { time, ..sample })));
            }
            Record::Memory { delta, sample } => {
                let time = advance(&mut self.memory_base, delta);
                return Ok(Some(Event::Memory(MemorySample { time, ..sample })));
            }
            Record::Cgroup { delta, sample } => {
                let time = advance(&mut self.memory_base, delta);
                return Ok(Some(Event::Cgroup(CgroupSample { time, ..sample })));
            }
        }
        Ok(None)
    }

    fn define_string(&mut self, s: &str) -> Result<(), DecodeError> {
        let limits = InternLimits::HARD;
        check(self.strings.len() < limits.strings, "string")?;
        self.string_bytes += s.len();
        check(self.string_bytes <= limits.string_bytes, "string")?;
        self.strings.push(Some(Arc::from(s)));
        Ok(())
    }

    /// A frame: lost when its function's or file's string is.
    fn define_frame(
        &mut self,
        function: u64,
        file: u64,
        line: u32,
        native: bool,
        origin: Option<FileOrigin>,
    ) -> Result<(), DecodeError> {
        check(self.frames.len() < InternLimits::HARD.frames, "frame")?;
        let (function, file) = (self.string(function)?, self.string(file)?);
        let frame = function.zip(file).map(|(function, file)| Frame {
            function: function.clone(),
            file: file.clone(),
            line,
            native,
            // A log from before origins were kept: today's inference from the name.
            origin: origin.unwrap_or_else(|| FileOrigin::infer(file, native)),
        });
        self.frames.push(frame);
        Ok(())
    }

    /// A sampling error: lost when its message's string is.
    fn error(
        &mut self,
        time: Timestamp,
        pid: u32,
        kind: SampleErrorKind,
        message: u64,
    ) -> Result<Option<Event>, DecodeError> {
        let Some(message) = self.string(message)? else {
            self.lost += 1;
            return Ok(None);
        };
        Ok(Some(Event::SampleError(SampleError {
            time,
            pid,
            kind,
            message: message.to_string(),
        })))
    }

    /// A stack: lost when any of its frames is.
    fn define_stack(&mut self, ids: Vec<u64>) -> Result<(), DecodeError> {
        let limits = InternLimits::HARD;
        check(self.stacks.len() < limits.stacks, "stack")?;
        self.stack_frames += ids.len();
        check(self.stack_frames <= limits.stack_frames, "stack")?;
        let mut lost = false;
        let stack = ids
            .into_iter()
            .map(|id| {
                let frame = u32::try_from(id)
                    .ok()
                    .and_then(|index| Some((index, self.frames.get(index as usize)?)));
                match frame {
                    Some((index, frame)) => {
                        lost |= frame.is_none();
                        Ok(index)
                    }
                    None => Err(DecodeError::UndefinedId { what: "frame", id }),
                }
            })
            .collect::<Result<Box<[u32]>, DecodeError>>()?;
        self.stacks.push((!lost).then_some(stack));
        Ok(())
    }

    /// A stack sample at `time`; `None` (counted) when its thread or stack was lost.
    fn sample(
        &mut self,
        time: Timestamp,
        thread: u64,
        stack: u64,
        active: bool,
        owns_gil: bool,
    ) -> Result<Option<Event>, DecodeError> {
        let (Some(def), Some(ids)) = (self.thread(thread)?, self.stack(stack)?) else {
            self.lost += 1;
            return Ok(None);
        };
        // A stack is defined only when every frame it uses is.
        let frames = ids
            .iter()
            .filter_map(|&id| self.frames.get(id as usize).cloned().flatten())
            .collect();
        Ok(Some(Event::Stack(StackSample {
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
        })))
    }

    /// Forgets the tables and time bases, as a reset does.
    fn clear(&mut self) {
        *self = Replay {
            epoch: self.epoch,
            out_of_sync: self.out_of_sync,
            lost: self.lost,
            ..Replay::default()
        };
    }

    fn counts(&self) -> Counts {
        Counts {
            strings: self.strings.len() as u64,
            frames: self.frames.len() as u64,
            stacks: self.stacks.len() as u64,
            threads: self.threads.len() as u64,
        }
    }

    /// A block's start: the tables must be as it says, or are made so from its copy.
    fn block_start(&mut self, start: &BlockStart<'_>) -> Result<(), DecodeError> {
        let in_sync =
            !self.out_of_sync && start.epoch == self.epoch && start.sizes == self.counts();
        if !in_sync {
            self.resync(start)?;
        }
        self.tick_base = start.tick_base;
        self.gpu_base = start.gpu_base;
        self.memory_base = 0;
        Ok(())
    }

    /// Makes the tables what they were at the block's start: of its epoch, each cut or padded
    /// (with lost definitions) to where the copy begins, then the copy applied.
    fn resync(&mut self, start: &BlockStart<'_>) -> Result<(), DecodeError> {
        if start.epoch != self.epoch {
            self.clear();
            self.epoch = start.epoch;
        }
        let limits = InternLimits::HARD;
        let from = start.copy_from;
        check(from.strings <= limits.strings as u64, "string")?;
        check(from.frames <= limits.frames as u64, "frame")?;
        check(from.stacks <= limits.stacks as u64, "stack")?;
        check(start.sizes.threads <= limits.threads as u64, "thread")?;
        self.strings.resize(from.strings as usize, None);
        self.frames.resize(from.frames as usize, None);
        self.stacks.resize(from.stacks as usize, None);
        // Threads are defined by id: the copy redefines those of the previous block.
        self.threads.resize(start.sizes.threads as usize, None);
        self.string_bytes = self.strings.iter().flatten().map(|s| s.len()).sum();
        self.stack_frames = self.stacks.iter().flatten().map(|s| s.len()).sum();
        let mut copy = Bytes::new(start.copy);
        while copy.remaining() > 0 {
            match decode(&mut copy)? {
                definition @ (Record::String(_)
                | Record::Frame { .. }
                | Record::Stack(_)
                | Record::Thread(_)) => {
                    self.apply(definition)?;
                }
                _ => return Err(DecodeError::Unsynced("an event in a block start's copy")),
            }
        }
        if self.counts() != start.sizes {
            return Err(DecodeError::Unsynced(
                "a block start that its copy does not fill",
            ));
        }
        self.out_of_sync = false;
        Ok(())
    }

    fn define_thread(&mut self, record: ThreadRecord) -> Result<(), DecodeError> {
        // A name lost in a damaged block: the thread is still known by its ids.
        let name = match record.name {
            Some(id) => self.string(id)?.cloned(),
            None => None,
        };
        let def = ThreadDef {
            pid: record.pid,
            python_thread_id: record.python_thread_id,
            os_thread_id: record.os_thread_id,
            name,
        };
        let id = index(record.id)?;
        if let Some(slot) = self.threads.get_mut(id) {
            *slot = Some(def);
        } else if id == self.threads.len() {
            check(self.threads.len() < InternLimits::HARD.threads, "thread")?;
            self.threads.push(Some(def));
        } else {
            // The writer numbers threads densely: a gap is corruption.
            return Err(DecodeError::UndefinedId {
                what: "thread",
                id: record.id,
            });
        }
        Ok(())
    }

    /// A defined string, `None` when its definition was lost.
    fn string(&self, id: u64) -> Result<Option<&Arc<str>>, DecodeError> {
        self.strings
            .get(index(id)?)
            .map(Option::as_ref)
            .ok_or(DecodeError::UndefinedId { what: "string", id })
    }

    fn thread(&self, id: u64) -> Result<Option<&ThreadDef>, DecodeError> {
        self.threads
            .get(index(id)?)
            .map(Option::as_ref)
            .ok_or(DecodeError::UndefinedId { what: "thread", id })
    }

    fn stack(&self, id: u64) -> Result<Option<&[u32]>, DecodeError> {
        self.stacks
            .get(index(id)?)
            .map(Option::as_deref)
            .ok_or(DecodeError::UndefinedId { what: "stack", id })
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
