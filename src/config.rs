//! Validated settings, built from the parsed command line. The rest of the program sees these
//! plain structs, never clap's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use stackscope_gpu::GpuSelection;
use stackscope_sampler::ReaderTuning;

use crate::cli::{
    default_watch_rate, AttachArgs, CompareArgs, DumpArgs, ExportArgs, GpuArgs, MergeArgs,
    RecordArgs, RecordingArgs, ReportArgs, TopArgs, WatchArgs,
};
use crate::exit::UsageError;
use stackscope_report::ExportFormat;
use stackscope_samplelog::{LogLimits, Window};

mod tuning;
pub use tuning::reader_tuning_from_env;

/// What to profile.
#[derive(Debug, Clone)]
pub enum Target {
    /// A process that is already running.
    Pid(u32),
    /// A command to start and profile from its start.
    Command(Vec<String>),
}

/// Where GPU data comes from.
#[derive(Debug, Clone)]
pub struct GpuSettings {
    pub selection: GpuSelection,
    pub nvml_lib: Option<PathBuf>,
    /// Below this utilization, in percent, the GPU counts as idle.
    pub idle_below: f32,
}

impl GpuSettings {
    fn from_args(args: GpuArgs) -> anyhow::Result<GpuSettings> {
        Ok(GpuSettings {
            selection: parse_gpu(&args.gpu)?,
            nvml_lib: args.nvml_lib,
            idle_below: args.idle_below,
        })
    }
}

#[derive(Debug, Clone)]
pub struct RecordingConfig {
    pub target: Target,
    /// `None`: a name made from the pid and the start time, in the current directory.
    pub output: Option<PathBuf>,
    pub duration: Option<Duration>,
    pub rate_hz: f64,
    pub include_idle: bool,
    pub blocking: bool,
    pub gpu: GpuSettings,
    /// `--memory-rate`: memory readings per second; 0 is off.
    pub memory_rate_hz: f64,
    pub subprocesses: bool,
    /// `--processes-apart`: like processes each under their own root.
    pub processes_apart: bool,
    /// `--threads-apart`: every thread under its own name.
    pub threads_apart: bool,
    pub native: bool,
    pub flush_interval: Duration,
    /// Exports written beside the outputs (`--format`).
    pub formats: Vec<ExportFormat>,
    /// `--metrics-addr`: where to serve Prometheus metrics.
    pub metrics_addr: Option<String>,
    /// The reader's experiment switches, from the environment ([`tuning`]).
    pub tuning: ReaderTuning,
    /// `--log-max-size`/`--log-max-age`: how much of the sample log to keep.
    pub log_limits: LogLimits,
}

impl RecordingConfig {
    pub fn from_attach(args: AttachArgs) -> anyhow::Result<RecordingConfig> {
        Self::build(Target::Pid(args.pid), args.recording)
    }

    pub fn from_record(args: RecordArgs) -> anyhow::Result<RecordingConfig> {
        Self::build(Target::Command(args.command), args.recording)
    }

    fn build(target: Target, args: RecordingArgs) -> anyhow::Result<RecordingConfig> {
        Ok(RecordingConfig {
            target,
            output: args.output,
            duration: args.duration.map(Duration::from_secs_f64),
            rate_hz: args.rate,
            include_idle: args.idle,
            blocking: !args.nonblocking,
            gpu: GpuSettings::from_args(args.gpu)?,
            memory_rate_hz: args.memory.memory_rate,
            subprocesses: args.tree.follow(),
            processes_apart: args.processes_apart,
            threads_apart: args.threads_apart,
            native: args.native,
            flush_interval: Duration::from_secs_f64(args.flush_interval),
            formats: match &args.format {
                Some(list) => parse_formats(list)?,
                None => Vec::new(),
            },
            metrics_addr: args.metrics.metrics_addr,
            tuning: reader_tuning_from_env(),
            log_limits: log_limits(&args.log_limit),
        })
    }

    /// The output directory for a target with this pid, started now.
    pub fn output_dir(&self, pid: u32) -> PathBuf {
        match &self.output {
            Some(dir) => dir.clone(),
            None => PathBuf::from(format!(
                "stackscope-{pid}-{}",
                chrono::Local::now().format("%Y%m%d-%H%M%S")
            )),
        }
    }
}

