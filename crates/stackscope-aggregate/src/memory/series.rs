//! Bounded series and the figures read off them: a series of readings thinned pairwise past its
//! cap (so that memory stays bounded however long the recording), a running least-squares fit
//! over every reading (thinning does not touch it), and how many stretches of a recording a
//! series rose in.
//!
//! Thinning merges neighbours pairwise and keeps the higher of each pair: a chart of the
//! thinned series still reaches the peak, and the first reading stays as it was. The exact
//! start, peak and end of a process are kept beside the series by its owner.

use stackscope_event::Timestamp;

/// One point of a series: its time, the level it is judged by, and how two neighbours merge
/// into one when the series is thinned.
pub(crate) trait Level: Copy {
    fn time(&self) -> Timestamp;
    fn level(&self) -> u64;
    /// The point standing for `self` and the later `other`: by default the higher.
    fn merge(self, other: Self) -> Self {
        if other.level() > self.level() {
            other
        } else {
            self
        }
    }
}

/// Readings kept as they come while fewer than `cap`, then thinned pairwise: each kept point
/// after the first then stands for `stride` readings (the highest of them).
#[derive(Debug, Clone)]
pub(crate) struct Thinned<T> {
    points: Vec<T>,
    cap: usize,
    /// Readings per kept point (after the first); doubles at each thinning.
    stride: u64,
    /// The readings of the point being gathered, merged, and how many.
    group: Option<T>,
    grouped: u64,
}

/// A cap below this leaves too little to thin into.
const MIN_CAP: usize = 4;

impl<T: Level> Thinned<T> {
    pub fn new(cap: usize) -> Thinned<T> {
        Thinned {
            points: Vec::new(),
            cap: cap.max(MIN_CAP),
            stride: 1,
            group: None,
            grouped: 0,
        }
    }

    pub fn push(&mut self, point: T) {
        if self.points.is_empty() {
            // The first reading stays as it was: the chart starts where the process started.
            self.points.push(point);
            return;
        }
        let merged = match self.group.take() {
            Some(group) => group.merge(point),
            None => point,
        };
        self.grouped += 1;
        if self.grouped >= self.stride {
            self.points.push(merged);
            self.grouped = 0;
        } else {
            self.group = Some(merged);
        }
        while self.points.len() > self.cap {
            self.thin();
        }
    }

    /// A new cap; a series longer than it is thinned until it fits.
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap.max(MIN_CAP);
        while self.points.len() > self.cap {
            self.thin();
        }
    }

    /// Merges the points after the first pairwise and doubles the stride. An odd point left
    /// over holds half a new stride's readings: it becomes the group being gathered.
    fn thin(&mut self) {
        let rest = self.points.split_off(1);
        let mut rest = rest.into_iter();
        let mut left_over = None;
        while let Some(a) = rest.next() {
            match rest.next() {
                Some(b) => self.points.push(a.merge(b)),
                None => left_over = Some(a),
            }
        }
        let gathering = self.group.take();
        let gathered = self.grouped;
        self.group = match (left_over, gathering) {
            (Some(a), Some(g)) => Some(a.merge(g)),
            (a, g) => a.or(g),
        };
        self.grouped = if left_over.is_some() {
            self.stride + gathered
        } else {
            gathered
        };
        self.stride = self.stride.saturating_mul(2);
        if self.grouped >= self.stride {
            if let Some(group) = self.group.take() {
                self.points.push(group);
            }
            self.grouped = 0;
        }
    }

    /// The kept points and the one being gathered, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.points.iter().chain(self.group.as_ref())
    }

    /// The latest point at or before `time`.
    pub fn at_or_before(&self, time: Timestamp) -> Option<&T> {
        if let Some(group) = &self.group {
            if group.time() <= time {
                return Some(group);
            }
        }
        let after = self.points.partition_point(|p| p.time() <= time);
        after.checked_sub(1).and_then(|i| self.points.get(i))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.points.len() + usize::from(self.group.is_some())
    }

    /// Whether readings were merged.
    #[cfg(test)]
    pub fn thinned(&self) -> bool {
        self.stride > 1
    }
}

/// A least-squares line through every reading, kept as running moments (Welford's updates:
/// stable over days of readings, where sums of squares would cancel). Times are seconds since
/// the first reading and levels bytes above it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Fit {
    n: u64,
    origin: Option<(Timestamp, u64)>,
    mean_x: f64,
    mean_y: f64,
    m_xx: f64,
    m_yy: f64,
    m_xy: f64,
}

