//! Where the fields the fast reader needs sit in each CPython version it reads.
//!
//! One table per minor version; everything version-specific in the reader comes from here.
//! 3.11 and 3.12 keep frames in data-stack chunks, reached through
//! `tstate->cframe->current_frame`; 3.13 keeps the same design with `current_frame` in the
//! thread state, and its table is built from the interpreter's `_Py_DebugOffsets`
//! (`crate::fast::layout::debug_offsets`); 3.10 has frame objects linked by `f_back` ([`FrameDesign`]).
//! The typed numbers are the x86_64 offsets of CPython's own structs
//! (Include/internal/pycore_frame.h, cpython/code.h, cpython/pystate.h, pycore_interp.h,
//! pycore_dict.h; for 3.10, cpython/frameobject.h), the same layouts py-spy's generated
//! bindings describe, checked with `offsetof` against the installed headers.

pub(in crate::fast) mod debug_offsets;
pub(in crate::fast) mod debug_tables;

/// Which thread py-spy reports as holding the GIL, for `owns_gil`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GilHolder {
    /// 3.11: `_PyRuntime.gilstate.tstate_current`, a pointer to the holder's thread state,
    /// at the address py-spy found.
    TstateCurrent,
    /// 3.12: the GIL's `last_holder`, while it is `locked`.
    LastHolderWhileLocked,
}

/// Where a heap type's instances keep their `__dict__` when the type manages it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ManagedDict {
    /// 3.11: the values pointer four words before the object, the dict pointer three before.
    Split,
    /// 3.12: one tagged word three before the object: values (low bit set) or a dict.
    Tagged,
    /// 3.13: the dict pointer three words before the object; without a dict, the values
    /// inline after the object (at `tp_basicsize`), behind a header of [`Layout::dict_values_header`].
    Inline,
}

/// Where a thread's frames live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameDesign {
    /// 3.11+: `_PyInterpreterFrame`s pushed in the thread's data-stack chunks, linked by
    /// `previous`; the instruction is a pointer into the code object's bytecode.
    Chunks,
    /// 3.10: `PyFrameObject`s, each a heap object, linked by `f_back`; the instruction is
    /// `f_lasti`, an `int` index of code units.
    Objects,
}

/// How a dict's keys object is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DictKeys {
    /// 3.11+: log2 sizes in bytes, then the index table, then (key, value) entries for
    /// str-keyed tables or (hash, key, value) ones.
    Compact,
    /// 3.10: `dk_size` and `dk_nentries` words (a 40-byte header), an index table of
    /// `dk_size` entries of 1 to 8 bytes, then (hash, key, value) entries.
    Sized,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub minor: u64,
    pub frames: FrameDesign,
    /// Whether the thread state records the OS thread id (3.11+); before, it is found from
    /// the `pthread_t` ([`crate::fast::read::ostid`]).
    pub has_native_thread_id: bool,
    pub dict_keys: DictKeys,
    /// Where the table came from: typed here, or the interpreter's `_Py_DebugOffsets`.
    pub source: &'static str,
    /// 3.13+: the thread state holds `current_frame` itself (at [`Layout::cframe_current_frame`]);
    /// before, a `_PyCFrame` it points to at [`Layout::ts_cframe`] does.
    pub current_frame_in_tstate: bool,

    // PyInterpreterState
    pub interp_threads_head: usize,

    // PyThreadState
    pub ts_next: usize,
    pub ts_cframe: usize,
    pub ts_thread_id: usize,
    pub ts_native_thread_id: usize,
    pub ts_datastack_chunk: usize,
    pub ts_datastack_top: usize,
    pub ts_datastack_limit: usize,
    /// The prefix of the thread state read each sample: up to the end of `datastack_limit`.
    pub ts_read_len: usize,

    // _PyCFrame
    pub cframe_current_frame: usize,

    // _PyInterpreterFrame
    pub fr_code: usize,
    pub fr_previous: usize,
    pub fr_prev_instr: usize,
    pub fr_owner: usize,
    /// Bytes read of each frame: everything before `localsplus`.
    pub fr_header_len: usize,
    /// The lowest owner value of frames that hold no Python code of their own: the C-stack
    /// shims 3.12 puts at each entry into the eval loop (3), 3.14's entry frames (3) and
    /// C-stack frames (4), 3.15's sentinel base frame in the thread state (4). py-spy leaves
    /// them out.
    pub owner_shims_from: Option<u8>,
    /// 3.11: where a frame says it was the first its call of the eval loop ran (`is_entry`);
    /// later versions mark that with an entry shim (or a frame with no code) below it.
    pub fr_is_entry: Option<usize>,
    /// 3.14+: `f_executable` is a `_PyStackRef`, whose low bits are tags (`Py_TAG_BITS`,
    /// Include/internal/pycore_stackref.h): masked off to get the code object. 0 before.
    pub code_tag_bits: usize,

    // PyCodeObject
    pub co_firstlineno: usize,
    pub co_filename: usize,
    pub co_name: usize,
    pub co_qualname: usize,
    pub co_linetable: usize,
    pub co_code_adaptive: usize,

    // str and bytes
    pub unicode_ascii_header: usize,
    pub unicode_compact_header: usize,

    // GIL
    pub gil_holder: GilHolder,
    /// Where the `_gil_runtime_state` is, from the address py-spy found for the version's
    /// GIL holder: 3.11's `_PyRuntime.ceval.gil` lies 216 bytes before
    /// `_PyRuntime.gilstate.tstate_current`; for 3.12 py-spy found the GIL itself.
    pub gil_offset: isize,

    // dict, type, module: for thread names
    pub managed_dict: ManagedDict,
    pub ht_cached_keys: usize,
    /// Bytes before the value pointers of a split dict's values (3.13: capacity, size,
    /// embedded, valid).
    pub dict_values_header: usize,

    /// Where a frame's local variables and the objects they hold are described: from the
    /// interpreter's `_Py_DebugOffsets` (3.13+), for `dump --locals` ([`crate::fast::deep`]); None
    /// for the typed tables, whose locals py-spy's reader reads.
    pub objects: Option<ObjectLayout>,
}

