//! `stackscope top` end to end: the full-screen view driven in a real terminal (tmux: a
//! detached session of a fixed size, `capture-pane` to read the screen, `send-keys` to press
//! keys), and the plain-text mode with standard output piped.
//!
//! Needs `tmux` on the PATH (`apt-get install -y tmux`).

use crate::common;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

/// How long a condition on the screen may take to appear: generous, since a test machine of two
/// cores may be busy with other test binaries.
const SCREEN_TIMEOUT: Duration = Duration::from_secs(30);

/// One tmux server of its own (`-L`, a unique socket name) running one session; Drop kills
/// the server and with it whatever still runs in the session.
struct Tmux {
    socket: String,
    dir: tempfile::TempDir,
}

impl Tmux {
    /// Runs `command` (a shell command line) in a new `width`x`height` session. The shell then
    /// writes the command's exit status and `stty -a` to files and waits, so the pane stays to
    /// be looked at after `top` ends.
    fn start(width: u16, height: u16, command: &str) -> Tmux {
        let version = Command::new("tmux").arg("-V").output();
        assert!(
            version.is_ok_and(|o| o.status.success()),
            "these tests need tmux: apt-get install -y tmux"
        );
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let socket = format!(
            "stackscope-top-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let dir = tempfile::Builder::new()
            .prefix("stackscope-tmux-")
            .tempdir()
            .expect("temp dir");
        let tmux = Tmux { socket, dir };
        let script = format!(
            "{command}; echo EXIT=$? > '{exit}'; stty -a > '{stty}'; sleep 600",
            exit = tmux.exit_path().display(),
            stty = tmux.dir.path().join("stty").display(),
        );
        tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            &script,
        ]);
        tmux
    }

    fn exit_path(&self) -> PathBuf {
        self.dir.path().join("exit")
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux runs");
        assert!(
            out.status.success(),
            "tmux {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    fn keys(&self, keys: &str) {
        self.run(&["send-keys", "-t", "top", keys]);
    }

    /// Whether the pane is on the alternate screen.
    fn alternate_on(&self) -> bool {
        self.run(&["display-message", "-p", "-t", "top", "#{alternate_on}"])
            .trim()
            == "1"
    }

    fn resize(&self, width: u16, height: u16) {
        self.run(&[
            "resize-window",
            "-t",
            "top",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
        ]);
    }

    /// Polls the screen until `test` accepts it; panics with the last screen after the
    /// timeout, or at once if the command has ended.
    fn wait_for(&self, what: &str, test: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_until(SCREEN_TIMEOUT, what, || {
                last = self.screen();
                if test(&last) {
                    return Some(last.clone());
                }
                if let Ok(exit) = fs::read_to_string(self.exit_path()) {
                    panic!("stackscope ended ({}) before {what}", exit.trim());
                }
                None
            })
        }));
        match found {
            Ok(screen) => screen,
            Err(_) => panic!("no {what} on the screen; it shows:\n{last}"),
        }
    }

    /// Waits for the command's exit status.
    fn exit_code(&self) -> i32 {
        let text = wait_until(SCREEN_TIMEOUT, "stackscope to exit", || {
            fs::read_to_string(self.exit_path()).ok()
        });
        text.trim()
            .strip_prefix("EXIT=")
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("odd exit file: {text:?}"))
    }

    /// `stty -a` of the pane's terminal after the command ended.
    fn stty(&self) -> String {
        let path = self.dir.path().join("stty");
        wait_until(SCREEN_TIMEOUT, "stty -a after stackscope", || {
            fs::read_to_string(&path).ok().filter(|t| !t.is_empty())
        })
    }

    /// The terminal is as the shell left it: off the alternate screen, line editing and echo on.
    fn assert_restored(&self) {
        assert!(!self.alternate_on(), "still on the alternate screen");
        let stty = self.stty();
        let flags: Vec<&str> = stty.split_whitespace().collect();
        for flag in ["icanon", "echo", "isig"] {
            assert!(
                flags.contains(&flag),
                "the terminal was left without {flag}:\n{stty}"
            );
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A shell word: single-quoted (the temp paths used here hold no single quote).
fn quote(path: &Path) -> String {
    format!("'{}'", path.display())
}

/// `stackscope top --pid PID ARGS...` as a shell command line.
fn top_command(pid: u32, args: &[&str]) -> String {
    format!(
        "{} top --pid {pid} {}",
        quote(Path::new(bin())),
        args.join(" ")
    )
}

/// The same, with the fake NVML showing one device called `name`, utilization a square wave.
fn top_with_fake_gpu(pid: u32, name: &str, dir: &Path) -> String {
    let script = dir.join("nvml.json");
    fs::write(
        &script,
        format!(
            r#"{{"devices":[{{"name":"{name}","utilization":{{"square":{{"period_s":2.0,"low":5,"high":95}}}}}}],"sample_period_ms":50}}"#
        ),
    )
    .expect("write the NVML script");
    let lib = fake_nvml();
    format!(
        "env STACKSCOPE_FAKE_NVML={} {}",
        quote(&script),
        top_command(pid, &["--nvml-lib", &quote(&lib)])
    )
}

/// The numbers of a row of the table: the percentage columns before the function name.
fn row_numbers(screen: &str, function: &str) -> Option<Vec<f64>> {
    // A row starts with its percentages; other lines (the verdict's path) may name it too.
    let line = screen.lines().find(|l| {
        let is_row = l
            .split_whitespace()
            .next()
            .is_some_and(|w| w == "-" || w.parse::<f64>().is_ok());
        is_row
            && l.split_whitespace()
                .any(|w| w == function || w.trim_end_matches('…') == function)
    })?;
    Some(
        line.split_whitespace()
            .map_while(|w| w.parse::<f64>().ok())
            .collect(),
    )
}

/// The "samples N" count of the header.
fn sample_count(screen: &str) -> Option<u64> {
    let after = screen.split("samples ").nth(1)?;
    after.split_whitespace().next()?.parse().ok()
}

#[test]
fn top_shows_the_hot_function_and_the_gpu_and_q_exits_0_leaving_all_as_it_was() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    let tmux = Tmux::start(
        120,
        40,
        &top_with_fake_gpu(fixture.pid, "Fake H100 TOP", fixture.dir.path()),
    );

    // Enough samples that the share means something: cpu_split spends 75% in hot_heavy.
    let screen = tmux.wait_for("hot_heavy with 150 samples", |s| {
        s.contains("hot_heavy") && sample_count(s).is_some_and(|n| n >= 150)
    });
    assert!(tmux.alternate_on(), "top should use the alternate screen");
    assert!(screen.contains(&format!("pid {}", fixture.pid)), "{screen}");
    assert!(screen.contains("Python 3."), "{screen}");
    let numbers = row_numbers(&screen, "hot_heavy").expect("a hot_heavy row");
    // own% last, total% last, own% all, total% all, GPU-idle share.
    assert_eq!(
        numbers.len(),
        5,
        "five percentage columns with a GPU:\n{screen}"
    );
    assert!(
        (50.0..=95.0).contains(&numbers[2]),
        "hot_heavy's own share since start should be near 75%:\n{screen}"
    );
    let first_row = screen
        .lines()
        .skip_while(|l| !l.contains("file:line"))
        .nth(1)
        .unwrap_or_default();
    assert!(
        first_row.contains("hot_heavy"),
        "hot_heavy should lead the default sort:\n{screen}"
    );

    // One line per GPU, with the fake device's name, its utilization and memory.
    let gpu_line = screen
        .lines()
        .find(|l| l.starts_with("GPU0 "))
        .unwrap_or_else(|| panic!("no GPU line:\n{screen}"));
    assert!(gpu_line.contains("Fake H100 TOP"), "{gpu_line}");
    assert!(
        gpu_line.contains("util") && gpu_line.contains("GiB"),
        "{gpu_line}"
    );
    assert!(screen.contains("idle%"), "a GPU-idle column:\n{screen}");
    // The trainer (the target's main thread, which never waits here) and where it runs while
    // the GPU idles.
    let trainer = format!("trainer pid {} MainThread: runs at ", fixture.pid);
    let screen = tmux.wait_for("the trainer's line", |s| s.contains(&trainer));
    let line = screen
        .lines()
        .find(|l| l.starts_with(&trainer))
        .unwrap_or_default();
    assert!(
        line.contains("(cpu_split.py:") && line.contains("% of GPU-idle time"),
        "{line}"
    );

    // The screen changes between refreshes.
    let before = sample_count(&screen).expect("a sample count");
    tmux.wait_for("a new sample count", |s| {
        sample_count(s).is_some_and(|n| n > before)
    });

    // `s` moves the sort to the next column, in the header and in the column's mark.
    assert!(screen.contains("sort: own% (last interval)"), "{screen}");
    tmux.keys("s");
    let sorted = tmux.wait_for("the total% sort", |s| {
        s.contains("sort: total% (last interval)") && s.contains("total%▼")
    });
    assert!(!sorted.contains("own%▼"), "one sort mark:\n{sorted}");

    // `?` shows the help; `p` pauses.
    tmux.keys("?");
    tmux.wait_for("the help", |s| {
        s.contains("keys") && s.contains("pause the display")
    });
    tmux.keys("?");
    tmux.keys("p");
    tmux.wait_for("the paused footer", |s| s.contains("PAUSED"));
    tmux.keys("p");
    tmux.wait_for("the footer again", |s| s.contains("q quit · s sort"));

    tmux.keys("q");
    assert_eq!(tmux.exit_code(), 0, "q should exit 0");
    tmux.assert_restored();
    assert_running_and_progressing(fixture.pid);
}

#[test]
fn top_fits_80x24_resizes_and_ctrl_c_quits() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    let tmux = Tmux::start(80, 24, &top_command(fixture.pid, &["--gpu", "off"]));
    let screen = tmux.wait_for("hot_heavy at 80x24", |s| s.contains("hot_heavy"));
    let lines: Vec<&str> = screen.lines().collect();
    assert!(
        lines.last().is_some_and(|l| l.starts_with("q quit")),
        "the footer on the last of 24 lines:\n{screen}"
    );
    // The header's fields wrap rather than run off the edge.
    assert!(screen.contains("threads 1 (1 active)"), "{screen}");
    assert!(screen.contains("GPU: GPU polling is off"), "{screen}");

    tmux.resize(120, 40);
    tmux.wait_for("a 40-line layout", |s| {
        let lines: Vec<&str> = s.lines().collect();
        lines.len() == 40 && lines[39].starts_with("q quit") && s.contains("hot_heavy")
    });
    tmux.resize(60, 15);
    tmux.wait_for("a 15-line layout", |s| {
        let lines: Vec<&str> = s.lines().collect();
        lines.len() == 15 && lines[14].starts_with("q quit") && s.contains("hot_heavy")
    });
    tmux.resize(80, 24);
    tmux.wait_for("80x24 again", |s| s.lines().count() == 24);

    // `t` adds a thread column; `i` shows idle threads.
    tmux.keys("t");
    tmux.wait_for("per-thread rows", |s| {
        s.contains("MainThread") && s.contains("per thread")
    });
    tmux.keys("i");
    tmux.wait_for("idle threads shown", |s| s.contains("idle threads shown"));

    // `r` starts the since-start counts over.
    let screen = tmux.wait_for("100 samples", |s| sample_count(s).is_some_and(|n| n >= 100));
    let before = sample_count(&screen).unwrap_or_default();
    tmux.keys("r");
    tmux.wait_for("a count started over", |s| {
        sample_count(s).is_some_and(|n| n < before / 2)
    });

    tmux.keys("C-c");
    assert_eq!(tmux.exit_code(), 0, "Ctrl-C should exit 0");
    tmux.assert_restored();
    assert_running_and_progressing(fixture.pid);
}

