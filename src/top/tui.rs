//! The full-screen `top`: raw mode and the alternate screen for as long as it runs, restored
//! however it ends (q, Ctrl-C, SIGTERM, an error, a panic), and a loop that folds events, rolls
//! the interval every second, redraws, and answers keys.

use std::io::{stdout, Stdout};
use std::sync::OnceLock;
use std::thread::ThreadId;

use anyhow::Context;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::Show;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};

use super::format::Status;
use super::view::{self, Screen};
use super::Live as Session;
use crate::session::Wake;
use crate::signals::Request;
use stackscope_aggregate::top::{SortKey, TopModel, ViewOptions};

pub fn run(mut session: Session, include_idle: bool) -> anyhow::Result<()> {
    let mut terminal = TerminalGuard::enter()?;
    let keys = read_keys()?;
    let mut ui = Ui {
        options: ViewOptions {
            include_idle,
            ..ViewOptions::default()
        },
        frozen: None,
        help: false,
    };
    let mut redraw = true;
    while !session.session.signals().stop_requested() {
        if redraw {
            let (model, status) = match &ui.frozen {
                Some((model, status)) => (model, status),
                None => (&session.model, &session.status),
            };
            let screen = Screen {
                model,
                status,
                options: &ui.options,
                paused: ui.frozen.is_some(),
                help: ui.help,
            };
            terminal
                .terminal
                .draw(|frame| view::draw(frame, &screen))
                .context("cannot draw on the terminal")?;
            redraw = false;
            panic_if_asked_in_tests();
        }
        let deadline = session.interval_end();
        match session.session.wait_with(deadline, &keys) {
            Wake::Batch(batch) => session.handle(batch),
            Wake::Signal(Request::Stop) => break,
            Wake::Signal(Request::Checkpoint) => {}
            Wake::Deadline => {
                session.end_interval();
                redraw = true;
            }
            Wake::SamplerEnded => {
                session.sampler_ended();
                // The final totals are what matter now, not a last interval cut short.
                ui.frozen = None;
                if matches!(
                    ui.options.sort,
                    SortKey::OwnInterval | SortKey::TotalInterval
                ) {
                    ui.options.sort = SortKey::OwnAll;
                }
                redraw = true;
            }
            Wake::Extra(read) => match read.context("cannot read the terminal")? {
                Event::Key(key) if key.kind == KeyEventKind::Press => {
                    match ui.key(key, &mut session) {
                        KeyOutcome::Quit => break,
                        KeyOutcome::Redraw => redraw = true,
                        KeyOutcome::Nothing => {}
                    }
                }
                Event::Resize(..) => {
                    terminal.fit()?;
                    redraw = true;
                }
                _ => {}
            },
        }
    }
    drop(terminal);
    Ok(())
}

/// The terminal's events, read by a thread of their own that sleeps until one comes, so the
/// view's loop waits on keys and samples at once. The thread ends at the first error; one
/// still waiting for a key when `top` ends goes with the process.
fn read_keys() -> anyhow::Result<crossbeam_channel::Receiver<std::io::Result<Event>>> {
    let (sender, keys) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("stackscope-keys".into())
        .spawn(move || loop {
            let read = event::read();
            let failed = read.is_err();
            if sender.send(read).is_err() || failed {
                return;
            }
        })
        .context("cannot start the key reader")?;
    Ok(keys)
}

/// Lets the tests prove that a panic while drawing leaves the terminal usable; debug builds
/// only, so a release binary has no such switch.
fn panic_if_asked_in_tests() {
    #[cfg(debug_assertions)]
    if std::env::var_os("STACKSCOPE_TOP_TEST_PANIC").is_some() {
        panic!("STACKSCOPE_TOP_TEST_PANIC is set");
    }
}

/// What the keys change.
struct Ui {
    options: ViewOptions,
    /// While paused: the model and header as they were, shown instead of the live ones (which
    /// keep folding samples).
    frozen: Option<(TopModel, Status)>,
    help: bool,
}

enum KeyOutcome {
    Quit,
    Redraw,
    Nothing,
}

