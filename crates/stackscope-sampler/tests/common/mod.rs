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

/// The interpreters to test: 3.11 (`python3` here) and any 3.12 pyenv has.
pub fn pythons() -> Vec<String> {
    let mut out = vec!["python3".to_owned()];
    if let Some(home) = std::env::var_os("HOME") {
        let versions = std::path::Path::new(&home).join(".pyenv/versions");
        if let Ok(dir) = std::fs::read_dir(versions) {
            let mut found: Vec<String> = dir
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("3.12"))
                .map(|e| e.path().join("bin/python3").to_string_lossy().into_owned())
                .filter(|p| std::path::Path::new(p).exists())
                .collect();
            found.sort();
            out.extend(found.into_iter().take(1));
        }
    }
    out
}
