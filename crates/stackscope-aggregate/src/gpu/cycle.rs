//! The GPU's cycle, read as a person reads `nvidia-smi dmon`: busy bursts and the idle gaps
//! between them ("busy ~1.1 s every ~4.7 s"), and the start-up a `record` leaves out.
//!
//! A burst is a stretch of time the devices' mean utilization stays busy (the one idle rule,
//! [`is_idle`]), dips shorter than [`MIN_GAP_SECS`] included, holding at least
//! [`MIN_BURST_BUSY_SECS`] of busy time (utilization-weighted: 1 s at 50% is 0.5 s). A single
//! stray reading (a calibration kernel, the last job's tail) is no burst. The same
//! [`BurstFinder`] finds the cycle over the recent timeline and, live, the end of start-up
//! (the start of the first burst).

use serde::{Deserialize, Serialize};

use super::state::is_idle;

/// An idle dip shorter than this does not end a burst: one slow batch inside a busy stretch.
pub const MIN_GAP_SECS: f64 = 0.4;
/// A busy stretch holding less busy time than this is not a burst.
pub const MIN_BURST_BUSY_SECS: f64 = 0.3;
/// Where no cycle is found with the rules above, the cycle search looks again for short
/// bursts: steps of a few tenths of a second (busy 0.25 s of every 0.6 s) have gaps shorter
/// than [`MIN_GAP_SECS`] and bursts under [`MIN_BURST_BUSY_SECS`]. The regularity rule keeps a
/// stray reading from making a cycle.
pub const SHORT_MIN_GAP_SECS: f64 = 0.15;
/// A short burst holds at least this busy time.
pub const SHORT_MIN_BURST_BUSY_SECS: f64 = 0.1;
/// A cycle of short bursts needs this many bursts: short steps come many to a recording, and
/// a few irregular ones (a long wait now and then) must not read as a slow cycle.
pub const SHORT_MIN_BURSTS: usize = 8;
/// A cycle needs this many bursts whose starts are seen (two periods).
const MIN_BURSTS: usize = 3;
/// A period is regular when within this share of the periods' median...
const MAX_SPREAD: f64 = 0.35;
/// ...and the bursts are a cycle when at least this share of the periods are regular: one
/// burst split in two, or one late batch, does not hide a cycle.
const MIN_REGULAR: f64 = 2.0 / 3.0;

/// One busy burst, in nanoseconds on the event clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Burst {
    pub start: u64,
    pub end: u64,
    /// Utilization-weighted busy time in it.
    pub busy_secs: f64,
}

/// The GPU's rhythm: `summary.json`'s `gpu.cycle`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cycle {
    /// Median time from one burst's start to the next.
    pub period_secs: f64,
    /// Median busy time of a burst.
    pub busy_secs: f64,
    /// Median idle gap between bursts.
    pub idle_secs: f64,
    /// Periods seen.
    pub cycles: u32,
}

impl Cycle {
    /// "busy ~1.3 s every ~4.4 s".
    pub fn describe(&self) -> String {
        format!(
            "busy ~{:.1} s every ~{:.1} s",
            self.busy_secs, self.period_secs
        )
    }
}

/// Finds bursts in a stream of intervals of mean utilization, fed in time order.
#[derive(Debug, Clone)]
pub struct BurstFinder {
    idle_below: f64,
    min_gap_secs: f64,
    min_busy_secs: f64,
    /// The burst being built, and the idle time since its last busy interval.
    open: Option<(Burst, f64)>,
}

impl BurstFinder {
    pub fn new(idle_below: f32) -> BurstFinder {
        BurstFinder {
            idle_below: f64::from(idle_below),
            min_gap_secs: MIN_GAP_SECS,
            min_busy_secs: MIN_BURST_BUSY_SECS,
            open: None,
        }
    }

    /// A finder of short bursts ([`SHORT_MIN_GAP_SECS`], [`SHORT_MIN_BURST_BUSY_SECS`]).
    pub fn short(idle_below: f32) -> BurstFinder {
        BurstFinder {
            min_gap_secs: SHORT_MIN_GAP_SECS,
            min_busy_secs: SHORT_MIN_BURST_BUSY_SECS,
            ..BurstFinder::new(idle_below)
        }
    }

