//! pprof: a gzipped `perftools.profiles.Profile`, as `go tool pprof` and Grafana Pyroscope
//! read it.
//!
//! Two sample types, `samples/count` and `cpu/nanoseconds` (samples times the period, so that
//! pprof shows time), and per sample the labels `thread` (the name the flamegraphs root it at),
//! `thread_id`, `pid` and `gpu_state` (`idle`, `busy`, `unknown`), so that `-tagfocus
//! gpu_state=idle` gives the GPU-idle profile. Each distinct frame (function, file, line) is a
//! location; each function (name, file, and whether it is native) a function, so native frames
//! (`--native`) are functions of their own. A sample with no frame (a thread caught at its
//! very start or end) is written with no location, as the format allows; Go's pprof leaves
//! such samples out of its views.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;
use stackscope_aggregate::{GpuTag, SampleTrace};

use super::pprof_proto::{Function, Label, Line, Location, Profile, Sample, ValueType};
use super::ExportInfo;
use crate::ReportError;

/// The string table: index 0 is "", every string once.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    ids: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.id("");
        s
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.ids.insert(s.to_owned(), id);
        id
    }
}

/// Builds the profile message of a trace (before encoding and gzip); the tests decode it back.
/// The string table takes strings in the order the steps ask for them.
pub fn build_profile(trace: &SampleTrace, info: &ExportInfo<'_>) -> Profile {
    let mut strings = Strings::new();
    let period_ns = (info.period_secs() * 1e9).round() as i64;
    let count = ValueType {
        r#type: strings.id("samples"),
        unit: strings.id("count"),
    };
    let cpu = ValueType {
        r#type: strings.id("cpu"),
        unit: strings.id("nanoseconds"),
    };
    let (functions, locations) = functions_and_locations(trace, &mut strings);
    let samples = samples(trace, period_ns, &mut strings);
    let comment = strings.id(&format!(
        "stackscope: {} (pid {}), {:.1} to {:.1} s of the recording",
        info.meta.command_line, info.meta.pid, info.from_secs, info.to_secs
    ));
    Profile {
        sample_type: vec![count, cpu.clone()],
        sample: samples,
        location: locations,
        function: functions,
        time_nanos: info.time_nanos,
        duration_nanos: ((info.to_secs - info.from_secs).max(0.0) * 1e9) as i64,
        period_type: Some(cpu),
        period: period_ns,
        comment: vec![comment],
        string_table: strings.table,
        ..Profile::default()
    }
}

/// Functions by (name, file, native); a location per distinct frame, its id the frame's index
/// plus one.
fn functions_and_locations(
    trace: &SampleTrace,
    strings: &mut Strings,
) -> (Vec<Function>, Vec<Location>) {
    let mut function_ids: HashMap<(&str, &str, bool), u64> = HashMap::new();
    let mut functions = Vec::new();
    let mut locations = Vec::with_capacity(trace.frames().len());
    for (index, frame) in trace.frames().iter().enumerate() {
        let key = (&*frame.function, &*frame.file, frame.native);
        let function_id = match function_ids.get(&key) {
            Some(&id) => id,
            None => {
                let id = functions.len() as u64 + 1;
                let name = strings.id(&frame.function);
                functions.push(Function {
                    id,
                    name,
                    system_name: 0,
                    filename: strings.id(&frame.file),
                    // The sample log keeps the line being run, not the line a function starts
                    // at; 0 is the format's "unknown".
                    start_line: 0,
                });
                function_ids.insert(key, id);
                id
            }
        };
        locations.push(Location {
            id: index as u64 + 1,
            line: vec![Line {
                function_id,
                line: i64::from(frame.line),
            }],
            ..Location::default()
        });
    }
    (functions, locations)
}

/// The samples, with their labels. Samples with equal stack and labels are one pprof sample
/// with the sum of their counts.
fn samples(trace: &SampleTrace, period_ns: i64, strings: &mut Strings) -> Vec<Sample> {
    let mut counts: BTreeMap<(u32, u32, usize, GpuTag), u64> = BTreeMap::new();
    for (thread_index, thread) in trace.threads().iter().enumerate() {
        for run in &thread.runs {
            *counts
                .entry((run.stack, run.name, thread_index, run.gpu))
                .or_default() += run.samples;
        }
    }
    let keys = [
        strings.id("thread"),
        strings.id("thread_id"),
        strings.id("pid"),
        strings.id("gpu_state"),
    ];
    let mut samples = Vec::with_capacity(counts.len());
    for ((stack, name, thread_index, gpu), n) in counts {
        let thread = &trace.threads()[thread_index];
        let values = [
            strings.id(&trace.names()[name as usize]),
            strings.id(&thread.display_id()),
            strings.id(&thread.pid.to_string()),
            strings.id(gpu.as_str()),
        ];
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        samples.push(Sample {
            // Leaf first.
            location_id: trace.stacks()[stack as usize]
                .iter()
                .rev()
                .map(|&frame| u64::from(frame) + 1)
                .collect(),
            value: vec![n, n.saturating_mul(period_ns)],
            label: keys
                .iter()
                .zip(values)
                .map(|(&key, str)| Label {
                    key,
                    str,
                    ..Label::default()
                })
                .collect(),
        });
    }
    samples
}

/// Writes the trace as a gzipped pprof profile.
pub fn write_pprof<W: Write>(
    trace: &SampleTrace,
    info: &ExportInfo<'_>,
    w: W,
) -> Result<(), ReportError> {
    let profile = build_profile(trace, info);
    let mut gz = GzEncoder::new(w, Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()?.flush()?;
    Ok(())
}
