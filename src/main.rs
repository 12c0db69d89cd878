//! The `stackscope` command: parses the command line, hands validated settings to the library
//! crates, and turns errors into one line and an exit status (0 done, 1 failed, 2 bad usage;
//! `record` exits with its command's status, see [`exit`]).

// First: its `println!` and `eprintln!` stand for the standard ones in every module below.
#[macro_use]
mod print;

mod child;
mod cli;
mod compare;
mod config;
mod demo;
mod dump;
mod ending;
mod exit;
mod export;
mod gpu;
mod heap;
mod memory;
mod merge;
mod metrics;
mod recorder;
mod recording;
mod report;
mod session;
mod signals;
mod top;
mod usage;
mod watch;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::config::{
    CompareConfig, DemoConfig, DumpConfig, ExportConfig, MergeConfig, RecordingConfig,
    ReportConfig, TopConfig, WatchConfig,
};

fn main() -> ExitCode {
    let cli = match usage::parse() {
        Ok(cli) => cli,
        Err(status) => return status,
    };
    if let Command::Launch(args) = &cli.command {
        return child::launcher_main(&args.status_file, &args.command);
    }
    stackscope_sampler::procfs::raise_open_file_limit();
    // `record`'s own failures must not read as its command's.
    let failed = match cli.command {
        Command::Record(_) => exit::RECORD_FAILED,
        _ => exit::FAILED,
    };
    match run(cli) {
        Ok(status) => status,
        // The reader went away: what was asked is done, and nobody reads a line about it.
        Err(err) if exit::is_closed_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{}", usage::error_line(&err));
            ExitCode::from(exit::status_of(&err, failed))
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let done = match cli.command {
        Command::Record(args) => {
            let ended = recording::run(RecordingConfig::from_record(args)?)?;
            return exit::of_record(ended);
        }
        Command::Attach(args) => recording::run(RecordingConfig::from_attach(args)?).map(drop),
        Command::Dump(args) => dump::run(DumpConfig::from(args)),
        Command::Watch(args) => watch::run(WatchConfig::from_args(args)?),
        Command::Report(args) => report::run(ReportConfig::from_args(args)?),
        Command::Export(args) => export::run(ExportConfig::from_args(args)?),
        Command::Launch(args) => {
            // Handled before anything else in main; here only for completeness.
            return Ok(child::launcher_main(&args.status_file, &args.command));
        }
        Command::Top(args) => top::run(TopConfig::from_args(args)?),
        Command::Demo(args) => demo::run(DemoConfig::from_args(args)),
        Command::Merge(args) => merge::run(MergeConfig::from_args(args)?),
        Command::Compare(args) => return compare::run(CompareConfig::from_args(args)?),
    };
    done.map(|()| ExitCode::SUCCESS)
}