#[test]
fn when_the_target_ends_top_shows_the_final_totals_and_waits_for_q() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &["3"]);
    let tmux = Tmux::start(120, 40, &top_command(fixture.pid, &["--gpu", "off"]));
    let ended = format!("process {} ended", fixture.pid);
    let screen = tmux.wait_for("the end of the process", |s| s.contains(&ended));
    assert!(screen.contains("hot_heavy"), "final totals:\n{screen}");
    assert!(
        !tmux.exit_path().exists() && tmux.alternate_on(),
        "top should wait for q once the process ended"
    );
    tmux.keys("q");
    assert_eq!(tmux.exit_code(), 0);
    tmux.assert_restored();
}

/// The pid of the command the pane's shell runs (`top`).
fn pane_child(tmux: &Tmux) -> u32 {
    let shell: u32 = tmux
        .run(&["display-message", "-p", "-t", "top", "#{pane_pid}"])
        .trim()
        .parse()
        .expect("the pane's pid");
    wait_until(SCREEN_TIMEOUT, "the pane's shell to start top", || {
        let children = fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    })
}

#[test]
fn sigterm_and_a_panic_leave_the_terminal_restored_and_the_target_running() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);

    let tmux = Tmux::start(100, 30, &top_command(fixture.pid, &["--gpu", "off"]));
    tmux.wait_for("hot_heavy", |s| s.contains("hot_heavy"));
    send_signal(pane_child(&tmux), "TERM");
    assert_eq!(tmux.exit_code(), 0, "SIGTERM should end top with 0");
    tmux.assert_restored();
    drop(tmux);

    // Debug builds panic after the first frame when asked: the panic hook restores the
    // terminal before the message, so it lands on the normal screen.
    let tmux = Tmux::start(
        100,
        30,
        &format!(
            "env STACKSCOPE_TOP_TEST_PANIC=1 {}",
            top_command(fixture.pid, &["--gpu", "off"])
        ),
    );
    assert_eq!(tmux.exit_code(), 101, "a panic exits 101");
    tmux.assert_restored();
    let screen = tmux.screen();
    assert!(
        screen.contains("STACKSCOPE_TOP_TEST_PANIC is set"),
        "the panic message on the normal screen:\n{screen}"
    );
    assert_running_and_progressing(fixture.pid);
}

