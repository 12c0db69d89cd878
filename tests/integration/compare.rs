//! `compare`, end to end: jobs that know what changed record with the real binary under the
//! fake NVML, and `stackscope compare` must say what the jobs measured themselves.
//!
//! - `worker_scaling_job.py`: a loop fed by N worker processes, each W seconds a batch, a train
//!   step of B seconds (the GPU busy): min(N / W, 1 / B) steps a second, counted by the job
//!   (`--stats`). 2 workers against the workers the first recording's verdict asks for is
//!   `helped`, by the GPU's work per second as much as the job's steps per second grew.
//! - `two_parts_job.py`: one thread alternating `steady_part` (the GPU busy) and
//!   `costly_part` (idle), each timed by the clock; `--costly-factor` makes `costly_part`
//!   costlier, `--switch-after` only after a while; the job's own shares of its wall time
//!   in each are the truth for the functions' change.
//! - The same job twice, and at 100 Hz against 1000 Hz: no change, no function moved.
//! - The real H100 recordings in `tests/data/recordings/`.
//!
//! Every job's time is bounded by the clock (busy until a deadline), so the truth holds on a
//! loaded 2-core machine; the recordings a test needs are taken side by side, in threads, each
//! test under the serial lock.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
const COMPARE_TIMEOUT: Duration = Duration::from_secs(60);
/// How far the GPU's busy ratio may be from the ratio of the job's own steps a second.
const BUSY_RATIO_SHARE: f64 = 0.15;
/// How far a function's change may be from the job's own (share of the wall time, 0..1).
const FUNCTION_POINTS: f64 = 0.05;

/// The fake NVML script whose utilization follows `file`, read every 100 ms.
fn fake_script(file: &Path) -> String {
    format!(
        r#"{{"devices":[{{"name":"Fake H100","utilization":{{"file":"{}"}}}}],"sample_period_ms":100}}"#,
        file.display()
    )
}

/// A job to record: a script (a fixture, or a copy of one), its arguments, the rate.
struct Job {
    script: PathBuf,
    seconds: &'static str,
    args: Vec<String>,
    rate: Option<&'static str>,
}

impl Job {
    fn new(fixture: &str, seconds: &'static str, args: &[&str]) -> Job {
        Job {
            script: fixture_path(fixture),
            seconds,
            args: args.iter().map(|a| a.to_string()).collect(),
            rate: None,
        }
    }

    fn rate(mut self, hz: &'static str) -> Job {
        self.rate = Some(hz);
        self
    }

    fn script(mut self, script: PathBuf) -> Job {
        self.script = script;
        self
    }
}

/// One recording and the job's own account of itself (`--stats`).
struct Recorded {
    out: OutDir,
    stats: Value,
}

impl Recorded {
    fn dir(&self) -> &str {
        self.out.arg()
    }

    fn summary(&self) -> Value {
        self.out.summary()
    }

    /// `DIR@FROM-TO`.
    fn window(&self, from: u32, to: u32) -> String {
        format!("{}@{from}-{to}", self.dir())
    }
}

/// `record -o DIR --nvml-lib FAKE [--rate HZ] -- python3 SCRIPT READY --gpu-file G --seconds S
/// --stats PATH ARGS...`, which must succeed.
fn record(job: &Job) -> Recorded {
    let out = OutDir::new();
    let gpu_file = out.tmp.path().join("gpu-util");
    fs::write(&gpu_file, "3").expect("gpu file");
    let ready = out.tmp.path().join("ready");
    let stats = out.tmp.path().join("stats.json");
    let mut cmd = stackscope(&["record", "-o", out.arg(), "--nvml-lib"]);
    cmd.arg(fake_nvml());
    if let Some(hz) = job.rate {
        cmd.args(["--rate", hz]);
    }
    cmd.arg("--")
        .arg("python3")
        .arg(&job.script)
        .arg(&ready)
        .arg("--gpu-file")
        .arg(&gpu_file)
        .args(["--seconds", job.seconds, "--stats"])
        .arg(&stats)
        .args(&job.args)
        .env("STACKSCOPE_FAKE_NVML", fake_script(&gpu_file));
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let stats = fs::read_to_string(&stats)
        .unwrap_or_else(|e| panic!("the job wrote no --stats ({e})\n{}", run.describe()));
    let stats: Value = serde_json::from_str(&stats).expect("the job's stats are JSON");
    Recorded { out, stats }
}

