//! One module's ELF image, as read from its file (or, for the vDSO, from the target's memory):
//! where its segments load, its unwind sections for framehop, and where its symbols live.

use std::fs::File;
use std::ops::{Deref, Range};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use framehop::ExplicitModuleSectionInfo;
use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment};

use crate::error::NativeError;
use crate::maps::CodeMapping;
use crate::memory;

/// The granularity of mappings: a segment's mapping starts at its file offset rounded down to
/// this.
const PAGE_SIZE: u64 = 4096;

/// What identifies one version of one module file: the same path with another inode or
/// modification time is another file (a library replaced on disk) and is loaded afresh.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ImageKey {
    File {
        path: PathBuf,
        inode: u64,
        mtime: i64,
    },
    /// The vDSO is per process and never changes; its address identifies it.
    Vdso { start: u64 },
}

/// The bytes of an image: a read-only file mapping, or a copy of memory.
enum ImageBytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Deref for ImageBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ImageBytes::Mapped(map) => map,
            ImageBytes::Owned(bytes) => bytes,
        }
    }
}

/// A byte range of an image, shared without copying: what framehop reads unwind sections from.
#[derive(Clone)]
pub struct SectionBytes {
    bytes: Arc<ImageBytes>,
    range: Range<usize>,
}

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes.get(self.range.clone()).unwrap_or(&[])
    }
}

/// A section's place in memory as the file states it (SVMA) and in the file.
#[derive(Debug, Clone)]
struct SectionPlace {
    svma: Range<u64>,
    file: Option<Range<usize>>,
}

/// A PT_LOAD segment: which file bytes load at which stated address.
#[derive(Debug, Clone, Copy)]
struct Segment {
    file_offset: u64,
    file_size: u64,
    svma: u64,
}

/// Where to find a module's symbols.
#[derive(Debug, Clone)]
pub(crate) enum SymbolSource {
    /// A file with a symbol table and perhaps DWARF: the module itself, or its separate
    /// debug file (`/usr/lib/debug/.build-id/..`).
    File(PathBuf),
    /// The image is only in memory (the vDSO): read its symbols from our copy.
    InMemory,
}

/// One loaded module image. Cheap to share: the file stays mapped, nothing is copied.
pub(crate) struct ModuleImage {
    /// The path as the target sees it (for the vDSO, `[vdso]`).
    pub path: Arc<str>,
    bytes: Arc<ImageBytes>,
    segments: Vec<Segment>,
    text: Option<SectionPlace>,
    got: Option<SectionPlace>,
    eh_frame: Option<SectionPlace>,
    eh_frame_hdr: Option<SectionPlace>,
    debug_frame: Option<SectionPlace>,
    pub symbols: SymbolSource,
}

impl ModuleImage {
    /// The key the file mapped at `path` (with `inode`) has now: cheap (a stat), so a module
    /// seen before is found in the cache without opening it again.
    pub fn file_key(pid: u32, path: &Path, mapping: &CodeMapping) -> Result<ImageKey, NativeError> {
        let (_, _, metadata) = open_mapped_file(pid, path, mapping)?;
        Ok(ImageKey::File {
            path: path.to_path_buf(),
            inode: metadata.ino(),
            mtime: metadata.mtime(),
        })
    }

    /// Loads the file behind `mapping` of process `pid`. The file is opened through the
    /// target's root (`/proc/PID/root/PATH`, right inside containers) when that is the file the
    /// target mapped (same inode), else through the mapping itself
    /// (`/proc/PID/map_files/START-END`: a file deleted or replaced since), else by its path
    /// as we see it.
    pub fn load_file(
        pid: u32,
        path: &Path,
        mapping: &CodeMapping,
    ) -> Result<(ImageKey, ModuleImage), NativeError> {
        let (opened, file, metadata) = open_mapped_file(pid, path, mapping)?;
        // SAFETY: the map is read-only and private. A module file is not written while a
        // program has it mapped (the loader's ETXTBSY convention); one replaced on disk gets a
        // new inode and leaves this mapping intact.
        let map = unsafe { Mmap::map(&file) }.map_err(|source| NativeError::Io {
            path: opened.clone(),
            source,
        })?;
        let key = ImageKey::File {
            path: path.to_path_buf(),
            inode: metadata.ino(),
            mtime: metadata.mtime(),
        };
        let display = path.to_string_lossy();
        let image = ModuleImage::parse(
            &display,
            Arc::new(ImageBytes::Mapped(map)),
            Some((pid, opened)),
        );
        Ok((key, image))
    }

    /// Copies the vDSO of `pid` out of its memory.
    pub fn load_vdso(
        pid: u32,
        mapping: &CodeMapping,
    ) -> Result<(ImageKey, ModuleImage), NativeError> {
        let len = usize::try_from(mapping.end - mapping.start).unwrap_or(0);
        let bytes = memory::read_exact(pid, mapping.start, len)?;
        let image = ModuleImage::parse("[vdso]", Arc::new(ImageBytes::Owned(bytes)), None);
        Ok((
            ImageKey::Vdso {
                start: mapping.start,
            },
            image,
        ))
    }

