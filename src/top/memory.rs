//! `top`'s process lines: each process's resident memory and GPU memory now, in human sizes
//! (`1.2G`, `340M`), one field per process with its columns aligned, packed into lines of the
//! screen's width by the caller. Shared by the full-screen view and the plain output.

use stackscope_aggregate::top::ProcessMemoryLine;

/// `1.2G`, `340M`, `12K`, `512B`: powers of 1024, as `top` and `htop` show memory; three
/// significant figures at most, so a column stays five characters wide.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(u64, char); 4] = [
        (1 << 40, 'T'),
        (1 << 30, 'G'),
        (1 << 20, 'M'),
        (1 << 10, 'K'),
    ];
    for (size, unit) in UNITS {
        if bytes >= size {
            let value = bytes as f64 / size as f64;
            // 9.95 rounds to "10.0": said as "10" like every value from 10 up.
            return if value < 9.95 {
                format!("{value:.1}{unit}")
            } else {
                format!("{value:.0}{unit}")
            };
        }
    }
    format!("{bytes}B")
}

/// One field per process: `pid 4321 RSS 1.2G GPU 340M`. The GPU column is there when any
/// process has GPU memory (`-` for those without); pids and sizes are padded to one width so
/// that fields packed line under line read as columns.
pub fn memory_fields(lines: &[ProcessMemoryLine]) -> Vec<String> {
    let pid_width = lines
        .iter()
        .map(|l| l.pid.to_string().len())
        .max()
        .unwrap_or(0);
    let any_gpu = lines.iter().any(|l| l.gpu_memory.is_some());
    let size = |bytes: Option<u64>| bytes.map_or_else(|| "-".to_owned(), human_bytes);
    lines
        .iter()
        .map(|l| {
            let mut field = format!("pid {:<pid_width$} RSS {:>5}", l.pid, size(l.rss));
            if any_gpu {
                field.push_str(&format!(" GPU {:>5}", size(l.gpu_memory)));
            }
            field
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_top_shows_them() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(12 << 10), "12K");
        assert_eq!(human_bytes(340 << 20), "340M");
        assert_eq!(human_bytes(5 << 19), "2.5M");
        assert_eq!(human_bytes((12 << 30) / 10), "1.2G");
        assert_eq!(human_bytes((1 << 30) - 1), "1024M");
        assert_eq!(human_bytes(80 << 30), "80G");
        assert_eq!(human_bytes(u64::MAX), "16777216T");
        assert_eq!(human_bytes((996 << 20) / 100), "10M");
    }

    #[test]
    fn process_fields_line_up_and_show_gpu_memory_where_there_is_some() {
        let line = |pid, rss, gpu_memory| ProcessMemoryLine {
            pid,
            rss,
            gpu_memory,
        };
        assert_eq!(
            memory_fields(&[
                line(448, Some((12 << 30) / 10), Some(340 << 20)),
                line(12345, Some(300 << 20), None),
                line(9, None, Some(1 << 30)),
            ]),
            [
                "pid 448   RSS  1.2G GPU  340M",
                "pid 12345 RSS  300M GPU     -",
                "pid 9     RSS     - GPU  1.0G",
            ]
        );
        assert_eq!(
            memory_fields(&[line(7, Some(1 << 30), None)]),
            ["pid 7 RSS  1.0G"]
        );
        assert!(memory_fields(&[]).is_empty());
    }
}
