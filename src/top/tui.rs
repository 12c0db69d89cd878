//! The full-screen `top`: raw mode and the alternate screen for as long as it runs, restored
//! however it ends (q, Ctrl-C, SIGTERM, an error, a panic), and a loop that folds events, rolls
//! the interval every second, redraws, and answers keys.

use std::io::{stdout, Stdout};
use std::sync::OnceLock;
use std::thread::ThreadId;
use std::time::Duration;

use anyhow::Context;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::Show;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::Terminal;

use super::format::Status;
use super::view::{self, Screen};
use super::Session;
use crate::signals::Signals;
use stackscope_aggregate::top::{SortKey, TopModel, ViewOptions};

/// How long the loop waits for a key before it looks at the channel again: short enough that
/// events never pile up, long enough to cost nothing.
const KEY_POLL: Duration = Duration::from_millis(50);

pub fn run(mut session: Session, signals: &Signals, include_idle: bool) -> anyhow::Result<()> {
    let mut terminal = TerminalGuard::enter()?;
    let mut ui = Ui {
        options: ViewOptions {
            include_idle,
            ..ViewOptions::default()
        },
        frozen: None,
        help: false,
    };
    let mut redraw = true;
    while !signals.stop_requested() {
        session.pump();
        if session.interval_due() {
            session.end_interval();
            redraw = true;
        }
        if session.check_ended() {
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
        let wait = KEY_POLL.min(session.until_interval_end());
        if !event::poll(wait).context("cannot read the terminal")? {
            continue;
        }
        match event::read().context("cannot read the terminal")? {
            Event::Key(key) if key.kind == KeyEventKind::Press => match ui.key(key, &mut session) {
                KeyOutcome::Quit => break,
                KeyOutcome::Redraw => redraw = true,
                KeyOutcome::Nothing => {}
            },
            // `draw` resizes the buffers to the new size and clears the screen first.
            Event::Resize(..) => redraw = true,
            _ => {}
        }
    }
    drop(terminal);
    Ok(())
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
                Terminal::new(CrosstermBackend::new(stdout())).context("cannot set up the terminal")
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
