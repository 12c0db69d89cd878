//! The `stackscope` command: parses the command line, hands validated settings to the library
//! crates, and turns errors into one line and an exit status (0 done, 1 failed, 2 bad usage).

mod child;
mod cli;
mod config;
mod demo;
mod dump;
mod ending;
mod export;
mod gpu;
mod merge;
mod metrics;
mod recorder;
mod recording;
mod report;
mod session;
mod signals;
mod top;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::config::{
    DemoConfig, DumpConfig, ExportConfig, MergeConfig, RecordingConfig, ReportConfig, TopConfig,
    UsageError, WatchConfig,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Launch(args) = &cli.command {
        return child::launcher_main(&args.status_file, &args.command);
    }
    stackscope_sampler::procfs::raise_open_file_limit();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("stackscope: {err:#}");
            if err.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Attach(args) => recording::run(RecordingConfig::from_attach(args)?),
        Command::Record(args) => recording::run(RecordingConfig::from_record(args)?),
        Command::Dump(args) => dump::run(DumpConfig::from(args)),
        Command::Watch(args) => watch::run(WatchConfig::from_args(args)?),
        Command::Report(args) => report::run(ReportConfig::from_args(args)?),
        Command::Export(args) => export::run(ExportConfig::from_args(args)?),
        Command::Launch(args) => {
            // Handled before anything else in main; here only for completeness.
            let _ = child::launcher_main(&args.status_file, &args.command);
            Ok(())
        }
        Command::Top(args) => top::run(TopConfig::from_args(args)?),
        Command::Demo(args) => demo::run(DemoConfig::from_args(args)),
        Command::Merge(args) => merge::run(MergeConfig::from_args(args)?),
    }
}
