//! The time-weighted mean utilization of each device and of all devices, and the share of time
//! the devices' mean was below the idle threshold, accumulated reading by reading at full
//! resolution. This is the one definition of "mean utilization": each device's mean in
//! `summary.json` and the terminal, and the all-devices mean the verdict, `summary.json`'s
//! `gpu.mean_utilization` and report.html give (the mean of the devices' means), come from
//! one [`UtilizationMean::result`].
//!
//! Each reading covers the interval since the previous reading of any device (the rule stack
//! samples are tagged by): over each interval between two consecutive reading instants, each
//! device counts with its covering reading (its first at or after the interval's end, or its
//! last one past the end of its readings). The result is exact whatever the readings' spacing;
//! a regular grid would alias with a training loop whose step is a multiple of the grid step.
//!
//! A `record` leaves the job's start-up out ([`UtilizationMean::leave_out_startup`]): the
//! intervals before the first busy burst ([`BurstFinder`]) are summed apart, and the result is
//! over the time from that burst on. Until a burst has come, the result is over everything.
//!
//! It cannot be computed from the downsampled timeline: a merged point averages an idle and a
//! busy reading into a middling one and the idle share collapses. So intervals are accounted
//! as soon as every device has a reading past them (readings arrive in batches, devices one
//! after the other), and only those few seconds of readings are held.

use std::collections::{BTreeMap, VecDeque};

use super::cycle::BurstFinder;
use super::state::is_idle;

/// How long an interval waits for a device that has not reported past it; after that the
/// device counts with its latest reading. As long as the tagger waits for the same reason.
const HOLD_NANOS: u64 = super::tagging::HOLD_LIMIT_NANOS;
/// A hard cap on one device's held readings, for a device whose readings all carry one
/// timestamp; time never releases those.
const MAX_HELD: usize = 10_000;

#[derive(Debug, Clone)]
pub struct UtilizationMean {
    idle_below: f64,
    /// Each device's readings from the last accounted instant on, in time order, as
    /// `(nanoseconds, percent)`. Never emptied once a device has reported: its last reading
    /// stands past the end of its readings.
    held: BTreeMap<u32, VecDeque<(u64, f32)>>,
    /// The last instant accounted for, the start of the next interval.
    cursor: Option<u64>,
    newest: u64,
    /// The intervals counted in the result.
    sums: Sums,
    /// Start-up, while it is being left out.
    startup: Option<Startup>,
}

/// Time-weighted sums over accounted intervals, in nanoseconds.
#[derive(Debug, Clone, Default)]
struct Sums {
    /// The devices' mean, weighted; the time it was idle; the time accounted.
    weighted: f64,
    idle: f64,
    total: f64,
    /// Each device's utilization weighted by time, and the time it counted in.
    devices: BTreeMap<u32, (f64, f64)>,
}

impl Sums {
    /// The interval `span` ns long in which each device read as `values` say.
    fn interval(span: f64, values: &[(u32, f64)], idle_below: f64) -> Sums {
        let mean = values.iter().map(|v| v.1).sum::<f64>() / values.len() as f64;
        Sums {
            weighted: mean * span,
            idle: if is_idle(mean, idle_below) { span } else { 0.0 },
            total: span,
            devices: values.iter().map(|&(d, u)| (d, (u * span, span))).collect(),
        }
    }

    fn add(&mut self, other: &Sums) {
        self.weighted += other.weighted;
        self.idle += other.idle;
        self.total += other.total;
        for (&device, &(weighted, span)) in &other.devices {
            let sums = self.devices.entry(device).or_default();
            sums.0 += weighted;
            sums.1 += span;
        }
    }
}

/// What [`UtilizationMean::result`] gives.
#[derive(Debug, Clone, PartialEq)]
pub struct UtilizationResult {
    /// Each device's time-weighted mean utilization, by index.
    pub devices: BTreeMap<u32, f64>,
    /// The mean of the devices' means: all devices' mean utilization.
    pub mean: f64,
    /// The share of the time the devices' mean was below the idle threshold.
    pub idle_share: f64,
}

impl UtilizationResult {
    fn of_devices(devices: BTreeMap<u32, f64>, idle_share: f64) -> Option<UtilizationResult> {
        if devices.is_empty() {
            return None;
        }
        let mean = devices.values().sum::<f64>() / devices.len() as f64;
        Some(UtilizationResult {
            devices,
            mean,
            idle_share,
        })
    }
}

