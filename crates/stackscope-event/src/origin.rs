//! Where a frame's file comes from: the job's own code, Python's standard library, or an
//! installed package.
//!
//! The verdict names the job's own line ("the training loop waits at `main (train.py:136)`"),
//! not the standard library's `Queue.get` or a package's `DataLoader.__next__` below it. The
//! full path says where a file comes from, and the sampler, which reads it, decides there
//! ([`FileOrigin::of_path`]): under a `site-packages` or `dist-packages` folder is an installed
//! package; under the interpreter's own `PREFIX/lib/pythonX.Y` ([`StdlibDirs`]), or frozen, is
//! the standard library; anything else is the job's (a script, a package run with `-m`, a
//! `src/` layout installed editable). The sample log keeps the decision.
//!
//! Frames carry the shortened name (`torch/utils/data/dataloader.py`, `threading.py`,
//! `train.py`). Where only that name is known (a sample log written before origins were kept)
//! the origin is inferred from it ([`FileOrigin::infer`]): a first component that is a
//! standard-library module is the standard library, any other name under a folder is an
//! installed package, and a bare file name is the job's.

/// Where a frame's code comes from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum FileOrigin {
    /// The job's own code: the script and modules beside it.
    Job,
    /// Python's standard library (frozen modules included).
    Stdlib,
    /// An installed package (site-packages): torch, numpy, PIL.
    Package,
    /// Native code, or a file name that says nothing.
    Native,
}

impl FileOrigin {
    /// The origin of a Python frame from its file's path as the interpreter holds it (the
    /// code object's file name: absolute, as the target's own mount namespace names it), and
    /// where this interpreter keeps its standard library, where known. Without it, a
    /// `lib/pythonX.Y` (or `lib64/`) folder of any prefix is taken for the standard library.
    pub fn of_path(path: &str, stdlib: Option<&StdlibDirs>) -> FileOrigin {
        if path.starts_with("<frozen ") {
            return FileOrigin::Stdlib;
        }
        if path.starts_with('<') {
            // `<string>`, `<stdin>`: code the job handed to exec.
            return FileOrigin::Job;
        }
        if in_package_folder(path) {
            return FileOrigin::Package;
        }
        let in_stdlib = match stdlib {
            Some(dirs) => dirs.holds(path),
            None => path
                .split('/')
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| matches!(w[0], "lib" | "lib64") && is_versioned_python_dir(w[1])),
        };
        if in_stdlib {
            FileOrigin::Stdlib
        } else {
            FileOrigin::Job
        }
    }

    /// The origin of a frame from its shortened file name (as frames carry it) and whether it
    /// is native.
    pub fn infer(file: &str, native: bool) -> FileOrigin {
        if native {
            return FileOrigin::Native;
        }
        if file.starts_with("<frozen ") {
            return FileOrigin::Stdlib;
        }
        if file.starts_with('<') {
            // `<string>`, `<stdin>`: code the job handed to exec.
            return FileOrigin::Job;
        }
        let path = file.strip_prefix('/').unwrap_or(file);
        if path.contains("/site-packages/") || path.contains("/dist-packages/") {
            return FileOrigin::Package;
        }
        if file.starts_with('/') {
            // A path the shortener left whole: the interpreter's own folder is the standard
            // library's.
            let stdlib = path.contains("/lib/python3") || path.contains("/lib64/python3");
            return if stdlib {
                FileOrigin::Stdlib
            } else {
                FileOrigin::Job
            };
        }
        let first = path.split('/').next().unwrap_or(path);
        let module = first.strip_suffix(".py").unwrap_or(first);
        if is_stdlib_module(module) {
            return FileOrigin::Stdlib;
        }
        if path.contains('/') {
            FileOrigin::Package
        } else {
            FileOrigin::Job
        }
    }
}

/// Whether a path runs through a `site-packages` or `dist-packages` folder.
fn in_package_folder(path: &str) -> bool {
    path.split('/')
        .any(|part| part == "site-packages" || part == "dist-packages")
}

/// `python3.12`, `python3.13t` (a free-threaded build's folder).
fn is_versioned_python_dir(name: &str) -> bool {
    let Some(version) = name.strip_prefix("python") else {
        return false;
    };
    let version = version.strip_suffix('t').unwrap_or(version);
    let mut parts = version.split('.');
    let numeric =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numeric(parts.next()) && numeric(parts.next()) && parts.next().is_none()
}

/// Where one interpreter keeps its standard library: `PREFIX/lib/pythonX.Y/` and
/// `PREFIX/lib64/pythonX.Y/` (with a `t` for a free-threaded build), as the target's paths name
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdlibDirs {
    /// Each with its trailing `/`.
    dirs: Vec<String>,
}

