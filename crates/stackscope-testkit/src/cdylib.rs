//! The workspace's cdylibs (`fake-nvml`, `fake-nvml-minimal`), which `cargo test` of one
//! package or one test binary does not build: found beside the test executable, or built there
//! first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::SystemTime;

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `target/<profile>/`, where cargo leaves cdylibs (a test executable is in its `deps/`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf()
}

/// `lib<package>.so` of the workspace's cdylib `package` (its directory under `crates/` has the
/// same name), built with `cargo build -p` where it is missing or older than its sources. Tests
/// that ask at the same time wait for the one that builds.
pub fn cdylib(package: &str) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let dir = profile_dir();
    let lib = dir.join(format!("lib{}.so", package.replace('-', "_")));
    let _building = BUILD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if is_stale(&lib, package) {
        build(&dir, package);
    }
    assert!(
        lib.exists(),
        "{} is missing after building it",
        lib.display()
    );
    lib
}

/// Missing, or older than any source file of its package.
fn is_stale(lib: &Path, package: &str) -> bool {
    let Ok(built) = lib.metadata().and_then(|m| m.modified()) else {
        return true;
    };
    let src = workspace_root().join("crates").join(package).join("src");
    let newest = std::fs::read_dir(src)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.metadata().and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    newest > built
}

/// `cargo build -p package` into the target directory and profile the tests were built in.
fn build(profile_dir: &Path, package: &str) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = profile_dir.parent().expect("target dir");
    let mut command = Command::new(cargo);
    command
        .args(["build", "-p", package])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(workspace_root());
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            command.arg("--release");
        }
        Some(profile) => {
            command.args(["--profile", profile]);
        }
    }
    let status = command.status().expect("cargo build runs");
    assert!(status.success(), "cargo build -p {package} failed");
}
