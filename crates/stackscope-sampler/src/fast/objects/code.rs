//! What never changes about a code object, cached by its address.
//!
//! A frame names its code object by address; the name, file and line table behind it are the
//! bulk of what py-spy copies for every frame of every sample. Here they are copied once. An
//! address can be reused once the code object is freed (code built at run time: `exec`,
//! `compile`, reloaded modules), so each sample reads a few identity fields of every code
//! object its stacks use, all in one system call, and compares them with what the cache holds.

use std::collections::HashMap;
use std::sync::Arc;

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
    functions: HashMap<String, Arc<str>>,
    files: FileNames,
    pub hits: u64,
    pub misses: u64,
    /// Cached entries found to hold another object now.
    pub replaced: u64,
    /// Times the code objects or the function names were full and emptied.
    caps: CapHits,
}

impl CodeCache {
    /// Bounded: a target that makes code without end (exec in a loop) must not grow us
    /// without limit. Clearing when full costs one reload of the live code objects.
    const MAX_CODES: usize = 20_000;
    const MAX_NAMES: usize = 50_000;

    pub(crate) fn new(files: FileNames) -> CodeCache {
        CodeCache {
            codes: AddrMap::default(),
            functions: HashMap::new(),
            files,
            hits: 0,
            misses: 0,
            replaced: 0,
            caps: CapHits::default(),
        }
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
                self.replaced += 1;
                self.codes.remove(&addr);
                None
            }
            None => None,
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
    ) -> std::io::Result<()> {
        if missing.is_empty() {
            return Ok(());
        }
        self.misses += missing.len() as u64;
        if self.codes.len() + missing.len() > Self::MAX_CODES {
            self.caps.hit(self.codes.len());
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
            self.codes.insert(
                *addr,
                CodeInfo {
                    id: *id,
                    names,
                    lines,
                },
            );
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
