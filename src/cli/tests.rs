use super::*;
use clap::CommandFactory;

#[test]
fn watch_reads_once_a_second_unless_a_short_hang_after_needs_more() {
    assert_eq!(default_watch_rate(300.0), 1.0);
    assert_eq!(default_watch_rate(6.0), 1.0);
    assert_eq!(default_watch_rate(2.0), 3.0);
    assert_eq!(default_watch_rate(0.1), 10.0);
    let help = watch_rate_help();
    assert!(
        help.contains("[default: 1; for a --hang-after under 6 s, 6 reads"),
        "{help}"
    );
}

#[test]
fn the_command_line_is_well_formed() {
    Cli::command().debug_assert();
}

#[test]
fn rates_outside_the_sane_range_are_refused() {
    assert!(parse_rate("100").is_ok());
    assert!(parse_rate("0.5").is_ok());
    for bad in ["0", "100000", "abc", "-5", "NaN"] {
        assert_eq!(
            parse_rate(bad).unwrap_err(),
            format!("--rate must be between 0.1 and 10000, not {bad}")
        );
    }
}

#[test]
fn the_idle_threshold_defaults_to_the_aggregates_and_says_so() {
    let cli = Cli::try_parse_from(["stackscope", "top", "--pid", "1"]).expect("parses");
    let Command::Top(top) = cli.command else {
        panic!("not top")
    };
    assert_eq!(top.gpu.idle_below, DEFAULT_IDLE_BELOW);
    let help = Cli::command()
        .find_subcommand_mut("top")
        .expect("top")
        .render_long_help()
        .to_string();
    assert!(help.contains("[default: 30]"), "{help}");
}

#[test]
fn the_process_tree_is_followed_unless_told_not_to() {
    let follows = |args: &[&str]| {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::Dump(dump) = cli.command else {
            panic!("not dump")
        };
        dump.tree.follow()
    };
    assert!(follows(&["stackscope", "dump", "--pid", "1"]));
    assert!(follows(&[
        "stackscope",
        "dump",
        "--pid",
        "1",
        "--subprocesses"
    ]));
    assert!(!follows(&[
        "stackscope",
        "dump",
        "--pid",
        "1",
        "--no-subprocesses"
    ]));
    assert!(Cli::try_parse_from([
        "stackscope",
        "dump",
        "--pid",
        "1",
        "--subprocesses",
        "--no-subprocesses"
    ])
    .is_err());
}

#[test]
fn memory_is_read_ten_times_a_second_unless_told_otherwise() {
    let memory_rate = |args: &[&str]| {
        let cli = Cli::try_parse_from(args).expect("parses");
        match cli.command {
            Command::Attach(a) => a.recording.memory.memory_rate,
            Command::Record(r) => r.recording.memory.memory_rate,
            Command::Top(t) => t.memory.memory_rate,
            Command::Watch(w) => w.memory.memory_rate,
            _ => panic!("a live command"),
        }
    };
    assert_eq!(memory_rate(&["stackscope", "attach", "-p", "1"]), 10.0);
    assert_eq!(memory_rate(&["stackscope", "top", "-p", "1"]), 10.0);
    assert_eq!(
        memory_rate(&["stackscope", "watch", "-p", "1", "--memory-rate", "0"]),
        0.0
    );
    assert_eq!(
        memory_rate(&["stackscope", "record", "--memory-rate", "2.5", "--", "x"]),
        2.5
    );
    for bad in ["-1", "0.01", "1000", "NaN", "x"] {
        assert!(parse_memory_rate(bad).is_err(), "{bad}");
    }
    let help = Cli::command()
        .find_subcommand_mut("attach")
        .expect("attach")
        .render_long_help()
        .to_string();
    assert!(help.contains("0 turns memory sampling off"), "{help}");
    assert!(help.contains("[default: 10]"), "{help}");
}

#[test]
fn durations_must_be_positive() {
    assert_eq!(parse_duration("2.5"), Ok(2.5));
    assert!(parse_duration("0").is_err());
    assert!(parse_duration("-1").is_err());
    assert!(parse_duration("inf").is_err());
}