/// What a one-off read of local variables needs beyond the stack walk: the code object's
/// names and kinds of its fast locals, and where the values of the common types keep what
/// their repr shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectLayout {
    pub co_argcount: usize,
    pub co_localsplusnames: usize,
    pub co_localspluskinds: usize,
    pub tp_name: usize,
    pub tuple_items: usize,
    pub list_items: usize,
    pub list_size: usize,
    pub float_value: usize,
    pub long_tag: usize,
    pub long_digits: usize,
    pub bytes_data: usize,
}

/// Fields at the same place in every version read here.
pub(crate) mod common {
    /// `ob_type` of any object.
    pub const OB_TYPE: usize = 8;
    /// `ob_size` of a variable-size object: code units for a code object, bytes for bytes.
    pub const OB_SIZE: usize = 16;
    /// `_PyStackChunk`: the older chunk first, then its size and the words used, then the
    /// data.
    pub const CHUNK_PREVIOUS: usize = 0;
    pub const CHUNK_HEADER: usize = 24;
    /// The smallest chunk CPython allocates (`DATA_STACK_CHUNK_SIZE`): a read of this many
    /// bytes from a chunk's start stays inside it.
    pub const MIN_CHUNK_BYTES: usize = 16 * 1024;
    /// PyASCIIObject: `length`, then `hash`, then the `state` bitfield.
    pub const UNICODE_LENGTH: usize = 16;
    pub const UNICODE_STATE: usize = 32;
    /// PyBytesObject: `ob_sval` after the var-object header and the cached hash.
    pub const BYTES_DATA: usize = 32;
    /// PyDictObject: `ma_keys`, `ma_values`.
    pub const DICT_KEYS: usize = 32;
    pub const DICT_VALUES: usize = 40;
    /// PyDictKeysObject: `dk_log2_index_bytes`, `dk_kind`, `dk_nentries`; the index table
    /// follows the header, then the entries.
    pub const DK_LOG2_INDEX_BYTES: usize = 9;
    pub const DK_KIND: usize = 10;
    pub const DK_NENTRIES: usize = 24;
    pub const DK_HEADER: usize = 32;
    /// PyTypeObject: `tp_flags`, `tp_dictoffset`.
    pub const TP_FLAGS: usize = 168;
    pub const TP_DICTOFFSET: usize = 288;
    pub const TPFLAGS_MANAGED_DICT: u64 = 1 << 4;
    /// PyModuleObject: `md_dict`.
    pub const MODULE_DICT: usize = 16;
    /// `_gil_runtime_state` (3.11 and 3.12): `interval`, `last_holder`, `locked`,
    /// `switch_number` (how many times a thread other than the last holder took it).
    pub const GIL_INTERVAL: usize = 0;
    pub const GIL_LAST_HOLDER: usize = 8;
    pub const GIL_LOCKED: usize = 16;
    pub const GIL_SWITCH_NUMBER: usize = 24;
    pub const GIL_LEN: usize = 32;
}

