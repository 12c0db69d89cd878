//! The summary, as `summary.json` and as the short text printed at the end of a recording.

use std::io::Write;
use std::path::Path;

use stackscope_aggregate::{
    is_group_pid, FunctionStat, GpuSummary, LoopFoundBy, ProcessSummary, Role, Summary, ThreadRole,
    TopFunctions,
};

use crate::outputs::{file_names, FLAMEGRAPH, REPORT_HTML};
use crate::ReportError;

/// The printed summary lists every function with at least this share of the samples in
/// itself (self), at most [`TEXT_TOP_FUNCTIONS`] of them, and at least
/// [`TEXT_TOP_FUNCTIONS_MIN`] ([`top_function_rows`]).
pub const TEXT_TOP_FUNCTION_SHARE: f64 = 0.01;
/// The most functions the printed summary lists.
const TEXT_TOP_FUNCTIONS: usize = 10;
/// The fewest functions the printed summary lists, where the recording has that many.
const TEXT_TOP_FUNCTIONS_MIN: usize = 5;
/// A function on as many stacks as the one on the most, to this share, is the job's entry point
/// or on its one path down (`<module>`, `main`, `train_loop`): it says nothing of where the
/// time went, and fills no row.
const TEXT_ENTRY_PATH_MARGIN: f64 = 0.01;
/// How the summary's notice of a command that stackscope stopped (at the end of `--duration`,
/// on Ctrl-C) begins: the header then does not call its end the command's own.
pub const STOPPED_BY_STACKSCOPE: &str = "stackscope stopped the command";
/// How many threads the printed summary lists before saying how many more there are.
const TEXT_THREADS: usize = 8;
/// How many processes the printed summary lists before saying how many more there are.
const TEXT_PROCESSES: usize = 8;
/// How much of a process's command line the printed summary shows.
const TEXT_COMMAND_CHARS: usize = 40;
/// How many feeder pids the roles line lists before saying how many more there are.
const TEXT_FEEDER_PIDS: usize = 8;

/// Writes the summary as pretty JSON, ending with a newline.
pub fn write_summary_json<W: Write>(summary: &Summary, mut w: W) -> Result<(), ReportError> {
    serde_json::to_writer_pretty(&mut w, summary)?;
    writeln!(w)?;
    w.flush()?;
    Ok(())
}

/// Writes the human summary: what was sampled, what went wrong, where the time went, which
/// threads, where the files are, and (with GPU data) the verdict last, where the eye lands,
/// followed by the memory verdict's findings, one line each.
pub fn write_text_summary<W: Write>(
    summary: &Summary,
    out_dir: &Path,
    mut w: W,
) -> Result<(), ReportError> {
    write_header(summary, &mut w)?;
    write_functions(summary, &mut w)?;
    write_threads(summary, &mut w)?;
    write_processes(summary, &mut w)?;
    for notice in &summary.notices {
        writeln!(w, "note: {notice}")?;
    }
    if let Some(compiled) = &summary.compiled_code {
        writeln!(w, "Compiled code: {}", compiled.line)?;
    }
    for cap in &summary.caps_reached {
        writeln!(w, "cap reached: {cap}")?;
    }
    let names = file_names(summary.gpu.is_some(), summary.memory.is_some());
    writeln!(w, "Flamegraph: {}", out_dir.join(FLAMEGRAPH).display())?;
    writeln!(w, "Report: {}", out_dir.join(REPORT_HTML).display())?;
    writeln!(w, "Files in {}: {}", out_dir.display(), names.join(", "))?;
    if let Some(line) = roles_line(&summary.roles) {
        writeln!(w, "Roles: {line}")?;
    }
    if let Some(gpu) = &summary.gpu {
        write_gpu(gpu, &mut w)?;
    } else {
        if let Some(why) = &summary.gpu_unavailable {
            writeln!(w, "No GPU data: {why}")?;
        }
        write_loop_without_gpu(summary, &mut w)?;
    }
    // With GPU data the verdict says it; without, this line is the only one that does.
    if let (Some(stuck), None) = (&summary.stuck, &summary.gpu) {
        writeln!(w, "Stuck: {}.", stuck.sentence())?;
    }
    crate::memory::write_memory_text(summary.memory.as_ref(), &mut w)?;
    w.flush()?;
    Ok(())
}

