//! Text shared by the full-screen view and the plain-text output: the header lines, the GPU
//! lines, the table's cells, and cutting text to a width. Pure, so the plain output and the
//! view say the same things in the same words.

use stackscope_aggregate::top::{GpuLine, Row, SortKey, ThreadGil, Totals, ViewOptions};
use stackscope_aggregate::{
    is_group_pid, FeedersWhileIdle, Role, StepBreakdown, Summary, WhileIdle,
};

/// The state of the session the header shows, beside the model's counts.
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub pid: u32,
    /// The target's rank, when a launcher started it.
    pub rank: Option<u32>,
    pub command: String,
    pub python_version: String,
    /// The rate asked for.
    pub rate_hz: f64,
    /// Sampling ticks per second over the last interval.
    pub achieved_hz: f64,
    pub errors: u64,
    /// Events the channel refused, from both producers.
    pub dropped: u64,
    /// Processes sampled now (more than 1 with `--subprocesses`).
    pub processes: u64,
    /// Length of the last interval.
    pub interval_secs: f64,
    /// Seconds since start or the last reset: what "all" covers.
    pub all_secs: f64,
    /// Why there is no GPU data, when there is none.
    pub gpu_unavailable: Option<String>,
    /// The target is stopped by someone else (SIGSTOP, a debugger) and not sampled.
    pub target_stopped: bool,
    /// Set once sampling ended: "process PID ended", or why sampling stopped.
    pub ended: Option<String>,
    /// The call path that sets GPU-idle samples apart, in the verdict's words.
    pub idle_code: Option<String>,
    /// What the trainer and its feeders did while the GPU idled, as fields
    /// ([`while_idle_fields`]); empty before the GPU idled.
    pub while_idle: Vec<String>,
    /// Without GPU data, the loop and its feeders, as fields ([`loop_fields`]); empty with
    /// GPU data or without a loop.
    pub the_loop: Vec<String>,
    /// Without GPU data, the loop's verdict ([`loop_verdict`]).
    pub verdict: Option<String>,
}

/// What the summary says goes to the header: the GPU-idle call path and the trainer's wait with
/// GPU data, the loop and its verdict without.
pub fn read_summary(status: &mut Status, summary: &Summary, gpu_enabled: bool) {
    let gpu = summary.gpu.as_ref();
    status.idle_code = gpu.and_then(|g| g.idle_path.as_ref()).map(|p| p.sentence());
    status.while_idle = gpu
        .map(|g| &g.while_idle)
        .filter(|w| w.trainer.is_some() || !w.feeders.is_empty())
        .map(|w| while_idle_fields(w, summary.step.as_ref()))
        .unwrap_or_default();
    // With the GPU polled but no reading yet, the loop's reading without it would be wrong
    // the moment one comes.
    let without_gpu = !gpu_enabled && gpu.is_none();
    status.the_loop = if without_gpu {
        loop_fields(summary)
    } else {
        Vec::new()
    };
    status.verdict = without_gpu.then(|| loop_verdict(summary)).flatten();
}

/// Header line 1: what is sampled.
pub fn title_line(status: &Status) -> String {
    format!(
        "stackscope top · {} · Python {} · {}",
        match status.rank {
            Some(_) => stackscope_event::process_name(status.pid, status.rank),
            None => format!("pid {}", status.pid),
        },
        status.python_version,
        status.command
    )
}

/// Header line 2, as fields: how sampling goes.
pub fn stats_fields(status: &Status, totals: &Totals) -> Vec<String> {
    let mut fields = vec![
        format!(
            "rate {:.1}/{} Hz",
            status.achieved_hz,
            trim_float(status.rate_hz)
        ),
        format!(
            "samples {} (+{} in {:.1}s)",
            totals.all_samples, totals.interval_samples, status.interval_secs
        ),
        format!("errors {}", status.errors),
        format!("dropped {}", status.dropped),
        format!(
            "threads {} ({} active)",
            totals.threads, totals.active_threads
        ),
    ];
    if status.processes > 1 {
        fields.push(format!("processes {}", status.processes));
    }
    fields
}

