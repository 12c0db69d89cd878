//! The memory poller's records (tags 0x0e and 0x0f, see `record.rs`'s table) and the GPU
//! sample's per-process memory (the tail of tag 0x0d).
//!
//! # Time
//!
//! Memory readings come from a producer of their own, in their own order, as GPU readings do,
//! so their times are deltas from a base of their own: the previous memory or cgroup reading's
//! time. Unlike the tick and GPU bases, this base is not carried in the block start (whose
//! layout format 2 fixed, and which every block of a log without memory holds byte for byte):
//! it starts again at 0 at every block start and every reset, on both sides. So a block's
//! first memory record says its time in full (8 bytes or so of CLOCK_MONOTONIC nanoseconds),
//! and every later one the few bytes from the reading before, which is what a block past a
//! damaged one needs to be read alone. At 10 readings a second of a few processes a 16 KiB
//! block holds hundreds of them, so the absolute time costs a few bytes per block.
//!
//! # Optional fields
//!
//! A presence mask (a byte) says which optional fields follow, in the order of its bits. A
//! bit this format does not define is damage, not something to skip.

use stackscope_event::{CgroupSample, MemorySample, ProcessGpuMemory, Timestamp};

use crate::error::DecodeError;
use crate::varint::{put_varint, unzigzag, zigzag, Bytes};

/// One process's memory: memory time delta, pid, presence mask (bit 0 private, 1 shared,
/// 2 swap), RSS, the present fields.
pub const TAG_MEMORY: u8 = 0x0e;
/// The memory cgroup: memory time delta, presence mask (bit 0 limit, 1 OOM kills), usage, the
/// present fields.
pub const TAG_CGROUP: u8 = 0x0f;

const MEMORY_FIELDS: u8 = 0b111;
const CGROUP_FIELDS: u8 = 0b11;

/// The mask of which of `fields` are present, bit `i` for `fields[i]`.
fn mask(fields: &[Option<u64>]) -> u8 {
    fields
        .iter()
        .enumerate()
        .fold(0u8, |mask, (bit, v)| mask | (u8::from(v.is_some()) << bit))
}

fn put_present(out: &mut Vec<u8>, fields: &[Option<u64>]) {
    for value in fields.iter().flatten() {
        put_varint(out, *value);
    }
}

/// Reads the mask, the field always there, and the optional fields the mask says are there;
/// `known` has a bit per field this format defines.
fn present<const N: usize>(
    bytes: &mut Bytes<'_>,
    known: u8,
    what: &'static str,
) -> Result<(u64, [Option<u64>; N]), DecodeError> {
    let mask = bytes.u8()?;
    if mask & !known != 0 {
        return Err(DecodeError::UnknownValue { what, value: mask });
    }
    let head = bytes.varint()?;
    let mut fields = [None; N];
    for (bit, field) in fields.iter_mut().enumerate() {
        if mask & (1 << bit) != 0 {
            *field = Some(bytes.varint()?);
        }
    }
    Ok((head, fields))
}

pub fn put_memory(out: &mut Vec<u8>, delta: i64, s: &MemorySample) {
    out.push(TAG_MEMORY);
    put_varint(out, zigzag(delta));
    put_varint(out, u64::from(s.pid));
    let fields = [s.private_bytes, s.shared_bytes, s.swap_bytes];
    out.push(mask(&fields));
    put_varint(out, s.rss_bytes);
    put_present(out, &fields);
}

pub fn put_cgroup(out: &mut Vec<u8>, delta: i64, s: &CgroupSample) {
    out.push(TAG_CGROUP);
    put_varint(out, zigzag(delta));
    let fields = [s.limit_bytes, s.oom_kills];
    out.push(mask(&fields));
    put_varint(out, s.usage_bytes);
    put_present(out, &fields);
}

/// A memory record after its tag: the delta, and the sample with its `time` left 0.
pub fn decode_memory(bytes: &mut Bytes<'_>) -> Result<(i64, MemorySample), DecodeError> {
    let delta = unzigzag(bytes.varint()?);
    let pid = bytes.varint_u32()?;
    let (rss_bytes, [private_bytes, shared_bytes, swap_bytes]) =
        present(bytes, MEMORY_FIELDS, "memory fields")?;
    Ok((
        delta,
        MemorySample {
            time: Timestamp(0),
            pid,
            rss_bytes,
            private_bytes,
            shared_bytes,
            swap_bytes,
        },
    ))
}

/// A cgroup record after its tag: the delta, and the sample with its `time` left 0.
pub fn decode_cgroup(bytes: &mut Bytes<'_>) -> Result<(i64, CgroupSample), DecodeError> {
    let delta = unzigzag(bytes.varint()?);
    let (usage_bytes, [limit_bytes, oom_kills]) = present(bytes, CGROUP_FIELDS, "cgroup fields")?;
    Ok((
        delta,
        CgroupSample {
            time: Timestamp(0),
            usage_bytes,
            limit_bytes,
            oom_kills,
        },
    ))
}

/// A GPU sample's processes' memory: their count, then each pid and its bytes.
pub fn put_process_memory(out: &mut Vec<u8>, processes: &[ProcessGpuMemory]) {
    put_varint(out, processes.len() as u64);
    for p in processes {
        put_varint(out, u64::from(p.pid));
        put_varint(out, p.bytes);
    }
}

pub fn decode_process_memory(bytes: &mut Bytes<'_>) -> Result<Vec<ProcessGpuMemory>, DecodeError> {
    let len = bytes.varint_usize()?;
    // Each entry takes at least two bytes: a count beyond what is left is corruption.
    let mut processes = Vec::with_capacity(len.min(bytes.remaining() / 2));
    for _ in 0..len {
        processes.push(ProcessGpuMemory {
            pid: bytes.varint_u32()?,
            bytes: bytes.varint()?,
        });
    }
    Ok(processes)
}

/// A list that may be missing (a GPU sample's compute pids): its count plus one, 0 for none,
/// then the pids.
pub fn put_optional_pids(out: &mut Vec<u8>, pids: Option<&[u32]>) {
    match pids {
        None => put_varint(out, 0),
        Some(pids) => {
            put_varint(out, pids.len() as u64 + 1);
            for &pid in pids {
                put_varint(out, u64::from(pid));
            }
        }
    }
}

pub fn decode_optional_pids(bytes: &mut Bytes<'_>) -> Result<Option<Vec<u32>>, DecodeError> {
    let Some(len) = bytes.varint_usize()?.checked_sub(1) else {
        return Ok(None);
    };
    // Each pid takes at least a byte: a count beyond what is left is corruption.
    let mut pids = Vec::with_capacity(len.min(bytes.remaining()));
    for _ in 0..len {
        pids.push(bytes.varint_u32()?);
    }
    Ok(Some(pids))
}
