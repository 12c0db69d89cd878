//! What the reader tests share: fixture processes and the interpreters to run them on, both the
//! workspace's (`stackscope-testkit`).

pub use stackscope_testkit::python::{Fixture, VERSIONS};
/// Taken by the tests that measure shares (the idle rule, reused states) and the one whose
/// fixtures spin on every core (reader_consistency): with two test threads on two cores,
/// those never overlap; the others run beside them.
pub use stackscope_testkit::serial;

/// The interpreters to test: `python3`, then the newest patch release of each of
/// [`VERSIONS`] that pyenv has. Says which run and, in one line each, which are missing.
pub fn pythons() -> Vec<String> {
    pythons_of(&VERSIONS)
}

/// `python3`, then the newest patch release of each of `versions` that pyenv has.
pub fn pythons_of(versions: &[&str]) -> Vec<String> {
    stackscope_testkit::python::interpreters(versions)
}
