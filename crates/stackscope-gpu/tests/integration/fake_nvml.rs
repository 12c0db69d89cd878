//! The poller against the fake NVML libraries: the real `nvml-wrapper` code path, real dynamic
//! loading, scripted driver answers. Each scenario runs in a process of its own (see `support`).

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use stackscope_gpu::{GpuConfig, GpuError, GpuPoller, GpuSelection};
use support::{
    config, fake_lib, isolated, json_path, minimal_lib, run_polls, script, start, wait_for,
    without_gpm,
};

fn start_err(config: &GpuConfig) -> GpuError {
    let (sender, _receiver) = crossbeam_channel::bounded(16);
    let stop = Arc::new(AtomicBool::new(false));
    match GpuPoller::start(config, Arc::new(Vec::new), sender, stop) {
        Ok(_) => panic!("the poller should not start"),
        Err(e) => e,
    }
}

#[test]
fn ring_samples_follow_a_square_wave() {
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [ { "name": "Fake H100",
        "uuid": "GPU-fake-0", "memory_total_mib": 81920, "memory_used_mib": 1000,
        "power_w": 250.0, "sm_clock_mhz": 1755,
        "utilization": {"square": {"period_s": 0.4, "low": 3, "high": 97}} } ] }"#;
    isolated(
        "fake_nvml::ring_samples_follow_a_square_wave",
        script(SCRIPT),
        |_| {
            let out = run_polls(&config(fake_lib()), vec![], 13);
            assert_eq!(out.devices.len(), 1);
            assert_eq!(out.devices[0].name, "Fake H100");
            assert_eq!(out.devices[0].uuid, "GPU-fake-0");
            let notices = without_gpm(&out.report.notices);
            assert!(notices.is_empty(), "{notices:?}");
            assert_eq!(out.report.dropped, 0);
            assert!(out.report.polls >= 5, "polls: {}", out.report.polls);

            let utilization: Vec<f32> = out.samples.iter().filter_map(|s| s.utilization).collect();
            // 1.3 s of 20 ms ticks: about 65 ring samples; allow for a loaded machine.
            assert!(
                utilization.len() >= 30,
                "{} ring samples",
                utilization.len()
            );
            assert!(
                utilization.iter().all(|&u| u == 3.0 || u == 97.0),
                "{utilization:?}"
            );
            let transitions = utilization.windows(2).filter(|w| w[0] != w[1]).count();
            // A 0.4 s period over 1.3 s changes level about 6 times.
            assert!(
                (3..=10).contains(&transitions),
                "{transitions} transitions: {utilization:?}"
            );
            out.assert_monotonic();
            out.assert_times_within_run();

            // Ring samples keep the driver's own spacing (20 ms), not the poll interval (100 ms).
            let times: Vec<u64> = out.samples.iter().map(|s| s.time.as_nanos()).collect();
            let mut gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
            gaps.sort_unstable();
            let median = gaps[gaps.len() / 2];
            assert!(
                (10_000_000..=40_000_000).contains(&median),
                "median gap {median} ns"
            );

            // The point-in-time metrics ride on the newest sample of each poll.
            let full: Vec<_> = out
                .samples
                .iter()
                .filter(|s| s.power_watts.is_some())
                .collect();
            assert!(full.len() >= 5);
            for s in full {
                assert_eq!(s.power_watts, Some(250.0));
                assert_eq!(s.memory_total_bytes, Some(81920 * 1024 * 1024));
                assert_eq!(s.memory_used_bytes, Some(1000 * 1024 * 1024));
                assert_eq!(s.sm_clock_mhz, Some(1755));
                assert_eq!(s.throttle_reasons, Some(0));
                assert_eq!(s.memory_utilization, Some(0.0));
                assert_eq!(s.process_utilization, None, "no target pids given");
            }
        },
    );
}

