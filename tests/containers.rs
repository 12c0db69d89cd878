//! Jobs in containers: a Python job in a PID and mount namespace of its own (made with
//! `unshare`), whose interpreter lives at a path that exists only inside that namespace, profiled
//! from the host by its host pid and from inside with `nsenter` by the pid it sees itself.
//!
//! Needs root and util-linux's `unshare`/`nsenter`; each test says "skipping" in one line where
//! they are missing (or the kernel refuses new namespaces).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Why namespaced tests cannot run here, if they cannot.
fn unavailable() -> Option<&'static str> {
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
fn python_install() -> (PathBuf, PathBuf) {
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
struct Job {
    unshare: Child,
    dir: tempfile::TempDir,
    /// The path of the interpreter inside the namespace.
    inside_python: PathBuf,
    /// The ready file's JSON: every id in it is the namespace's.
    info: serde_json::Value,
    /// The job's pid on the host.
    host_pid: u32,
}

impl Job {
    fn start(args: &[&str]) -> Job {
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
    fn start_impostor(other: &OtherPython, args: &[&str]) -> Job {
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
    fn ns_pid(&self) -> u32 {
        self.info["pid"].as_u64().expect("pid") as u32
    }

    /// A thread's id in the namespace, from the ready file.
    fn ns_tid(&self, name: &str) -> u64 {
        self.info["threads"][name]["native_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no thread {name} in {}", self.info))
    }

    /// The host pid of the process below `unshare` that has pid `ns_pid` in the namespace.
    fn host_pid_of(&self, ns_pid: u32) -> u32 {
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
    fn host_tid(&self, ns_tid: u64) -> u64 {
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
    fn nsenter(&self, args: &[&str]) -> Command {
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
struct OtherPython {
    prefix: PathBuf,
    exe: PathBuf,
    version: String,
}

/// Another CPython under `pyenv root`, if there is one.
fn other_python() -> Option<OtherPython> {
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
fn nspid(status_path: &str) -> Vec<u64> {
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

fn children(pid: u32) -> Vec<u32> {
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

fn thread_named<'a>(dump: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    dump["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no thread {name} in the dump: {dump:#}"))
}

#[test]
fn attach_and_dump_from_the_host_by_host_pid() {
    require_namespaces!();
    let _serial = serial();
    let job = Job::start(&[]);
    assert!(
        !job.inside_python.exists(),
        "the interpreter's path must exist only inside the namespace"
    );
    let host = job.host_pid;
    assert_ne!(u64::from(host), u64::from(job.ns_pid()));
    let spinner_ns = job.ns_tid("spinner");
    let spinner_host = job.host_tid(spinner_ns);
    assert_ne!(spinner_ns, spinner_host);

    let out = OutDir::new();
    let rate = 50.0;
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &host.to_string(),
            "--duration",
            "3",
            "--rate",
            "50",
            "--gpu",
            "off",
            "-o",
            out.arg(),
        ],
        RUN_TIMEOUT,
    );
    run.assert_success();
    let folded = out.folded();
    let summary = out.summary();
    let excerpt = folded.excerpt();
    assert_eq!(
        summary["python_version"]
            .as_str()
            .map(|v| v.starts_with('3')),
        Some(true)
    );
    // The spinner holds the GIL and runs all the time: one sample a tick, as beside us.
    let spinner = folded.thread_function_total("spinner", "spin") as f64;
    let ticks = num(&summary["ticks"], "ticks");
    let seconds = num(&summary["duration_secs"], "duration_secs");
    assert!(
        spinner >= 0.9 * ticks && spinner <= ticks,
        "spinner: {spinner} samples in spin() of {ticks} ticks:\n{excerpt}"
    );
    assert!(
        ticks >= 0.5 * rate * seconds,
        "{ticks} ticks in {seconds:.1} s at {rate} Hz"
    );
    // The main thread waits in join(): idle, so not sampled without --idle.
    assert!(
        !folded.threads().contains_key("MainThread"),
        "the idle main thread was sampled:\n{excerpt}"
    );
    let threads = summary["threads"].as_array().expect("threads");
    let listed = threads
        .iter()
        .find(|t| t["name"] == "spinner")
        .expect("spinner in the summary");
    assert_eq!(listed["os_thread_id"].as_u64(), Some(spinner_host));

    // dump: host ids, the namespace's beside them, the spinner busy.
    let run = run_stackscope(&["dump", "--pid", &host.to_string()], RUN_TIMEOUT);
    run.assert_success();
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains("\"spinner\""))
        .unwrap_or_else(|| panic!("no spinner in the dump:\n{}", run.stdout));
    assert!(
        line.starts_with(&format!(
            "Thread {spinner_host} ({spinner_ns} in its namespace) \"spinner\" (active"
        )),
        "{line}"
    );
    assert!(
        run.stdout.starts_with(&format!(
            "Process {host} ({} in its namespace):",
            job.ns_pid()
        )),
        "{}",
        run.stdout
    );
    let run = run_stackscope(&["dump", "--json", "--pid", &host.to_string()], RUN_TIMEOUT);
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    assert_eq!(dump["pid"].as_u64(), Some(u64::from(host)));
    assert_eq!(dump["ns_pid"].as_u64(), Some(u64::from(job.ns_pid())));
    let spinner = thread_named(&dump, "spinner");
    assert_eq!(spinner["os_thread_id"].as_u64(), Some(spinner_host));
    assert_eq!(spinner["ns_thread_id"].as_u64(), Some(spinner_ns));
    assert_eq!(spinner["active"], true, "{spinner:#}");
    assert_eq!(spinner["frames"][0]["function"], "spin", "{spinner:#}");
    let main = thread_named(&dump, "MainThread");
    assert_eq!(main["active"], false, "{main:#}");
    assert_running_and_progressing(host);
}

#[test]
fn a_path_that_is_another_python_inside_is_read_as_the_inside_one() {
    require_namespaces!();
    let Some(other) = other_python() else {
        eprintln!("skipping: needs a second CPython version (pyenv) to bind-mount over python3");
        return;
    };
    let _serial = serial();
    let job = Job::start_impostor(&other, &[]);
    let pid = job.host_pid.to_string();
    let run = run_stackscope(&["dump", "--json", "--pid", &pid], RUN_TIMEOUT);
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    let version = dump["python_version"].as_str().expect("version");
    assert!(
        version.starts_with(&format!("{}.", other.version)),
        "the host's file at {} is another Python; read {version}",
        job.inside_python.display()
    );
    let spinner = thread_named(&dump, "spinner");
    assert_eq!(spinner["active"], true, "{spinner:#}");
    assert_eq!(spinner["frames"][0]["function"], "spin", "{spinner:#}");
    assert_eq!(thread_named(&dump, "MainThread")["active"], false);
    assert_running_and_progressing(job.host_pid);
}

#[test]
fn a_sidecar_in_the_namespace_uses_the_pid_the_job_sees() {
    require_namespaces!();
    let _serial = serial();
    let job = Job::start(&[]);
    let pid = job.ns_pid().to_string();
    let spinner_ns = job.ns_tid("spinner");

    let run = run_with_timeout(job.nsenter(&["dump", "--json", "--pid", &pid]), RUN_TIMEOUT);
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    assert_eq!(dump["pid"].as_u64(), Some(u64::from(job.ns_pid())));
    assert!(dump["ns_pid"].is_null(), "no translation inside: {dump:#}");
    let spinner = thread_named(&dump, "spinner");
    assert_eq!(spinner["os_thread_id"].as_u64(), Some(spinner_ns));
    assert!(spinner["ns_thread_id"].is_null());
    assert_eq!(spinner["active"], true, "{spinner:#}");
    assert_eq!(thread_named(&dump, "MainThread")["active"], false);

    let out = OutDir::new();
    let run = run_with_timeout(
        job.nsenter(&[
            "attach",
            "--pid",
            &pid,
            "--duration",
            "2",
            "--rate",
            "50",
            "--gpu",
            "off",
            "-o",
            out.arg(),
        ]),
        RUN_TIMEOUT,
    );
    run.assert_success();
    let folded = out.folded();
    let summary = out.summary();
    let spinner = folded.thread_function_total("spinner", "spin") as f64;
    let ticks = num(&summary["ticks"], "ticks");
    assert!(
        spinner >= 0.9 * ticks,
        "spinner: {spinner} of {ticks} ticks:\n{}",
        folded.excerpt()
    );
    assert!(!folded.threads().contains_key("MainThread"));
    assert_running_and_progressing(job.host_pid);
}

#[test]
fn subprocesses_are_followed_inside_a_namespace() {
    require_namespaces!();
    let _serial = serial();
    let job = Job::start(&["--children", "2"]);
    let kids: Vec<u32> = job.info["children"]
        .as_array()
        .expect("children")
        .iter()
        .map(|p| job.host_pid_of(p.as_u64().expect("pid") as u32))
        .collect();
    assert_eq!(kids.len(), 2);
    let out = OutDir::new();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &job.host_pid.to_string(),
            "--subprocesses",
            "--duration",
            "3",
            "--rate",
            "20",
            "--gpu",
            "off",
            "-o",
            out.arg(),
        ],
        RUN_TIMEOUT,
    );
    run.assert_success();
    let summary = out.summary();
    let processes = summary["processes"].as_array().expect("processes");
    for kid in &kids {
        let entry = processes
            .iter()
            .find(|p| p["pid"].as_u64() == Some(u64::from(*kid)))
            .unwrap_or_else(|| panic!("child {kid} not followed: {processes:#?}"));
        assert!(num(&entry["samples"], "samples") >= 5.0, "{entry}");
    }
    let folded = out.folded();
    for kid in &kids {
        let in_child: u64 = folded
            .stacks
            .iter()
            .filter(|s| s.thread.contains(&format!("process {kid} ")))
            .filter(|s| s.has_function("child_spin"))
            .map(|s| s.count)
            .sum();
        assert!(
            in_child >= 5,
            "child {kid}: {in_child}\n{}",
            folded.excerpt()
        );
    }
}

#[test]
fn native_frames_of_a_namespaced_process() {
    require_namespaces!();
    let _serial = serial();
    let job = Job::start(&[]);
    let run = run_stackscope(
        &[
            "dump",
            "--native",
            "--json",
            "--pid",
            &job.host_pid.to_string(),
        ],
        RUN_TIMEOUT,
    );
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    // The main thread waits in join(): its innermost frames are the interpreter's lock wait,
    // symbolized (with DWARF lines) from a libpython whose path only the namespace has.
    let main = thread_named(&dump, "MainThread");
    let frames = main["frames"].as_array().expect("frames");
    let native: Vec<String> = frames
        .iter()
        .filter(|f| f["native"] == true)
        .map(|f| format!("{} ({})", f["function"], f["file"]))
        .collect();
    assert!(
        native
            .iter()
            .any(|f| f.contains("acquire_lock") && f.contains("Modules/_threadmodule.c")),
        "no symbolized interpreter frames: {native:#?}"
    );
    assert!(
        frames
            .iter()
            .any(|f| f["function"] == "Thread.join" && f["native"] != true),
        "{frames:#?}"
    );
    let spinner = thread_named(&dump, "spinner");
    assert!(
        spinner["frames"]
            .as_array()
            .expect("frames")
            .iter()
            .any(|f| f["function"] == "spin"),
        "{spinner:#}"
    );
    assert_eq!(
        spinner["ns_thread_id"].as_u64(),
        Some(job.ns_tid("spinner"))
    );
    assert_running_and_progressing(job.host_pid);
}

/// The fake driver library, built beside the binary under test.
fn fake_nvml() -> PathBuf {
    let dir = Path::new(bin()).parent().expect("binary dir").to_path_buf();
    let lib = dir.join("libfake_nvml.so");
    if !lib.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "fake-nvml"])
            .current_dir(repo_root())
            .status()
            .expect("cargo build runs");
        assert!(status.success(), "cargo build -p fake-nvml failed");
    }
    lib
}

