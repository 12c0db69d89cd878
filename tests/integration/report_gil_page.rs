//! The GIL over time on report.html, in headless Chromium: a training loop whose Python
//! between steps competes for the GIL with a metrics thread spinning in pure Python
//! (`fixtures/shape_job.py --helper spin`), recorded under the fake NVML. Each thread's lane
//! shows when it held the GIL and when it waited for it (SVG rects `gil-held`, `gil-waited`,
//! `gil-without` with the lane's pid and thread id), beside a legend, and the GIL table lists
//! both threads. Without Chromium the browser checks are skipped with one printed line.

use crate::common;

use common::browser::*;
use common::shape_jobs::*;
use common::*;
use serde_json::Value;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
const SECONDS: &str = "6";

/// Records the loop and its metrics thread as `shapes.rs` records its shapes.
fn record(out: &OutDir) {
    let gpu_file = out.tmp.path().join("gpu-util");
    std::fs::write(&gpu_file, "3").expect("gpu file");
    let ready = out.tmp.path().join("ready");
    let stats = out.tmp.path().join("stats.json");
    let mut cmd = stackscope(&["record", "--subprocesses", "-o", out.arg(), "--nvml-lib"]);
    cmd.arg(fake_library("fake-nvml"))
        .arg("--")
        .arg("python3")
        .arg(fixture_path("shape_job.py"))
        .arg(&ready)
        .arg("--gpu-file")
        .arg(&gpu_file)
        .args(["--seconds", SECONDS, "--stats"])
        .arg(&stats)
        .args(GIL_BOUND)
        .env("STACKSCOPE_FAKE_NVML", fake_nvml_following(&gpu_file));
    run_with_timeout(cmd, RUN_TIMEOUT).assert_success();
}

/// One lane of the page's data: (pid, thread id).
fn lane_of(data: &Value, name: &str) -> (u64, u64) {
    let lanes = data["lanes"].as_array().expect("lanes");
    let lane = lanes
        .iter()
        .find(|l| l["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {name} lane in {lanes:?}"));
    (
        num(&lane["pid"], "pid") as u64,
        num(&lane["thread_id"], "thread_id") as u64,
    )
}

/// A drawn GIL span: its class, lane and time.
#[derive(Debug)]
struct Span {
    class: String,
    pid: u64,
    thread_id: u64,
    secs: f64,
}

/// The value of attribute `name` in the tag `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let open = format!(" {name}=\"");
    let at = tag.find(&open)? + open.len();
    let end = tag[at..].find('"')?;
    Some(&tag[at..at + end])
}

/// Every GIL span the page drew: the `<rect class="gil-...">` elements in its DOM.
fn gil_spans(dom: &str) -> Vec<Span> {
    dom.match_indices("<rect ")
        .filter_map(|(at, _)| {
            let tag = &dom[at..at + dom[at..].find('>')?];
            let class = attr(tag, "class")?;
            if !class.starts_with("gil-") {
                return None;
            }
            let number = |name: &str| attr(tag, name).and_then(|v| v.parse::<f64>().ok());
            Some(Span {
                class: class.to_owned(),
                pid: number("data-pid")? as u64,
                thread_id: number("data-thread-id")? as u64,
                secs: number("data-to")? - number("data-from")?,
            })
        })
        .collect()
}

/// Seconds of `class` spans in the lane (pid, thread id).
fn span_secs(spans: &[Span], class: &str, lane: (u64, u64)) -> f64 {
    spans
        .iter()
        .filter(|s| s.class == class && (s.pid, s.thread_id) == lane)
        .map(|s| s.secs)
        .sum()
}

#[test]
fn lanes_show_when_each_thread_held_and_waited_for_the_gil() {
    let Some(browser) = Browser::find() else {
        println!("skipped: no chromium on PATH");
        return;
    };
    let _serial = serial();
    let out = OutDir::new();
    record(&out);
    let page = out.out.join("report.html");
    let html = std::fs::read_to_string(&page).expect("report.html");
    let data = page_data(&html);
    let main = lane_of(&data, "MainThread");
    let metrics = lane_of(&data, "metrics");
    let dom = browser.dom(&file_url(&page, ""));

    // The lanes: the metrics thread holds the GIL, the loop waits for it while it does.
    let spans = gil_spans(&dom);
    let secs: f64 = SECONDS.parse().expect("seconds");
    let held = span_secs(&spans, "gil-held", metrics);
    let waited = span_secs(&spans, "gil-waited", main);
    assert!(
        held >= secs / 2.0,
        "the metrics thread held the GIL in spans of {held:.2} s of {secs} s: {spans:?}"
    );
    assert!(
        waited >= secs / 6.0,
        "the loop waited for the GIL in spans of {waited:.2} s of {secs} s: {spans:?}"
    );
    assert!(
        span_secs(&spans, "gil-held", main) > 0.0,
        "the loop's own turns with the GIL: {spans:?}"
    );
    assert!(
        dom.contains("id=\"gil-legend\""),
        "no GIL legend beside the lanes"
    );

    // The table: both threads, each with its shares.
    let table = &dom[dom
        .find("id=\"gil-table\"")
        .unwrap_or_else(|| panic!("no GIL table (summary.gil: {})", out.summary()["gil"]))..];
    let table = &table[..table.find("</table>").expect("the table's end")];
    for (name, (pid, tid)) in [("MainThread", main), ("metrics", metrics)] {
        let row = format!("<tr data-pid=\"{pid}\" data-thread-id=\"{tid}\">");
        let at = table
            .find(&row)
            .unwrap_or_else(|| panic!("no {name} row in {table}"));
        let row = &table[at..at + table[at..].find("</tr>").expect("the row's end")];
        assert!(row.contains(name), "{row}");
    }
}