/// Records `jobs` side by side (one thread each); in the order given.
fn record_together(jobs: Vec<Job>) -> Vec<Recorded> {
    thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|job| scope.spawn(move || record(job)))
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    })
}

/// A finished `compare` and what it wrote.
struct Compared {
    run: Run,
    /// Holds the output directory until the comparison is dropped.
    _out: OutDir,
    json: Value,
}

impl Compared {
    fn class(&self) -> &str {
        text(&self.json["change"]["verdict"]["class"])
    }

    /// Everything worth printing when an assertion about the comparison fails.
    fn context(&self) -> String {
        format!(
            "verdict {}\ngpu {}\nstep {}\nbottleneck {}\nfunctions {}\nmismatches {}\n{}",
            self.json["change"],
            self.json["gpu"],
            self.json["step"],
            self.json["bottleneck"],
            functions_line(&self.json),
            self.json["mismatches"],
            self.run.describe()
        )
    }

    /// The entries of `functions` for `function`.
    fn function(&self, function: &str) -> Vec<&Value> {
        self.json["functions"]
            .as_array()
            .map(|all| all.iter().filter(|f| f["function"] == function).collect())
            .unwrap_or_default()
    }

    fn moved_functions(&self) -> Vec<&Value> {
        self.json["functions"]
            .as_array()
            .map(|all| all.iter().filter(|f| f["moved"] == true).collect())
            .unwrap_or_default()
    }
}

/// `compare BEFORE AFTER -o OUT ARGS...`, with its exit status as it is.
fn compare_run(before: &str, after: &str, args: &[&str]) -> (Run, OutDir) {
    let out = OutDir::new();
    let mut all = vec!["compare", before, after, "-o", out.arg()];
    all.extend_from_slice(args);
    let run = run_stackscope(&all, COMPARE_TIMEOUT);
    run.assert_no_panic();
    (run, out)
}

/// `compare BEFORE AFTER -o OUT ARGS...`, which must exit `code` and write compare.json.
fn compare_exits(before: &str, after: &str, args: &[&str], code: i32) -> Compared {
    let (run, out) = compare_run(before, after, args);
    assert_eq!(
        run.code(),
        Some(code),
        "compare {before} {after} {args:?}\n{}",
        run.describe()
    );
    let path = out.out.join("compare.json");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}\n{}", path.display(), run.describe()));
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("compare.json is not JSON ({e}):\n{text}"));
    Compared {
        run,
        _out: out,
        json,
    }
}

fn compare(before: &str, after: &str, args: &[&str]) -> Compared {
    compare_exits(before, after, args, 0)
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// `function (file) before -> after (change ± noise) moved`, one per function, for messages.
fn functions_line(json: &Value) -> String {
    json["functions"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|f| {
                    format!(
                        "\n  {} ({}) {:.3} -> {:.3} ({:+.3} ± {:.3}){}",
                        text(&f["function"]),
                        text(&f["file"]),
                        f["before"].as_f64().unwrap_or(f64::NAN),
                        f["after"].as_f64().unwrap_or(f64::NAN),
                        f["change"].as_f64().unwrap_or(f64::NAN),
                        f["noise"].as_f64().unwrap_or(f64::NAN),
                        if f["moved"] == true { " moved" } else { "" }
                    )
                })
                .collect()
        })
        .unwrap_or_else(|| format!("{}", json["functions"]))
}

