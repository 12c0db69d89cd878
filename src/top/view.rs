//! Draws one frame of `top` with ratatui: header, GPU lines, the function table, a footer with
//! the keys or the session's state, and the help box over it all when asked. Every width is
//! computed from the frame's, so any size from 80x24 up lays out cleanly, and smaller ones
//! lose columns' text rather than break.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row as TableRow, Table};
use ratatui::Frame;

use super::format::{self, location, truncate_end, truncate_start, Columns, Status, PERCENT_WIDTH};
use super::memory;
use stackscope_aggregate::top::{TopModel, ViewOptions};

/// What one frame shows.
pub struct Screen<'a> {
    pub model: &'a TopModel,
    pub status: &'a Status,
    pub options: &'a ViewOptions,
    pub paused: bool,
    pub help: bool,
}

/// At most this many GPU lines, so a machine of eight GPUs still leaves room for the table at
/// 24 lines; the rest are counted in one line.
const MAX_GPU_LINES: usize = 8;
/// At most this many lines of processes' memory (two or three processes a line), the rest
/// counted in one line: a pool of 32 workers still leaves room for the table.
const MAX_MEMORY_LINES: usize = 2;
/// At most this many lines of threads' GIL shares, the rest counted in one line; more in the
/// per-thread view, where the threads are what is looked at.
const MAX_GIL_LINES: usize = 1;
const MAX_GIL_LINES_PER_THREAD: usize = 3;
/// At most this many lines of the loop's verdict without GPU data.
const MAX_VERDICT_LINES: usize = 3;

pub fn draw(frame: &mut Frame, screen: &Screen) {
    let area = frame.area();
    let width = usize::from(area.width);
    let totals = screen.model.totals(screen.options);

    let mut header =
        vec![Line::from(truncate_end(&format::title_line(screen.status), width)).bold()];
    // At 120 columns each group is one line; at 80 each wraps onto two rather than lose its
    // end.
    let stats = format::stats_fields(screen.status, &totals);
    let options = format::options_fields(screen.status, screen.options, &totals);
    for text in format::pack(&stats, width)
        .into_iter()
        .chain(format::pack(&options, width))
    {
        header.push(Line::from(text));
    }
    if screen.status.target_stopped {
        header.push(
            Line::from(truncate_end(
                "the target is stopped (SIGSTOP or a debugger): not sampling it, leaving it stopped",
                width,
            ))
            .yellow(),
        );
    }
    let gpus = screen.model.gpu_lines();
    for gpu in gpus.iter().take(MAX_GPU_LINES) {
        header.push(Line::from(format::gpu_text(gpu, width)).cyan());
    }
    if gpus.len() > MAX_GPU_LINES {
        header.push(Line::from(format!(
            "… and {} more GPUs",
            gpus.len() - MAX_GPU_LINES
        )));
    }
    header.extend(memory_lines(screen, width));
    if let Some(why) = &screen.status.gpu_unavailable {
        header.push(Line::from(truncate_end(&format!("GPU: {why}"), width)).dim());
    }
    if let Some(sentence) = &screen.status.idle_code {
        header.push(Line::from(truncate_end(sentence, width)).yellow());
    }
    // The trainer's wait and the feeders' work: one line when wide enough, else one each.
    for text in format::pack(&screen.status.while_idle, width) {
        header.push(Line::from(text).yellow());
    }
    // Without GPU data: the loop, its feeders and its verdict.
    for text in format::pack(&screen.status.the_loop, width) {
        header.push(Line::from(text).yellow());
    }
    if let Some(verdict) = &screen.status.verdict {
        for text in format::wrap(verdict, width, MAX_VERDICT_LINES) {
            header.push(Line::from(text).yellow());
        }
    }
    header.extend(gil_lines(screen, width));

    let header_height = u16::try_from(header.len()).unwrap_or(u16::MAX);
    let [header_area, table_area, footer_area] = Layout::vertical([
        Constraint::Length(header_height),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header), header_area);
    draw_table(frame, table_area, screen);
    frame.render_widget(footer(screen, width), footer_area);
    if screen.help {
        draw_help(frame, area);
    }
}

/// Each process's memory, packed into lines of the width; past [`MAX_MEMORY_LINES`] a count
/// of the processes left out.
fn memory_lines(screen: &Screen, width: usize) -> Vec<Line<'static>> {
    let fields = memory::memory_fields(&screen.model.memory_lines());
    capped_lines(&fields, width, MAX_MEMORY_LINES, "processes")
}

/// Each thread's GIL share over the window the sort reads, packed into lines of the width;
/// past the most lines a count of the threads left out.
fn gil_lines(screen: &Screen, width: usize) -> Vec<Line<'static>> {
    let fields = format::gil_fields(&screen.model.thread_gil(), screen.options.sort);
    let max = if screen.options.per_thread {
        MAX_GIL_LINES_PER_THREAD
    } else {
        MAX_GIL_LINES
    };
    capped_lines(&fields, width, max, "threads")
}

