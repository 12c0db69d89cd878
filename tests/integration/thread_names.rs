//! The main thread is `MainThread` however Python is started: a venv's `bin/python` (a symlink
//! to the interpreter, whose site-packages imports nothing at startup), pyenv's shim, the
//! interpreter's own path, and `python -m`; on every CPython here (3.10 to 3.13 from pyenv,
//! 3.14 and 3.15 from `scripts/sid-root`'s Debian root, one line for each that is missing).
//! The fixture imports no `threading`, so the name cannot come from `threading._active` when
//! the installation does not import it either.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{run_stackscope, Fixture};
use stackscope_testkit::python::{interpreters_of, pyenv_root, SID_VERSIONS, VERSIONS};

const TIMEOUT: Duration = Duration::from_secs(60);

/// One way of starting the fixture: what to call it, the program, and whether it reruns
/// itself as `python -m`.
struct Way {
    name: String,
    python: PathBuf,
    module: bool,
    /// `PYENV_VERSION` for pyenv's shim: the version it is to pick.
    pyenv_version: Option<String>,
}

/// A venv of `python` in `dir` (no pip: nothing to download), and the path that runs it.
/// The Debian root's interpreter runs inside its root: its venv is made there (under /tmp,
/// which the root shares) and run through a copy of the root's wrapper that starts the venv's
/// `bin/python` instead of the interpreter.
fn venv(minor: &str, python: &Path, dir: &Path) -> Result<PathBuf, String> {
    let made = Command::new(python)
        .args(["-m", "venv", "--without-pip"])
        .arg(dir)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !made.status.success() {
        return Err(format!(
            "python{minor} -m venv failed: {}",
            String::from_utf8_lossy(&made.stderr).trim()
        ));
    }
    let venv_python = dir.join("bin/python");
    if !SID_VERSIONS.contains(&minor) || python.starts_with(pyenv_root().unwrap_or_default()) {
        return Ok(venv_python);
    }
    let wrapper = std::fs::read_to_string(python).map_err(|e| e.to_string())?;
    let line = format!("python=/usr/bin/python{minor}\n");
    if !wrapper.contains(&line) {
        return Err(format!(
            "{} is no wrapper of scripts/sid-root",
            python.display()
        ));
    }
    let own = dir.join("python-in-root");
    let text = wrapper.replace(&line, &format!("python={}\n", venv_python.display()));
    std::fs::write(&own, text).map_err(|e| e.to_string())?;
    let made_executable = Command::new("chmod").arg("755").arg(&own).status();
    made_executable
        .ok()
        .filter(|s| s.success())
        .ok_or("chmod failed")?;
    Ok(own)
}

/// The ways to start Python `minor` at `python`: its venv (plain and `-m`), its own path, and
/// pyenv's shim when pyenv has that version.
fn ways(minor: &str, python: &Path, tmp: &Path) -> Vec<Way> {
    let way = |name: &str, python: &Path, module| Way {
        name: format!("{name} ({minor})"),
        python: python.to_owned(),
        module,
        pyenv_version: None,
    };
    let mut out = vec![way("the interpreter's path", python, false)];
    match venv(minor, python, &tmp.join(format!("venv-{minor}"))) {
        Ok(venv_python) => {
            out.push(way("a venv's bin/python", &venv_python, false));
            out.push(way("a venv's python -m", &venv_python, true));
        }
        Err(why) => eprintln!("skipped: Python {minor} through a venv: {why}"),
    }
    let shim = pyenv_root()
        .map(|root| root.join("shims").join(format!("python{minor}")))
        .filter(|shim| shim.exists() && python.starts_with(pyenv_root().unwrap_or_default()));
    // pyenv's interpreters are ROOT/versions/VERSION/bin/python3.
    let version = python.ancestors().nth(2).and_then(Path::file_name);
    match shim.zip(version) {
        Some((shim, version)) => out.push(Way {
            pyenv_version: Some(version.to_string_lossy().into_owned()),
            ..way("pyenv's shim", &shim, false)
        }),
        None => eprintln!("skipped: Python {minor} through pyenv's shim: pyenv has no {minor}"),
    }
    out
}

/// The name `dump --json` gives the thread whose OS id is `pid`.
fn main_thread_name(pid: u32) -> (Option<String>, String) {
    let run = run_stackscope(&["dump", "--pid", &pid.to_string(), "--json"], TIMEOUT);
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    let main = dump["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["os_thread_id"].as_u64() == Some(u64::from(pid)))
        .unwrap_or_else(|| panic!("no thread {pid} in the dump:\n{}", run.stdout));
    (main["name"].as_str().map(str::to_owned), run.stdout)
}

#[test]
fn the_main_thread_is_named_however_python_is_started() {
    let _serial = common::serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut without_threading = 0;
    for (minor, python) in interpreters_of(&VERSIONS) {
        for way in ways(&minor, &python, tmp.path()) {
            let args: &[&str] = if way.module { &["module"] } else { &[] };
            let mut fixture = Fixture::script("quiet_main.py")
                .python(&way.python)
                .args(args)
                .timeout(TIMEOUT);
            if let Some(version) = &way.pyenv_version {
                fixture = fixture.env("PYENV_VERSION", version);
            }
            let fixture = fixture.start();
            let ready = fixture.ready_json();
            let pid = ready["pid"].as_u64().expect("pid") as u32;
            assert_eq!(ready["module"], way.module, "{}: {ready}", way.name);
            if way.name.contains("venv") {
                assert_eq!(ready["venv"], true, "{}: {ready}", way.name);
            }
            let imported = ready["threading"] == true;
            without_threading += usize::from(!imported);
            let (name, dump) = main_thread_name(pid);
            eprintln!(
                "{}: threading imported: {imported}, main thread {name:?}",
                way.name
            );
            assert_eq!(name.as_deref(), Some("MainThread"), "{}:\n{dump}", way.name);
        }
    }
    // The case that needs the name from elsewhere than `threading` was met (a venv imports
    // nothing at startup).
    assert!(
        without_threading > 0,
        "every way imported threading at startup"
    );
}
