//! `stackscope attach --pid`: the real binary against live Python fixtures.

use crate::common;

use common::*;
use std::fs;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

fn attach(pid: u32, out: &OutDir, extra: &[&str]) -> Run {
    let pid = pid.to_string();
    let mut args = vec!["attach", "--pid", &pid, "-o", out.arg()];
    args.extend_from_slice(extra);
    run_stackscope(&args, RUN_TIMEOUT)
}

#[test]
fn attach_cpu_split_finds_the_split_and_the_lines() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    let out = OutDir::new();
    let rate = 100.0;
    let duration = 3.0;
    let run = attach(fixture.pid, &out, &["--duration", "3", "--rate", "100"]);
    run.assert_success();
    run.assert_no_panic();

    for file in ["flamegraph.svg", "stacks.folded", "summary.json"] {
        assert!(
            out.out.join(file).is_file(),
            "{file} missing in {:?}",
            out.out
        );
    }
    let svg = fs::read_to_string(out.out.join("flamegraph.svg")).expect("svg");
    assert!(svg.contains("<svg"), "flamegraph.svg is not an SVG");
    assert!(
        svg.contains("hot_heavy"),
        "flamegraph.svg does not name hot_heavy"
    );

    let folded = out.folded();
    let excerpt = folded.excerpt();

    // Every stack is rooted at the main thread: it is the only thread.
    let threads = folded.threads();
    assert_eq!(
        threads.keys().collect::<Vec<_>>(),
        vec!["MainThread"],
        "only MainThread should be sampled:\n{excerpt}"
    );
    let main = folded.thread_total("MainThread") as f64;

    // Sample count near rate x duration (the machine is small: be lenient).
    let expected = rate * duration;
    assert!(
        main >= 0.5 * expected && main <= 1.1 * expected,
        "{main} samples, expected about {expected}:\n{excerpt}"
    );

    // The split: 75% / 25% by construction.
    let heavy = folded.thread_function_total("MainThread", "hot_heavy") as f64 / main;
    let light = folded.thread_function_total("MainThread", "hot_light") as f64 / main;
    assert!(
        (0.6..=0.9).contains(&heavy),
        "hot_heavy share {heavy:.3}, expected 0.6..0.9:\n{excerpt}"
    );
    assert!(
        (0.1..=0.4).contains(&light),
        "hot_light share {light:.3}, expected 0.1..0.4:\n{excerpt}"
    );

    // Frames: outermost first, innermost last, `function (file:line)`, the
    // line inside the function's body. A leaf caught on its first
    // instruction (RESUME) is at its `def` line, as CPython's own f_lineno is
    // at a 'call' trace event; a caller is always on a line of its body.
    let source = fixture_source("cpu_split.py");
    let (heavy_def, heavy_end) = function_lines(&source, "hot_heavy");
    let (light_def, light_end) = function_lines(&source, "hot_light");
    let (main_def, main_end) = function_lines(&source, "cpu_split_main");
    let mut heavy_leaf = 0;
    for stack in folded.of_thread("MainThread") {
        let leaf = stack.innermost().expect("a frame");
        let fixture_frames: Vec<_> = stack
            .frames
            .iter()
            .filter(|f| f.in_file("cpu_split.py"))
            .collect();
        assert!(
            fixture_frames
                .first()
                .is_some_and(|f| f.function == "<module>"),
            "outermost cpu_split.py frame should be <module>: {}",
            stack.raw
        );
        if leaf.is("hot_heavy", "cpu_split.py") {
            heavy_leaf += stack.count;
            let line = leaf.line.expect("a line number");
            assert!(
                line >= heavy_def && line <= heavy_end,
                "hot_heavy at line {line}, its body is {heavy_def}..={heavy_end}: {}",
                stack.raw
            );
            let caller = &stack.frames[stack.frames.len() - 2];
            assert!(
                caller.is("cpu_split_main", "cpu_split.py"),
                "hot_heavy's caller should be cpu_split_main: {}",
                stack.raw
            );
            let line = caller.line.expect("a line number");
            assert!(
                line > main_def && line <= main_end,
                "cpu_split_main at line {line}, its body is {main_def}..={main_end}: {}",
                stack.raw
            );
        }
        if leaf.is("hot_light", "cpu_split.py") {
            let line = leaf.line.expect("a line number");
            assert!(
                line >= light_def && line <= light_end,
                "hot_light at line {line}, its body is {light_def}..={light_end}: {}",
                stack.raw
            );
        }
    }
    assert!(
        heavy_leaf as f64 >= 0.5 * main,
        "hot_heavy should be the innermost frame of most samples:\n{excerpt}"
    );

    // summary.json agrees with the folded file.
    let summary = out.summary();
    assert_eq!(
        summary["pid"].as_u64(),
        Some(fixture.pid as u64),
        "{summary:#}"
    );
    assert_eq!(
        num(&summary["samples"], "samples") as u64,
        folded.total(),
        "summary samples vs sum of folded counts"
    );
    let version = summary["python_version"].as_str().expect("python_version");
    assert!(version.starts_with("3."), "python_version {version}");
    let command_line = summary["command_line"].to_string();
    assert!(
        command_line.contains("cpu_split.py"),
        "command_line {command_line}"
    );
    assert!(summary["started_at"].is_string(), "started_at: {summary:#}");
    let secs = num(&summary["duration_secs"], "duration_secs");
    assert!((2.5..=5.0).contains(&secs), "duration_secs {secs}");
    assert_eq!(num(&summary["rate_hz"], "rate_hz"), rate);
    let ticks = num(&summary["ticks"], "ticks");
    assert!(
        ticks >= main && ticks <= 1.2 * expected,
        "ticks {ticks} vs {main} samples"
    );
    for key in ["total", "torn_read", "thread_gone", "other"] {
        num(&summary["errors"][key], &format!("errors.{key}"));
    }
    num(&summary["dropped"], "dropped");
    num(&summary["late_ticks"], "late_ticks");
    num(&summary["max_lateness_ms"], "max_lateness_ms");
    num(&summary["idle_samples_skipped"], "idle_samples_skipped");
    assert_eq!(summary["target_exited"], serde_json::json!(false));
    assert!(summary["exit_status"].is_null(), "exit_status for attach");
    // null without GPU data; an object where a GPU (or NVML) is at hand.
    assert!(
        summary["gpu"].is_null() || summary["gpu"].is_object(),
        "gpu: {}",
        summary["gpu"]
    );
    assert!(summary["notices"].is_array() || summary["notices"].is_null());

    let threads = summary["threads"].as_array().expect("threads array");
    let main_thread = threads
        .iter()
        .find(|t| t["name"] == "MainThread")
        .unwrap_or_else(|| panic!("MainThread in summary threads: {threads:?}"));
    assert_eq!(
        main_thread["os_thread_id"].as_u64(),
        Some(fixture.pid as u64)
    );
    assert!(main_thread["python_thread_id"]
        .as_u64()
        .is_some_and(|id| id > 0));
    assert_eq!(
        num(&main_thread["samples"], "thread samples") as u64,
        folded.total()
    );

    let by_self = summary["top_functions"]["by_self"]
        .as_array()
        .expect("top_functions.by_self");
    let top = &by_self[0];
    assert_eq!(top["function"], "hot_heavy", "top by self: {by_self:?}");
    assert!(top["file"]
        .as_str()
        .is_some_and(|f| f.ends_with("cpu_split.py")));
    let share = num(&top["self_share"], "self_share");
    assert!(
        (0.55..=0.9).contains(&share),
        "hot_heavy self_share {share}"
    );
    num(&top["self_samples"], "self_samples");
    num(&top["total_samples"], "total_samples");
    num(&top["total_share"], "total_share");
    let by_total = summary["top_functions"]["by_total"]
        .as_array()
        .expect("top_functions.by_total");
    let main_fn = by_total
        .iter()
        .find(|f| f["function"] == "cpu_split_main")
        .unwrap_or_else(|| panic!("cpu_split_main by total: {by_total:?}"));
    assert!(num(&main_fn["total_share"], "total_share") > 0.9);

    // The printed summary names the top function and where the files are.
    assert!(run.stdout.contains("hot_heavy"), "{}", run.describe());
    assert!(run.stdout.contains(out.arg()), "{}", run.describe());

    assert_running_and_progressing(fixture.pid);
}