fn write_header<W: Write>(s: &Summary, w: &mut W) -> Result<(), ReportError> {
    let python = if s.python_version.is_empty() {
        String::new()
    } else {
        format!(", Python {}", s.python_version)
    };
    writeln!(
        w,
        "stackscope: {} samples of {}{} over {:.1} s at {} Hz",
        s.samples,
        match s.rank.rank {
            Some(rank) => stackscope_event::process_name(s.pid, Some(rank)),
            None => format!("pid {}", s.pid),
        },
        python,
        s.duration_secs,
        s.rate_hz
    )?;
    if s.idle_samples_skipped > 0 {
        write_left_out(w, s)?;
    }
    if s.errors.total > 0 || s.dropped > 0 {
        writeln!(
            w,
            "  sampling errors: {} (torn reads {}, thread gone {}, other {}); dropped: {}",
            s.errors.total, s.errors.torn_read, s.errors.thread_gone, s.errors.other, s.dropped
        )?;
    }
    if s.late_ticks > 0 {
        writeln!(
            w,
            "  {} of {} ticks late (at most {:.1} ms): the sampler woke over a tenth of a period \
             after its time (a busy machine), and took their samples late, not lost",
            s.late_ticks, s.ticks, s.max_lateness_ms
        )?;
    }
    // A command stackscope stopped did not end by itself: its notice says how it ended.
    let stopped = s
        .notices
        .iter()
        .any(|n| n.starts_with(STOPPED_BY_STACKSCOPE));
    if s.target_exited && !stopped {
        match (s.exit_status, s.exit_signal) {
            (Some(status), _) => writeln!(w, "  the target exited with status {status}")?,
            (None, Some(signal)) => writeln!(w, "  the target ended by signal {signal}")?,
            (None, None) => writeln!(w, "  the target exited")?,
        }
    }
    Ok(())
}

fn write_functions<W: Write>(s: &Summary, w: &mut W) -> Result<(), ReportError> {
    if s.top_functions.by_self.is_empty() {
        writeln!(w, "No stack samples were kept.")?;
        return Ok(());
    }
    writeln!(w, "Top functions (self %, total %):")?;
    for f in top_function_rows(&s.top_functions) {
        writeln!(
            w,
            "  {:>5.1}%  {:>5.1}%  {} ({})",
            f.self_share * 100.0,
            f.total_share * 100.0,
            f.function,
            f.file
        )?;
    }
    Ok(())
}

/// The printed summary's top functions: every function with [`TEXT_TOP_FUNCTION_SHARE`] or
/// more of the samples in itself, by self share, at most [`TEXT_TOP_FUNCTIONS`]; fewer than
/// [`TEXT_TOP_FUNCTIONS_MIN`] are followed by those with the most samples in what they call
/// (by total share), leaving out the entry point's path ([`TEXT_ENTRY_PATH_MARGIN`]), so
/// that a leaf helper's callers show.
fn top_function_rows(top: &TopFunctions) -> Vec<&FunctionStat> {
    let mut rows: Vec<&FunctionStat> = top
        .by_self
        .iter()
        .filter(|f| f.self_share >= TEXT_TOP_FUNCTION_SHARE)
        .take(TEXT_TOP_FUNCTIONS)
        .collect();
    let same = |a: &FunctionStat, b: &FunctionStat| a.function == b.function && a.file == b.file;
    let most = top.by_total.first().map_or(0.0, |f| f.total_share);
    let below_entry = |f: &&FunctionStat| f.total_share < most - TEXT_ENTRY_PATH_MARGIN;
    for f in top.by_total.iter().filter(below_entry) {
        if rows.len() >= TEXT_TOP_FUNCTIONS_MIN {
            break;
        }
        if !rows.iter().any(|r| same(r, f)) {
            rows.push(f);
        }
    }
    rows
}

