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

// The sample log's limits.

#[test]
fn log_sizes_take_a_suffix_and_have_a_floor() {
    assert_eq!(parse_log_max_size("500M"), Ok(500 << 20));
    assert_eq!(parse_log_max_size("64k"), Ok(64 << 10));
    assert_eq!(parse_log_max_size("1.5G"), Ok(3 << 29));
    assert_eq!(parse_log_max_size("1048576"), Ok(1 << 20));
    assert_eq!(parse_log_max_size(" 2 M "), Ok(2 << 20));
    for bad in [
        "", "M", "10K", "63K", "-5M", "5X", "500MB", "inf", "NaN", "1e30G",
    ] {
        let err = parse_log_max_size(bad).expect_err(bad);
        assert!(err.starts_with("--log-max-size must be"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}

#[test]
fn log_ages_take_a_suffix_and_have_a_floor() {
    assert_eq!(parse_log_max_age("90"), Ok(90.0));
    assert_eq!(parse_log_max_age("90s"), Ok(90.0));
    assert_eq!(parse_log_max_age("30m"), Ok(1800.0));
    assert_eq!(parse_log_max_age("6h"), Ok(21_600.0));
    assert_eq!(parse_log_max_age("1.5D"), Ok(129_600.0));
    for bad in ["", "h", "0", "0.5", "-1h", "5w", "inf", "NaN", "1e12d"] {
        let err = parse_log_max_age(bad).expect_err(bad);
        assert!(err.starts_with("--log-max-age must be"), "{err}");
    }
}

#[test]
fn attach_and_record_take_the_log_limits_and_default_to_none() {
    let limits = |args: &[&str]| match Cli::try_parse_from(args).expect("parses").command {
        Command::Attach(a) => (
            a.recording.log_limit.log_max_size,
            a.recording.log_limit.log_max_age,
        ),
        Command::Record(r) => (
            r.recording.log_limit.log_max_size,
            r.recording.log_limit.log_max_age,
        ),
        _ => unreachable!(),
    };
    assert_eq!(limits(&["stackscope", "attach", "-p", "1"]), (None, None));
    assert_eq!(
        limits(&["stackscope", "attach", "-p", "1", "--log-max-size", "500M"]),
        (Some(500 << 20), None)
    );
    assert_eq!(
        limits(&["stackscope", "record", "--log-max-age", "6h", "--", "x"]),
        (None, Some(21_600.0))
    );
    assert!(
        Cli::try_parse_from(["stackscope", "attach", "-p", "1", "--log-max-size", "1K"]).is_err()
    );
    for command in ["attach", "record"] {
        let help = Cli::command()
            .find_subcommand_mut(command)
            .expect(command)
            .render_long_help()
            .to_string();
        assert!(help.contains("--log-max-size <SIZE>"), "{help}");
        assert!(help.contains("--log-max-age <DURATION>"), "{help}");
        assert!(help.contains("40 MiB an hour"), "{help}");
    }
}