    /// Reads what unwinding and symbolization need from the ELF headers. An image that does not
    /// parse still loads, with no unwind information (framehop then follows frame pointers).
    fn parse(display: &str, bytes: Arc<ImageBytes>, opened: Option<(u32, PathBuf)>) -> ModuleImage {
        let mut image = ModuleImage {
            path: Arc::from(display),
            bytes: bytes.clone(),
            segments: Vec::new(),
            text: None,
            got: None,
            eh_frame: None,
            eh_frame_hdr: None,
            debug_frame: None,
            symbols: SymbolSource::InMemory,
        };
        let object = match object::File::parse(&**bytes) {
            Ok(object) => object,
            Err(e) => {
                log::debug!("{display}: not a readable ELF image: {e}");
                return image;
            }
        };
        image.segments = object
            .segments()
            .map(|segment| {
                let (file_offset, file_size) = segment.file_range();
                Segment {
                    file_offset,
                    file_size,
                    svma: segment.address(),
                }
            })
            .collect();
        let place = |name: &str| {
            let section = object.section_by_name(name)?;
            let svma = section.address()..section.address().checked_add(section.size())?;
            let file = section.file_range().and_then(|(offset, size)| {
                let start = usize::try_from(offset).ok()?;
                Some(start..start.checked_add(usize::try_from(size).ok()?)?)
            });
            Some(SectionPlace { svma, file })
        };
        image.text = place(".text");
        image.got = place(".got");
        image.eh_frame = place(".eh_frame");
        image.eh_frame_hdr = place(".eh_frame_hdr");
        image.debug_frame = place(".debug_frame");
        if let Some((pid, opened)) = opened {
            image.symbols =
                SymbolSource::File(separate_debug_file(pid, &object, &opened).unwrap_or(opened));
        }
        image
    }

    /// The load bias of `mapping`: what to add to a stated address (SVMA) of this image to get
    /// its address in the target (AVMA). Found from the PT_LOAD segment the mapping maps: the
    /// one whose offset, rounded down to a page, is the mapping's offset (two segments may
    /// share a page of the file, so containment alone can pick the wrong one); `None` when
    /// no segment fits.
    pub fn bias(&self, mapping: &CodeMapping) -> Option<u64> {
        let page_start = |s: &Segment| s.file_offset & !(PAGE_SIZE - 1);
        let covers = |s: &Segment| {
            s.file_size > 0
                && (page_start(s)..s.file_offset.saturating_add(s.file_size))
                    .contains(&mapping.offset)
        };
        let segment = self
            .segments
            .iter()
            .find(|s| covers(s) && page_start(s) == mapping.offset)
            .or_else(|| self.segments.iter().rev().find(|s| covers(s)))?;
        // File offset `o` of the segment is stated at `svma + (o - file_offset)`, and the
        // mapping puts file offset `mapping.offset` at `mapping.start`.
        let bias = i128::from(mapping.start) - i128::from(mapping.offset)
            + i128::from(segment.file_offset)
            - i128::from(segment.svma);
        u64::try_from(bias).ok()
    }

    /// The unwind sections of this image for framehop (ELF: base SVMA 0, addresses relative
    /// to the load bias).
    pub fn section_info(&self) -> ExplicitModuleSectionInfo<SectionBytes> {
        let data = |place: &Option<SectionPlace>| {
            let range = place.as_ref()?.file.clone()?;
            (range.end <= self.bytes.len()).then(|| SectionBytes {
                bytes: self.bytes.clone(),
                range,
            })
        };
        let svma = |place: &Option<SectionPlace>| place.as_ref().map(|p| p.svma.clone());
        ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: svma(&self.text),
            text: data(&self.text),
            got_svma: svma(&self.got),
            eh_frame_svma: svma(&self.eh_frame),
            eh_frame: data(&self.eh_frame),
            eh_frame_hdr_svma: svma(&self.eh_frame_hdr),
            eh_frame_hdr: data(&self.eh_frame_hdr),
            debug_frame: if self.eh_frame.is_none() {
                data(&self.debug_frame)
            } else {
                None
            },
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        }
    }

    /// Whether framehop gets DWARF CFI for this image (else it follows frame pointers only).
    pub fn has_unwind_info(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// The image's bytes, for symbolizing an in-memory image.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Opens the file the target mapped: through its root first, then through the mapping, then by
/// the path as we see it, preferring the one whose inode matches the mapping.
fn open_mapped_file(
    pid: u32,
    path: &Path,
    mapping: &CodeMapping,
) -> Result<(PathBuf, File, std::fs::Metadata), NativeError> {
    let inode = mapping.inode;
    let mut through_root = PathBuf::from(format!("/proc/{pid}/root"));
    through_root.push(path.strip_prefix("/").unwrap_or(path));
    let through_mapping = PathBuf::from(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        mapping.start, mapping.end
    ));
    let candidates = [through_root, through_mapping, path.to_path_buf()];
    let mut fallback = None;
    let mut last_error = None;
    for candidate in candidates {
        match File::open(&candidate).and_then(|f| f.metadata().map(|m| (f, m))) {
            Ok((file, metadata)) if metadata.ino() == inode => {
                return Ok((candidate, file, metadata))
            }
            Ok(opened) => {
                if fallback.is_none() {
                    fallback = Some((candidate, opened));
                }
            }
            Err(e) => last_error = Some(e),
        }
    }
    if let Some((candidate, (file, metadata))) = fallback {
        log::debug!(
            "{}: inode differs from the mapped file's; using it anyway",
            candidate.display()
        );
        return Ok((candidate, file, metadata));
    }
    Err(NativeError::Io {
        path: path.to_path_buf(),
        source: last_error.unwrap_or_else(|| std::io::Error::other("no candidate path")),
    })
}

