//! The per-process unwinder: its module map, framehop's unwinder and rule cache, and the
//! symbol caches that make the second unwind of a stack cheap.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Module, Unwinder};

use crate::error::NativeError;
use crate::image::{ImageKey, ModuleImage, SectionBytes};
use crate::maps::{self, CodeMapping, MappingSource};
use crate::memory::{self, Registers, StackReader};
use crate::symbolize::{SymFrame, Symbolizer};

/// More frames than this is a corrupt stack (or a runaway recursion in C): stop there.
const MAX_FRAMES: usize = 1024;
/// Bounds on the caches, so that a target that keeps loading code cannot grow us forever.
const MAX_SYMBOL_CACHE: usize = 200_000;
const MAX_UNKNOWN_CACHE: usize = 4096;

/// One native frame, innermost first in a [`NativeStack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeFrame {
    /// The instruction pointer (innermost frame) or the return address (the others).
    pub address: u64,
    /// The function, demangled; `None` when the module has no symbol for the address.
    pub function: Option<Arc<str>>,
    /// The source file and line, when the module (or its debug file) has DWARF.
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
    /// The module's path as the target sees it (`/usr/lib/x86_64-linux-gnu/libc.so.6`,
    /// `[vdso]`), or `?` for an address outside every module.
    pub module: Arc<str>,
    /// The address relative to the module's load bias: stable across processes and runs,
    /// where `address` changes with ASLR.
    pub module_offset: Option<u64>,
    /// Whether this frame is a function inlined into the next (outer) frame's function, at
    /// the same address.
    pub inlined: bool,
}

impl NativeFrame {
    /// The module's file name (`libc.so.6`).
    pub fn module_name(&self) -> &str {
        self.module.rsplit('/').next().unwrap_or(&self.module)
    }

    /// The function's name, or `module+0xOFFSET` when it has none (stable across processes,
    /// so identical stacks of two ranks still compare equal).
    pub fn function_name(&self) -> String {
        match (&self.function, self.module_offset) {
            (Some(name), _) => name.to_string(),
            (None, Some(offset)) => format!("{}+{offset:#x}", self.module_name()),
            (None, None) => format!("{:#x}", self.address),
        }
    }

    /// `function (file:line)`, or `function (module)` without line information.
    pub fn label(&self) -> String {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => format!("{} ({file}:{line})", self.function_name()),
            _ => format!("{} ({})", self.function_name(), self.module_name()),
        }
    }
}

/// One thread's native stack.
#[derive(Debug)]
pub struct NativeStack {
    /// Innermost first.
    pub frames: Vec<NativeFrame>,
    /// Why unwinding stopped before the thread's first frame, when it did: the frames are
    /// still right, there are just fewer of them.
    pub truncated: Option<NativeError>,
}

/// Counters of what unwinding cost, for tests and diagnostics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UnwindStats {
    /// Module images opened and parsed (a cached one is not counted again).
    pub images_loaded: usize,
    /// Times the memory map was re-read.
    pub map_reads: usize,
    /// Unwinds done.
    pub unwinds: usize,
    /// Reads of target stack memory, all unwinds together.
    pub stack_reads: usize,
    /// Addresses symbolized (cache misses).
    pub symbolized: usize,
}

/// A code mapping of the target with its image and load bias.
struct LoadedModule {
    mapping: CodeMapping,
    bias: u64,
    key: ImageKey,
    image: Arc<ModuleImage>,
}

/// Unwinds the native stacks of one process's threads. Keeps the module map, framehop's
/// per-address unwind rules and every symbolized address, so that sampling the same process
/// again costs the register and stack reads and little else.
///
/// Every call that reads a thread requires it to be ptrace-stopped by the calling OS thread
/// (a ptrace stop belongs to the thread that made it); the unwinder never stops or resumes
/// anything itself.
pub struct NativeUnwinder {
    pid: u32,
    unwinder: UnwinderX86_64<SectionBytes>,
    cache: CacheX86_64,
    /// Sorted by start address.
    modules: Vec<LoadedModule>,
    images: HashMap<ImageKey, Arc<ModuleImage>>,
    symbolizers: HashMap<ImageKey, Symbolizer>,
    symbols: HashMap<u64, Arc<[SymFrame]>>,
    /// Addresses outside every module that a fresh map did not explain (JIT code, garbage):
    /// not worth another look at the map.
    unknown: HashSet<u64>,
    stats: UnwindStats,
}

