//! The records inside a block: one tag byte, then the fields, all varints unless said.
//!
//! | tag | record | fields |
//! | --- | --- | --- |
//! | 0x01 | header | see [`crate::LogHeader`]; only first in the first block |
//! | 0x02 | reset | none: forget every table and every time base (tick, GPU, memory) |
//! | 0x03 | string | length, UTF-8 bytes; its id is the next string id |
//! | 0x04 | frame | function string id, file string id, line, kind (byte: 1 native; a Python frame's origin, 2 the job's code, 3 the standard library, 4 an installed package; 0, before format 3, a Python frame whose origin is inferred from its file name) |
//! | 0x05 | stack | frame count, frame ids innermost first |
//! | 0x06 | thread | thread id, pid, Python thread id, OS thread id + 1 (0: none), name string id + 1 (0: none) |
//! | 0x07 | sample error | time delta, pid, kind (byte), message string id |
//! | 0x08 | process | time delta, pid, kind (byte), command line (length, bytes) |
//! | 0x09 | GPU sample | GPU time delta, device, presence mask (byte), present fields |
//! | 0x0a | GPU sample with GPM | as 0x09, then a second mask (byte: SM activity, SM occupancy, tensor activity, DRAM bandwidth) and its present fields |
//! | 0x0c | GPU sample with its compute processes | as 0x0a (the second mask may be 0), then the count of pids NVML lists with a compute context on the device and the pids |
//! | 0x0d | GPU sample with its processes' memory | as 0x0a (the second mask may be 0), then the compute pids' count plus one (0: not listed) and the pids, then the count of processes and each one's pid and GPU memory in bytes |
//! | 0x0e | memory | memory time delta, pid, presence mask (byte: private, shared, swap), RSS in bytes, the present fields (see `memory_record.rs`) |
//! | 0x0f | cgroup | memory time delta, presence mask (byte: limit, OOM kills), usage in bytes, the present fields |
//! | 0x0b | block start | format 2, first in every block but the header's: epoch, tick base, GPU base, the four table sizes, the four ids the copy begins at, the copy's length and bytes (see `sync.rs`) |
//! | 0x10-0x13 | stack sample | (tag bit 0: active, bit 1: owns GIL) time delta, thread id, stack id |
//! | 0x14 | segment | only in a segmented log's header block, after the header (see `segments.rs`): the segment's number (1 for the first), the time it starts at (event clock, ns), the number of attach events it opens with that repeat those of processes still alive |
//!
//! Strings, frames and stacks get ids in the order they are defined, from 0 after each reset
//! (and after a block start of another epoch).
//! Times are zigzag deltas: stack samples, errors and process events from the previous one of
//! them (they share the sampler's tick clock), GPU samples from the previous GPU sample (they
//! arrive late, in their own order). Both bases start at 0, so the first delta is absolute.
//! Memory and cgroup readings (their own producer, their own order) are deltas from the
//! previous one of them within the block: their base starts at 0 at every block start and
//! reset, so that block starts stay as format 2 made them (`memory_record.rs` says why).
//!
//! A record added later gets a tag of its own (0x0a, 0x0c to 0x0f), so that a log without it
//! is written byte for byte as before, and the format number stays: an older reader refuses a
//! tag it does not know (`DecodeError::UnknownTag`) and skips the block as damaged, never
//! misreads it.

use stackscope_event::{
    CgroupSample, FileOrigin, Frame, GpuSample, HowEnded, MemorySample, ProcessEventKind,
    SampleErrorKind, Timestamp,
};

use crate::error::DecodeError;
use crate::header::LogHeader;
use crate::memory_record::{
    decode_cgroup, decode_memory, decode_optional_pids, decode_process_memory, put_optional_pids,
    put_process_memory, TAG_CGROUP, TAG_MEMORY,
};
use crate::sync::BlockStart;
use crate::varint::{put_f32, put_str, put_varint, zigzag, Bytes};