/// The start-up being left out: the intervals before the first burst.
#[derive(Debug, Clone)]
struct Startup {
    finder: BurstFinder,
    /// Intervals before the first burst (or the stretch that became it).
    before: Sums,
    /// Intervals since the open busy stretch began: the burst's own once it is confirmed.
    open: Sums,
    /// Where the first burst began: the end of start-up.
    end: Option<u64>,
}

impl UtilizationMean {
    pub fn new(idle_below: f32) -> UtilizationMean {
        UtilizationMean {
            idle_below: f64::from(idle_below),
            held: BTreeMap::new(),
            cursor: None,
            newest: 0,
            sums: Sums::default(),
            startup: None,
        }
    }

    /// Leaves the start-up out: from now on the result covers the time from the first busy
    /// burst on, once one has come.
    pub fn leave_out_startup(&mut self) {
        self.startup = Some(Startup {
            finder: BurstFinder::new(self.idle_below as f32),
            before: Sums::default(),
            open: Sums::default(),
            end: None,
        });
    }

    /// Where start-up ended (the first burst's start, ns), once it has.
    pub fn startup_end(&self) -> Option<u64> {
        self.startup.as_ref().and_then(|s| s.end)
    }

    /// Gives up leaving start-up out (no burst came): the result covers everything again.
    pub fn abandon_startup(&mut self) {
        if let Some(startup) = self.startup.take() {
            if startup.end.is_none() {
                self.sums.add(&startup.before);
                self.sums.add(&startup.open);
            }
        }
    }

    /// Makes intervals wait for `device` even before its first reading, so that a device that
    /// reports late at the start still counts from the start.
    pub fn expect_device(&mut self, device: u32) {
        self.held.entry(device).or_default();
    }

    pub fn add(&mut self, device: u32, time: u64, utilization: f32) {
        // A reading before the last accounted instant comes too late to count.
        if self.cursor.is_some_and(|c| time < c) {
            return;
        }
        self.newest = self.newest.max(time);
        let series = self.held.entry(device).or_default();
        if series.back().is_some_and(|&(last, _)| last > time) {
            let at = series.partition_point(|&(t, _)| t <= time);
            series.insert(at, (time, utilization));
        } else {
            series.push_back((time, utilization));
        }
        if series.len() > MAX_HELD {
            series.pop_front();
        }
        self.advance(false);
    }

    /// Each device's mean, their mean and the idle share over every reading so far; `None`
    /// before the first reading.
    pub fn result(&self) -> Option<UtilizationResult> {
        // What is still held is accounted as if the recording ended now, on a copy: a few
        // seconds of readings.
        let mut all = self.clone();
        all.advance(true);
        if all.startup_end().is_none() {
            // No burst yet: nothing to leave out.
            all.abandon_startup();
        }
        let sums = &all.sums;
        if sums.total > 0.0 {
            let devices = sums
                .devices
                .iter()
                .filter(|(_, &(_, span))| span > 0.0)
                .map(|(&device, &(weighted, span))| (device, weighted / span))
                .collect();
            return UtilizationResult::of_devices(devices, sums.idle / sums.total);
        }
        // One instant: its readings are all there is.
        let devices: BTreeMap<u32, f64> = all
            .held
            .iter()
            .filter_map(|(&device, s)| Some((device, f64::from(s.front()?.1))))
            .collect();
        let mut result = UtilizationResult::of_devices(devices, 0.0)?;
        if is_idle(result.mean, all.idle_below) {
            result.idle_share = 1.0;
        }
        Some(result)
    }

