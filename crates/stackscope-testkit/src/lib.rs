//! What stackscope's tests share, in one dev-only place (a dev-dependency of the workspace's
//! packages, never published):
//!
//! - [`python`]: a Python fixture process that says when it is ready (a ready file, or its
//!   first line on stdout), waited for with a deadline and killed on Drop; and the interpreters
//!   the tests run on (`python3` plus each pyenv minor version installed; 3.14 and 3.15, where
//!   pyenv lacks them, from a Debian unstable root built once by `scripts/sid-root`; one
//!   printed line for each that is missing).
//! - [`events`]: builders of the sampler's events (stack samples, GPU readings, process
//!   events) for the aggregate, report and sample log tests.
//! - [`dumps`]: builders of the dumps (`ProcessDump`, `ThreadDump`, `FrameDump`) for the
//!   tests of the dump writers and of `merge`.
//! - [`synthetic`]: a synthetic training-like recording and its sample log header, for the
//!   sample log's and the report's tests.
//! - [`cdylib`]: the workspace's fake driver libraries, built on demand beside the test.
//!
//! Panics are how a test helper fails: this crate is for tests only.

#![allow(clippy::unwrap_used)]

pub mod cdylib;
pub mod dumps;
pub mod events;
pub mod python;
pub mod synthetic;

use std::sync::{Mutex, MutexGuard};

/// Tests that measure shares or rates, and tests whose fixtures keep CPUs busy, take this lock,
/// so that on a small machine two of them in one test binary do not compete: one lock per test
/// binary, held for the test's length. Other tests run beside them.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
