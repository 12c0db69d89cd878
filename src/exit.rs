//! stackscope's exit statuses, in one place: what `main` returns for each outcome, and the
//! paragraph of `record --help` that promises them.
//!
//! Every command exits 0 when done, 1 when it failed and 2 on a usage error, with one
//! `stackscope:` line on stderr saying why. `record` is different: a launcher that wraps a job in
//! `stackscope record --` must see the job's own status, so `record` exits with the command's
//! status and keeps its own failures apart from it in the statuses `env` and `timeout` use
//! (125, 126, 127), which a job rarely exits with.

use std::process::ExitCode;

use crate::child::CommandExit;
use crate::config::UsageError;

/// stackscope failed (any command but `record`).
pub const FAILED: u8 = 1;
/// The command line is wrong: an unknown option, a bad value.
pub const USAGE: u8 = 2;
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

/// How a command ended, as a shell says it: its exit status, or 128 + N after signal N.
/// `None` for what no status can say (a negative "unknown" code).
pub fn shell_status(exit: CommandExit) -> Option<u8> {
    match exit {
        CommandExit::Code(code) => u8::try_from(code).ok(),
        CommandExit::Signal(signal) => u8::try_from(128 + signal).ok(),
    }
}

/// `record`'s status once its recording is written: the command's own.
pub fn of_command(exit: Option<CommandExit>) -> anyhow::Result<ExitCode> {
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
         Exit status: the command's own, once the recording is written: its exit status, or \
         128+N when signal N ended it (143 for SIGTERM). When --duration, Ctrl-C or SIGTERM \
         ends the recording, stackscope ends the command with SIGINT: 130 unless it handles \
         that. A command that exits before stackscope could read its Python: its own status, \
         and nothing recorded. stackscope's own failures print one 'stackscope:' line on stderr \
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
    fn record_help_names_every_status() {
        let help = record_help();
        for status in ["143", "125", "126", "127", "130"] {
            assert!(help.contains(status), "{status}: {help}");
        }
    }
}
