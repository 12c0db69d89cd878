//! What never changes about a code object, cached by its address.
//!
//! A frame names its code object by address; the name, file and line table behind it are the
//! bulk of what py-spy copies for every frame of every sample. Here they are copied once. An
//! address can be reused once the code object is freed (code built at run time: `exec`,
//! `compile`, reloaded modules), so a few identity fields of every code object a stack uses
//! are read, with the stack's own copy, and compared with what the cache holds.
//!
//! Read every sample, those fields were half the pages a steady sample pinned (each code
//! object on a page of its own). Code made at run time and thrown away lives briefly; code
//! that has held its address for [`CodeCache::SETTLED_AFTER`] is a module's, freed only when
//! the module goes. So an entry found good over that long is trusted for
//! [`CodeCache::TRUST_FOR`] after each check, and read again after that, or at once when a
//! frame's instruction lies outside it ([`CodeCache::doubt`]). Only settled code freed and its
//! address taken by other code within that moment is named as the old until the next check.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stackscope_event::FileOrigin;

use crate::caps::CapHits;
use crate::fast::layout::{common, i32_at, usize_at, word, FrameDesign, Layout};
use crate::fast::memory::addrmap::AddrMap;
use crate::fast::memory::remote::{Batch, Remote, Slot};
use crate::fast::objects::filenames::FileNames;
use crate::fast::objects::linetable::{LineTable, MAX_TABLE};
use crate::fast::objects::pystr::{self, DataAt, StrShape};

/// Fields that tell one code object from another at the same address: type, size, first
/// line, constants, names, file name, name, qualified name, line table. Not the reference
/// count, nor 3.11's warm-up counter, which change while the object lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CodeId([u64; 9]);

impl CodeId {
    /// An identity of its own for each `n` (tests).
    #[cfg(test)]
    pub(crate) fn for_test(n: u64) -> CodeId {
        CodeId([n, 10, 0, 0, 1, 0x100 + n, 0x200 + n, 0x300 + n, 0x400 + n])
    }

    /// From the bytes of [`Layout::code_identity_range`] read at the code object.
    pub(crate) fn parse(layout: &Layout, bytes: &[u8]) -> Option<CodeId> {
        let (start, _) = layout.code_identity_range();
        let at = |offset: usize| word(bytes, offset.checked_sub(start)?);
        let firstline = i32_at(bytes, layout.co_firstlineno.checked_sub(start)?)?;
        Some(CodeId([
            at(common::OB_TYPE)?,
            at(common::OB_SIZE)?,
            at(24)?,
            at(32)?,
            u64::from(firstline as u32),
            at(layout.co_filename)?,
            at(layout.co_name)?,
            at(layout.co_qualname)?,
            at(layout.co_linetable)?,
        ]))
    }

    /// Code units in the bytecode (`Py_SIZE` of a code object).
    pub(crate) fn units(&self) -> u64 {
        self.0[1]
    }

    fn first_line(&self) -> i32 {
        self.0[4] as u32 as i32
    }
    fn filename(&self) -> usize {
        self.0[5] as usize
    }
    fn name(&self) -> usize {
        self.0[6] as usize
    }
    fn qualname(&self) -> usize {
        self.0[7] as usize
    }
    fn linetable(&self) -> usize {
        self.0[8] as usize
    }
}

/// A cached code object.
#[derive(Debug)]
pub(crate) struct CodeInfo {
    pub id: CodeId,
    /// None for code py-spy leaves out of stacks (3.13-style shims with no file name).
    pub names: Option<CodeNames>,
    pub lines: LineTable,
    /// When it was first cached, and when its identity was last read and found the same
    /// (None: doubted, read it next time).
    loaded: Instant,
    verified: Option<Instant>,
}

#[derive(Debug, Clone)]
pub(crate) struct CodeNames {
    pub function: Arc<str>,
    /// As shown: py-spy's short file name.
    pub file: Arc<str>,
    /// Where the file comes from, by its full path.
    pub origin: FileOrigin,
}

pub(crate) struct CodeCache {
    codes: AddrMap<CodeInfo>,
    /// How long an entry found good is trusted without reading its identity again (zero:
    /// read every time).
    trust_for: Duration,
    functions: HashMap<String, Arc<str>>,
    files: FileNames,
    pub hits: u64,
    pub misses: u64,
    /// Cached entries found to hold another object now.
    pub replaced: u64,
    /// Times the code objects or the function names were full and emptied.
    caps: CapHits,
    /// Counts the entries dropped or replaced: while it stands, every entry found stays as
    /// it was, its strings alive ([`CodeCache::epoch`]).
    epoch: u64,
}

impl CodeCache {
    /// Bounded: a target that makes code without end (exec in a loop) must not grow us
    /// without limit. Clearing when full costs one reload of the live code objects.
    const MAX_CODES: usize = 20_000;
    const MAX_NAMES: usize = 50_000;

