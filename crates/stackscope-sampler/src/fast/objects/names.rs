//! Thread names, found where py-spy finds them: `sys.modules["threading"]._active`, a dict
//! from thread ident to `Thread` object, and each object's `_name`.
//!
//! A lookup walks a few dicts, so names are cached by thread ident and looked up only when a
//! thread appears that has no name yet, and again while some thread has none: at most every
//! [`NEW_THREAD_RETRY`] in a thread's first [`NEW_THREAD_WINDOW`] (a thread enters the
//! interpreter's list a moment before `threading` registers it, and a pool's short-lived
//! threads live no longer than that), then at most once a second (it may be named later, or
//! `threading` imported later), as py-spy does. A lookup that fails (the dicts changed under
//! it, as they do while threads come and go) keeps the names known so far.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fast::layout::{common, usize_at, DictKeys, Layout, ManagedDict};
use crate::fast::memory::addrmap::TidMap;
use crate::fast::memory::remote::{Batch, Remote, Slot};
use crate::fast::objects::code::read_strings;

const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// How soon a thread new to us, still without a name, is looked up again.
const NEW_THREAD_RETRY: Duration = Duration::from_millis(10);
/// How long a thread counts as new.
const NEW_THREAD_WINDOW: Duration = Duration::from_millis(250);
/// Bounds on what a lookup believes, against dicts read mid-change.
const MAX_ENTRIES: usize = 1 << 16;
/// 3.13: a type whose instances keep their attribute values inline, after the object.
const TPFLAGS_INLINE_VALUES: u64 = 1 << 2;
/// PyTypeObject: `tp_basicsize`.
const TP_BASICSIZE: usize = 32;

pub(crate) struct ThreadNames {
    names: TidMap<Option<Arc<str>>>,
    /// When each thread without a name was first seen.
    first_seen: TidMap<Instant>,
    looked_up: Instant,
    pub lookups: u64,
}

impl ThreadNames {
    pub(crate) fn new() -> ThreadNames {
        ThreadNames {
            names: TidMap::default(),
            first_seen: TidMap::default(),
            looked_up: Instant::now(),
            lookups: 0,
        }
    }

    /// Drops the cached name of a thread ident that now belongs to another thread, so that its
    /// next sample looks the name up again.
    pub(crate) fn forget(&mut self, ident: u64) {
        self.names.remove(&ident);
        self.first_seen.remove(&ident);
    }

    /// The names of `idents`, looking them up (once) if any is unknown or due a retry.
    #[cfg(test)]
    pub(crate) fn names(
        &mut self,
        remote: &mut Remote,
        layout: &Layout,
        modules_dict_ptr: usize,
        idents: &[u64],
    ) -> Vec<Option<Arc<str>>> {
        let mut out = Vec::new();
        self.fill_names(
            remote,
            layout,
            modules_dict_ptr,
            idents,
            Instant::now(),
            &mut out,
        );
        out
    }

    /// Fills `out` (emptied first) with the names of `idents`, looking them up (once) if any is
    /// unknown or due a retry by `now`.
    pub(crate) fn fill_names(
        &mut self,
        remote: &mut Remote,
        layout: &Layout,
        modules_dict_ptr: usize,
        idents: &[u64],
        now: Instant,
        out: &mut Vec<Option<Arc<str>>>,
    ) {
        let since_lookup = now.saturating_duration_since(self.looked_up);
        let due = idents.iter().any(|id| match self.names.get(id) {
            Some(Some(_)) => false,
            Some(None) => {
                let new = self
                    .first_seen
                    .get(id)
                    .is_some_and(|t| now.saturating_duration_since(*t) < NEW_THREAD_WINDOW);
                since_lookup
                    >= if new {
                        NEW_THREAD_RETRY
                    } else {
                        RETRY_INTERVAL
                    }
            }
            None => true,
        });
        if due {
            self.lookups += 1;
            if let Some(found) = lookup(remote, layout, modules_dict_ptr) {
                self.names = found
                    .into_iter()
                    .map(|(k, v)| (k, Some(v.into())))
                    .collect();
            }
            self.looked_up = now;
            // Threads gone since: forgotten (a lookup is rare, this quadratic pass with it).
            self.first_seen.retain(|id, _| idents.contains(id));
        }
        out.clear();
        out.extend(idents.iter().map(|id| {
            let name = self.names.entry(*id).or_insert(None).clone();
            if name.is_none() {
                self.first_seen.entry(*id).or_insert(now);
            }
            name
        }));
        self.release(idents);
    }

