//! The shape of `_Py_DebugOffsets` in each minor version the reader knows.
//!
//! The table is a fixed header (cookie, `PY_VERSION_HEX`, free-threaded flag) and then
//! sections of 64-bit offsets, one section per struct, with fields in the order of
//! CPython's `Include/internal/pycore_debug_offsets.h` (3.13: pycore_runtime.h). The order
//! and the set of fields change between minor versions (3.14 added `threads_main`, the
//! frame's `stackpointer`, sets, generators, the debugger's fields; 3.15 the base frame, the
//! exception state, heap types), never within one. Each version's shape is written here
//! once, by the header's own names, and the parser asks for fields by name: a field that
//! moved is found where it now is, and one this reader needs that a version lacks is a
//! refusal rather than a wrong offset.

/// One section of the table: its name and its fields, in order.
type Section = (&'static str, &'static [&'static str]);

/// The fields every table starts with: `cookie[8]`, `version`, `free_threaded`.
const HEADER_WORDS: usize = 3;

#[derive(Debug)]
pub(crate) struct Shape {
    pub minor: u64,
    sections: &'static [Section],
}

impl Shape {
    /// The shape of the table of CPython 3.`minor`, if this reader knows it.
    pub(crate) fn for_minor(minor: u64) -> Option<&'static Shape> {
        [&PY313, &PY314, &PY315]
            .into_iter()
            .find(|s| s.minor == minor)
    }

    /// Bytes of the whole table.
    pub(crate) fn len(&self) -> usize {
        8 * (HEADER_WORDS + self.sections.iter().map(|(_, f)| f.len()).sum::<usize>())
    }

    /// The index of the word that holds `section.field`; None where this version's table
    /// has no such field.
    pub(crate) fn index(&self, section: &str, field: &str) -> Option<usize> {
        let mut at = HEADER_WORDS;
        for (name, fields) in self.sections {
            if *name == section {
                return fields.iter().position(|f| *f == field).map(|i| at + i);
            }
            at += fields.len();
        }
        None
    }
}

const RUNTIME: Section = (
    "runtime_state",
    &["size", "finalizing", "interpreters_head"],
);
const PYOBJECT: Section = ("pyobject", &["size", "ob_type"]);
const TUPLE: Section = ("tuple_object", &["size", "ob_item", "ob_size"]);
const LIST: Section = ("list_object", &["size", "ob_item", "ob_size"]);
const SET: Section = ("set_object", &["size", "used", "table", "mask"]);
const DICT: Section = ("dict_object", &["size", "ma_keys", "ma_values"]);
const FLOAT: Section = ("float_object", &["size", "ob_fval"]);
const LONG: Section = ("long_object", &["size", "lv_tag", "ob_digit"]);
const BYTES: Section = ("bytes_object", &["size", "ob_size", "ob_sval"]);
const GEN: Section = (
    "gen_object",
    &["size", "gi_name", "gi_iframe", "gi_frame_state"],
);
const LLIST: Section = ("llist_node", &["next", "prev"]);
const DEBUGGER: Section = (
    "debugger_support",
    &[
        "eval_breaker",
        "remote_debugger_support",
        "remote_debugging_enabled",
        "debugger_pending_call",
        "debugger_script_path",
        "debugger_script_path_size",
    ],
);

/// 3.13's thread state section (3.14 keeps it).
const THREAD_313: Section = (
    "thread_state",
    &[
        "size",
        "prev",
        "next",
        "interp",
        "current_frame",
        "thread_id",
        "native_thread_id",
        "datastack_chunk",
        "status",
    ],
);
/// 3.13's type, str and GC sections (3.14 keeps them).
const TYPE_313: Section = ("type_object", &["size", "tp_name", "tp_repr", "tp_flags"]);
const UNICODE_313: Section = (
    "unicode_object",
    &["size", "state", "length", "asciiobject_size"],
);
const GC_313: Section = ("gc", &["size", "collecting"]);

/// 3.13 (Include/internal/pycore_runtime.h): 73 words.
static PY313: Shape = Shape {
    minor: 13,
    sections: &[
        RUNTIME,
        (
            "interpreter_state",
            &[
                "size",
                "id",
                "next",
                "threads_head",
                "gc",
                "imports_modules",
                "sysdict",
                "builtins",
                "ceval_gil",
                "gil_runtime_state",
                "gil_runtime_state_enabled",
                "gil_runtime_state_locked",
                "gil_runtime_state_holder",
            ],
        ),
        THREAD_313,
        (
            "interpreter_frame",
            &[
                "size",
                "previous",
                "executable",
                "instr_ptr",
                "localsplus",
                "owner",
            ],
        ),
        (
            "code_object",
            &[
                "size",
                "filename",
                "name",
                "qualname",
                "linetable",
                "firstlineno",
                "argcount",
                "localsplusnames",
                "localspluskinds",
                "co_code_adaptive",
            ],
        ),
        PYOBJECT,
        TYPE_313,
        TUPLE,
        LIST,
        DICT,
        FLOAT,
        LONG,
        BYTES,
        UNICODE_313,
        GC_313,
    ],
};

/// 3.14's interpreter state section (3.15 keeps it).
const INTERP_314: Section = (
    "interpreter_state",
    &[
        "size",
        "id",
        "next",
        "threads_head",
        "threads_main",
        "gc",
        "imports_modules",
        "sysdict",
        "builtins",
        "ceval_gil",
        "gil_runtime_state",
        "gil_runtime_state_enabled",
        "gil_runtime_state_locked",
        "gil_runtime_state_holder",
        "code_object_generation",
        "tlbc_generation",
    ],
);

/// 3.14's frame section (3.15 keeps it).
const FRAME_314: Section = (
    "interpreter_frame",
    &[
        "size",
        "previous",
        "executable",
        "instr_ptr",
        "localsplus",
        "owner",
        "stackpointer",
        "tlbc_index",
    ],
);

/// 3.14's code object section (3.15 keeps it).
const CODE_314: Section = (
    "code_object",
    &[
        "size",
        "filename",
        "name",
        "qualname",
        "linetable",
        "firstlineno",
        "argcount",
        "localsplusnames",
        "localspluskinds",
        "co_code_adaptive",
        "co_tlbc",
    ],
);

/// 3.14 (Include/internal/pycore_debug_offsets.h): 95 words.
static PY314: Shape = Shape {
    minor: 14,
    sections: &[
        RUNTIME,
        INTERP_314,
        THREAD_313,
        FRAME_314,
        CODE_314,
        PYOBJECT,
        TYPE_313,
        TUPLE,
        LIST,
        SET,
        DICT,
        FLOAT,
        LONG,
        BYTES,
        UNICODE_313,
        GC_313,
        GEN,
        LLIST,
        DEBUGGER,
    ],
};

/// 3.15 (Include/internal/pycore_debug_offsets.h): 111 words.
static PY315: Shape = Shape {
    minor: 15,
    sections: &[
        RUNTIME,
        INTERP_314,
        (
            "thread_state",
            &[
                "size",
                "prev",
                "next",
                "interp",
                "current_frame",
                "base_frame",
                "last_profiled_frame",
                "last_profiled_frame_seq",
                "thread_id",
                "native_thread_id",
                "datastack_chunk",
                "status",
                "holds_gil",
                "gil_requested",
                "current_exception",
                "exc_state",
            ],
        ),
        ("err_stackitem", &["exc_value"]),
        FRAME_314,
        CODE_314,
        PYOBJECT,
        (
            "type_object",
            &[
                "size",
                "tp_name",
                "tp_repr",
                "tp_flags",
                "tp_basicsize",
                "tp_dictoffset",
            ],
        ),
        ("heap_type_object", &["size", "ht_cached_keys"]),
        TUPLE,
        LIST,
        SET,
        DICT,
        FLOAT,
        LONG,
        BYTES,
        (
            "unicode_object",
            &[
                "size",
                "state",
                "length",
                "asciiobject_size",
                "compactunicodeobject_size",
            ],
        ),
        (
            "gc",
            &[
                "size",
                "collecting",
                "frame",
                "generation_stats_size",
                "generation_stats",
            ],
        ),
        GEN,
        LLIST,
        DEBUGGER,
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shape_has_the_length_of_its_table() {
        assert_eq!(PY313.len(), 584);
        assert_eq!(PY314.len(), 760);
        assert_eq!(PY315.len(), 888);
    }

    #[test]
    fn fields_are_found_by_name_where_each_version_has_them() {
        assert_eq!(PY313.index("thread_state", "current_frame"), Some(23));
        assert_eq!(PY313.index("code_object", "co_code_adaptive"), Some(43));
        assert_eq!(PY314.index("thread_state", "current_frame"), Some(26));
        assert_eq!(PY315.index("interpreter_frame", "owner"), Some(44));
        assert_eq!(PY315.index("heap_type_object", "ht_cached_keys"), Some(67));
        assert_eq!(PY314.index("heap_type_object", "ht_cached_keys"), None);
        assert!(Shape::for_minor(16).is_none());
    }
}
