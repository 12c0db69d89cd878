//! report.html's memory in a real browser: `stackscope report` of a sample log holding memory
//! readings (a trainer that stays flat, a worker that grows in `augment` for the second half,
//! a memory cgroup with a limit) opened in headless Chromium. The memory chart draws under the
//! GPU chart on the same x axis, a line per process and the cgroup's limit; a window dragged on
//! either chart shades both and the memory growth flamegraph follows it. Without Chromium the
//! browser checks are skipped with one printed line.

use crate::common;

use common::browser::*;
use common::*;
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::time::Duration;

use stackscope_event::{CgroupSample, Event, GpuSample, MemorySample};
use stackscope_samplelog::SampleLogWriter;
use stackscope_testkit::events::{gpu, stack, thread, MS};
use stackscope_testkit::synthetic::{header, START};

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
const WINDOW: (u32, u32) = (1400, 1200);
const TRAINER: u32 = 4242;
const WORKER: u32 = 4321;
const SECS: u64 = 12;
/// The worker grows from half way, 4 MB at each 100 ms reading: 40 MB a second.
const GROWS_FROM_MS: u64 = SECS * 1000 / 2;
const STEP: u64 = 4_000_000;
const LIMIT: u64 = 2_000_000_000;

fn worker_rss(t: u64) -> u64 {
    300_000_000 + t.saturating_sub(GROWS_FROM_MS) / 100 * STEP
}

/// One 100 ms tick from `t` ms: the GPU's, the processes' and the cgroup's readings at `t`,
/// then ten stacks of each process 5 ms off them.
fn tick(t: u64) -> Vec<Event> {
    let at = |ms: u64| stackscope_event::Timestamp(START + ms * MS);
    let memory = |pid: u32, rss_bytes: u64| {
        Event::Memory(MemorySample {
            time: at(t),
            pid,
            rss_bytes,
            ..MemorySample::default()
        })
    };
    let mut out = vec![
        Event::Gpu(GpuSample {
            power_watts: Some(200.0),
            ..gpu(at(t), 0, if t % 1000 < 500 { 10.0 } else { 90.0 })
        }),
        memory(TRAINER, 800_000_000),
        memory(WORKER, worker_rss(t)),
        Event::Cgroup(CgroupSample {
            time: at(t),
            usage_bytes: 800_000_000 + worker_rss(t),
            limit_bytes: Some(LIMIT),
            oom_kills: Some(0),
        }),
    ];
    let main = thread(1, Some(1), Some("MainThread"), true);
    let inner = if t >= GROWS_FROM_MS {
        ("augment", "worker.py", 40)
    } else {
        ("fetch", "worker.py", 20)
    };
    for k in 0..10 {
        let time = at(t + 5 + k * 10);
        out.push(stack(
            time,
            TRAINER,
            &main,
            &[("train_step", "train.py", 30), ("main", "train.py", 10)],
        ));
        out.push(stack(
            time,
            WORKER,
            &main,
            &[inner, ("worker_loop", "worker.py", 5)],
        ));
    }
    out
}

fn write_log(dir: &Path) {
    fs::create_dir_all(dir).expect("recording dir");
    let mut log = SampleLogWriter::create(dir, &header(false, true)).expect("log");
    for t in (0..SECS * 1000).step_by(100) {
        for event in tick(t) {
            log.append(&event).expect("append");
        }
    }
    log.flush().expect("flush");
}

