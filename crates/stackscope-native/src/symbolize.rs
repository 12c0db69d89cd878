//! Turning a module address into function names and source lines: the ELF symbol table
//! (`.symtab`, else `.dynsym`), DWARF line tables and inlined functions where the module (or
//! its separate debug file) has them, demangled.

use std::sync::Arc;

use object::Object;

use crate::image::{ModuleImage, SymbolSource};

/// One function at an address: the function itself or one inlined into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SymFrame {
    pub function: Option<Arc<str>>,
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
}

/// How one module is symbolized. Built on the first address that needs it: a large library's
/// symbol table costs milliseconds to sort, and most mapped libraries never appear in a stack.
pub(crate) enum Symbolizer {
    /// A file: its symbol table and DWARF, loaded (mapped) by addr2line.
    Dwarf(Box<addr2line::Loader>),
    /// An in-memory image (the vDSO): its symbols copied out, sorted by address.
    Table(Vec<TableSymbol>),
    /// Nothing could be read: addresses stay addresses.
    Nothing,
}

pub(crate) struct TableSymbol {
    pub address: u64,
    pub size: u64,
    pub name: Arc<str>,
}

impl Symbolizer {
    pub fn for_image(image: &ModuleImage) -> Symbolizer {
        match &image.symbols {
            SymbolSource::File(path) => match addr2line::Loader::new(path) {
                Ok(loader) => Symbolizer::Dwarf(Box::new(loader)),
                Err(e) => {
                    log::debug!("no symbols for {}: {e}", path.display());
                    Symbolizer::Nothing
                }
            },
            SymbolSource::InMemory => match object::File::parse(image.bytes()) {
                Ok(object) => Symbolizer::Table(
                    object
                        .symbol_map()
                        .symbols()
                        .iter()
                        .map(|s| TableSymbol {
                            address: s.address(),
                            size: s.size(),
                            name: Arc::from(demangle(s.name())),
                        })
                        .collect(),
                ),
                Err(_) => Symbolizer::Nothing,
            },
        }
    }

    /// The functions at stated address `svma`, innermost (most deeply inlined) first; the last
    /// is the function whose code it is. Empty when nothing is known about the address.
    pub fn lookup(&self, svma: u64) -> Vec<SymFrame> {
        match self {
            Symbolizer::Dwarf(loader) => lookup_dwarf(loader, svma),
            Symbolizer::Table(symbols) => {
                let index = symbols.partition_point(|s| s.address <= svma);
                index
                    .checked_sub(1)
                    .and_then(|i| symbols.get(i))
                    .filter(|s| svma < s.address.saturating_add(s.size.max(1)))
                    .map(|s| {
                        vec![SymFrame {
                            function: Some(s.name.clone()),
                            file: None,
                            line: None,
                        }]
                    })
                    .unwrap_or_default()
            }
            Symbolizer::Nothing => Vec::new(),
        }
    }
}

fn lookup_dwarf(loader: &addr2line::Loader, svma: u64) -> Vec<SymFrame> {
    let mut frames = Vec::new();
    if let Ok(mut iter) = loader.find_frames(svma) {
        while let Ok(Some(frame)) = iter.next() {
            let function = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(|name| Arc::from(demangle(&name)));
            let (file, line) = match &frame.location {
                Some(location) => (
                    location.file.map(|f| Arc::from(tidy_path(f))),
                    location.line.filter(|&l| l > 0),
                ),
                None => (None, None),
            };
            frames.push(SymFrame {
                function,
                file,
                line,
            });
        }
    }
    // The symbol table names the function when DWARF does not (no DWARF for this unit, or a
    // function without a name entry); it also covers a module with no DWARF at all.
    let needs_symbol = frames.last().is_none_or(|f| f.function.is_none());
    if needs_symbol {
        if let Some(name) = loader.find_symbol(svma) {
            let name: Arc<str> = Arc::from(demangle(name));
            match frames.last_mut() {
                Some(last) => last.function = Some(name),
                None => frames.push(SymFrame {
                    function: Some(name),
                    file: None,
                    line: None,
                }),
            }
        }
    }
    frames
}

/// Removes the `./` and `/./` segments that build systems leave in DWARF paths.
fn tidy_path(path: &str) -> String {
    let mut tidy = path.strip_prefix("./").unwrap_or(path).replace("/./", "/");
    while tidy.contains("//") {
        tidy = tidy.replace("//", "/");
    }
    tidy
}

/// Demangles a Rust or C++ symbol; anything else (C) is returned as it is. C++ names lose
/// their parameter lists, which make labels long and rarely tell overloads apart in a stack.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            let options = cpp_demangle::DemangleOptions::new()
                .no_params()
                .no_return_type();
            if let Ok(text) = symbol.demangle_with_options(&options) {
                return text;
            }
        }
    }
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_rust_and_leaves_c_alone() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar");
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(
            demangle("PyThread_acquire_lock_timed"),
            "PyThread_acquire_lock_timed"
        );
        assert_eq!(demangle("_Znot a symbol"), "_Znot a symbol");
    }

    #[test]
    fn build_paths_are_tidied() {
        assert_eq!(
            tidy_path("/tmp/build/Python-3.11.7/./Modules/_threadmodule.c"),
            "/tmp/build/Python-3.11.7/Modules/_threadmodule.c"
        );
        assert_eq!(
            tidy_path("./nptl/futex-internal.c"),
            "nptl/futex-internal.c"
        );
    }
}
