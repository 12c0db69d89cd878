//! stackscope's exit statuses, in one place: how a run can end (a usage error, the command's
//! exit, what ended a recording), what `main` returns for each, and the paragraph of
//! `record --help` that promises them. Nothing here reads the rest of the binary: `cli`,
//! `config`, `child` and `recording` all read it.
//!
//! Every command exits 0 when done, 1 when it failed and 2 on a usage error, with one
//! `stackscope:` line on stderr saying why. `record` is different: a launcher that wraps a job in
//! `stackscope record --` must see the job's own status, so `record` exits with the command's
//! status when the command ends by itself, 0 when `--duration` ended the recording as asked,
//! and what a shell says for the signal that ended stackscope (130 Ctrl-C, 143 SIGTERM); it
//! keeps its own failures apart in the statuses `env` and `timeout` use (125, 126, 127), which a
//! job rarely exits with.
//!
//! A reader that stops reading (`stackscope dump ... | head -1`) ends no command with an error:
//! what was asked is done (a recording is written in full), the lines nobody reads are dropped,
//! and the command exits as it would have, quietly ([`is_closed_pipe`]).

use std::process::ExitCode;

use nix::sys::signal::Signal;

/// stackscope failed (any command but `record`).
pub const FAILED: u8 = 1;
/// The command line is wrong: an unknown option, a bad value.
pub const USAGE: u8 = 2;
/// `compare --fail-if-worse`: the change made things worse beyond noise.
pub const WORSE: u8 = 3;
/// `record`: stackscope itself failed (it could not read the command's interpreter, or write
/// the recording).
pub const RECORD_FAILED: u8 = 125;
/// `record`: the command exists but could not be run (not executable, a bad interpreter).
pub const COMMAND_NOT_RUN: u8 = 126;
/// `record`: the command was not found.
pub const COMMAND_NOT_FOUND: u8 = 127;

/// A failure with a status of its own, instead of the command's usual [`FAILED`].
#[derive(Debug)]
pub struct WithStatus {
    pub status: u8,
    pub message: String,
}

impl std::fmt::Display for WithStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WithStatus {}

/// A mistake on the command line found after clap: exits with status 2, like clap's own.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandExit {
    Code(i32),
    Signal(i32),
}

impl CommandExit {
    pub fn code(self) -> Option<i32> {
        match self {
            CommandExit::Code(code) => Some(code),
            CommandExit::Signal(_) => None,
        }
    }
}

impl CommandExit {
    pub fn signal(self) -> Option<i32> {
        match self {
            CommandExit::Code(_) => None,
            CommandExit::Signal(signal) => Some(signal),
        }
    }
}

impl std::fmt::Display for CommandExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandExit::Code(code) => write!(f, "exit status {code}"),
            CommandExit::Signal(signal) => match Signal::try_from(*signal) {
                Ok(name) => write!(f, "signal {signal} ({name})"),
                Err(_) => write!(f, "signal {signal}"),
            },
        }
    }
}

/// How a recording ended: what ended it, and how the command ended (`record`; `None` for
/// `attach`, or when it is not known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub by: EndedBy,
    pub command: Option<CommandExit>,
}

/// What ended a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndedBy {
    /// The target exited, or sampling could not go on.
    Target,
    /// `--duration` elapsed, as asked.
    Duration,
    /// A signal to stackscope (SIGINT: Ctrl-C, or SIGTERM), by its number.
    Signal(i32),
}

/// The status an error ends stackscope with: [`USAGE`] for a usage error, a [`WithStatus`]'s
/// own, else `failed` (the command's failure status).
pub fn status_of(err: &anyhow::Error, failed: u8) -> u8 {
    if err.downcast_ref::<UsageError>().is_some() {
        USAGE
    } else if let Some(with) = err.downcast_ref::<WithStatus>() {
        with.status
    } else {
        failed
    }
}

/// Whether `err` is a write to a pipe (or socket) whose reader has gone: the output is not
/// wanted any more, which is no failure.
pub fn is_closed_pipe(err: &anyhow::Error) -> bool {
    use stackscope_report::ReportError;
    err.chain().any(|cause| {
        let kind = if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            Some(io.kind())
        } else if let Some(json) = cause.downcast_ref::<serde_json::Error>() {
            json.io_error_kind()
        } else {
            match cause.downcast_ref::<ReportError>() {
                Some(ReportError::Io(io)) => Some(io.kind()),
                Some(ReportError::Json(json)) => json.io_error_kind(),
                _ => None,
            }
        };
        kind == Some(std::io::ErrorKind::BrokenPipe)
    })
}

/// How a command ended, as a shell says it: its exit status, or 128 + N after signal N.
/// `None` for what no status can say (a negative "unknown" code).
pub fn shell_status(exit: CommandExit) -> Option<u8> {
    match exit {
        CommandExit::Code(code) => u8::try_from(code).ok(),
        CommandExit::Signal(signal) => u8::try_from(128 + signal).ok(),
    }
}

