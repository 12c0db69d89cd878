//! The aggregator with GPM SM activity beside utilization: summary figures and the verdict.

use stackscope_event::{Event, Frame, GpuSample, StackSample, ThreadInfo, Timestamp};

use crate::{AggregateConfig, Aggregator, RecordingMeta, VerdictClass};

const MS: u64 = 1_000_000;

/// Ten seconds at 97% utilization; readings every 100 ms, a GPM reading on every fifth (one
/// per 500 ms poll). For the first `low_secs` the SMs are mostly idle (`sm_low`) while Python
/// runs `launch_kernels`; afterwards they are busy (90%) while it runs `big_matmul`.
fn recording(low_secs: u64, sm_low: f32) -> Aggregator {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    let thread = ThreadInfo {
        os_thread_id: Some(7),
        python_thread_id: 7,
        name: Some("MainThread".into()),
        active: true,
        owns_gil: true,
    };
    for ms in (0..10_000u64).step_by(10) {
        let low = ms < low_secs * 1000;
        let function = if low { "launch_kernels" } else { "big_matmul" };
        agg.handle(Event::Stack(StackSample {
            time: Timestamp(ms * MS),
            pid: 42,
            thread: thread.clone(),
            frames: vec![
                Frame::python(function, "train.py", 12),
                Frame::python("<module>", "train.py", 30),
            ]
            .into(),
        }));
        if ms % 100 == 0 {
            let poll = ms % 500 == 0;
            agg.handle(Event::Gpu(GpuSample {
                time: Timestamp(ms * MS),
                device: 0,
                utilization: Some(97.0),
                sm_active: poll.then_some(if low { sm_low } else { 90.0 }),
                sm_occupancy: poll.then_some(10.0),
                tensor_active: poll.then_some(2.0),
                dram_bw: poll.then_some(35.0),
                ..GpuSample::default()
            }));
        }
    }
    agg.finish();
    agg
}

#[test]
fn high_utilization_with_low_sm_activity_is_not_gpu_bound_and_names_the_code() {
    let agg = recording(8, 15.0);
    let gpu = agg
        .summary(&RecordingMeta::default())
        .gpu
        .expect("gpu section");
    let device = &gpu.devices[0];
    let sm = device.mean_sm_active_pct.expect("SM activity mean");
    assert!((sm - 30.0).abs() < 2.0, "{sm}");
    assert_eq!(device.mean_sm_occupancy_pct, Some(10.0));
    assert_eq!(device.mean_tensor_active_pct, Some(2.0));
    assert_eq!(device.mean_dram_bw_pct, Some(35.0));
    assert_eq!(gpu.mean_sm_active_pct, Some(sm));

    assert_eq!(gpu.verdict.class, VerdictClass::LowSmActivity);
    assert!(
        gpu.verdict.text.contains("launch_kernels (train.py)"),
        "{}",
        gpu.verdict.text
    );
    assert!(
        !gpu.verdict.text.contains("big_matmul"),
        "{}",
        gpu.verdict.text
    );
    assert_eq!(gpu.top_low_sm_functions[0].function, "launch_kernels");
    assert!(gpu.top_low_sm_functions[0].self_share > 0.95);
    // About 8 s of 100 Hz samples, all busy by utilization.
    assert!(
        (750..=810).contains(&gpu.samples_gpu_low_sm),
        "{}",
        gpu.samples_gpu_low_sm
    );
    assert_eq!(gpu.samples_gpu_busy, agg.samples());
}

#[test]
fn busy_sms_keep_gpu_bound() {
    let agg = recording(8, 88.0);
    let gpu = agg
        .summary(&RecordingMeta::default())
        .gpu
        .expect("gpu section");
    assert_eq!(gpu.verdict.class, VerdictClass::GpuBound);
    assert_eq!(gpu.samples_gpu_low_sm, 0);
    assert!(gpu.top_low_sm_functions.is_empty());
}