impl Ui {
    fn key(&mut self, key: KeyEvent, session: &mut Session) -> KeyOutcome {
        // Raw mode turns Ctrl-C into a key rather than SIGINT.
        if key.modifiers.contains(KeyModifiers::CONTROL) {
            return match key.code {
                KeyCode::Char('c') => KeyOutcome::Quit,
                _ => KeyOutcome::Nothing,
            };
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => return KeyOutcome::Quit,
            KeyCode::Char('s') => {
                self.options.sort = self.options.sort.next(session.model.gpu_enabled());
            }
            KeyCode::Char('p') if session.status.ended.is_none() => {
                self.frozen = match self.frozen {
                    Some(_) => None,
                    None => Some((session.model.clone(), session.status.clone())),
                };
            }
            KeyCode::Char('i') => self.options.include_idle = !self.options.include_idle,
            KeyCode::Char('t') => self.options.per_thread = !self.options.per_thread,
            KeyCode::Char('r') => {
                session.reset();
                if let Some((model, status)) = &mut self.frozen {
                    model.reset();
                    status.all_secs = 0.0;
                }
            }
            KeyCode::Char('?') | KeyCode::Char('h') => self.help = !self.help,
            KeyCode::Esc if self.help => self.help = false,
            _ => return KeyOutcome::Nothing,
        }
        KeyOutcome::Redraw
    }
}

/// The terminal in raw mode on the alternate screen; Drop puts it back.
struct TerminalGuard {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    fn enter() -> anyhow::Result<TerminalGuard> {
        install_panic_hook();
        enable_raw_mode().context("cannot put the terminal in raw mode")?;
        let entered = execute!(stdout(), EnterAlternateScreen)
            .context("cannot switch to the alternate screen")
            .and_then(|()| {
                let viewport = Viewport::Fixed(drawn_area());
                Terminal::with_options(
                    CrosstermBackend::new(stdout()),
                    TerminalOptions { viewport },
                )
                .context("cannot set up the terminal")
            });
        match entered {
            Ok(mut terminal) => {
                let _ = terminal.hide_cursor();
                Ok(TerminalGuard { terminal })
            }
            Err(e) => {
                restore_terminal();
                Err(e)
            }
        }
    }
}

impl TerminalGuard {
    /// Fits the view to the terminal's size after it changed; the next draw clears and redraws.
    fn fit(&mut self) -> anyhow::Result<()> {
        self.terminal
            .resize(drawn_area())
            .context("cannot resize the view")
    }
}

/// The area the view is drawn in: the whole terminal, as large as it says it is. A terminal
/// that says it has no size (the one `script` opens when its own input is no terminal reports
/// 0x0) gets $COLUMNS x $LINES, else 80x24, instead of a view of nothing.
fn drawn_area() -> Rect {
    let (columns, lines) = ratatui::crossterm::terminal::size().unwrap_or((0, 0));
    area_of(columns, lines, |name| std::env::var(name).ok())
}

/// [`drawn_area`] for a terminal of `columns` x `lines`, with `env` the environment.
fn area_of(columns: u16, lines: u16, env: impl Fn(&str) -> Option<String>) -> Rect {
    if columns > 0 && lines > 0 {
        return Rect::new(0, 0, columns, lines);
    }
    let from_env = |name: &str, default: u16| {
        env(name)
            .and_then(|v| v.trim().parse::<u16>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(default)
    };
    Rect::new(0, 0, from_env("COLUMNS", 80), from_env("LINES", 24))
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Leaves raw mode and the alternate screen and shows the cursor. Harmless when done twice (the
/// panic hook, then the guard's Drop as the panic unwinds).
fn restore_terminal() {
    // Raw mode first: it has more side effects than the alternate screen.
    let _ = disable_raw_mode();
    let _ = execute!(stdout(), LeaveAlternateScreen, Show);
}

/// The thread that owns the terminal.
static TUI_THREAD: OnceLock<ThreadId> = OnceLock::new();

/// Restores the terminal before a panic's message is printed, so the message lands on the
/// normal screen and the shell is usable after. Only for a panic of the thread that draws: a
/// producer thread's panic ends that thread alone, and the view, still running, says so.
fn install_panic_hook() {
    if TUI_THREAD.set(std::thread::current().id()).is_err() {
        return;
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if TUI_THREAD.get() == Some(&std::thread::current().id()) {
            restore_terminal();
        }
        previous(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_without_a_size_is_drawn_at_columns_by_lines_or_80x24() {
        let none = |_: &str| None;
        assert_eq!(area_of(120, 40, none), Rect::new(0, 0, 120, 40));
        assert_eq!(area_of(0, 0, none), Rect::new(0, 0, 80, 24));
        let env = |name: &str| match name {
            "COLUMNS" => Some("132".to_owned()),
            "LINES" => Some("x".to_owned()),
            _ => None,
        };
        assert_eq!(area_of(0, 0, env), Rect::new(0, 0, 132, 24));
    }
}