/// Reads, once the page has drawn, the two charts' plot areas, the memory legend, the growth
/// view, then drags a window on the memory chart and one on the GPU chart, reading after each
/// the growth view, the window in the URL and whether each chart is shaded there.
const PROBE: &str = r##"<script>
window.addEventListener("load", function () { setTimeout(function () {
  var box = function (el) { var r = el.getBoundingClientRect();
    return { top: r.top, bottom: r.bottom, left: r.left, right: r.right }; };
  var gpuOver = document.querySelector("#timeline .u-over");
  var memOver = document.querySelector("#memory-chart .u-over");
  var growth = document.getElementById("memory-growth");
  // A chart's colours at a share of its width, in the top rows of its plot, above its lines:
  // nine pixels in a row, of which a grid line may take one.
  function shaded(chart, share) {
    var canvas = document.querySelector(chart + " .uplot canvas"), over = document.querySelector(chart + " .u-over");
    var c = canvas.getBoundingClientRect(), o = over.getBoundingClientRect();
    var x = Math.round(o.left - c.left + o.width * share), y = Math.round(o.top - c.top + 2);
    var px = canvas.getContext("2d").getImageData(x, y, 9, 1).data, out = [];
    for (var i = 0; i < px.length; i += 4) out.push([px[i], px[i + 1], px[i + 2], px[i + 3]]);
    return out;
  }
  function drag(over, a, b) {
    var o = over.getBoundingClientRect(), y = o.top + o.height / 2;
    var x0 = o.left + o.width * a, x1 = o.left + o.width * b;
    over.dispatchEvent(new MouseEvent("mousemove", { clientX: x0, clientY: y, bubbles: true }));
    over.dispatchEvent(new MouseEvent("mousedown", { clientX: x0, clientY: y, bubbles: true, button: 0 }));
    over.dispatchEvent(new MouseEvent("mousemove", { clientX: x1, clientY: y, movementX: x1 - x0, bubbles: true }));
    document.dispatchEvent(new MouseEvent("mouseup", { clientX: x1, clientY: y, bubbles: true, button: 0 }));
  }
  function state() {
    return { hash: location.hash, bytes: +growth.getAttribute("data-bytes"),
      frames: Array.prototype.map.call(growth.querySelectorAll("svg g"), function (g) { return g.__data__.data.name; }),
      label: document.getElementById("memory-growth-label").textContent,
      gpu_shaded: [shaded("#timeline", 0.2), shaded("#timeline", 0.75)],
      memory_shaded: [shaded("#memory-chart", 0.2), shaded("#memory-chart", 0.75)] };
  }
  var out = { gpu: box(gpuOver), memory: box(memOver), lines: document.getElementById("memory-chart").getAttribute("data-lines"), legend: [] };
  document.querySelectorAll("#memory-legend .legend-series").forEach(function (e) {
    out.legend.push({ kind: e.getAttribute("data-kind"), pid: e.getAttribute("data-pid"),
      label: e.querySelector(".legend-label").textContent });
  });
  out.whole = state();
  // The first half on the memory chart: before the worker grew. A chart redraws once the
  // event that changed it is handled: each state is read a moment after its drag.
  drag(memOver, 0.05, 0.45);
  setTimeout(function () {
    out.on_memory = state();
    // The second half on the GPU chart: while it grew.
    drag(gpuOver, 0.6, 0.9);
    setTimeout(function () {
      out.on_gpu = state();
      // Hiding the limit (its legend entry): the axis fits the processes.
      var chart = document.getElementById("memory-chart");
      out.scale = chart.getAttribute("data-scale");
      document.querySelector("#memory-legend .legend-series[data-kind=limit]").click();
      setTimeout(function () {
        out.scale_without_limit = chart.getAttribute("data-scale");
        var pre = document.createElement("pre");
        pre.id = "probe";
        pre.textContent = JSON.stringify(out);
        document.body.appendChild(pre);
      }, 50);
    }, 50);
  }, 50);
}, 100); });
</script>"##;

/// For each place the probe read (a row of pixels `[r, g, b, alpha]` of a canvas drawn over
/// the page's white), whether it is the window's shading (its yellow, at 15%): most of the
/// row yellow. A row with no yellow is not; anything between fails.
fn shading(places: &Value) -> Vec<bool> {
    let yellow = |px: &Value| {
        let c: Vec<u64> = px
            .as_array()
            .expect("a pixel")
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        matches!(c[..], [r, g, b, a] if a > 0 && r > 240 && (180..=220).contains(&g) && b < 40)
    };
    places
        .as_array()
        .expect("places")
        .iter()
        .map(|row| {
            let row = row.as_array().expect("a row of pixels");
            match row.iter().filter(|px| yellow(px)).count() {
                0 => false,
                n if n * 2 > row.len() => true,
                _ => panic!("partly shaded: {places}"),
            }
        })
        .collect()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

#[test]
fn the_memory_chart_draws_under_the_gpu_chart_and_follows_the_window() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let recording = tmp.path().join("recording");
    write_log(&recording);
    let out = tmp.path().join("report");
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    run_stackscope(
        &["report", &path(&recording), "-o", &path(&out)],
        RUN_TIMEOUT,
    )
    .assert_success();
    for file in ["memory-timeline.csv", "stacks-memory-growth.folded"] {
        assert!(out.join(file).is_file(), "no {file}");
    }
    let page = out.join("report.html");
    let html = fs::read_to_string(&page).expect("report.html");
    assert_self_contained(&html);
    let grown = assert_page_data(&page_data(&html));

    let Some(browser) = Browser::find() else {
        println!("skipped: no chromium on PATH");
        return;
    };
    let probed = page.with_file_name("probed.html");
    let at = html.rfind("</body>").expect("</body>");
    fs::write(&probed, format!("{}{PROBE}{}", &html[..at], &html[at..])).expect("probed");
    let probe = probe_of(&browser.dom_at(&file_url(&probed, ""), WINDOW));
    assert_chart_under_the_gpu_chart(&probe);
    assert_window_followed(&probe, grown);
}

