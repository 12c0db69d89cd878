//! The reader's layout for CPython 3.13 and later, from the interpreter itself.
//!
//! Since 3.13 CPython puts `_Py_DebugOffsets` at the very start of `_PyRuntime`, for
//! debuggers and profilers: the cookie `xdebugpy`, the version (`PY_VERSION_HEX`), whether
//! the build is free-threaded, then tables of offsets of the fields an out-of-process reader
//! needs (runtime, interpreter and thread state, interpreter frame, code object, str, ...).
//! Where the reader needs those fields it takes them from there, not from a table typed
//! here, so a patch release (or a build with other struct sizes) reads right the day it
//! ships.
//!
//! The tables' own shape is fixed only within a minor version: each known version's is
//! described by field name in [`crate::fast::layout::debug_tables`] (3.13, 3.14, 3.15). What 3.14 and
//! 3.15 change in the design the reader follows: `f_executable` is a tagged `_PyStackRef`
//! (its tag bits masked off), the eval loop's entry frames and 3.15's sentinel base frame
//! (in the thread state) are told by their `owner`. A version whose table this reader does
//! not know, or a free-threaded build (no GIL to bracket reads with), gets a [`Refusal`]:
//! py-spy's reader reads it where it can, with one notice (`crate::target` decides).
//!
//! A few things the tables do not publish are structural and checked rather than assumed
//! where possible: `datastack_top` and `datastack_limit` follow `datastack_chunk`; the GIL's
//! `switch_number` follows `locked`; str's `length`/`state` and dict's `ma_keys`/`ma_values`
//! must sit where the other versions have them; and for thread names the heap type's
//! `ht_cached_keys` (published from 3.15; before, 464 bytes past the type object) and the
//! 8-byte header of inline values.

use std::sync::Mutex;

use crate::fast::layout::debug_tables::Shape;
use crate::fast::layout::{
    common, DictKeys, FrameDesign, GilHolder, Layout, ManagedDict, ObjectLayout,
};
use crate::fast::memory::remote::Remote;

const COOKIE: &[u8; 8] = b"xdebugpy";
/// How far below the main interpreter state `_PyRuntime` may start (the main interpreter is
/// a field of `_PyRuntime`, some hundred kilobytes in).
const MAX_SEARCH: usize = 4 << 20;
const WINDOW: usize = 64 << 10;

/// Why a 3.13+ interpreter is left to py-spy's reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal(pub String);

/// The layout for the interpreter whose main interpreter state is at `interp`.
pub(crate) fn layout(
    remote: &mut Remote,
    minor: u64,
    interp: usize,
) -> Result<&'static Layout, Refusal> {
    let runtime = find_runtime(remote, interp)
        .ok_or_else(|| Refusal("no _Py_DebugOffsets found before the interpreter state".into()))?;
    let shape = Shape::for_minor(minor).ok_or_else(|| {
        Refusal(format!(
            "the _Py_DebugOffsets of 3.{minor} is not a table this reader knows"
        ))
    })?;
    let table = remote
        .read(runtime, shape.len())
        .map_err(|e| Refusal(format!("cannot read _Py_DebugOffsets: {e}")))?;
    let layout = parse(&table, minor)?;
    // The table must lead back to the interpreter py-spy found.
    let head_at = Fields {
        table: &table,
        shape,
    }
    .get("runtime_state", "interpreters_head")?;
    let head = remote
        .read(runtime + head_at, 8)
        .ok()
        .and_then(|b| crate::fast::layout::usize_at(&b, 0));
    if head != Some(interp) {
        return Err(Refusal(
            "_Py_DebugOffsets does not lead to the interpreter state".into(),
        ));
    }
    Ok(intern(layout))
}

/// Scans down from `interp` for the cookie at an 8-byte boundary.
fn find_runtime(remote: &mut Remote, interp: usize) -> Option<usize> {
    let mut end = interp & !7;
    let lowest = interp.saturating_sub(MAX_SEARCH);
    while end > lowest {
        let start = end.saturating_sub(WINDOW).max(lowest);
        let bytes = remote.read(start, end - start).ok()?;
        // Highest first: the nearest cookie below the interpreter.
        let mut off = (end - start) & !7;
        while off >= 8 {
            off -= 8;
            if bytes.get(off..off + 8) == Some(COOKIE.as_slice()) {
                return Some(start + off);
            }
        }
        end = start;
    }
    None
}