    /// How long a code object's identity, once read and found the same, is taken as read:
    /// twenty samples at 100 Hz. The longest a reused address is named after its old code.
    pub(crate) const TRUST_FOR: Duration = Duration::from_millis(200);

    /// How long a code object must have been found at its address before it is trusted at
    /// all: code made and dropped at run time (`exec` in a loop) is read every time.
    pub(crate) const SETTLED_AFTER: Duration = Duration::from_secs(2);

    /// A cache whose entries are trusted for [`CodeCache::TRUST_FOR`] when `trust`, or
    /// checked every sample.
    pub(crate) fn new(files: FileNames, trust: bool) -> CodeCache {
        CodeCache {
            codes: AddrMap::default(),
            trust_for: if trust {
                Self::TRUST_FOR
            } else {
                Duration::ZERO
            },
            functions: HashMap::new(),
            files,
            hits: 0,
            misses: 0,
            replaced: 0,
            caps: CapHits::default(),
            epoch: 0,
        }
    }

    /// Changes whenever an entry is dropped or replaced: what a caller that keeps what an
    /// entry said (its names' addresses, a line) checks to know that the entry, and so what
    /// it said, still stands.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Caches a code object with these names and lines, as a load would (tests of what
    /// names frames through the cache).
    #[cfg(test)]
    pub(crate) fn insert_named(
        &mut self,
        addr: usize,
        id: CodeId,
        names: (&str, &str),
        lines: LineTable,
    ) {
        let now = Instant::now();
        let names = Some(CodeNames {
            function: Arc::from(names.0),
            file: Arc::from(names.1),
            origin: stackscope_event::FileOrigin::Job,
        });
        self.codes.insert(
            addr,
            CodeInfo {
                id,
                names,
                lines,
                loaded: now,
                verified: Some(now),
            },
        );
    }

    /// Times this cache and its file names reached their caps, handed on once.
    pub(crate) fn take_caps(&mut self) -> CapHits {
        let mut caps = self.caps.take();
        caps.add(self.files.take_caps());
        caps
    }

    pub(crate) fn len(&self) -> usize {
        self.codes.len()
    }

    /// The cached entry if `id` (read this sample) says the address still holds it.
    pub(crate) fn get(&mut self, addr: usize, id: &CodeId) -> Option<&CodeInfo> {
        match self.codes.get(&addr) {
            Some(info) if info.id == *id => {
                self.hits += 1;
                self.codes.get(&addr)
            }
            Some(_) => {
                self.drop_replaced(addr);
                None
            }
            None => None,
        }
    }

    /// The identity of the entry at `addr` when it is settled (found good over
    /// [`CodeCache::SETTLED_AFTER`]) and was last found good less than
    /// [`CodeCache::TRUST_FOR`] before `now`: it need not be read this time.
    pub(crate) fn trusted(&self, addr: usize, now: Instant) -> Option<CodeId> {
        let info = self.codes.get(&addr)?;
        let at = info.verified?;
        let settled = at.saturating_duration_since(info.loaded) >= Self::SETTLED_AFTER;
        (settled && now.saturating_duration_since(at) < self.trust_for).then_some(info.id)
    }

    /// Takes in the identity read at `addr` at `now`: an entry it matches is trusted from
    /// then; one it does not match is dropped (another object lives there now).
    pub(crate) fn note_read(&mut self, addr: usize, id: Option<&CodeId>, now: Instant) {
        let Some(info) = self.codes.get_mut(&addr) else {
            return;
        };
        if id == Some(&info.id) {
            info.verified = Some(now);
        } else if id.is_some() {
            self.drop_replaced(addr);
        }
    }

    /// Drops the entry at `addr`, found to hold another object now.
    fn drop_replaced(&mut self, addr: usize) {
        self.replaced += 1;
        self.epoch += 1;
        self.codes.remove(&addr);
    }

    /// Says the entry at `addr` may not be the object there now (a frame's instruction lies
    /// outside its bytecode): its identity is read the next time it is met.
    pub(crate) fn doubt(&mut self, addr: usize) {
        if let Some(info) = self.codes.get_mut(&addr) {
            info.verified = None;
        }
    }

    /// The entry at `addr`, as [`CodeCache::get`] last found it good this sample (not
    /// counted again).
    pub(crate) fn checked(&self, addr: usize) -> Option<&CodeInfo> {
        self.codes.get(&addr)
    }