impl Fit {
    pub fn add(&mut self, time: Timestamp, level: u64) {
        let (t0, y0) = *self.origin.get_or_insert((time, level));
        let x = time.seconds_since(t0);
        let y = level as f64 - y0 as f64;
        self.n += 1;
        let n = self.n as f64;
        let dx = x - self.mean_x;
        let dy = y - self.mean_y;
        self.mean_x += dx / n;
        self.mean_y += dy / n;
        self.m_xx += dx * (x - self.mean_x);
        self.m_yy += dy * (y - self.mean_y);
        self.m_xy += dx * (y - self.mean_y);
    }

    /// Bytes a second; `None` with fewer than two readings apart in time.
    pub fn slope(&self) -> Option<f64> {
        (self.n >= 2 && self.m_xx > 0.0).then(|| self.m_xy / self.m_xx)
    }

    /// The share of the level's variance the line explains (R²); `None` when the level never
    /// moved or the readings share one instant.
    pub fn explained(&self) -> Option<f64> {
        (self.n >= 2 && self.m_xx > 0.0 && self.m_yy > 0.0)
            .then(|| (self.m_xy * self.m_xy / (self.m_xx * self.m_yy)).clamp(0.0, 1.0))
    }

    pub fn readings(&self) -> u64 {
        self.n
    }
}

/// The least-squares slope of `(seconds, bytes)` readings, bytes a second; 0 with fewer than
/// two readings apart in time. The one fit the recording's verdict and `watch`'s climb share.
pub fn growth_rate(readings: &[(f64, u64)]) -> f64 {
    let mut fit = Fit::default();
    for &(secs, bytes) in readings {
        fit.add(Timestamp((secs.max(0.0) * 1e9) as u64), bytes);
    }
    fit.slope().unwrap_or(0.0)
}

/// A process that exits frees its memory as it goes: its last readings fall from its peak.
/// Readings after the peak are that fall, and left out of its trend, when they are at most
/// this many ...
pub(crate) const EXIT_TAIL_POINTS: usize = 2;
/// ... and within this share of the time judged.
pub(crate) const EXIT_TAIL_SHARE: f64 = 0.1;

/// A level's trend over the readings that say how it grew: from `since` on, and without the
/// fall at a process's exit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trend<'a, T> {
    pub points: &'a [T],
    pub fit: Fit,
}

/// The trend of `points` (a series, its latest reading last), whose running fit over every
/// reading is `running`: that fit when nothing is left out, else one over the points kept.
pub(crate) fn trend<'a, T: Level>(
    points: &'a [T],
    running: &Fit,
    since: Option<Timestamp>,
) -> Option<Trend<'a, T>> {
    let from = since.map_or(0, |s| points.partition_point(|p| p.time() < s));
    let judged = points.get(from..)?;
    let (first, last) = (judged.first()?, judged.last()?);
    let peak = judged
        .iter()
        .rposition(|p| p.level() == judged.iter().map(Level::level).max().unwrap_or(0))
        .unwrap_or(0);
    let span = last
        .time()
        .as_nanos()
        .saturating_sub(first.time().as_nanos()) as f64;
    let tail = last
        .time()
        .as_nanos()
        .saturating_sub(judged[peak].time().as_nanos()) as f64;
    let exit =
        peak > 0 && judged.len() - 1 - peak <= EXIT_TAIL_POINTS && tail <= EXIT_TAIL_SHARE * span;
    let judged = if exit { &judged[..=peak] } else { judged };
    if from == 0 && judged.len() == points.len() {
        return Some(Trend {
            points: judged,
            fit: *running,
        });
    }
    let mut fit = Fit::default();
    for p in judged {
        fit.add(p.time(), p.level());
    }
    Some(Trend {
        points: judged,
        fit,
    })
}

