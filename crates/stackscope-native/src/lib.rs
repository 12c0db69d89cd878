//! Native (C/C++) stacks for stackscope: unwinds a ptrace-stopped thread of another process,
//! symbolizes its frames, and merges them with the thread's Python frames in call order, so
//! that `dump --native` shows, say, the futex wait of a deadlocked lock under the Python line
//! that called `acquire()`.
//!
//! Pure Rust, no libunwind: the stack is walked by [framehop] from the target's registers
//! (PTRACE_GETREGS) and stack memory (process_vm_readv), with the DWARF CFI of each module's
//! `.eh_frame`/`.eh_frame_hdr` and frame pointers where a module has none. Names come from the
//! ELF symbol table (`.symtab`, else `.dynsym`) and DWARF (file:line, inlined functions) of the
//! module or its separate debug file, through [object] and [addr2line].
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use stackscope_native::{merge, NativeUnwinder};
//! # let (pid, tid) = (1234, 1235);
//! # let python_frames: Vec<py_spy::Frame> = Vec::new();
//! let mut unwinder = NativeUnwinder::new(pid)?; // once per process: reads its module map
//! // ... stop the process from this thread (remoteprocess::Process::lock()), then:
//! let native = unwinder.unwind(tid)?;
//! let merged = merge(&python_frames, &native.frames);
//! // ... and drop the lock: the unwinder itself never stops or resumes the target.
//! # Ok(()) }
//! ```
//!
//! What is cached, per [`NativeUnwinder`]: each module image (by path, inode and mtime, so a
//! module seen again after `dlopen` is not re-read), framehop's unwind rule per address, and
//! every symbolized address.

mod error;
mod image;
mod maps;
mod memory;
mod merge;
mod symbolize;
mod unwinder;

pub use error::{NativeError, NativeErrorKind};
pub use memory::Registers;
pub use merge::{merge, native_frame, EntryFrame, Merged, PythonFrame};
pub use symbolize::demangle;
pub use unwinder::{NativeFrame, NativeStack, NativeUnwinder, UnwindStats};