#[derive(Debug, Clone)]
pub struct DumpConfig {
    pub pid: u32,
    pub json: bool,
    pub locals: bool,
    pub subprocesses: bool,
    /// `--subprocesses` given: `--json` prints the tree's shape (`processes`, `stragglers`)
    /// whatever it found, as scripts written for it read it.
    pub tree_json: bool,
    pub native: bool,
    /// `--show-secrets`: locals with secret-looking names shown as they are.
    pub show_secrets: bool,
    /// The reader's experiment switches, from the environment ([`tuning`]).
    pub tuning: ReaderTuning,
}

impl From<DumpArgs> for DumpConfig {
    fn from(args: DumpArgs) -> Self {
        DumpConfig {
            pid: args.pid,
            json: args.json,
            locals: args.locals,
            subprocesses: args.tree.follow(),
            tree_json: args.tree.subprocesses,
            native: args.native,
            show_secrets: args.show_secrets,
            tuning: reader_tuning_from_env(),
        }
    }
}

/// What `merge` reads: all files or all directories.
#[derive(Debug, Clone)]
pub enum MergeInputs {
    Dumps(Vec<PathBuf>),
    Recordings(Vec<PathBuf>),
}

#[derive(Debug, Clone)]
pub struct MergeConfig {
    pub inputs: MergeInputs,
    pub json: bool,
    pub output: PathBuf,
}

impl MergeConfig {
    pub fn from_args(args: MergeArgs) -> anyhow::Result<MergeConfig> {
        if let Some(missing) = args.inputs.iter().find(|p| !p.exists()) {
            return Err(UsageError(format!("{} does not exist", missing.display())).into());
        }
        let dirs = args.inputs.iter().filter(|p| p.is_dir()).count();
        let inputs = if dirs == 0 {
            MergeInputs::Dumps(args.inputs)
        } else if dirs == args.inputs.len() {
            MergeInputs::Recordings(args.inputs)
        } else {
            return Err(UsageError(
                "merge takes either dump files (dump --json) or recording directories, not both"
                    .to_owned(),
            )
            .into());
        };
        if args.output.is_some() && matches!(inputs, MergeInputs::Dumps(_)) {
            return Err(UsageError(
                "-o is for merged recordings; a merged dump prints to standard output".to_owned(),
            )
            .into());
        }
        Ok(MergeConfig {
            inputs,
            json: args.json,
            output: args
                .output
                .unwrap_or_else(|| PathBuf::from("stackscope-merged")),
        })
    }
}

#[derive(Debug, Clone)]
pub struct WatchConfig {
    pub pid: u32,
    pub hang_after_secs: f64,
    pub out_dir: PathBuf,
    pub rate_hz: f64,
    pub subprocesses: bool,
    pub gpu: GpuSettings,
    /// `--memory-rate`: memory readings per second; 0 is off.
    pub memory_rate_hz: f64,
    /// `--metrics-addr`: where to serve Prometheus metrics.
    pub metrics_addr: Option<String>,
    /// `--show-secrets`: locals with secret-looking names shown as they are in hang reports.
    pub show_secrets: bool,
    /// `--keep-reports`: hang reports kept in `out_dir`, the newest.
    pub keep_reports: usize,
    /// The reader's experiment switches, from the environment ([`tuning`]).
    pub tuning: ReaderTuning,
}

impl WatchConfig {
    pub fn from_args(args: WatchArgs) -> anyhow::Result<WatchConfig> {
        Ok(WatchConfig {
            pid: args.pid,
            hang_after_secs: args.hang_after,
            out_dir: args
                .output
                .unwrap_or_else(|| PathBuf::from(format!("stackscope-{}-watch", args.pid))),
            rate_hz: args
                .rate
                .unwrap_or_else(|| default_watch_rate(args.hang_after)),
            subprocesses: args.tree.follow(),
            gpu: GpuSettings::from_args(args.gpu)?,
            memory_rate_hz: args.memory.memory_rate,
            metrics_addr: args.metrics.metrics_addr,
            show_secrets: args.show_secrets,
            keep_reports: args.keep_reports,
            tuning: reader_tuning_from_env(),
        })
    }
}

#[derive(Debug, Clone)]
pub struct ReportConfig {
    pub dir: PathBuf,
    pub output: Option<PathBuf>,
    /// `--from`/`--to`, checked.
    pub window: Window,
    pub idle_below: Option<f32>,
    /// `--processes-apart`.
    pub processes_apart: bool,
    /// `--threads-apart`.
    pub threads_apart: bool,
}

impl ReportConfig {
    pub fn from_args(args: ReportArgs) -> anyhow::Result<ReportConfig> {
        let window = checked_window(args.from, args.to)?;
        Ok(ReportConfig {
            dir: recording_dir(args.dir)?,
            output: args.output,
            window,
            idle_below: args.idle_below,
            processes_apart: args.processes_apart,
            threads_apart: args.threads_apart,
        })
    }
}

