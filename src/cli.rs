//! The command line as clap sees it. Nothing here leaves the binary: `config` turns these into
//! plain validated structs for the rest of the program.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use stackscope_aggregate::{DEFAULT_HANG_AFTER_SECS, DEFAULT_IDLE_BELOW};

/// The sampling rate of `attach`, `record` and `top`; `watch` has its own
/// ([`default_watch_rate`]).
const DEFAULT_RATE_HZ: f64 = 100.0;
/// The rates `--rate` accepts, samples per second.
const MIN_RATE_HZ: f64 = 0.1;
const MAX_RATE_HZ: f64 = 10_000.0;
/// The most memory readings a second: memory moves slower than stacks, and each reading reads
/// a file per process.
const MAX_MEMORY_RATE_HZ: f64 = 100.0;

/// `watch`'s rate without `--rate`: once a second.
const DEFAULT_WATCH_RATE_HZ: f64 = 1.0;
/// A hang must be seen unchanged at least this many times: a busy loop that spends most of its
/// time on a few lines repeats a stack by chance now and then.
const MIN_UNCHANGED_READS: f64 = 6.0;
/// The most the default rate is raised to for a short `--hang-after`.
const MAX_DEFAULT_WATCH_RATE_HZ: f64 = 10.0;

/// `watch`'s rate without `--rate`: [`DEFAULT_WATCH_RATE_HZ`], raised for a short
/// `--hang-after` to read the stacks [`MIN_UNCHANGED_READS`] times within it, up to
/// [`MAX_DEFAULT_WATCH_RATE_HZ`].
pub fn default_watch_rate(hang_after_secs: f64) -> f64 {
    (MIN_UNCHANGED_READS / hang_after_secs).clamp(DEFAULT_WATCH_RATE_HZ, MAX_DEFAULT_WATCH_RATE_HZ)
}

/// `watch --rate`'s help: what [`default_watch_rate`] does.
pub fn watch_rate_help() -> String {
    format!(
        "Stack reads per second [default: {DEFAULT_WATCH_RATE_HZ}; for a --hang-after under \
         {} s, {MIN_UNCHANGED_READS} reads within it, at most {MAX_DEFAULT_WATCH_RATE_HZ}]",
        MIN_UNCHANGED_READS / DEFAULT_WATCH_RATE_HZ
    )
}