    /// Reads and caches the code objects at `missing` (address and identity read this
    /// sample), a few system calls for all of them. A code object whose strings cannot be
    /// read is not cached: the caller treats its frames as unreadable this time.
    pub(crate) fn load(
        &mut self,
        remote: &mut Remote,
        layout: &Layout,
        missing: &[(usize, CodeId)],
        now: Instant,
    ) -> std::io::Result<()> {
        if missing.is_empty() {
            return Ok(());
        }
        self.misses += missing.len() as u64;
        if self.codes.len() + missing.len() > Self::MAX_CODES {
            self.caps.hit(self.codes.len());
            self.epoch += 1;
            self.codes.clear();
        }
        // Every string of every missing code object, fetched together.
        let mut wanted = Vec::with_capacity(missing.len() * 3);
        for (_, id) in missing {
            wanted.extend([id.qualname(), id.name(), id.filename()]);
        }
        let strings = read_strings(remote, layout, &wanted)?;
        let tables = read_tables(
            remote,
            &missing
                .iter()
                .map(|(_, id)| id.linetable())
                .collect::<Vec<_>>(),
        )?;
        for (i, ((addr, id), table)) in missing.iter().zip(tables).enumerate() {
            let [qualname, name, filename] =
                [&strings[3 * i], &strings[3 * i + 1], &strings[3 * i + 2]];
            // py-spy: the qualified name, else the name; no file name or no name at all and
            // the frame is left out of that sample.
            let function = match (qualname, name) {
                (Some(q), _) => q,
                (None, Some(n)) => n,
                (None, None) => continue,
            };
            let Some(filename) = filename else { continue };
            let names = (!filename.is_empty() && filename != "<shim>").then(|| {
                let (file, origin) = self.files.short(filename);
                CodeNames {
                    function: self.function(function),
                    file,
                    origin,
                }
            });
            let lines = match table {
                TableRead::Bytes(bytes) => match layout.frames {
                    FrameDesign::Chunks => LineTable::decode(id.first_line(), &bytes),
                    FrameDesign::Objects => LineTable::decode_310(id.first_line(), &bytes),
                },
                TableRead::Refused => LineTable::refused(),
                // py-spy reports line 0 when it cannot copy the table; a read that failed
                // now may work next time, so nothing is cached.
                TableRead::Failed => continue,
            };
            let old = self.codes.insert(
                *addr,
                CodeInfo {
                    id: *id,
                    names,
                    lines,
                    loaded: now,
                    verified: Some(now),
                },
            );
            self.epoch += u64::from(old.is_some());
        }
        Ok(())
    }

    fn function(&mut self, name: &str) -> Arc<str> {
        intern(&mut self.functions, name, Self::MAX_NAMES, &mut self.caps)
    }
}

fn intern(
    map: &mut HashMap<String, Arc<str>>,
    s: &str,
    max: usize,
    caps: &mut CapHits,
) -> Arc<str> {
    if let Some(shared) = map.get(s) {
        return shared.clone();
    }
    if map.len() >= max {
        caps.hit(map.len());
        map.clear();
    }
    let shared: Arc<str> = Arc::from(s);
    map.insert(s.to_owned(), shared.clone());
    shared
}

/// Reads `str` objects: headers in one call, then the characters of all of them in another
/// (a third for old-style strings, whose characters are behind a pointer). None for each
/// string that could not be read or decoded.
pub(crate) fn read_strings(
    remote: &mut Remote,
    layout: &Layout,
    addrs: &[usize],
) -> std::io::Result<Vec<Option<String>>> {
    let mut batch = Batch::default();
    let slots: Vec<Slot> = addrs
        .iter()
        .map(|&a| batch.add(a, pystr::header_len(layout)))
        .collect();
    batch.run(remote)?;
    let mut shapes: Vec<Option<StrShape>> = addrs
        .iter()
        .zip(&slots)
        .map(|(&a, &s)| batch.get(s).and_then(|h| pystr::shape(layout, a, h).ok()))
        .collect();
    if shapes.iter().any(|s| {
        matches!(
            s,
            Some(StrShape {
                data: DataAt::Pointer(_),
                ..
            })
        )
    }) {
        batch.clear();
        let slots: Vec<Option<Slot>> = shapes
            .iter()
            .map(|s| match s {
                Some(StrShape {
                    data: DataAt::Pointer(p),
                    ..
                }) => Some(batch.add(*p, 8)),
                _ => None,
            })
            .collect();
        batch.run(remote)?;
        for (shape, slot) in shapes.iter_mut().zip(slots) {
            if let Some(slot) = slot {
                *shape = shape.and_then(|mut s| {
                    s.data = DataAt::Address(pystr::pointer(batch.get(slot)?)?);
                    Some(s)
                });
            }
        }
    }
    batch.clear();
    let slots: Vec<Option<Slot>> = shapes
        .iter()
        .map(|s| match s {
            Some(StrShape {
                data: DataAt::Address(a),
                length,
                kind,
                ..
            }) if *length > 0 => Some(batch.add(*a, length * kind)),
            _ => None,
        })
        .collect();
    batch.run(remote)?;
    Ok(shapes
        .iter()
        .zip(slots)
        .map(|(shape, slot)| {
            let shape = shape.as_ref()?;
            match slot {
                Some(slot) => pystr::decode(shape, batch.get(slot)?).ok(),
                None => Some(String::new()),
            }
        })
        .collect())
}

