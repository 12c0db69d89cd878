//! Reading the target's memory: batches of ranges in one `process_vm_readv` ([`remote`]),
//! how much a read copies ([`extent`]), what one thread's part of a sample asks for and gets
//! back ([`snapshot`]), and maps keyed by addresses ([`addrmap`]).

pub(super) mod addrmap;
pub(super) mod extent;
pub(super) mod remote;
pub(super) mod snapshot;
