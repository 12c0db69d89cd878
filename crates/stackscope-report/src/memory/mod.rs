//! The memory outputs: `memory-timeline.csv` (every process's memory at each reading) and
//! `stacks-memory-growth.folded` (the stacks weighted by the bytes of resident memory that grew
//! while they ran), and the memory verdict's lines in the printed summary.
//!
//! Growth is charged by the aggregate (`stackscope_aggregate::memory`) to the stacks sampled in
//! a process between two readings of it: what ran while memory grew, not an allocation trace.
//! Both files are written whenever the recording has memory readings, as the GPU files are
//! whenever it has GPU readings: the growth file is empty when memory stayed flat.

mod csv;

use std::io::Write;

use stackscope_aggregate::{MemorySummary, StackId, StackTable};

pub use csv::{write_memory_timeline_csv, MEMORY_CSV_HEADER};

use crate::ReportError;

/// The folded lines of `growth` (stack, bytes), each stack rendered as `stacks.folded` renders
/// it, sorted by stack as that file is. Stacks that print alike are merged, keeping the folded
/// format's one line per stack; stacks that grew nothing are left out.
pub fn memory_growth_lines(table: &StackTable, growth: &[(StackId, u64)]) -> Vec<(String, u64)> {
    let stacks = growth
        .iter()
        .filter_map(|&(stack, bytes)| Some((table.stacks().get(stack as usize)?, bytes)));
    table.folded_lines(stacks)
}

/// Writes `stacks-memory-growth.folded`: `frame;frame;frame BYTES` per line.
pub fn write_memory_growth_folded<W: Write>(
    table: &StackTable,
    growth: &[(StackId, u64)],
    w: W,
) -> Result<(), ReportError> {
    crate::write_folded(&memory_growth_lines(table, growth), w)
}

/// The memory verdict as the printed summary says it: one `Memory: ...` line per finding,
/// nothing when memory was flat.
pub(crate) fn write_memory_text<W: Write>(
    memory: Option<&MemorySummary>,
    w: &mut W,
) -> Result<(), ReportError> {
    for finding in memory.map_or(&[][..], |m| &m.verdict) {
        writeln!(w, "Memory: {}", finding.text)?;
    }
    Ok(())
}

/// The synthetic job the memory tests share (the page's too).
#[cfg(test)]
pub(crate) mod tests;
