//! `watch`'s own contract: it reads the stacks at the rate its help says, measured on the
//! metrics endpoint (`stackscope_samples_total` counts the thread stacks read).

use crate::common;
use crate::hang_diagnosis::{ready_u32, RUN_TIMEOUT};
use crate::watch_gpu::{free_port, scrape};

use common::*;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// Stack reads so far, from a metrics page.
fn reads(page: &str) -> Option<u64> {
    page.lines()
        .find_map(|l| l.strip_prefix("stackscope_samples_total "))
        .and_then(|v| v.trim().parse().ok())
}

/// `watch --hang-after 2 --rate RATE` (or its default) on a one-thread job that keeps working:
/// the rate its startup line says, and the rate measured over `reads` stack reads.
fn watch_rate(rate: Option<&str>, count: u64) -> (String, f64) {
    let fixture = Fixture::start("hangs_later.py", &["--work-secs", "inf"]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid").to_string();
    let out = OutDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec![
        "watch",
        "--pid",
        &pid,
        "--hang-after",
        "2",
        "--gpu",
        "off",
        "--metrics-addr",
        &addr,
        "-o",
        out.arg(),
    ];
    if let Some(rate) = rate {
        args.extend(["--rate", rate]);
    }
    let running = spawn_stackscope(stackscope(&args));
    let (running, (start, first)) = wait_while_running(running, WAIT, "a first read", || {
        let n = reads(&scrape(port)?)?;
        (n > 0).then(|| (Instant::now(), n))
    });
    let (running, end) = wait_while_running(running, WAIT, "more reads", || {
        (reads(&scrape(port)?)? >= first + count).then(Instant::now)
    });
    let run = stop_bounded(running);
    run.assert_success();
    let said = run
        .stderr
        .lines()
        .find(|l| l.contains("watching process"))
        .unwrap_or_else(|| panic!("no startup line\n{}", run.describe()))
        .to_owned();
    (said, count as f64 / (end - start).as_secs_f64())
}

#[test]
fn watch_reads_at_the_rate_its_help_says() {
    let help = run_stackscope(&["watch", "--help"], RUN_TIMEOUT);
    help.assert_success();
    let rule = "[default: 1; for a --hang-after under 6 s, 6 reads within it, at most 10]";
    let flat = help.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(rule), "{}", help.stdout);
    let _serial = serial();
    // --hang-after 2 is under 6 s: 6 reads in 2 s, 3 a second.
    let (said, measured) = watch_rate(None, 9);
    assert!(said.contains(" at 3 Hz"), "{said}");
    assert!(
        (2.2..=4.0).contains(&measured),
        "the default rate for --hang-after 2 is 3 Hz, measured {measured:.2} Hz"
    );
    // An explicit --rate is the rate, whatever --hang-after.
    let (said, measured) = watch_rate(Some("1.5"), 5);
    assert!(said.contains(" at 1.5 Hz"), "{said}");
    assert!(
        (1.1..=2.0).contains(&measured),
        "--rate 1.5, measured {measured:.2} Hz"
    );
}