/// Every failed check of a test, said together at its end (so that one run tells the whole
/// story), with what the test measured.
struct Checks {
    failed: Vec<String>,
}

impl Checks {
    fn new() -> Checks {
        Checks { failed: Vec::new() }
    }

    fn that(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.failed.push(what());
        }
    }

    fn done(self, context: &str) {
        assert!(
            self.failed.is_empty(),
            "{} check(s) failed:\n- {}\n\n{context}",
            self.failed.len(),
            self.failed.join("\n- ")
        );
    }
}

// ------------------------------------------------------------ the worker-fed loop

#[test]
fn the_workers_the_verdict_asks_for_helped_as_the_job_measured() {
    let _serial = serial();
    let before = record(&Job::new(
        "worker_scaling_job.py",
        "12",
        &["--workers", "2"],
    ));
    let summary = before.summary();
    let fixed = &summary["gpu"]["if_fixed"];
    assert_eq!(
        text(&summary["gpu"]["verdict"]["class"]),
        "input_pipeline",
        "2 workers: {}",
        summary["gpu"]["verdict"]
    );
    let needed = fixed["workers_needed"]
        .as_u64()
        .unwrap_or_else(|| panic!("no workers_needed: {fixed}"));
    assert!((3..=8).contains(&needed), "{fixed}");
    let needed_arg = needed.to_string();
    let after = record(&Job::new(
        "worker_scaling_job.py",
        "12",
        &["--workers", &needed_arg],
    ));

    // The job's steps a second from its first step on, as a recording's figures leave its
    // start-up (before the GPU first kept busy) out.
    let steady = |r: &Recorded| num(&r.stats["steady_steps_per_sec"], "steady_steps_per_sec");
    let own_ratio = steady(&after) / steady(&before);
    let own = |r: &Recorded| num(&r.stats["steps_per_sec"], "steps_per_sec");
    let c = compare(before.dir(), after.dir(), &[]);
    let busy_ratio = c.json["gpu"]["busy_ratio"].as_f64();
    let busy = &c.json["gpu"]["busy_share"];
    println!(
        "helped: workers 2 -> {needed}; job's steps/s {:.3} -> {:.3} (x{:.3}), from the \
         first step on {:.3} -> {:.3} (x{own_ratio:.3}); job's GPU busy {:.3} -> {:.3}, from \
         the first step on {:.3} -> {:.3}; stackscope busy_share {busy}, busy_ratio \
         {busy_ratio:?}, start-up {} and {}; verdict {}",
        own(&before),
        own(&after),
        own(&after) / own(&before),
        steady(&before),
        steady(&after),
        num(&before.stats["gpu_busy_share"], "busy share"),
        num(&after.stats["gpu_busy_share"], "busy share"),
        num(&before.stats["steady_gpu_busy_share"], "busy share"),
        num(&after.stats["steady_gpu_busy_share"], "busy share"),
        summary["gpu"]["startup_secs"],
        after.summary()["gpu"]["startup_secs"],
        c.json["change"]["verdict"]
    );
    let mut checks = Checks::new();
    checks.that(c.class() == "helped", || {
        format!("class {:?}, not helped", c.class())
    });
    checks.that(
        busy["moved"] == true && num(&busy["change"], "change") > 0.0,
        || format!("busy_share did not rise: {busy}"),
    );
    checks.that(
        busy_ratio.is_some_and(|r| (r - own_ratio).abs() <= BUSY_RATIO_SHARE * own_ratio),
        || format!("busy_ratio {busy_ratio:?} against the job's own x{own_ratio:.3}"),
    );
    checks.that(c.json["change"]["worse"] == false, || {
        format!("change.worse {}", c.json["change"]["worse"])
    });
    let sides = (
        c.json["before"]["workers"].as_u64(),
        c.json["after"]["workers"].as_u64(),
    );
    checks.that(sides == (Some(2), Some(needed)), || {
        format!("workers before/after {sides:?}, not (2, {needed})")
    });

    // --fail-if-worse: the helped order exits 0; the other order is worse, exits 3, and still
    // writes its comparison.
    let helped = compare_exits(before.dir(), after.dir(), &["--fail-if-worse"], 0);
    checks.that(helped.class() == "helped", || {
        format!("--fail-if-worse, helped order: class {:?}", helped.class())
    });
    let (run, out) = compare_run(after.dir(), before.dir(), &["--fail-if-worse"]);
    let reversed = fs::read_to_string(out.out.join("compare.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .unwrap_or(Value::Null);
    println!(
        "fail-if-worse: helped order exit {:?}; reversed exit {:?}, verdict {}",
        helped.run.code(),
        run.code(),
        reversed["change"]
    );
    checks.that(run.code() == Some(3), || {
        format!(
            "reversed order with --fail-if-worse exited {:?}, not 3\n{}",
            run.code(),
            run.describe()
        )
    });
    checks.that(
        reversed["change"]["worse"] == true && reversed["change"]["verdict"]["class"] == "worse",
        || format!("reversed order: change {}", reversed["change"]),
    );
    checks.done(&c.context());
}

#[test]
fn the_same_job_twice_is_no_change() {
    let _serial = serial();
    let job = || Job::new("worker_scaling_job.py", "12", &["--workers", "2"]);
    let runs = record_together(vec![job(), job()]);
    let c = compare(runs[0].dir(), runs[1].dir(), &[]);
    println!(
        "same job twice: job's steps/s {:.3} and {:.3}; verdict {}; gpu {}; moved functions {}",
        num(&runs[0].stats["steps_per_sec"], "steps/s"),
        num(&runs[1].stats["steps_per_sec"], "steps/s"),
        c.json["change"]["verdict"],
        c.json["gpu"],
        c.moved_functions().len()
    );
    let mut checks = Checks::new();
    checks.that(c.class() == "no_change", || {
        format!("class {:?}, not no_change", c.class())
    });
    checks.that(c.moved_functions().is_empty(), || {
        "functions moved".to_owned()
    });
    checks.that(c.json["change"]["worse"] == false, || {
        "change.worse".to_owned()
    });
    checks.done(&c.context());
}

#[test]
fn a_tenfold_rate_is_no_change() {
    let _serial = serial();
    let runs = record_together(vec![
        Job::new("two_parts_job.py", "10", &[]),
        Job::new("two_parts_job.py", "10", &[]).rate("1000"),
    ]);
    let c = compare(runs[0].dir(), runs[1].dir(), &[]);
    let rates = (
        c.json["before"]["rate_hz"].as_f64(),
        c.json["after"]["rate_hz"].as_f64(),
    );
    println!(
        "100 Hz vs 1000 Hz: samples {} and {}; job's costly share {:.3} and {:.3}; verdict {}; \
         functions {}",
        c.json["before"]["samples"],
        c.json["after"]["samples"],
        num(&runs[0].stats["costly_share"], "costly share"),
        num(&runs[1].stats["costly_share"], "costly share"),
        c.json["change"]["verdict"],
        functions_line(&c.json)
    );
    let mut checks = Checks::new();
    checks.that(rates == (Some(100.0), Some(1000.0)), || {
        format!("rates {rates:?}, not 100 and 1000")
    });
    checks.that(c.class() == "no_change", || {
        format!("class {:?}, not no_change", c.class())
    });
    checks.that(c.moved_functions().is_empty(), || {
        "functions moved".to_owned()
    });
    checks.done(&c.context());
}

// ------------------------------------------------------------ a function made costlier

/// A copy of two_parts_job.py in `dir` (with the helpers it imports) with lines added at its
/// top, so that every line of it moves; the same file name, so the same functions.
fn moved_copy(dir: &Path) -> PathBuf {
    let source = fixture_source("two_parts_job.py");
    let moved = format!(
        "# A copy of fixtures/two_parts_job.py, every line moved down.\n\n#\n\n\n#\n\n{source}"
    );
    let copy = dir.join("two_parts_job.py");
    fs::write(&copy, &moved).expect("the moved copy");
    for helper in ["_gpu_job.py", "_children.py", "_ready.py"] {
        fs::copy(fixture_path(helper), dir.join(helper)).expect("copy a helper");
    }
    assert_ne!(
        marker_line(&source, "costly"),
        marker_line(&moved, "costly"),
        "the copy's lines should move"
    );
    copy
}

/// The job's own change of `part`'s share of its wall time.
fn own_change(before: &Value, after: &Value, part: &str) -> f64 {
    let key = format!("{part}_share");
    num(&after[&key], &key) - num(&before[&key], &key)
}

#[test]
fn a_function_made_twice_as_costly_moved_as_the_job_measured_wherever_its_lines_are() {
    let _serial = serial();
    let copies = tempfile::tempdir().expect("temp dir");
    let copy = moved_copy(copies.path());
    let runs = record_together(vec![
        Job::new("two_parts_job.py", "15", &[]),
        Job::new("two_parts_job.py", "15", &["--costly-factor", "2"]).script(copy),
    ]);
    let (before, after) = (&runs[0], &runs[1]);
    let c = compare(before.dir(), after.dir(), &[]);
    let own_costly = own_change(&before.stats, &after.stats, "costly");
    let own_steady = own_change(&before.stats, &after.stats, "steady");
    println!(
        "costly x2, lines moved: job's costly share {:.3} -> {:.3} ({own_costly:+.3}), steady \
         {own_steady:+.3}; verdict {}; functions {}",
        num(&before.stats["costly_share"], "costly share"),
        num(&after.stats["costly_share"], "costly share"),
        c.json["change"]["verdict"],
        functions_line(&c.json)
    );
    let mut checks = Checks::new();
    for (function, own, must_move) in [
        ("costly_part", own_costly, true),
        ("steady_part", own_steady, false),
    ] {
        let entries = c.function(function);
        checks.that(entries.len() == 1, || {
            format!(
                "{} entries for {function}, not one (its lines moved, its name did not)",
                entries.len()
            )
        });
        let Some(f) = entries.first() else { continue };
        checks.that(f["file"] == "two_parts_job.py", || {
            format!("{function}'s file {}", f["file"])
        });
        let (b, a) = (
            f["before"].as_f64().unwrap_or(0.0),
            f["after"].as_f64().unwrap_or(0.0),
        );
        checks.that(b > 0.0 && a > 0.0, || {
            format!("{function} is not on both sides: {f}")
        });
        let change = f["change"].as_f64().unwrap_or(f64::NAN);
        checks.that((change - own).abs() <= FUNCTION_POINTS, || {
            format!("{function} changed {change:+.3}, the job measured {own:+.3}")
        });
        if must_move {
            checks.that(f["moved"] == true, || format!("{function} not moved: {f}"));
        }
    }

    // Matched by line too, no frame of the moved copy is the same frame: each function's
    // entries are on one side only.
    let lines = compare(before.dir(), after.dir(), &["--lines"]);
    println!("--lines: functions {}", functions_line(&lines.json));
    for function in ["costly_part", "steady_part"] {
        let entries = lines.function(function);
        let side = |e: &&Value, key: &str| e[key].as_f64().unwrap_or(0.0) > 0.0;
        checks.that(
            entries
                .iter()
                .all(|e| !(side(e, "before") && side(e, "after"))),
            || format!("--lines: an entry of {function} on both sides: {entries:?}"),
        );
        checks.that(
            entries.iter().any(|e| side(e, "before")) && entries.iter().any(|e| side(e, "after")),
            || format!("--lines: {function} should be on each side, by other lines: {entries:?}"),
        );
    }
    checks.done(&format!("{}\n--lines: {}", c.context(), lines.context()));
}

#[test]
fn the_slower_second_half_of_one_recording_is_named() {
    let _serial = serial();
    let run = record(&Job::new(
        "two_parts_job.py",
        "16",
        &[
            "--switch-after",
            "8",
            "--costly-factor",
            "3",
            "--steady",
            "0.2",
            "--costly",
            "0.2",
        ],
    ));
    let c = compare(&run.window(0, 8), &run.window(8, 16), &[]);
    let (first, second) = (&run.stats["before_switch"], &run.stats["after_switch"]);
    let own = own_change(first, second, "costly");
    println!(
        "@0-8 vs @8-16: job's costly share {:.3} -> {:.3} ({own:+.3}), switched at {:.2} s, \
         ended at {:.2} s; sides {}..{} and {}..{}; verdict {}; functions {}",
        num(&first["costly_share"], "costly share"),
        num(&second["costly_share"], "costly share"),
        num(&run.stats["switched_at"], "switched_at"),
        num(&run.stats["ended_at"], "ended_at"),
        c.json["before"]["from_secs"],
        c.json["before"]["to_secs"],
        c.json["after"]["from_secs"],
        c.json["after"]["to_secs"],
        c.json["change"]["verdict"],
        functions_line(&c.json)
    );
    let mut checks = Checks::new();
    let costly = c.function("costly_part");
    checks.that(
        costly.len() == 1
            && costly[0]["moved"] == true
            && num(&costly[0]["change"], "change") > 0.0,
        || format!("costly_part did not move up: {costly:?}"),
    );
    if let Some(f) = costly.first() {
        let change = f["change"].as_f64().unwrap_or(f64::NAN);
        checks.that((change - own).abs() <= FUNCTION_POINTS, || {
            format!("costly_part changed {change:+.3}, the job measured {own:+.3}")
        });
    }
    let labels = (
        text(&c.json["before"]["label"]),
        text(&c.json["after"]["label"]),
    );
    checks.that(
        labels.0.ends_with("@0-8") && labels.1.ends_with("@8-16"),
        || format!("labels {labels:?}"),
    );
    // The GPU works less a second (busy while steady_part runs: 1/2, then 1/4 of the time),
    // which 8 s of the fake driver's readings (10 a second) tell only about from noise: worse
    // when the busy share moved, never helped.
    let busy = &c.json["gpu"]["busy_share"];
    let expected = if busy["moved"] == true {
        "worse"
    } else {
        "no_change"
    };
    checks.that(c.class() == expected, || {
        format!("class {:?}, not {expected} (busy_share {busy})", c.class())
    });
    checks.done(&c.context());
}

// ------------------------------------------------------------ bad input

/// An error: exit `code`, one line on stderr starting "stackscope:", and nothing written,
/// neither the `-o` directory nor the default one in the current directory.
fn assert_refused(before: &str, after: &str, code: i32, what: &str) {
    let cwd = tempfile::tempdir().expect("temp dir");
    let out = cwd.path().join("asked-for");
    let out_arg = out.display().to_string();
    for args in [vec![], vec!["-o", out_arg.as_str()]] {
        let mut all = vec!["compare", before, after];
        all.extend_from_slice(&args);
        let mut cmd = stackscope(&all);
        cmd.current_dir(cwd.path());
        let run = run_with_timeout(cmd, COMPARE_TIMEOUT);
        println!(
            "{what} {args:?}: exit {:?}, stderr {:?}",
            run.code(),
            run.stderr.trim()
        );
        run.assert_no_panic();
        assert_eq!(run.code(), Some(code), "{what}\n{}", run.describe());
        let lines: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("stackscope: "),
            "{what}: one line starting 'stackscope: '\n{}",
            run.describe()
        );
        let left: Vec<String> = fs::read_dir(cwd.path())
            .expect("read the cwd")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            left.is_empty(),
            "{what}: wrote {left:?}\n{}",
            run.describe()
        );
    }
}

