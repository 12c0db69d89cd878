//! Where frames come from, in a recording: decided by the sampler from each file's full path,
//! kept in `samples.log`, and what `report` reads back from it; a log written before origins
//! were kept reads with them inferred from the shortened names, as before.

use std::path::Path;
use std::time::Duration;

use stackscope_event::{Event, FileOrigin};
use stackscope_report::{rebuild, RebuildOptions};
use stackscope_samplelog::{SampleLogReader, LOG_FILE_NAME};
use stackscope_testkit::python::venv_with_package;

use crate::common::*;

/// Each distinct Python frame's file and origin in the sample log at `dir`.
pub fn logged_origins(dir: &Path) -> Vec<(String, FileOrigin)> {
    let reader = SampleLogReader::open(&dir.join(LOG_FILE_NAME)).expect("sample log");
    let mut seen: Vec<(String, FileOrigin)> = Vec::new();
    for event in reader {
        let Event::Stack(sample) = event.expect("a whole log") else {
            continue;
        };
        for frame in sample.frames.iter().filter(|f| !f.native) {
            let entry = (frame.file.to_string(), frame.origin);
            if !seen.contains(&entry) {
                seen.push(entry);
            }
        }
    }
    seen
}

/// The origins `report` (the aggregate rebuilt from the log) gives the frames whose label
/// names `file`.
fn reported_origins(dir: &Path, file: &str) -> Vec<FileOrigin> {
    let rebuilt = rebuild(dir, &RebuildOptions::default()).expect("rebuild");
    let table = rebuilt.aggregator.stack_table();
    let mut origins: Vec<FileOrigin> = table
        .stacks()
        .iter()
        .flat_map(|s| s.frames.iter())
        .filter_map(|&id| table.frame(id))
        .filter(|f| f.label.contains(file))
        .map(|f| f.origin)
        .collect();
    origins.sort();
    origins.dedup();
    origins
}

#[test]
fn a_package_run_with_dash_m_is_recorded_as_the_jobs_code() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let python = venv_with_package("python3", tmp.path());
    let job = Fixture::start_module(&python, "origin_pkg.loop");
    let out = OutDir::new();
    let pid = job.pid.to_string();
    let args = ["attach", "--pid", &pid, "--duration", "2", "--idle"];
    run_stackscope(
        &[&args[..], &["--gpu", "off", "-o", out.arg()]].concat(),
        Duration::from_secs(60),
    )
    .assert_success();
    let logged = logged_origins(&out.out);
    let origin_of = |file: &str| {
        let origins: Vec<FileOrigin> = logged
            .iter()
            .filter(|(f, _)| f == file)
            .map(|(_, o)| *o)
            .collect();
        assert!(
            !origins.is_empty(),
            "no {file} frame in the log: {logged:?}"
        );
        origins
    };
    for module in [
        "origin_pkg/loop.py",
        "origin_pkg/data.py",
        "origin_pkg/transforms.py",
    ] {
        assert_eq!(origin_of(module), [FileOrigin::Job], "{module}");
        assert_eq!(
            reported_origins(&out.out, module),
            [FileOrigin::Job],
            "{module}"
        );
    }
    assert_eq!(origin_of("fakeaug/__init__.py"), [FileOrigin::Package]);
    // The waiter blocks in the standard library's queue.
    for file in ["queue.py", "threading.py"] {
        assert_eq!(origin_of(file), [FileOrigin::Stdlib], "{file}");
    }
    assert_eq!(
        reported_origins(&out.out, "(queue.py:"),
        [FileOrigin::Stdlib]
    );
}

#[test]
fn a_log_written_before_origins_were_kept_reads_them_inferred() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/recordings/dataloader-2-workers-idle");
    // The H100 job's own script, the standard library's queue and an installed torch.
    assert_eq!(reported_origins(&dir, "(train.py:"), [FileOrigin::Job]);
    assert_eq!(
        reported_origins(&dir, "(threading.py:"),
        [FileOrigin::Stdlib]
    );
    assert_eq!(
        reported_origins(&dir, "(torch/utils/data/dataloader.py:"),
        [FileOrigin::Package]
    );
}
