//! GIL shapes, generated from a few parameters: a training loop (`fixtures/shape_job.py`)
//! whose own Python before each step competes for the GIL with helper threads, recorded under
//! the fake NVML on Python 3.11 and 3.13 (pyenv's; a missing version is skipped with one
//! line): the reference shape on both, each other shape on one of them in turn. The
//! parameters: where the loop runs (the main thread, or a thread started before or after its
//! helpers, so that the interpreter lists it after or before them), how many helpers, and what
//! they do (spin in pure Python, holding the GIL whenever they run; or hash in C code that lets
//! go of the GIL).
//!
//! Each shape states its truth against the job's own measure of its step (`--stats`):
//!
//! - spinning helpers: `gpu.step.gil_wait` within 12 points of the job's own GIL wait (its
//!   own Python's; up to the GIL waits of its write that tells the GPU idle, which it counts
//!   as GPU wait, on top), the
//!   holder (`gpu.step_gil_holder`) a helper and its function (`spin`), the class
//!   `gil_contention` (or the loop's own Python named as the bottleneck), and never `gpu_bound`
//!   while the GPU idles 40% of the time or more;
//! - a helper in C code: never called the holder, no `gil_contention`, a small GIL wait.
//!
//! Every shape measures shares, so each holds the serial lock; each run is 8 s.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::shape_jobs::*;
use common::*;
use serde_json::Value;
use stackscope_testkit::python::interpreters_of;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
/// The Python versions the reference shape runs on (those installed); the other shapes take one
/// each, in turn, so that both versions see every kind of shape and the file stays short.
const VERSIONS: &[&str] = &["3.11", "3.13"];
const ON_311: &[&str] = &["3.11"];
const ON_313: &[&str] = &["3.13"];
/// `gpu.step.gil_wait` may be this far from the job's own measure (a share of its wall time).
const GIL_POINTS: f64 = 0.12;
/// The GPU idles at least this share of the time: the GPU is not the bottleneck.
const GPU_IDLES: f64 = 0.40;
/// A GIL wait at most this large is small (a helper that lets go of the GIL).
const SMALL_GIL_WAIT: f64 = 0.08;

/// What the helper threads do.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Helper {
    /// Spin in pure Python (`--helper spin`): they hold the GIL whenever they run.
    Spin,
    /// Hash 64 MiB in C over and over (`--helper cspin`): they let go of the GIL.
    CSpin,
}

/// One GIL shape: its parameters.
#[derive(Clone, Copy, Debug)]
struct GilShape {
    /// `--loop-thread`: main, before (the loop's thread started before the helpers) or after.
    loop_thread: &'static str,
    helper: Helper,
    helpers: u32,
    /// The loop's own Python before each step, its launch work and its wait on the GPU.
    python_ms: u32,
    launch_ms: u32,
    step_ms: u32,
}

/// The reference shape: before each step the loop runs its own Python (here 45 ms of wall time,
/// about half of it waiting for the GIL), tells the (fake) GPU busy (a file write), launches for
/// 5 ms, then waits about 45 ms on the GPU and tells it idle (a file write whose GIL waits the
/// job counts as its GPU wait, as a job timing its own GPU call does). A metrics thread spins
/// in pure Python. The GPU is busy about half the time, clear of the 60% past which a loop
/// that mostly waits on its GPU may read as GPU-bound by the readings' error alone.
const REFERENCE: GilShape = GilShape {
    loop_thread: "main",
    helper: Helper::Spin,
    helpers: 1,
    python_ms: 45,
    launch_ms: 5,
    step_ms: 45,
};

/// The fake GPU's readings 20 ms apart: a mean over 8 s of them is off by about 2 points
/// ([`fake_nvml_following_every`]).
const READING_MS: u32 = 20;

