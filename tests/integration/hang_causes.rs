//! Hangs said why: a busy thread is not stuck, a recording that froze late is, and a job that
//! hangs because one of its processes vanished gets a report naming the process, how it
//! ended and when (`processes_ended`, `cause`); a plain deadlock is `deadlock`.

use crate::common;
use crate::hang_diagnosis::{
    looks_hung_lines, ready_u32, reports, wait_for_report, watch_command, HANG_AFTER_SECS,
    RUN_TIMEOUT,
};

use common::*;
use std::fs;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- busy is not stuck

/// `while True: zlib.compress(data, 9)`: one frozen line, always on a CPU.
#[test]
fn a_zlib_compress_loop_is_busy_not_stuck() {
    let _serial = serial();
    let fixture = Fixture::start("busy_compress.py", &[]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let line = marker_line(&fixture_source("busy_compress.py"), "compress");
    // watch: no report in three times --hang-after.
    let out = OutDir::new();
    let mut running = spawn_stackscope(watch_command(pid, &out, &[]));
    let found = wait_for_report(
        &mut running,
        &out.out,
        Instant::now() + Duration::from_secs(3 * HANG_AFTER_SECS),
    );
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    run.assert_success();
    assert!(
        found.is_none() && looks_hung_lines(&run.stdout).is_empty(),
        "a report for a job that keeps compressing: {:?}\n{}",
        found.and_then(|p| fs::read_to_string(p).ok()),
        run.describe()
    );
    assert!(reports(&out.out).is_empty());
    // attach: its stack is the same line all along, and the summary says nothing of stuck.
    let out = OutDir::new();
    let pid_arg = pid.to_string();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid_arg,
            "--duration",
            "5",
            "--gpu",
            "off",
            "-o",
            out.arg(),
        ],
        RUN_TIMEOUT,
    );
    run.assert_success();
    assert!(
        !run.stdout.contains("Stuck") && !run.stderr.contains("Stuck"),
        "{}",
        run.describe()
    );
    let summary = out.summary();
    assert!(summary["stuck"].is_null(), "{summary:#}");
    let folded = out.folded();
    assert!(
        folded.stacks.iter().any(|s| s
            .innermost()
            .is_some_and(|f| f.line == Some(line) && f.function == "pack")),
        "the compress line is where it is:\n{}",
        folded.excerpt()
    );
}

/// Worked 3 s, then froze (blocked on a lock) for 33 s of a 36 s recording: stuck.
#[test]
fn a_recording_that_moved_then_froze_for_its_last_30_s_is_stuck() {
    let _serial = serial();
    let fixture = Fixture::start("hangs_later.py", &["--work-secs", "3"]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid").to_string();
    let out = OutDir::new();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid,
            "--duration",
            "36",
            "--rate",
            "20",
            "--gpu",
            "off",
            "-o",
            out.arg(),
        ],
        Duration::from_secs(80),
    );
    run.assert_success();
    let summary = out.summary();
    let stuck = &summary["stuck"];
    assert_eq!(stuck["whole_recording"], false, "{summary:#}");
    let unchanged = stuck["unchanged_secs"].as_f64().unwrap_or(0.0);
    assert!((30.0..=34.0).contains(&unchanged), "{summary:#}");
    let line = marker_line(&fixture_source("hangs_later.py"), "stuck-here");
    assert_eq!(
        stuck["threads"][0]["frame"],
        format!("stuck_here (hangs_later.py:{line})"),
        "{summary:#}"
    );
}