#[test]
fn utilization_follows_a_file() {
    let make = |dir: &Path| {
        format!(
            r#"{{ "sample_period_ms": 20, "devices": [ {{ "utilization": {{"file": {}}} }} ] }}"#,
            json_path(&dir.join("util"))
        )
    };
    isolated("fake_nvml::utilization_follows_a_file", make, |dir| {
        let file = dir.join("util");
        std::fs::write(&file, "0").expect("write");
        let run = start(&config(fake_lib()), vec![]);
        run.wait_polls(5);
        let writing = stackscope_event::Timestamp::now();
        std::fs::write(&file, "100").expect("write");
        let written = stackscope_event::Timestamp::now();
        run.wait_polls(5);
        let out = run.finish();
        let ring: Vec<_> = out
            .samples
            .iter()
            .filter(|s| s.utilization.is_some())
            .collect();
        // Allow one driver tick (plus slack) either side of the switch.
        let margin = 60_000_000;
        let before: Vec<f32> = ring
            .iter()
            .filter(|s| s.time.as_nanos() + margin < writing.as_nanos())
            .filter_map(|s| s.utilization)
            .collect();
        let after: Vec<f32> = ring
            .iter()
            .filter(|s| s.time.as_nanos() > written.as_nanos() + margin)
            .filter_map(|s| s.utilization)
            .collect();
        assert!(
            before.len() >= 3 && after.len() >= 3,
            "{before:?} {after:?}"
        );
        assert!(before.iter().all(|&u| u == 0.0), "{before:?}");
        assert!(after.iter().all(|&u| u == 100.0), "{after:?}");
        // While idle the fake reports the GpuIdle throttle reason, as a driver does.
        assert!(out.samples.iter().any(|s| s.throttle_reasons == Some(1)));
    });
}

#[test]
fn two_devices_are_both_reported() {
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [
        { "name": "Fake A100", "uuid": "GPU-aaaa", "utilization": 10 },
        { "name": "Fake H100", "uuid": "GPU-bbbb", "utilization": 90 } ] }"#;
    isolated(
        "fake_nvml::two_devices_are_both_reported",
        script(SCRIPT),
        |_| {
            let out = run_polls(&config(fake_lib()), vec![], 7);
            let names: Vec<(u32, &str, &str)> = out
                .devices
                .iter()
                .map(|d| (d.index, d.name.as_str(), d.uuid.as_str()))
                .collect();
            assert_eq!(
                names,
                vec![(0, "Fake A100", "GPU-aaaa"), (1, "Fake H100", "GPU-bbbb")]
            );
            assert_eq!(out.report.devices, out.devices);
            for (device, value) in [(0, 10.0), (1, 90.0)] {
                let utilization: Vec<f32> = out
                    .of_device(device)
                    .iter()
                    .filter_map(|s| s.utilization)
                    .collect();
                assert!(utilization.len() >= 10, "device {device}: {utilization:?}");
                assert!(
                    utilization.iter().all(|&u| u == value),
                    "device {device}: {utilization:?}"
                );
            }
            out.assert_monotonic();
        },
    );
}

#[test]
fn explicit_device_list_polls_only_those() {
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [ {}, {}, {} ] }"#;
    isolated(
        "fake_nvml::explicit_device_list_polls_only_those",
        script(SCRIPT),
        |_| {
            let mut cfg = config(fake_lib());
            cfg.selection = GpuSelection::Devices(vec![2, 0]);
            let out = run_polls(&cfg, vec![], 4);
            let indices: Vec<u32> = out.devices.iter().map(|d| d.index).collect();
            assert_eq!(indices, vec![2, 0]);
            assert!(out.samples.iter().all(|s| s.device != 1));
            assert!(!out.of_device(2).is_empty() && !out.of_device(0).is_empty());

            cfg.selection = GpuSelection::Devices(vec![0, 3]);
            let e = start_err(&cfg);
            assert!(
                matches!(e, GpuError::NoSuchDevice { index: 3, count: 3 }),
                "{e:?}"
            );
            assert_eq!(
                e.to_string(),
                "no GPU with index 3: NVML reports 3 (indices 0 to 2)"
            );
        },
    );
}

