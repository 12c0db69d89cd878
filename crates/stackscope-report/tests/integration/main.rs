//! The report writers, one test binary: golden files and the whole output directory over a
//! fixed recording, and recordings rebuilt from their sample log (the testkit's synthetic one).

mod common;

mod golden;
mod outputs;
mod rebuild;