/// The JSON `dump --json` prints of a live fixture, in `dir`.
fn dump_file(dir: &Path) -> PathBuf {
    let fixture = Fixture::start("quiet_main.py", &[]);
    let run = run_stackscope(
        &["dump", "--json", "--pid", &fixture.pid.to_string()],
        COMPARE_TIMEOUT,
    );
    run.assert_success();
    let _: Value = serde_json::from_str(&run.stdout).expect("dump --json is JSON");
    let path = dir.join("dump.json");
    fs::write(&path, &run.stdout).expect("write the dump");
    path
}

#[test]
fn bad_input_is_one_line_and_writes_nothing() {
    // Light, but kept off the timing-sensitive fixtures' machine time all the same.
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let real = copy_recording("dataloader-2-workers-idle", tmp.path());
    let real = real.display().to_string();
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).expect("an empty dir");
    let empty = empty.display().to_string();
    let dump = dump_file(tmp.path()).display().to_string();

    assert_refused(&empty, &real, 1, "a directory without samples.log");
    assert_refused(&real, &empty, 1, "a directory without samples.log (after)");
    assert_refused(&dump, &real, 2, "a dump's JSON file");
    assert_refused(&real, &real, 2, "the same recording twice");
    let outside = format!("{real}@500-600");
    assert_refused(&real, &outside, 1, "a window outside the recording");
    let malformed = format!("{real}@ten-20");
    assert_refused(&real, &malformed, 2, "a malformed @FROM-TO");
    // The whole recording, named as a window of itself.
    let whole = format!("{real}@0-");
    assert_refused(
        &real,
        &whole,
        2,
        "the same recording and window twice (DIR, DIR@0-)",
    );
}

