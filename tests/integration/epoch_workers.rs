//! A training loop whose DataLoader-like workers are re-created every epoch, attached to as a
//! user would: its workers, a new pair every 1.5 s, are one root (`workers (N processes,
//! 2 at a time)`) in stacks.folded, in summary.json and on the page, whose first flamegraph
//! shows their work as its widest tower; `--processes-apart` keeps a root each.

use crate::common;

use common::browser::*;
use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// Roots of stacks.folded with their samples.
fn roots(folded: &str) -> BTreeMap<String, u64> {
    let mut roots = BTreeMap::new();
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let root = stack.split(';').next().unwrap_or("").to_owned();
        *roots.entry(root).or_default() += n.parse::<u64>().unwrap_or(0);
    }
    roots
}

/// `(processes, at a time)` of a group's root frame.
fn group_counts(root: &str) -> Option<(u64, u64)> {
    let inside = root.split_once("workers (")?.1;
    let (count, rest) = inside.split_once(' ')?;
    let rest = rest
        .strip_prefix("processes, ")
        .or_else(|| rest.strip_prefix("process, "))?;
    let (at_a_time, _) = rest.split_once(" at a time)")?;
    Some((
        count.replace(',', "").parse().ok()?,
        at_a_time.parse().ok()?,
    ))
}

/// Attaches for `secs` to the epoch job, with `extra` arguments; the output directory.
fn attach_epochs(secs: &str, extra: &[&str]) -> (OutDir, u32) {
    // Epochs long enough for the tree's walk (ten times a second) and an attach in a debug build
    // to meet every worker.
    let fixture = Fixture::start("epoch_workers.py", &["--epoch-seconds", "1.5"]);
    let pid = fixture.ready_pid();
    let out = OutDir::new();
    let pid_arg = pid.to_string();
    let mut args = vec![
        "attach",
        "--pid",
        &pid_arg,
        "--duration",
        secs,
        "--gpu",
        "off",
        "-o",
        out.arg(),
    ];
    args.extend_from_slice(extra);
    run_stackscope(&args, RUN_TIMEOUT).assert_success();
    drop(fixture);
    (out, pid)
}

#[test]
fn workers_re_created_every_epoch_are_one_root_whose_work_is_the_widest_tower() {
    let (out, pid) = attach_epochs("8", &[]);
    let folded = fs::read_to_string(out.out.join("stacks.folded")).expect("stacks.folded");
    let roots = roots(&folded);
    let groups: Vec<(&String, (u64, u64))> = roots
        .keys()
        .filter_map(|r| Some((r, group_counts(r)?)))
        .collect();
    assert_eq!(groups.len(), 1, "one root for the workers: {roots:#?}");
    let (group, (processes, at_a_time)) = groups[0];
    // About 5 epochs of 2 in 8 s.
    assert!(processes >= 6, "{processes} workers: {group}");
    assert!(
        (1..=4).contains(&at_a_time),
        "{at_a_time} at a time: {group}"
    );
    let trainer = format!("process {pid} ");
    assert!(
        roots.keys().all(|r| r == group || r.starts_with(&trainer)),
        "no worker apart: {roots:#?}"
    );
    let augment: u64 = folded
        .lines()
        .filter(|l| l.starts_with(group.as_str()) && l.contains(";augment_batch ("))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert!(
        augment * 2 > roots[group],
        "the workers' time is augment_batch's: {augment} of {}",
        roots[group]
    );

    let summary = out.summary();
    let entries: Vec<&serde_json::Value> = summary["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["group"].is_object())
        .collect();
    assert_eq!(entries.len(), 1, "{:#}", summary["processes"]);
    assert_eq!(entries[0]["group"]["label"].as_str(), Some(group.as_str()));
    assert_eq!(
        num(&entries[0]["group"]["processes"], "processes"),
        processes as f64
    );
    assert!(num(&summary["processes_followed"], "followed") > processes as f64);

    first_flamegraph_shows_the_group_widest(&out, group);
}

/// The page's first flamegraph (the whole recording), as a browser draws it: under the root,
/// the group is the widest tower and `augment_batch` its widest frame below the workers' start.
fn first_flamegraph_shows_the_group_widest(out: &OutDir, group: &str) {
    let Some(browser) = Browser::find() else {
        println!("no Chromium: the page's flamegraph is not checked");
        return;
    };
    let page = with_probe(&out.out.join("report.html"));
    let probe = probe_of(&browser.dom_at(&file_url(&page, ""), (1400, 900)));
    let frames = probe["frames"].as_array().expect("frames");
    let value = |f: &serde_json::Value| f["value"].as_f64().unwrap_or(0.0);
    let widest_at = |depth: f64| {
        frames
            .iter()
            .filter(|f| f["depth"].as_f64() == Some(depth))
            .max_by(|a, b| value(a).total_cmp(&value(b)))
            .and_then(|f| f["name"].as_str())
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(widest_at(1.0), group, "the group is the widest tower");
    let augment = frames
        .iter()
        .filter(|f| {
            f["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("augment_batch"))
        })
        .map(value)
        .fold(0.0, f64::max);
    let root = frames
        .iter()
        .find(|f| f["depth"].as_f64() == Some(0.0))
        .map(value)
        .unwrap_or(0.0);
    assert!(
        augment * 2.0 > root,
        "augment_batch holds most of the page's samples: {augment} of {root}"
    );
}

#[test]
fn processes_apart_keeps_a_root_for_each_worker() {
    let (out, _) = attach_epochs("5", &["--processes-apart"]);
    let folded = fs::read_to_string(out.out.join("stacks.folded")).expect("stacks.folded");
    let roots = roots(&folded);
    assert!(
        roots.keys().all(|r| group_counts(r).is_none()),
        "{roots:#?}"
    );
    assert!(roots.len() >= 4, "a root per worker: {roots:#?}");
}

/// Workers that live a fraction of a second (an epoch of 0.25 s) are found and read: the tree
/// is walked ten times a second, and attaching never waits for the sampler, nor the sampler for
/// an attach. A rescan twice a second between ticks followed about a third of them; on a
/// loaded machine the finder still follows most.
#[test]
fn workers_that_live_a_fifth_of_a_second_are_followed() {
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let stats = out.tmp.path().join("stats.json");
    let mut cmd = stackscope(&["record", "--gpu", "off", "-o", out.arg(), "--"]);
    cmd.arg("python3")
        .arg(fixture_path("process_churn.py"))
        .arg(&ready)
        .args([
            "--workers",
            "2",
            "--epoch-seconds",
            "0.25",
            "--seconds",
            "6",
        ])
        .arg("--stats")
        .arg(&stats)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run_with_timeout(cmd, RUN_TIMEOUT).assert_success();
    let started: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&stats).expect("stats")).expect("stats json");
    let started = num(&started["processes"], "processes started");
    assert!(started >= 20.0, "{started} workers in 6 s");
    let summary = out.summary();
    // The followed count includes the job's own process.
    let followed = num(&summary["processes_followed"], "followed") - 1.0;
    assert!(
        followed >= 0.5 * started,
        "{followed} of {started} workers followed"
    );
    let group = summary["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find_map(|p| p["group"].as_object())
        .expect("the workers are one group");
    // Those sampled before they ended are the group's members: fewer on a loaded machine.
    assert!(
        num(&group["processes"], "group processes") >= 0.25 * started,
        "{group:?}"
    );
}