/// 3.10: where a frame object keeps its generator (`f_gen`, NULL for a function's frame).
pub(crate) const FRAME_OBJECT_GEN: usize = 88;

/// 3.10: frames are heap objects (Include/cpython/frameobject.h), no qualified names, no
/// native thread id; the GIL and `tstate_current` sit in `_PyRuntime` as in 3.11.
pub(crate) static PY310: Layout = Layout {
    minor: 10,
    frames: FrameDesign::Objects,
    has_native_thread_id: false,
    dict_keys: DictKeys::Sized,
    source: "typed",
    current_frame_in_tstate: true,
    interp_threads_head: 8,
    ts_next: 8,
    ts_cframe: 0,
    ts_thread_id: 176,
    ts_native_thread_id: 0,
    ts_datastack_chunk: 0,
    ts_datastack_top: 0,
    ts_datastack_limit: 0,
    ts_read_len: 184,
    // `tstate->frame`.
    cframe_current_frame: 24,
    fr_code: 32,
    fr_previous: 24,
    // `f_lasti` (an int; `f_lineno` follows it).
    fr_prev_instr: 96,
    // `f_state`.
    fr_owner: 108,
    fr_header_len: 112,
    owner_shims_from: None,
    fr_is_entry: None,
    code_tag_bits: 0,
    co_firstlineno: 40,
    co_filename: 104,
    co_name: 112,
    // No `co_qualname` before 3.11: py-spy shows the name.
    co_qualname: 112,
    co_linetable: 120,
    co_code_adaptive: 0,
    unicode_ascii_header: 48,
    unicode_compact_header: 72,
    gil_holder: GilHolder::TstateCurrent,
    gil_offset: -216,
    managed_dict: ManagedDict::Split,
    ht_cached_keys: 0,
    dict_values_header: 0,
    objects: None,
};

pub(crate) static PY311: Layout = Layout {
    minor: 11,
    frames: FrameDesign::Chunks,
    has_native_thread_id: true,
    dict_keys: DictKeys::Compact,
    source: "typed",
    current_frame_in_tstate: false,
    interp_threads_head: 16,
    ts_next: 8,
    ts_cframe: 56,
    ts_thread_id: 152,
    ts_native_thread_id: 160,
    ts_datastack_chunk: 296,
    ts_datastack_top: 304,
    ts_datastack_limit: 312,
    ts_read_len: 320,
    cframe_current_frame: 8,
    fr_code: 32,
    fr_previous: 48,
    fr_prev_instr: 56,
    fr_owner: 69,
    fr_header_len: 72,
    owner_shims_from: None,
    // `is_entry`, the byte before `owner`.
    fr_is_entry: Some(68),
    code_tag_bits: 0,
    co_firstlineno: 72,
    co_filename: 112,
    co_name: 120,
    co_qualname: 128,
    co_linetable: 136,
    co_code_adaptive: 184,
    unicode_ascii_header: 48,
    unicode_compact_header: 72,
    gil_holder: GilHolder::TstateCurrent,
    gil_offset: -216,
    managed_dict: ManagedDict::Split,
    ht_cached_keys: 872,
    dict_values_header: 0,
    objects: None,
};