/// `fields` packed into at most `max` lines of the width, then `… and N more {what}` for
/// those left out.
fn capped_lines(fields: &[String], width: usize, max: usize, what: &str) -> Vec<Line<'static>> {
    let packed = format::pack(fields, width);
    let mut lines: Vec<Line> = packed
        .iter()
        .take(max)
        .map(|text| Line::from(text.clone()))
        .collect();
    let shown: usize = packed
        .iter()
        .take(max)
        .map(|text| text.matches(" · ").count() + 1)
        .sum();
    if shown < fields.len() {
        lines.push(Line::from(format!(
            "… and {} more {what}",
            fields.len() - shown
        )));
    }
    lines
}

fn draw_table(frame: &mut Frame, area: Rect, screen: &Screen) {
    let columns = Columns::new(screen.options, screen.model.gpu_enabled());
    let headers = columns.percent_headers(screen.options.sort);
    let widths = TextWidths::new(&columns, headers.len(), area.width);
    let head = table_head(&headers, columns.thread);

    // Only as many rows as fit: deriving them is cheap, laying out thousands is not.
    let visible = usize::from(area.height.saturating_sub(2));
    let rows: Vec<TableRow> = screen
        .model
        .rows(screen.options)
        .iter()
        .take(visible)
        .map(|row| {
            let mut cells: Vec<Cell> = columns
                .percent_cells(row)
                .into_iter()
                .map(|c| Cell::from(Line::from(c).right_aligned()))
                .collect();
            if let Some(thread) = &row.thread {
                cells.push(Cell::from(truncate_end(thread, widths.thread)));
            }
            cells.push(Cell::from(truncate_end(&row.function, widths.function)));
            cells.push(Cell::from(truncate_start(&location(row), widths.location)));
            TableRow::new(cells)
        })
        .collect();

    let mut constraints: Vec<Constraint> = headers
        .iter()
        .map(|_| Constraint::Length(PERCENT_WIDTH as u16))
        .collect();
    if columns.thread {
        constraints.push(Constraint::Length(widths.thread as u16));
    }
    constraints.push(Constraint::Length(widths.function as u16));
    constraints.push(Constraint::Length(widths.location as u16));
    let table = Table::new(rows, constraints)
        .header(head)
        .column_spacing(COLUMN_SPACING as u16);
    frame.render_widget(table, area);
}

/// Between the table's columns.
const COLUMN_SPACING: usize = 1;

/// The widths of the table's text columns, in characters.
struct TextWidths {
    /// 0 without the thread column.
    thread: usize,
    function: usize,
    location: usize,
}

impl TextWidths {
    /// What the percent columns and the thread column leave of `width` goes to the function
    /// and its file.
    fn new(columns: &Columns, percent_columns: usize, width: u16) -> TextWidths {
        let thread = if columns.thread { 14 } else { 0 };
        let fixed = percent_columns * (PERCENT_WIDTH + COLUMN_SPACING)
            + if columns.thread {
                thread + COLUMN_SPACING
            } else {
                0
            };
        let rest = usize::from(width).saturating_sub(fixed + COLUMN_SPACING);
        // The function name gets a little less than half: file paths are longer and their ends
        // (file name, line) are what is read.
        let function = rest * 9 / 20;
        TextWidths {
            thread,
            function,
            location: rest - function,
        }
    }
}

/// The table's two-line header, the sorted column's in bold and underlined.
fn table_head(headers: &[(String, &'static str)], thread: bool) -> TableRow<'static> {
    let sorted = headers.iter().position(|(h, _)| h.ends_with('▼'));
    let mut head_cells: Vec<Cell> = headers
        .iter()
        .enumerate()
        .map(|(i, (top, bottom))| {
            let cell = Cell::from(Text::from(vec![
                Line::from(top.clone()).right_aligned(),
                Line::from(*bottom).right_aligned(),
            ]));
            if Some(i) == sorted {
                cell.style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED))
            } else {
                cell
            }
        })
        .collect();
    let label = |name: &'static str| Cell::from(Text::from(vec![Line::from(""), Line::from(name)]));
    if thread {
        head_cells.push(label("thread"));
    }
    head_cells.push(label("function"));
    head_cells.push(label("file:line"));
    TableRow::new(head_cells)
        .height(2)
        .style(Style::new().reversed())
}

fn footer(screen: &Screen, width: usize) -> Paragraph<'static> {
    let (text, style) = if let Some(ended) = &screen.status.ended {
        (
            format!("{ended}: final totals · q quits"),
            Style::new().black().on_yellow(),
        )
    } else if screen.paused {
        (
            "PAUSED: sampling goes on · p resumes · q quits · ? help".to_string(),
            Style::new().black().on_yellow(),
        )
    } else {
        (
            "q quit · s sort · p pause · i idle threads · t per-thread · r reset · ? help"
                .to_string(),
            Style::new().reversed(),
        )
    };
    Paragraph::new(Line::from(truncate_end(&text, width))).style(style)
}