pub const TAG_HEADER: u8 = 0x01;
pub const TAG_RESET: u8 = 0x02;
pub const TAG_STRING: u8 = 0x03;
pub const TAG_FRAME: u8 = 0x04;
pub const TAG_STACK: u8 = 0x05;
pub const TAG_THREAD: u8 = 0x06;
pub const TAG_ERROR: u8 = 0x07;
pub const TAG_PROCESS: u8 = 0x08;
pub const TAG_GPU: u8 = 0x09;
/// A GPU sample carrying GPM readings: a tag of its own so that logs without them stay as
/// they were, byte for byte.
pub const TAG_GPU_GPM: u8 = 0x0a;
pub const TAG_BLOCK_START: u8 = 0x0b;
/// A GPU sample carrying the device's compute processes: a tag of its own, so that a log
/// without them stays as it was and an old one reads as "not listed".
pub const TAG_GPU_PIDS: u8 = 0x0c;
/// A GPU sample carrying its processes' GPU memory: a tag of its own, so that a log without
/// it stays as it was and an old one reads as "no process memory".
pub const TAG_GPU_MEMORY: u8 = 0x0d;
pub const TAG_SAMPLE: u8 = 0x10;
/// A segment's number and start, in the header block of a log kept in segments: a tag of its
/// own, so that a log without limits stays as it was, byte for byte.
pub const TAG_SEGMENT: u8 = 0x14;
/// A frame's kind byte. Before format 3 a Python frame was 0, whatever its origin.
const FRAME_PYTHON_UNSAID: u8 = 0;
const FRAME_NATIVE: u8 = 1;
const FRAME_JOB: u8 = 2;
const FRAME_STDLIB: u8 = 3;
const FRAME_PACKAGE: u8 = 4;
const SAMPLE_ACTIVE: u8 = 0x01;
const SAMPLE_OWNS_GIL: u8 = 0x02;

