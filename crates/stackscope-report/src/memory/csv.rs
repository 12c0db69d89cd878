//! `memory-timeline.csv`: one row per reading of one process, bytes as integers, empty cells
//! for what that reading did not read (`smaps_rollup`'s private, shared and swap come at a
//! lower rate than the resident size; GPU memory only where the process has a GPU context).

use std::fmt::Display;
use std::io::Write;

use stackscope_aggregate::MemoryPoint;

use crate::ReportError;

/// The file's header; the names are the and scripts read them.
pub const MEMORY_CSV_HEADER: &str = "time,pid,role,rss,private,shared,swap,gpu_memory";

/// Writes `points` (times already in seconds since the recording's start) after the header.
pub fn write_memory_timeline_csv<W: Write>(
    points: &[MemoryPoint],
    mut w: W,
) -> Result<(), ReportError> {
    writeln!(w, "{MEMORY_CSV_HEADER}")?;
    for p in points {
        writeln!(
            w,
            // Microseconds, as gpu-timeline.csv's times.
            "{:.6},{},{},{},{},{},{},{}",
            p.secs,
            p.pid,
            field(&p.role),
            p.rss,
            cell(p.private),
            cell(p.shared),
            cell(p.swap),
            cell(p.gpu_memory),
        )?;
    }
    w.flush()?;
    Ok(())
}

fn cell<T: Display>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// A text field quoted as RFC 4180 has it when it holds a comma, a quote or a line break: a
/// role carries a thread or command name, which could.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(secs: f64, pid: u32, role: &str, rss: u64) -> MemoryPoint {
        MemoryPoint {
            secs,
            pid,
            role: role.to_owned(),
            rss,
            private: None,
            shared: None,
            swap: None,
            gpu_memory: None,
        }
    }

    #[test]
    fn rows_in_bytes_with_empty_cells_for_what_was_not_read() {
        let points = vec![
            MemoryPoint {
                private: Some(80_000_000),
                shared: Some(20_000_000),
                swap: Some(0),
                gpu_memory: Some(2 << 30),
                ..point(0.1, 4321, "DataLoader worker 1", 115_000_000)
            },
            point(0.2, 4321, "DataLoader worker 1", 120_000_000),
            point(0.25, 4300, "trainer", 900_000_000),
        ];
        let mut out = Vec::new();
        write_memory_timeline_csv(&points, &mut out).expect("csv");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "time,pid,role,rss,private,shared,swap,gpu_memory",
                "0.100000,4321,DataLoader worker 1,115000000,80000000,20000000,0,2147483648",
                "0.200000,4321,DataLoader worker 1,120000000,,,,",
                "0.250000,4300,trainer,900000000,,,,",
            ]
        );
    }

    #[test]
    fn a_role_with_a_comma_or_a_quote_is_quoted() {
        let points = vec![point(1.0, 7, "helper: a,b \"c\"", 1)];
        let mut out = Vec::new();
        write_memory_timeline_csv(&points, &mut out).expect("csv");
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(
            text.lines().nth(1),
            Some("1.000000,7,\"helper: a,b \"\"c\"\"\",1,,,,")
        );
    }
}