/// Header line 3, as fields: how the table is derived.
pub fn options_fields(status: &Status, options: &ViewOptions, totals: &Totals) -> Vec<String> {
    let idle = if options.include_idle {
        "idle threads shown".to_string()
    } else {
        format!(
            "idle threads hidden ({} samples)",
            totals.hidden_idle_samples
        )
    };
    let threads = if options.per_thread {
        "per thread"
    } else {
        "threads merged"
    };
    vec![
        format!("sort: {}", options.sort.label()),
        idle,
        threads.to_string(),
        format!(
            "last = {:.1}s, all = {}",
            status.interval_secs,
            duration(status.all_secs)
        ),
    ]
}

/// Feeder pids the line lists before counting the rest.
const FEEDER_PIDS_SHOWN: usize = 6;

/// The trainer's wait and the feeders' work while the GPU idled, one field each:
/// `trainer pid 448 MainThread: waits at main (train.py:136) in _BaseDataLoaderIter.__next__
/// 99% of GPU-idle time`, `DataLoader workers 623,624: 100% busy, 98% in augment_pixels
/// (train.py:56)`. The trainer's field ends with its step broken down, where there is one
/// (`; step: input_wait 70%, python 21%, gpu_wait 8%`).
pub fn while_idle_fields(w: &WhileIdle, step: Option<&StepBreakdown>) -> Vec<String> {
    let mut fields = Vec::new();
    if let Some(t) = &w.trainer {
        let share = percent(t.share);
        let step = step.map_or(String::new(), |s| format!("; step: {}", s.describe()));
        fields.push(match &t.waiting_in {
            Some(callee) => format!(
                "trainer pid {} {}: waits at {} in {} {share} of GPU-idle time{step}",
                t.pid,
                t.thread,
                t.frame,
                function_only(callee)
            ),
            None => format!(
                "trainer pid {} {}: runs at {} {share} of GPU-idle time{step}",
                t.pid, t.thread, t.frame
            ),
        });
    }
    fields.extend(w.feeders.iter().map(feeder_field));
    fields
}

/// `DataLoader workers 623,624: 100% busy, 98% in augment_pixels (train.py:56)`.
fn feeder_field(f: &FeedersWhileIdle) -> String {
    let many = f.pipelines() > 1;
    let who = match (f.role, many) {
        (Role::DataloaderWorker, true) => "DataLoader workers",
        (Role::DataloaderWorker, false) => "DataLoader worker",
        (Role::FeederThread, _) => "feeder threads in",
        (_, true) => "workers",
        (_, false) => "worker",
    };
    // A group of like processes (workers re-created every epoch) stands for those that ended.
    let live: Vec<u32> = f
        .pids
        .iter()
        .copied()
        .filter(|&p| !is_group_pid(p))
        .collect();
    let mut pids: Vec<String> = live
        .iter()
        .take(FEEDER_PIDS_SHOWN)
        .map(u32::to_string)
        .collect();
    if live.len() > FEEDER_PIDS_SHOWN {
        pids.push(format!("+{}", live.len() - FEEDER_PIDS_SHOWN));
    }
    if live.len() < f.pids.len() {
        pids.push("those ended".to_owned());
    }
    let mut text = format!("{who} {}: {} busy", pids.join(","), percent(f.busy_share));
    if let Some(function) = &f.function {
        text.push_str(&format!(", {} in {function}", percent(f.share)));
    }
    text
}

/// Without GPU data, the loop (the summary's `trainer` role) and its step, then its feeders
/// over the recording, one field each: `loop pid 448 (MainThread), read without GPU data;
/// step: input_wait 70%, python 21%`. Empty without a loop.
pub fn loop_fields(summary: &Summary) -> Vec<String> {
    let Some(the_loop) = summary.roles.iter().find(|r| r.role == Role::Trainer) else {
        return Vec::new();
    };
    let step = summary
        .step
        .as_ref()
        .map_or(String::new(), |s| format!("; step: {}", s.describe()));
    let mut fields = vec![format!(
        "{} pid {} ({}), read without GPU data{step}",
        loop_word(&the_loop.label),
        the_loop.pid,
        the_loop.thread
    )];
    fields.extend(summary.feeders.iter().map(feeder_field));
    fields
}