/// One decoded record; strings borrow from the block.
#[derive(Debug, Clone, PartialEq)]
pub enum Record<'a> {
    Header(LogHeader),
    BlockStart(BlockStart<'a>),
    Reset,
    String(&'a str),
    Frame {
        function: u64,
        file: u64,
        line: u32,
        native: bool,
        /// `None` in a log written before origins were kept: inferred from the file name.
        origin: Option<FileOrigin>,
    },
    Stack(Vec<u64>),
    Thread(ThreadRecord),
    Sample {
        delta: i64,
        thread: u64,
        stack: u64,
        active: bool,
        owns_gil: bool,
    },
    Error {
        delta: i64,
        pid: u32,
        kind: SampleErrorKind,
        message: u64,
    },
    Process {
        delta: i64,
        pid: u32,
        kind: ProcessEventKind,
        how: Option<HowEnded>,
        command_line: &'a str,
    },
    /// The sample's `time` is left 0; `delta` says it.
    Gpu {
        delta: i64,
        sample: GpuSample,
    },
    /// The sample's `time` is left 0; `delta`, from the memory base, says it.
    Memory {
        delta: i64,
        sample: MemorySample,
    },
    /// The sample's `time` is left 0; `delta`, from the memory base, says it.
    Cgroup {
        delta: i64,
        sample: CgroupSample,
    },
    Segment(SegmentRecord),
}

/// Which segment a file of a segmented log is (`segments.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRecord {
    /// 1 for the first segment of the recording.
    pub index: u64,
    /// Where it starts, on the event clock: the newest event logged when it was opened.
    pub start: Timestamp,
    /// How many attach events it opens with that repeat those of processes still alive.
    pub carried: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRecord {
    pub id: u64,
    pub pid: u32,
    pub python_thread_id: u64,
    pub os_thread_id: Option<u64>,
    pub name: Option<u64>,
}

pub fn put_header(out: &mut Vec<u8>, header: &LogHeader) {
    out.push(TAG_HEADER);
    header.encode(out);
}

pub fn put_segment(out: &mut Vec<u8>, segment: &SegmentRecord) {
    out.push(TAG_SEGMENT);
    put_varint(out, segment.index);
    put_varint(out, segment.start.as_nanos());
    put_varint(out, segment.carried);
}

pub fn put_block_start(out: &mut Vec<u8>, start: &BlockStart<'_>) {
    out.push(TAG_BLOCK_START);
    start.put(out);
}

pub fn put_reset(out: &mut Vec<u8>) {
    out.push(TAG_RESET);
}

pub fn put_string(out: &mut Vec<u8>, s: &str) {
    out.push(TAG_STRING);
    put_str(out, s);
}

pub fn put_frame(out: &mut Vec<u8>, function: u32, file: u32, line: u32, frame: &Frame) {
    out.push(TAG_FRAME);
    put_varint(out, u64::from(function));
    put_varint(out, u64::from(file));
    put_varint(out, u64::from(line));
    out.push(frame_kind(frame.native, frame.origin));
}

/// A frame's kind byte: native, or where its Python code comes from.
fn frame_kind(native: bool, origin: FileOrigin) -> u8 {
    match origin {
        _ if native => FRAME_NATIVE,
        FileOrigin::Job => FRAME_JOB,
        FileOrigin::Stdlib => FRAME_STDLIB,
        FileOrigin::Package => FRAME_PACKAGE,
        // A Python frame that says nothing of its origin: read back by inference.
        FileOrigin::Native => FRAME_PYTHON_UNSAID,
    }
}

/// Reads a frame's kind byte: whether it is native, and its origin where the log says it.
fn frame_origin(kind: u8) -> Result<(bool, Option<FileOrigin>), DecodeError> {
    Ok(match kind {
        FRAME_PYTHON_UNSAID => (false, None),
        FRAME_NATIVE => (true, Some(FileOrigin::Native)),
        FRAME_JOB => (false, Some(FileOrigin::Job)),
        FRAME_STDLIB => (false, Some(FileOrigin::Stdlib)),
        FRAME_PACKAGE => (false, Some(FileOrigin::Package)),
        value => {
            return Err(DecodeError::UnknownValue {
                what: "frame kind",
                value,
            })
        }
    })
}

pub fn put_stack(out: &mut Vec<u8>, frames: &[u32]) {
    out.push(TAG_STACK);
    put_varint(out, frames.len() as u64);
    for &frame in frames {
        put_varint(out, u64::from(frame));
    }
}

pub fn put_thread(out: &mut Vec<u8>, thread: &ThreadRecord) {
    out.push(TAG_THREAD);
    put_varint(out, thread.id);
    put_varint(out, u64::from(thread.pid));
    put_varint(out, thread.python_thread_id);
    put_option(out, thread.os_thread_id);
    put_option(out, thread.name);
}

pub fn put_sample(
    out: &mut Vec<u8>,
    delta: i64,
    thread: u32,
    stack: u32,
    active: bool,
    owns_gil: bool,
) {
    let mut tag = TAG_SAMPLE;
    if active {
        tag |= SAMPLE_ACTIVE;
    }
    if owns_gil {
        tag |= SAMPLE_OWNS_GIL;
    }
    out.push(tag);
    put_varint(out, zigzag(delta));
    put_varint(out, u64::from(thread));
    put_varint(out, u64::from(stack));
}

pub fn put_error(out: &mut Vec<u8>, delta: i64, pid: u32, kind: SampleErrorKind, message: u32) {
    out.push(TAG_ERROR);
    put_varint(out, zigzag(delta));
    put_varint(out, u64::from(pid));
    out.push(match kind {
        SampleErrorKind::TornRead => 0,
        SampleErrorKind::ThreadGone => 1,
        SampleErrorKind::Other => 2,
    });
    put_varint(out, u64::from(message));
}

/// A process event: its kind byte is 0 (attached), 1 (exited, how not known) or 2 (exited,
/// then how: a kind byte and a varint, [`HowEnded::to_wire`]).
pub fn put_process(
    out: &mut Vec<u8>,
    delta: i64,
    pid: u32,
    kind: ProcessEventKind,
    how: Option<HowEnded>,
    command_line: &str,
) {
    out.push(TAG_PROCESS);
    put_varint(out, zigzag(delta));
    put_varint(out, u64::from(pid));
    match (kind, how) {
        (ProcessEventKind::Attached, _) => out.push(0),
        (ProcessEventKind::Exited, None) => out.push(1),
        (ProcessEventKind::Exited, Some(how)) => {
            let (how_kind, value) = how.to_wire();
            out.push(2);
            out.push(how_kind);
            put_varint(out, value);
        }
    }
    put_str(out, command_line);
}

/// Every field at full resolution: floats as their bits, integers as varints.
pub fn put_gpu(out: &mut Vec<u8>, delta: i64, s: &GpuSample) {
    let gpm = [s.sm_active, s.sm_occupancy, s.tensor_active, s.dram_bw];
    let coding = GpuCoding::of(s);
    let has_gpm = coding != GpuCoding::Plain;
    out.push(coding.tag());
    put_varint(out, zigzag(delta));
    put_varint(out, u64::from(s.device));
    let present = [
        s.utilization.is_some(),
        s.memory_utilization.is_some(),
        s.memory_used_bytes.is_some(),
        s.memory_total_bytes.is_some(),
        s.power_watts.is_some(),
        s.sm_clock_mhz.is_some(),
        s.throttle_reasons.is_some(),
        s.process_utilization.is_some(),
    ];
    let mask = present
        .iter()
        .enumerate()
        .fold(0u8, |mask, (bit, &on)| mask | (u8::from(on) << bit));
    out.push(mask);
    let floats = |out: &mut Vec<u8>, v: Option<f32>| {
        if let Some(v) = v {
            put_f32(out, v);
        }
    };
    let ints = |out: &mut Vec<u8>, v: Option<u64>| {
        if let Some(v) = v {
            put_varint(out, v);
        }
    };
    floats(out, s.utilization);
    floats(out, s.memory_utilization);
    ints(out, s.memory_used_bytes);
    ints(out, s.memory_total_bytes);
    floats(out, s.power_watts);
    ints(out, s.sm_clock_mhz.map(u64::from));
    ints(out, s.throttle_reasons);
    floats(out, s.process_utilization);
    if has_gpm {
        let mask = gpm
            .iter()
            .enumerate()
            .fold(0u8, |mask, (bit, v)| mask | (u8::from(v.is_some()) << bit));
        out.push(mask);
        for v in gpm {
            floats(out, v);
        }
    }
    match coding {
        GpuCoding::Plain | GpuCoding::Gpm => {}
        GpuCoding::Pids => {
            let pids = s.compute_pids.as_deref().unwrap_or_default();
            put_varint(out, pids.len() as u64);
            for &pid in pids {
                put_varint(out, u64::from(pid));
            }
        }
        GpuCoding::ProcessMemory => {
            put_optional_pids(out, s.compute_pids.as_deref());
            put_process_memory(out, &s.process_memory);
        }
    }
}

/// How a GPU sample is coded: the oldest tag that holds all it carries, so that a log of
/// readings without the later fields is written as before they existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GpuCoding {
    /// 0x09.
    Plain,
    /// 0x0a: the GPM mask and fields.
    Gpm,
    /// 0x0c: as 0x0a, then the compute pids.
    Pids,
    /// 0x0d: as 0x0a, then the compute pids if listed and the processes' memory.
    ProcessMemory,
}

