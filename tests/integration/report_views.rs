//! What the drawings make of a recording without GPU data and of a job's start-up imports:
//! report.html offers no GPU views it could only leave empty and says why in one line, and
//! draws samples per second from 0; runs of import-machinery frames are one frame in
//! flamegraph.svg and the page while stacks.folded keeps them all; the page redraws at a new
//! width when the window is resized. Browser checks in headless Chromium (`common::browser`),
//! one printed line and skipped without it.

use crate::common;

use common::browser::*;
use common::*;
use std::fs;
use std::path::Path;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
const FOLDED_IMPORT: &str = "[import machinery] (<frozen importlib>)";
/// Frames of the import chain the start-up samples are in.
const IMPORT_DEPTH: usize = 40;

/// A sample log without GPU data: 10 s at 100 Hz of a training loop, its first 200 samples in
/// an import chain (`<module>` frames with the machinery's between them) as a start-up is.
fn log_without_gpu(dir: &Path) {
    use stackscope_event::Timestamp;
    use stackscope_samplelog::SampleLogWriter;
    use stackscope_testkit::events::{stack, thread, MS};
    use stackscope_testkit::synthetic::{header, START};

    fs::create_dir_all(dir).expect("recording dir");
    let mut log = SampleLogWriter::create(dir, &header(false, false)).expect("log");
    let main = thread(1, Some(4243), Some("MainThread"), true);
    // Innermost first: the machinery of two nested imports under main's.
    let mut imports = vec![("load_weights", "torch/serialization.py", 12)];
    for module in ["torch/nn/__init__.py", "torch/__init__.py"] {
        imports.push(("<module>", module, 3));
        for _ in 0..IMPORT_DEPTH / 2 {
            imports.push(("_find_and_load", "<frozen importlib._bootstrap>", 1176));
            imports.push(("exec_module", "<frozen importlib._bootstrap_external>", 940));
        }
    }
    imports.push(("main", "train.py", 1));
    let step = [("compute", "train.py", 30), ("main", "train.py", 10)];
    for i in 0..1000 {
        let time = Timestamp(START + i * 10 * MS);
        let frames: &[_] = if i < 200 { &imports } else { &step };
        log.append(&stack(time, 4242, &main, frames))
            .expect("append");
    }
    log.flush().expect("flush");
}

fn report(recording: &Path, out: &Path) {
    let args = [
        "report",
        recording.to_str().expect("utf-8"),
        "-o",
        out.to_str().expect("utf-8"),
    ];
    run_stackscope(&args, RUN_TIMEOUT).assert_success();
}

#[test]
fn import_runs_are_one_frame_in_the_drawings_and_every_frame_in_the_folded_stacks() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let recording = tmp.path().join("recording");
    log_without_gpu(&recording);
    let out = tmp.path().join("report");
    report(&recording, &out);
    let folded = Folded::read(&out.join("stacks.folded"));
    let machinery = |s: &Stack| {
        s.frames
            .iter()
            .filter(|f| f.file.starts_with("<frozen importlib._bootstrap"))
            .count()
    };
    assert_eq!(
        folded.stacks.iter().map(machinery).max(),
        Some(IMPORT_DEPTH * 2),
        "stacks.folded keeps every frame:\n{}",
        folded.excerpt()
    );
    let svg = fs::read_to_string(out.join("flamegraph.svg")).expect("flamegraph.svg");
    assert!(
        !svg.contains("_find_and_load"),
        "the SVG draws the machinery"
    );
    // Two runs, each one frame, the modules between them kept.
    assert!(
        svg.contains("[import machinery] (&lt;frozen importlib&gt;)"),
        "no folded frame"
    );
    assert!(
        svg.contains("torch/nn/__init__.py"),
        "the module frames are kept"
    );
    let data = page_data(&fs::read_to_string(out.join("report.html")).expect("report.html"));
    let frames = data["frames"].as_array().expect("frames");
    let label = |i: &serde_json::Value| frames[i.as_u64().expect("frame") as usize].clone();
    let deepest: Vec<serde_json::Value> = data["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .map(|s| {
            s.as_array()
                .expect("stack")
                .iter()
                .map(label)
                .collect::<Vec<_>>()
        })
        .max_by_key(Vec::len)
        .expect("a stack");
    let folded_frames = deepest.iter().filter(|l| *l == FOLDED_IMPORT).count();
    assert_eq!(folded_frames, 2, "{deepest:?}");
    assert!(
        !deepest
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains("_find_and_load"))),
        "{deepest:?}"
    );
}

