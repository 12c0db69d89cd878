//! Sizes, rates and durations as the memory verdict says them: decimal units (MB = 10⁶ bytes,
//! as `ps` users and the issue's own words read them), two or three figures.

const KB: f64 = 1e3;
const MB: f64 = 1e6;
const GB: f64 = 1e9;

/// `512 KB`, `3.5 MB`, `115 MB`, `1.2 GB`, `80 GB`.
pub fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 100.0 * GB {
        format!("{:.0} GB", b / GB)
    } else if b >= GB {
        format!("{:.1} GB", b / GB)
    } else if b >= 10.0 * MB {
        format!("{:.0} MB", b / MB)
    } else if b >= MB {
        format!("{:.1} MB", b / MB)
    } else {
        format!("{:.0} KB", b / KB)
    }
}

/// `1.0 → 2.0 GB` when both ends are in GB, else `115 MB → 1.2 GB`.
pub(crate) fn range(from: u64, to: u64) -> String {
    let gb = |b: u64| (GB..100.0 * GB).contains(&(b as f64));
    if gb(from) && gb(to) {
        format!("{:.1} → {:.1} GB", from as f64 / GB, to as f64 / GB)
    } else {
        format!("{} → {}", size(from), size(to))
    }
}

/// `48 MB/s`, `1.5 MB/s`, `300 KB/s`.
pub fn rate(bytes_per_s: f64) -> String {
    let b = bytes_per_s.max(0.0);
    if b >= 10.0 * MB {
        format!("{:.0} MB/s", b / MB)
    } else if b >= MB {
        format!("{:.1} MB/s", b / MB)
    } else {
        format!("{:.0} KB/s", b / KB)
    }
}

/// `20 s`, `12 min`, `3.5 h`.
pub(crate) fn duration(secs: f64) -> String {
    let s = secs.max(0.0);
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 2.0 * 3600.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_as_people_write_them() {
        assert_eq!(size(115_000_000), "115 MB");
        assert_eq!(size(4_000_000_000), "4.0 GB");
        assert_eq!(size(512_000), "512 KB");
        assert_eq!(range(1_000_000_000, 2_000_000_000), "1.0 → 2.0 GB");
        assert_eq!(range(115_000_000, 1_160_000_000), "115 MB → 1.2 GB");
        assert_eq!(rate(48e6), "48 MB/s");
        assert_eq!(rate(1.5e6), "1.5 MB/s");
        assert_eq!(duration(40.2), "40 s");
        assert_eq!(duration(720.0), "12 min");
        assert_eq!(duration(3.5 * 3600.0), "3.5 h");
    }
}