    /// Lets go of the names of threads that ended: every ident of the list was just given an
    /// entry, so more entries than idents are those of threads gone from the list (or named by
    /// `threading` but never in it).
    fn release(&mut self, idents: &[u64]) {
        if self.names.len() > idents.len() {
            self.names.retain(|id, _| idents.contains(id));
        }
        if self.first_seen.len() > idents.len() {
            self.first_seen.retain(|id, _| idents.contains(id));
        }
    }

    /// Entries kept now (names, and when the unnamed were first seen).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.names.len() + self.first_seen.len()
    }
}

/// One lookup: ident -> name for every thread in `threading._active`.
fn lookup(
    remote: &mut Remote,
    layout: &Layout,
    modules_dict_ptr: usize,
) -> Option<HashMap<u64, String>> {
    let modules = usize_at(&remote.read(modules_dict_ptr, 8).ok()?, 0)?;
    let entries = dict_entries(remote, layout, modules)?;
    let threading = find_key(remote, layout, &entries, "threading")?;
    let module_dict = usize_at(&remote.read(threading + common::MODULE_DICT, 8).ok()?, 0)?;
    let globals = dict_entries(remote, layout, module_dict)?;
    let active = find_key(remote, layout, &globals, "_active")?;
    let threads = dict_entries_with_hash(remote, layout, active)?;
    let mut out = HashMap::new();
    // Each Thread object's attributes, then its `_name`.
    let mut attrs = Vec::with_capacity(threads.len());
    for &(hash, _, thread) in &threads {
        // The key is the ident, an int; an int's hash is its value below 2**61 - 1, and
        // idents (pthread_t addresses) are far below that.
        attrs.push((hash, object_attributes(remote, layout, thread)));
    }
    let mut wanted = Vec::new();
    for (ident, attrs) in attrs {
        let Some(attrs) = attrs else { continue };
        if let Some(name) = find_key(remote, layout, &attrs, "_name") {
            wanted.push((ident, name));
        }
    }
    let strings = read_strings(
        remote,
        layout,
        &wanted.iter().map(|(_, a)| *a).collect::<Vec<_>>(),
    )
    .ok()?;
    for ((ident, _), name) in wanted.into_iter().zip(strings) {
        if let Some(name) = name.filter(|n| plausible_name(n)) {
            out.insert(ident, name);
        }
    }
    Some(out)
}

/// Whether a name read is one a thread could have been given: a `Thread` that ends while the
/// lookup reads it frees its `_name`, whose bytes may then be anything (NULs, bytes of other
/// objects). No program names its threads with control characters, so a name with one is such
/// a torn read, and the thread stays unnamed until the next lookup.
fn plausible_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(char::is_control)
}

/// The value of the entry whose key is the string `wanted`: key headers in one call, the
/// characters of keys of the right length in another.
fn find_key(
    remote: &mut Remote,
    layout: &Layout,
    entries: &[(usize, usize)],
    wanted: &str,
) -> Option<usize> {
    let keys: Vec<usize> = entries.iter().map(|(k, _)| *k).collect();
    let mut batch = Batch::default();
    let slots: Vec<Slot> = keys
        .iter()
        .map(|&k| batch.add(k, layout.unicode_ascii_header))
        .collect();
    batch.run(remote).ok()?;
    let candidates: Vec<usize> = slots
        .iter()
        .enumerate()
        .filter(|(_, &s)| {
            batch
                .get(s)
                .and_then(|h| usize_at(h, common::UNICODE_LENGTH))
                .is_some_and(|n| n == wanted.len())
        })
        .map(|(i, _)| i)
        .collect();
    let names = read_strings(
        remote,
        layout,
        &candidates.iter().map(|&i| keys[i]).collect::<Vec<_>>(),
    )
    .ok()?;
    candidates
        .iter()
        .zip(names)
        .find(|(_, n)| n.as_deref() == Some(wanted))
        .map(|(&i, _)| entries[i].1)
}