    /// The interval `[from, to)` at utilization `value`; returns the burst it closed, if any.
    pub fn push(&mut self, from: u64, to: u64, value: f64) -> Option<Burst> {
        let secs = to.saturating_sub(from) as f64 / 1e9;
        if !is_idle(value, self.idle_below) {
            let (burst, gap) = self.open.get_or_insert((
                Burst {
                    start: from,
                    end: to,
                    busy_secs: 0.0,
                },
                0.0,
            ));
            burst.end = to;
            burst.busy_secs += secs * value / 100.0;
            *gap = 0.0;
            return None;
        }
        let (_, gap) = self.open.as_mut()?;
        *gap += secs;
        if *gap + 1e-9 < self.min_gap_secs {
            return None;
        }
        let min = self.min_busy_secs;
        self.open
            .take()
            .map(|(b, _)| b)
            .filter(|b| is_burst(b, min))
    }

    /// Whether a busy stretch is open (a burst or not yet one).
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// The burst being built, once it holds enough busy time to be one.
    pub fn confirmed(&self) -> Option<Burst> {
        self.open
            .map(|(b, _)| b)
            .filter(|b| is_burst(b, self.min_busy_secs))
    }

    /// Ends the stream: the burst still open, if it is one.
    pub fn finish(&mut self) -> Option<Burst> {
        let min = self.min_busy_secs;
        self.open
            .take()
            .map(|(b, _)| b)
            .filter(|b| is_burst(b, min))
    }
}

fn is_burst(burst: &Burst, min_busy_secs: f64) -> bool {
    burst.busy_secs + 1e-9 >= min_busy_secs
}

/// The bursts of a regular grid of mean utilization (`values`, `step` ns apart from `start`).
pub fn bursts_of_grid(values: &[f32], start: u64, step: u64, idle_below: f32) -> Vec<Burst> {
    bursts_of_grid_by(values, start, step, BurstFinder::new(idle_below))
}

/// The short bursts of a regular grid ([`BurstFinder::short`]).
pub fn short_bursts_of_grid(values: &[f32], start: u64, step: u64, idle_below: f32) -> Vec<Burst> {
    bursts_of_grid_by(values, start, step, BurstFinder::short(idle_below))
}

fn bursts_of_grid_by(values: &[f32], start: u64, step: u64, mut finder: BurstFinder) -> Vec<Burst> {
    let mut bursts: Vec<Burst> = values
        .iter()
        .enumerate()
        .filter_map(|(i, &v)| {
            let from = start + i as u64 * step;
            finder.push(from, from + step, f64::from(v))
        })
        .collect();
    bursts.extend(finder.finish());
    bursts
}

/// The cycle of `bursts` seen between `seen_from` and `seen_to` (ns): at least
/// [`MIN_BURSTS`] bursts whose starts are seen, regularly spaced. A burst at `seen_from` has
/// an unknown start and one reaching `seen_to` an unknown length.
pub fn cycle(bursts: &[Burst], seen_from: u64, seen_to: u64) -> Option<Cycle> {
    cycle_of_at_least(bursts, seen_from, seen_to, MIN_BURSTS)
}

/// The cycle of short bursts ([`short_bursts_of_grid`]): [`cycle`]'s rule with at least
/// [`SHORT_MIN_BURSTS`] bursts.
pub fn short_cycle(bursts: &[Burst], seen_from: u64, seen_to: u64) -> Option<Cycle> {
    cycle_of_at_least(bursts, seen_from, seen_to, SHORT_MIN_BURSTS)
}

fn cycle_of_at_least(
    bursts: &[Burst],
    seen_from: u64,
    seen_to: u64,
    min_bursts: usize,
) -> Option<Cycle> {
    let started: Vec<&Burst> = bursts.iter().filter(|b| b.start > seen_from).collect();
    if started.len() < min_bursts {
        return None;
    }
    let periods: Vec<f64> = started
        .windows(2)
        .map(|w| (w[1].start - w[0].start) as f64 / 1e9)
        .collect();
    let period = median(&periods)?;
    let regular = periods
        .iter()
        .filter(|p| (*p - period).abs() <= MAX_SPREAD * period)
        .count();
    if period <= 0.0 || (regular as f64) < MIN_REGULAR * periods.len() as f64 {
        return None;
    }
    let whole: Vec<f64> = started
        .iter()
        .filter(|b| b.end < seen_to)
        .map(|b| b.busy_secs)
        .collect();
    let busy = median(&whole)
        .or_else(|| median(&started.iter().map(|b| b.busy_secs).collect::<Vec<_>>()))?;
    let gaps: Vec<f64> = bursts
        .windows(2)
        .map(|w| w[1].start.saturating_sub(w[0].end) as f64 / 1e9)
        .collect();
    let idle = median(&gaps)?;
    Some(Cycle {
        period_secs: period,
        busy_secs: busy,
        idle_secs: idle,
        cycles: periods.len() as u32,
    })
}

fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP: u64 = 100_000_000;

    /// `busy` s at 97% every `period` s (idle at 2%) for `secs`, starting idle for `lead` s.
    fn wave(period: f64, busy: f64, lead: f64, secs: f64) -> Vec<f32> {
        let n = (secs / 0.1) as usize;
        (0..n)
            .map(|i| {
                let t = i as f64 * 0.1 - lead;
                if t >= 0.0 && t % period < busy {
                    97.0
                } else {
                    2.0
                }
            })
            .collect()
    }

    fn cycle_of(values: &[f32]) -> Option<Cycle> {
        let bursts = bursts_of_grid(values, 0, STEP, 30.0);
        cycle(&bursts, 0, values.len() as u64 * STEP)
    }

    #[test]
    fn a_starved_loop_busy_one_second_in_five() {
        let c = cycle_of(&wave(4.7, 1.1, 0.5, 25.0)).expect("a cycle");
        assert!((c.period_secs - 4.7).abs() < 0.15, "{c:?}");
        assert!((c.busy_secs - 1.1 * 0.97).abs() < 0.15, "{c:?}");
        assert!((c.idle_secs - 3.6).abs() < 0.2, "{c:?}");
        assert_eq!(c.cycles, 5);
        assert_eq!(c.describe(), "busy ~1.1 s every ~4.7 s");
    }

    #[test]
    fn short_bursts_are_a_cycle_only_to_the_short_finder() {
        // Blocking reads: busy 0.25 s of every 0.6 s.
        let values: Vec<f32> = (0..200)
            .map(|i| {
                let t = i as f64 * 0.1;
                if (t + 1e-9) % 0.6 < 0.25 {
                    97.0
                } else {
                    3.0
                }
            })
            .collect();
        assert_eq!(cycle_of(&values), None);
        let short = short_bursts_of_grid(&values, 0, STEP, 30.0);
        let c = short_cycle(&short, 0, values.len() as u64 * STEP).expect("a short cycle");
        assert!((c.period_secs - 0.6).abs() < 0.12, "{c:?}");
        // A busy GPU with one dip is no short cycle either.
        let mut busy = vec![90.0f32; 120];
        busy[60] = 3.0;
        let short = short_bursts_of_grid(&busy, 0, STEP, 30.0);
        assert_eq!(short_cycle(&short, 0, 120 * STEP), None);
    }

    #[test]
    fn a_busy_gpu_with_one_dip_has_no_cycle() {
        let mut values = vec![90.0f32; 120];
        values[60] = 3.0;
        values[61] = 0.0;
        values[62] = 0.0;
        values[63] = 0.0;
        assert_eq!(cycle_of(&values), None);
        assert_eq!(cycle_of(&[99.0; 80]), None);
        assert_eq!(cycle_of(&[0.0; 80]), None);
    }

    #[test]
    fn short_dips_and_stray_readings_are_not_bursts_or_gaps() {
        // A lone 76% reading (0.2 s) is not a burst; a 0.2 s dip does not split one.
        let mut values = vec![0.0f32; 40];
        values[10] = 76.0;
        values[11] = 76.0;
        values.extend([95.0; 10]);
        values.extend([5.0; 2]);
        values.extend([95.0; 10]);
        values.extend([0.0; 10]);
        let bursts = bursts_of_grid(&values, 0, STEP, 30.0);
        assert_eq!(bursts.len(), 1, "{bursts:?}");
        assert_eq!(bursts[0].start, 40 * STEP);
        assert_eq!(bursts[0].end, 62 * STEP);
    }

    #[test]
    fn irregular_bursts_are_no_cycle() {
        let mut values = Vec::new();
        for gap in [5usize, 40, 8, 60, 3, 25] {
            values.extend(vec![0.0f32; gap]);
            values.extend([95.0f32; 6]);
        }
        values.extend([0.0f32; 10]);
        let bursts = bursts_of_grid(&values, 0, STEP, 30.0);
        assert_eq!(cycle_of(&values), None, "{bursts:?}");
    }

    #[test]
    fn the_finder_confirms_a_burst_once_it_holds_enough() {
        let mut finder = BurstFinder::new(30.0);
        assert_eq!(finder.push(0, STEP, 0.0), None);
        finder.push(STEP, 2 * STEP, 97.0);
        assert_eq!(finder.confirmed(), None, "0.1 s is not yet a burst");
        finder.push(2 * STEP, 3 * STEP, 97.0);
        finder.push(3 * STEP, 4 * STEP, 97.0);
        assert_eq!(finder.confirmed(), None, "0.29 s is not yet a burst");
        finder.push(4 * STEP, 5 * STEP, 97.0);
        let burst = finder.confirmed().expect("0.39 s busy");
        assert_eq!(burst.start, STEP);
    }
}
