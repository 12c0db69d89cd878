//! `top` when standard output is not a terminal (a pipe, a file, a CI log): a plain-text table
//! every interval, the final totals when the target ends or on Ctrl-C/SIGTERM, then exit 0.

use std::io::Write;

use super::format::{self, location, Columns, Status, PERCENT_WIDTH};
use super::memory;
use super::Live;
use crate::session::Wake;
use crate::signals::Request;
use stackscope_aggregate::top::{SortKey, TopModel, ViewOptions};

/// Rows per interval's table: the top of it is what a reader of a log looks for.
const ROWS: usize = 20;
/// Rows of the final table.
const FINAL_ROWS: usize = 40;
/// Width the GPU lines and the processes' memory lines are laid out for.
const GPU_WIDTH: usize = 120;

pub fn run(mut session: Live, include_idle: bool) -> anyhow::Result<()> {
    let options = ViewOptions {
        include_idle,
        ..ViewOptions::default()
    };
    let stdout = std::io::stdout();
    let mut stopping = session.session.signals().stop_requested();
    while !stopping {
        match session.session.wait(session.interval_end()) {
            Wake::Batch(batch) => session.handle(batch),
            Wake::Signal(Request::Stop) => stopping = true,
            Wake::Signal(Request::Checkpoint) | Wake::Extra(()) => {}
            Wake::SamplerEnded => {
                session.sampler_ended();
                stopping = true;
            }
            Wake::Deadline => {
                session.end_interval();
                let text = table(&session.model, &session.status, &options, ROWS);
                // A reader that went away (`| head`) ends `top` quietly, as it would `cat`.
                if write_all(&stdout, &text).is_err() {
                    return Ok(());
                }
            }
        }
    }
    if session.status.ended.is_none() {
        session.end_interval();
    }
    let final_options = ViewOptions {
        sort: SortKey::OwnAll,
        ..options
    };
    let heading = match &session.status.ended {
        Some(why) => format!("{why}: final totals\n"),
        None => "final totals\n".to_string(),
    };
    let text = table(&session.model, &session.status, &final_options, FINAL_ROWS);
    let _ = write_all(&stdout, &format!("{heading}{text}"));
    Ok(())
}

fn write_all(stdout: &std::io::Stdout, text: &str) -> std::io::Result<()> {
    let mut out = stdout.lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// One table: the header lines, a line per GPU, the column heads and the top `limit` rows,
/// then a blank line.
pub fn table(model: &TopModel, status: &Status, options: &ViewOptions, limit: usize) -> String {
    let totals = model.totals(options);
    let mut out = String::new();
    let mut line = |text: &str| {
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&format::title_line(status));
    line(&format::stats_fields(status, &totals).join(" · "));
    line(&format::options_fields(status, options, &totals).join(" · "));
    if status.target_stopped {
        line("the target is stopped (SIGSTOP or a debugger): not sampling it, leaving it stopped");
    }
    for gpu in model.gpu_lines() {
        line(&format::gpu_text(&gpu, GPU_WIDTH));
    }
    for text in format::pack(&memory::memory_fields(&model.memory_lines()), GPU_WIDTH) {
        line(&text);
    }
    if let Some(why) = &status.gpu_unavailable {
        line(&format!("GPU: {why}"));
    }
    if let Some(sentence) = &status.idle_code {
        line(sentence);
    }
    if !status.while_idle.is_empty() {
        line(&status.while_idle.join(" · "));
    }
    if !status.the_loop.is_empty() {
        line(&status.the_loop.join(" · "));
    }
    if let Some(verdict) = &status.verdict {
        line(verdict);
    }
    let gil = format::gil_fields(&model.thread_gil(), options.sort);
    if !gil.is_empty() {
        line(&gil.join(" · "));
    }
    let columns = Columns::new(options, model.gpu_enabled());
    let headers = columns.percent_headers(options.sort);
    let thread_width = if columns.thread { 16 } else { 0 };
    let mut top = String::new();
    let mut bottom = String::new();
    for (head, under) in &headers {
        top.push_str(&format!("{head:>PERCENT_WIDTH$} "));
        bottom.push_str(&format!("{under:>PERCENT_WIDTH$} "));
    }
    if columns.thread {
        bottom.push_str(&format!("{:<thread_width$} ", "thread"));
    }
    bottom.push_str(&format!("{:<32} file:line", "function"));
    line(&top);
    line(&bottom);
    for row in model.rows(options).iter().take(limit) {
        let mut text = String::new();
        for cell in columns.percent_cells(row) {
            text.push_str(&format!("{cell:>PERCENT_WIDTH$} "));
        }
        if let Some(thread) = &row.thread {
            let name = format::truncate_end(thread, thread_width);
            text.push_str(&format!("{name:<thread_width$} "));
        }
        text.push_str(&format!("{:<32} {}", row.function, location(row)));
        line(&text);
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::{Event, GpuSample, MemorySample, ProcessGpuMemory, Timestamp};

    #[test]
    fn the_plain_table_shows_each_processs_memory_under_the_gpus() {
        let mut model = TopModel::new(30.0, true);
        for (pid, rss) in [(448, (12u64 << 30) / 10), (623, 300 << 20)] {
            model.handle(Event::Memory(MemorySample {
                time: Timestamp(1_000_000_000),
                pid,
                rss_bytes: rss,
                ..MemorySample::default()
            }));
        }
        model.handle(Event::Gpu(GpuSample {
            time: Timestamp(1_000_000_000),
            device: 0,
            utilization: Some(90.0),
            compute_pids: Some(vec![448]),
            process_memory: vec![ProcessGpuMemory {
                pid: 448,
                bytes: 340 << 20,
            }],
            ..GpuSample::default()
        }));
        model.end_interval();
        let status = Status {
            pid: 448,
            ..Status::default()
        };
        let text = table(&model, &status, &ViewOptions::default(), ROWS);
        let lines: Vec<&str> = text.lines().collect();
        let gpu = lines.iter().position(|l| l.starts_with("GPU0 "));
        assert_eq!(
            gpu.map(|at| lines[at + 1]),
            Some("pid 448 RSS  1.2G GPU  340M · pid 623 RSS  300M GPU     -"),
            "{text}"
        );
    }

    #[test]
    fn the_plain_table_has_no_memory_line_without_readings() {
        let model = TopModel::new(30.0, false);
        let text = table(&model, &Status::default(), &ViewOptions::default(), ROWS);
        assert!(!text.contains("RSS"), "{text}");
    }
}
