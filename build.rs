//! Puts the commit the binary is built from into `stackscope --version`, as the compile-time
//! variable `STACKSCOPE_BUILD_COMMIT`: `git rev-parse --short HEAD` when the package's own
//! directory holds a `.git` (a clone or a worktree), else `$STACKSCOPE_COMMIT` (a build from a
//! source tarball or an sdist, which has no `.git`), else `unknown`.
//!
//! The crate is built again only when the commit can have changed: when HEAD moves (a checkout,
//! a commit on a detached HEAD) or the branch it names moves (a commit, a reset, a pull), or
//! `$STACKSCOPE_COMMIT` changes. Not on every edit of the working tree: a `rerun-if-changed`
//! line turns off cargo's default of running this again for any file of the package.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=STACKSCOPE_COMMIT");

    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let from_git = if root.join(".git").exists() {
        git_commit(&root)
    } else {
        None
    };
    let commit = from_git
        .or_else(|| {
            std::env::var("STACKSCOPE_COMMIT")
                .ok()
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=STACKSCOPE_BUILD_COMMIT={commit}");
}

/// The short commit of HEAD, and `rerun-if-changed` lines for the files that say where HEAD is.
fn git_commit(root: &Path) -> Option<String> {
    let commit = git(root, &["rev-parse", "--short", "HEAD"])?;
    // HEAD itself (per worktree): changes on a checkout, and on a commit while detached.
    watch(root, "HEAD");
    // The branch HEAD names ("HEAD" again when detached): a loose ref file, or a line of
    // packed-refs until the next commit writes the loose file again. Watch the loose file when
    // it is there, else its directory (where that file will appear), and packed-refs.
    if let Some(branch) = git(root, &["rev-parse", "--symbolic-full-name", "HEAD"]) {
        if branch.starts_with("refs/") {
            if let Some(path) = git_path(root, &branch) {
                if path.is_file() {
                    emit(&path);
                } else if let Some(dir) = path.parent().filter(|d| d.is_dir()) {
                    emit(dir);
                }
            }
        }
    }
    watch(root, "packed-refs");
    Some(commit)
}

/// A `rerun-if-changed` line for a file of the git directory, when it is there (a path that is
/// not there would make cargo run this script on every build).
fn watch(root: &Path, name: &str) {
    if let Some(path) = git_path(root, name).filter(|p| p.exists()) {
        emit(&path);
    }
}

fn emit(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

/// Where git keeps `name` (a worktree's HEAD in its own directory, refs in the common one).
fn git_path(root: &Path, name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(git(root, &["rev-parse", "--git-path", name])?);
    Some(if path.is_absolute() {
        path
    } else {
        root.join(path)
    })
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}