/// `record`'s status once its recording is written: 0 when `--duration` ended it as asked,
/// 128 + N when signal N to stackscope did (whatever the command then did with the SIGINT
/// stackscope ends it with), else the command's own.
pub fn of_record(ended: Ended) -> anyhow::Result<ExitCode> {
    match ended.by {
        EndedBy::Duration => Ok(ExitCode::SUCCESS),
        EndedBy::Signal(signal) => Ok(ExitCode::from(
            shell_status(CommandExit::Signal(signal)).unwrap_or(RECORD_FAILED),
        )),
        EndedBy::Target => of_command(ended.command),
    }
}

/// `record`'s status when its command ended by itself: the command's own.
fn of_command(exit: Option<CommandExit>) -> anyhow::Result<ExitCode> {
    match exit.and_then(shell_status) {
        Some(status) => Ok(ExitCode::from(status)),
        None => Err(WithStatus {
            status: RECORD_FAILED,
            message: match exit {
                Some(exit) => format!("the command ended with {exit}, which no status can say"),
                None => "stackscope could not learn how the command ended".to_owned(),
            },
        }
        .into()),
    }
}

/// What `record --help` says after its options.
pub fn record_help() -> String {
    format!(
        "Example:\n  stackscope record -o demo -- python3 fixtures/train_sim.py --seconds 5\n\n\
         Ctrl-C ends the recording and the command.\n\n\
         Exit status, once the recording is written: the command's own when it exits by itself \
         (its exit status, or 128+N when signal N ended it); 0 when --duration ends the \
         recording (stackscope ends the command with SIGINT and writes everything); 130 after \
         Ctrl-C (SIGINT to stackscope) and 143 after SIGTERM to stackscope. A command that \
         exits before stackscope could read its Python: its own status, and nothing recorded. stackscope's own failures print one 'stackscope:' line on stderr \
         and exit {USAGE} (bad usage), {RECORD_FAILED} (stackscope failed: it could not read \
         the command's Python or write the recording), {COMMAND_NOT_RUN} (the command could \
         not be run) or {COMMAND_NOT_FOUND} (the command was not found)."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_ends_as_a_shell_says() {
        assert_eq!(shell_status(CommandExit::Code(0)), Some(0));
        assert_eq!(shell_status(CommandExit::Code(3)), Some(3));
        assert_eq!(shell_status(CommandExit::Signal(15)), Some(143));
        assert_eq!(shell_status(CommandExit::Signal(2)), Some(130));
        assert_eq!(shell_status(CommandExit::Code(-1)), None);
    }

    #[test]
    fn errors_keep_their_status() {
        let usage: anyhow::Error = UsageError("bad".into()).into();
        assert_eq!(status_of(&usage, RECORD_FAILED), USAGE);
        let missing: anyhow::Error = WithStatus {
            status: COMMAND_NOT_FOUND,
            message: "no".into(),
        }
        .into();
        assert_eq!(status_of(&missing, FAILED), COMMAND_NOT_FOUND);
        assert_eq!(
            status_of(&anyhow::anyhow!("disk full"), RECORD_FAILED),
            RECORD_FAILED
        );
        assert!(of_command(None).is_err());
    }

    #[test]
    fn a_closed_pipe_is_told_apart_from_other_failures() {
        let closed = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let report: anyhow::Error = stackscope_report::ReportError::Io(closed()).into();
        assert!(is_closed_pipe(&report.context("cannot write the dump")));
        assert!(is_closed_pipe(
            &anyhow::Error::from(closed()).context("cannot print")
        ));
        let json = serde_json::Error::io(closed());
        assert!(is_closed_pipe(&anyhow::Error::from(json)));
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        assert!(!is_closed_pipe(&anyhow::Error::from(full)));
        assert!(!is_closed_pipe(&anyhow::anyhow!("broken pipe")));
    }

    #[test]
    fn record_ends_with_what_ended_it() {
        let status = |by, command| format!("{:?}", of_record(Ended { by, command }).unwrap());
        let interrupted = Some(CommandExit::Signal(2));
        assert_eq!(
            status(EndedBy::Duration, interrupted),
            format!("{:?}", ExitCode::SUCCESS)
        );
        assert_eq!(
            status(EndedBy::Signal(2), interrupted),
            format!("{:?}", ExitCode::from(130))
        );
        assert_eq!(
            status(EndedBy::Signal(15), interrupted),
            format!("{:?}", ExitCode::from(143))
        );
        assert_eq!(
            status(EndedBy::Target, Some(CommandExit::Code(3))),
            format!("{:?}", ExitCode::from(3))
        );
    }

    #[test]
    fn record_help_names_every_status() {
        let help = record_help();
        for status in ["143", "125", "126", "127", "130"] {
            assert!(help.contains(status), "{status}: {help}");
        }
    }
}
