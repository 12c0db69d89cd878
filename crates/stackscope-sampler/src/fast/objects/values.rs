//! A short text for a Python value read out of the target, the way py-spy shows a local
//! variable: `None`, `True`, `42`, `0.5`, `"text"`, `(1, 2)`, `[...]`, and
//! `<TYPE at 0xADDR>` for everything else.
//!
//! The value is read where it lies, never run: a type is told by its `tp_flags` (int, str,
//! tuple, list, dict) or its name (`NoneType`, `bool`, `float`), whose fields come from the
//! interpreter's `_Py_DebugOffsets` ([`ObjectLayout`]). Whatever cannot be read (a torn
//! object, a type name that is no string) is shown by its address rather than failing the
//! dump.

use crate::fast::layout::{common, u32_at, usize_at, word, Layout, ObjectLayout};
use crate::fast::memory::remote::Remote;
use crate::fast::objects::code::read_strings;
use crate::fast::objects::names::dict_entries;

/// `Py_TPFLAGS_*_SUBCLASS` (Include/object.h): the built-in base a type derives from.
const LONG_SUBCLASS: u64 = 1 << 24;
const LIST_SUBCLASS: u64 = 1 << 25;
const TUPLE_SUBCLASS: u64 = 1 << 26;
const UNICODE_SUBCLASS: u64 = 1 << 28;
const DICT_SUBCLASS: u64 = 1 << 29;
/// 3.14's `Py_INT_TAG`: a `_PyStackRef` whose low bits are 3 holds a small int in its other
/// bits rather than a pointer.
const INT_TAG: usize = 3;
/// `PyLong_SHIFT`: bits per digit of an int; `lv_tag` keeps the sign in its low 2 bits and
/// the digit count above the third.
const DIGIT_BITS: u32 = 30;
/// Digits of an int shown as a number; a bigger one is `+bigint` or `-bigint` (py-spy's way).
const MAX_DIGITS: usize = 2;
/// Elements of a tuple or list shown before `...`.
const MAX_ITEMS: usize = 8;
/// Longest type name read.
const MAX_TYPE_NAME: usize = 128;
/// py-spy's length bound for a local's text.
pub(crate) const MAX_REPR: usize = 128;

/// Reads values out of one target.
pub(crate) struct Values<'a> {
    pub remote: &'a mut Remote,
    pub layout: &'a Layout,
    pub objects: &'a ObjectLayout,
}