/// The `i`th 64-bit word of the table, as an offset.
fn field(table: &[u8], i: usize) -> Result<usize, Refusal> {
    crate::fast::layout::usize_at(table, i * 8)
        .filter(|&v| v < 1 << 20)
        .ok_or_else(|| Refusal(format!("_Py_DebugOffsets: word {i} unreadable or absurd")))
}

/// The table's shape for the interpreter's version, once its header is checked: the
/// cookie, the version it states, and a GIL.
fn shape_of(table: &[u8], minor: u64) -> Result<&'static Shape, Refusal> {
    if table.get(0..8) != Some(COOKIE.as_slice()) {
        return Err(Refusal("_Py_DebugOffsets: no cookie".into()));
    }
    let version = crate::fast::layout::word(table, 8).unwrap_or(0);
    let (t_major, t_minor) = (version >> 24, (version >> 16) & 0xff);
    if (t_major, t_minor) != (3, minor) {
        return Err(Refusal(format!(
            "_Py_DebugOffsets says {t_major}.{t_minor}, the interpreter {minor}"
        )));
    }
    let shape = Shape::for_minor(minor).ok_or_else(|| {
        Refusal(format!(
            "the _Py_DebugOffsets of 3.{minor} is not a table this reader knows"
        ))
    })?;
    if crate::fast::layout::word(table, 16).unwrap_or(1) != 0 {
        return Err(Refusal(
            "a free-threaded build: no GIL to tell which threads ran during a read".into(),
        ));
    }
    if table.len() < shape.len() {
        return Err(Refusal("_Py_DebugOffsets: a short read".into()));
    }
    Ok(shape)
}

/// A table read by field name ([`Shape`]).
struct Fields<'a> {
    table: &'a [u8],
    shape: &'static Shape,
}

impl Fields<'_> {
    /// `section.field`, which this version's table must have.
    fn get(&self, section: &str, name: &str) -> Result<usize, Refusal> {
        self.opt(section, name)?.ok_or_else(|| {
            Refusal(format!(
                "_Py_DebugOffsets of 3.{} has no {section}.{name}",
                self.shape.minor
            ))
        })
    }

    /// `section.field`, where this version's table has it.
    fn opt(&self, section: &str, name: &str) -> Result<Option<usize>, Refusal> {
        self.shape
            .index(section, name)
            .map(|i| field(self.table, i))
            .transpose()
    }
}

/// What the reader assumes rather than reads: the fields every version read here has at
/// the same place, checked against the table.
fn check_fixed(f: &Fields) -> Result<(), Refusal> {
    let gil_state = f.get("interpreter_state", "gil_runtime_state")?;
    let gil_locked = f.get("interpreter_state", "gil_runtime_state_locked")?;
    let gil_holder = f.get("interpreter_state", "gil_runtime_state_holder")?;
    let mut checks = vec![
        (
            gil_locked.checked_sub(gil_state) == Some(common::GIL_LOCKED),
            "GIL locked",
        ),
        (
            gil_holder.checked_sub(gil_state) == Some(common::GIL_LAST_HOLDER),
            "GIL holder",
        ),
        (f.get("pyobject", "ob_type")? == common::OB_TYPE, "ob_type"),
        (
            f.get("type_object", "tp_flags")? == common::TP_FLAGS,
            "tp_flags",
        ),
        (
            f.get("dict_object", "ma_keys")? == common::DICT_KEYS,
            "ma_keys",
        ),
        (
            f.get("dict_object", "ma_values")? == common::DICT_VALUES,
            "ma_values",
        ),
        (
            f.get("bytes_object", "ob_size")? == common::OB_SIZE,
            "bytes ob_size",
        ),
        (
            f.get("bytes_object", "ob_sval")? == common::BYTES_DATA,
            "bytes ob_sval",
        ),
        (
            f.get("unicode_object", "state")? == common::UNICODE_STATE,
            "str state",
        ),
        (
            f.get("unicode_object", "length")? == common::UNICODE_LENGTH,
            "str length",
        ),
    ];
    // Published from 3.15 on.
    if let Some(dictoffset) = f.opt("type_object", "tp_dictoffset")? {
        checks.push((dictoffset == common::TP_DICTOFFSET, "tp_dictoffset"));
    }
    match checks.iter().find(|(ok, _)| !ok) {
        Some((_, what)) => Err(Refusal(format!(
            "_Py_DebugOffsets: {what} is not where this reader expects it"
        ))),
        None => Ok(()),
    }
}