    /// Accounts every interval whose covering readings are all known: every device has a
    /// reading at or after its end, or it is older than the hold, or `force` (the end).
    fn advance(&mut self, force: bool) {
        loop {
            let after = |s: &VecDeque<(u64, f32)>, c: Option<u64>| match c {
                Some(c) => s.get(s.partition_point(|&(t, _)| t <= c)).map(|r| r.0),
                None => s.front().map(|r| r.0),
            };
            let Some(next) = self
                .held
                .values()
                .filter_map(|s| after(s, self.cursor))
                .min()
            else {
                return;
            };
            let waited = self.newest.saturating_sub(next) > HOLD_NANOS;
            let Some(from) = self.cursor else {
                // The first instant opens the first interval, once the hold has passed: by then
                // every device has delivered its first batch, which may hold earlier readings
                // than the first device's (the poller reads devices one after the other).
                if !(force || waited) {
                    return;
                }
                self.cursor = Some(next);
                continue;
            };
            let reached = self
                .held
                .values()
                .all(|s| s.back().is_some_and(|&(t, _)| t >= next));
            if !(force || reached || waited) {
                return;
            }
            let values: Vec<(u32, f64)> = self
                .held
                .iter()
                .filter_map(|(&device, series)| {
                    let at = series.partition_point(|&(t, _)| t < next);
                    let &(_, u) = series.get(at).or_else(|| series.back())?;
                    Some((device, f64::from(u)))
                })
                .collect();
            if !values.is_empty() {
                self.account(from, next, &values);
            }
            self.cursor = Some(next);
            // Readings before `next` cover no later interval; the last one stays regardless.
            for series in self.held.values_mut() {
                let before = series.partition_point(|&(t, _)| t < next);
                series.drain(..before.min(series.len().saturating_sub(1)));
            }
        }
    }

    /// Counts the interval `[from, to)`, in which each device read as `values` say: in the
    /// result, or in start-up while it is left out.
    fn account(&mut self, from: u64, to: u64, values: &[(u32, f64)]) {
        let interval = Sums::interval((to - from) as f64, values, self.idle_below);
        let Some(startup) = self.startup.as_mut().filter(|s| s.end.is_none()) else {
            self.sums.add(&interval);
            return;
        };
        // Start-up ends with the devices' mean's first burst.
        startup
            .finder
            .push(from, to, interval.weighted / interval.total);
        if startup.finder.is_open() {
            startup.open.add(&interval);
        } else {
            let open = std::mem::take(&mut startup.open);
            startup.before.add(&open);
            startup.before.add(&interval);
        }
        if let Some(burst) = startup.finder.confirmed() {
            startup.end = Some(burst.start);
            let open = std::mem::take(&mut startup.open);
            self.sums.add(&open);
        }
    }