#[test]
fn unsupported_metrics_give_notices_and_none() {
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [
        { "utilization": 55, "processes": [4242],
          "unsupported": ["power", "clock", "process_utilization"] },
        { "utilization": 42, "unsupported": ["samples"] } ] }"#;
    isolated(
        "fake_nvml::unsupported_metrics_give_notices_and_none",
        script(SCRIPT),
        |_| {
            let mut cfg = config(fake_lib());
            cfg.selection = GpuSelection::Devices(vec![0, 1]);
            let out = run_polls(&cfg, vec![4242], 7);
            let mut notices = without_gpm(&out.report.notices);
            notices.sort();
            assert_eq!(
            notices,
            vec![
                "SM clock readings unavailable on device 0 (NOT_SUPPORTED); continuing without them",
                "per-process utilization readings unavailable on device 0 (NOT_SUPPORTED); \
                 continuing without them",
                "power readings unavailable on device 0 (NOT_SUPPORTED); continuing without them",
                "utilization samples unavailable on device 1 (NOT_SUPPORTED); using \
                 nvmlDeviceGetUtilizationRates (one reading per poll) instead",
            ]
        );
            let dev1 = out.of_device(1);
            assert!(dev1.len() >= 4 && dev1.iter().all(|s| s.utilization == Some(42.0)));
            let dev0 = out.of_device(0);
            assert!(dev0.len() >= 10);
            assert!(dev0.iter().all(|s| s.power_watts.is_none()
                && s.sm_clock_mhz.is_none()
                && s.process_utilization.is_none()));
            // A poll that finds no new ring sample sends its other metrics with utilization
            // unknown; every utilization reported is the scripted one.
            let utilization: Vec<f32> = dev0.iter().filter_map(|s| s.utilization).collect();
            assert!(utilization.len() >= 10 && utilization.iter().all(|&u| u == 55.0));
            assert!(dev0.iter().any(|s| s.memory_used_bytes.is_some()));
            assert!(dev0.iter().any(|s| s.throttle_reasons.is_some()));
        },
    );
}

#[test]
fn unsupported_ring_falls_back_to_rates() {
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "unsupported": ["samples"],
        "devices": [ { "utilization": 42, "memory_utilization": 7 } ] }"#;
    isolated(
        "fake_nvml::unsupported_ring_falls_back_to_rates",
        script(SCRIPT),
        |_| {
            let out = run_polls(&config(fake_lib()), vec![], 7);
            let notices = without_gpm(&out.report.notices);
            assert_eq!(notices.len(), 1, "{notices:?}");
            // One reading per poll, each complete.
            assert_eq!(out.samples.len() as u64, out.report.polls);
            for s in &out.samples {
                assert_eq!(s.utilization, Some(42.0));
                assert_eq!(s.memory_utilization, Some(7.0));
                assert_eq!(s.power_watts, Some(250.0));
            }
            out.assert_monotonic();
            out.assert_times_within_run();
        },
    );
}

#[test]
fn minimal_library_falls_back_with_notices() {
    const SCRIPT: &str =
        r#"{ "sample_period_ms": 20, "devices": [ { "utilization": 64, "processes": [77] } ] }"#;
    isolated(
        "fake_nvml::minimal_library_falls_back_with_notices",
        script(SCRIPT),
        |_| {
            let out = run_polls(&config(minimal_lib()), vec![77], 7);
            let notices = &out.report.notices;
            let expect = [
            "utilization samples unavailable on device 0 (nvmlDeviceGetSamples missing from the \
             driver library); using nvmlDeviceGetUtilizationRates (one reading per poll) instead",
            "power readings unavailable on device 0 (nvmlDeviceGetPowerUsage missing from the \
             driver library); continuing without them",
            "SM clock readings unavailable on device 0 (nvmlDeviceGetClockInfo missing from the \
             driver library); continuing without them",
            "throttle reasons unavailable on device 0 (nvmlDeviceGetCurrentClocksThrottleReasons \
             missing from the driver library); continuing without them",
            "per-process utilization readings unavailable on device 0 \
             (nvmlDeviceGetProcessUtilization missing from the driver library); continuing \
             without them",
            "GPM readings (SM activity, SM occupancy, tensor activity, DRAM bandwidth) \
             unavailable on device 0 (nvmlGpmQueryDeviceSupport missing from the driver \
             library); continuing with utilization alone",
        ];
            for line in expect {
                assert_eq!(
                    notices.iter().filter(|n| n.as_str() == line).count(),
                    1,
                    "expected once: {line}\nnotices: {notices:#?}"
                );
            }
            assert_eq!(notices.len(), expect.len(), "{notices:#?}");
            assert_eq!(out.samples.len() as u64, out.report.polls);
            for s in &out.samples {
                assert_eq!(s.utilization, Some(64.0));
                assert!(s.memory_used_bytes.is_some());
                assert!(s.power_watts.is_none() && s.sm_clock_mhz.is_none());
                assert!(s.throttle_reasons.is_none() && s.process_utilization.is_none());
            }
        },
    );
}

