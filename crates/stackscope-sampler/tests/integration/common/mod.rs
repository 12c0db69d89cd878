//! What the reader tests share: fixture processes and the interpreters to run them on, both the
//! workspace's (`stackscope-testkit`).

pub use stackscope_testkit::python::{Fixture, VERSIONS};
/// Taken by the tests that measure shares (the idle rule, reused states) and the one whose
/// fixtures spin on every core (reader_consistency): with two test threads on two cores,
/// those never overlap; the others run beside them.
pub use stackscope_testkit::serial;

/// The interpreters to test: `python3`, then each of [`VERSIONS`]: pyenv's newest patch
/// release, else (3.14, 3.15) the Debian unstable root's. Says which run and, in one line each,
/// which are missing.
pub fn pythons() -> Vec<String> {
    pythons_of(&VERSIONS)
}

/// `python3`, then the interpreter of each of `versions` (pyenv's, else the Debian root's).
pub fn pythons_of(versions: &[&str]) -> Vec<String> {
    stackscope_testkit::python::interpreters(versions)
}