#[derive(Debug, Parser)]
#[command(
    name = "stackscope",
    // The version and the commit it was built from (build.rs): "stackscope 0.1.0 (commit 1a2b3c4)".
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("STACKSCOPE_BUILD_COMMIT"), ")"),
    about = "Sampling profiler for live Python processes and their GPUs",
    long_about = "stackscope attaches to a running Python process by pid (no restart, no code \
                  change), samples every thread's Python stack from outside, polls the GPUs \
                  through NVML on the same clock, and tells where the time goes, what Python \
                  does while the GPU idles, and why a job is stuck."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Profile a running Python process until --duration, Ctrl-C, SIGTERM or its exit.
    #[command(
        after_help = "Example:\n  stackscope attach --pid 12345 --duration 60 -o profile\n\n\
                      Writes flamegraph.svg, stacks.folded and summary.json into the output \
                      directory (and the GPU timeline and GPU-idle/busy flamegraphs when GPU \
                      data is there)."
    )]
    Attach(AttachArgs),
    /// Start a command and profile it from its start until it exits; exits with its status.
    #[command(after_help = crate::exit::record_help())]
    Record(RecordArgs),
    /// Print every thread's Python stack once and leave the process running.
    #[command(after_help = "Example:\n  stackscope dump --pid 12345 --locals\n  \
                            stackscope dump --pid 12345 --no-subprocesses\n\n\
                            Threads with the same stack are printed once, with the threads that \
                            share it; a process or thread away from where its peers wait is \
                            named first.")]
    Dump(DumpArgs),
    /// Stay attached at a low rate and write a hang report when the job stops moving.
    #[command(
        after_help = "Example:\n  stackscope watch --pid 12345 --hang-after 300 -o hangs\n\n\
                            Reads every thread's stack at a low rate (--rate). When no thread's Python \
                            stack has changed for --hang-after seconds, writes hang-TIMESTAMP.txt \
                            and .json (a full grouped dump with locals, and what the GPU did: \
                            idle, busy_low_sm or busy) into the output directory, owner-only, \
                            prints one line, and keeps watching: a new report only after progress \
                            resumed and stopped again. Keeps the newest --keep-reports reports."
    )]
    Watch(WatchArgs),
    /// Write every output again for a time window of a recording, from its sample log.
    #[command(
        after_help = "Example:\n  stackscope report profile --from 3600 --to 7200\n\n\
                            Reads DIR/samples.log (written by attach and record) and writes the \
                            flamegraphs, folded stacks, summary and GPU timeline of the samples \
                            taken between --from and --to seconds after the recording started \
                            into DIR/report-FROM-TO (or -o)."
    )]
    Report(ReportArgs),
    /// Write a recording (or a window of it) for other tools: pprof, speedscope or Perfetto.
    #[command(
        after_help = "Examples:\n  stackscope export profile --format pprof\n  \
                            go tool pprof -http=:8080 profile/profile.pb.gz\n  \
                            stackscope export profile --format perfetto --from 600 --to 660\n\n\
                            Reads DIR/samples.log and writes DIR/profile.pb.gz, \
                            DIR/profile.speedscope.json or DIR/trace.json (a window into \
                            DIR/report-FROM-TO/), or -o FILE."
    )]
    Export(ExportArgs),
    /// A live view of where a running process spends its time, and its GPUs, like `top`.
    #[command(after_help = "Example:\n  stackscope top --pid 12345\n\n\
                            Refreshes every second: per function, its share of the samples in \
                            the last second and since start (own: innermost; total: anywhere on \
                            the stack) and, with GPU data, its share of the samples taken while \
                            the GPU idled. Keys: q quit, s sort, p pause, i idle threads, t per \
                            thread, r reset, ? help. When standard output is not a terminal, \
                            prints a plain-text table every second instead.")]
    Top(TopArgs),
    /// Run the bundled training loop under a simulated GPU and write its report: the whole
    /// story on any machine.
    #[command(after_help = "Example:\n  stackscope demo -o demo\n\n\
                            Records fixtures/train_sim.py (embedded in the binary; needs python3) \
                            for --seconds while a simulated GPU follows its phases: idle while it \
                            loads data, busy while it computes. The GPU is labelled simulated in \
                            every output. Open DIR/report.html in a browser.")]
    Demo(DemoArgs),
    /// Merge dumps (`dump --json`) or recordings from many nodes into one view.
    #[command(after_help = "Examples:\n  \
                            srun --ntasks-per-node=1 sh -c 'stackscope dump --pid $(pgrep -of \
                            torchrun) --json > dump-$(hostname).json'\n  \
                            stackscope merge dump-*.json\n  \
                            stackscope merge node-a/profile node-b/profile -o job-profile\n\n\
                            Dumps: threads with the same stack print once with the ranks that \
                            share them (7 ranks: 0-5, 7); ranks away from where the others are \
                            come first, with their host. Recordings: one profile with a root per \
                            rank, and a table of ranks naming the one that differs most.")]
    Merge(MergeArgs),
    /// Two recordings (or two windows of one) side by side: did the change help?
    #[command(after_help = "Examples:\n  \
                            stackscope compare run-2-workers run-6-workers\n  \
                            stackscope compare profile@0-600 profile@3000-3600 -o slower\n\n\
                            Compares shares, never raw counts, so recordings of other rates and \
                            lengths compare: the GPU's mean utilization and busy seconds per wall \
                            second, the verdict, the loop's step, what fixing the bottleneck buys, \
                            and functions (processes matched by role, threads by name, frames by \
                            function and file). Each change carries its noise; one within it is \
                            not called a change. Ends with a verdict on the change (helped, \
                            no_change, worse, mixed) and writes compare.json, diff.svg (red grew, \
                            blue shrank) and compare.html into -o.")]
    Compare(CompareArgs),
    /// Internal: starts a command for `record` and writes its exit status to a file.
    #[command(name = "__launch", hide = true)]
    Launch(LaunchArgs),
}