impl StdlibDirs {
    /// From the interpreter's executable as the target names it (`/usr/bin/python3.11`,
    /// `/root/.pyenv/versions/3.12.1/bin/python3.12`: a venv's `python` resolves to its base
    /// interpreter's) and its version. `None` for an executable outside a `bin` folder (an
    /// application that embeds Python), whose prefix this cannot tell.
    pub fn of_executable(executable: &str, major: u64, minor: u64) -> Option<StdlibDirs> {
        let (bin, _) = executable.rsplit_once('/')?;
        let (prefix, folder) = bin.rsplit_once('/')?;
        if folder != "bin" {
            return None;
        }
        let mut dirs = Vec::new();
        for lib in ["lib", "lib64"] {
            for build in ["", "t"] {
                dirs.push(format!("{prefix}/{lib}/python{major}.{minor}{build}/"));
            }
        }
        Some(StdlibDirs { dirs })
    }

    /// Keeps the folders `exists` says are there (asked with each folder's path, trailing `/`
    /// included); `None` when none is: the prefix was not this interpreter's after all.
    pub fn present(self, exists: impl Fn(&str) -> bool) -> Option<StdlibDirs> {
        let dirs: Vec<String> = self.dirs.into_iter().filter(|d| exists(d)).collect();
        (!dirs.is_empty()).then_some(StdlibDirs { dirs })
    }

    /// Whether `path` is in one of the folders (a package folder inside is not: see
    /// [`FileOrigin::of_path`]).
    pub fn holds(&self, path: &str) -> bool {
        self.dirs.iter().any(|dir| path.starts_with(dir.as_str()))
    }
}

/// Whether `name` is a top-level module of CPython's standard library (3.6 to 3.15), as
/// `sys.stdlib_module_names` lists them, less C-only modules that never show in a stack.
pub fn is_stdlib_module(name: &str) -> bool {
    STDLIB_MODULES.binary_search(&name).is_ok()
}