/// Bytes of `PyHeapTypeObject` between its `PyTypeObject` and `ht_cached_keys`: the five
/// method suites (async, number, mapping, sequence, buffer) and `ht_name`, `ht_slots`,
/// `ht_qualname` (Include/cpython/object.h, unchanged from 3.11 to 3.14). 3.15 publishes
/// the offset itself.
const HEAP_TYPE_TO_CACHED_KEYS: usize = 464;

/// The reader's layout from a 3.13, 3.14 or 3.15 table.
fn parse(table: &[u8], minor: u64) -> Result<Layout, Refusal> {
    let shape = shape_of(table, minor)?;
    let f = Fields { table, shape };
    check_fixed(&f)?;
    let ts = |name| f.get("thread_state", name);
    let frame = |name| f.get("interpreter_frame", name);
    let code = |name| f.get("code_object", name);
    let datastack_chunk = ts("datastack_chunk")?;
    // The thread state is read up to the last field used: `datastack_limit` comes last
    // in every version so far, but the table does not promise it.
    let ts_last = [
        ts("next")?,
        ts("current_frame")?,
        ts("thread_id")?,
        ts("native_thread_id")?,
        datastack_chunk + 16,
    ];
    let ascii_size = f.get("unicode_object", "asciiobject_size")?;
    let ht_cached_keys = match f.opt("heap_type_object", "ht_cached_keys")? {
        Some(at) => at,
        None => f.get("type_object", "size")? + HEAP_TYPE_TO_CACHED_KEYS,
    };
    let layout = Layout {
        minor,
        frames: FrameDesign::Chunks,
        has_native_thread_id: true,
        dict_keys: DictKeys::Compact,
        source: "_Py_DebugOffsets",
        current_frame_in_tstate: true,
        interp_threads_head: f.get("interpreter_state", "threads_head")?,
        ts_next: ts("next")?,
        ts_cframe: 0,
        ts_thread_id: ts("thread_id")?,
        ts_native_thread_id: ts("native_thread_id")?,
        ts_datastack_chunk: datastack_chunk,
        ts_datastack_top: datastack_chunk + 8,
        ts_datastack_limit: datastack_chunk + 16,
        ts_read_len: ts_last.iter().max().copied().unwrap_or(0) + 8,
        cframe_current_frame: ts("current_frame")?,
        fr_code: frame("executable")?,
        fr_previous: frame("previous")?,
        fr_prev_instr: frame("instr_ptr")?,
        fr_owner: frame("owner")?,
        fr_header_len: frame("localsplus")?,
        // 3.13's FRAME_OWNED_BY_CSTACK; 3.14's and 3.15's FRAME_OWNED_BY_INTERPRETER, and
        // the one after it (Include/internal/pycore_frame.h, pycore_interpframe_structs.h).
        owner_shims_from: Some(3),
        fr_is_entry: None,
        // Py_TAG_BITS of a default (GIL) build.
        code_tag_bits: if minor >= 14 { 3 } else { 0 },
        co_firstlineno: code("firstlineno")?,
        co_filename: code("filename")?,
        co_name: code("name")?,
        co_qualname: code("qualname")?,
        co_linetable: code("linetable")?,
        co_code_adaptive: code("co_code_adaptive")?,
        unicode_ascii_header: ascii_size,
        // PyCompactUnicodeObject: `utf8_length` and `utf8` after the ASCII header.
        unicode_compact_header: f
            .opt("unicode_object", "compactunicodeobject_size")?
            .unwrap_or(ascii_size + 16),
        gil_holder: GilHolder::LastHolderWhileLocked,
        gil_offset: 0,
        managed_dict: ManagedDict::Inline,
        ht_cached_keys,
        dict_values_header: 8,
        objects: Some(objects(&f)?),
    };
    check_frame(&layout, frame("size")?)?;
    Ok(layout)
}