#[derive(Debug, Args)]
pub struct LaunchArgs {
    pub status_file: PathBuf,
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The recording before the change: a directory (attach, record, demo), or a window of
    /// one, DIR@FROM-TO in seconds from its start (DIR@0-600; DIR@600- to its end).
    #[arg(value_name = "BEFORE")]
    pub before: String,
    /// The recording after the change, named the same way.
    #[arg(value_name = "AFTER")]
    pub after: String,
    /// Where to write compare.json, diff.svg and compare.html
    /// [default: ./compare-BEFORE-AFTER].
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Match frames by line too (by default by function and file: edited code moves lines).
    #[arg(long)]
    pub lines: bool,
    /// Exit with status 3 when the change made things worse beyond noise: the GPU's busy share
    /// fell, or BEFORE's bottleneck grew (for CI and sweeps).
    #[arg(long)]
    pub fail_if_worse: bool,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// `dump --json` files, or recording directories (not both).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub inputs: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Where merged recordings go [default: stackscope-merged].
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// The process to watch.
    #[arg(long, short = 'p')]
    pub pid: u32,
    /// Samples per second, 0.1 to 10000.
    #[arg(long, short = 'r', value_name = "HZ", default_value_t = DEFAULT_RATE_HZ, value_parser = parse_rate, allow_negative_numbers = true)]
    pub rate: f64,
    /// Show idle threads' samples (sleeping or blocked) from the start; `i` toggles.
    #[arg(long)]
    pub idle: bool,
    #[command(flatten)]
    pub tree: TreeArgs,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub memory: MemoryArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// Whether a command follows the target's child processes, for `attach`, `record`, `dump`,
/// `watch` and `top`: it does unless told not to, since a job is its process tree (DataLoader
/// workers, torchrun ranks, a launcher's Python).
#[derive(Debug, Args)]
pub struct TreeArgs {
    /// Keep to the one process: leave out the processes below it (followed by default:
    /// DataLoader workers, torchrun ranks, the Python a launcher starts).
    #[arg(long, conflicts_with = "subprocesses")]
    pub no_subprocesses: bool,
    /// Follow the processes below the target (the default).
    #[arg(long, hide = true)]
    pub subprocesses: bool,
}

impl TreeArgs {
    /// Whether the target's child processes are followed.
    pub fn follow(&self) -> bool {
        !self.no_subprocesses
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Output directory.
    #[arg(
        long,
        short = 'o',
        value_name = "DIR",
        default_value = "stackscope-demo"
    )]
    pub output: PathBuf,
    /// How long the training loop runs.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_duration)]
    pub seconds: f64,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A recording's output directory.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Where to write [default: DIR/report-FROM-TO].
    #[arg(long, short = 'o', value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Start of the window, seconds after the recording started [default: its start].
    #[arg(long, value_name = "SECS", value_parser = parse_offset)]
    pub from: Option<f64>,
    /// End of the window, seconds after the recording started [default: its end].
    #[arg(long, value_name = "SECS", value_parser = parse_offset)]
    pub to: Option<f64>,
    /// A sample counts as "GPU idle" below this utilization [default: the recording's].
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub idle_below: Option<f32>,
    /// Keep like processes apart: each DataLoader or pool worker under its own
    /// `process PID` root, as the recording did if it was made with this flag.
    #[arg(long)]
    pub processes_apart: bool,
    /// Keep every thread apart under its own name, as the recording did if it was made with
    /// this flag.
    #[arg(long)]
    pub threads_apart: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// A recording's output directory.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// pprof (profile.pb.gz), speedscope (profile.speedscope.json) or perfetto (trace.json).
    #[arg(long, value_name = "pprof|speedscope|perfetto")]
    pub format: String,
    /// Start of the window, seconds after the recording started [default: its start].
    #[arg(long, value_name = "SECS", value_parser = parse_offset)]
    pub from: Option<f64>,
    /// End of the window, seconds after the recording started [default: its end].
    #[arg(long, value_name = "SECS", value_parser = parse_offset)]
    pub to: Option<f64>,
    /// The file to write [default: DIR/NAME, or DIR/report-FROM-TO/NAME for a window].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The process to watch.
    #[arg(long, short = 'p')]
    pub pid: u32,
    /// Seconds without any change in the stacks that count as a hang (the metrics' and the
    /// recordings' hang threshold too).
    #[arg(long, value_name = "SECS", value_parser = parse_duration, default_value_t = DEFAULT_HANG_AFTER_SECS)]
    pub hang_after: f64,
    /// Where hang reports go [default: stackscope-PID-watch].
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
    #[arg(
        long,
        short = 'r',
        value_name = "HZ",
        value_parser = parse_rate,
        allow_negative_numbers = true,
        help = watch_rate_help()
    )]
    pub rate: Option<f64>,
    #[command(flatten)]
    pub tree: TreeArgs,
    /// Shows the values of locals whose names look like secrets (password, token, key...);
    /// hang reports are kept on disk.
    #[arg(long)]
    pub show_secrets: bool,
    /// Hang reports kept in the output directory: after each new one, the oldest beyond this
    /// many are removed.
    #[arg(long, value_name = "N", default_value = "100", value_parser = parse_keep)]
    pub keep_reports: usize,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub memory: MemoryArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The process to profile.
    #[arg(long, short = 'p')]
    pub pid: u32,
    #[command(flatten)]
    pub recording: RecordingArgs,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub recording: RecordingArgs,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Options shared by `attach` and `record`.