fn polled_devices(summary: &serde_json::Value) -> Vec<String> {
    summary["gpu"]["devices"]
        .as_array()
        .expect("gpu devices")
        .iter()
        .filter_map(|d| d["name"].as_str().map(str::to_owned))
        .collect()
}

/// The non-empty values of the timeline's `process_utilization_pct` column.
fn process_shares(out: &OutDir) -> Vec<f64> {
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

#[test]
fn gpu_auto_matches_the_job_by_host_pid_and_inside_by_the_pids_it_sees() {
    require_namespaces!();
    let _serial = serial();
    let job = Job::start(&[]);
    let lib = fake_nvml();
    // NVML lists processes by their host pids: the job on the second device only.
    let script = format!(
        r#"{{"devices":[{{"name":"Other","utilization":5}},{{"name":"Job's","utilization":80,"processes":[{}]}}],"sample_period_ms":20}}"#,
        job.host_pid
    );

    let out = OutDir::new();
    let mut cmd = stackscope(&[
        "attach",
        "--pid",
        &job.host_pid.to_string(),
        "--duration",
        "2",
        "--gpu",
        "auto",
        "-o",
        out.arg(),
        "--nvml-lib",
    ]);
    cmd.arg(&lib).env("STACKSCOPE_FAKE_NVML", &script);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let summary = out.summary();
    assert_eq!(polled_devices(&summary), ["Job's"], "{}", run.describe());
    let mean = num(&summary["gpu"]["mean_utilization"], "mean");
    assert!((mean - 80.0).abs() < 1.0, "{mean}");
    // The job's own share of the device, from NVML's per-process accounting by host pid.
    let shares = process_shares(&out);
    assert!(
        !shares.is_empty() && shares.iter().all(|s| (s - 80.0).abs() < 1.0),
        "{shares:?}"
    );

    // From inside, the job is pid 1 and no host pid is to be seen: said once, all polled.
    let out = OutDir::new();
    let lib_arg = lib.to_string_lossy().into_owned();
    let pid = job.ns_pid().to_string();
    let mut cmd = job.nsenter(&[
        "attach",
        "--pid",
        &pid,
        "--duration",
        "2",
        "--gpu",
        "auto",
        "-o",
        out.arg(),
        "--nvml-lib",
        &lib_arg,
    ]);
    cmd.env("STACKSCOPE_FAKE_NVML", &script);
    let started = Instant::now();
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    assert!(started.elapsed() < RUN_TIMEOUT);
    let summary = out.summary();
    assert_eq!(
        polled_devices(&summary),
        ["Other", "Job's"],
        "{}",
        run.describe()
    );
    let notices: Vec<&str> = summary["notices"]
        .as_array()
        .expect("notices")
        .iter()
        .filter_map(|n| n.as_str())
        .filter(|n| n.contains("PID namespace"))
        .collect();
    assert_eq!(notices.len(), 1, "{:#}", summary["notices"]);
    assert!(
        notices[0].contains("polling all visible devices"),
        "{notices:?}"
    );
    // No share is made up for a target NVML cannot be asked about.
    assert!(process_shares(&out).is_empty());

    // A driver that lists the caller's own pids (580 does): inside, the job is found as pid 1.
    let script = r#"{"devices":[{"name":"Other","utilization":5},{"name":"Job's","utilization":80,"processes":[1]}],"sample_period_ms":20}"#;
    let out = OutDir::new();
    let mut cmd = job.nsenter(&[
        "attach",
        "--pid",
        &pid,
        "--duration",
        "2",
        "--gpu",
        "auto",
        "-o",
        out.arg(),
        "--nvml-lib",
        &lib_arg,
    ]);
    cmd.env("STACKSCOPE_FAKE_NVML", script);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let summary = out.summary();
    assert_eq!(polled_devices(&summary), ["Job's"], "{}", run.describe());
    assert!(
        !summary["notices"].to_string().contains("PID namespace"),
        "{:#}",
        summary["notices"]
    );
    assert!(!process_shares(&out).is_empty());
}

#[test]
fn without_sys_ptrace_the_error_names_the_container_fixes() {
    require_namespaces!();
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !setpriv {
        eprintln!("skipping: needs setpriv (util-linux) to drop CAP_SYS_PTRACE");
        return;
    }
    let job = Job::start(&[]);
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--bounding-set",
        "-sys_ptrace",
        "--inh-caps",
        "-sys_ptrace",
        "--",
    ])
    .arg(bin())
    .args(["dump", "--pid", &job.host_pid.to_string()]);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_error(1);
    for fix in [
        "--cap-add SYS_PTRACE",
        "capabilities.add: [SYS_PTRACE]",
        "shareProcessNamespace: true",
        "kubectl debug --profile=general --target=CONTAINER",
    ] {
        assert!(run.stderr.contains(fix), "no {fix:?} in: {}", run.stderr);
    }
    assert!(!run.stderr.contains("seccomp"), "{}", run.stderr);
    assert_not_stopped(job.host_pid);
}

