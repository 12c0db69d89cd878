//! What the containers tests build its jobs with: a Python job in a PID and mount namespace of
//! its own, the checks that such namespaces can be made here, and the fake NVML and seccomp
//! helpers.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::*;

/// Why namespaced tests cannot run here, if they cannot.
pub fn unavailable() -> Option<&'static str> {
    static WHY: OnceLock<Option<&'static str>> = OnceLock::new();
    *WHY.get_or_init(|| {
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        let uid = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("");
        if uid != "0" {
            return Some("not root");
        }
        let works = Command::new("unshare")
            .args(["--pid", "--fork", "--mount", "--mount-proc", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let nsenter = Command::new("nsenter")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !works || !nsenter {
            return Some("unshare --pid --mount or nsenter is not available");
        }
        None
    })
}

macro_rules! require_namespaces {
    () => {
        if let Some(why) = unavailable() {
            eprintln!("skipping: needs root and PID/mount namespaces ({why})");
            return;
        }
    };
}

/// The interpreter `python3` runs: its installation prefix and the executable's path in it.
pub fn python_install() -> (PathBuf, PathBuf) {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, sys; print(sys.base_prefix); print(os.path.realpath(sys.executable))",
        ])
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    let prefix = PathBuf::from(lines.next().expect("prefix"));
    let exe = PathBuf::from(lines.next().expect("executable"));
    let relative = exe
        .strip_prefix(&prefix)
        .expect("python3's executable lies under its prefix")
        .to_path_buf();
    (prefix, relative)
}

/// `fixtures/container_job.py` in a new PID and mount namespace. Its Python installation is
/// bind-mounted onto a tmpfs mounted only inside, so the interpreter's path (and its
/// libpython's) exists there and nowhere on the host. Killed with its namespace on drop.
pub struct Job {
    unshare: Child,
    dir: tempfile::TempDir,
    /// The path of the interpreter inside the namespace.
    pub inside_python: PathBuf,
    /// The ready file's JSON: every id in it is the namespace's.
    pub info: serde_json::Value,
    /// The job's pid on the host.
    pub host_pid: u32,
}

impl Job {
    pub fn start(args: &[&str]) -> Job {
        let dir = tempfile::Builder::new()
            .prefix("stackscope-container-")
            .tempdir()
            .expect("temp dir");
        let mnt = dir.path().join("only-inside");
        fs::create_dir(&mnt).expect("mount point");
        let (prefix, exe) = python_install();
        let inside_python = mnt.join("py").join(&exe);
        let setup = r#"mount -t tmpfs none "$1" && mkdir "$1/py" && mount --bind "$2" "$1/py""#;
        Job::launch(dir, setup, [mnt, prefix], inside_python, None, args)
    }

    /// The job run by another Python, bind-mounted inside the namespace over the path of the
    /// host's own `python3`: the same path is a different file on each side.
    pub fn start_impostor(other: &OtherPython, args: &[&str]) -> Job {
        let dir = tempfile::Builder::new()
            .prefix("stackscope-container-")
            .tempdir()
            .expect("temp dir");
        let (prefix, exe) = python_install();
        let host_python = prefix.join(exe);
        let setup = r#"mount --bind "$1" "$2""#;
        Job::launch(
            dir,
            setup,
            [other.exe.clone(), host_python.clone()],
            host_python,
            Some(&other.prefix),
            args,
        )
    }

    /// Runs `setup` (with `setup_args` as $1, $2) in a new PID and mount namespace, then
    /// the fixture under `python`.
    fn launch(
        dir: tempfile::TempDir,
        setup: &str,
        setup_args: [PathBuf; 2],
        inside_python: PathBuf,
        python_home: Option<&Path>,
        args: &[&str],
    ) -> Job {
        let ready = dir.path().join("ready");
        let script = format!("{setup} && shift 2 && exec \"$@\"");
        let stderr = fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let mut cmd = Command::new("unshare");
        if let Some(home) = python_home {
            cmd.env("PYTHONHOME", home);
        }
        let unshare = cmd
            .args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc"])
            .args(["sh", "-c", &script, "sh"])
            .args(&setup_args)
            .arg(&inside_python)
            .arg(fixture_path("container_job.py"))
            .arg(&ready)
            .args(args)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("unshare starts");
        let mut job = Job {
            unshare,
            dir,
            inside_python,
            info: serde_json::Value::Null,
            host_pid: 0,
        };
        let text = wait_until(READY_TIMEOUT, "the namespaced job's ready file", || {
            if let Ok(Some(status)) = job.unshare.try_wait() {
                panic!(
                    "the namespaced job exited ({status}): {}",
                    fs::read_to_string(job.dir.path().join("stderr")).unwrap_or_default()
                );
            }
            fs::read_to_string(&ready)
                .ok()
                .filter(|t| !t.trim().is_empty())
        });
        job.info = serde_json::from_str(&text).expect("ready JSON");
        job.host_pid = job.host_pid_of(job.ns_pid());
        job
    }

    /// The job's pid in its own namespace (1: it is the namespace's init).
    pub fn ns_pid(&self) -> u32 {
        self.info["pid"].as_u64().expect("pid") as u32
    }