pub(crate) static PY312: Layout = Layout {
    minor: 12,
    frames: FrameDesign::Chunks,
    has_native_thread_id: true,
    dict_keys: DictKeys::Compact,
    source: "typed",
    current_frame_in_tstate: false,
    interp_threads_head: 72,
    ts_next: 8,
    ts_cframe: 56,
    ts_thread_id: 136,
    ts_native_thread_id: 144,
    ts_datastack_chunk: 232,
    ts_datastack_top: 240,
    ts_datastack_limit: 248,
    ts_read_len: 256,
    cframe_current_frame: 0,
    fr_code: 0,
    fr_previous: 8,
    fr_prev_instr: 56,
    fr_owner: 70,
    fr_header_len: 72,
    owner_shims_from: Some(3),
    fr_is_entry: None,
    code_tag_bits: 0,
    co_firstlineno: 68,
    co_filename: 112,
    co_name: 120,
    co_qualname: 128,
    co_linetable: 136,
    co_code_adaptive: 192,
    unicode_ascii_header: 40,
    unicode_compact_header: 56,
    gil_holder: GilHolder::LastHolderWhileLocked,
    gil_offset: 0,
    managed_dict: ManagedDict::Tagged,
    ht_cached_keys: 880,
    dict_values_header: 0,
    objects: None,
};

impl Layout {
    /// The typed table for a CPython version (3.11, 3.12); 3.13 and later come from the
    /// interpreter's own debug offsets ([`crate::fast::layout::debug_offsets`]).
    pub(crate) fn for_version(major: u64, minor: u64) -> Option<&'static Layout> {
        match (major, minor) {
            (3, 10) => Some(&PY310),
            (3, 11) => Some(&PY311),
            (3, 12) => Some(&PY312),
            _ => None,
        }
    }

    /// The bytes of a code object compared to tell whether an address still holds the code
    /// object we cached: from `ob_type` to the end of `co_linetable`, skipping the reference
    /// count (it changes all the time).
    pub(crate) fn code_identity_range(&self) -> (usize, usize) {
        (common::OB_TYPE, self.co_linetable + 8)
    }

    /// 3.11 to 3.13: where a frame keeps the depth of its value stack (`int stacktop`, right
    /// after its instruction pointer). The eval loop sets it to -1 while the frame runs
    /// (`_PyFrame_GetStackPointer`), C calls included, and saves the depth when the frame
    /// calls a Python function or returns. 3.14 keeps a pointer there instead, and clears a
    /// returning frame's code object.
    pub(crate) fn fr_stacktop(&self) -> Option<usize> {
        let saved_depth = self.frames == FrameDesign::Chunks && (11..=13).contains(&self.minor);
        saved_depth.then_some(self.fr_prev_instr + 8)
    }
}

/// Reads a little-endian word at `offset`; `None` past the end (a short or torn copy).
pub(crate) fn word(bytes: &[u8], offset: usize) -> Option<u64> {
    let b = bytes.get(offset..offset.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

pub(crate) fn usize_at(bytes: &[u8], offset: usize) -> Option<usize> {
    word(bytes, offset).and_then(|w| usize::try_from(w).ok())
}

pub(crate) fn i32_at(bytes: &[u8], offset: usize) -> Option<i32> {
    let b = bytes.get(offset..offset.checked_add(4)?)?;
    Some(i32::from_le_bytes(b.try_into().ok()?))
}

pub(crate) fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let b = bytes.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_versions_with_a_table_are_read() {
        assert_eq!(Layout::for_version(3, 11).map(|l| l.minor), Some(11));
        assert_eq!(Layout::for_version(3, 12).map(|l| l.minor), Some(12));
        assert_eq!(Layout::for_version(3, 10).map(|l| l.minor), Some(10));
        assert!(Layout::for_version(3, 9).is_none());
        assert!(Layout::for_version(3, 13).is_none());
    }

    #[test]
    fn frame_fields_fit_in_the_header_read() {
        for l in [&PY310, &PY311, &PY312] {
            for field in [l.fr_code, l.fr_previous, l.fr_prev_instr] {
                assert!(field + 8 <= l.fr_header_len);
            }
            assert!(l.fr_owner < l.fr_header_len);
            for field in [
                l.ts_next,
                l.ts_cframe,
                l.ts_thread_id,
                l.ts_native_thread_id,
                l.ts_datastack_chunk,
                l.ts_datastack_top,
                l.ts_datastack_limit,
            ] {
                assert!(field + 8 <= l.ts_read_len);
            }
        }
    }

    #[test]
    fn short_copies_read_as_none() {
        let bytes = 7u64.to_le_bytes();
        assert_eq!(word(&bytes, 0), Some(7));
        assert_eq!(word(&bytes, 1), None);
        assert_eq!(i32_at(&bytes, 4), Some(0));
        assert_eq!(i32_at(&bytes, usize::MAX), None);
    }
}
