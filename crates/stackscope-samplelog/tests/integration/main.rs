//! The sample log end to end, one test binary (one link) for every area: round trips, bounded
//! tables, damaged logs, rebuilding recordings, size on disk. Run one area with
//! `cargo test -p stackscope-samplelog --test integration damage::`.

mod common;

mod bounded;
mod damage;
mod rebuild;
mod roundtrip;
mod size;
