//! Parsing the command line, with clap's usage errors reported as stackscope reports every
//! error: one line starting `stackscope:`, exit status 2. clap's own report (an `error:` line,
//! a tip, the usage, a pointer to `--help`) is folded into that line, so that a launcher's log
//! or a script's `2>&1` holds one line per failure; `--help` and `--version` print as clap
//! prints them.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use crate::cli::Cli;
use crate::exit::{self, UsageError};

/// The command line of this process, or the status to exit with at once (after `--help`,
/// `--version`, or a usage error already reported).
pub fn parse() -> Result<Cli, ExitCode> {
    parse_from(std::env::args_os()).map_err(|end| {
        match &end {
            End::Printed(err) => {
                let _ = err.print();
            }
            End::Usage(line) => eprintln!("{line}"),
        }
        end.status()
    })
}

/// How parsing ended, when it did not give a command line.
#[derive(Debug)]
enum End {
    /// `--help` or `--version`: clap prints it.
    Printed(clap::Error),
    /// A usage error, as its one line.
    Usage(String),
}

impl End {
    fn status(&self) -> ExitCode {
        match self {
            End::Printed(_) => ExitCode::SUCCESS,
            End::Usage(_) => ExitCode::from(exit::USAGE),
        }
    }
}

fn parse_from(args: impl IntoIterator<Item = OsString>) -> Result<Cli, End> {
    let args: Vec<OsString> = args.into_iter().collect();
    Cli::try_parse_from(&args).map_err(|err| match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => End::Printed(err),
        _ => End::Usage(one_line(&err, &args)),
    })
}

/// The line that reports an error of a command: a usage error found after clap (a
/// [`UsageError`]) points at the command's help as clap's own do.
pub fn error_line(err: &anyhow::Error) -> String {
    if err.downcast_ref::<UsageError>().is_some() {
        let args: Vec<OsString> = std::env::args_os().collect();
        format!("stackscope: {err:#} (try '{}')", help_of(&args))
    } else {
        format!("stackscope: {err:#}")
    }
}

/// `stackscope COMMAND --help` for the command `args` name, else `stackscope --help`.
fn help_of(args: &[OsString]) -> String {
    match subcommand_of(args) {
        Some(name) => format!("stackscope {name} --help"),
        None => "stackscope --help".to_owned(),
    }
}

/// `stackscope: WHAT[; TIP] (try 'stackscope COMMAND --help')`.
fn one_line(err: &clap::Error, args: &[OsString]) -> String {
    let help = help_of(args);
    if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return format!("stackscope: name a command: {} (try '{help}')", commands());
    }
    let rendered = err.render().to_string();
    let mut paragraphs = rendered
        .split("\n\n")
        .map(str::trim)
        .filter(|p| !p.is_empty());
    // The first paragraph says what is wrong; its indented lines list the arguments it means.
    let mut what = paragraphs
        .next()
        .map(|p| {
            let mut lines = p.lines().map(str::trim);
            let first = lines.next().unwrap_or_default();
            let first = first.strip_prefix("error:").unwrap_or(first).trim();
            let first = first.strip_suffix(" found").unwrap_or(first);
            let listed: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
            if listed.is_empty() {
                first.to_owned()
            } else {
                format!("{first} {}", listed.join(", "))
            }
        })
        .unwrap_or_else(|| err.kind().to_string());
    // clap's tips are worth the room; its usage and "For more information" are not.
    for tip in paragraphs.filter_map(|p| p.strip_prefix("tip:")) {
        what.push_str("; ");
        what.push_str(tip.trim());
    }
    format!("stackscope: {what} (try '{help}')")
}

/// The subcommand the command line names, if any: the first argument that is not an option.
fn subcommand_of(args: &[OsString]) -> Option<String> {
    let first = args.iter().skip(1).find_map(|a| {
        let a = a.to_str()?;
        (!a.starts_with('-')).then_some(a)
    })?;
    Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .find(|c| c.get_name() == first)
        .map(|c| c.get_name().to_owned())
}

/// The commands, as `attach, record, ...`.
fn commands() -> String {
    Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(args: &[&str]) -> String {
        let argv = std::iter::once("stackscope")
            .chain(args.iter().copied())
            .map(OsString::from);
        match parse_from(argv) {
            Err(End::Usage(line)) => line,
            other => panic!("{args:?}: not a usage error: {other:?}"),
        }
    }

    #[test]
    fn every_usage_error_is_one_line_naming_the_commands_help() {
        let cases: [(&[&str], &str); 8] = [
            (
                &["record", "--foo", "--", "python3"],
                "stackscope: unexpected argument '--foo'; to pass '--foo' as a value, use \
                 '-- --foo' (try 'stackscope record --help')",
            ),
            (
                &["dump", "--pid", "1", "--jsn"],
                "stackscope: unexpected argument '--jsn'; a similar argument exists: '--json' \
                 (try 'stackscope dump --help')",
            ),
            (
                &["watch", "--hang-after", "5"],
                "stackscope: the following required arguments were not provided: \
                 --pid <PID> (try 'stackscope watch --help')",
            ),
            (
                &["attach", "--pid", "x"],
                "stackscope: invalid value 'x' for '--pid <PID>': invalid digit found in string \
                 (try 'stackscope attach --help')",
            ),
            (
                &["nosuch"],
                "stackscope: unrecognized subcommand 'nosuch' (try 'stackscope --help')",
            ),
            (
                &["record"],
                "stackscope: the following required arguments were not provided: <COMMAND>... \
                 (try 'stackscope record --help')",
            ),
            (
                &["export", "d", "--format"],
                "stackscope: a value is required for '--format <pprof|speedscope|perfetto>' but \
                 none was supplied (try 'stackscope export --help')",
            ),
            (
                &[],
                "stackscope: name a command: attach, record, dump, watch, report, export, top, \
                 demo, merge, compare (try 'stackscope --help')",
            ),
        ];
        for (args, line) in cases {
            assert_eq!(usage(args), line, "{args:?}");
        }
    }

    #[test]
    fn help_and_version_are_printed_not_errors() {
        for args in [
            &["stackscope", "--help"][..],
            &["stackscope", "record", "-h"],
            &["stackscope", "--version"],
        ] {
            match parse_from(args.iter().map(OsString::from)) {
                Err(end @ End::Printed(_)) => assert_eq!(end.status(), ExitCode::SUCCESS),
                other => panic!("{args:?}: {other:?}"),
            }
        }
    }
}