/// The page's memory: a line per process, the largest first, and the growth in its buckets;
/// returns the bytes grown.
fn assert_page_data(data: &Value) -> u64 {
    let processes = data["memory"]["processes"].as_array().expect("memory");
    let pids: Vec<u64> = processes.iter().filter_map(|p| p["pid"].as_u64()).collect();
    assert_eq!(
        pids,
        [u64::from(TRAINER), u64::from(WORKER)],
        "largest first"
    );
    // What the worker grew, in the page's buckets: all of it while `augment` ran.
    let grown: u64 = data["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .filter_map(|b| b["g"].as_array())
        .flat_map(|g| g.chunks(2).map(|p| p[1].as_u64().unwrap_or(0)))
        .sum();
    let expected = (SECS * 1000 - 100 - GROWS_FROM_MS) / 100 * STEP;
    assert_eq!(grown, expected);
    grown
}

/// The chart under the GPU chart on the same x axis, a line per process named by its pid, the
/// cgroup's lines; its axis from 0 holds the limit until the limit is hidden.
fn assert_chart_under_the_gpu_chart(probe: &Value) {
    // The same seconds at the same pixels.
    let (gpu, memory) = (&probe["gpu"], &probe["memory"]);
    assert!(
        num(memory, "top") > num(gpu, "bottom"),
        "{gpu} over {memory}"
    );
    for edge in ["left", "right"] {
        assert!(
            (num(memory, edge) - num(gpu, edge)).abs() < 1.0,
            "the x axes aligned: {gpu} and {memory}"
        );
    }
    // A line per process, named by pid, and the cgroup's usage (hidden at first) and limit.
    assert_eq!(probe["lines"], "2");
    let legend = probe["legend"].as_array().expect("legend");
    let kinds: Vec<&str> = legend.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["process", "process", "cgroup", "limit"],
        "{legend:?}"
    );
    for (entry, pid) in legend.iter().zip([TRAINER, WORKER]) {
        let label = entry["label"].as_str().unwrap_or_default();
        assert!(label.starts_with(&format!("pid {pid}")), "{label}");
        assert_eq!(entry["pid"], pid.to_string());
    }
    let scale = |key: &str| -> Vec<f64> {
        let text = probe[key].as_str().unwrap_or_default();
        text.split(',').filter_map(|v| v.parse().ok()).collect()
    };
    let limit_mb = LIMIT as f64 / 1e6;
    let (with, without) = (scale("scale"), scale("scale_without_limit"));
    assert!(
        with.len() == 2 && with[0] == 0.0 && with[1] >= limit_mb,
        "{with:?}"
    );
    // The cgroup's usage is hidden at first: the axis fits the trainer's 800 MB.
    assert!(
        without.len() == 2 && without[1] >= 800.0 && without[1] < 900.0,
        "{without:?}"
    );
}

/// The memory growth view and both charts' shading follow a window dragged on either chart.
fn assert_window_followed(probe: &Value, grown: u64) {
    // The whole recording: every byte grown, charged to `augment`, nothing shaded.
    let whole = &probe["whole"];
    assert_eq!(whole["bytes"].as_u64(), Some(grown));
    let frames = whole["frames"].as_array().expect("frames");
    assert!(
        frames.iter().any(|f| f == "augment (worker.py:40)"),
        "{frames:?}"
    );
    assert!(
        !frames.iter().any(|f| f == "fetch (worker.py:20)"),
        "{frames:?}"
    );
    assert_eq!(shading(&whole["gpu_shaded"]), [false, false]);
    assert_eq!(shading(&whole["memory_shaded"]), [false, false]);

    // A window dragged on the memory chart, before the growth: both charts shaded there, the
    // URL holds it, and nothing grew in it.
    let on_memory = &probe["on_memory"];
    assert!(
        on_memory["hash"]
            .as_str()
            .is_some_and(|h| h.contains("from=")),
        "{on_memory}"
    );
    assert_eq!(on_memory["bytes"].as_u64(), Some(0), "{on_memory}");
    assert_eq!(shading(&on_memory["gpu_shaded"]), [true, false]);
    assert_eq!(shading(&on_memory["memory_shaded"]), [true, false]);

    // A window dragged on the GPU chart, in the growth: the memory growth view follows it.
    let on_gpu = &probe["on_gpu"];
    let bytes = on_gpu["bytes"].as_u64().unwrap_or(0);
    assert!(
        bytes > 0 && bytes < grown,
        "{bytes} of {grown} grown in {on_gpu}"
    );
    assert_ne!(on_gpu["label"], on_memory["label"]);
    assert_eq!(shading(&on_gpu["gpu_shaded"]), [false, true]);
    assert_eq!(shading(&on_gpu["memory_shaded"]), [false, true]);
}