    /// Readings held across devices.
    #[cfg(test)]
    pub fn held_len(&self) -> usize {
        self.held.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, computed over whole series at once: the reference.
    fn time_weighted(series: &[Vec<(u64, f32)>], idle_below: f32) -> Option<(f64, f64)> {
        let mut instants: Vec<u64> = series.iter().flatten().map(|r| r.0).collect();
        instants.sort_unstable();
        instants.dedup();
        let (mut weighted, mut idle, mut total) = (0.0f64, 0.0f64, 0.0f64);
        for pair in instants.windows(2) {
            let values: Vec<f64> = series
                .iter()
                .filter_map(|s| s.iter().find(|r| r.0 >= pair[1]).or(s.last()))
                .map(|r| f64::from(r.1))
                .collect();
            let value = values.iter().sum::<f64>() / values.len() as f64;
            let span = (pair[1] - pair[0]) as f64;
            weighted += value * span;
            idle += if value < f64::from(idle_below) {
                span
            } else {
                0.0
            };
            total += span;
        }
        (total > 0.0).then(|| (weighted / total, idle / total))
    }

    /// Fed as a poller delivers readings: every half second, each device's new readings in
    /// turn. Also checks that only a few seconds of readings are ever held.
    fn streamed(series: &[Vec<(u64, f32)>], idle_below: f32) -> Option<(f64, f64)> {
        streamed_result(series, idle_below).map(|r| (r.mean, r.idle_share))
    }

    fn streamed_result(series: &[Vec<(u64, f32)>], idle_below: f32) -> Option<UtilizationResult> {
        let mut mean = UtilizationMean::new(idle_below);
        let end = series.iter().flatten().map(|r| r.0).max().unwrap_or(0);
        let window = 500_000_000u64;
        for from in (0..=end).step_by(window as usize) {
            for (device, readings) in series.iter().enumerate() {
                for &(t, u) in readings
                    .iter()
                    .filter(|r| r.0 >= from && r.0 < from + window)
                {
                    mean.add(device as u32, t, u);
                }
            }
            assert!(mean.held_len() < 500, "{}", mean.held_len());
        }
        mean.result()
    }

    #[test]
    fn time_weighting_does_not_alias_with_a_periodic_load() {
        // A 100 ms cycle, busy for the last 40 ms of each, read every 20 ms for 10 s.
        let readings: Vec<(u64, f32)> = (1..=500u64)
            .map(|k| {
                let t = k * 20_000_000;
                let phase = (t % 100_000_000) / 20_000_000;
                (t, if phase == 4 || phase == 0 { 100.0 } else { 0.0 })
            })
            .collect();
        let (mean, idle) = streamed(&[readings], 30.0).expect("some");
        assert!((mean - 40.0).abs() < 1.0, "{mean}");
        assert!((idle - 0.6).abs() < 0.01, "{idle}");
    }

    #[test]
    fn time_weighting_averages_devices_over_each_interval() {
        let a = vec![(10, 0.0), (20, 100.0)];
        let b = vec![(10, 100.0), (20, 100.0)];
        // One interval, (10, 20]: a reads 100, b reads 100.
        assert_eq!(streamed(&[a, b], 30.0), Some((100.0, 0.0)));
        let single = vec![(10, 10.0)];
        assert_eq!(streamed(&[single], 30.0), Some((10.0, 1.0)));
        assert_eq!(streamed(&[], 30.0), None);
    }

    #[test]
    fn each_device_has_its_mean_and_the_devices_mean_is_theirs() {
        // Device 0 busy for 3 s of 4, device 1 idle throughout, device 2 reporting late.
        let s = 1_000_000_000u64;
        let a = vec![
            (0, 0.0),
            (s, 100.0),
            (2 * s, 100.0),
            (3 * s, 100.0),
            (4 * s, 0.0),
        ];
        let b = vec![(0, 10.0), (2 * s, 10.0), (4 * s, 10.0)];
        let c = vec![(3 * s, 40.0), (4 * s, 40.0)];
        let result = streamed_result(&[a, b, c], 30.0).expect("some");
        assert_eq!(result.devices.len(), 3);
        assert!((result.devices[&0] - 75.0).abs() < 1e-9, "{result:?}");
        assert!((result.devices[&1] - 10.0).abs() < 1e-9, "{result:?}");
        assert!((result.devices[&2] - 40.0).abs() < 1e-9, "{result:?}");
        assert!((result.mean - 125.0 / 3.0).abs() < 1e-9, "{result:?}");
        // The devices' mean is idle (< 30%) only in the last second: (0 + 10 + 40) / 3.
        assert!((result.idle_share - 0.25).abs() < 1e-9, "{result:?}");
    }

    #[test]
    fn streaming_matches_the_definition() {
        // Three devices read about every 100 ms at different rates, out of phase, the third
        // stopping a third of the way in.
        let series: Vec<Vec<(u64, f32)>> = (0..3u64)
            .map(|d| {
                let n = if d == 2 { 300 } else { 1_000 };
                (0..n)
                    .map(|k| {
                        let t = (1_000 + k * (97 + 13 * d) + d * 7) * 1_000_000;
                        (t, ((k * (d + 3)) % 101) as f32)
                    })
                    .collect()
            })
            .collect();
        let (mean, idle) = streamed(&series, 40.0).expect("some");
        let (exact_mean, exact_idle) = time_weighted(&series, 40.0).expect("some");
        assert!((mean - exact_mean).abs() < 1e-9, "{mean} {exact_mean}");
        assert!((idle - exact_idle).abs() < 1e-9, "{idle} {exact_idle}");
    }

    #[test]
    fn only_a_few_seconds_are_held() {
        let mut mean = UtilizationMean::new(30.0);
        mean.expect_device(1);
        for k in 0..100_000u64 {
            // Device 1 never reports: the hold releases the intervals.
            mean.add(0, k * 100_000_000, (k % 2) as f32 * 100.0);
            assert!(mean.held_len() < 100, "{}", mean.held_len());
        }
        let result = mean.result().expect("some");
        let (m, idle) = (result.mean, result.idle_share);
        assert!(
            (m - 50.0).abs() < 0.1 && (idle - 0.5).abs() < 0.01,
            "{m} {idle}"
        );
    }
}