/// Where locals and the values they hold are ([`ObjectLayout`]), for `dump --locals`.
fn objects(f: &Fields) -> Result<ObjectLayout, Refusal> {
    let code = |name| f.get("code_object", name);
    Ok(ObjectLayout {
        co_argcount: code("argcount")?,
        co_localsplusnames: code("localsplusnames")?,
        co_localspluskinds: code("localspluskinds")?,
        tp_name: f.get("type_object", "tp_name")?,
        tuple_items: f.get("tuple_object", "ob_item")?,
        list_items: f.get("list_object", "ob_item")?,
        list_size: f.get("list_object", "ob_size")?,
        float_value: f.get("float_object", "ob_fval")?,
        long_tag: f.get("long_object", "lv_tag")?,
        long_digits: f.get("long_object", "ob_digit")?,
        bytes_data: f.get("bytes_object", "ob_sval")?,
    })
}

/// Whether the frame and code fields fit what the walk reads.
fn check_frame(layout: &Layout, frame_size: usize) -> Result<(), Refusal> {
    let frame_fields = [layout.fr_code, layout.fr_previous, layout.fr_prev_instr];
    if frame_size == 0
        || layout.fr_header_len > frame_size
        || frame_fields.iter().any(|&o| o + 8 > layout.fr_header_len)
        || layout.fr_owner >= layout.fr_header_len
        || layout.co_firstlineno >= layout.co_linetable
    {
        return Err(Refusal(
            "_Py_DebugOffsets: a frame or code layout this reader cannot read".into(),
        ));
    }
    Ok(())
}