/// Settings of `export`.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub dir: PathBuf,
    pub format: ExportFormat,
    /// `--from`/`--to`, checked.
    pub window: Window,
    pub output: Option<PathBuf>,
}

impl ExportConfig {
    pub fn from_args(args: ExportArgs) -> anyhow::Result<ExportConfig> {
        let window = checked_window(args.from, args.to)?;
        let format = args
            .format
            .parse()
            .map_err(|e| UsageError(format!("--format: {e}")))?;
        Ok(ExportConfig {
            dir: recording_dir(args.dir)?,
            format,
            window,
            output: args.output,
        })
    }
}

/// `--format pprof,perfetto`: each format once, in the order given.
fn parse_formats(list: &str) -> anyhow::Result<Vec<ExportFormat>> {
    let mut formats = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let format: ExportFormat = name
            .parse()
            .map_err(|e| UsageError(format!("--format {list}: {e}")))?;
        if !formats.contains(&format) {
            formats.push(format);
        }
    }
    if formats.is_empty() {
        return Err(UsageError(format!(
            "--format {list}: name at least one of pprof, speedscope, perfetto"
        ))
        .into());
    }
    Ok(formats)
}

// The sample log's limits, from `--log-max-size` and `--log-max-age` (checked by their
// parsers in `cli`).

fn log_limits(args: &crate::cli::LogLimitArgs) -> LogLimits {
    LogLimits {
        max_bytes: args.log_max_size,
        max_age: args.log_max_age.map(Duration::from_secs_f64),
    }
}

/// Settings of `top`.
#[derive(Debug, Clone)]
pub struct TopConfig {
    pub pid: u32,
    pub rate_hz: f64,
    pub include_idle: bool,
    pub subprocesses: bool,
    pub gpu: GpuSettings,
    /// `--memory-rate`: memory readings per second; 0 is off.
    pub memory_rate_hz: f64,
    /// `--metrics-addr`: where to serve Prometheus metrics.
    pub metrics_addr: Option<String>,
    /// The reader's experiment switches, from the environment ([`tuning`]).
    pub tuning: ReaderTuning,
}

impl TopConfig {
    pub fn from_args(args: TopArgs) -> anyhow::Result<TopConfig> {
        Ok(TopConfig {
            pid: args.pid,
            rate_hz: args.rate,
            include_idle: args.idle,
            subprocesses: args.tree.follow(),
            gpu: GpuSettings::from_args(args.gpu)?,
            memory_rate_hz: args.memory.memory_rate,
            metrics_addr: args.metrics.metrics_addr,
            tuning: reader_tuning_from_env(),
        })
    }
}

fn parse_gpu(value: &str) -> anyhow::Result<GpuSelection> {
    Ok(value
        .parse()
        .map_err(|e| UsageError(format!("--gpu {value}: {e}")))?)
}

/// `--from`/`--to` as a window, checked once for every command that takes one.
fn checked_window(from: Option<f64>, to: Option<f64>) -> anyhow::Result<Window> {
    let window = Window::new(from, to);
    window.validate().map_err(UsageError)?;
    Ok(window)
}

/// A recording's directory as `report` and `export` name it: one that exists.
fn recording_dir(dir: PathBuf) -> anyhow::Result<PathBuf> {
    if !dir.exists() {
        bail!("no such directory: {}", dir.display());
    }
    Ok(dir)
}

/// Creates `dir` and proves that files can be written and renamed in it, so that a recording
/// never runs for an hour and then fails to save.
pub fn ensure_writable_dir(dir: &Path) -> anyhow::Result<()> {
    // What `create_dir_all` would say of a file: "File exists (os error 17)".
    if dir.exists() && !dir.is_dir() {
        bail!("-o {} is a file, not a directory", dir.display());
    }
    let fail = || format!("cannot write to output directory {}", dir.display());
    std::fs::create_dir_all(dir).with_context(fail)?;
    let probe = dir.join(".stackscope-write-test");
    std::fs::write(&probe, b"probe").with_context(fail)?;
    let renamed = dir.join(".stackscope-write-test.renamed");
    let renamed_ok = std::fs::rename(&probe, &renamed);
    let _ = std::fs::remove_file(&probe);
    let _ = std::fs::remove_file(&renamed);
    renamed_ok.with_context(fail)?;
    if !dir.is_dir() {
        bail!("{}: not a directory", fail());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_under_a_file_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("plain-file");
        std::fs::write(&file, b"x").expect("write");
        let err = ensure_writable_dir(&file.join("out")).unwrap_err();
        assert!(format!("{err:#}").contains("cannot write to output directory"));
    }

    #[test]
    fn a_fresh_directory_is_created_and_left_clean() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a/b");
        ensure_writable_dir(&dir).expect("writable");
        assert_eq!(std::fs::read_dir(&dir).expect("read").count(), 0);
    }
}