#[derive(Debug, Args)]
pub struct RecordingArgs {
    /// Output directory [default: stackscope-PID-YYYYmmdd-HHMMSS].
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Stop after this many seconds [default: until Ctrl-C or the target exits].
    #[arg(long, short = 'd', value_name = "SECS", value_parser = parse_duration)]
    pub duration: Option<f64>,
    /// Samples per second, 0.1 to 10000.
    #[arg(long, short = 'r', value_name = "HZ", default_value_t = DEFAULT_RATE_HZ, value_parser = parse_rate, allow_negative_numbers = true)]
    pub rate: f64,
    /// Keep samples of idle threads (sleeping or blocked); left out by default.
    #[arg(long)]
    pub idle: bool,
    /// Read the target without stopping it: cheaper for the target, but stacks may be torn.
    #[arg(long)]
    pub nonblocking: bool,
    /// Merge native (C/C++) frames into every sample: slower, stops the target a little longer.
    #[arg(long)]
    pub native: bool,
    #[command(flatten)]
    pub tree: TreeArgs,
    /// Keep like processes apart, each under its own `process PID` root. By default the
    /// processes of one kind (the same command line and rank: DataLoader workers re-created
    /// every epoch, a pool's workers) are one root, `DataLoader workers (N processes, K at a
    /// time)`, so that a job that starts thousands of workers reads as one.
    #[arg(long)]
    pub processes_apart: bool,
    /// Keep every thread apart under its own name. By default a process's short-lived
    /// threads of one kind (the same name but for its numbers: a server's request threads,
    /// `Thread-N (process_request_thread)`) are one pool once one of them ended, `thread pool
    /// process_request_thread`, with one lane whose height is how many were alive; a
    /// long-lived thread keeps its own name and lane.
    #[arg(long)]
    pub threads_apart: bool,
    /// Rewrite every output this often, so a crash or kill -9 loses at most one interval.
    /// SIGUSR1 writes them at once.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_duration)]
    pub flush_interval: f64,
    /// Also write these exports, comma-separated: pprof (profile.pb.gz), speedscope
    /// (profile.speedscope.json), perfetto (trace.json); at the end and at every checkpoint.
    #[arg(long, value_name = "LIST")]
    pub format: Option<String>,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub memory: MemoryArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    // The sample log's limits (see `LogLimitArgs` below).
    #[command(flatten)]
    pub log_limit: LogLimitArgs,
}