#[test]
fn attach_names_threads_and_skips_idle_main() {
    let _serial = serial();
    let fixture = Fixture::start("named_threads.py", &[]);
    let out = OutDir::new();
    let run = attach(fixture.pid, &out, &["--duration", "2"]);
    run.assert_success();
    let folded = out.folded();
    let excerpt = folded.excerpt();
    let threads = folded.threads();

    for (thread, function) in [("worker-1", "worker_spin"), ("loader-0", "load_items")] {
        let n = folded.thread_function_total(thread, function);
        assert!(n >= 5, "{thread} in {function}: {n} samples:\n{excerpt}");
        for stack in folded.of_thread(thread) {
            assert!(
                stack.has_function(function),
                "{thread} outside {function}: {}",
                stack.raw
            );
        }
    }
    // The main thread is blocked in join() the whole time: none of its
    // samples may be kept without --idle.
    assert!(
        !threads.contains_key("MainThread"),
        "idle MainThread (blocked in join) sampled without --idle: {} samples:\n{excerpt}",
        folded.thread_total("MainThread")
    );

    let summary = out.summary();
    assert!(
        num(&summary["idle_samples_skipped"], "idle_samples_skipped") > 0.0,
        "the idle main thread's samples should be counted as skipped: {summary:#}"
    );
    let listed = summary["threads"].as_array().expect("threads");
    for name in ["worker-1", "loader-0"] {
        let t = listed
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} in summary threads: {listed:?}"));
        assert_eq!(
            t["os_thread_id"].as_u64(),
            Some(fixture.native_id(name)),
            "os_thread_id of {name}"
        );
        let ident = fixture.ready_json()["threads"][name]["ident"].as_u64();
        assert_eq!(
            t["python_thread_id"].as_u64(),
            ident,
            "python_thread_id of {name}"
        );
        assert_eq!(
            num(&t["samples"], "samples") as u64,
            folded.thread_total(name),
            "samples of {name}"
        );
    }
    assert_running_and_progressing(fixture.pid);
}

