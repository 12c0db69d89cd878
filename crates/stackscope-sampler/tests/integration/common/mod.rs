//! What the reader tests share: fixture processes and the interpreters to run them on.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A fixture process, killed on Drop. It prints `ready PID` when every thread is in place.
pub struct Fixture {
    pub child: Child,
    pub pid: u32,
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Fixture {
    pub fn start(python: &str, code: &str) -> Fixture {
        let mut child = Command::new(python)
            .arg("-c")
            .arg(code)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("fixture says it is ready");
        // The pid from the interpreter itself: `python3` may be a launcher script.
        let pid = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Fixture {
            child,
            pid,
            _stdout: stdout,
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The minor versions the reader tests run on, wherever pyenv has them.
pub const VERSIONS: [&str; 5] = ["3.10", "3.11", "3.12", "3.13", "3.14"];

/// pyenv's root: `$PYENV_ROOT`, else what `pyenv root` says, else `~/.pyenv`.
fn pyenv_root() -> Option<std::path::PathBuf> {
    if let Some(root) = std::env::var_os("PYENV_ROOT") {
        return Some(root.into());
    }
    if let Ok(out) = Command::new("pyenv").arg("root").output() {
        let root = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() && !root.is_empty() {
            return Some(root.into());
        }
    }
    std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".pyenv"))
}

/// The interpreters to test: `python3`, then the newest patch release of each of
/// [`VERSIONS`] that pyenv has. Says which run and, in one line each, which are missing.
pub fn pythons() -> Vec<String> {
    pythons_of(&VERSIONS)
}

/// `python3`, then the newest patch release of each of `versions` that pyenv has.
pub fn pythons_of(versions: &[&str]) -> Vec<String> {
    let mut out = vec!["python3".to_owned()];
    let mut installed: Vec<String> = pyenv_root()
        .and_then(|r| std::fs::read_dir(r.join("versions")).ok())
        .map(|dir| {
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    installed.sort_by_key(|v| {
        v.split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0))
            .collect::<Vec<_>>()
    });
    let root = pyenv_root().unwrap_or_default();
    for &minor in versions {
        let found = installed
            .iter()
            .rev()
            .filter(|v| v.strip_prefix(minor).is_some_and(|r| r.starts_with('.')))
            .map(|v| root.join("versions").join(v).join("bin/python3"))
            .find(|p| p.exists());
        match found {
            Some(p) => out.push(p.to_string_lossy().into_owned()),
            None => eprintln!("skipped: Python {minor} is not installed under pyenv"),
        }
    }
    eprintln!("interpreters: {}", out.join(", "));
    out
}
