//! GPM (SM activity, occupancy, tensor activity, DRAM bandwidth) against the fake NVML: where
//! the device has it, where it does not, a metric it lacks, and a device lost between the two
//! samples. Each scenario runs in a process of its own (see `support`).

use crate::support;

use stackscope_gpu::GpuSelection;
use support::{config, fake_lib, isolated, run_polls, script, start, wait_for};

const NO_GPM: &str = "GPM readings (SM activity, SM occupancy, tensor activity, DRAM bandwidth) \
     unavailable on device";

#[test]
fn gpm_readings_come_every_poll_after_the_first() {
    // Kernels run all the time (utilization 97%) but on a fifth of the SMs.
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [ { "utilization": 97,
        "gpm": { "sm_active": 20, "sm_occupancy": 12, "tensor_active": 3, "dram_bw": 41 } } ] }"#;
    isolated(
        "gpm::gpm_readings_come_every_poll_after_the_first",
        script(SCRIPT),
        |_| {
            let out = run_polls(&config(fake_lib()), vec![], 6);
            assert!(out.report.notices.is_empty(), "{:?}", out.report.notices);
            let with_gpm: Vec<_> = out
                .samples
                .iter()
                .filter(|s| s.sm_active.is_some())
                .collect();
            // One reading per poll, from the difference with the previous poll's sample.
            assert_eq!(with_gpm.len() as u64, out.report.polls - 1, "{with_gpm:?}");
            for s in &with_gpm {
                assert_eq!(s.sm_active, Some(20.0));
                assert_eq!(s.sm_occupancy, Some(12.0));
                assert_eq!(s.tensor_active, Some(3.0));
                assert_eq!(s.dram_bw, Some(41.0));
                // With the point-in-time metrics on the newest sample of the poll.
                assert!(s.memory_used_bytes.is_some() && s.power_watts.is_some());
            }
            let utilization: Vec<f32> = out.samples.iter().filter_map(|s| s.utilization).collect();
            assert!(utilization.iter().all(|&u| u == 97.0) && utilization.len() >= 6);
            // On the recording's clock, like every other reading.
            out.assert_monotonic();
            out.assert_times_within_run();
        },
    );
}

#[test]
fn a_device_without_gpm_says_so_once() {
    // Device 0 is pre-Hopper (no `gpm`); device 1 answers NOT_SUPPORTED (a MIG setup).
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [ { "utilization": 60 },
        { "utilization": 61, "gpm": { "sm_active": 50 }, "unsupported": ["gpm"] } ] }"#;
    isolated(
        "gpm::a_device_without_gpm_says_so_once",
        script(SCRIPT),
        |_| {
            let mut cfg = config(fake_lib());
            cfg.selection = GpuSelection::Devices(vec![0, 1]);
            let out = run_polls(&cfg, vec![], 6);
            let mut notices = out.report.notices.clone();
            notices.sort();
            assert_eq!(
                notices,
                vec![
                    format!(
                    "{NO_GPM} 0 (no GPM counters on this device: they need Hopper or later, and \
                     not every MIG setup has them); continuing with utilization alone"
                ),
                    format!("{NO_GPM} 1 (NOT_SUPPORTED); continuing with utilization alone"),
                ]
            );
            assert!(out.samples.iter().all(|s| s.sm_active.is_none()
                && s.sm_occupancy.is_none()
                && s.tensor_active.is_none()
                && s.dram_bw.is_none()));
            for device in [0, 1] {
                assert!(
                    out.of_device(device)
                        .iter()
                        .filter(|s| s.utilization.is_some())
                        .count()
                        >= 6,
                    "device {device} goes on"
                );
            }
        },
    );
}

#[test]
fn an_unsupported_gpm_metric_is_switched_off_alone() {
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [ { "utilization": 90,
        "gpm": { "sm_active": 75, "sm_occupancy": 30, "tensor_active": 60, "dram_bw": 10,
                 "unsupported_metrics": ["sm_occupancy", "dram_bw"] } } ] }"#;
    isolated(
        "gpm::an_unsupported_gpm_metric_is_switched_off_alone",
        script(SCRIPT),
        |_| {
            let out = run_polls(&config(fake_lib()), vec![], 6);
            let mut notices = out.report.notices.clone();
            notices.sort();
            assert_eq!(
                notices,
                vec![
                    "GPM DRAM bandwidth readings unavailable on device 0 (NOT_SUPPORTED); \
                     continuing without them",
                    "GPM SM occupancy readings unavailable on device 0 (NOT_SUPPORTED); \
                     continuing without them",
                ]
            );
            let with_gpm: Vec<_> = out
                .samples
                .iter()
                .filter(|s| s.sm_active.is_some())
                .collect();
            assert_eq!(with_gpm.len() as u64, out.report.polls - 1);
            for s in with_gpm {
                assert_eq!((s.sm_active, s.tensor_active), (Some(75.0), Some(60.0)));
                assert_eq!((s.sm_occupancy, s.dram_bw), (None, None));
            }
        },
    );
}

#[test]
fn a_device_lost_between_the_two_samples_is_a_notice() {
    // Device 0 is lost right after its first GPM sample: the second one fails.
    const SCRIPT: &str = r#"{ "sample_period_ms": 20, "devices": [
        { "utilization": 80, "gpm": { "sm_active": 10, "lost_after_samples": 1 } },
        { "utilization": 70, "gpm": { "sm_active": 65 } } ] }"#;
    isolated(
        "gpm::a_device_lost_between_the_two_samples_is_a_notice",
        script(SCRIPT),
        |_| {
            let mut cfg = config(fake_lib());
            cfg.selection = GpuSelection::Devices(vec![0, 1]);
            let run = start(&cfg, vec![]);
            wait_for("device 0 lost", || {
                run.poller
                    .notices()
                    .iter()
                    .any(|n| n.contains("stopped answering"))
            });
            run.wait_polls(4);
            let out = run.finish();
            assert_eq!(out.report.notices.len(), 1, "{:?}", out.report.notices);
            assert!(
                out.report.notices[0].starts_with("device 0 stopped answering"),
                "{}",
                out.report.notices[0]
            );
            // Its first poll went through (the loss came with the second GPM sample), and
            // nothing came after it.
            assert!(out.of_device(0).iter().any(|s| s.utilization == Some(80.0)));
            assert!(out.of_device(0).iter().all(|s| s.sm_active.is_none()));
            let dev1: Vec<f32> = out
                .of_device(1)
                .iter()
                .filter_map(|s| s.sm_active)
                .collect();
            assert!(
                dev1.len() >= 4 && dev1.iter().all(|&v| v == 65.0),
                "{dev1:?}"
            );
        },
    );
}
