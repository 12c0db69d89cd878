//! A thread whose time is below one Python line, in compiled code, is pointed at: the summary
//! (terminal and `summary.json`'s `compiled_code`) names the thread and the line and `--native`;
//! Python code that does its work itself is not.

use crate::common;

use common::*;
use std::fs;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// A job that spends its time in zlib (C) called from one line of `compress_all`.
const IN_ZLIB: &str = r#"import os, zlib
data = os.urandom(1 << 20)

def compress_all():
    while True:
        zlib.compress(data, 9)

compress_all()
"#;

/// A job that does its work in Python, its loop's body spread over four lines of like cost.
const IN_PYTHON: &str = r#"def spread():
    acc = 0
    while True:
        for i in range(200):
            a = i * i
            b = a + i
            c = b ^ a
            acc = (acc + c) & 0xFFFF

spread()
"#;

fn record_script(out: &OutDir, script: &std::path::Path, extra: &[&str]) -> Run {
    let mut cmd = stackscope(&["record", "--duration", "2", "--gpu", "off", "-o", out.arg()]);
    cmd.args(extra).arg("--").arg("python3").arg(script);
    run_with_timeout(cmd, RUN_TIMEOUT)
}

#[test]
fn time_below_one_python_line_names_the_line_and_native() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let script = tmp.path().join("in_zlib.py");
    fs::write(&script, IN_ZLIB).expect("script");
    let out = OutDir::new();
    let run = record_script(&out, &script, &[]);
    run.assert_duration_ended();
    let compiled = &out.summary()["compiled_code"];
    assert_eq!(
        compiled["frame"], "compress_all (in_zlib.py:6)",
        "{compiled}"
    );
    assert!(
        compiled["thread"]
            .as_str()
            .is_some_and(|t| t.starts_with("MainThread")),
        "{compiled}"
    );
    assert!(num(&compiled["share"], "share") >= 2.0 / 3.0, "{compiled}");
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("Compiled code: "))
        .unwrap_or_else(|| panic!("no compiled-code line\n{}", run.describe()));
    assert!(
        line.contains("compress_all (in_zlib.py:6)") && line.contains("--native"),
        "{line}"
    );

    // Pure Python that moves from line to line: nothing to point at.
    let script = tmp.path().join("in_python.py");
    fs::write(&script, IN_PYTHON).expect("script");
    let out = OutDir::new();
    let run = record_script(&out, &script, &[]);
    run.assert_duration_ended();
    assert!(
        out.summary()["compiled_code"].is_null(),
        "{}",
        out.summary()
    );
    assert!(!run.stdout.contains("Compiled code:"), "{}", run.stdout);
}