/// `stackscope demo`: where to write and how long the loop runs.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    pub output: PathBuf,
    pub seconds: f64,
}

impl DemoConfig {
    pub fn from_args(args: crate::cli::DemoArgs) -> DemoConfig {
        DemoConfig {
            output: args.output,
            seconds: args.seconds,
        }
    }

    /// The recording `stackscope record -o DIR -- COMMAND` would make: parsed by the command
    /// line's own parser, so every other option keeps exactly its default.
    pub fn recording(&self, command: Vec<String>) -> anyhow::Result<RecordingConfig> {
        use clap::Parser;
        let mut argv = vec![
            "stackscope".to_owned(),
            "record".to_owned(),
            "-o".to_owned(),
            self.output.display().to_string(),
            "--".to_owned(),
        ];
        argv.extend(command);
        match crate::cli::Cli::try_parse_from(argv)?.command {
            crate::cli::Command::Record(args) => RecordingConfig::from_record(args),
            _ => anyhow::bail!("the demo's recording is not a `record` command"),
        }
    }
}

/// One side of `compare`: a recording directory and the window of it (`DIR@FROM-TO`).
#[derive(Debug, Clone, PartialEq)]
pub struct ComparedSide {
    pub dir: PathBuf,
    pub window: Window,
    /// How it is named in the outputs: the directory's name, with `@FROM-TO` for a window.
    pub label: String,
}

impl ComparedSide {
    /// Reads `DIR` or `DIR@FROM-TO`; a directory whose own name holds an `@` is taken whole.
    fn parse(arg: &str) -> anyhow::Result<ComparedSide> {
        let (dir, window) = match arg.rsplit_once('@') {
            Some((dir, span)) if !Path::new(arg).exists() => {
                let window =
                    Window::parse(span).map_err(|why| UsageError(format!("{arg}: {why}")))?;
                (PathBuf::from(dir), window)
            }
            _ => (PathBuf::from(arg), Window::WHOLE),
        };
        if !dir.exists() {
            bail!("no such directory: {}", dir.display());
        }
        if !dir.is_dir() {
            return Err(UsageError(format!(
                "{} is a file: compare takes recording directories (written by attach, record \
                 or demo); a dump (dump --json) holds no profile over time",
                dir.display()
            ))
            .into());
        }
        let name = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| dir.display().to_string());
        let label = if window.is_whole() {
            name
        } else {
            format!("{name}@{}", window.span())
        };
        Ok(ComparedSide { dir, window, label })
    }

    /// Whether two sides are the same recording's same window.
    fn same_as(&self, other: &ComparedSide) -> bool {
        let canonical = |d: &Path| d.canonicalize().unwrap_or_else(|_| d.to_owned());
        // `DIR@0-` is the whole of DIR.
        let span = |w: &Window| (w.from.unwrap_or(0.0), w.to);
        span(&self.window) == span(&other.window) && canonical(&self.dir) == canonical(&other.dir)
    }
}

/// Settings of `compare`.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    pub before: ComparedSide,
    pub after: ComparedSide,
    pub output: PathBuf,
    pub frames: stackscope_aggregate::FrameMatch,
    pub fail_if_worse: bool,
}

impl CompareConfig {
    pub fn from_args(args: CompareArgs) -> anyhow::Result<CompareConfig> {
        let before = ComparedSide::parse(&args.before)?;
        let after = ComparedSide::parse(&args.after)?;
        if before.same_as(&after) {
            return Err(UsageError(format!(
                "BEFORE and AFTER are the same recording ({}): compare two recordings, or two \
                 windows of one (DIR@0-30 DIR@30-60)",
                before.label
            ))
            .into());
        }
        let output = args
            .output
            .unwrap_or_else(|| PathBuf::from(format!("compare-{}-{}", before.label, after.label)));
        Ok(CompareConfig {
            before,
            after,
            output,
            frames: if args.lines {
                stackscope_aggregate::FrameMatch::Line
            } else {
                stackscope_aggregate::FrameMatch::Function
            },
            fail_if_worse: args.fail_if_worse,
        })
    }
}