/// Memory sampling, for `attach`, `record`, `top` and `watch`.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// Memory readings per second of every process of the job (resident memory from
    /// /proc/PID/statm; private, shared and swapped memory from smaps_rollup, every 5 s at
    /// most; the job's memory cgroup: usage, limit, OOM kills); 0 turns memory sampling off.
    #[arg(
        long,
        value_name = "HZ",
        default_value_t = stackscope_memory::DEFAULT_RATE_HZ,
        value_parser = parse_memory_rate
    )]
    pub memory_rate: f64,
}

/// Prometheus metrics, for `watch`, `attach` (and `record`) and `top`.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics (hangs per process and rank, sampling health, GPU
    /// utilization) at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
}

/// Where GPU data comes from, for every command that polls the GPUs.
#[derive(Debug, Args)]
pub struct GpuArgs {
    /// GPUs to poll: auto (those the target uses, else all), off, or a list of indices like 0,1.
    #[arg(long, value_name = "auto|off|LIST", default_value = "auto")]
    pub gpu: String,
    /// The NVML library to load instead of libnvidia-ml.so.1.
    #[arg(long, value_name = "PATH", env = "STACKSCOPE_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,
    /// The GPU counts as idle below this utilization, in percent.
    #[arg(
        long,
        value_name = "PCT",
        default_value_t = DEFAULT_IDLE_BELOW,
        value_parser = parse_percent
    )]
    pub idle_below: f32,
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// The process to dump.
    #[arg(long, short = 'p')]
    pub pid: u32,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Show each frame's local variables (reprs cut short).
    #[arg(long)]
    pub locals: bool,
    #[command(flatten)]
    pub tree: TreeArgs,
    /// Merge each thread's native (C/C++) frames with its Python frames: the lock wait, the
    /// CUDA or NCCL call under the Python line that made it.
    #[arg(long)]
    pub native: bool,
    /// Shows the values of locals whose names look like secrets (password, token, key...);
    /// hang reports are kept on disk.
    #[arg(long)]
    pub show_secrets: bool,
}

/// `--rate`: one message for every value out of range, a negative or a non-number too.
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(rate) if (MIN_RATE_HZ..=MAX_RATE_HZ).contains(&rate) => Ok(rate),
        _ => Err(format!(
            "--rate must be between {MIN_RATE_HZ} and {MAX_RATE_HZ}, not {s}"
        )),
    }
}

/// `--memory-rate`: 0 (off), or a rate from [`MIN_RATE_HZ`] to [`MAX_MEMORY_RATE_HZ`].
fn parse_memory_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(rate) if rate == 0.0 || (MIN_RATE_HZ..=MAX_MEMORY_RATE_HZ).contains(&rate) => Ok(rate),
        _ => Err(format!(
            "--memory-rate must be 0 (off) or between {MIN_RATE_HZ} and {MAX_MEMORY_RATE_HZ}, \
             not {s}"
        )),
    }
}

fn parse_keep(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "expected how many hang reports to keep, 1 or more, not '{s}'"
        )),
    }
}

fn parse_duration(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("the duration must be a number of seconds, not '{s}'"))?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("the duration must be more than 0 seconds, not {s}"));
    }
    Ok(secs)
}