fn write_threads<W: Write>(s: &Summary, w: &mut W) -> Result<(), ReportError> {
    if s.threads.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = s
        .threads
        .iter()
        .take(TEXT_THREADS)
        .map(|t| {
            // A pool says how many threads it had.
            let name = match (t.threads, t.at_a_time) {
                (Some(n), Some(k)) if k > 1 || n > 1 => {
                    format!("{}: {n} threads, {k} at a time", t.name)
                }
                _ => t.name.clone(),
            };
            // Following a process tree, every process has its MainThread: say whose.
            if s.processes.len() > 1 && t.pid != 0 {
                let who = stackscope_aggregate::process_name(t.pid, &s.processes);
                format!("{who} {name} ({})", t.samples)
            } else {
                format!("{name} ({})", t.samples)
            }
        })
        .collect();
    let more = s.threads.len().saturating_sub(TEXT_THREADS);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    writeln!(w, "Threads (samples): {}{}", shown.join(", "), more)?;
    Ok(())
}

fn write_processes<W: Write>(s: &Summary, w: &mut W) -> Result<(), ReportError> {
    writeln!(w, "Processes followed: {}", s.processes_followed.max(1))?;
    if s.processes.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = s
        .processes
        .iter()
        .take(TEXT_PROCESSES)
        .map(process_text)
        .collect();
    let more = s.processes.len().saturating_sub(TEXT_PROCESSES);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    writeln!(w, "Processes (samples): {}{}", shown.join(", "), more)?;
    Ok(())
}

/// `pid 4300 python3 -c from multiproc... (20, exited)`; the `[other processes]` entry by name.
fn process_text(p: &ProcessSummary) -> String {
    let exited = if p.exited { ", exited" } else { "" };
    if p.pid == 0 {
        return format!("{} ({}{exited})", p.command_line, p.samples);
    }
    let mut command: String = p.command_line.chars().take(TEXT_COMMAND_CHARS).collect();
    if p.command_line.chars().count() > TEXT_COMMAND_CHARS {
        command.push_str("...");
    }
    // `rank 6 (pid 5124) python train.py (20)` for a process a launcher started, `DataLoader
    // workers (40 processes, 2 at a time) python train.py (900)` for a group of like ones.
    let name = match (&p.group, p.rank.rank) {
        (Some(group), _) => group.name().to_owned(),
        (None, Some(rank)) => stackscope_event::process_name(p.pid, Some(rank)),
        (None, None) => format!("pid {}", p.pid),
    };
    if command.is_empty() {
        format!("{name} ({}{exited})", p.samples)
    } else {
        format!("{name} {command} ({}{exited})", p.samples)
    }
}

/// `trainer pid 448 (MainThread); DataLoader workers pids 623, 624; 6 helper threads` (`loop
/// pid 448 (MainThread); ...` for a loop found without GPU data), or `None` when no thread has
/// a role.
pub fn roles_line(roles: &[ThreadRole]) -> Option<String> {
    if roles.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if let Some(t) = roles.iter().find(|t| t.role == Role::Trainer) {
        parts.push(format!("{} pid {} ({})", loop_word(t), t.pid, t.thread));
    }
    for (role, one, many) in [
        (
            Role::DataloaderWorker,
            "DataLoader worker",
            "DataLoader workers",
        ),
        (Role::Worker, "worker", "workers"),
    ] {
        let in_role = || roles.iter().filter(|t| t.role == role);
        // A group of like processes that ended has no pid of its own to show.
        let grouped = in_role().any(|t| is_group_pid(t.pid));
        let mut pids: Vec<u32> = in_role()
            .map(|t| t.pid)
            .filter(|&pid| !is_group_pid(pid))
            .collect();
        pids.sort_unstable();
        pids.dedup();
        if pids.is_empty() && !grouped {
            continue;
        }
        let mut shown: Vec<String> = pids
            .iter()
            .take(TEXT_FEEDER_PIDS)
            .map(u32::to_string)
            .collect();
        if pids.len() > TEXT_FEEDER_PIDS {
            shown.push(format!("and {} more", pids.len() - TEXT_FEEDER_PIDS));
        }
        let (name, pid_word) = if pids.len() == 1 && !grouped {
            (one, "pid")
        } else {
            (many, "pids")
        };
        parts.push(match (pids.is_empty(), grouped) {
            (true, _) => format!("{many} that ended, as one group"),
            (false, true) => format!(
                "{name} {pid_word} {} and those that ended, as one group",
                shown.join(", ")
            ),
            (false, false) => format!("{name} {pid_word} {}", shown.join(", ")),
        });
    }
    let pool: Vec<&ThreadRole> = roles
        .iter()
        .filter(|t| t.role == Role::FeederThread)
        .collect();
    if let Some(first) = pool.first() {
        let n = pool.len();
        let threads = if n == 1 { "thread" } else { "threads" };
        parts.push(format!("{n} feeder {threads} in pid {}", first.pid));
    }
    let helpers = roles.iter().filter(|t| t.role == Role::Helper).count();
    match helpers {
        0 => {}
        1 => parts.push("1 helper thread".to_owned()),
        n => parts.push(format!("{n} helper threads")),
    }
    Some(parts.join("; "))
}