/// A run of `top` with standard output piped, its output readable while it runs.
struct PipedTop {
    child: std::process::Child,
    out: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl PipedTop {
    fn start(pid: u32, args: &[&str]) -> PipedTop {
        let mut child = stackscope(&["top", "--pid", &pid.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start stackscope top");
        let out = Arc::new(Mutex::new(String::new()));
        let mut stdout = child.stdout.take().expect("stdout");
        let sink = Arc::clone(&out);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_str(&text);
            }
        });
        PipedTop {
            child,
            out,
            reader: Some(reader),
        }
    }

    fn output(&self) -> String {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits for the exit; gives the status code, all of stdout and stderr.
    fn finish(mut self) -> (Option<i32>, String, String) {
        let status = wait_until(SCREEN_TIMEOUT, "stackscope top to exit", || {
            self.child.try_wait().ok().flatten()
        });
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut stderr);
        }
        (status.code(), self.output(), stderr)
    }
}

impl Drop for PipedTop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tables(output: &str) -> usize {
    output.matches("stackscope top · pid").count()
}

#[test]
fn piped_top_prints_a_table_every_interval_and_exits_0_on_sigint() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    let top = PipedTop::start(fixture.pid, &["--gpu", "off"]);
    wait_until(SCREEN_TIMEOUT, "two tables with hot_heavy", || {
        let out = top.output();
        (tables(&out) >= 2 && out.contains("hot_heavy")).then_some(())
    });
    send_signal(top.child.id(), "INT");
    let (code, out, err) = top.finish();
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        !out.contains('\u{1b}'),
        "no terminal escapes in plain output"
    );
    assert!(out.contains("final totals"), "{out}");
    // Every table lists hot_heavy, with the same columns as the view.
    for table in out.split("stackscope top · pid").skip(1) {
        assert!(
            table.contains("hot_heavy"),
            "a table without hot_heavy:\n{table}"
        );
        assert!(
            table.contains("function") && table.contains("file:line"),
            "{table}"
        );
    }
    assert_running_and_progressing(fixture.pid);
}

