//! `stackscope --version`: the version and the commit the binary was built from (build.rs),
//! what a user pastes into a bug report. .ci/run checks the same of the wheel's binary, against
//! the exact commit it built.

use crate::common;

use common::*;
use std::process::Command;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// "stackscope VERSION (commit COMMIT)" -> COMMIT, for this package's version.
fn commit_of(line: &str) -> Option<&str> {
    let prefix = format!("stackscope {} (commit ", env!("CARGO_PKG_VERSION"));
    line.strip_prefix(&prefix)?
        .strip_suffix(')')
        .filter(|c| !c.is_empty() && !c.contains(char::is_whitespace))
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(repo_root())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    for flag in ["--version", "-V"] {
        let run = run_stackscope(&[flag], RUN_TIMEOUT);
        run.assert_success();
        let line = run.stdout.trim_end();
        assert_eq!(line.lines().count(), 1, "one line\n{}", run.describe());
        let commit = commit_of(line).unwrap_or_else(|| {
            panic!(
                "expected 'stackscope {} (commit COMMIT)'\n{}",
                env!("CARGO_PKG_VERSION"),
                run.describe()
            )
        });
        if !repo_root().join(".git").exists() {
            // Built from a tree without git: $STACKSCOPE_COMMIT or "unknown" (build.rs).
            println!(
                "no .git in {}: {flag} says {commit:?}",
                repo_root().display()
            );
            continue;
        }
        let Some(head) = git(&["rev-parse", "HEAD"]) else {
            println!(
                "git cannot read {}: {flag} says {commit:?}",
                repo_root().display()
            );
            continue;
        };
        assert!(
            commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "a short commit hash, got {commit:?}\n{}",
            run.describe()
        );
        // HEAD itself, or, where a commit landed in this checkout after the binary was built,
        // one that HEAD contains.
        let contained = head.starts_with(commit)
            || git(&["merge-base", "--is-ancestor", commit, "HEAD"]).is_some();
        assert!(
            contained,
            "{flag} names {commit}, not HEAD ({head}) nor a commit before it\n{}",
            run.describe()
        );
    }
}
