//! What the tests of `fixtures/shape_job.py` share: the fake NVML that follows the job's own
//! GPU file, the job's measure of its own step (`--stats`), and the shapes more than one test
//! records.

use std::path::Path;

use serde_json::Value;

use super::num;

/// A loop whose own Python (200 ms a step) competes for the GIL with a metrics thread spinning
/// in pure Python, its GPU step 20 ms: the metrics thread holds the GIL, the loop waits for it.
pub const GIL_BOUND: &[&str] = &[
    "--feed",
    "ready",
    "--python-ms",
    "200",
    "--step-ms",
    "20",
    "--helper",
    "spin",
];

/// A loop fed by 2 forked workers (reads of 4 x 80 ms and a 60 ms decode a batch) before a
/// 100 ms GPU step: it waits for its batches about 40% of its time.
pub const WORKER_FED: &[&str] = &[
    "--feed",
    "workers",
    "--workers",
    "2",
    "--reads",
    "4",
    "--read-ms",
    "80",
    "--decode-ms",
    "60",
    "--step-ms",
    "100",
];

/// The fake NVML script whose utilization follows `file` (the job writes its GPU's state
/// there), read every 100 ms.
pub fn fake_nvml_following(file: &Path) -> String {
    fake_nvml_following_every(file, 100)
}

/// [`fake_nvml_following`], read every `period_ms`. Each reading is the GPU's state at one
/// instant, so a mean over `n` readings of a GPU busy a share `p` of the time is off by
/// about `94 * sqrt(p * (1 - p) / n)` points: 5 points over 8 s of readings 100 ms apart.
pub fn fake_nvml_following_every(file: &Path, period_ms: u32) -> String {
    format!(
        r#"{{"devices":[{{"name":"Fake H100","utilization":{{"file":"{}"}}}}],"sample_period_ms":{period_ms}}}"#,
        file.display()
    )
}

/// A JSON string's text, "" for anything else.
pub fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The job's own measure of its step, as it wrote it to `--stats`.
pub fn read_stats(path: &Path) -> Value {
    let stats = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("the job's stats: {e}"));
    serde_json::from_str(&stats).expect("stats JSON")
}

/// The job's own share of its wall time in `part` (0 when it spent none there).
pub fn own_share(stats: &Value, part: &str) -> f64 {
    stats[part].as_f64().unwrap_or(0.0) / num(&stats["secs"], "secs")
}

/// Worker pipelines that keep up with the loop's step without its wait (`wait_part`), from the
/// job's own times: each of `now` pipelines makes a batch per `now` steps of `T`; the step
/// without its wait is `T - wait`. A loop loading inline (`now` 0) needs `wait / (T - wait)`.
pub fn own_workers_needed(stats: &Value, now: f64, wait_part: &str) -> f64 {
    let steps = num(&stats["steps"], "steps");
    let step = num(&stats["secs"], "secs") / steps;
    let wait = stats[wait_part].as_f64().unwrap_or(0.0) / steps;
    if now == 0.0 {
        (wait / (step - wait)).max(1.0)
    } else {
        now * step / (step - wait)
    }
}
