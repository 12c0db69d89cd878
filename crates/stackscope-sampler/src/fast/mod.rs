//! stackscope's own stack reader for CPython 3.10 to 3.15.
//!
//! py-spy, in its default mode, stops every thread for each sample and copies each frame,
//! code object, name, file name and line table with its own system call: about eight reads a
//! frame, nothing kept. This reader
//!
//! - keeps what never changes about a code object (names, file, decoded line table) by
//!   address, checked each sample against a few identity fields read with the frames
//!   ([`objects::code`]);
//! - copies each thread's frames with its whole data-stack chunk (3.11+; 3.10's frames are
//!   heap objects, copied ahead by the addresses its last stack had), all threads in one
//!   `process_vm_readv`, and walks the frame links inside the copy ([`memory::snapshot`],
//!   [`read::stack`]);
//! - does not stop the process: the GIL, read before and after the copy, says which threads
//!   can have run during it ([`proof::gil`]); every other thread's copy is a stack it had. The
//!   one that may have run (the holder) is copied eight times with random gaps and kept when
//!   the copies agree ([`proof::holder`]); one that keeps failing that is stopped alone, read
//!   and resumed ([`Strategy`]).
//!
//! So a sample of a steady process costs one read of its memory (every thread in one
//! `process_vm_readv`, split only past `IOV_MAX` ranges) and one `pread` of the `/proc` stat
//! file of each thread that runs, moved, or was last read over 100 ms ago (a sleeping thread
//! whose Python state did not change keeps its OS state, [`read::activity`]); a thread is
//! stopped in a fraction of a percent of samples.
//!
//! The folders, in the order a sample uses them:
//!
//! - [`layout`]: where the fields sit in each version: tables typed here for 3.10, 3.11 and
//!   3.12; for 3.13 to 3.15 the interpreter's own `_Py_DebugOffsets`
//!   ([`layout::debug_offsets`], whose shape per version is in [`layout::debug_tables`]). A
//!   table this reader does not know is read by py-spy's reader where py-spy reads the
//!   version, with one notice, and refused where it does not; 3.9 and older are read by
//!   py-spy.
//! - [`memory`]: reading the target's memory in batches, and each thread's part of a read.
//! - [`objects`]: decoding code objects, line tables, strings, values, file and thread names.
//! - [`proof`]: proving a thread did not move without reading its frames (the GIL, a still
//!   thread's proof, context switches).
//! - [`read`]: the read loop: attempts, a sample's reads until every thread is whole, the
//!   frame walk, and the model of a thread between samples ([`read::thread_model`], which
//!   every module that reads threads shares).
//! - [`deep`]: what a sample leaves out, read once for a dump (file paths, locals), by its own
//!   [`deep::DeepReader`].
//!
//! Whether a thread is idle is decided the same way for every version and both readers
//! ([`crate::idle`]).

mod deep;
mod error;
mod layout;
mod memory;
mod objects;
mod proof;
mod read;
mod stats;
#[cfg(test)]
mod test_threads;

pub(crate) use deep::{DeepFrame, DeepThread};
pub(crate) use error::{Misfits, ReadError};
pub(crate) use memory::addrmap::{PidMap, TidMap as ByTid};
pub(crate) use proof::switches::OffCpu;
use read::os_states::os_state;
pub(crate) use read::ostid::OsTids;
use read::reader::Read;
pub(crate) use read::reader::{
    notice_once, FastReader, StatesBefore, Strategy, ThreadRead, Unread,
};
use read::state_before::Before;
