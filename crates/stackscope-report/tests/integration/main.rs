//! The report writers over a fixed recording, one test binary: golden files and the whole
//! output directory.

mod common;

mod golden;
mod outputs;