impl GpuCoding {
    fn of(s: &GpuSample) -> GpuCoding {
        let gpm = [s.sm_active, s.sm_occupancy, s.tensor_active, s.dram_bw];
        if !s.process_memory.is_empty() {
            GpuCoding::ProcessMemory
        } else if s.compute_pids.is_some() {
            GpuCoding::Pids
        } else if gpm.iter().any(Option::is_some) {
            GpuCoding::Gpm
        } else {
            GpuCoding::Plain
        }
    }

    fn tag(self) -> u8 {
        match self {
            GpuCoding::Plain => TAG_GPU,
            GpuCoding::Gpm => TAG_GPU_GPM,
            GpuCoding::Pids => TAG_GPU_PIDS,
            GpuCoding::ProcessMemory => TAG_GPU_MEMORY,
        }
    }
}

fn put_option(out: &mut Vec<u8>, value: Option<u64>) {
    put_varint(out, value.map_or(0, |v| v.saturating_add(1)));
}

fn option(bytes: &mut Bytes<'_>) -> Result<Option<u64>, DecodeError> {
    Ok(bytes.varint()?.checked_sub(1))
}

fn delta(bytes: &mut Bytes<'_>) -> Result<i64, DecodeError> {
    Ok(crate::varint::unzigzag(bytes.varint()?))
}