/// Without GPU data, the loop's own reading (`summary.step`, `summary.verdict`), saying that
/// it was read without GPU data and how the loop was found; nothing without a loop.
fn write_loop_without_gpu<W: Write>(s: &Summary, w: &mut W) -> Result<(), ReportError> {
    if s.step.is_none() && s.verdict.is_none() {
        return Ok(());
    }
    let found = match s.loop_found_by {
        Some(LoopFoundBy::HandOffs) | None => {
            "the loop was found by its hand-offs (it takes work from other processes or \
             threads, then computes)"
        }
        Some(LoopFoundBy::Gpu) => "the loop was read from its own time",
    };
    writeln!(w, "Read without GPU data: {found}.")?;
    if let Some(step) = &s.step {
        writeln!(w, "The loop's time: {}", step.describe())?;
    }
    if let Some(verdict) = &s.verdict {
        writeln!(w, "Verdict (without GPU data): {}", verdict.text)?;
    }
    Ok(())
}

/// What the loop's label calls it: `loop` (`loop (MainThread)`, found by its hand-offs) or
/// `trainer` (`trainer (MainThread)`, found by the GPU's correlation, and any other label).
fn loop_word(t: &ThreadRole) -> &'static str {
    if t.label.starts_with("loop") {
        "loop"
    } else {
        "trainer"
    }
}

fn write_gpu<W: Write>(gpu: &GpuSummary, w: &mut W) -> Result<(), ReportError> {
    let devices: Vec<String> = gpu
        .devices
        .iter()
        .map(|d| match d.mean_utilization {
            Some(mean) if d.name.is_empty() => format!("GPU {} {mean:.0}%", d.index),
            Some(mean) => format!("GPU {} ({}) {mean:.0}%", d.index, d.name),
            None => format!("GPU {} (no utilization)", d.index),
        })
        .zip(&gpu.devices)
        // GPM's SM activity beside utilization, where the GPU has it.
        .map(|(text, d)| match d.mean_sm_active_pct {
            Some(sm) => format!("{text} (SM activity {sm:.0}%)"),
            None => text,
        })
        .collect();
    writeln!(w, "GPU mean utilization: {}", devices.join(", "))?;
    writeln!(
        w,
        "Stack samples while the GPU was idle (<{}%): {}, busy: {}, unknown: {}",
        gpu.idle_below, gpu.samples_gpu_idle, gpu.samples_gpu_busy, gpu.samples_gpu_unknown
    )?;
    if let Some(step) = &gpu.step {
        writeln!(w, "The training loop's time: {}", step.describe())?;
    }
    writeln!(w, "Verdict: {}", gpu.verdict.text)?;
    Ok(())
}