impl GilShape {
    fn args(&self) -> Vec<String> {
        let helper = match self.helper {
            Helper::Spin => "spin",
            Helper::CSpin => "cspin",
        };
        [
            "--feed",
            "ready",
            "--python-ms",
            &self.python_ms.to_string(),
            "--launch-ms",
            &self.launch_ms.to_string(),
            "--step-ms",
            &self.step_ms.to_string(),
            "--helper",
            helper,
            "--helpers",
            &self.helpers.to_string(),
            "--loop-thread",
            self.loop_thread,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// The loop's thread's name.
    fn loop_name(&self) -> &'static str {
        if self.loop_thread == "main" {
            "MainThread"
        } else {
            "loop"
        }
    }
}

/// Records the shape under `python`; the summary and the job's own `--stats`.
fn record(python: &Path, shape: &GilShape) -> (Value, Value) {
    let out = OutDir::new();
    let gpu_file = out.tmp.path().join("gpu-util");
    std::fs::write(&gpu_file, "3").expect("gpu file");
    let ready = out.tmp.path().join("ready");
    let stats = out.tmp.path().join("stats.json");
    let mut cmd = stackscope(&["record", "-o", out.arg(), "--nvml-lib"]);
    cmd.arg(fake_library("fake-nvml"))
        .arg("--")
        .arg(python)
        .arg(fixture_path("shape_job.py"))
        .arg(&ready)
        .arg("--gpu-file")
        .arg(&gpu_file)
        .args(["--seconds", "8", "--stats"])
        .arg(&stats)
        .args(shape.args())
        .env(
            "STACKSCOPE_FAKE_NVML",
            fake_nvml_following_every(&gpu_file, READING_MS),
        );
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let summary = out.summary();
    assert!(
        summary["gpu"].is_object(),
        "no GPU section\n{}",
        run.describe()
    );
    let stats = read_stats(&stats);
    (summary, stats)
}

/// The GIL account (`summary.gil.threads`) of the threads of `pid` whose name starts with
/// `prefix`.
fn gil_threads<'a>(summary: &'a Value, pid: Option<u64>, prefix: &str) -> Vec<&'a Value> {
    summary["gil"]["threads"]
        .as_array()
        .map(|threads| {
            threads
                .iter()
                .filter(|t| t["pid"].as_u64() == pid && text(&t["thread"]).starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks `shape` on every installed version of `versions`; fails with what each version got
/// wrong, once all have run.
fn check_on_versions(name: &str, shape: GilShape, versions: &[&str]) {
    let _serial = serial();
    let pythons = interpreters_of(versions);
    if pythons.is_empty() {
        eprintln!("skipped: {name}: none of Python {versions:?} is installed");
        return;
    }
    let mut failed = Vec::new();
    for (minor, python) in &pythons {
        let (summary, stats) = record(python, &shape);
        let name = format!("{name} on {minor}");
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check(&name, &shape, &summary, &stats)
        }));
        if let Err(why) = checked {
            let why = why
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| why.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("{name}: {why}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// Checks one recording of `shape` against its truth.
fn check(name: &str, shape: &GilShape, summary: &Value, stats: &Value) {
    let gpu = &summary["gpu"];
    let step = &gpu["step"];
    let verdict = &gpu["verdict"];
    let holder = &gpu["step_gil_holder"];
    let class = text(&verdict["class"]);
    let own_gil = own_share(stats, "gil_wait");
    let own_gpu_busy = own_share(stats, "gpu_busy");
    let own = format!(
        "own: gpu_wait {:.2}, gil_wait {own_gil:.2}, gpu busy {own_gpu_busy:.2} ({} steps)",
        own_share(stats, "gpu_wait"),
        stats["steps"]
    );
    let context = format!(
        "{name}: {shape:?}\n{own}\nstep {step}\nstep_gil_holder {holder}\nverdict {verdict}\n\
         utilization {}\ngil {}\nreader {}",
        gpu["devices"], summary["gil"], summary["reader"]
    );
    eprintln!(
        "{name}: step.gil_wait {:.2} ({own}), mean utilization {:.1}, class {class}, holder {} {}",
        step["gil_wait"].as_f64().unwrap_or(f64::NAN),
        gpu["devices"][0]["mean_utilization"]
            .as_f64()
            .unwrap_or(f64::NAN),
        text(&holder["thread"]),
        text(&holder["frame"])
    );

    // The trainer is the loop's thread, never a helper.
    let trainers: Vec<&str> = summary["roles"]
        .as_array()
        .map(|roles| {
            roles
                .iter()
                .filter(|r| text(&r["role"]) == "trainer")
                .map(|r| text(&r["label"]))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        trainers,
        [format!("trainer ({})", shape.loop_name())],
        "{context}"
    );

    // The job counts the GIL waits of the write that tells its GPU idle in its GPU wait; they
    // are GIL waits all the same (long behind three helpers), so the truth lies between the
    // job's own `gil_wait` and that plus them.
    let got = num(&step["gil_wait"], "gpu.step.gil_wait");
    let in_writes = own_share(stats, "gil_wait_in_writes");
    assert!(
        got >= own_gil - GIL_POINTS && got <= own_gil + in_writes + GIL_POINTS,
        "gil_wait {got:.2} against the job's own {own_gil:.2} (and {in_writes:.2} in its \
         writes)\n{context}"
    );
    // A verdict that the GPU is the bottleneck needs a GPU busy most of the time.
    if own_gpu_busy <= 1.0 - GPU_IDLES {
        assert_ne!(class, "gpu_bound", "{context}");
        assert!(
            !text(&verdict["text"]).contains("the GPU is the bottleneck"),
            "{context}"
        );
    } else {
        eprintln!("{name}: the GPU was busy {own_gpu_busy:.2} of the time: gpu_bound not checked");
    }

    let pid = summary["pid"].as_u64();
    let loop_gil = gil_threads(summary, pid, shape.loop_name());
    assert_eq!(loop_gil.len(), 1, "the loop in gil.threads\n{context}");
    let helpers = gil_threads(summary, pid, "metrics");
    assert_eq!(
        helpers.len(),
        shape.helpers as usize,
        "the helpers in gil.threads\n{context}"
    );

    match shape.helper {
        Helper::Spin => {
            assert!(
                text(&holder["thread"]).starts_with("metrics")
                    && text(&holder["frame"]).starts_with("spin (shape_job.py:"),
                "the holder should be a metrics thread in spin\n{context}"
            );
            let words = text(&verdict["text"]);
            let own_python_named = ["bookkeeping (shape_job.py:", "spin (shape_job.py:"]
                .iter()
                .any(|f| words.contains(f));
            assert!(
                class == "gil_contention" || (class != "gpu_bound" && own_python_named),
                "neither gil_contention nor the loop's own Python named\n{context}"
            );
            let waits = num(&loop_gil[0]["waits"], "the loop's waits");
            assert!(waits > 0.05, "the loop's GIL waits {waits:.2}\n{context}");
            let held: f64 = helpers
                .iter()
                .map(|t| num(&t["holds"], "a helper's holds"))
                .sum();
            assert!(held > 0.3, "the helpers held the GIL {held:.2}\n{context}");
        }
        Helper::CSpin => {
            assert!(
                !text(&holder["thread"]).starts_with("metrics"),
                "a helper that lets go of the GIL called its holder\n{context}"
            );
            assert_ne!(class, "gil_contention", "{context}");
            assert!(
                got <= SMALL_GIL_WAIT,
                "gil_wait {got:.2} with a helper in C code\n{context}"
            );
            for t in &helpers {
                let without = num(&t["runs_without"], "runs_without");
                let holds = num(&t["holds"], "holds");
                assert!(
                    without > holds && without > 0.3,
                    "the C helper ran without the GIL {without:.2}, held it {holds:.2}\n{context}"
                );
            }
        }
    }
}

/// One test per shape, on the versions given.
macro_rules! gil_shapes {
    ($($name:ident: $shape:expr, $versions:expr;)*) => {$(
        #[test]
        fn $name() {
            check_on_versions(stringify!($name), $shape, $versions);
        }
    )*};
}

gil_shapes! {
    a_loop_and_its_spinning_metrics_thread: REFERENCE, VERSIONS;
    a_loop_thread_started_before_its_spinning_helper:
        GilShape { loop_thread: "before", ..REFERENCE }, ON_311;
    a_loop_thread_started_after_its_spinning_helper:
        GilShape { loop_thread: "after", ..REFERENCE }, ON_313;
    three_spinning_helpers_started_before_the_loop_thread: GilShape {
        loop_thread: "after",
        helpers: 3,
        ..REFERENCE
    }, ON_311;
    a_helper_in_c_code_that_lets_go_of_the_gil:
        GilShape { helper: Helper::CSpin, ..REFERENCE }, ON_313;
}