/// Decodes the record at the front of `bytes`: its tag, then the record that tag names.
pub fn decode<'a>(bytes: &mut Bytes<'a>) -> Result<Record<'a>, DecodeError> {
    let tag = bytes.u8()?;
    Ok(match tag {
        TAG_HEADER => Record::Header(LogHeader::decode(bytes)?),
        TAG_BLOCK_START => Record::BlockStart(BlockStart::decode(bytes)?),
        TAG_RESET => Record::Reset,
        TAG_STRING => Record::String(bytes.str()?),
        TAG_FRAME => decode_frame(bytes)?,
        TAG_STACK => decode_stack(bytes)?,
        TAG_THREAD => Record::Thread(ThreadRecord {
            id: bytes.varint()?,
            pid: bytes.varint_u32()?,
            python_thread_id: bytes.varint()?,
            os_thread_id: option(bytes)?,
            name: option(bytes)?,
        }),
        TAG_ERROR => decode_error(bytes)?,
        TAG_PROCESS => decode_process(bytes)?,
        TAG_GPU => decode_gpu(bytes, GpuCoding::Plain)?,
        TAG_GPU_GPM => decode_gpu(bytes, GpuCoding::Gpm)?,
        TAG_GPU_PIDS => decode_gpu(bytes, GpuCoding::Pids)?,
        TAG_GPU_MEMORY => decode_gpu(bytes, GpuCoding::ProcessMemory)?,
        TAG_MEMORY => {
            let (delta, sample) = decode_memory(bytes)?;
            Record::Memory { delta, sample }
        }
        TAG_CGROUP => {
            let (delta, sample) = decode_cgroup(bytes)?;
            Record::Cgroup { delta, sample }
        }
        TAG_SEGMENT => Record::Segment(SegmentRecord {
            index: bytes.varint()?,
            start: Timestamp(bytes.varint()?),
            carried: bytes.varint()?,
        }),
        tag if tag & !(SAMPLE_ACTIVE | SAMPLE_OWNS_GIL) == TAG_SAMPLE => Record::Sample {
            delta: delta(bytes)?,
            thread: bytes.varint()?,
            stack: bytes.varint()?,
            active: tag & SAMPLE_ACTIVE != 0,
            owns_gil: tag & SAMPLE_OWNS_GIL != 0,
        },
        tag => return Err(DecodeError::UnknownTag(tag)),
    })
}

fn decode_frame<'a>(bytes: &mut Bytes<'a>) -> Result<Record<'a>, DecodeError> {
    let (function, file, line) = (bytes.varint()?, bytes.varint()?, bytes.varint_u32()?);
    let (native, origin) = frame_origin(bytes.u8()?)?;
    Ok(Record::Frame {
        function,
        file,
        line,
        native,
        origin,
    })
}

fn decode_stack<'a>(bytes: &mut Bytes<'a>) -> Result<Record<'a>, DecodeError> {
    let len = bytes.varint_usize()?;
    // Each id takes at least a byte: a count beyond what is left is corruption.
    let mut frames = Vec::with_capacity(len.min(bytes.remaining()));
    for _ in 0..len {
        frames.push(bytes.varint()?);
    }
    Ok(Record::Stack(frames))
}

