//! Where a frame's file comes from: the job's own code, Python's standard library, or an
//! installed package.
//!
//! The verdict names the job's own line ("the training loop waits at `main (train.py:136)`"),
//! not the standard library's `Queue.get` or a package's `DataLoader.__next__` below it. The
//! full path says where a file comes from (`.../site-packages/...`, `.../lib/python3.12/...`),
//! but frames carry the shortened name (`torch/utils/data/dataloader.py`, `threading.py`,
//! `train.py`), so the origin is inferred from that name: a first component that is a
//! standard-library module is the standard library, any other name under a folder is an
//! installed package, and a bare file name is the job's.

/// Where a frame's code comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
}
