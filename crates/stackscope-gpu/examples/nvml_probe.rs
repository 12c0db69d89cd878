//! What does the real driver return? A probe for the assumptions the poller makes.
//!
//! Run on a GPU machine (beside a workload, to see non-zero values):
//!
//! ```sh
//! cargo run --release -p stackscope-gpu --example nvml_probe -- --seconds 10 [--lib PATH]
//! ```
//!
//! It prints, per device: the size of the driver's utilization sample ring and the spacing of
//! its timestamps; how many new samples each 100 ms poll returns and how far the newest one lags
//! behind the wall clock (the poller holds stack samples until a reading covers them, so this
//! lag is the hold it needs); the trailing-average rates; which GPM metrics answer and what
//! they read over 1 s windows; the cost of each call; and the per-process utilization table.
//! docs/gpu.md records what an H100 returned.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nvml_wrapper::enum_wrappers::device::Sampling;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::{Device, Nvml};

fn main() {
    let mut seconds = 10.0f64;
    let mut lib: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => seconds = args.next().and_then(|s| s.parse().ok()).unwrap_or(seconds),
            "--lib" => lib = args.next(),
            other => {
                eprintln!("nvml_probe: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let nvml = match &lib {
        Some(path) => Nvml::builder().lib_path(path.as_ref()).init(),
        None => Nvml::init(),
    };
    let nvml = match nvml {
        Ok(nvml) => nvml,
        Err(err) => {
            eprintln!("nvml_probe: cannot load NVML: {err}");
            std::process::exit(1);
        }
    };
    println!(
        "driver {} | NVML {} | CUDA {:?}",
        show(nvml.sys_driver_version()),
        show(nvml.sys_nvml_version()),
        nvml.sys_cuda_driver_version()
    );
    let count = nvml.device_count().unwrap_or(0);
    for index in 0..count {
        match nvml.device_by_index(index) {
            Ok(device) => probe_device(&nvml, index, &device, seconds),
            Err(err) => println!("device {index}: cannot open: {err}"),
        }
    }
}

fn show<T: std::fmt::Display, E: std::fmt::Display>(r: Result<T, E>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(e) => format!("<{e}>"),
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn value_f64(value: &SampleValue) -> f64 {
    match *value {
        SampleValue::F64(v) => v,
        SampleValue::U32(v) => v as f64,
        SampleValue::U64(v) => v as f64,
        SampleValue::I64(v) => v as f64,
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// Asks one device every call the poller makes, in the poller's order, printing each answer as
/// it comes. Kept one function on purpose: it is the probe's script, read top to bottom next to
/// the driver's output on a GPU machine, and each step is a call and a print.
fn probe_device(nvml: &Nvml, index: u32, device: &Device, seconds: f64) {
    println!(
        "\n== device {index}: {} | arch {} | MIG {}",
        show(device.name()),
        device
            .architecture()
            .map(|a| format!("{a:?}"))
            .unwrap_or_else(|e| format!("<{e}>")),
        device
            .mig_mode()
            .map(|m| format!("current {} pending {}", m.current, m.pending))
            .unwrap_or_else(|e| format!("<{e}>"))
    );

    // The whole ring, as the poller's first call sees it.
    let started = Instant::now();
    match device.samples(Sampling::GpuUtilization, None) {
        Ok(ring) => {
            let cost = started.elapsed();
            let mut gaps: Vec<f64> = ring
                .windows(2)
                .map(|w| w[1].timestamp as f64 - w[0].timestamp as f64)
                .collect();
            let span_s = match (ring.first(), ring.last()) {
                (Some(a), Some(b)) => (b.timestamp.saturating_sub(a.timestamp)) as f64 / 1e6,
                _ => 0.0,
            };
            let newest_lag_ms = ring
                .last()
                .map(|s| (now_us() as f64 - s.timestamp as f64) / 1e3)
                .unwrap_or(f64::NAN);
            println!(
                "utilization ring: {} samples over {span_s:.2} s, median spacing {:.1} ms, \
                 newest {newest_lag_ms:.0} ms old, call {:.0} us",
                ring.len(),
                median(&mut gaps) / 1e3,
                cost.as_secs_f64() * 1e6
            );
        }
        Err(err) => println!("utilization ring: <{err}>"),
    }

    // Incremental polls, as the poller makes them.
    let mut last_seen: Option<u64> = None;
    let mut per_call = Vec::new();
    let mut lags = Vec::new();
    let mut gaps = Vec::new();
    let mut values = Vec::new();
    let mut costs = Vec::new();
    let mut errors: std::collections::BTreeMap<String, usize> = Default::default();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds / 2.0);
    while Instant::now() < deadline {
        let t = Instant::now();
        match device.samples(Sampling::GpuUtilization, last_seen) {
            Ok(fresh) => {
                costs.push(t.elapsed().as_secs_f64() * 1e6);
                let mut prev = last_seen;
                let fresh: Vec<_> = fresh
                    .into_iter()
                    .filter(|s| last_seen.is_none_or(|ls| s.timestamp > ls))
                    .collect();
                per_call.push(fresh.len() as f64);
                for sample in &fresh {
                    if let Some(p) = prev {
                        gaps.push((sample.timestamp as f64 - p as f64) / 1e3);
                    }
                    prev = Some(sample.timestamp);
                    values.push(value_f64(&sample.value));
                }
                if let Some(newest) = fresh.last() {
                    lags.push((now_us() as f64 - newest.timestamp as f64) / 1e3);
                    last_seen = Some(newest.timestamp);
                }
            }
            Err(e) => *errors.entry(format!("{e:?}")).or_default() += 1,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let polls = per_call.len();
    let empty = per_call.iter().filter(|&&c| c == 0.0).count();
    let max_lag = lags.iter().cloned().fold(f64::NAN, f64::max);
    println!(
        "100 ms polls: {polls} calls ({empty} empty, errors {errors:?}), median {:.0} new per call, \
         spacing median {:.1} ms, newest lag median {:.0} ms max {max_lag:.0} ms, call median {:.0} us",
        median(&mut per_call),
        median(&mut gaps),
        median(&mut lags),
        median(&mut costs)
    );
    let (min, max) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    println!(
        "utilization values seen: {} (min {min:.0}, mean {mean:.1}, max {max:.0})",
        values.len()
    );
    match device.utilization_rates() {
        Ok(u) => println!("utilization_rates: gpu {}% memory {}%", u.gpu, u.memory),
        Err(e) => println!("utilization_rates: <{e}>"),
    }
    match device.process_utilization_stats(None) {
        Ok(stats) => {
            println!("process utilization: {} entries", stats.len());
            for s in stats.iter().take(8) {
                println!(
                    "  pid {} sm {}% mem {}% ts {} ({:.0} ms old)",
                    s.pid,
                    s.sm_util,
                    s.mem_util,
                    s.timestamp,
                    (now_us() as f64 - s.timestamp as f64) / 1e3
                );
            }
        }
        Err(e) => println!("process utilization: <{e}>"),
    }
    match device.running_compute_processes() {
        Ok(procs) => println!(
            "running compute processes: {:?}",
            procs.iter().map(|p| p.pid).collect::<Vec<_>>()
        ),
        Err(e) => println!("running compute processes: <{e}>"),
    }
    probe_gpm(nvml, device, seconds / 2.0);
}

fn probe_gpm(nvml: &Nvml, device: &Device, seconds: f64) {
    match device.gpm_support() {
        Ok(true) => {}
        Ok(false) => {
            println!("GPM: not supported on this device");
            return;
        }
        Err(e) => {
            println!("GPM: support query failed: <{e}>");
            return;
        }
    }
    println!(
        "GPM: supported; streaming enabled: {}",
        show(device.gpm_streaming_enabled())
    );
    let metrics = [
        GpmMetricId::SmUtil,
        GpmMetricId::SmOccupancy,
        GpmMetricId::AnyTensorUtil,
        GpmMetricId::DramBwUtil,
        GpmMetricId::GraphicsUtil,
        GpmMetricId::Fp32Util,
        GpmMetricId::Fp16Util,
    ];
    let windows = seconds.max(1.0) as usize;
    for window in 0..windows {
        let t = Instant::now();
        let first = match device.gpm_sample() {
            Ok(s) => s,
            Err(e) => {
                println!("GPM sample: <{e}>");
                return;
            }
        };
        let sample_cost = t.elapsed().as_secs_f64() * 1e6;
        std::thread::sleep(Duration::from_secs(1));
        let second = match device.gpm_sample() {
            Ok(s) => s,
            Err(e) => {
                println!("GPM sample: <{e}>");
                return;
            }
        };
        let t = Instant::now();
        let line = match nvml_wrapper::gpm::gpm_metrics_get(nvml, &first, &second, &metrics) {
            Ok(results) => results
                .iter()
                .zip(metrics.iter())
                .map(|(r, id)| match r {
                    Ok(m) => format!("{id:?}={:.1}", m.value),
                    Err(e) => format!("{id:?}=<{e}>"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => format!("<{e}>"),
        };
        println!(
            "GPM window {window}: {line} | sample {sample_cost:.0} us, metrics get {:.0} us",
            t.elapsed().as_secs_f64() * 1e6
        );
        let _ = first.free();
        let _ = second.free();
    }
}
