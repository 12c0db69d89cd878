//! Running the poller against the fake NVML libraries (`crates/fake-nvml`).
//!
//! The fake reads its script from the environment at `nvmlInit` and keeps process-wide state, so
//! each scenario runs in a process of its own: the test re-runs its own executable filtered to
//! itself, with `STACKSCOPE_FAKE_NVML` set from the start. This works the same under
//! `cargo test` and `cargo nextest`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use stackscope_event::{Event, GpuSample, Timestamp};
use stackscope_gpu::{GpuConfig, GpuDeviceInfo, GpuPoller, PollerReport};
use stackscope_testkit::cdylib::{cdylib, profile_dir};

/// Set in the re-run process: the name of the test whose body runs there.
const CHILD_ENV: &str = "STACKSCOPE_GPU_TEST_CHILD";

/// Set in the re-run process: a scratch directory the parent created for the scenario.
const DIR_ENV: &str = "STACKSCOPE_GPU_TEST_DIR";

/// Runs `body` in a fresh process whose fake NVML follows the JSON that `script` makes. `name`
/// is the test's path in this binary (`module::function`), which the re-run selects exactly.
///
/// Both get the same scratch directory (for files a script refers to). In the parent, this
/// spawns the child and fails with its output if it fails; in the child, it runs `body`.
pub fn isolated(name: &str, script: impl FnOnce(&Path) -> String, body: impl FnOnce(&Path)) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        let dir = PathBuf::from(std::env::var_os(DIR_ENV).expect("scratch directory"));
        body(&dir);
        return;
    }
    // Build (or find) the libraries here, once, so children never race to build them.
    let _ = fake_lib_dir();
    let dir = tempfile::tempdir().expect("scratch directory");
    let exe = std::env::current_exe().expect("test executable path");
    let output = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .env(DIR_ENV, dir.path())
        .env("STACKSCOPE_FAKE_NVML", script(dir.path()))
        .output()
        .expect("re-run the test executable");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "scenario {name} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
}

/// A fixed script, for [`isolated`].
pub fn script(json: &str) -> impl FnOnce(&Path) -> String + '_ {
    move |_| json.to_string()
}

/// A path as a JSON string.
pub fn json_path(path: &Path) -> String {
    serde_json::to_string(path.to_str().expect("utf-8 path")).expect("a string serializes")
}

/// `target/<profile>/`, where cargo leaves the workspace's cdylibs, with both fake libraries
/// built and newer than their sources (`cargo test -p stackscope-gpu` alone does not build
/// other packages).
pub fn fake_lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        cdylib("fake-nvml");
        cdylib("fake-nvml-minimal");
        profile_dir()
    })
}

pub fn fake_lib() -> PathBuf {
    fake_lib_dir().join("libfake_nvml.so")
}

pub fn minimal_lib() -> PathBuf {
    fake_lib_dir().join("libfake_nvml_minimal.so")
}

/// A config for the fake library, polling fast so tests are short.
pub fn config(lib: PathBuf) -> GpuConfig {
    GpuConfig {
        nvml_lib: Some(lib),
        poll_interval: Duration::from_millis(100),
        remap_interval: Duration::from_millis(200),
        ..GpuConfig::default()
    }
}

/// A poller started against the fake, with what it sent.
pub struct Run {
    pub poller: GpuPoller,
    pub receiver: crossbeam_channel::Receiver<stackscope_event::Batch>,
    pub stop: Arc<AtomicBool>,
    pub started: Timestamp,
}

pub fn start(config: &GpuConfig, pids: Vec<u32>) -> Run {
    let (sender, receiver) = crossbeam_channel::bounded(100_000);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Timestamp::now();
    let poller = GpuPoller::start(
        config,
        Arc::new(move || pids.clone()),
        sender,
        Arc::clone(&stop),
    )
    .expect("the poller starts against the fake NVML");
    Run {
        poller,
        receiver,
        stop,
        started,
    }
}

/// What a finished run produced.
pub struct Outcome {
    pub samples: Vec<GpuSample>,
    pub report: PollerReport,
    pub devices: Vec<GpuDeviceInfo>,
    pub started: Timestamp,
    pub ended: Timestamp,
}

impl Run {
    /// Drains what arrived so far.
    pub fn take(&self) -> Vec<GpuSample> {
        self.receiver
            .try_iter()
            .flatten()
            .filter_map(|event| match event {
                Event::Gpu(sample) => Some(sample),
                _ => None,
            })
            .collect()
    }

    /// Stops the poller, joins it, and returns everything it sent.
    pub fn finish(self) -> Outcome {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let devices = self.poller.devices().to_vec();
        let joined = Instant::now();
        let report = self.poller.join();
        assert!(
            joined.elapsed() < Duration::from_secs(2),
            "the poller stops promptly"
        );
        let ended = Timestamp::now();
        let samples = self
            .receiver
            .try_iter()
            .flatten()
            .filter_map(|event| match event {
                Event::Gpu(sample) => Some(sample),
                _ => None,
            })
            .collect();
        Outcome {
            samples,
            report,
            devices,
            started: self.started,
            ended,
        }
    }
}

/// Runs the poller until it has polled `polls` times and returns what it sent. Waiting for
/// polls rather than for a time keeps the tests meaningful on a loaded machine.
pub fn run_polls(config: &GpuConfig, pids: Vec<u32>, polls: u64) -> Outcome {
    let run = start(config, pids);
    run.wait_polls(polls);
    run.finish()
}

/// Waits until `condition` holds, failing after 20 s.
pub fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Run {
    /// Waits for `n` more polls.
    pub fn wait_polls(&self, n: u64) {
        let target = self.poller.polls() + n;
        wait_for("polls", || self.poller.polls() >= target);
    }
}

impl Outcome {
    pub fn of_device(&self, device: u32) -> Vec<&GpuSample> {
        self.samples.iter().filter(|s| s.device == device).collect()
    }

    /// Every sample's time lies within the run (with slack for the clock conversion).
    pub fn assert_times_within_run(&self) {
        let slack = 50_000_000;
        for s in &self.samples {
            assert!(
                s.time.as_nanos() + slack >= self.started.as_nanos()
                    && s.time.as_nanos() <= self.ended.as_nanos() + slack,
                "sample at {:?} outside the run {:?}..{:?}",
                s.time,
                self.started,
                self.ended
            );
        }
    }

    /// Each device's samples come in strictly increasing time.
    pub fn assert_monotonic(&self) {
        let mut devices: Vec<u32> = self.samples.iter().map(|s| s.device).collect();
        devices.sort_unstable();
        devices.dedup();
        for device in devices {
            let times: Vec<Timestamp> = self.of_device(device).iter().map(|s| s.time).collect();
            assert!(
                times.windows(2).all(|w| w[0] < w[1]),
                "device {device}: times not increasing: {times:?}"
            );
        }
    }
}

/// The notices other than GPM's: every device the fake scripts without `gpm` says once that it
/// has none, which scenarios about other metrics leave aside (`tests/integration/gpm.rs` checks them).
pub fn without_gpm(notices: &[String]) -> Vec<String> {
    notices
        .iter()
        .filter(|n| !n.contains("GPM"))
        .cloned()
        .collect()
}