#[test]
fn attach_idle_keeps_idle_main_thread() {
    let _serial = serial();
    let fixture = Fixture::start("named_threads.py", &[]);
    let out = OutDir::new();
    let run = attach(fixture.pid, &out, &["--duration", "2", "--idle"]);
    run.assert_success();
    let folded = out.folded();
    let excerpt = folded.excerpt();
    let main = folded.thread_function_total("MainThread", "named_threads_main");
    assert!(main > 0, "MainThread with --idle:\n{excerpt}");
    for thread in ["worker-1", "loader-0"] {
        assert!(folded.thread_total(thread) > 0, "{thread}:\n{excerpt}");
    }
    assert_running_and_progressing(fixture.pid);
}

#[test]
fn attach_default_output_dir_in_cwd() {
    let fixture = Fixture::start("cpu_split.py", &[]);
    let cwd = tempfile::tempdir().expect("temp dir");
    let pid = fixture.pid.to_string();
    let mut cmd = stackscope(&["attach", "--pid", &pid, "--duration", "1"]);
    cmd.current_dir(cwd.path());
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let prefix = format!("stackscope-{pid}-");
    let dirs: Vec<_> = fs::read_dir(cwd.path())
        .expect("read cwd")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs.len(), 1, "one output dir expected: {dirs:?}");
    let name = &dirs[0];
    let stamp = name
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("output dir {name} should start with {prefix}"));
    // YYYYmmdd-HHMMSS
    let ok = stamp.len() == 15
        && stamp.as_bytes()[8] == b'-'
        && stamp
            .chars()
            .enumerate()
            .all(|(i, c)| i == 8 || c.is_ascii_digit());
    assert!(ok, "timestamp part {stamp:?} should be YYYYmmdd-HHMMSS");
    for file in ["flamegraph.svg", "stacks.folded", "summary.json"] {
        assert!(cwd.path().join(name).join(file).is_file(), "{file} missing");
    }
    assert_not_stopped(fixture.pid);
}

fn attach_until_signal(signal: &str) {
    let fixture = Fixture::start("cpu_split.py", &[]);
    let out = OutDir::new();
    let pid = fixture.pid.to_string();
    let running = spawn_stackscope(stackscope(&["attach", "--pid", &pid, "-o", out.arg()]));
    std::thread::sleep(Duration::from_millis(1500));
    running.signal(signal);
    let run = running.finish(Duration::from_secs(15));
    run.assert_success();
    run.assert_no_panic();
    let folded = out.folded();
    assert!(
        folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "hot_heavy after SIG{signal}:\n{}",
        folded.excerpt()
    );
    let summary = out.summary();
    assert_eq!(summary["target_exited"], serde_json::json!(false));
    assert_running_and_progressing(fixture.pid);
}

#[test]
fn attach_stops_on_sigint_and_writes_outputs() {
    attach_until_signal("INT");
}

#[test]
fn attach_stops_on_sigterm_and_writes_outputs() {
    attach_until_signal("TERM");
}

#[test]
fn attach_nonblocking_samples_too() {
    let fixture = Fixture::start("cpu_split.py", &[]);
    let out = OutDir::new();
    let run = attach(fixture.pid, &out, &["--duration", "2", "--nonblocking"]);
    run.assert_success();
    let folded = out.folded();
    assert!(
        folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "{}",
        folded.excerpt()
    );
    assert_running_and_progressing(fixture.pid);
}