/// The idle samples left out; when they outnumber those kept in a job with no loop, where most
/// of them wait: a server's latency is in those waits, which `--idle` counts.
fn write_left_out<W: Write>(w: &mut W, s: &Summary) -> std::io::Result<()> {
    match &s.waits_left_out {
        Some(waits) => writeln!(
            w,
            "  {} samples of waiting threads left out, more than the {} kept: {:.0}% of the waits \
             are in {} ({}); --idle counts that time",
            waits.left_out,
            waits.kept,
            waits.share * 100.0,
            waits.at,
            waits.thread
        ),
        None => writeln!(
            w,
            "  {} samples of idle threads left out",
            s.idle_samples_skipped
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(pid: u32, tid: u64, thread: &str, role: Role, label: &str) -> ThreadRole {
        ThreadRole {
            pid,
            python_thread_id: tid,
            os_thread_id: None,
            thread: thread.to_owned(),
            role,
            label: label.to_owned(),
        }
    }

    #[test]
    fn roles_line_names_the_trainer_its_feeders_and_counts_helpers() {
        let mut roles = vec![
            role(448, 1, "MainThread", Role::Trainer, "trainer (MainThread)"),
            role(
                624,
                1,
                "MainThread",
                Role::DataloaderWorker,
                "DataLoader worker 1",
            ),
            role(
                623,
                1,
                "MainThread",
                Role::DataloaderWorker,
                "DataLoader worker 0",
            ),
        ];
        for (pid, tid) in [(448, 2), (448, 3), (623, 2), (623, 3), (624, 2), (624, 3)] {
            roles.push(role(
                pid,
                tid,
                "QueueFeederThread",
                Role::Helper,
                "QueueFeederThread",
            ));
        }
        assert_eq!(
            roles_line(&roles).as_deref(),
            Some(
                "trainer pid 448 (MainThread); DataLoader workers pids 623, 624; \
                 6 helper threads"
            )
        );
        let one = [
            role(10, 1, "Thread-2", Role::Trainer, "trainer (Thread-2)"),
            role(11, 1, "MainThread", Role::Worker, "worker"),
            role(10, 2, "MainThread", Role::Helper, "MainThread"),
        ];
        assert_eq!(
            roles_line(&one).as_deref(),
            Some("trainer pid 10 (Thread-2); worker pid 11; 1 helper thread")
        );
        // Workers that ended are one group, with a pid of its own that is no process's.
        let group = stackscope_aggregate::GROUP_PIDS_FROM;
        let churned = [
            role(10, 1, "MainThread", Role::Trainer, "loop (MainThread)"),
            role(31, 1, "MainThread", Role::Worker, "worker"),
            role(group, 1, "MainThread", Role::Worker, "worker"),
        ];
        assert_eq!(
            roles_line(&churned).as_deref(),
            Some("loop pid 10 (MainThread); workers pids 31 and those that ended, as one group")
        );
        assert_eq!(
            roles_line(
                &churned[..1]
                    .iter()
                    .chain(&churned[2..])
                    .cloned()
                    .collect::<Vec<_>>()
            )
            .as_deref(),
            Some("loop pid 10 (MainThread); workers that ended, as one group")
        );
        assert_eq!(roles_line(&[]), None);
    }

    /// A recording without GPU data whose loop the aggregate found by its hand-offs: the
    /// main process fed by two DataLoader workers.
    fn loop_without_gpu() -> Summary {
        use stackscope_aggregate::{
            AggregateConfig, Aggregator, StepBreakdown, Verdict, VerdictClass,
        };
        let mut agg = Aggregator::new(AggregateConfig::default(), stackscope_event::Timestamp(0));
        agg.finish();
        let mut summary = agg.summary(&crate::memory::tests::meta());
        summary.gpu_unavailable = Some("NVML could not be loaded".to_owned());
        summary.loop_found_by = Some(LoopFoundBy::HandOffs);
        summary.roles = vec![
            role(448, 1, "MainThread", Role::Trainer, "loop (MainThread)"),
            role(
                623,
                1,
                "MainThread",
                Role::DataloaderWorker,
                "DataLoader worker 0",
            ),
            role(
                624,
                1,
                "MainThread",
                Role::DataloaderWorker,
                "DataLoader worker 1",
            ),
        ];
        summary.step = Some(StepBreakdown {
            input_wait: 0.7,
            python: 0.3,
            ..StepBreakdown::default()
        });
        summary.verdict = Some(Verdict {
            class: VerdictClass::InputPipeline,
            text: "The loop waits for its next batch 70% of its time.".to_owned(),
        });
        summary
    }

    fn text_of(summary: &Summary) -> String {
        let mut out = Vec::new();
        write_text_summary(summary, Path::new("/tmp/out"), &mut out).expect("text summary");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn without_gpu_data_the_loop_is_read_after_the_no_gpu_line() {
        let text = text_of(&loop_without_gpu());
        let lines: Vec<&str> = text.lines().collect();
        let at = |prefix: &str| {
            lines
                .iter()
                .position(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix:?} line in\n{text}"))
        };
        let no_gpu = at("No GPU data: NVML could not be loaded");
        let read = at("Read without GPU data: the loop was found by its hand-offs");
        let time = at("The loop's time: ");
        let verdict = at("Verdict (without GPU data): ");
        assert!(no_gpu < read && read < time && time < verdict, "{text}");
        assert_eq!(lines[time], "The loop's time: input_wait 70%, python 30%");
        assert_eq!(
            lines[verdict],
            "Verdict (without GPU data): The loop waits for its next batch 70% of its time."
        );
        // Which pid is the loop and which are its workers.
        assert!(
            text.contains("Roles: loop pid 448 (MainThread); DataLoader workers pids 623, 624\n"),
            "{text}"
        );
    }

    #[test]
    fn without_gpu_data_or_a_loop_nothing_is_read() {
        let mut summary = loop_without_gpu();
        summary.step = None;
        summary.verdict = None;
        summary.roles.clear();
        let text = text_of(&summary);
        assert!(
            text.contains("No GPU data: NVML could not be loaded\n"),
            "{text}"
        );
        for absent in [
            "Read without GPU data",
            "The loop's time",
            "Verdict",
            "Roles:",
        ] {
            assert!(!text.contains(absent), "{absent:?} in\n{text}");
        }
    }

    fn function(name: &str, self_share: f64, total_share: f64) -> FunctionStat {
        FunctionStat {
            function: name.to_owned(),
            file: "train.py".to_owned(),
            self_samples: (self_share * 1000.0) as u64,
            self_share,
            total_samples: (total_share * 1000.0) as u64,
            total_share,
        }
    }

    fn listed(text: &str) -> Vec<&str> {
        text.lines()
            .skip_while(|l| !l.starts_with("Top functions"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .map(|l| l.rsplit_once("  ").map_or(l, |(_, name)| name))
            .collect()
    }

    #[test]
    fn top_functions_are_those_above_a_share_at_least_five_and_a_helpers_callers_show() {
        let mut summary = loop_without_gpu();
        // A leaf helper every phase calls, and below 1% the rest: its callers follow it, the
        // entry point on every stack does not.
        summary.top_functions = TopFunctions {
            by_self: vec![
                function("busy", 0.992, 0.992),
                function("log", 0.008, 0.008),
            ],
            by_total: vec![
                function("<module>", 0.0, 0.997),
                function("main", 0.0, 0.993),
                function("busy", 0.992, 0.992),
                function("load_batch", 0.0, 0.6),
                function("decode", 0.0, 0.6),
                function("train_step", 0.0, 0.4),
                function("forward", 0.0, 0.4),
                function("log", 0.008, 0.008),
            ],
        };
        let text = text_of(&summary);
        assert_eq!(
            listed(&text),
            [
                "busy (train.py)",
                "load_batch (train.py)",
                "decode (train.py)",
                "train_step (train.py)",
                "forward (train.py)"
            ],
            "{text}"
        );
        // Many above 1%: ten, by self share, whatever the number.
        let many: Vec<FunctionStat> = (0..15)
            .map(|i| function(&format!("f{i}"), 0.06 - f64::from(i) * 0.001, 0.1))
            .collect();
        summary.top_functions = TopFunctions {
            by_self: many.clone(),
            by_total: many,
        };
        assert_eq!(listed(&text_of(&summary)).len(), 10);
    }

    #[test]
    fn late_ticks_are_explained_where_they_are_counted() {
        let mut summary = loop_without_gpu();
        summary.ticks = 1996;
        summary.late_ticks = 265;
        summary.max_lateness_ms = 56.1;
        let text = text_of(&summary);
        let line = text
            .lines()
            .find(|l| l.contains("ticks late"))
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(
            line,
            "  265 of 1996 ticks late (at most 56.1 ms): the sampler woke over a tenth of a period \
             after its time (a busy machine), and took their samples late, not lost"
        );
    }

    #[test]
    fn a_command_stackscope_stopped_is_not_said_to_have_ended_by_itself() {
        let mut summary = loop_without_gpu();
        summary.target_exited = true;
        summary.exit_status = None;
        summary.exit_signal = Some(2);
        summary.notices = vec![format!(
            "{STOPPED_BY_STACKSCOPE} at the end of --duration: SIGINT to its process group, as \
             Ctrl-C would; it ended with signal 2 (SIGINT)"
        )];
        let text = text_of(&summary);
        assert!(!text.contains("the target ended by signal"), "{text}");
        assert!(
            text.contains("note: stackscope stopped the command at the end of --duration"),
            "{text}"
        );
        summary.notices.clear();
        assert!(text_of(&summary).contains("  the target ended by signal 2\n"));
    }
}