/// Reads, once drawn: the GPU views offered, the no-GPU line, the rate axis; then narrows the
/// page and sends `resize`, and reads the flamegraph's and the timeline's widths again.
const RESIZE_PROBE: &str = r##"<script>
window.addEventListener("load", function () { setTimeout(function () {
  var out = { views: [], before: {}, after: {} };
  document.querySelectorAll("#views button").forEach(function (b) { out.views.push(b.getAttribute("data-view")); });
  var line = document.getElementById("no-gpu-views");
  out.no_gpu = line ? line.textContent : null;
  out.rate_axis = document.getElementById("timeline").getAttribute("data-rate-axis");
  var widths = function (into) {
    into.flame = +document.querySelector("#flamegraph svg").getAttribute("width");
    into.timeline = document.querySelector("#timeline .uplot canvas").getBoundingClientRect().width;
  };
  widths(out.before);
  document.body.style.width = "800px";
  window.dispatchEvent(new Event("resize"));
  setTimeout(function () {
    widths(out.after);
    var pre = document.createElement("pre");
    pre.id = "probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 500);
}, 100); });
</script>"##;

#[test]
fn a_page_without_gpu_data_offers_no_gpu_views_draws_rates_from_0_and_redraws_on_resize() {
    let Some(browser) = Browser::find() else {
        println!("skipped: no chromium on PATH");
        return;
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let recording = tmp.path().join("recording");
    log_without_gpu(&recording);
    let out = tmp.path().join("report");
    report(&recording, &out);
    let html = fs::read_to_string(out.join("report.html")).expect("report.html");
    let at = html.rfind("</body>").expect("</body>");
    let probed = out.join("probed.html");
    fs::write(
        &probed,
        format!("{}{RESIZE_PROBE}{}", &html[..at], &html[at..]),
    )
    .expect("page");
    // A link to a GPU view of such a page shows all samples.
    let dom = browser.dom_at(&file_url(&probed, "#view=idle"), (1300, 1000));
    let probe = probe_of(&dom);
    assert_eq!(probe["views"], serde_json::json!(["all"]), "{probe}");
    let line = probe["no_gpu"].as_str().expect("the no-GPU line");
    assert!(
        line.contains("this recording has no GPU data") && !line.contains('\n'),
        "{line}"
    );
    assert!(
        element_text(&dom, "window-label").contains("all samples"),
        "{}",
        element_text(&dom, "window-label")
    );
    // 100 samples a second, drawn on an axis from 0 (not from 90 to 110).
    let axis: Vec<f64> = probe["rate_axis"]
        .as_str()
        .expect("the rate axis")
        .split(',')
        .map(|v| v.parse().expect("a number"))
        .collect();
    assert_eq!(axis[0], 0.0, "{axis:?}");
    assert!((100.0..=130.0).contains(&axis[1]), "{axis:?}");
    // Narrowed to 800 px, both drawings follow.
    let (before, after) = (&probe["before"], &probe["after"]);
    for part in ["flame", "timeline"] {
        let (b, a) = (before[part].as_f64(), after[part].as_f64());
        let (Some(b), Some(a)) = (b, a) else {
            panic!("{part}: {probe}");
        };
        assert!(
            b > 1000.0 && a < 820.0,
            "{part}: {b} px, then {a} px after resize"
        );
    }
}