fn parse_offset(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected seconds since the recording started, not '{s}'"))?;
    if !(secs >= 0.0 && secs.is_finite()) {
        return Err(format!(
            "expected seconds since the recording started, not {s}"
        ));
    }
    Ok(secs)
}

fn parse_percent(s: &str) -> Result<f32, String> {
    let pct: f32 = s
        .parse()
        .map_err(|_| format!("expected a percentage from 0 to 100, not '{s}'"))?;
    if !(0.0..=100.0).contains(&pct) {
        return Err(format!("expected a percentage from 0 to 100, not {s}"));
    }
    Ok(pct)
}

// ---------------------------------------------------------------------------------------------
// The sample log's limits: `--log-max-size` and `--log-max-age`, for the commands that write
// samples.log (`attach` and `record`).

/// The smallest `--log-max-size`: a few of the log's 16 KiB blocks.
pub const MIN_LOG_MAX_SIZE: u64 = 64 * 1024;
/// The shortest `--log-max-age`, in seconds.
pub const MIN_LOG_MAX_AGE_SECS: f64 = 1.0;

/// Keeping samples.log bounded for open-ended recordings. Without either option the log is
/// one file holding the whole recording.
#[derive(Debug, Args)]
pub struct LogLimitArgs {
    /// Keep the sample log (samples.log, what `report` and `export` read) within SIZE: bytes,
    /// or with K, M or G (KiB, MiB, GiB), e.g. 500M, at least 64K. The log is then written in
    /// segments (samples.log.000001, ...) and the oldest are deleted; the recording's own
    /// profile still covers all of it. At 100 Hz the log grows by about 8 MB an hour for a
    /// steady job, up to 40 MiB an hour for one that keeps starting threads [default: no
    /// limit].
    #[arg(long, value_name = "SIZE", value_parser = parse_log_max_size)]
    pub log_max_size: Option<u64>,
    /// Keep only the newest DURATION of the sample log: seconds, or with s, m, h or d, e.g.
    /// 6h; older segments are deleted [default: no limit].
    #[arg(long, value_name = "DURATION", value_parser = parse_log_max_age)]
    pub log_max_age: Option<f64>,
}

/// `--log-max-size`: `500M`, `64K`, `1.5G`, `1048576`; at least [`MIN_LOG_MAX_SIZE`].
fn parse_log_max_size(s: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "--log-max-size must be a size of at least 64K (bytes, or with K, M or G: 500M), \
             not '{s}'"
        )
    };
    let text = s.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => (&text[..at], c.to_ascii_uppercase()),
        _ => (text, 'B'),
    };
    let scale: f64 = match unit {
        'B' => 1.0,
        'K' => 1024.0,
        'M' => 1024.0 * 1024.0,
        'G' => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let value: f64 = number.trim().parse().map_err(|_| bad())?;
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < MIN_LOG_MAX_SIZE as f64 || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// `--log-max-age`: `90`, `30m`, `6h`, `2d`, in seconds; at least [`MIN_LOG_MAX_AGE_SECS`].
fn parse_log_max_age(s: &str) -> Result<f64, String> {
    let bad = || {
        format!(
            "--log-max-age must be a duration of at least 1 s (seconds, or with s, m, h or d: \
             6h), not '{s}'"
        )
    };
    let text = s.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => (&text[..at], c.to_ascii_lowercase()),
        _ => (text, 's'),
    };
    let scale = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86_400.0,
        _ => return Err(bad()),
    };
    let value: f64 = number.trim().parse().map_err(|_| bad())?;
    let secs = value * scale;
    // A duration's seconds must fit a `Duration`: a century is far beyond any recording.
    if !(MIN_LOG_MAX_AGE_SECS..=100.0 * 365.0 * 86_400.0).contains(&secs) {
        return Err(bad());
    }
    Ok(secs)
}

#[cfg(test)]
mod tests;
