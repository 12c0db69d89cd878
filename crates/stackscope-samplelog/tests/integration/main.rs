//! The sample log end to end, one test binary (one link) for every area: round trips, bounded
//! tables, damaged logs, size on disk, segments, stretching (rebuilding a recording from its
//! log is the report crate's). Run one area with
//! `cargo test -p stackscope-samplelog --test integration damage::`.

mod common;

mod bounded;
mod damage;
mod memory;
mod roundtrip;
mod segments;
mod size;
mod stretch;
