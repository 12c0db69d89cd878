//! The read loop: the reader itself ([`reader`]), one try at a set of threads ([`attempt`]),
//! what it is asked to read ([`request`]), each thread's part in it ([`part`]) and the judging
//! of its walks ([`judge`]), a sample's reads until every thread is whole ([`sample_read`]),
//! walking frames ([`stack`]), naming them and keeping a thread's last stacks ([`recent`]), the
//! thread list and the model of a thread between samples ([`threads`], [`thread_model`]), each
//! thread's OS state ([`activity`]) and its reading around a sample ([`os_states`], kept
//! from before the read in [`state_before`]), reads for a caller that stops threads itself
//! ([`stopped`]), and OS thread ids before 3.11 ([`ostid`]).

pub(super) mod activity;
pub(super) mod attempt;
pub(super) mod judge;
pub(super) mod os_states;
pub(super) mod ostid;
pub(super) mod part;
pub(super) mod reader;
pub(super) mod recent;
pub(super) mod request;
pub(super) mod sample_read;
pub(super) mod stack;
pub(super) mod state_before;
pub(super) mod stopped;
pub(super) mod thread_model;
pub(super) mod threads;
