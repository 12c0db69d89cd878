//! The file name shown for a frame: py-spy's "short filename", so that both readers name files
//! the same way.
//!
//! A path is cut just above its outermost package (the highest directory still holding an
//! `__init__.py`): `/venv/lib/site-packages/torch/nn/modules/linear.py` becomes
//! `torch/nn/modules/linear.py`, and a plain script keeps only its name. That asks the file
//! system, so each path is worked out once, with its origin ([`Origins`]) beside it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use stackscope_event::FileOrigin;

use crate::caps::CapHits;
use crate::origin::Origins;

pub(crate) struct FileNames {
    pid: u32,
    /// The target runs in another mount namespace (a container): its paths are looked up
    /// under /proc/PID/root.
    dockerized: bool,
    origins: Origins,
    short: HashMap<String, (Arc<str>, FileOrigin)>,
    /// Times the table was full and emptied.
    caps: CapHits,
}

impl FileNames {
    const MAX_ENTRIES: usize = 50_000;

    pub(crate) fn new(pid: u32, dockerized: bool, origins: Origins) -> FileNames {
        FileNames {
            pid,
            dockerized,
            origins,
            short: HashMap::new(),
            caps: CapHits::default(),
        }
    }

    /// Times the table reached its cap, handed on once.
    pub(crate) fn take_caps(&mut self) -> CapHits {
        self.caps.take()
    }

    /// The name shown for the code object's file `filename`, and where that file comes from.
    pub(crate) fn short(&mut self, filename: &str) -> (Arc<str>, FileOrigin) {
        if let Some(short) = self.short.get(filename) {
            return short.clone();
        }
        if self.short.len() >= Self::MAX_ENTRIES {
            self.caps.hit(self.short.len());
            self.short.clear();
        }
        let short: Arc<str> =
            Arc::from(shorten(filename, self.dockerized.then_some(self.pid)).unwrap_or(filename));
        let named = (short, self.origins.of(filename));
        self.short.insert(filename.to_owned(), named.clone());
        named
    }
}

/// py-spy's rule, step for step (including its answer for paths that are not absolute).
fn shorten(filename: &str, container_pid: Option<u32>) -> Option<&str> {
    let in_container;
    let looked_up = match container_pid {
        Some(pid) => {
            in_container = format!("/proc/{pid}/root{filename}");
            if Path::new(&in_container).exists() {
                in_container.as_str()
            } else {
                filename
            }
        }
        None => filename,
    };
    let mut path = Path::new(looked_up);
    while let Some(parent) = path.parent() {
        path = parent;
        if !parent.join("__init__.py").exists() {
            break;
        }
    }
    // Cut the same number of leading bytes from the name as the target reports it.
    let prefix = path.as_os_str().len();
    let prefix = prefix.checked_sub(looked_up.len() - filename.len())?;
    let rest = filename.get(prefix..)?;
    Some(rest.strip_prefix('/').unwrap_or(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_keeps_its_name_and_a_package_its_path() {
        let dir = std::env::temp_dir().join(format!("stackscope-short-{}", std::process::id()));
        let pkg = dir.join("pkg").join("sub");
        std::fs::create_dir_all(&pkg).expect("mkdir");
        std::fs::write(dir.join("pkg").join("__init__.py"), "").expect("init");
        std::fs::write(pkg.join("__init__.py"), "").expect("init");
        let mut names = FileNames::new(1, false, Origins::default());
        let module = pkg.join("mod.py");
        let (short, origin) = names.short(&module.to_string_lossy());
        assert_eq!((&*short, origin), ("pkg/sub/mod.py", FileOrigin::Job));
        let script = dir.join("train.py");
        assert_eq!(&*names.short(&script.to_string_lossy()).0, "train.py");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pseudo_files_are_kept() {
        let mut names = FileNames::new(1, false, Origins::default());
        assert_eq!(
            names.short("<frozen importlib._bootstrap>"),
            (
                Arc::from("<frozen importlib._bootstrap>"),
                FileOrigin::Stdlib
            )
        );
        assert_eq!(&*names.short("<string>").0, "<string>");
    }

    /// Files generated without end (`<string-N>` of exec'd code) fill the table to its cap; each
    /// time it is emptied is counted.
    #[test]
    fn a_full_table_of_file_names_is_counted() {
        let mut names = FileNames::new(1, false, Origins::default());
        for n in 0..FileNames::MAX_ENTRIES + 1 {
            names.short(&format!("<generated-{n}>"));
        }
        assert_eq!(names.short.len(), 1);
        let caps = names.take_caps();
        assert_eq!(
            (caps.reached, caps.evicted),
            (1, FileNames::MAX_ENTRIES as u64)
        );
        assert_eq!(names.take_caps(), CapHits::default());
    }
}
