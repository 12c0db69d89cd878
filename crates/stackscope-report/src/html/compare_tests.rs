//! compare.html's page on made-up comparisons: what it holds without scripts, its data, and
//! that it loads nothing from outside.
use super::*;
use serde_json::json;

fn change(before: f64, after: f64, noise: f64) -> Value {
    let change = after - before;
    json!({"before": before, "after": after, "change": change, "noise": noise,
           "moved": change.abs() > noise})
}

fn side(label: &str, duration: f64, samples: u64, workers: u64) -> Value {
    json!({"label": label, "dir": label, "from_secs": 0.0, "to_secs": duration,
           "duration_secs": duration, "samples": samples, "rate_hz": 100.0,
           "processes": workers + 1, "workers": workers, "python_version": "3.12.3",
           "idle": true, "gpu_devices": ["NVIDIA H100 80GB HBM3"],
           "verdict": {"class": "input_pipeline", "text": format!("{label}'s verdict")},
           "if_fixed": null})
}

/// A 2-worker job starved by its loader against a 12-worker one that keeps up.
fn sample_page() -> ComparePage {
    let compare = json!({
        "before": side("two", 20.0, 9000, 2),
        "after": side("twelve", 12.0, 59000, 12),
        "mismatches": ["a <mismatch> & more"],
        "gpu": {"mean_utilization": change(27.0, 81.0, 4.0),
                "busy_share": change(0.24, 0.85, 0.05), "busy_ratio": 3.54},
        "step": {"input_wait": change(0.9, 0.1, 0.03), "inline_load": change(0.0, 0.0, 0.01),
                 "gpu_wait": change(0.02, 0.6, 0.03), "python": change(0.08, 0.3, 0.03),
                 "gil_wait": change(0.0, 0.0, 0.01), "other_wait": change(0.0, 0.0, 0.01)},
        "bottleneck": {"part": "input_wait", "share": change(0.9, 0.1, 0.03)},
        "functions": [{"function": "augment_pixels", "file": "train.py", "before": 0.6,
                       "after": 0.23, "change": -0.37, "noise": 0.02, "moved": true},
                      {"function": "poll", "file": "multiprocessing/connection.py",
                       "before": 0.3, "after": 0.002, "change": -0.298, "noise": 0.02,
                       "moved": true}],
        "change": {"verdict": {"class": "helped",
                               "text": "Change: helped. The GPU is busy 3.5 times as much."},
                   "worse": false}
    });
    let stack = |frames: &[&str], before: f64, after: f64| DiffStack {
        frames: frames.iter().map(|f| (*f).to_owned()).collect(),
        before,
        after,
    };
    let main = ["trainer process", "MainThread", "main (train.py)"];
    let worker = [
        "DataLoader worker",
        "MainThread",
        "_worker_loop (dataloader.py)",
    ];
    let stacks = vec![
        stack(
            &[
                &main[..],
                &["__next__ (dataloader.py)", "poll (connection.py)"],
            ]
            .concat(),
            0.3,
            0.002,
        ),
        stack(
            &[&main[..], &["train_step (train.py)", "backward (torch)"]].concat(),
            0.05,
            0.45,
        ),
        stack(
            &[&main[..], &["train_step (train.py)", "forward (torch)"]].concat(),
            0.05,
            0.05,
        ),
        stack(
            &[&worker[..], &["augment_pixels (train.py)"]].concat(),
            0.5,
            0.4,
        ),
        stack(
            &[&worker[..], &["decode </script> (PIL)"]].concat(),
            0.0,
            0.098,
        ),
        stack(&[&main[..], &["warm_up (train.py)"]].concat(), 0.1, 0.0),
    ];
    let ramp = |len: f64, period: f64| -> Vec<[f64; 2]> {
        (0..(len * 10.0) as usize)
            .map(|i| {
                let t = i as f64 / 10.0;
                [
                    t,
                    if t % period < period * 0.25 {
                        96.0
                    } else {
                        3.0
                    },
                ]
            })
            .collect()
    };
    ComparePage {
        compare,
        idle_below: 30.0,
        timelines: [ramp(20.0, 4.6), ramp(12.0, 1.0)],
        stacks,
    }
}

fn html_of(page: &ComparePage) -> String {
    let mut out = Vec::new();
    write_compare_html(page, &mut out).expect("page");
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn the_page_holds_the_verdict_its_data_and_nothing_from_outside() {
    let page = sample_page();
    let html = html_of(&page);
    assert!(
        html.contains(
            "id=\"change-verdict\" data-class=\"helped\">Change: helped. The GPU is busy \
             3.5 times as much.</p>"
        ),
        "the verdict in the HTML"
    );
    assert!(html.contains("<li>a &lt;mismatch&gt; &amp; more</li>"));
    assert!(html.contains("<tr class=\"moved\" data-figure=\"gpu.mean_utilization\">"));
    assert!(html.contains("<td>+54.0 points</td><td>±4.0 points</td>"));
    assert!(html.contains("data-figure=\"function.augment_pixels\">"));
    // The data parses back whole; the frame that holds `</script>` did not end it early.
    let open = "id=\"stackscope-data\">";
    let at = html.find(open).expect("data") + open.len();
    let end = at + html[at..].find("</script>").expect("end of data");
    let data: Value = serde_json::from_str(&html[at..end]).expect("JSON");
    assert_eq!(data, serde_json::to_value(&page).expect("value"));
    assert_eq!(data["stacks"][4]["frames"][3], "decode </script> (PIL)");
    for needle in [
        "<script src",
        "<link",
        "<img",
        "<iframe",
        "@import",
        "url(http",
    ] {
        assert!(!html.contains(needle), "the page holds {needle:?}");
    }
    for needle in ["src=\"http", "href=\"http", "src=\"//"] {
        assert!(!html.contains(needle), "the page holds {needle:?}");
    }
    assert!(html.contains(&format!("content=\"{CSP}\"")));
    for id in [
        "timeline-before",
        "timeline-after",
        "step-bars",
        "diff-icicle",
    ] {
        assert!(html.contains(&format!("id=\"{id}\"")), "no #{id}");
    }
    assert!(html.contains("id=\"toggle-vanished\"> show the stacks that vanished (1 stack,"));
    // STACKSCOPE_KEEP_COMPARE=FILE keeps a copy of the page, to look at in a browser.
    if let Some(keep) = std::env::var_os("STACKSCOPE_KEEP_COMPARE") {
        std::fs::write(keep, &html).expect("keep the page");
    }
}

#[test]
fn a_page_without_gpu_step_or_verdict_still_reads() {
    let page = ComparePage {
        compare: json!({"before": {"label": "a"}, "after": {"label": "b"}, "gpu": null,
                        "step": null, "functions": []}),
        idle_below: 30.0,
        timelines: [Vec::new(), Vec::new()],
        stacks: Vec::new(),
    };
    let html = html_of(&page);
    assert!(html.contains("data-class=\"no_change\">No verdict on the change.</p>"));
    assert!(html.contains("<p id=\"step-bars\" class=\"none\">"));
    assert!(!html.contains("data-figure=\"gpu."));
    assert!(html.contains("data-figure=\"samples\"><th>samples</th><td>–</td>"));
}