#[test]
fn per_process_utilization_of_the_target() {
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [
        { "utilization": 70, "processes": [4242, 5000] } ] }"#;
    isolated(
        "fake_nvml::per_process_utilization_of_the_target",
        script(SCRIPT),
        |_| {
            let out = run_polls(&config(fake_lib()), vec![4242], 6);
            let shares: Vec<f32> = out
                .samples
                .iter()
                .filter_map(|s| s.process_utilization)
                .collect();
            assert!(shares.len() >= 3, "{shares:?}");
            assert!(shares.iter().all(|&p| p == 70.0), "{shares:?}");

            // A target absent from the driver's list used none of the GPU.
            let out = run_polls(&config(fake_lib()), vec![999], 4);
            let shares: Vec<f32> = out
                .samples
                .iter()
                .filter_map(|s| s.process_utilization)
                .collect();
            assert!(
                !shares.is_empty() && shares.iter().all(|&p| p == 0.0),
                "{shares:?}"
            );
        },
    );
}

#[test]
fn each_listed_process_gets_its_gpu_memory_and_a_climb_shows() {
    // 100 MiB, climbing 1000 MiB/s, shared by the two listed processes.
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [
        { "memory_used_mib": 100, "memory_used_mib_per_s": 1000, "processes": [4242, 5000] } ] }"#;
    isolated(
        "fake_nvml::each_listed_process_gets_its_gpu_memory_and_a_climb_shows",
        script(SCRIPT),
        |_| {
            let out = run_polls(&config(fake_lib()), vec![4242], 4);
            let readings: Vec<Vec<(u32, u64)>> = out
                .samples
                .iter()
                .filter(|s| !s.process_memory.is_empty())
                .map(|s| s.process_memory.iter().map(|p| (p.pid, p.bytes)).collect())
                .collect();
            assert!(readings.len() >= 3, "{readings:?}");
            for reading in &readings {
                let pids: Vec<u32> = reading.iter().map(|&(pid, _)| pid).collect();
                assert_eq!(pids, vec![4242, 5000]);
                assert_eq!(reading[0].1, reading[1].1, "an even share: {reading:?}");
            }
            let of_4242: Vec<u64> = readings.iter().map(|r| r[0].1).collect();
            assert!(of_4242.windows(2).all(|w| w[0] < w[1]), "{of_4242:?}");
            // 100 ms between polls: about 50 MiB more for each process every poll.
            let step = (of_4242[1] - of_4242[0]) as f64 / (1 << 20) as f64;
            assert!((25.0..150.0).contains(&step), "{step} MiB a poll");
        },
    );
}

#[test]
fn auto_narrows_when_the_target_appears() {
    let make = |dir: &Path| {
        format!(
            r#"{{ "sample_period_ms": 20, "devices": [ {{ "utilization": 5 }},
                {{ "utilization": 95, "processes": {{"file": {}}} }} ] }}"#,
            json_path(&dir.join("pids"))
        )
    };
    isolated(
        "fake_nvml::auto_narrows_when_the_target_appears",
        make,
        |dir| {
            let pid_file = dir.join("pids");
            let run = start(&config(fake_lib()), vec![4242]);
            let all: Vec<u32> = run.poller.devices().iter().map(|d| d.index).collect();
            assert_eq!(all, vec![0, 1], "target on no GPU yet: all of them");
            run.wait_polls(3);
            let first = run.take();
            assert!(
                first.iter().any(|s| s.device == 0),
                "device 0 polled at first"
            );

            // The job opens its CUDA context on GPU 1.
            std::fs::write(&pid_file, "1 4242\n").expect("write");
            wait_for("narrowing", || run.poller.current_devices().len() == 1);
            assert_eq!(run.poller.current_devices()[0].index, 1);
            // The poll under way when the devices changed may still have read device 0.
            run.wait_polls(1);
            run.take();
            run.wait_polls(4);
            let later = run.take();
            assert!(
                !later.is_empty() && later.iter().all(|s| s.device == 1),
                "{later:?}"
            );
            let out = run.finish();
            assert_eq!(
                without_gpm(&out.report.notices),
                vec!["the target appeared on device 1; polling only it from now on"]
            );
            let indices: Vec<u32> = out.report.devices.iter().map(|d| d.index).collect();
            assert_eq!(indices, vec![1]);
        },
    );
}