/// What the loop's label calls it: `loop` (`loop (MainThread)`, found by its hand-offs), else
/// `trainer`.
fn loop_word(label: &str) -> &'static str {
    if label.starts_with("loop") {
        "loop"
    } else {
        "trainer"
    }
}

/// `verdict (without GPU data): ...`, the summary's verdict, when there is one.
pub fn loop_verdict(summary: &Summary) -> Option<String> {
    summary
        .verdict
        .as_ref()
        .map(|v| format!("verdict (without GPU data): {}", v.text))
}

/// Each thread's GIL share, one field each, over the window the sort reads (the last interval,
/// or since start), the most held and waited there first: `MainThread GIL held 2%, waited
/// 55%`. Threads that neither held nor waited for it there are left out.
pub fn gil_fields(threads: &[ThreadGil], sort: SortKey) -> Vec<String> {
    let mut shown: Vec<&ThreadGil> = threads
        .iter()
        .filter(|t| t.counts(sort).held + t.counts(sort).waited > 0)
        .collect();
    // Stable: the model's order (thread id) settles ties, so lines do not flicker.
    shown.sort_by_key(|t| std::cmp::Reverse(t.counts(sort).held + t.counts(sort).waited));
    shown
        .iter()
        .map(|t| {
            let c = t.counts(sort);
            format!(
                "{} GIL held {}, waited {}",
                t.label,
                percent(c.holds()),
                percent(c.waits())
            )
        })
        .collect()
}

