//! compare.html in a real browser: `stackscope compare` of two real H100 recordings of one job
//! (2 DataLoader workers, then 12; `tests/data/recordings/README.md`) opened in headless
//! Chromium: the verdict on the change is in the HTML, the differential icicle draws, its toggle
//! adds the stacks that vanished, and both GPU timelines share one scale. Without Chromium the
//! browser checks are skipped with one printed line; the rest still runs.

use crate::common;

use common::browser::*;
use common::*;
use std::fs;
use std::path::Path;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Reads, once the page has drawn, what `window.stackscopeCompare` says into `<pre id="probe">`
/// as JSON: the icicle's drawn frames (and how many vanished ones) with the toggle off, on and
/// off again, the timelines' x ranges, and the details line once a frame is hovered.
const PROBE: &str = r##"<script>
window.addEventListener("load", function () { setTimeout(function () {
  var api = window.stackscopeCompare;
  var toggle = document.getElementById("toggle-vanished");
  var out = { checked: toggle.checked, drawn: api.drawnFrames(), vanished: api.vanishedDrawn(),
    scales: api.timelineScales() };
  toggle.click();
  out.drawn_with = api.drawnFrames();
  out.vanished_with = api.vanishedDrawn();
  toggle.click();
  out.drawn_off_again = api.drawnFrames();
  var frames = document.querySelectorAll("#diff-icicle svg g");
  var last = frames[frames.length - 1];
  last.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
  out.details = document.getElementById("diff-details").textContent;
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 100); });
</script>"##;

/// `html` with what its markup escapes read back.
fn unescape(html: &str) -> String {
    html.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// `stackscope compare` of copies of the 2-worker and 12-worker recordings into `tmp/out`.
fn compare_recordings(tmp: &Path) -> std::path::PathBuf {
    let before = copy_recording("dataloader-2-workers-idle", tmp);
    let after = copy_recording("dataloader-12-workers-idle", tmp);
    let out = tmp.join("out");
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let run = run_stackscope(
        &["compare", &path(&before), &path(&after), "-o", &path(&out)],
        RUN_TIMEOUT,
    );
    run.assert_success();
    out
}

#[test]
fn compare_page_draws_the_change_on_one_scale_in_a_browser() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = compare_recordings(tmp.path());
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("compare.json")).expect("compare.json"))
            .expect("compare.json is JSON");
    let page = out.join("compare.html");
    let html = fs::read_to_string(&page).expect("compare.html");
    assert_self_contained(&html);
    // The verdict on the change is in the HTML itself, as compare.json has it.
    let verdict = &json["change"]["verdict"];
    let text = verdict["text"].as_str().expect("the verdict's text");
    assert_eq!(unescape(element_text(&html, "change-verdict")), text);
    let class = verdict["class"].as_str().expect("the verdict's class");
    assert!(
        html.contains(&format!("data-class=\"{class}\">")),
        "no data-class=\"{class}\" on #change-verdict"
    );
    let data = page_data(&html);
    assert_eq!(data["compare"], json, "the page's data holds compare.json");
    let stacks = data["stacks"].as_array().expect("stacks");
    let vanished = stacks
        .iter()
        .filter(|s| s["after"].as_f64() == Some(0.0))
        .count();
    assert!(vanished > 0, "stacks of 2 workers that 12 have not");

    let Some(browser) = Browser::find() else {
        println!("skipping the browser checks: no chromium on PATH");
        return;
    };
    let probed = page.with_file_name("probed.html");
    let at = html.rfind("</body>").expect("</body>");
    fs::write(&probed, format!("{}{PROBE}{}", &html[..at], &html[at..])).expect("probed page");
    let dom = browser.dom(&file_url(&probed, ""));
    assert_eq!(unescape(element_text(&dom, "change-verdict")), text);
    let probe = probe_of(&dom);
    let count = |key: &str| {
        probe[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key}: {probe}"))
    };
    assert_eq!(probe["checked"], false, "vanished stacks hidden at first");
    assert!(count("drawn") > 0, "the icicle drew no frame: {probe}");
    assert_eq!(count("vanished"), 0, "{probe}");
    assert!(
        count("drawn_with") > count("drawn") && count("vanished_with") > 0,
        "the toggle drew no vanished stack: {probe}"
    );
    assert_eq!(count("drawn_off_again"), count("drawn"), "{probe}");
    // One scale: both from 0 to the longer duration.
    let longer = ["before", "after"]
        .iter()
        .map(|s| json[*s]["duration_secs"].as_f64().expect("duration"))
        .fold(0.0, f64::max);
    let scales = &probe["scales"];
    assert_eq!(scales["before"], scales["after"], "{probe}");
    let range = |i: usize| scales["before"][i].as_f64().expect("x range");
    assert_eq!(range(0), 0.0, "{probe}");
    assert!((range(1) - longer).abs() < 1e-9, "{probe}");
    let details = probe["details"].as_str().unwrap_or_default();
    for part in [": before ", "% → after ", " points)"] {
        assert!(details.contains(part), "details line: {details:?}");
    }
}