impl Values<'_> {
    /// The text for the value a local slot holds: `bits` as stored (a tagged `_PyStackRef`
    /// on 3.14+), shown in at most about `budget` characters.
    pub(crate) fn repr(&mut self, bits: usize, budget: usize) -> String {
        if self.layout.code_tag_bits != 0 && bits & self.layout.code_tag_bits == INT_TAG {
            return ((bits as isize) >> 2).to_string();
        }
        let addr = bits & !self.layout.code_tag_bits;
        self.object(addr, budget, 0)
            .unwrap_or_else(|| format!("<object at {addr:#x}>"))
    }

    fn object(&mut self, addr: usize, budget: usize, depth: usize) -> Option<String> {
        if budget <= 5 {
            return Some("...".to_owned());
        }
        let head = self.remote.read(addr, 32).ok()?;
        let ty = usize_at(&head, common::OB_TYPE)?;
        let ty_head = self
            .remote
            .read(ty, (self.objects.tp_name.max(common::TP_FLAGS)) + 8)
            .ok()?;
        let flags = word(&ty_head, common::TP_FLAGS)?;
        let name = self.type_name(usize_at(&ty_head, self.objects.tp_name)?)?;
        let shown = match name.as_str() {
            "NoneType" => "None".to_owned(),
            "bool" => match self.int(addr)? {
                Ok(0) => "False".to_owned(),
                _ => "True".to_owned(),
            },
            "float" => {
                let bits = word(
                    &self.remote.read(addr + self.objects.float_value, 8).ok()?,
                    0,
                )?;
                format!("{:?}", f64::from_bits(bits))
            }
            _ if flags & LONG_SUBCLASS != 0 => match self.int(addr)? {
                Ok(v) => v.to_string(),
                Err(big) => big.to_owned(),
            },
            _ if flags & UNICODE_SUBCLASS != 0 => self.text(addr, budget)?,
            _ if flags & TUPLE_SUBCLASS != 0 && depth == 0 => {
                let len = usize_at(&head, common::OB_SIZE)?;
                let items = self.items(addr + self.objects.tuple_items, len, budget)?;
                match len {
                    1 => format!("({items},)"),
                    _ => format!("({items})"),
                }
            }
            _ if flags & LIST_SUBCLASS != 0 && depth == 0 => {
                let list = self
                    .remote
                    .read(
                        addr,
                        self.objects.list_items.max(self.objects.list_size) + 8,
                    )
                    .ok()?;
                let len = usize_at(&list, self.objects.list_size)?;
                let at = usize_at(&list, self.objects.list_items)?;
                format!("[{}]", self.items(at, len, budget)?)
            }
            _ if flags & DICT_SUBCLASS != 0 && depth == 0 => self.dict(addr, budget)?,
            _ => format!("<{name} at {addr:#x}>"),
        };
        Some(shown)
    }

    /// An int's value; for one with more digits than [`MAX_DIGITS`], `+bigint` or `-bigint`.
    fn int(&mut self, addr: usize) -> Option<Result<i64, &'static str>> {
        let tag = usize_at(&self.remote.read(addr + self.objects.long_tag, 8).ok()?, 0)?;
        let negative = tag & 3 == 2;
        let digits = tag >> 3;
        if digits > MAX_DIGITS {
            return Some(Err(if negative { "-bigint" } else { "+bigint" }));
        }
        let bytes = self
            .remote
            .read(addr + self.objects.long_digits, 4 * digits)
            .ok()?;
        let magnitude = (0..digits)
            .filter_map(|i| u32_at(&bytes, 4 * i))
            .rev()
            .fold(0i64, |v, d| (v << DIGIT_BITS) | i64::from(d));
        Some(Ok(if negative { -magnitude } else { magnitude }))
    }

    /// A str as py-spy shows it: in double quotes, cut to the budget.
    fn text(&mut self, addr: usize, budget: usize) -> Option<String> {
        let text = read_strings(self.remote, self.layout, &[addr])
            .ok()?
            .pop()
            .flatten()?;
        let text = text.replace('"', "\\\"").replace('\n', "\\n");
        Some(match text.char_indices().nth(budget.saturating_sub(5)) {
            Some((cut, _)) => format!("\"{}...\"", &text[..cut]),
            None => format!("\"{text}\""),
        })
    }

    /// The elements of a tuple or list (`len` pointers at `at`), joined, within `budget`.
    fn items(&mut self, at: usize, len: usize, budget: usize) -> Option<String> {
        let shown = len.min(MAX_ITEMS);
        let pointers = self.remote.read(at, 8 * shown).ok()?;
        let mut parts = Vec::with_capacity(shown + 1);
        let mut left = budget.saturating_sub(2);
        for i in 0..shown {
            let item = usize_at(&pointers, 8 * i)?;
            let part = self
                .object(item, left, 1)
                .unwrap_or_else(|| format!("<object at {item:#x}>"));
            left = left.saturating_sub(part.len() + 2);
            parts.push(part);
            if left <= 5 {
                break;
            }
        }
        if parts.len() < len {
            parts.push("...".to_owned());
        }
        Some(parts.join(", "))
    }

    /// A dict's items in insertion order, `{key: value, ...}`, within `budget`.
    fn dict(&mut self, addr: usize, budget: usize) -> Option<String> {
        let entries = dict_entries(self.remote, self.layout, addr)?;
        let mut parts = Vec::new();
        let mut left = budget.saturating_sub(2);
        for &(key, value) in entries.iter().take(MAX_ITEMS) {
            let key = self
                .object(key, left, 1)
                .unwrap_or_else(|| format!("<object at {key:#x}>"));
            let value = self
                .object(value, left.saturating_sub(key.len()), 1)
                .unwrap_or_else(|| format!("<object at {value:#x}>"));
            left = left.saturating_sub(key.len() + value.len() + 4);
            parts.push(format!("{key}: {value}"));
            if left <= 5 {
                break;
            }
        }
        if parts.len() < entries.len() {
            parts.push("...".to_owned());
        }
        Some(format!("{{{}}}", parts.join(", ")))
    }

    /// A type's `tp_name`: a C string.
    fn type_name(&mut self, at: usize) -> Option<String> {
        let bytes = self.remote.read(at, MAX_TYPE_NAME).ok().or_else(|| {
            // A name near the end of a mapping: read what there is, a word at a time.
            let mut bytes = Vec::new();
            while bytes.len() < MAX_TYPE_NAME {
                let w = self.remote.read(at + bytes.len(), 8).ok()?;
                let end = w.contains(&0);
                bytes.extend(w);
                if end {
                    break;
                }
            }
            Some(bytes)
        })?;
        let end = bytes.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&bytes[..end])
            .ok()
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::layout::PY312;

    const OBJECTS: ObjectLayout = ObjectLayout {
        co_argcount: 0,
        co_localsplusnames: 0,
        co_localspluskinds: 0,
        tp_name: 24,
        tuple_items: 24,
        list_items: 24,
        list_size: 16,
        float_value: 16,
        long_tag: 16,
        long_digits: 24,
        bytes_data: 32,
    };

    /// Objects laid out in our own memory, read back through a [`Remote`] of ourselves.
    struct Heap {
        /// Each object's words; boxed so that their addresses stay put as the list grows.
        #[allow(clippy::vec_box)]
        objects: Vec<Box<[u64; 48]>>,
        names: Vec<std::ffi::CString>,
    }

    impl Heap {
        fn new() -> Heap {
            Heap {
                objects: Vec::new(),
                names: Vec::new(),
            }
        }

        fn object(&mut self, words: &[(usize, u64)]) -> usize {
            let mut object = Box::new([0u64; 48]);
            for &(at, value) in words {
                object[at / 8] = value;
            }
            let addr = object.as_ptr() as usize;
            self.objects.push(object);
            addr
        }

        fn type_named(&mut self, name: &str, flags: u64) -> u64 {
            let name = std::ffi::CString::new(name).expect("name");
            let at = name.as_ptr() as u64;
            self.names.push(name);
            self.object(&[(OBJECTS.tp_name, at), (common::TP_FLAGS, flags)]) as u64
        }

        fn int(&mut self, int_type: u64, tag: u64, digits: &[u32]) -> usize {
            let mut words = vec![(common::OB_TYPE, int_type), (OBJECTS.long_tag, tag)];
            for (i, pair) in digits.chunks(2).enumerate() {
                let low = u64::from(pair[0]);
                let high = pair.get(1).map_or(0, |&d| u64::from(d) << 32);
                words.push((OBJECTS.long_digits + 8 * i, low | high));
            }
            self.object(&words)
        }
    }

    fn repr(heap: &Heap, bits: usize) -> String {
        let _ = heap;
        let mut remote = Remote::new(std::process::id());
        let mut layout = PY312.clone();
        layout.code_tag_bits = 3;
        let mut values = Values {
            remote: &mut remote,
            layout: &layout,
            objects: &OBJECTS,
        };
        values.repr(bits, MAX_REPR)
    }

    #[test]
    fn ints_bools_floats_and_none_read_as_python_shows_them() {
        let mut heap = Heap::new();
        let int = heap.type_named("int", LONG_SUBCLASS);
        let positive = heap.int(int, 1 << 3, &[42]);
        let negative = heap.int(int, (1 << 3) | 2, &[42]);
        let two_digits = heap.int(int, 2 << 3, &[5, 1]);
        let big = heap.int(int, 3 << 3, &[1, 2, 3]);
        let boolean = heap.type_named("bool", LONG_SUBCLASS);
        let yes = heap.int(boolean, 1 << 3, &[1]);
        let no = heap.int(boolean, 1, &[]);
        let float = heap.type_named("float", 0);
        let quarter = heap.object(&[(common::OB_TYPE, float), (16, 0.25f64.to_bits())]);
        let none_type = heap.type_named("NoneType", 0);
        let none = heap.object(&[(common::OB_TYPE, none_type)]);
        assert_eq!(repr(&heap, positive), "42");
        assert_eq!(repr(&heap, negative), "-42");
        assert_eq!(repr(&heap, two_digits), ((1i64 << 30) + 5).to_string());
        assert_eq!(repr(&heap, big), "+bigint");
        assert_eq!(repr(&heap, yes), "True");
        assert_eq!(repr(&heap, no), "False");
        assert_eq!(repr(&heap, quarter), "0.25");
        assert_eq!(repr(&heap, none), "None");
    }

    #[test]
    fn tagged_ints_containers_and_other_objects() {
        let mut heap = Heap::new();
        // 3.14's stack reference holding the small int 5 itself, and one to an object (a
        // deferred reference: low bit set), which is read once its tag is masked off.
        assert_eq!(repr(&heap, (5 << 2) | INT_TAG), "5");
        let int = heap.type_named("int", LONG_SUBCLASS);
        let seven = heap.int(int, 1 << 3, &[7]);
        assert_eq!(repr(&heap, seven | 1), "7");
        let tuple = heap.type_named("tuple", TUPLE_SUBCLASS);
        let pair = heap.object(&[
            (common::OB_TYPE, tuple),
            (common::OB_SIZE, 2),
            (OBJECTS.tuple_items, seven as u64),
            (OBJECTS.tuple_items + 8, seven as u64),
        ]);
        let single = heap.object(&[
            (common::OB_TYPE, tuple),
            (common::OB_SIZE, 1),
            (OBJECTS.tuple_items, seven as u64),
        ]);
        assert_eq!(repr(&heap, pair), "(7, 7)");
        assert_eq!(repr(&heap, single), "(7,)");
        let list = heap.type_named("list", LIST_SUBCLASS);
        let items = heap.object(&[(0, seven as u64), (8, pair as u64)]);
        let nested = heap.object(&[
            (common::OB_TYPE, list),
            (OBJECTS.list_size, 2),
            (OBJECTS.list_items, items as u64),
        ]);
        // One level of a container is shown; a container inside it by its address.
        assert_eq!(repr(&heap, nested), format!("[7, <tuple at {pair:#x}>]"));
        // A dict of two int items (a general keys table: hash, key, value entries after a
        // one-byte-per-slot index of 8 slots).
        let dict_type = heap.type_named("dict", DICT_SUBCLASS);
        let keys = heap.object(&[
            (8, 3 << 8), // byte 9, dk_log2_index_bytes: 3; byte 10, dk_kind: 0 (general)
            (common::DK_NENTRIES, 2),
            (common::DK_HEADER + 8, 7),
            (common::DK_HEADER + 16, seven as u64),
            (common::DK_HEADER + 24, pair as u64),
            (common::DK_HEADER + 32, 7),
            (common::DK_HEADER + 40, pair as u64),
            (common::DK_HEADER + 48, seven as u64),
        ]);
        let dict = heap.object(&[
            (common::OB_TYPE, dict_type),
            (common::DICT_KEYS, keys as u64),
        ]);
        assert_eq!(
            repr(&heap, dict),
            format!("{{7: <tuple at {pair:#x}>, <tuple at {pair:#x}>: 7}}")
        );
        let custom = heap.type_named("Batch", 0);
        let batch = heap.object(&[(common::OB_TYPE, custom)]);
        assert_eq!(repr(&heap, batch), format!("<Batch at {batch:#x}>"));
        // Page zero is never mapped: an unreadable value is shown by its address.
        assert_eq!(repr(&heap, 0x40), "<object at 0x40>");
    }
}
