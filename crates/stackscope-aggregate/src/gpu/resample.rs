//! The GPU timeline's utilization resampled on a regular grid, for the oscillation search.

/// The mean utilization of all devices on a regular grid from `start` to `end` (nanoseconds),
/// `step` apart. Each point takes each device's reading covering it (the first at or after it),
/// or its last reading past the end of its series, the same rule stack samples are tagged by.
/// `series` holds each device's `(nanoseconds, percent)` readings in time order.
pub fn resample_mean(series: &[Vec<(u64, f32)>], start: u64, end: u64, step: u64) -> Vec<f32> {
    if step == 0 || end < start || series.iter().all(Vec::is_empty) {
        return Vec::new();
    }
    let points = (end - start) / step + 1;
    let mut cursors = vec![0usize; series.len()];
    let mut grid = Vec::with_capacity(points as usize);
    for k in 0..points {
        let t = start + k * step;
        let mut sum = 0.0f32;
        let mut count = 0u32;
        for (device, readings) in series.iter().enumerate() {
            let cursor = &mut cursors[device];
            while *cursor < readings.len() && readings[*cursor].0 < t {
                *cursor += 1;
            }
            let reading = readings.get(*cursor).or_else(|| readings.last());
            if let Some(&(_, u)) = reading {
                sum += u;
                count += 1;
            }
        }
        if count > 0 {
            grid.push(sum / count as f32);
        }
    }
    grid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_takes_the_covering_reading_and_averages_devices() {
        let a = vec![(10, 0.0), (20, 100.0)];
        let b = vec![(15, 50.0)];
        // At 10: a covers with 0, b with 50. At 15: a's 100, b's 50. At 20: a 100, b past its
        // end keeps 50.
        let grid = resample_mean(&[a, b], 10, 20, 5);
        assert_eq!(grid, vec![25.0, 75.0, 75.0]);
    }
}