/// Of `segments` equal stretches between the first and last point, how many the level rose
/// in: from the last point at or before a stretch's start to the last at or before its end.
/// Growth in most stretches is growth all along, not one step (a dataset loaded, a cache
/// filled once) that a line through the readings would also fit fairly well.
pub(crate) fn rising_segments<T: Level>(points: &[T], segments: usize) -> usize {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return 0;
    };
    let (t0, t1) = (first.time().as_nanos(), last.time().as_nanos());
    if segments == 0 || t1 <= t0 {
        return 0;
    }
    let span = (t1 - t0) as u128;
    let level_at = |k: usize| {
        let edge = t0 + (span * k as u128 / segments as u128) as u64;
        let after = points.partition_point(|p| p.time().as_nanos() <= edge);
        after
            .checked_sub(1)
            .and_then(|i| points.get(i))
            .map_or(first.level(), |p| p.level())
    };
    (0..segments)
        .filter(|&k| level_at(k + 1) > level_at(k))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq)]
    struct P(u64, u64);

    impl Level for P {
        fn time(&self) -> Timestamp {
            Timestamp(self.0)
        }
        fn level(&self) -> u64 {
            self.1
        }
    }

    #[test]
    fn thinning_keeps_the_first_point_and_the_peak_within_the_cap() {
        let mut s = Thinned::new(64);
        let n = 10_000u64;
        for i in 0..n {
            // A saw with one spike.
            let level = if i == 7_777 { 1_000_000 } else { i % 100 };
            s.push(P(i, level));
        }
        assert!(s.len() <= 65, "{}", s.len());
        assert!(s.thinned());
        let points: Vec<P> = s.iter().copied().collect();
        assert_eq!(points[0], P(0, 0));
        assert!(points.iter().any(|p| p.1 == 1_000_000));
        assert!(points.windows(2).all(|w| w[0].0 < w[1].0));
        // Evenly spread: the kept points span the whole series.
        assert!(points.last().is_some_and(|p| p.0 > n - n / 16));
    }

    #[test]
    fn a_smaller_cap_thins_at_once() {
        let mut s = Thinned::new(1000);
        for i in 0..1000 {
            s.push(P(i, i));
        }
        s.set_cap(100);
        assert!(s.len() <= 101);
        assert_eq!(s.at_or_before(Timestamp(0)).map(|p| p.1), Some(0));
        assert!(s.at_or_before(Timestamp(999)).is_some_and(|p| p.1 >= 990));
    }

    #[test]
    fn the_fit_is_exact_on_a_line_and_stable_far_from_zero() {
        let mut fit = Fit::default();
        for i in 0..100_000u64 {
            // 3 MB a second at 10 Hz, from 40 GB, a day into the clock.
            fit.add(
                Timestamp(86_400_000_000_000 + i * 100_000_000),
                40_000_000_000 + i * 300_000,
            );
        }
        let slope = fit.slope().unwrap_or(0.0);
        assert!((slope - 3e6).abs() < 1.0, "{slope}");
        assert!(fit.explained().unwrap_or(0.0) > 0.999_999);
        let mut flat = Fit::default();
        flat.add(Timestamp(0), 5);
        flat.add(Timestamp(1), 5);
        assert_eq!(flat.slope(), Some(0.0));
        assert_eq!(flat.explained(), None);
    }

    #[test]
    fn the_fall_at_a_process_exit_is_left_out_of_its_trend() {
        let mut fit = Fit::default();
        let mut points: Vec<P> = (0..80).map(|i| P(i * 100, 1_000 + i * 10)).collect();
        points.push(P(8_000, 5));
        for p in &points {
            fit.add(Timestamp(p.0), p.1);
        }
        let t = trend(&points, &fit, None).expect("a trend");
        assert_eq!(t.points.len(), 80);
        assert!((t.fit.slope().unwrap_or(0.0) - 1e8).abs() < 1.0);
        // A fall that lasts is not an exit.
        let long: Vec<P> = (0..80)
            .map(|i| P(i * 100, if i < 50 { i } else { 0 }))
            .collect();
        assert_eq!(
            trend(&long, &Fit::default(), None).map(|t| t.points.len()),
            Some(80)
        );
        // Readings before `since` are left out.
        let t = trend(&points, &fit, Some(Timestamp(4_000))).expect("a trend");
        assert_eq!(t.points.first(), Some(&P(4_000, 1_400)));
    }

    #[test]
    fn one_step_rises_in_one_segment_a_ramp_in_all() {
        let step: Vec<P> = (0..100).map(|i| P(i, if i < 50 { 0 } else { 9 })).collect();
        assert_eq!(rising_segments(&step, 5), 1);
        let ramp: Vec<P> = (0..100).map(|i| P(i, i)).collect();
        assert_eq!(rising_segments(&ramp, 5), 5);
        assert_eq!(rising_segments::<P>(&[], 5), 0);
    }
}