impl NativeUnwinder {
    /// Reads the module map of `pid`. Needs no stop: the map is read from /proc.
    pub fn new(pid: u32) -> Result<NativeUnwinder, NativeError> {
        let mut unwinder = NativeUnwinder {
            pid,
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            modules: Vec::new(),
            images: HashMap::new(),
            symbolizers: HashMap::new(),
            symbols: HashMap::new(),
            unknown: HashSet::new(),
            stats: UnwindStats::default(),
        };
        unwinder.refresh_modules()?;
        Ok(unwinder)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn stats(&self) -> UnwindStats {
        self.stats
    }

    /// Re-reads the memory map (after the target loaded or unloaded libraries) and updates
    /// the modules that changed; images already loaded are reused. Returns whether anything
    /// changed. [`NativeUnwinder::unwind`] calls it by itself when it meets an address in no
    /// known module.
    pub fn refresh_modules(&mut self) -> Result<bool, NativeError> {
        let mappings = maps::read_code_mappings(self.pid)?;
        self.stats.map_reads += 1;
        let mut old: HashMap<u64, LoadedModule> = self
            .modules
            .drain(..)
            .map(|m| (m.mapping.start, m))
            .collect();
        let mut changed = false;
        let mut modules = Vec::with_capacity(mappings.len());
        for mapping in mappings {
            if let Some(module) = old.remove(&mapping.start) {
                if module.mapping == mapping {
                    modules.push(module);
                    continue;
                }
                self.unwinder.remove_module(mapping.start);
            }
            changed = true;
            match self.load_module(&mapping) {
                Ok(Some(module)) => {
                    self.unwinder.add_module(Module::new(
                        module.image.path.to_string(),
                        mapping.start..mapping.end,
                        module.bias,
                        module.image.section_info(),
                    ));
                    modules.push(module);
                }
                Ok(None) => {}
                Err(NativeError::ProcessGone { pid }) => {
                    return Err(NativeError::ProcessGone { pid })
                }
                Err(e) => log::debug!("process {}: skipping a module: {e}", self.pid),
            }
        }
        for start in old.into_keys() {
            changed = true;
            self.unwinder.remove_module(start);
        }
        // Forget images and symbols of modules no longer mapped.
        if changed {
            let live: HashSet<&ImageKey> = modules.iter().map(|m| &m.key).collect();
            self.images.retain(|key, _| live.contains(key));
            self.symbolizers.retain(|key, _| live.contains(key));
            self.symbols.clear();
            self.unknown.clear();
        }
        self.modules = modules;
        Ok(changed)
    }

    fn load_module(&mut self, mapping: &CodeMapping) -> Result<Option<LoadedModule>, NativeError> {
        let key = match &mapping.source {
            MappingSource::File(path) => ModuleImage::file_key(self.pid, path, mapping)?,
            MappingSource::Vdso => ImageKey::Vdso {
                start: mapping.start,
            },
        };
        let image = match self.images.get(&key) {
            Some(image) => image.clone(),
            None => {
                let (key, image) = match &mapping.source {
                    MappingSource::File(path) => ModuleImage::load_file(self.pid, path, mapping)?,
                    MappingSource::Vdso => ModuleImage::load_vdso(self.pid, mapping)?,
                };
                self.stats.images_loaded += 1;
                if !image.has_unwind_info() {
                    log::debug!("{}: no unwind information, frame pointers only", image.path);
                }
                let image = Arc::new(image);
                // Its symbols made ready now, not at the first sample that meets it: a big
                // module's symbol table takes tens of milliseconds to sort and demangle, which
                // would hold up that sample.
                self.symbolizers
                    .entry(key.clone())
                    .or_insert_with(|| Symbolizer::for_image(&image));
                self.images.insert(key, image.clone());
                image
            }
        };
        let Some(bias) = image.bias(mapping) else {
            log::debug!(
                "{}: no segment maps offset {:#x}",
                image.path,
                mapping.offset
            );
            return Ok(None);
        };
        Ok(Some(LoadedModule {
            mapping: mapping.clone(),
            bias,
            key,
            image,
        }))
    }

    /// Unwinds thread `tid` of the process and symbolizes its frames, innermost first.
    ///
    /// The thread must be ptrace-stopped by the calling OS thread (for example under
    /// `remoteprocess::Process::lock()` taken on this thread); else this fails with
    /// [`NativeError::NotStopped`]. Fails only when the unwind cannot start (registers
    /// unreadable, thread gone); a stack cut short is returned with
    /// [`NativeStack::truncated`] saying why.
    pub fn unwind(&mut self, tid: u32) -> Result<NativeStack, NativeError> {
        let registers = memory::read_registers(self.pid, tid)?;
        self.unwind_from(registers)
    }

    /// Reads the registers of thread `tid`, which must be ptrace-stopped by the calling OS
    /// thread.
    pub fn registers(&self, tid: u32) -> Result<Registers, NativeError> {
        memory::read_registers(self.pid, tid)
    }

    /// Unwinds from given registers (of a thread stopped by other means).
    pub fn unwind_from(&mut self, registers: Registers) -> Result<NativeStack, NativeError> {
        self.stats.unwinds += 1;
        let (mut addresses, mut truncated) = self.walk(registers);
        let unexplained: Vec<u64> = addresses
            .iter()
            .map(|a| a.address_for_lookup())
            .filter(|&a| self.module_index(a).is_none() && !self.unknown.contains(&a))
            .collect();
        if !unexplained.is_empty() {
            // A library loaded since the map was read (dlopen), or JIT code / garbage: a fresh
            // map tells which; what it does not explain is not looked up again.
            if self.refresh_modules()? {
                (addresses, truncated) = self.walk(registers);
            }
            if self.unknown.len() + unexplained.len() > MAX_UNKNOWN_CACHE {
                self.unknown.clear();
            }
            let still_unknown: Vec<u64> = unexplained
                .into_iter()
                .filter(|&a| self.module_index(a).is_none())
                .collect();
            self.unknown.extend(still_unknown);
        }
        let mut frames = Vec::with_capacity(addresses.len());
        for address in addresses {
            self.symbolize_into(address, &mut frames);
        }
        if let Some(
            NativeError::Corrupt { address, .. } | NativeError::UnreadableMemory { address, .. },
        ) = &truncated
        {
            let last = frames.last().map_or(*address, |f| f.address);
            if self.module_index(last).is_none() {
                truncated = Some(NativeError::NoUnwindInfo { address: last });
            }
        }
        Ok(NativeStack { frames, truncated })
    }

    /// Walks the stack: the instruction pointer, then each return address.
    fn walk(&mut self, registers: Registers) -> (Vec<FrameAddress>, Option<NativeError>) {
        let mut reader = StackReader::new(self.pid);
        let mut read = |address: u64| reader.read_u64(address);
        let regs = UnwindRegsX86_64::new(registers.ip, registers.sp, registers.bp);
        let mut iter = self
            .unwinder
            .iter_frames(registers.ip, regs, &mut self.cache, &mut read);
        let mut addresses: Vec<FrameAddress> = Vec::new();
        let truncated = loop {
            if addresses.len() >= MAX_FRAMES {
                break Some(NativeError::Corrupt {
                    address: addresses.last().map_or(0, |a| a.address()),
                    reason: format!("more than {MAX_FRAMES} frames"),
                });
            }
            match iter.next() {
                Ok(Some(address)) => addresses.push(address),
                Ok(None) => break None,
                // The usual end of a thread's stack: its first function returns to nowhere.
                Err(framehop::Error::ReturnAddressIsNull) => break None,
                Err(framehop::Error::CouldNotReadStack(address)) => {
                    break Some(NativeError::UnreadableMemory {
                        pid: self.pid,
                        address,
                    })
                }
                Err(e) => {
                    break Some(NativeError::Corrupt {
                        address: addresses.last().map_or(0, |a| a.address()),
                        reason: e.to_string(),
                    })
                }
            }
        };
        self.stats.stack_reads += reader.reads;
        (addresses, truncated)
    }

    fn module_index(&self, address: u64) -> Option<usize> {
        let index = self
            .modules
            .partition_point(|m| m.mapping.start <= address)
            .checked_sub(1)?;
        self.modules
            .get(index)
            .filter(|m| m.mapping.contains(address))
            .map(|_| index)
    }

    /// Appends the frames at `address` (more than one where functions were inlined).
    fn symbolize_into(&mut self, address: FrameAddress, out: &mut Vec<NativeFrame>) {
        let lookup = address.address_for_lookup();
        let Some(index) = self.module_index(lookup) else {
            out.push(NativeFrame {
                address: address.address(),
                function: None,
                file: None,
                line: None,
                module: Arc::from("?"),
                module_offset: None,
                inlined: false,
            });
            return;
        };
        let module = &self.modules[index];
        let svma = lookup.wrapping_sub(module.bias);
        let symbols = match self.symbols.get(&lookup) {
            Some(symbols) => symbols.clone(),
            None => {
                let symbolizer = self
                    .symbolizers
                    .entry(module.key.clone())
                    .or_insert_with(|| Symbolizer::for_image(&module.image));
                let symbols: Arc<[SymFrame]> = symbolizer.lookup(svma).into();
                self.stats.symbolized += 1;
                if self.symbols.len() >= MAX_SYMBOL_CACHE {
                    self.symbols.clear();
                }
                self.symbols.insert(lookup, symbols.clone());
                symbols
            }
        };
        let module_path = module.image.path.clone();
        let offset = Some(address.address().wrapping_sub(module.bias));
        if symbols.is_empty() {
            out.push(NativeFrame {
                address: address.address(),
                function: None,
                file: None,
                line: None,
                module: module_path,
                module_offset: offset,
                inlined: false,
            });
            return;
        }
        let last = symbols.len() - 1;
        out.extend(symbols.iter().enumerate().map(|(i, s)| NativeFrame {
            address: address.address(),
            function: s.function.clone(),
            file: s.file.clone(),
            line: s.line,
            module: module_path.clone(),
            module_offset: offset,
            inlined: i < last,
        }));
    }
}

#[cfg(test)]
mod tests;