/// Installs, in the child before it execs, a seccomp filter that answers EPERM to the system
/// calls `blocked` (x86_64 numbers) and allows everything else: what a container's profile
/// may do.
#[cfg(target_arch = "x86_64")]
fn seccomp_blocks(cmd: &mut Command, blocked: &'static [u32]) {
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

#[cfg(target_arch = "x86_64")]
#[test]
fn a_seccomp_profile_blocking_ptrace_is_told_apart_from_a_missing_capability() {
    const PTRACE: u32 = 101;
    const PROCESS_VM_READV: u32 = 310;
    let fixture = Fixture::start("named_threads.py", &[]);
    let pid = fixture.pid.to_string();
    // process_vm_readv alone blocked: py-spy's reader goes through /proc/PID/mem instead.
    let mut cmd = stackscope(&["dump", "--pid", &pid]);
    seccomp_blocks(&mut cmd, &[PROCESS_VM_READV]);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    assert!(run.stdout.contains("worker_spin"), "{}", run.describe());

    let mut cmd = stackscope(&["dump", "--pid", &pid]);
    seccomp_blocks(&mut cmd, &[PTRACE, PROCESS_VM_READV]);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_error(1);
    assert!(
        run.stderr.contains("seccomp profile") && run.stderr.contains("Seccomp: 2"),
        "{}",
        run.describe()
    );
    assert!(
        run.stderr.contains("seccomp=unconfined") && run.stderr.contains("Unconfined"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("kubectl debug"), "{}", run.stderr);
    assert_not_stopped(fixture.pid);
}

#[test]
fn record_follows_a_child_that_runs_in_a_namespace() {
    require_namespaces!();
    let _serial = serial();
    let dir = tempfile::tempdir().expect("temp dir");
    let ready = dir.path().join("ready");
    let launcher = format!(
        "import subprocess; subprocess.run(['unshare', '--pid', '--fork', '--kill-child', \
         '--mount-proc', 'python3', {:?}, {:?}])",
        fixture_path("container_job.py").display().to_string(),
        ready.display().to_string()
    );
    let out = OutDir::new();
    let mut cmd = stackscope(&[
        "record",
        "--subprocesses",
        "--duration",
        "4",
        "--rate",
        "50",
        "--gpu",
        "off",
        "-o",
        out.arg(),
        "--",
        "python3",
        "-c",
    ]);
    cmd.arg(&launcher);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let info: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&ready).expect("the job started")).expect("JSON");
    let spinner_ns = info["threads"]["spinner"]["native_id"]
        .as_u64()
        .expect("spinner id");
    let summary = out.summary();
    let job = summary["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| {
            p["command_line"]
                .as_str()
                .is_some_and(|c| c.contains("container_job.py"))
        })
        .unwrap_or_else(|| panic!("the namespaced child was not followed: {summary:#}"));
    let job_pid = job["pid"].as_u64().expect("pid");
    assert_ne!(job_pid, info["pid"].as_u64().expect("ns pid"), "host pid");
    let spinner = summary["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["name"] == "spinner" && t["pid"].as_u64() == Some(job_pid))
        .unwrap_or_else(|| panic!("no spinner of {job_pid}: {summary:#}"));
    assert!(num(&spinner["samples"], "samples") >= 30.0, "{spinner}");
    let host_tid = spinner["os_thread_id"].as_u64().expect("os_thread_id");
    assert_ne!(host_tid, spinner_ns, "the spinner is named by its host id");
    let main = summary["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["name"] == "MainThread" && t["pid"].as_u64() == Some(job_pid))
        .unwrap_or_else(|| panic!("no MainThread of {job_pid}: {summary:#}"));
    assert_eq!(
        num(&main["samples"], "samples"),
        0.0,
        "the job's main thread waits in join(): idle, not sampled"
    );
}

#[test]
fn top_from_the_host_shows_the_spinning_function() {
    require_namespaces!();
    let _serial = serial();
    let job = Job::start(&[]);
    let pid = job.host_pid.to_string();
    // Piped, top prints a plain table every second; it watches for a fixed stretch here, as
    // `attach --duration` would, then stops on SIGINT with the final totals.
    let running = spawn_stackscope(stackscope(&["top", "--pid", &pid, "--gpu", "off"]));
    std::thread::sleep(Duration::from_secs(3));
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    run.assert_success();
    let totals = run
        .stdout
        .rsplit("final totals")
        .next()
        .expect("final totals");
    assert!(totals.contains(&format!("pid {pid}")), "{}", run.stdout);
    let row = totals
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("spin"))
        .unwrap_or_else(|| panic!("no row for spin:\n{totals}"));
    // own% all: the spinner is the only busy thread, and it is always in spin().
    let own_all: f64 = row
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{row}"));
    assert!(own_all >= 80.0, "{row}");
    assert_running_and_progressing(job.host_pid);
}