fn decode_error<'a>(bytes: &mut Bytes<'a>) -> Result<Record<'a>, DecodeError> {
    let delta = delta(bytes)?;
    let pid = bytes.varint_u32()?;
    let kind = match bytes.u8()? {
        0 => SampleErrorKind::TornRead,
        1 => SampleErrorKind::ThreadGone,
        2 => SampleErrorKind::Other,
        value => {
            return Err(DecodeError::UnknownValue {
                what: "error kind",
                value,
            })
        }
    };
    Ok(Record::Error {
        delta,
        pid,
        kind,
        message: bytes.varint()?,
    })
}

fn decode_process<'a>(bytes: &mut Bytes<'a>) -> Result<Record<'a>, DecodeError> {
    let delta = delta(bytes)?;
    let pid = bytes.varint_u32()?;
    let (kind, how) = match bytes.u8()? {
        0 => (ProcessEventKind::Attached, None),
        1 => (ProcessEventKind::Exited, None),
        2 => {
            let how_kind = bytes.u8()?;
            let value = bytes.varint()?;
            let how = HowEnded::from_wire(how_kind, value).ok_or(DecodeError::UnknownValue {
                what: "process end",
                value: how_kind,
            })?;
            (ProcessEventKind::Exited, Some(how))
        }
        value => {
            return Err(DecodeError::UnknownValue {
                what: "process event kind",
                value,
            })
        }
    };
    Ok(Record::Process {
        delta,
        pid,
        kind,
        how,
        command_line: bytes.str()?,
    })
}

fn decode_gpu<'a>(bytes: &mut Bytes<'a>, coding: GpuCoding) -> Result<Record<'a>, DecodeError> {
    let delta = delta(bytes)?;
    let device = bytes.varint_u32()?;
    let mask = bytes.u8()?;
    let has = |bit: u8| mask & (1 << bit) != 0;
    let float = |bytes: &mut Bytes<'a>, bit: u8| -> Result<Option<f32>, DecodeError> {
        has(bit).then(|| bytes.f32()).transpose()
    };
    let utilization = float(bytes, 0)?;
    let memory_utilization = float(bytes, 1)?;
    let memory_used_bytes = has(2).then(|| bytes.varint()).transpose()?;
    let memory_total_bytes = has(3).then(|| bytes.varint()).transpose()?;
    let power_watts = float(bytes, 4)?;
    let sm_clock_mhz = has(5).then(|| bytes.varint_u32()).transpose()?;
    let throttle_reasons = has(6).then(|| bytes.varint()).transpose()?;
    let process_utilization = float(bytes, 7)?;
    let mut gpm = [None; 4];
    if coding != GpuCoding::Plain {
        let mask = bytes.u8()?;
        for (bit, value) in gpm.iter_mut().enumerate() {
            if mask & (1 << bit) != 0 {
                *value = Some(bytes.f32()?);
            }
        }
    }
    let [sm_active, sm_occupancy, tensor_active, dram_bw] = gpm;
    let (compute_pids, process_memory) = match coding {
        GpuCoding::Plain | GpuCoding::Gpm => (None, Vec::new()),
        GpuCoding::Pids => (Some(compute_pids(bytes)?), Vec::new()),
        GpuCoding::ProcessMemory => (decode_optional_pids(bytes)?, decode_process_memory(bytes)?),
    };
    Ok(Record::Gpu {
        delta,
        sample: GpuSample {
            time: Timestamp(0),
            device,
            utilization,
            memory_utilization,
            memory_used_bytes,
            memory_total_bytes,
            power_watts,
            sm_clock_mhz,
            throttle_reasons,
            process_utilization,
            sm_active,
            sm_occupancy,
            tensor_active,
            dram_bw,
            compute_pids,
            process_memory,
        },
    })
}

fn compute_pids(bytes: &mut Bytes<'_>) -> Result<Vec<u32>, DecodeError> {
    let len = bytes.varint_usize()?;
    // Each pid takes at least a byte: a count beyond what is left is corruption.
    let mut pids = Vec::with_capacity(len.min(bytes.remaining()));
    for _ in 0..len {
        pids.push(bytes.varint_u32()?);
    }
    Ok(pids)
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