/// An object's instance attributes, wherever its type keeps them.
fn object_attributes(
    remote: &mut Remote,
    layout: &Layout,
    obj: usize,
) -> Option<Vec<(usize, usize)>> {
    let tp = usize_at(&remote.read(obj + common::OB_TYPE, 8).ok()?, 0)?;
    let ty = remote
        .read(tp, layout.ht_cached_keys.max(common::TP_DICTOFFSET) + 8)
        .ok()?;
    let flags = usize_at(&ty, common::TP_FLAGS)? as u64;
    if flags & common::TPFLAGS_MANAGED_DICT == 0 {
        let offset = usize_at(&ty, common::TP_DICTOFFSET)? as isize;
        if offset <= 0 {
            return None;
        }
        let dict = usize_at(&remote.read(obj.checked_add_signed(offset)?, 8).ok()?, 0)?;
        return dict_entries(remote, layout, dict);
    }
    // The managed dict: either a real dict, or values laid out by the type's shared keys.
    let before = remote.read(obj.checked_sub(32)?, 32).ok()?;
    let (values, dict) = match layout.managed_dict {
        ManagedDict::Split => (usize_at(&before, 0)?, usize_at(&before, 8)?),
        ManagedDict::Tagged => {
            let tagged = usize_at(&before, 8)?;
            if tagged & 1 == 1 {
                (tagged.wrapping_add(1), 0)
            } else {
                (0, tagged)
            }
        }
        ManagedDict::Inline => match usize_at(&before, 8)? {
            0 if flags & TPFLAGS_INLINE_VALUES != 0 => {
                let basicsize = usize_at(&ty, TP_BASICSIZE)?;
                let values = obj.checked_add(basicsize)?;
                // The `valid` byte of the values' header: 0 once a dict took them over.
                let header = remote.read(values, layout.dict_values_header).ok()?;
                if header.get(3).copied().unwrap_or(0) == 0 {
                    return None;
                }
                (values, 0)
            }
            dict => (0, dict),
        },
    };
    if values != 0 {
        let keys = usize_at(&ty, layout.ht_cached_keys)?;
        let entries = keys_entries(remote, layout, keys)?;
        let vals = remote
            .read(values + layout.dict_values_header, entries.len() * 8)
            .ok()?;
        Some(
            entries
                .iter()
                .enumerate()
                .filter_map(|(i, (_, key, _))| Some((*key, usize_at(&vals, i * 8)?)))
                .filter(|(k, v)| *k != 0 && *v != 0)
                .collect(),
        )
    } else if dict != 0 {
        dict_entries(remote, layout, dict)
    } else {
        None
    }
}

/// (key, value) of every live entry of a dict, in insertion order.
pub(crate) fn dict_entries(
    remote: &mut Remote,
    layout: &Layout,
    dict: usize,
) -> Option<Vec<(usize, usize)>> {
    Some(
        dict_entries_with_hash(remote, layout, dict)?
            .into_iter()
            .map(|(_, k, v)| (k, v))
            .collect(),
    )
}

/// (hash, key, value) of every live entry of a dict; the hash is 0 for str-keyed tables,
/// which do not store it.
fn dict_entries_with_hash(
    remote: &mut Remote,
    layout: &Layout,
    dict: usize,
) -> Option<Vec<(u64, usize, usize)>> {
    let d = remote.read(dict, common::DICT_VALUES + 8).ok()?;
    let keys = usize_at(&d, common::DICT_KEYS)?;
    let values = usize_at(&d, common::DICT_VALUES)?;
    let entries = keys_entries(remote, layout, keys)?;
    if values == 0 {
        return Some(
            entries
                .into_iter()
                .filter(|(_, k, v)| *k != 0 && *v != 0)
                .collect(),
        );
    }
    // A split table: the values live apart, in key order.
    let vals = remote
        .read(values + layout.dict_values_header, entries.len() * 8)
        .ok()?;
    Some(
        entries
            .iter()
            .enumerate()
            .filter_map(|(i, (h, k, _))| Some((*h, *k, usize_at(&vals, i * 8)?)))
            .filter(|(_, k, v)| *k != 0 && *v != 0)
            .collect(),
    )
}

