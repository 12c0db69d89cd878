//! Where a frame's code comes from, decided here where its file's full path is known
//! ([`stackscope_event::FileOrigin::of_path`]): both readers ask [`Origins`] with the path the
//! code object holds, and the frame carries the answer on into the recording and its sample
//! log.

use std::path::Path;

use stackscope_event::{FileOrigin, StdlibDirs};

use crate::procfs;

/// One target's rule: its interpreter's standard library, found from its executable.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origins {
    stdlib: Option<StdlibDirs>,
}

impl Origins {
    /// For process `pid`, whose interpreter is version `major.minor`. `/proc/PID/exe` names
    /// the executable as the target's own mount namespace does (a container's `/usr/bin/...`),
    /// as its code objects name their files; the folders found from it must be there under
    /// `/proc/PID/root` (the target's view of the file system), or the prefix is not known.
    pub(crate) fn of_process(pid: u32, major: u64, minor: u64) -> Origins {
        let stdlib = procfs::exe(pid)
            .ok()
            .and_then(|exe| StdlibDirs::of_executable(exe.to_str()?, major, minor))
            .and_then(|dirs| {
                dirs.present(|dir| Path::new(&format!("/proc/{pid}/root{dir}")).is_dir())
            });
        Origins { stdlib }
    }

    /// The origin of a Python frame whose code object names `path`.
    pub(crate) fn of(&self, path: &str) -> FileOrigin {
        FileOrigin::of_path(path, self.stdlib.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_is_no_python_has_no_standard_library_folders() {
        // The test binary is no Python: no lib/python3.11 beside it.
        let me = Origins::of_process(std::process::id(), 3, 11);
        assert!(me.stdlib.is_none());
        assert_eq!(me.of("/work/job/loop.py"), FileOrigin::Job);
        assert_eq!(
            me.of("/venv/lib/python3.11/site-packages/six.py"),
            FileOrigin::Package
        );
        assert_eq!(me.of("<frozen runpy>"), FileOrigin::Stdlib);
    }
}
