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
//! The tables' own shape is fixed only within a minor version, so it is parsed per minor
//! version; a version whose table or frame design this reader does not know (3.14 keeps
//! the current frame as a tagged `_PyStackRef`, a free-threaded build has no GIL to bracket
//! reads with) gets a [`Refusal`]: py-spy's reader reads it, with one notice.
//!
//! A few things the tables do not publish are structural and checked rather than assumed
//! where possible: `datastack_top` and `datastack_limit` follow `datastack_chunk`; the GIL's
//! `switch_number` follows `locked`; str's `length`/`state` and dict's `ma_keys`/`ma_values`
//! must sit where the other versions have them; and for thread names the heap type's
//! `ht_cached_keys` (880) and the 8-byte header of inline values.

use std::sync::Mutex;

use super::layout::{common, DictKeys, FrameDesign, GilHolder, Layout, ManagedDict};
use super::remote::Remote;

const COOKIE: &[u8; 8] = b"xdebugpy";
/// How far below the main interpreter state `_PyRuntime` may start (the main interpreter is
/// a field of `_PyRuntime`, some hundred kilobytes in).
const MAX_SEARCH: usize = 4 << 20;
const WINDOW: usize = 64 << 10;
/// Bytes of the 3.13 table.
const TABLE_313: usize = 584;

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
    let table = remote
        .read(runtime, TABLE_313)
        .map_err(|e| Refusal(format!("cannot read _Py_DebugOffsets: {e}")))?;
    let layout = parse(&table, minor)?;
    // The table must lead back to the interpreter py-spy found.
    let head = remote
        .read(runtime + field(&table, 5)?, 8)
        .ok()
        .and_then(|b| super::layout::usize_at(&b, 0));
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
    super::layout::usize_at(table, i * 8)
        .filter(|&v| v < 1 << 20)
        .ok_or_else(|| Refusal(format!("_Py_DebugOffsets: word {i} unreadable or absurd")))
}

/// The reader's layout from a 3.13 table.
fn parse(table: &[u8], minor: u64) -> Result<Layout, Refusal> {
    if table.get(0..8) != Some(COOKIE.as_slice()) {
        return Err(Refusal("_Py_DebugOffsets: no cookie".into()));
    }
    let version = super::layout::word(table, 8).unwrap_or(0);
    let (t_major, t_minor) = (version >> 24, (version >> 16) & 0xff);
    if (t_major, t_minor) != (3, minor) {
        return Err(Refusal(format!(
            "_Py_DebugOffsets says {t_major}.{t_minor}, the interpreter {minor}"
        )));
    }
    if minor != 13 {
        return Err(Refusal(format!(
            "the frame design of 3.{minor} (tagged stack references, a new offsets table) is \
             not one this reader knows"
        )));
    }
    if super::layout::word(table, 16).unwrap_or(1) != 0 {
        return Err(Refusal(
            "a free-threaded build: no GIL to tell which threads ran during a read".into(),
        ));
    }
    // Word indexes in the 3.13 table (Include/internal/pycore_runtime.h).
    // runtime_state: 3..6; interpreter_state: 6..19; thread_state: 19..28;
    // interpreter_frame: 28..34; code_object: 34..44; pyobject: 44..46; type_object: 46..50;
    // tuple: 50..53; list: 53..56; dict: 56..59; float: 59..61; long: 61..64;
    // bytes: 64..67; unicode: 67..71; gc: 71..73.
    let f = |i| field(table, i);
    let gil_state = f(15)?;
    let gil_locked = f(17)?.checked_sub(gil_state);
    let gil_holder = f(18)?.checked_sub(gil_state);
    let ts = [f(21)?, f(23)?, f(24)?, f(25)?, f(26)?];
    let datastack_chunk = f(26)?;
    let frame_size = f(28)?;
    let unicode_state = f(68)?;
    let unicode_length = f(69)?;
    let ascii_size = f(70)?;
    let checks = [
        (gil_locked == Some(common::GIL_LOCKED), "GIL locked"),
        (gil_holder == Some(common::GIL_LAST_HOLDER), "GIL holder"),
        (f(45)? == common::OB_TYPE, "ob_type"),
        (f(49)? == common::TP_FLAGS, "tp_flags"),
        (f(57)? == common::DICT_KEYS, "ma_keys"),
        (f(58)? == common::DICT_VALUES, "ma_values"),
        (f(65)? == common::OB_SIZE, "bytes ob_size"),
        (f(66)? == common::BYTES_DATA, "bytes ob_sval"),
        (unicode_state == common::UNICODE_STATE, "str state"),
        (unicode_length == common::UNICODE_LENGTH, "str length"),
    ];
    if let Some((_, what)) = checks.iter().find(|(ok, _)| !ok) {
        return Err(Refusal(format!(
            "_Py_DebugOffsets: {what} is not where this reader expects it"
        )));
    }
    let fr_header_len = f(32)?;
    let layout = Layout {
        minor,
        frames: FrameDesign::Chunks,
        has_native_thread_id: true,
        dict_keys: DictKeys::Compact,
        source: "_Py_DebugOffsets",
        current_frame_in_tstate: true,
        interp_threads_head: f(9)?,
        ts_next: f(21)?,
        ts_cframe: 0,
        ts_thread_id: f(24)?,
        ts_native_thread_id: f(25)?,
        ts_datastack_chunk: datastack_chunk,
        ts_datastack_top: datastack_chunk + 8,
        ts_datastack_limit: datastack_chunk + 16,
        ts_read_len: ts
            .iter()
            .max()
            .copied()
            .unwrap_or(0)
            .max(datastack_chunk + 16)
            + 8,
        cframe_current_frame: f(23)?,
        fr_code: f(30)?,
        fr_previous: f(29)?,
        fr_prev_instr: f(31)?,
        fr_owner: f(33)?,
        fr_header_len,
        // FRAME_OWNED_BY_CSTACK (Include/internal/pycore_frame.h).
        owner_cstack: Some(3),
        co_firstlineno: f(39)?,
        co_filename: f(35)?,
        co_name: f(36)?,
        co_qualname: f(37)?,
        co_linetable: f(38)?,
        co_code_adaptive: f(43)?,
        unicode_ascii_header: ascii_size,
        // PyCompactUnicodeObject: `utf8_length` and `utf8` after the ASCII header.
        unicode_compact_header: ascii_size + 16,
        gil_holder: GilHolder::LastHolderWhileLocked,
        gil_offset: 0,
        managed_dict: ManagedDict::Inline,
        ht_cached_keys: 880,
        dict_values_header: 8,
    };
    let frame_fields = [layout.fr_code, layout.fr_previous, layout.fr_prev_instr];
    if frame_size == 0
        || fr_header_len > frame_size
        || frame_fields.iter().any(|&o| o + 8 > fr_header_len)
        || layout.fr_owner >= fr_header_len
        || layout.co_firstlineno >= layout.co_linetable
    {
        return Err(Refusal(
            "_Py_DebugOffsets: a frame or code layout this reader cannot read".into(),
        ));
    }
    Ok(layout)
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
        let mut words = vec![0u64; TABLE_313 / 8];
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
        for (i, v) in [(45, 8), (49, 168), (57, 32), (58, 40), (65, 16), (66, 32)] {
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
        let mut t = table_313();
        t[8..16].copy_from_slice(&0x030e_00f0u64.to_le_bytes());
        assert!(parse(&t, 14).unwrap_err().0.contains("frame design"));
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
}