const HELP: &[&str] = &[
    "q, Ctrl-C  quit (the target keeps running)",
    "s          sort by the next column",
    "p          pause the display (sampling goes on)",
    "i          show or hide idle threads' samples",
    "t          one row per thread and function",
    "r          reset the since-start columns",
    "?          show or hide this help",
    "",
    "own%: samples with the function innermost",
    "total%: samples with it anywhere on the stack",
    "last: the last interval; all: since start or reset",
    "idle% GPU: its share of the samples taken",
    "  while the GPU idled (below --idle-below)",
    "GIL held, waited: a thread's share of its",
    "  samples holding the GIL, waiting for it",
];

fn draw_help(frame: &mut Frame, area: Rect) {
    let width = HELP.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u16 + 4;
    let height = HELP.len() as u16 + 2;
    let popup = Rect {
        x: area.x + area.width.saturating_sub(width) / 2,
        y: area.y + area.height.saturating_sub(height) / 2,
        width: width.min(area.width),
        height: height.min(area.height),
    };
    let lines: Vec<Line> = HELP.iter().map(|l| Line::from(format!(" {l}"))).collect();
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::ALL).title(" keys ")),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use stackscope_event::{Event, MemorySample, Timestamp};

    /// The screen of `model` at 80x24, as lines of text.
    fn screen_text(model: &TopModel) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("a test terminal");
        let status = Status::default();
        let options = ViewOptions::default();
        let screen = Screen {
            model,
            status: &status,
            options: &options,
            paused: false,
            help: false,
        };
        terminal.draw(|frame| draw(frame, &screen)).expect("drawn");
        let buffer = terminal.backend().buffer();
        (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect::<String>()
            })
            .collect()
    }

    fn with_processes(n: u32) -> TopModel {
        let mut model = TopModel::new(30.0, false);
        for pid in 0..n {
            model.handle(Event::Memory(MemorySample {
                time: Timestamp(1),
                pid: 1000 + pid,
                rss_bytes: (340 << 20) + u64::from(pid),
                ..MemorySample::default()
            }));
        }
        model
    }

    #[test]
    fn the_view_shows_each_processs_memory() {
        let lines = screen_text(&with_processes(2));
        assert!(
            lines
                .iter()
                .any(|l| l.trim_end() == "pid 1000 RSS  340M · pid 1001 RSS  340M"),
            "{lines:#?}"
        );
    }

    #[test]
    fn the_view_counts_the_processes_it_has_no_room_for() {
        let lines = screen_text(&with_processes(9));
        let memory = lines.iter().filter(|l| l.contains(" RSS ")).count();
        assert_eq!(memory, MAX_MEMORY_LINES, "{lines:#?}");
        // Three fields a line at 80 columns.
        assert!(
            lines
                .iter()
                .any(|l| l.trim_end() == "… and 3 more processes"),
            "{lines:#?}"
        );
    }

    /// A sample of `name` at `ms` that ran or not and held the GIL or not.
    fn gil_sample(ms: u64, tid: u64, name: &str, active: bool, owns_gil: bool) -> Event {
        Event::Stack(stackscope_event::StackSample {
            time: Timestamp(ms * 1_000_000),
            pid: 100,
            thread: stackscope_event::ThreadInfo {
                os_thread_id: Some(tid),
                python_thread_id: tid,
                name: Some(name.into()),
                active,
                owns_gil,
            },
            frames: vec![stackscope_event::Frame::python("step", "train.py", 3)].into(),
        })
    }

    #[test]
    fn the_view_shows_each_threads_gil_share() {
        let mut model = TopModel::new(30.0, false);
        // Both run at the step, then MainThread waits while metrics holds the GIL, 4 reads.
        model.handle(gil_sample(0, 1, "MainThread", true, false));
        model.handle(gil_sample(0, 2, "metrics", true, false));
        for ms in [10, 20, 30, 40] {
            model.handle(gil_sample(ms, 1, "MainThread", false, false));
            model.handle(gil_sample(ms, 2, "metrics", true, true));
        }
        // The last read is complete once the input ends.
        model.flush();
        model.end_interval();
        let lines = screen_text(&model);
        assert!(
            lines.iter().any(|l| l.trim_end()
                == "MainThread GIL held 0%, waited 80% · metrics GIL held 80%, waited 0%"),
            "{lines:#?}"
        );
    }
}
