//! report.html as a user first sees it, in a 1400x900 headless Chromium window: the
//! flamegraph's top on the first screen below the timeline, drawn as an icicle as deep as its
//! visible frames and never caught mid-transition; the timeline's lines each in its own colour,
//! as the legend draws them; a window from the URL clamped to the recording. Layout is read by
//! a probe script added to a copy of the page (`common::browser`). Without Chromium each test
//! prints one line and skips its browser checks.

use crate::common;

use common::browser::*;
use common::*;
use serde_json::Value;
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
/// The window a new user opened the demo's page in.
const WINDOW: (u32, u32) = (1400, 900);

fn num_of(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// `report DIR -o OUT` with `extra` arguments (a window); returns OUT.
fn report(recording: &Path, out: &Path, extra: &[&str]) -> PathBuf {
    let mut args = vec![
        "report",
        recording.to_str().expect("utf-8"),
        "-o",
        out.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    run_stackscope(&args, RUN_TIMEOUT).assert_success();
    out.to_path_buf()
}

/// One of `tests/data/recordings`, copied into `tmp`.
fn real_recording(tmp: &Path, name: &str) -> PathBuf {
    let recording = tmp.join(name);
    fs::create_dir_all(&recording).expect("recording dir");
    let source = repo_root().join("tests/data/recordings").join(name);
    for file in ["samples.log", "summary.json"] {
        fs::copy(source.join(file), recording.join(file)).expect("copy the recording");
    }
    recording
}

/// The flamegraph's drawn frames, as the probe read them, are each inside their parent (no
/// bar wider than its caller, as a transition caught half-done leaves them), at their final
/// width, and the graph is exactly as tall as its deepest drawn row. Returns the probe's
/// frames and the height of a row.
fn assert_settled_icicle(probe: &Value) -> (Vec<Value>, f64) {
    let frames = probe["frames"].as_array().expect("frames").clone();
    let root = frames
        .iter()
        .find(|f| f["parent"].as_i64() == Some(-1))
        .expect("a root frame");
    let row = num_of(root, "bottom") - num_of(root, "top");
    let svg = &probe["svg"];
    assert!(
        (num_of(root, "top") - num_of(svg, "top")).abs() < 0.5,
        "the root on top: {root} in {svg}"
    );
    for f in &frames {
        let width = num_of(f, "right") - num_of(f, "left");
        assert!(
            (width - num_of(f, "width_attr")).abs() < 0.5,
            "a bar at its final width: {f}"
        );
        let Some(parent) = f["parent"].as_u64() else {
            continue;
        };
        let parent = &frames[parent as usize];
        assert!(
            num_of(f, "left") >= num_of(parent, "left") - 0.5
                && num_of(f, "right") <= num_of(parent, "right") + 0.5
                && (num_of(f, "top") - num_of(parent, "bottom")).abs() < 0.5,
            "a frame under its caller, within its width: {f} under {parent}"
        );
    }
    let deepest = frames
        .iter()
        .map(|f| num_of(f, "depth"))
        .fold(0.0, f64::max);
    assert_eq!(
        num_of(probe, "svg_height"),
        (deepest + 1.0) * row,
        "as tall as its {} drawn rows",
        deepest + 1.0
    );
    assert!(
        num_of(svg, "right") <= num_of(probe, "width"),
        "the flamegraph fits the window: {svg}"
    );
    (frames, row)
}

/// The legend's entries, each with its own colour, drawn with it, utilization the thickest,
/// each with its value under the cursor. Returns their colours.
fn assert_legend(probe: &Value, labels: &[&str]) -> Vec<[u8; 3]> {
    let legend = probe["legend"].as_array().expect("legend");
    let shown: Vec<&str> = legend
        .iter()
        .map(|e| e["label"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(shown, labels, "{legend:?}");
    let colours: HashSet<&str> = legend
        .iter()
        .map(|e| e["colour"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        colours.len(),
        legend.len(),
        "one colour per line: {legend:?}"
    );
    assert!(
        probe["cursor"]
            .as_str()
            .is_some_and(|c| c.starts_with("at ")),
        "the cursor's time: {probe}"
    );
    for e in legend {
        assert_eq!(
            e["colour"], e["stroke"],
            "the sample drawn in its colour: {e}"
        );
        let unit = if e["label"] == "power" { " W" } else { "%" };
        let value = e["value"].as_str().unwrap_or_default();
        assert!(
            value
                .strip_suffix(unit)
                .is_some_and(|v| v.parse::<f64>().is_ok()),
            "the value under the cursor: {e}"
        );
        if e["label"] != "utilization" {
            let util = legend
                .iter()
                .find(|u| u["label"] == "utilization")
                .expect("utilization");
            assert!(
                num_of(util, "width") > num_of(e, "width"),
                "utilization the thickest: {legend:?}"
            );
        }
    }
    legend
        .iter()
        .map(|e| parse_colour(e["colour"].as_str().unwrap_or_default()))
        .collect()
}

#[test]
fn demo_page_shows_the_flamegraph_top_below_the_timeline_on_the_first_screen() {
    let _serial = serial();
    let Some(browser) = Browser::find() else {
        println!("skipped: no chromium on PATH");
        return;
    };
    let out = OutDir::new();
    run_stackscope(&["demo", "-o", out.arg(), "--seconds", "4"], RUN_TIMEOUT).assert_success();
    let page = out.out.join("report.html");
    assert_self_contained(&fs::read_to_string(&page).expect("report.html"));

    let dom = browser.dom_at(&file_url(&with_probe(&page), ""), WINDOW);
    let probe = probe_of(&dom);
    // The layout's width; the height of the first screen is the screenshot's (a DOM dump's
    // viewport is shorter by the window's frame, which moves nothing on the page).
    assert_eq!(num_of(&probe, "width"), f64::from(WINDOW.0), "the viewport");
    let (frames, row) = assert_settled_icicle(&probe);
    // The root and the three rows under it lie on the first screen, below the timeline.
    let timeline_bottom = num_of(&probe["timeline"], "bottom");
    let top = num_of(&probe["svg"], "top");
    assert!(
        top > timeline_bottom && top + 4.0 * row <= f64::from(WINDOW.1),
        "the flamegraph's first rows at {top}..{} px, the timeline ending at {timeline_bottom}",
        top + 4.0 * row
    );
    for depth in 0..4 {
        assert!(
            frames
                .iter()
                .any(|f| num_of(f, "depth") == f64::from(depth)),
            "no row {depth}"
        );
    }
    // The timeline's lines: the demo's GPU has utilization, memory and power.
    let colours = assert_legend(&probe, &["utilization", "memory", "power"]);

    // What a screenshot shows: the flamegraph's bars in the lower half of the first screen
    // (a bar's colour at the stylesheet's 0.8 opacity over white), and each legend colour
    // drawn in the timeline.
    let shot = browser.screenshot(&file_url(&page, ""), WINDOW, out.tmp.path());
    assert_eq!((shot.width, shot.height), (1400, 900));
    let bars: HashSet<[u8; 3]> = frames
        .iter()
        .map(|f| parse_colour(f["fill"].as_str().unwrap_or_default()))
        .map(|c| c.map(|v| ((f64::from(v) * 0.8 + 255.0 * 0.2).round()) as u8))
        .collect();
    let lower = shot
        .region(shot.height / 2..shot.height, 0..shot.width)
        .filter(|px| bars.iter().any(|&bar| near(*px, bar, 2)))
        .count();
    assert!(
        lower > 20_000,
        "{lower} pixels of flamegraph bars in the lower half of the first screen"
    );
    let plot = &probe["timeline"];
    let (y0, y1) = (
        num_of(plot, "top") as usize,
        num_of(plot, "bottom") as usize,
    );
    let (x0, x1) = (
        num_of(plot, "left") as usize,
        num_of(plot, "right") as usize,
    );
    for colour in colours {
        let drawn = shot
            .region(y0..y1, x0..x1)
            .filter(|px| near(*px, colour, 24))
            .count();
        assert!(
            drawn > 100,
            "{colour:?} drawn in {drawn} pixels of the timeline"
        );
    }
}

/// A sample log of 20 s at 100 Hz of a shallow training loop, and one sample (as at start-up)
/// of a chain 60 frames deep.
fn log_with_one_deep_sample(dir: &Path) {
    use stackscope_event::Timestamp;
    use stackscope_samplelog::SampleLogWriter;
    use stackscope_testkit::events::{stack, thread, MS};
    use stackscope_testkit::synthetic::{header, START};

    fs::create_dir_all(dir).expect("recording dir");
    let mut log = SampleLogWriter::create(dir, &header(false, false)).expect("log");
    let main = thread(1, Some(4243), Some("MainThread"), true);
    // Not the import machinery: the page folds that into one frame (report_views).
    let mut chain = vec![("recurse", "deep.py", 7); 60];
    chain.push(("main", "train.py", 1));
    log.append(&stack(Timestamp(START), 4242, &main, &chain))
        .expect("append");
    let frames = [
        ("compute", "train.py", 30),
        ("step", "train.py", 20),
        ("main", "train.py", 10),
    ];
    for i in 1..2000 {
        let time = Timestamp(START + i * 10 * MS);
        log.append(&stack(time, 4242, &main, &frames))
            .expect("append");
    }
    log.flush().expect("flush");
}

/// The icicle is as deep as the frames wide enough to see, not as deep as the deepest stack:
/// one sample of a deep chain (a `record`'s start-up imports) adds no rows.
#[test]
fn one_deep_sample_does_not_make_the_flamegraph_deep() {
    let Some(browser) = Browser::find() else {
        println!("skipped: no chromium on PATH");
        return;
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let recording = tmp.path().join("recording");
    log_with_one_deep_sample(&recording);
    let out = report(&recording, &tmp.path().join("report"), &[]);
    let page = out.join("report.html");
    let data = page_data(&fs::read_to_string(&page).expect("report.html"));
    let depths: Vec<usize> = data["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .filter_map(|s| s.as_array().map(Vec::len))
        .collect();
    let (shallow, deep) = (depths.iter().min(), depths.iter().max());
    let (Some(&shallow), Some(&deep)) = (shallow, deep) else {
        panic!("no stacks: {data}");
    };
    assert!(deep > 60, "the deep sample's stack: {depths:?}");
    let probe = probe_of(&browser.dom_at(&file_url(&with_probe(&page), ""), WINDOW));
    let (frames, row) = assert_settled_icicle(&probe);
    // The root ("all") over the loop's stack: nothing of the chain drawn.
    let rows = num_of(&probe, "svg_height") / row;
    assert_eq!(
        rows,
        shallow as f64 + 1.0,
        "rows drawn for stacks {depths:?}"
    );
    assert!(
        frames
            .iter()
            .all(|f| num_of(f, "right") - num_of(f, "left") > 2.0),
        "no sliver drawn"
    );
}

/// A recording with GPM (an H100): SM activity is a line of its own beside utilization.
#[test]
fn sm_activity_has_its_own_colour_beside_utilization() {
    let Some(browser) = Browser::find() else {
        println!("skipped: no chromium on PATH");
        return;
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let recording = real_recording(tmp.path(), "dataloader-12-workers-idle");
    let out = report(&recording, &tmp.path().join("report"), &[]);
    let page = out.join("report.html");
    let probe = probe_of(&browser.dom_at(&file_url(&with_probe(&page), ""), WINDOW));
    assert_legend(&probe, &["utilization", "SM activity", "memory", "power"]);
}

/// A window from the URL out of the recording's span, or backwards, is clamped and put in
/// order: the count, the title and the URL then describe the same window, the one `report
/// --from --to` counts.
#[test]
fn a_window_from_the_url_is_clamped_to_the_recording() {
    let Some(browser) = Browser::find() else {
        println!("skipped: no chromium on PATH");
        return;
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let recording = real_recording(tmp.path(), "dataloader-2-workers-idle");
    let out = report(&recording, &tmp.path().join("report"), &[]);
    let page = with_probe(&out.join("report.html"));
    let data = page_data(&fs::read_to_string(&page).expect("report.html"));
    let duration = num_of(&data, "duration_secs");
    // Bucket edges, where the page's counts are exact.
    let w = num_of(&data, "bucket_secs");
    let (lo, hi) = ((2.0 / w).round() * w, (5.0 / w).round() * w);
    let cases = [
        // Backwards and past the end: from `lo` to the end.
        (format!("#from={}&to={lo}", duration * 3.0), lo, None),
        // Before the start: from the start (no samples before it) to `hi`.
        (format!("#from=-50&to={hi}"), 0.0, Some(hi)),
    ];
    for (i, (fragment, from, to)) in cases.into_iter().enumerate() {
        let dom = browser.dom_at(&file_url(&page, &fragment), WINDOW);
        let shown: u64 = element_text(&dom, "selection-samples")
            .parse()
            .expect("a number of samples");
        let from_arg = from.to_string();
        let to_arg = to.unwrap_or(duration * 3.0).to_string();
        let window = report(
            &recording,
            &tmp.path().join(format!("window{i}")),
            &["--from", &from_arg, "--to", &to_arg],
        );
        let counted = read_summary(&window)["samples"].as_u64().unwrap_or(0);
        assert!(counted > 100, "{counted} samples in [{from_arg}, {to_arg})");
        assert_eq!(
            shown, counted,
            "{fragment}: selection-samples against report"
        );
        // The title and the URL name the clamped window, within the recording.
        let label = element_text(&dom, "window-label");
        let times: Vec<f64> = label
            .split(" s")
            .filter_map(|part| part.rsplit(' ').next()?.parse().ok())
            .collect();
        assert_eq!(times.len(), 2, "{label}");
        assert!(
            times[0] <= times[1] && times[0] >= 0.0 && times[1] <= duration + 2.0 * w,
            "{fragment}: {label}"
        );
        if let Some(to) = to {
            assert!((times[1] - to).abs() < 0.01, "{fragment}: {label}");
        }
        assert!(
            (times[0] - from).abs() < 0.01 || from == 0.0,
            "{fragment}: {label}"
        );
        let hash = probe_of(&dom)["hash"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let in_url: Vec<f64> = hash
            .trim_start_matches('#')
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| *k == "from" || *k == "to")
            .filter_map(|(_, v)| v.parse().ok())
            .collect();
        assert!(
            in_url.len() == 2 && (in_url[0] - times[0]).abs() < 0.01 && in_url[0] <= in_url[1],
            "{fragment}: the URL became {hash}"
        );
    }
}