/// One leaked copy of each distinct layout (a process tree or a re-attach builds the same
/// one again): bounded by the distinct builds met.
fn intern(layout: Layout) -> &'static Layout {
    static KNOWN: Mutex<Vec<&'static Layout>> = Mutex::new(Vec::new());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = known.iter().find(|l| ***l == layout) {
        return l;
    }
    let leaked: &'static Layout = Box::leak(Box::new(layout));
    known.push(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3.13.0 table as the installed interpreter has it, built by hand.
    fn table_313() -> Vec<u8> {
        let len = Shape::for_minor(13).map_or(0, |s| s.len());
        let mut words = vec![0u64; len / 8];
        words[1] = 0x030d_00f0;
        let set = |w: &mut Vec<u64>, i: usize, v: u64| w[i] = v;
        // interpreter_state: threads_head, gil_runtime_state, locked, holder.
        set(&mut words, 9, 7344);
        set(&mut words, 15, 7360);
        set(&mut words, 17, 7376);
        set(&mut words, 18, 7368);
        // thread_state: next, current_frame, thread_id, native_thread_id, datastack_chunk.
        for (i, v) in [(21, 16), (23, 72), (24, 152), (25, 160), (26, 232)] {
            set(&mut words, i, v);
        }
        // interpreter_frame: size, previous, executable, instr_ptr, localsplus, owner.
        for (i, v) in [(28, 80), (29, 8), (30, 0), (31, 56), (32, 72), (33, 70)] {
            set(&mut words, i, v);
        }
        // code_object: filename, name, qualname, linetable, firstlineno, co_code_adaptive.
        for (i, v) in [
            (35, 112),
            (36, 120),
            (37, 128),
            (38, 136),
            (39, 68),
            (43, 200),
        ] {
            set(&mut words, i, v);
        }
        for (i, v) in [
            (45, 8),
            (46, 416),
            (49, 168),
            (57, 32),
            (58, 40),
            (65, 16),
            (66, 32),
        ] {
            set(&mut words, i, v);
        }
        for (i, v) in [(68, 32), (69, 16), (70, 40)] {
            set(&mut words, i, v);
        }
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes[0..8].copy_from_slice(COOKIE);
        bytes
    }

    #[test]
    fn a_313_table_gives_a_layout() {
        let l = parse(&table_313(), 13).expect("layout");
        assert!(l.current_frame_in_tstate);
        assert_eq!(l.cframe_current_frame, 72);
        assert_eq!(l.ts_datastack_limit, 248);
        assert_eq!(l.ts_read_len, 256);
        assert_eq!(l.fr_header_len, 72);
        assert_eq!(l.unicode_compact_header, 56);
    }

    #[test]
    fn other_versions_and_free_threaded_builds_are_refused() {
        assert!(parse(&table_313(), 12).is_err());
        // A 3.13 table calling itself 3.14 is too short for 3.14's shape.
        let mut t = table_313();
        t[8..16].copy_from_slice(&0x030e_00f0u64.to_le_bytes());
        assert!(parse(&t, 14).is_err());
        let mut t = table_313();
        t[16..24].copy_from_slice(&1u64.to_le_bytes());
        assert!(parse(&t, 13).unwrap_err().0.contains("free-threaded"));
        let mut t = table_313();
        t[0] = b'y';
        assert!(parse(&t, 13).is_err());
    }

    #[test]
    fn the_same_layout_is_leaked_once() {
        let a = intern(parse(&table_313(), 13).expect("layout"));
        let b = intern(parse(&table_313(), 13).expect("layout"));
        assert!(std::ptr::eq(a, b));
    }

    /// Captured from Debian's python3.14 3.14.10 and python3.15 3.15.2
    /// (tests/data/README.md).
    const TABLE_314: &[u8] = include_bytes!("../../../tests/data/debug_offsets_3.14.bin");
    const TABLE_315: &[u8] = include_bytes!("../../../tests/data/debug_offsets_3.15.bin");

    #[test]
    fn the_captured_314_table_decodes() {
        let l = parse(TABLE_314, 14).expect("3.14 layout");
        assert_eq!(l.interp_threads_head, 7344);
        assert_eq!(
            (l.ts_next, l.cframe_current_frame, l.ts_thread_id),
            (8, 72, 152)
        );
        assert_eq!((l.ts_native_thread_id, l.ts_datastack_chunk), (160, 232));
        assert_eq!((l.ts_datastack_limit, l.ts_read_len), (248, 256));
        assert_eq!((l.fr_code, l.fr_previous, l.fr_prev_instr), (0, 8, 56));
        assert_eq!((l.fr_owner, l.fr_header_len), (74, 80));
        assert_eq!((l.co_filename, l.co_name, l.co_qualname), (112, 120, 128));
        assert_eq!(
            (l.co_linetable, l.co_firstlineno, l.co_code_adaptive),
            (136, 68, 208)
        );
        assert_eq!((l.unicode_ascii_header, l.unicode_compact_header), (40, 56));
        assert_eq!(l.ht_cached_keys, 880);
        assert_eq!((l.code_tag_bits, l.owner_shims_from), (3, Some(3)));
    }

    #[test]
    fn the_captured_315_table_decodes() {
        let l = parse(TABLE_315, 15).expect("3.15 layout");
        assert_eq!(l.interp_threads_head, 7336);
        // `base_frame` and the profiler's fields now sit between `current_frame` and
        // `thread_id`.
        assert_eq!(
            (l.ts_next, l.cframe_current_frame, l.ts_thread_id),
            (8, 72, 176)
        );
        assert_eq!((l.ts_native_thread_id, l.ts_datastack_chunk), (184, 256));
        assert_eq!((l.ts_datastack_limit, l.ts_read_len), (272, 280));
        assert_eq!((l.fr_code, l.fr_previous, l.fr_prev_instr), (0, 8, 56));
        assert_eq!((l.fr_owner, l.fr_header_len), (74, 80));
        assert_eq!(
            (l.co_linetable, l.co_firstlineno, l.co_code_adaptive),
            (136, 68, 208)
        );
        assert_eq!(l.unicode_compact_header, 56);
        // Published by 3.15 itself.
        assert_eq!(l.ht_cached_keys, 888);
        assert_eq!(l.code_tag_bits, 3);
    }

    /// A table with its version field set to `hex`.
    fn with_version(table: &[u8], hex: u64) -> Vec<u8> {
        let mut t = table.to_vec();
        t[8..16].copy_from_slice(&hex.to_le_bytes());
        t
    }

    #[test]
    fn a_table_of_an_unknown_version_is_refused() {
        // A 3.16 table (here, 3.15's bytes calling themselves 3.16) is no table we know.
        let t = with_version(TABLE_315, 0x0310_00a1);
        assert!(parse(&t, 16)
            .unwrap_err()
            .0
            .contains("not a table this reader knows"));
        // Nor is a table that disagrees with the interpreter's version.
        assert!(parse(TABLE_314, 15).unwrap_err().0.contains("says 3.14"));
        assert!(parse(&with_version(TABLE_314, 0x030f_02f0), 14).is_err());
        // 3.14's table read as 3.15's shape: too short, or fields out of place.
        assert!(parse(&with_version(TABLE_314, 0x030f_02f0), 15).is_err());
        let mut t = TABLE_315.to_vec();
        t[16..24].copy_from_slice(&1u64.to_le_bytes());
        assert!(parse(&t, 15).unwrap_err().0.contains("free-threaded"));
    }
}
