//! Jobs in containers: a Python job in a PID and mount namespace of its own (made with
//! `unshare`), whose interpreter lives at a path that exists only inside that namespace, profiled
//! from the host by its host pid and from inside with `nsenter` by the pid it sees itself.
//!
//! Needs root and util-linux's `unshare`/`nsenter`; each test says "skipping" in one line where
//! they are missing (or the kernel refuses new namespaces).

use crate::common;
#[macro_use]
mod support;

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use support::*;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

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
            // A root and an entry for each child: like ones are otherwise one group.
            "--processes-apart",
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
            .filter(|s| s.process.as_deref().and_then(process_root_pid) == Some(*kid))
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
    run.assert_duration_ended();
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
    // The job's main thread waits in join() once it has started: idle, left out (it may be
    // sampled before, while it starts up, and once or twice in join itself: the idle rule reads
    // the OS state, and a thread caught on its way into the wait is still running).
    let folded = out.folded();
    let of_job = || {
        folded.stacks.iter().filter(|s| {
            s.process
                .as_deref()
                .and_then(process_root_pid)
                .map(u64::from)
                == Some(job_pid)
        })
    };
    assert!(
        of_job().any(|s| s.has_function("spin")),
        "{}",
        folded.excerpt()
    );
    let in_join: u64 = of_job()
        .filter(|s| s.has_function("Thread.join"))
        .map(|s| s.count)
        .sum();
    assert!(in_join <= 2, "idle samples kept:\n{}", folded.excerpt());
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

#[test]
fn frame_origins_of_a_job_whose_interpreter_is_only_inside() {
    require_namespaces!();
    let _serial = serial();
    let job = Job::start(&[]);
    let pid = job.host_pid.to_string();
    let out = OutDir::new();
    let args = [
        "attach",
        "--pid",
        &pid,
        "--duration",
        "2",
        "--idle",
        "--gpu",
        "off",
    ];
    run_stackscope(&[&args[..], &["-o", out.arg()]].concat(), RUN_TIMEOUT).assert_success();
    let logged = crate::origins::logged_origins(&out.out);
    let origins = |file: &str| -> Vec<stackscope_event::FileOrigin> {
        logged
            .iter()
            .filter(|(f, _)| f == file)
            .map(|(_, o)| *o)
            .collect()
    };
    // The spinner's script, and the main thread's join() in the standard library that lives
    // at a path only the job's namespace has.
    use stackscope_event::FileOrigin::{Job as JobCode, Stdlib};
    assert_eq!(origins("container_job.py"), [JobCode], "{logged:?}");
    assert_eq!(origins("threading.py"), [Stdlib], "{logged:?}");
    assert_running_and_progressing(job.host_pid);
}