/// Sorted, so that a lookup is a binary search.
const STDLIB_MODULES: &[&str] = &[
    "__future__",
    "_aix_support",
    "_collections_abc",
    "_colorize",
    "_compat_pickle",
    "_compression",
    "_markupbase",
    "_opcode_metadata",
    "_osx_support",
    "_py_abc",
    "_py_warnings",
    "_pydatetime",
    "_pydecimal",
    "_pyio",
    "_pylong",
    "_pyrepl",
    "_sitebuiltins",
    "_strptime",
    "_threading_local",
    "_weakrefset",
    "abc",
    "aifc",
    "annotationlib",
    "antigravity",
    "argparse",
    "ast",
    "asynchat",
    "asyncio",
    "asyncore",
    "base64",
    "bdb",
    "bisect",
    "bz2",
    "cProfile",
    "calendar",
    "cgi",
    "cgitb",
    "chunk",
    "cmd",
    "code",
    "codecs",
    "codeop",
    "collections",
    "colorsys",
    "compileall",
    "compression",
    "concurrent",
    "configparser",
    "contextlib",
    "contextvars",
    "copy",
    "copyreg",
    "crypt",
    "csv",
    "ctypes",
    "curses",
    "dataclasses",
    "datetime",
    "dbm",
    "decimal",
    "difflib",
    "dis",
    "distutils",
    "doctest",
    "email",
    "encodings",
    "ensurepip",
    "enum",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "genericpath",
    "getopt",
    "getpass",
    "gettext",
    "glob",
    "graphlib",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "idlelib",
    "imaplib",
    "imghdr",
    "imp",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "json",
    "keyword",
    "lib2to3",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "mailcap",
    "mimetypes",
    "modulefinder",
    "multiprocessing",
    "netrc",
    "nntplib",
    "ntpath",
    "nturl2path",
    "numbers",
    "opcode",
    "operator",
    "optparse",
    "os",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "pipes",
    "pkgutil",
    "platform",
    "plistlib",
    "poplib",
    "posixpath",
    "pprint",
    "profile",
    "profiling",
    "pstats",
    "pty",
    "py_compile",
    "pyclbr",
    "pydoc",
    "pydoc_data",
    "queue",
    "quopri",
    "random",
    "re",
    "reprlib",
    "rlcompleter",
    "runpy",
    "sched",
    "secrets",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "site",
    "smtpd",
    "smtplib",
    "sndhdr",
    "socket",
    "socketserver",
    "sqlite3",
    "sre_compile",
    "sre_constants",
    "sre_parse",
    "ssl",
    "stat",
    "statistics",
    "string",
    "stringprep",
    "struct",
    "subprocess",
    "sunau",
    "symtable",
    "sysconfig",
    "tabnanny",
    "tarfile",
    "telnetlib",
    "tempfile",
    "textwrap",
    "this",
    "threading",
    "timeit",
    "tkinter",
    "token",
    "tokenize",
    "tomllib",
    "trace",
    "traceback",
    "tracemalloc",
    "tty",
    "turtle",
    "turtledemo",
    "types",
    "typing",
    "unittest",
    "urllib",
    "uu",
    "uuid",
    "venv",
    "warnings",
    "wave",
    "weakref",
    "webbrowser",
    "wsgiref",
    "xdrlib",
    "xml",
    "xmlrpc",
    "zipapp",
    "zipfile",
    "zipimport",
    "zoneinfo",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_list_is_sorted() {
        assert!(STDLIB_MODULES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn shortened_names_of_a_real_job() {
        use FileOrigin::*;
        let cases = [
            ("train.py", Job),
            ("threading.py", Stdlib),
            ("selectors.py", Stdlib),
            ("multiprocessing/queues.py", Stdlib),
            ("concurrent/futures/thread.py", Stdlib),
            ("<frozen importlib._bootstrap>", Stdlib),
            ("torch/utils/data/dataloader.py", Package),
            ("PIL/ImageFile.py", Package),
            ("<string>", Job),
            ("/opt/job/train.py", Job),
            ("/usr/lib/python3/dist-packages/numpy/core/x.py", Package),
            ("/venv/lib/python3.12/site-packages/six.py", Package),
            ("/usr/lib/python3.12/threading.py", Stdlib),
        ];
        for (file, origin) in cases {
            assert_eq!(FileOrigin::infer(file, false), origin, "{file}");
        }
        assert_eq!(FileOrigin::infer("libc.so.6", true), Native);
    }

    #[test]
    fn absolute_paths_against_the_interpreters_prefix() {
        use FileOrigin::*;
        let pyenv = StdlibDirs::of_executable("/root/.pyenv/versions/3.12.1/bin/python3.12", 3, 12)
            .expect("a bin folder");
        let stdlib = Some(&pyenv);
        let cases = [
            (
                "/root/.pyenv/versions/3.12.1/lib/python3.12/threading.py",
                Stdlib,
            ),
            (
                "/root/.pyenv/versions/3.12.1/lib/python3.12/multiprocessing/queues.py",
                Stdlib,
            ),
            ("<frozen importlib._bootstrap>", Stdlib),
            (
                "/root/.pyenv/versions/3.12.1/lib/python3.12/site-packages/torch/nn/x.py",
                Package,
            ),
            ("/venv/lib/python3.12/site-packages/six.py", Package),
            ("/usr/lib/python3/dist-packages/numpy/core/x.py", Package),
            // Another interpreter's standard library is not this one's: a job's own copy.
            ("/usr/lib/python3.12/threading.py", Job),
            // A job laid out as a package, whatever its modules are called.
            ("/work/job/pkg/loop.py", Job),
            ("/work/job/pkg/queue.py", Job),
            ("/work/job/src/pkg/data.py", Job),
            ("train.py", Job),
            ("<string>", Job),
        ];
        for (path, origin) in cases {
            assert_eq!(FileOrigin::of_path(path, stdlib), origin, "{path}");
        }
        // Without the prefix: any lib/pythonX.Y folder.
        assert_eq!(
            FileOrigin::of_path("/usr/lib/python3.12/threading.py", None),
            Stdlib
        );
        assert_eq!(
            FileOrigin::of_path("/opt/py/lib64/python3.13t/queue.py", None),
            Stdlib
        );
        assert_eq!(FileOrigin::of_path("/work/lib/python/queue.py", None), Job);
        assert_eq!(StdlibDirs::of_executable("/opt/app/embedded", 3, 12), None);
        let system = StdlibDirs::of_executable("/usr/bin/python3.11", 3, 11).expect("bin");
        assert!(system.holds("/usr/lib/python3.11/json/decoder.py"));
        assert!(!system.holds("/usr/lib/python3.110/x.py"));
        let lib64 = system
            .clone()
            .present(|d| d.starts_with("/usr/lib64/"))
            .expect("one");
        assert!(lib64.holds("/usr/lib64/python3.11/os.py"));
        assert!(!lib64.holds("/usr/lib/python3.11/os.py"));
        assert_eq!(system.present(|_| false), None);
    }
}