// ------------------------------------------------------------ the real recordings

#[test]
fn twelve_workers_helped_the_real_job() {
    // Light, but kept off the timing-sensitive fixtures' machine time all the same.
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let two = copy_recording("dataloader-2-workers-idle", tmp.path());
    let twelve = copy_recording("dataloader-12-workers-idle", tmp.path());
    let c = compare(
        &two.display().to_string(),
        &twelve.display().to_string(),
        &[],
    );
    let busy = &c.json["gpu"]["busy_share"];
    println!(
        "real 2 vs 12 workers: verdict {}; busy_share {busy}; busy_ratio {}; bottleneck {}",
        c.json["change"]["verdict"], c.json["gpu"]["busy_ratio"], c.json["bottleneck"]
    );
    let mut checks = Checks::new();
    checks.that(c.class() == "helped", || {
        format!("class {:?}, not helped", c.class())
    });
    checks.that(
        busy["moved"] == true && num(&busy["change"], "change") > 0.0,
        || format!("busy_share did not rise: {busy}"),
    );
    checks.that(c.json["change"]["worse"] == false, || {
        "change.worse".to_owned()
    });
    checks.done(&c.context());
}

#[test]
fn two_windows_of_one_real_recording_are_not_a_change() {
    // Light, but kept off the timing-sensitive fixtures' machine time all the same.
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let two = copy_recording("dataloader-2-workers-idle", tmp.path());
    let dir = two.display().to_string();
    let c = compare(&format!("{dir}@0-10"), &format!("{dir}@10-20"), &[]);
    println!(
        "real 2 workers @0-10 vs @10-20: verdict {}; gpu {}; moved functions {}",
        c.json["change"]["verdict"],
        c.json["gpu"],
        functions_line(&serde_json::json!({"functions": c.moved_functions()}))
    );
    let mut checks = Checks::new();
    checks.that(c.class() == "no_change", || {
        format!("class {:?}, not no_change", c.class())
    });
    checks.that(c.json["change"]["worse"] == false, || {
        "change.worse".to_owned()
    });
    checks.done(&c.context());
}