/// 3.10's keys object: `dk_size` and `dk_nentries`, the index table after a 40-byte header.
const DK310_SIZE: usize = 8;
const DK310_NENTRIES: usize = 32;
const DK310_HEADER: usize = 40;

/// The entries of a keys object: header, then the entry table in one read.
fn keys_entries(
    remote: &mut Remote,
    layout: &Layout,
    keys: usize,
) -> Option<Vec<(u64, usize, usize)>> {
    if layout.dict_keys == DictKeys::Sized {
        let header = remote.read(keys, DK310_HEADER).ok()?;
        let size = usize_at(&header, DK310_SIZE)?;
        let n = usize_at(&header, DK310_NENTRIES)?;
        if n > MAX_ENTRIES || size > MAX_ENTRIES * 2 {
            return None;
        }
        let width = match size {
            0..=0xff => 1,
            0x100..=0xffff => 2,
            _ => 4,
        };
        let start = keys + DK310_HEADER + size * width;
        let table = remote.read(start, n * 24).ok()?;
        return Some(
            table
                .chunks_exact(24)
                .filter_map(|e| Some((usize_at(e, 0)? as u64, usize_at(e, 8)?, usize_at(e, 16)?)))
                .collect(),
        );
    }
    let header = remote.read(keys, common::DK_HEADER).ok()?;
    let log2_index_bytes = u32::from(*header.get(common::DK_LOG2_INDEX_BYTES)?);
    let kind = *header.get(common::DK_KIND)?;
    let n = usize_at(&header, common::DK_NENTRIES)?;
    if n > MAX_ENTRIES || log2_index_bytes > 40 {
        return None;
    }
    let start = keys + common::DK_HEADER + (1usize << log2_index_bytes);
    // General tables store (hash, key, value); str-keyed ones (key, value).
    let size = if kind == 0 { 24 } else { 16 };
    let table = remote.read(start, n * size).ok()?;
    Some(
        table
            .chunks_exact(size)
            .filter_map(|e| {
                if kind == 0 {
                    Some((usize_at(e, 0)? as u64, usize_at(e, 8)?, usize_at(e, 16)?))
                } else {
                    Some((0, usize_at(e, 0)?, usize_at(e, 8)?))
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_control_characters_is_a_torn_read() {
        assert!(plausible_name("Thread-325 (process_request_thread)"));
        assert!(plausible_name("ワーカー 1"));
        assert!(!plausible_name("}\u{cc}\u{9a};\0\0\0\0\u{e0}|\u{5}"));
        assert!(!plausible_name("worker\n"));
        assert!(!plausible_name(""));
    }

    /// A thread gone from the interpreter's list is gone from the names at that read, named or
    /// not (here no lookup can find `threading`: every name is unknown).
    #[test]
    fn the_name_of_a_thread_that_ended_is_released() {
        let mut names = ThreadNames::new();
        let mut remote = Remote::new(std::process::id());
        let layout = Layout::for_version(3, 11).expect("3.11's layout");
        for n in 0..100u64 {
            let short = 0x7f00_0000 + n;
            assert_eq!(
                names.names(&mut remote, layout, 0, &[1, short]),
                [None, None]
            );
            assert_eq!(names.len(), 4, "a name and a first sighting each");
            names.names(&mut remote, layout, 0, &[1]);
            assert_eq!(names.len(), 2, "only the main thread's");
        }
        names.names.insert(2, Some(Arc::from("named")));
        names.names(&mut remote, layout, 0, &[1]);
        assert!(!names.names.contains_key(&2));
    }
}