/// `text` in lines of at most `width` characters, broken between words, at most `max_lines`
/// of them (the last cut with `…` when more is left).
pub fn wrap(text: &str, width: usize, max_lines: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        let needed = current.chars().count() + 1 + word.chars().count();
        if !current.is_empty() && needed > width {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.is_empty() {
        lines.push(current);
    }
    let cut = lines.len() > max_lines;
    lines.truncate(max_lines);
    for line in &mut lines {
        *line = truncate_end(line, width);
    }
    if let (true, Some(last)) = (cut, lines.last_mut()) {
        let kept: String = last.chars().take(width.saturating_sub(1)).collect();
        *last = format!("{kept}…");
    }
    lines
}

/// `_BaseDataLoaderIter.__next__` of `_BaseDataLoaderIter.__next__ (torch/utils/data/x.py:741)`.
fn function_only(label: &str) -> &str {
    match label.rfind(" (") {
        Some(at) if label.ends_with(')') => &label[..at],
        _ => label,
    }
}

fn percent(share: f64) -> String {
    format!("{:.0}%", (share * 100.0).clamp(0.0, 100.0))
}

/// Fields joined by ` · ` into as few lines of at most `width` characters as they take; a
/// field wider than a line is cut.
pub fn pack(fields: &[String], width: usize) -> Vec<String> {
    const SEPARATOR: &str = " · ";
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for field in fields {
        let field = truncate_end(field, width);
        let needed = current.chars().count() + SEPARATOR.chars().count() + field.chars().count();
        if current.is_empty() {
            current = field;
        } else if needed <= width {
            current.push_str(SEPARATOR);
            current.push_str(&field);
        } else {
            lines.push(std::mem::replace(&mut current, field));
        }
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

/// `1h02m`, `3m05s`, `42s`.
pub fn duration(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// One GPU as a line of at most `width` characters: name, utilization (with SM activity where
/// the GPU has GPM) and its sparkline, memory, power. The sparkline takes the room the rest leaves, up to a minute.
pub fn gpu_text(gpu: &GpuLine, width: usize) -> String {
    let name = truncate_end(gpu.name.as_deref().unwrap_or("GPU"), 24);
    let head = format!("GPU{} {name} ", gpu.index);
    let util = match gpu.utilization {
        Some(u) => format!("util {u:>3.0}% "),
        None => "util   -% ".to_string(),
    };
    // Beside utilization: a GPU "100% utilized" by one small kernel at a time shows it here.
    let util = match gpu.sm_active {
        Some(sm) => format!("{util}SM {sm:>3.0}% "),
        None => util,
    };
    let memory = match (gpu.memory_used, gpu.memory_total) {
        (Some(used), Some(total)) => format!(" mem {}/{} GiB", gib(used), gib(total)),
        (Some(used), None) => format!(" mem {} GiB", gib(used)),
        _ => String::new(),
    };
    let power = gpu
        .power_watts
        .map_or(String::new(), |w| format!(" {w:.0} W"));
    let fixed = [&head, &util, &memory, &power]
        .iter()
        .map(|s| s.chars().count())
        .sum::<usize>();
    let spark = sparkline(&gpu.history, width.saturating_sub(fixed));
    truncate_end(&format!("{head}{util}{spark}{memory}{power}"), width)
}

fn gib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 30) as f64)
}

/// The last `width` values (percent) as block characters, oldest first.
pub fn sparkline(values: &[f32], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let skip = values.len().saturating_sub(width);
    values[skip..]
        .iter()
        .map(|v| {
            let level = (v.clamp(0.0, 100.0) / 100.0 * 7.0).round() as usize;
            BARS[level.min(7)]
        })
        .collect()
}

/// The table's columns, in order, for the view and the plain output alike.
pub struct Columns {
    pub thread: bool,
    pub gpu: bool,
}

impl Columns {
    pub fn new(options: &ViewOptions, gpu: bool) -> Columns {
        Columns {
            thread: options.per_thread,
            gpu,
        }
    }

    /// The percentage columns' two header lines; the sorted one carries `▼`.
    pub fn percent_headers(&self, sort: SortKey) -> Vec<(String, &'static str)> {
        let mut keys = vec![
            (SortKey::OwnInterval, "own%", "last"),
            (SortKey::TotalInterval, "total%", "last"),
            (SortKey::OwnAll, "own%", "all"),
            (SortKey::TotalAll, "total%", "all"),
        ];
        if self.gpu {
            keys.push((SortKey::GpuIdle, "idle%", "GPU"));
        }
        keys.into_iter()
            .map(|(key, top, bottom)| {
                let mark = if key == sort { "▼" } else { "" };
                (format!("{top}{mark}"), bottom)
            })
            .collect()
    }

    /// A row's percentages, formatted like the headers.
    pub fn percent_cells(&self, row: &Row) -> Vec<String> {
        let mut cells = vec![
            pct(row.own_interval),
            pct(row.total_interval),
            pct(row.own_all),
            pct(row.total_all),
        ];
        if self.gpu {
            cells.push(row.gpu_idle.map_or("-".into(), pct));
        }
        cells
    }
}

/// Width of each percentage column: room for `total%▼` and `100.0`.
pub const PERCENT_WIDTH: usize = 7;

fn pct(x: f64) -> String {
    format!("{x:.1}")
}

/// `file:line`, or the file alone when the line is unknown.
pub fn location(row: &Row) -> String {
    if row.line > 0 {
        format!("{}:{}", row.file, row.line)
    } else {
        row.file.to_string()
    }
}

/// `text` cut to `width` characters, the end replaced by `…` when cut.
pub fn truncate_end(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = text.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// `text` cut to `width` characters keeping its end (a path's file name and line matter more
/// than its first directories), the start replaced by `…` when cut.
pub fn truncate_start(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let tail: String = text.chars().skip(count - (width - 1)).collect();
    format!("…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ranked_target_is_named_by_its_rank() {
        let mut status = Status {
            pid: 5124,
            command: "python train.py".into(),
            python_version: "3.11.7".into(),
            ..Status::default()
        };
        assert_eq!(
            title_line(&status),
            "stackscope top · pid 5124 · Python 3.11.7 · python train.py"
        );
        status.rank = Some(6);
        assert_eq!(
            title_line(&status),
            "stackscope top · rank 6 (pid 5124) · Python 3.11.7 · python train.py"
        );
    }

    #[test]
    fn sparkline_keeps_the_newest_values() {
        assert_eq!(sparkline(&[0.0, 50.0, 100.0], 10), "▁▅█");
        assert_eq!(sparkline(&[0.0, 50.0, 100.0], 2), "▅█");
        assert_eq!(sparkline(&[150.0, -3.0], 2), "█▁");
        assert_eq!(sparkline(&[], 5), "");
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate_end("hot_heavy", 20), "hot_heavy");
        assert_eq!(truncate_end("hot_heavy", 4), "hot…");
        assert_eq!(truncate_start("/a/b/cpu_split.py:25", 12), "…split.py:25");
        assert_eq!(truncate_start("abc", 0), "");
    }

    #[test]
    fn gpu_line_fits_its_width() {
        let gpu = GpuLine {
            index: 0,
            name: Some("Fake H100".into()),
            utilization: Some(45.0),
            history: vec![10.0; 120],
            memory_used: Some(1 << 30),
            memory_total: Some(80 << 30),
            power_watts: Some(250.0),
            sm_active: None,
        };
        for width in [40, 80, 120] {
            let text = gpu_text(&gpu, width);
            assert!(text.chars().count() <= width, "{text}");
            assert!(text.starts_with("GPU0 Fake H100 util  45%"), "{text}");
        }
        assert!(gpu_text(&gpu, 120).ends_with("mem 1.0/80.0 GiB 250 W"));
        let gpm = GpuLine {
            sm_active: Some(18.0),
            ..gpu
        };
        let text = gpu_text(&gpm, 80);
        assert!(
            text.starts_with("GPU0 Fake H100 util  45% SM  18% "),
            "{text}"
        );
        assert!(text.chars().count() <= 80, "{text}");
    }

    #[test]
    fn fields_pack_into_lines_of_the_width() {
        let fields: Vec<String> = ["rate 99.0/100 Hz", "samples 5", "errors 0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            pack(&fields, 80),
            ["rate 99.0/100 Hz · samples 5 · errors 0"]
        );
        assert_eq!(
            pack(&fields, 30),
            ["rate 99.0/100 Hz · samples 5", "errors 0"]
        );
        assert_eq!(pack(&fields, 5), ["rate…", "samp…", "erro…"]);
        assert!(pack(&[], 80).is_empty());
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(42.7), "42s");
        assert_eq!(duration(185.0), "3m05s");
        assert_eq!(duration(3720.0), "1h02m");
    }

    #[test]
    fn while_idle_names_the_trainers_wait_and_the_feeders_work() {
        use stackscope_aggregate::{FeedersWhileIdle, TrainerWhileIdle};
        let w = WhileIdle {
            trainer: Some(TrainerWhileIdle {
                pid: 448,
                thread: "MainThread".into(),
                frame: "main (train.py:136)".into(),
                waiting_in: Some(
                    "_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:741)".into(),
                ),
                share: 0.992,
            }),
            feeders: vec![FeedersWhileIdle {
                role: Role::DataloaderWorker,
                pids: vec![623, 624],
                processes: 0,
                threads: 2,
                busy_share: 1.0,
                function: Some("augment_pixels (train.py:56)".into()),
                share: 0.981,
            }],
        };
        let step = StepBreakdown {
            input_wait: 0.7,
            python: 0.21,
            gpu_wait: 0.08,
            other_wait: 0.01,
            ..StepBreakdown::default()
        };
        assert_eq!(
            while_idle_fields(&w, Some(&step)),
            vec![
                "trainer pid 448 MainThread: waits at main (train.py:136) in \
                 _BaseDataLoaderIter.__next__ 99% of GPU-idle time; step: input_wait 70%, \
                 python 21%, gpu_wait 8%, other_wait 1%"
                    .to_owned(),
                "DataLoader workers 623,624: 100% busy, 98% in augment_pixels (train.py:56)"
                    .to_owned(),
            ]
        );
        let running = WhileIdle {
            trainer: Some(TrainerWhileIdle {
                pid: 7,
                thread: "MainThread".into(),
                frame: "busy (train_sim.py:47)".into(),
                waiting_in: None,
                share: 1.0,
            }),
            feeders: vec![FeedersWhileIdle {
                role: Role::Worker,
                pids: (10..20).collect(),
                processes: 0,
                threads: 2,
                busy_share: 0.5,
                function: None,
                share: 0.0,
            }],
        };
        assert_eq!(
            while_idle_fields(&running, None),
            vec![
                "trainer pid 7 MainThread: runs at busy (train_sim.py:47) 100% of GPU-idle time"
                    .to_owned(),
                "workers 10,11,12,13,14,15,+4: 50% busy".to_owned(),
            ]
        );
    }

    /// A summary without GPU data whose loop was found by its hand-offs.
    fn loop_summary() -> Summary {
        use stackscope_aggregate::{
            AggregateConfig, Aggregator, RecordingMeta, ThreadRole, Verdict, VerdictClass,
        };
        let aggregator =
            Aggregator::new(AggregateConfig::default(), stackscope_event::Timestamp(0));
        let mut summary = aggregator.summary(&RecordingMeta::default());
        summary.roles = vec![ThreadRole {
            pid: 448,
            python_thread_id: 1,
            os_thread_id: Some(448),
            thread: "MainThread".into(),
            role: Role::Trainer,
            label: "loop (MainThread)".into(),
        }];
        summary.step = Some(StepBreakdown {
            input_wait: 0.7,
            python: 0.3,
            ..StepBreakdown::default()
        });
        summary.feeders = vec![FeedersWhileIdle {
            role: Role::DataloaderWorker,
            pids: vec![623, 624],
            processes: 0,
            threads: 2,
            busy_share: 1.0,
            function: Some("augment (train.py:56)".into()),
            share: 0.9,
        }];
        summary.verdict = Some(Verdict {
            class: VerdictClass::InputPipeline,
            text: "The loop waits for its input 70% of its step.".into(),
        });
        summary
    }

    #[test]
    fn without_gpu_data_the_header_reads_the_loop_from_the_summary() {
        let summary = loop_summary();
        let mut status = Status::default();
        read_summary(&mut status, &summary, false);
        assert_eq!(
            status.the_loop,
            vec![
                "loop pid 448 (MainThread), read without GPU data; step: input_wait 70%, \
                 python 30%"
                    .to_owned(),
                "DataLoader workers 623,624: 100% busy, 90% in augment (train.py:56)".to_owned(),
            ]
        );
        assert_eq!(
            status.verdict.as_deref(),
            Some("verdict (without GPU data): The loop waits for its input 70% of its step.")
        );
        assert!(status.while_idle.is_empty() && status.idle_code.is_none());
        // With the GPU polled the loop's reading waits for the GPU's.
        read_summary(&mut status, &summary, true);
        assert!(status.the_loop.is_empty() && status.verdict.is_none());
        // No loop, no line.
        let mut none = summary.clone();
        none.roles.clear();
        assert!(loop_fields(&none).is_empty());
    }

    #[test]
    fn gil_fields_follow_the_sorts_window() {
        use stackscope_aggregate::top::ThreadId;
        use stackscope_aggregate::GilCounts;
        let counts = |samples, held, waited| GilCounts {
            samples,
            held,
            waited,
            ran_without: 0,
        };
        let threads = vec![
            ThreadGil {
                thread: ThreadId { pid: 1, id: 1 },
                label: "MainThread".into(),
                interval: counts(100, 2, 55),
                all: counts(1000, 10, 400),
            },
            ThreadGil {
                thread: ThreadId { pid: 1, id: 2 },
                label: "metrics".into(),
                interval: counts(100, 0, 0),
                all: counts(1000, 580, 0),
            },
        ];
        assert_eq!(
            gil_fields(&threads, SortKey::OwnInterval),
            ["MainThread GIL held 2%, waited 55%"]
        );
        assert_eq!(
            gil_fields(&threads, SortKey::TotalAll),
            [
                "metrics GIL held 58%, waited 0%",
                "MainThread GIL held 1%, waited 40%"
            ]
        );
    }

    #[test]
    fn wrap_breaks_between_words_and_marks_a_cut() {
        assert_eq!(wrap("a bb ccc dd", 5, 5), ["a bb", "ccc", "dd"]);
        assert_eq!(wrap("a bb ccc dd", 5, 2), ["a bb", "ccc…"]);
        assert_eq!(wrap("abcdefgh", 4, 2), ["abc…"]);
        assert!(wrap("", 10, 2).is_empty());
    }
}