#[test]
fn auto_starts_on_the_targets_device() {
    const SCRIPT: &str =
        r#"{ "devices": [ {}, { "processes": [10, 11] }, { "graphics_processes": [11] } ] }"#;
    isolated(
        "fake_nvml::auto_starts_on_the_targets_device",
        script(SCRIPT),
        |_| {
            let run = start(&config(fake_lib()), vec![11, 12]);
            let indices: Vec<u32> = run.poller.devices().iter().map(|d| d.index).collect();
            assert_eq!(
                indices,
                vec![1, 2],
                "compute or graphics process of the target"
            );
            let out = run.finish();
            let notices = without_gpm(&out.report.notices);
            assert!(notices.is_empty(), "{notices:?}");
        },
    );
}

#[test]
fn a_lost_device_is_a_notice_and_the_others_go_on() {
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [
        { "utilization": 1, "lost_after_s": 0.3 }, { "utilization": 2 } ] }"#;
    isolated(
        "fake_nvml::a_lost_device_is_a_notice_and_the_others_go_on",
        script(SCRIPT),
        |_| {
            let run = start(&config(fake_lib()), vec![]);
            wait_for("device 0 lost", || {
                run.poller
                    .notices()
                    .iter()
                    .any(|n| n.contains("stopped answering"))
            });
            let lost_by = stackscope_event::Timestamp::now();
            run.wait_polls(4);
            let out = run.finish();
            let notices = without_gpm(&out.report.notices);
            assert_eq!(notices.len(), 1, "{notices:?}");
            assert!(
                notices[0].starts_with("device 0 stopped answering"),
                "{}",
                notices[0]
            );
            assert!(out.of_device(0).iter().all(|s| s.time < lost_by));
            assert!(out.of_device(1).iter().any(|s| s.time > lost_by));
        },
    );
}

#[test]
fn a_full_channel_counts_drops_without_blocking() {
    isolated(
        "fake_nvml::a_full_channel_counts_drops_without_blocking",
        script(r#"{"sample_period_ms": 10}"#),
        |_| {
            let (sender, _receiver) = crossbeam_channel::bounded(1);
            let stop = Arc::new(AtomicBool::new(false));
            let poller = GpuPoller::start(
                &config(fake_lib()),
                Arc::new(Vec::new),
                sender,
                Arc::clone(&stop),
            )
            .expect("starts");
            wait_for("drops", || poller.dropped() >= 10);
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            let report = poller.join();
            assert!(report.dropped >= 10, "dropped {}", report.dropped);
        },
    );
}

#[test]
fn failed_init_is_an_error() {
    isolated(
        "fake_nvml::failed_init_is_an_error",
        script(r#"{"fail_init": true}"#),
        |_| {
            let e = start_err(&config(fake_lib()));
            assert!(matches!(e, GpuError::Init { .. }), "{e:?}");
            let text = e.to_string();
            assert!(text.starts_with("NVML initialization failed ("), "{text}");
            assert!(text.contains("driver is not loaded"), "{text}");
        },
    );
}

#[test]
fn no_devices_is_an_error() {
    isolated(
        "fake_nvml::no_devices_is_an_error",
        script(r#"{"devices": []}"#),
        |_| {
            let e = start_err(&config(fake_lib()));
            assert!(matches!(e, GpuError::NoDevices), "{e:?}");
            assert_eq!(e.to_string(), "NVML reports no GPUs");
        },
    );
}

#[test]
fn a_bad_script_fails_init_loudly() {
    isolated(
        "fake_nvml::a_bad_script_fails_init_loudly",
        script(r#"{"devics": []}"#),
        |_| {
            let e = start_err(&config(fake_lib()));
            assert!(matches!(e, GpuError::Init { .. }), "{e:?}");
        },
    );
}

#[test]
fn a_missing_library_is_a_one_line_error() {
    let mut cfg = config(PathBuf::from("/nonexistent/libnvidia-ml.so.1"));
    let e = start_err(&cfg);
    assert!(matches!(e, GpuError::Load { .. }), "{e:?}");
    let text = e.to_string();
    assert!(!text.contains('\n'), "{text}");
    assert!(
        text.starts_with(
            "cannot load the NVML library /nonexistent/libnvidia-ml.so.1: cannot open shared \
             object file: No such file or directory"
        ),
        "{text}"
    );

    // A library that is not NVML at all.
    cfg.nvml_lib = Some(PathBuf::from("libc.so.6"));
    let e = start_err(&cfg);
    assert!(matches!(e, GpuError::NotNvml { .. }), "{e:?}");
    assert!(e.to_string().contains("nvmlInit_v2"), "{e}");

    cfg.selection = GpuSelection::Off;
    assert!(matches!(start_err(&cfg), GpuError::Disabled));
}
