//! Writers of stackscope's output files: SVG flamegraphs (inferno), folded stacks, the summary
//! as JSON and as text, the GPU timeline as CSV and as an SVG chart (plotters), every process's
//! memory as CSV and the stacks weighted by the memory that grew while they ran, and the exports
//! other tools read (pprof, speedscope, a Perfetto trace; see `export`).
//!
//! Each writer is a pure function of what the aggregator holds, over any `W: Write`;
//! [`write_outputs`] writes a whole output directory, each file under a temporary name renamed
//! into place, so a reader never sees half a file.
//!
//! [`rebuild`] and [`read_trace`] re-read a recording's sample log (`stackscope-samplelog`) into
//! an aggregate or a trace for `report` and `export`: the one place where the log's codec and
//! the aggregate meet, so that neither depends on the other.

pub mod compare;
mod dump;
mod error;
mod export;
mod flamegraph;
mod folded;
mod gpu_chart;
mod gpu_csv;
pub mod html;
pub mod import_frames;
mod markup;
mod memory;
mod merge;
mod one_host;
mod outputs;
mod rank_cells;
mod rebuild;
mod redact;
mod samples_log;
mod summary;

pub use dump::{write_dump_json, write_dump_text, DumpNotes};
pub use error::ReportError;
pub use export::{
    build_profile, pprof_proto, write_export_file, write_perfetto, write_pprof, write_speedscope,
    ExportFormat, ExportInfo,
};
pub use flamegraph::write_flamegraph;
pub use folded::write_folded;
pub use gpu_chart::write_gpu_timeline_svg;
pub use gpu_csv::{write_gpu_timeline_csv, GPU_CSV_HEADER};
pub use html::write_report_html;
pub use html::{write_compare_html, ComparePage, DiffStack};
pub use memory::{
    memory_growth_lines, write_memory_growth_folded, write_memory_timeline_csv, MEMORY_CSV_HEADER,
};
pub use merge::{
    write_merged_dump_json, write_merged_dump_text, write_merged_recordings,
    write_merged_report_html, write_rank_table, MergedFiles, MergedHtml, MergedSummary, RANKS_TXT,
};
pub use one_host::{runs_of_one_host, runs_of_one_host_line, RecordingSpan};
pub use outputs::{file_names, write_atomic, write_outputs, write_outputs_with_log, OutputFiles};
pub use rebuild::{
    aggregate_config, read_trace, rebuild, LogRead, RebuildOptions, RebuildOutcome, TraceOutcome,
    WindowRead,
};
pub use redact::{looks_secret, redact_secrets, REDACTED, SECRET_NAME_PARTS};
pub use samples_log::{write_summary_json_with_log, SamplesLogSummary};
pub use stackscope_samplelog::RebuildError;
pub use summary::{roles_line, write_summary_json, write_text_summary, STOPPED_BY_STACKSCOPE};

#[cfg(test)]
mod test_xml;
