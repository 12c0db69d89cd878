//! `watch` on a job that hangs while its GPU idles, reads busy on few SMs (a rank stuck in a
//! collective: the NCCL signature), or is busy: a report is written whatever the GPU does, and
//! its `gpu.state` says which; `stackscope_hung` agrees. The GPU is the fake NVML library.

use crate::common;
use crate::hang_diagnosis::{
    looks_hung_lines, ready_u32, wait_for_report, HANG_AFTER_SECS, RUN_TIMEOUT,
};

use common::*;
use serde_json::Value;
use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A report of one stuck process with native frames, on a loaded 2-core machine.
const REPORT_TIMEOUT: Duration = Duration::from_secs(HANG_AFTER_SECS + 20);

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The body of `GET /metrics` on the loopback, if it answers 200.
pub(crate) fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status: u16 = response.split_whitespace().nth(1)?.parse().ok()?;
    (status == 200).then(|| response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()))?
}

/// The value of `stackscope_hung` for `pid` on the page, if it has the series.
fn hung_value(page: &str, pid: u32) -> Option<String> {
    let label = format!("pid=\"{pid}\"");
    page.lines()
        .find(|l| l.starts_with("stackscope_hung{") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_owned)
}

/// What a hang under a fake GPU gave: the report's JSON and text, the metrics page once
/// `stackscope_hung` read 1 (or the last one seen), and watch's run.
struct Watched {
    doc: Value,
    text: String,
    hung: Option<String>,
    page: String,
    run: Run,
}

/// Watches a job stuck in Python (hangs_later.py, hanging at once) under a fake GPU scripted
/// by `device` (one device's JSON), serving metrics.
fn watch_a_hang_under(device: &str) -> Watched {
    let _serial = serial();
    let fixture = Fixture::start("hangs_later.py", &["--work-secs", "0"]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let out = OutDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let pid_arg = pid.to_string();
    let hang_after = HANG_AFTER_SECS.to_string();
    let mut cmd = stackscope(&[
        "watch",
        "--pid",
        &pid_arg,
        "--hang-after",
        &hang_after,
        "--metrics-addr",
        &addr,
        "-o",
        out.arg(),
        "--nvml-lib",
    ]);
    cmd.arg(fake_nvml()).env(
        "STACKSCOPE_FAKE_NVML",
        format!(r#"{{"devices":[{device}],"sample_period_ms":50}}"#),
    );
    let mut running = spawn_stackscope(cmd);
    let found = wait_for_report(&mut running, &out.out, Instant::now() + REPORT_TIMEOUT);
    // The gauge follows the same rule; give it a few scrapes to say so.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut hung, mut page) = (None, String::new());
    while found.is_some() && Instant::now() < deadline {
        if let Some(body) = scrape(port) {
            hung = hung_value(&body, pid);
            page = body;
            if hung.as_deref() == Some("1") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    let txt = found.unwrap_or_else(|| {
        panic!(
            "no hang report (a GPU of {device} must not stop one)\n{}",
            run.describe()
        )
    });
    run.assert_success();
    run.assert_no_panic();
    let text = fs::read_to_string(&txt).expect("report text");
    let json_path = txt.with_extension("json");
    let doc: Value = serde_json::from_str(&fs::read_to_string(&json_path).expect("report json"))
        .unwrap_or_else(|e| panic!("{} is not JSON ({e})", json_path.display()));
    Watched {
        doc,
        text,
        hung,
        page,
        run,
    }
}

fn assert_classified(w: &Watched, state: &str, utilization: f64, sm: Option<f64>, words: &str) {
    let gpu = &w.doc["gpu"];
    assert_eq!(gpu["state"], state, "{:#}", w.doc["gpu"]);
    let mean = gpu["mean_utilization"]
        .as_f64()
        .unwrap_or_else(|| panic!("gpu.mean_utilization: {gpu:#}"));
    assert!(
        (mean - utilization).abs() < 1.0,
        "mean utilization {mean}, expected {utilization}: {gpu:#}"
    );
    match sm {
        Some(sm) => {
            let mean_sm = gpu["mean_sm_active_pct"]
                .as_f64()
                .unwrap_or_else(|| panic!("gpu.mean_sm_active_pct: {gpu:#}"));
            assert!((mean_sm - sm).abs() < 1.0, "SM activity {mean_sm}: {gpu:#}");
        }
        None => assert!(gpu["mean_sm_active_pct"].is_null(), "{gpu:#}"),
    }
    // The old fields stay.
    assert!(w.doc["gpu_mean_utilization"].is_number(), "{:#}", w.doc);
    assert!(w.doc["gpu_idle"].is_boolean(), "{:#}", w.doc);
    // The text says it in its first lines, before the dump.
    let head: Vec<&str> = w.text.lines().take(4).collect();
    assert!(
        head.iter().any(|l| l.contains(words)),
        "the report's first lines say {words:?}:\n{}",
        w.text
    );
    assert!(
        w.text.find(words) < w.text.find("Process "),
        "the GPU's sentence comes before the dump:\n{}",
        w.text
    );
    // The console line says the state.
    let hung = looks_hung_lines(&w.run.stdout);
    assert_eq!(hung.len(), 1, "{}", w.run.describe());
    assert!(
        hung[0].contains(&format!(", GPU {state})")),
        "the line names the GPU's state {state}: {}",
        hung[0]
    );
    assert_eq!(
        w.hung.as_deref(),
        Some("1"),
        "stackscope_hung agrees with the report whatever the GPU does:\n{}",
        w.page
    );
}

#[test]
fn watch_reports_a_hang_on_a_gpu_busy_on_few_sms_as_busy_low_sm() {
    let w = watch_a_hang_under(r#"{"utilization":100,"gpm":{"sm_active":1}}"#);
    assert_classified(
        &w,
        "busy_low_sm",
        100.0,
        Some(1.0),
        "stuck in a kernel or a collective",
    );
    assert!(
        w.text.contains("SM activity 1%"),
        "the sentence gives the SM activity:\n{}",
        w.text
    );
}

#[test]
fn watch_reports_a_hang_on_a_busy_gpu_as_busy() {
    let w = watch_a_hang_under(r#"{"utilization":100,"gpm":{"sm_active":90}}"#);
    assert_classified(&w, "busy", 100.0, Some(90.0), "a kernel is still working");
}

#[test]
fn watch_reports_a_hang_on_an_idle_gpu_as_idle() {
    let w = watch_a_hang_under(r#"{"utilization":0}"#);
    assert_classified(&w, "idle", 0.0, None, "waits on something on the host");
    assert_eq!(w.doc["gpu_idle"], true, "{:#}", w.doc);
}
