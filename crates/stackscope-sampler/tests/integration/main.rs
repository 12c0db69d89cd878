//! The sampler against real interpreters, one test binary (one link) for every area: reading
//! live and stopped targets, our reader against py-spy's, the idle rule on each installed
//! version. Run one area with `cargo test -p stackscope-sampler --test integration idle_rule::`.
//!
//! The areas share only `common` (fixture processes, the interpreters to run them on); the
//! reader a test wants is chosen per attach ([`stackscope_sampler::ReaderChoice`]), never
//! through the process's environment.

mod common;

mod allocations;

mod frame_origins;
mod idle_reuse;
mod idle_rule;
mod live_target;
mod native_kept;
mod reader_consistency;
mod reader_differential;
mod reader_strategies;
mod shared_stacks;
mod short_calls;
mod still_proofs;