enum TableRead {
    Bytes(Vec<u8>),
    Refused,
    Failed,
}

/// Reads `bytes` objects (line tables): sizes in one call, contents in another.
fn read_tables(remote: &mut Remote, addrs: &[usize]) -> std::io::Result<Vec<TableRead>> {
    let mut batch = Batch::default();
    let slots: Vec<Slot> = addrs
        .iter()
        .map(|&a| batch.add(a, common::BYTES_DATA))
        .collect();
    batch.run(remote)?;
    let sizes: Vec<Option<usize>> = slots
        .iter()
        .map(|&s| usize_at(batch.get(s)?, common::OB_SIZE))
        .collect();
    let mut data = Batch::default();
    let data_slots: Vec<Option<Slot>> = addrs
        .iter()
        .zip(&sizes)
        .map(|(&a, size)| match size {
            Some(n) if *n < MAX_TABLE && *n > 0 => Some(data.add(a + common::BYTES_DATA, *n)),
            _ => None,
        })
        .collect();
    data.run(remote)?;
    Ok(sizes
        .iter()
        .zip(data_slots)
        .map(|(size, slot)| match (size, slot) {
            (None, _) => TableRead::Failed,
            (Some(0), _) => TableRead::Bytes(Vec::new()),
            (Some(_), None) => TableRead::Refused,
            (Some(_), Some(slot)) => match data.get(slot) {
                Some(b) => TableRead::Bytes(b.to_vec()),
                None => TableRead::Failed,
            },
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::origin::Origins;

    fn id(n: u64) -> CodeId {
        CodeId::for_test(n)
    }

    /// A cache holding `id(1)` at 0x1000, first cached at `loaded`.
    fn cache_with(trust: bool, loaded: Instant) -> CodeCache {
        let mut codes = CodeCache::new(FileNames::new(1, false, Origins::default()), trust);
        codes.codes.insert(
            0x1000,
            CodeInfo {
                id: id(1),
                names: None,
                lines: LineTable::refused(),
                loaded,
                verified: Some(loaded),
            },
        );
        codes
    }

    #[test]
    fn code_found_good_over_a_while_is_trusted_for_a_moment_after_each_check() {
        let t0 = Instant::now();
        let mut codes = cache_with(true, t0);
        // Freshly cached: read every time, however recent the check.
        assert_eq!(codes.trusted(0x1000, t0), None);
        let step = Duration::from_millis(50);
        let mut now = t0;
        while now < t0 + CodeCache::SETTLED_AFTER {
            now += step;
            codes.note_read(0x1000, Some(&id(1)), now);
            if now.saturating_duration_since(t0) < CodeCache::SETTLED_AFTER {
                assert_eq!(codes.trusted(0x1000, now + step), None, "{now:?}");
            }
        }
        // Settled: trusted until TRUST_FOR after the last check, not after.
        assert_eq!(codes.trusted(0x1000, now), Some(id(1)));
        assert_eq!(
            codes.trusted(0x1000, now + CodeCache::TRUST_FOR / 2),
            Some(id(1))
        );
        assert_eq!(codes.trusted(0x1000, now + CodeCache::TRUST_FOR), None);
        // A frame whose instruction lies outside it: read at once.
        codes.doubt(0x1000);
        assert_eq!(codes.trusted(0x1000, now), None);
        codes.note_read(0x1000, Some(&id(1)), now);
        assert_eq!(codes.trusted(0x1000, now), Some(id(1)));
        // An unknown address is never trusted.
        assert_eq!(codes.trusted(0x2000, now), None);
    }

    #[test]
    fn another_object_read_at_the_address_drops_the_entry_and_an_unreadable_one_keeps_it() {
        let t0 = Instant::now();
        let later = t0 + CodeCache::SETTLED_AFTER * 2;
        let mut codes = cache_with(true, t0);
        codes.note_read(0x1000, None, later);
        assert_eq!(codes.len(), 1, "a failed read says nothing of the object");
        assert_eq!(codes.trusted(0x1000, later), None, "nor renews the trust");
        codes.note_read(0x1000, Some(&id(2)), later);
        assert_eq!((codes.len(), codes.replaced), (0, 1));
        assert_eq!(codes.trusted(0x1000, later), None);
    }

    #[test]
    fn with_trust_off_every_code_object_is_read_every_time() {
        let t0 = Instant::now();
        let mut codes = cache_with(false, t0);
        let later = t0 + CodeCache::SETTLED_AFTER * 2;
        codes.note_read(0x1000, Some(&id(1)), later);
        assert_eq!(codes.trusted(0x1000, later), None);
    }
}