    /// A thread's id in the namespace, from the ready file.
    pub fn ns_tid(&self, name: &str) -> u64 {
        self.info["threads"][name]["native_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no thread {name} in {}", self.info))
    }

    /// The host pid of the process below `unshare` that has pid `ns_pid` in the namespace.
    pub fn host_pid_of(&self, ns_pid: u32) -> u32 {
        wait_until(Duration::from_secs(5), "the job's host pid", || {
            let mut queue = vec![self.unshare.id()];
            while let Some(pid) = queue.pop() {
                let nspid = nspid(&format!("/proc/{pid}/status"));
                if nspid.len() > 1 && nspid.last() == Some(&u64::from(ns_pid)) {
                    return Some(pid);
                }
                queue.extend(children(pid));
            }
            None
        })
    }

    /// The host's id of a thread the job knows as `ns_tid`.
    pub fn host_tid(&self, ns_tid: u64) -> u64 {
        let tasks = fs::read_dir(format!("/proc/{}/task", self.host_pid)).expect("task dir");
        tasks
            .flatten()
            .find_map(|t| {
                let ids = nspid(&t.path().join("status").to_string_lossy());
                (ids.last() == Some(&ns_tid)).then(|| ids[0])
            })
            .unwrap_or_else(|| panic!("no thread {ns_tid} in the job"))
    }

    /// `stackscope ARGS` run inside the job's PID and mount namespace, as a sidecar would.
    pub fn nsenter(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args([
            "--target",
            &self.host_pid.to_string(),
            "--pid",
            "--mount",
            "--",
        ])
        .arg(bin())
        .args(args);
        cmd
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // The namespace's init dies with unshare (--kill-child), and every process of the
        // namespace with it.
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// An installed Python of another minor version than `python3`'s.
pub struct OtherPython {
    pub prefix: PathBuf,
    pub exe: PathBuf,
    pub version: String,
}

/// Another CPython under `pyenv root`, if there is one.
pub fn other_python() -> Option<OtherPython> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .ok()?;
    let ours = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let root = Command::new("pyenv").arg("root").output().ok()?;
    let versions = PathBuf::from(String::from_utf8_lossy(&root.stdout).trim()).join("versions");
    let mut dirs: Vec<PathBuf> = fs::read_dir(versions)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs.into_iter().find_map(|prefix| {
        let name = prefix.file_name()?.to_str()?.to_owned();
        let mut parts = name.split('.');
        let (major, minor) = (parts.next()?, parts.next()?.parse::<u32>().ok()?);
        let version = format!("{major}.{minor}");
        let exe = prefix.join("bin").join(format!("python{version}"));
        (major == "3" && (8..=13).contains(&minor) && version != ours && exe.is_file()).then_some(
            OtherPython {
                prefix,
                exe,
                version,
            },
        )
    })
}

/// The ids of `NSpid:` in a status file, outermost first.
pub fn nspid(status_path: &str) -> Vec<u64> {
    fs::read_to_string(status_path)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("NSpid:"))
        .map(|l| {
            l["NSpid:".len()..]
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

pub fn polled_devices(summary: &serde_json::Value) -> Vec<String> {
    summary["gpu"]["devices"]
        .as_array()
        .expect("gpu devices")
        .iter()
        .filter_map(|d| d["name"].as_str().map(str::to_owned))
        .collect()
}

/// The non-empty values of the timeline's `process_utilization_pct` column.
pub fn process_shares(out: &OutDir) -> Vec<f64> {
    let csv = fs::read_to_string(out.out.join("gpu-timeline.csv")).expect("gpu-timeline.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let column = header
        .iter()
        .position(|h| *h == "process_utilization_pct")
        .expect("process_utilization_pct column");
    lines
        .filter_map(|l| l.split(',').nth(column)?.parse().ok())
        .collect()
}

/// Installs, in the child before it execs, a seccomp filter that answers EPERM to the system
/// calls `blocked` (x86_64 numbers) and allows everything else: what a container's profile
/// may do.
#[cfg(target_arch = "x86_64")]
pub fn seccomp_blocks(cmd: &mut Command, blocked: &'static [u32]) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (prctl) between fork and exec; the filter program
    // outlives the call that installs it.
    unsafe {
        cmd.pre_exec(move || {
            let statement = |code: u32, k: u32| libc::sock_filter {
                code: code as u16,
                jt: 0,
                jf: 0,
                k,
            };
            // Load the system call number; for each blocked one, "equal: go to the EPERM at
            // the end" (it follows the jumps and the ALLOW).
            let mut filter = vec![statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0)];
            for (i, &nr) in blocked.iter().enumerate() {
                filter.push(libc::sock_filter {
                    code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                    jt: (blocked.len() - i) as u8,
                    jf: 0,
                    k: nr,
                });
            }
            filter.push(statement(
                libc::BPF_RET | libc::BPF_K,
                libc::SECCOMP_RET_ALLOW,
            ));
            filter.push(statement(
                libc::BPF_RET | libc::BPF_K,
                libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
            ));
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_mut_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &program as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
