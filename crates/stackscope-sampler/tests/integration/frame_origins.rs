//! Where each frame's code comes from, decided by both readers from the file's full path: a job
//! laid out as a package and run with `python -m` is the job's code (its shortened names,
//! `origin_pkg/loop.py`, look like a package's), an installed package in a virtual
//! environment's site-packages is a package, and the interpreter's own `lib/pythonX.Y` is the
//! standard library.

use std::time::{Duration, Instant};

use stackscope_event::{FileOrigin, Frame};
use stackscope_sampler::{PythonTarget, ReaderChoice, TargetOptions, ThreadStack};
use stackscope_testkit::python::venv_with_package;

use crate::common::{pythons_of, Fixture};

fn is_python(frame: &Frame) -> bool {
    !frame.native
}

/// The stacks of the main thread (caught in the installed package's call into the job's
/// transforms) and of the waiter, read by `reader` within a few seconds.
fn read_both(pid: u32, reader: ReaderChoice) -> (String, ThreadStack, ThreadStack) {
    let options = TargetOptions {
        blocking: true,
        ..TargetOptions::default()
    };
    let mut target = PythonTarget::attach_with_reader(pid, &options, reader).expect("attach");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(stacks) = target.read_stacks() {
            let named = |name: &str| {
                stacks
                    .iter()
                    .find(|s| s.thread.name.as_deref() == Some(name))
                    .cloned()
            };
            let main = named("MainThread").filter(|s| {
                s.frames.iter().any(|f| &*f.function == "augment")
                    && s.frames.iter().any(|f| &*f.function == "apply")
            });
            if let (Some(main), Some(waiter)) = (main, named("waiter")) {
                return (target.reader().to_owned(), main, waiter);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the main thread never seen in apply -> augment"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_package_run_with_dash_m_is_the_jobs_code_by_either_reader() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut readers = Vec::new();
    for python in pythons_of(&["3.10", "3.13"]) {
        let dir = tmp.path().join(python.replace('/', "_"));
        let venv_python = venv_with_package(&python, &dir);
        let job = Fixture::start_module(&venv_python, "origin_pkg.loop");
        for reader in [ReaderChoice::Default, ReaderChoice::PySpy] {
            let (used, main, waiter) = read_both(job.pid, reader);
            readers.push(used.clone());
            let context = format!("{python}, {used}'s reader");
            let python_frames: Vec<&Frame> = main.frames.iter().filter(|f| is_python(f)).collect();
            let origin_of = |file: &str| {
                python_frames
                    .iter()
                    .find(|f| f.file.ends_with(file))
                    .map(|f| f.origin)
                    .unwrap_or_else(|| panic!("no {file} frame ({context}): {python_frames:?}"))
            };
            for module in [
                "origin_pkg/loop.py",
                "origin_pkg/data.py",
                "origin_pkg/transforms.py",
            ] {
                assert_eq!(origin_of(module), FileOrigin::Job, "{module} ({context})");
            }
            assert_eq!(
                origin_of("fakeaug/__init__.py"),
                FileOrigin::Package,
                "{context}"
            );
            // `-m` runs the module through runpy: the standard library's.
            assert!(
                python_frames
                    .iter()
                    .any(|f| f.file.contains("runpy") && f.origin == FileOrigin::Stdlib),
                "no runpy frame of the standard library ({context}): {python_frames:?}"
            );
            let waits: Vec<&Frame> = waiter.frames.iter().filter(|f| is_python(f)).collect();
            for file in ["queue.py", "threading.py"] {
                let frame = waits
                    .iter()
                    .find(|f| &*f.file == file)
                    .unwrap_or_else(|| panic!("no {file} frame ({context}): {waits:?}"));
                assert_eq!(frame.origin, FileOrigin::Stdlib, "{file} ({context})");
            }
        }
    }
    // 3.13 is read by ours by default, and py-spy's is asked for: both readers decided.
    assert!(readers.iter().any(|r| r == "stackscope"), "{readers:?}");
    assert!(readers.iter().any(|r| r == "py-spy"), "{readers:?}");
}
