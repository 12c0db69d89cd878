//! Detecting a periodic swing in GPU utilization, the signature of a starving input pipeline.

/// Below this autocorrelation a series is not called periodic.
pub const MIN_PEAK: f64 = 0.5;
/// A series must swing by more than this many points (standard deviation) to oscillate.
pub const MIN_STDDEV: f64 = 15.0;
/// Among peaks nearly as strong as the best, the shortest lag is the period; its multiples
/// correlate just as well and must not win.
const FUNDAMENTAL_RATIO: f64 = 0.9;

/// The period in seconds of a regularly spaced series (`step_secs` apart), when it is clearly
/// periodic: it swings (standard deviation over [`MIN_STDDEV`]) and its autocorrelation has a
/// peak over [`MIN_PEAK`] at a lag of at most half the series, so at least two cycles are seen.
pub fn oscillation_period(values: &[f32], step_secs: f64) -> Option<f64> {
    let n = values.len();
    if n < 8 || step_secs <= 0.0 {
        return None;
    }
    let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
    let x: Vec<f64> = values.iter().map(|&v| f64::from(v) - mean).collect();
    let variance = x.iter().map(|v| v * v).sum::<f64>() / n as f64;
    if variance.sqrt() <= MIN_STDDEV {
        return None;
    }
    let max_lag = n / 2;
    // Unbiased: each lag's products are averaged over their own count, so a peak at a long lag
    // is not penalised for having fewer pairs.
    let r: Vec<f64> = (0..=max_lag)
        .map(|k| {
            let sum: f64 = x[..n - k].iter().zip(&x[k..]).map(|(a, b)| a * b).sum();
            sum / (n - k) as f64 / variance
        })
        .collect();
    // Peaks before the first zero crossing are the series resembling itself at small shifts.
    let first_negative = r.iter().position(|&v| v < 0.0)?;
    let peaks: Vec<usize> = (first_negative.max(1)..max_lag)
        .filter(|&k| r[k] >= r[k - 1] && r[k] > r[k + 1])
        .collect();
    let best = peaks
        .iter()
        .map(|&k| r[k])
        .fold(f64::NEG_INFINITY, f64::max);
    if best < MIN_PEAK {
        return None;
    }
    let lag = peaks
        .into_iter()
        .find(|&k| r[k] >= FUNDAMENTAL_RATIO * best)?;
    // A parabola through the peak and its neighbours places it between grid points.
    let (a, b, c) = (r[lag - 1], r[lag], r[lag + 1]);
    let denominator = a - 2.0 * b + c;
    let offset = if denominator.abs() > f64::EPSILON {
        (0.5 * (a - c) / denominator).clamp(-0.5, 0.5)
    } else {
        0.0
    };
    Some((lag as f64 + offset) * step_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn square_wave(period_secs: f64, step: f64, secs: f64) -> Vec<f32> {
        let n = (secs / step) as usize;
        (0..n)
            .map(|i| {
                let phase = (i as f64 * step) % period_secs;
                if phase < period_secs / 2.0 {
                    3.0
                } else {
                    97.0
                }
            })
            .collect()
    }

    /// A small deterministic generator, so the test needs no dependency and never flakes.
    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((state >> 33) % 101) as f32
            })
            .collect()
    }

    #[test]
    fn square_wave_of_four_seconds() {
        let period = oscillation_period(&square_wave(4.0, 0.1, 60.0), 0.1);
        let period = period.expect("periodic");
        assert!((period - 4.0).abs() < 0.15, "period {period}");
    }

    #[test]
    fn short_recording_with_two_and_a_half_cycles() {
        let period = oscillation_period(&square_wave(4.0, 0.1, 10.0), 0.1).expect("periodic");
        assert!((period - 4.0).abs() < 0.15, "period {period}");
    }

    #[test]
    fn uneven_duty_cycle() {
        // Idle 3 s, busy 1 s.
        let values: Vec<f32> = (0..400)
            .map(|i| if i % 40 < 30 { 2.0 } else { 95.0 })
            .collect();
        let period = oscillation_period(&values, 0.1).expect("periodic");
        assert!((period - 4.0).abs() < 0.15, "period {period}");
    }

    #[test]
    fn constant_series_is_not_periodic() {
        assert_eq!(oscillation_period(&[50.0; 600], 0.1), None);
        assert_eq!(oscillation_period(&[], 0.1), None);
    }

    #[test]
    fn noise_is_not_periodic() {
        for seed in 1..20 {
            let values = noise(600, seed);
            assert_eq!(oscillation_period(&values, 0.1), None, "seed {seed}");
        }
    }

    #[test]
    fn small_swings_are_not_oscillation() {
        // Periodic, but only between 48 and 52 percent.
        let values: Vec<f32> = square_wave(4.0, 0.1, 60.0)
            .into_iter()
            .map(|v| if v > 50.0 { 52.0 } else { 48.0 })
            .collect();
        assert_eq!(oscillation_period(&values, 0.1), None);
    }

    #[test]
    fn a_single_step_is_not_periodic() {
        let values: Vec<f32> = (0..600).map(|i| if i < 300 { 5.0 } else { 95.0 }).collect();
        assert_eq!(oscillation_period(&values, 0.1), None);
    }
}