#[test]
fn piped_top_prints_the_final_totals_and_exits_0_when_the_target_ends() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &["2"]);
    let top = PipedTop::start(fixture.pid, &["--gpu", "off"]);
    let (code, out, err) = top.finish();
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let heading = format!("process {} ended: final totals", fixture.pid);
    let last = out
        .split(&heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no {heading:?} in:\n{out}"));
    let numbers = row_numbers(last, "hot_heavy").expect("hot_heavy in the final table");
    assert!(
        (50.0..=95.0).contains(&numbers[2]),
        "hot_heavy's own share since start should be near 75%:\n{last}"
    );
}

#[test]
fn piped_top_with_the_fake_gpu_gives_the_data_phase_the_gpu_idle_samples() {
    let _serial = serial();
    let dir = tempfile::Builder::new()
        .prefix("stackscope-top-gpu-")
        .tempdir()
        .expect("temp dir");
    // train_sim writes 0 to this file while it loads data and 100 while it computes; the fake
    // GPU reads its utilization from it.
    let phase = dir.path().join("gpu-state");
    fs::write(&phase, "0").expect("phase file");
    let script = dir.path().join("nvml.json");
    fs::write(
        &script,
        format!(
            r#"{{"devices":[{{"name":"Fake H100","utilization":{{"file":"{}"}}}}],"sample_period_ms":20}}"#,
            phase.display()
        ),
    )
    .expect("write the NVML script");
    let phase_arg = phase.display().to_string();
    let fixture = Fixture::start(
        "train_sim.py",
        &[
            "--seconds",
            "5",
            "--step-ms",
            "500",
            "--gpu-file",
            &phase_arg,
        ],
    );
    let lib = fake_nvml();
    let mut cmd = stackscope(&["top", "--pid", &fixture.pid.to_string(), "--nvml-lib"]);
    cmd.arg(&lib).env("STACKSCOPE_FAKE_NVML", &script);
    let run = run_with_timeout(cmd, Duration::from_secs(60));
    run.assert_success();
    let heading = format!("process {} ended: final totals", fixture.pid);
    let last = run
        .stdout
        .split(&heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no {heading:?}\n{}", run.describe()));
    assert!(last.contains("GPU0 Fake H100"), "{last}");
    // own% last, total% last, own% all, total% all, GPU-idle share.
    let loading = row_numbers(last, "load_batch").expect("a load_batch row");
    let computing = row_numbers(last, "train_step").expect("a train_step row");
    assert!(
        loading[4] >= 70.0 && computing[4] <= 30.0,
        "the GPU-idle samples should be load_batch's:\n{last}"
    );
    // The same words as the recording's verdict: the call path, not the shared innermost busy.
    assert!(
        last.contains("What sets GPU-idle time apart is load_batch → decode_images"),
        "{last}"
    );
}

/// A trainer fed by two worker processes through a queue (`fixtures/feeder_job.py`), the fake
/// GPU following its steps: `top --subprocesses` names the trainer's wait and the workers' work
/// while the GPU idles, in the words of the recording's verdict.
#[test]
fn piped_top_names_the_trainers_wait_and_the_feeders_work_while_the_gpu_idles() {
    let _serial = serial();
    let dir = tempfile::Builder::new()
        .prefix("stackscope-top-roles-")
        .tempdir()
        .expect("temp dir");
    let gpu_file = dir.path().join("gpu-util");
    fs::write(&gpu_file, "3").expect("gpu file");
    let script = dir.path().join("nvml.json");
    fs::write(
        &script,
        format!(
            r#"{{"devices":[{{"name":"Fake H100","utilization":{{"file":"{}"}}}}],"sample_period_ms":50}}"#,
            gpu_file.display()
        ),
    )
    .expect("write the NVML script");
    let gpu_arg = gpu_file.display().to_string();
    let fixture = Fixture::start(
        "feeder_job.py",
        &[
            "--seconds",
            "9",
            "--period",
            "1.5",
            "--step",
            "0.5",
            "--gpu-file",
            &gpu_arg,
        ],
    );
    let lib = fake_nvml();
    let mut cmd = stackscope(&[
        "top",
        "--pid",
        &fixture.pid.to_string(),
        "--subprocesses",
        "--nvml-lib",
    ]);
    cmd.arg(&lib).env("STACKSCOPE_FAKE_NVML", &script);
    let run = run_with_timeout(cmd, Duration::from_secs(60));
    run.assert_success();
    let heading = format!("process {} ended: final totals", fixture.pid);
    let last = run
        .stdout
        .split(&heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no {heading:?}\n{}", run.describe()));
    let line = last
        .lines()
        .find(|l| l.starts_with("trainer pid "))
        .unwrap_or_else(|| panic!("no trainer line in the final table:\n{last}"));
    assert!(
        line.starts_with(&format!(
            "trainer pid {} MainThread: waits at BatchLoader.__next__ (feeder_job.py:",
            fixture.pid
        )),
        "{line}"
    );
    println!("{line}");
    assert!(line.contains(") in Queue.get "), "{line}");
    assert!(line.contains("% of GPU-idle time"), "{line}");
    // The two worker processes, busy in the augmentation.
    let workers = line
        .split(" · ")
        .find(|f| f.starts_with("workers "))
        .unwrap_or_else(|| panic!("no workers in {line}"));
    let pids = workers
        .trim_start_matches("workers ")
        .split(':')
        .next()
        .unwrap_or_default();
    assert_eq!(pids.split(',').count(), 2, "{workers}");
    assert!(
        workers.contains("% in augment_pixels (feeder_job.py:"),
        "{workers}"
    );
}

#[test]
fn top_of_a_missing_process_is_one_error_line_and_exit_1() {
    let run = run_stackscope(
        &["top", "--pid", &unused_pid().to_string()],
        Duration::from_secs(20),
    );
    run.assert_error(1);
}

/// The final table of a piped `top` run to its target's end.
fn final_table(fixture: &Fixture, args: &[&str]) -> String {
    let mut cmd = stackscope(&["top", "--pid", &fixture.pid.to_string()]);
    cmd.args(args);
    let run = run_with_timeout(cmd, Duration::from_secs(60));
    run.assert_success();
    let heading = format!("process {} ended: final totals", fixture.pid);
    run.stdout
        .split(&heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no {heading:?}\n{}", run.describe()))
        .to_owned()
}

/// A share `NAME held N%` or `NAME waited N%` in a GIL field, as a number.
fn gil_share(field: &str, what: &str) -> f64 {
    field
        .split(&format!("{what} "))
        .nth(1)
        .and_then(|rest| rest.split('%').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {what} share in {field:?}"))
}

/// A loop whose Python between steps waits for the GIL a helper thread spinning in pure Python
/// holds (`shape_job.py --helper spin`): `top` shows each thread's GIL share, the helper's
/// holds and the loop's waits.
#[test]
fn piped_top_shows_each_threads_gil_share() {
    let _serial = serial();
    let args: Vec<&str> = ["--seconds", "4"]
        .into_iter()
        .chain(common::shape_jobs::GIL_BOUND.iter().copied())
        .collect();
    let fixture = Fixture::start("shape_job.py", &args);
    let last = final_table(&fixture, &["--gpu", "off"]);
    let line = last
        .lines()
        .find(|l| l.contains(" GIL held "))
        .unwrap_or_else(|| panic!("no GIL line in the final table:\n{last}"));
    println!("{line}");
    let field = |name: &str| {
        line.split(" · ")
            .find(|f| f.starts_with(&format!("{name} GIL held ")))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            .to_owned()
    };
    let metrics = field("metrics");
    assert!(gil_share(&metrics, "held") >= 20.0, "{metrics}");
    let main = field("MainThread");
    assert!(gil_share(&main, "waited") >= 5.0, "{main}");
}

/// A loop fed by two worker processes (`shape_job.py --feed workers`) with the GPU off: `top
/// --subprocesses` names the loop and its step, read without GPU data, and its verdict, as
/// the recording's summary does.
#[test]
fn piped_top_without_gpu_data_shows_the_loops_step_and_verdict() {
    let _serial = serial();
    let fixture = Fixture::start(
        "shape_job.py",
        &[
            "--seconds",
            "5",
            "--feed",
            "workers",
            "--workers",
            "2",
            "--decode-ms",
            "80",
            "--step-ms",
            "20",
        ],
    );
    let last = final_table(&fixture, &["--subprocesses", "--gpu", "off"]);
    let loop_line = format!(
        "loop pid {} (MainThread), read without GPU data; step: ",
        fixture.pid
    );
    let line = last
        .lines()
        .find(|l| l.starts_with(&loop_line))
        .unwrap_or_else(|| panic!("no {loop_line:?} in the final table:\n{last}"));
    println!("{line}");
    assert!(line.contains("input_wait "), "{line}");
    assert!(line.contains(" · workers "), "the feeders: {line}");
    assert!(
        last.lines()
            .any(|l| l.starts_with("verdict (without GPU data): The loop ")),
        "{last}"
    );
    assert!(last.contains("GPU: GPU polling is off"), "{last}");
}
