//! What the reader tests share: fixture processes and the interpreters to run them on, both the
//! workspace's (`stackscope-testkit`).

pub use stackscope_testkit::python::{Fixture, VERSIONS};

/// The interpreters to test: `python3`, then the newest patch release of each of
/// [`VERSIONS`] that pyenv has. Says which run and, in one line each, which are missing.
pub fn pythons() -> Vec<String> {
    pythons_of(&VERSIONS)
}

/// `python3`, then the newest patch release of each of `versions` that pyenv has.
pub fn pythons_of(versions: &[&str]) -> Vec<String> {
    stackscope_testkit::python::interpreters(versions)
}
