//! The GPU timeline as CSV: one row per reading, empty cells for metrics the driver lacks.
//!
//! The last four columns are GPM's (Hopper and later): SM activity, SM occupancy, tensor
//! activity and DRAM bandwidth, each over the interval since the device's previous GPM reading,
//! on the newest reading of each poll.

use std::fmt::Display;
use std::io::Write;

use stackscope_event::{GpuSample, Timestamp};

use crate::ReportError;

pub const GPU_CSV_HEADER: &str = "time_s,device,utilization_pct,memory_utilization_pct,\
memory_used_mib,memory_total_mib,power_w,sm_clock_mhz,throttle_reasons,process_utilization_pct,\
sm_active_pct,sm_occupancy_pct,tensor_active_pct,dram_bw_pct";

const MIB: f64 = 1024.0 * 1024.0;

/// Writes `samples` with times in seconds since `start`.
pub fn write_gpu_timeline_csv<W: Write>(
    samples: &[GpuSample],
    start: Timestamp,
    mut w: W,
) -> Result<(), ReportError> {
    writeln!(w, "{GPU_CSV_HEADER}")?;
    for s in samples {
        writeln!(
            w,
            "{:.6},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            s.time.seconds_since(start),
            s.device,
            cell(s.utilization),
            cell(s.memory_utilization),
            cell(s.memory_used_bytes.map(mib)),
            cell(s.memory_total_bytes.map(mib)),
            cell(s.power_watts),
            cell(s.sm_clock_mhz),
            cell(s.throttle_reasons),
            cell(s.process_utilization),
            cell(s.sm_active),
            cell(s.sm_occupancy),
            cell(s.tensor_active),
            cell(s.dram_bw),
        )?;
    }
    w.flush()?;
    Ok(())
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / MIB)
}

fn cell<T: Display>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_with_empty_cells_for_missing_metrics() {
        let samples = vec![
            GpuSample {
                time: Timestamp(1_500_000_000),
                device: 0,
                utilization: Some(97.0),
                memory_utilization: Some(41.5),
                memory_used_bytes: Some(2048 * 1024 * 1024),
                memory_total_bytes: Some(80 * 1024 * 1024 * 1024),
                power_watts: Some(301.25),
                sm_clock_mhz: Some(1980),
                throttle_reasons: Some(4),
                process_utilization: Some(95.0),
                sm_active: Some(22.5),
                sm_occupancy: Some(11.0),
                tensor_active: Some(0.0),
                dram_bw: Some(38.0),
                compute_pids: None,
                process_memory: Vec::new(),
            },
            GpuSample {
                time: Timestamp(1_750_000_000),
                device: 1,
                utilization: Some(3.0),
                ..GpuSample::default()
            },
        ];
        let mut out = Vec::new();
        write_gpu_timeline_csv(&samples, Timestamp(1_000_000_000), &mut out).expect("csv");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], GPU_CSV_HEADER);
        assert_eq!(lines[0].split(',').count(), 14);
        assert!(lines[0].ends_with(",sm_active_pct,sm_occupancy_pct,tensor_active_pct,dram_bw_pct"));
        assert_eq!(
            lines[1],
            "0.500000,0,97,41.5,2048.0,81920.0,301.25,1980,4,95,22.5,11,0,38"
        );
        assert_eq!(lines[2], "0.750000,1,3,,,,,,,,,,,");
        assert_eq!(lines.len(), 3);
    }
}