/// Finds the separate debug file of an image that has no DWARF of its own: by build id under
/// `/usr/lib/debug/.build-id/`, else by `.gnu_debuglink` next to it or under
/// `/usr/lib/debug`. Looks in the target's root first, then ours.
fn separate_debug_file(pid: u32, object: &object::File<'_>, opened: &Path) -> Option<PathBuf> {
    if object.section_by_name(".debug_info").is_some() {
        return None;
    }
    let roots = [
        PathBuf::from(format!("/proc/{pid}/root")),
        PathBuf::from("/"),
    ];
    if let Ok(Some(id)) = object.build_id() {
        if let Some((first, rest)) = id.split_first() {
            let hex: String = rest.iter().map(|b| format!("{b:02x}")).collect();
            let relative = format!("usr/lib/debug/.build-id/{first:02x}/{hex}.debug");
            for root in &roots {
                let candidate = root.join(&relative);
                if candidate.is_file() {
                    return Some(candidate);
                }
            }
        }
    }
    if let Ok(Some((name, _crc))) = object.gnu_debuglink() {
        let name = Path::new(std::ffi::OsStr::from_bytes(name));
        let dir = opened.parent()?;
        let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
        for root in &roots {
            let mut under_debug = root.join("usr/lib/debug");
            // `dir` may itself be under /proc/PID/root: the debug tree mirrors the target's
            // own path, which is what follows the root prefix.
            let target_dir = dir
                .strip_prefix(&roots[0])
                .unwrap_or(dir)
                .strip_prefix("/")
                .unwrap_or(dir);
            under_debug.push(target_dir);
            candidates.push(under_debug.join(name));
        }
        return candidates
            .into_iter()
            .find(|c| c.is_file() && c.as_path() != opened);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::MappingSource;

    fn image(segments: Vec<Segment>) -> ModuleImage {
        ModuleImage {
            path: Arc::from("/lib/test.so"),
            bytes: Arc::new(ImageBytes::Owned(Vec::new())),
            segments,
            text: None,
            got: None,
            eh_frame: None,
            eh_frame_hdr: None,
            debug_frame: None,
            symbols: SymbolSource::InMemory,
        }
    }

    fn mapping(start: u64, offset: u64) -> CodeMapping {
        CodeMapping {
            start,
            end: start + 0x1000,
            offset,
            inode: 1,
            source: MappingSource::File(PathBuf::from("/lib/test.so")),
        }
    }

    #[test]
    fn the_bias_comes_from_the_segment_the_mapping_starts() {
        // As lld lays segments out: the code segment starts mid-page, in the same file page
        // as the end of the read-only one, and is stated one page further on.
        let image = image(vec![
            Segment {
                file_offset: 0,
                file_size: 0x137320,
                svma: 0,
            },
            Segment {
                file_offset: 0x137320,
                file_size: 0x36f290,
                svma: 0x138320,
            },
        ]);
        let base = 0x5632_bbf9_d000;
        // The code mapping: file offset 0x137000 at base + 0x138000.
        assert_eq!(image.bias(&mapping(base + 0x138000, 0x137000)), Some(base));
        // The first mapping: offset 0 at the base.
        assert_eq!(image.bias(&mapping(base, 0)), Some(base));
    }

    #[test]
    fn a_file_gone_from_every_path_is_read_through_its_mapping() {
        // Our own executable's code, named by a path that exists nowhere (as a container's
        // path whose root is gone, or a file deleted since it was mapped).
        let me = std::process::id();
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        let mapping = crate::maps::read_code_mappings(me)
            .expect("own maps")
            .into_iter()
            .find(|m| m.source == MappingSource::File(exe.clone()))
            .expect("a code mapping of our executable");
        let gone = Path::new("/nonexistent/stackscope-test/binary");
        let (opened, _, metadata) = open_mapped_file(me, gone, &mapping).expect("opened");
        assert_eq!(metadata.ino(), mapping.inode);
        assert!(
            opened.to_string_lossy().contains("/map_files/"),
            "{opened:?}"
        );
    }

    #[test]
    fn a_non_pie_executable_has_no_bias() {
        let image = image(vec![Segment {
            file_offset: 0x1000,
            file_size: 0x5000,
            svma: 0x401000,
        }]);
        assert_eq!(image.bias(&mapping(0x401000, 0x1000)), Some(0));
        assert_eq!(image.bias(&mapping(0x900000, 0x9000)), None);
    }
}
