//! Deciding that a job hangs: its stacks stopped changing for long enough (and its GPU, when
//! there is GPU data, idles too). One report per hang: a new one only after progress resumed.

use stackscope_event::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HangEvent {
    /// Nothing moved for `unchanged_secs` seconds.
    Hung { unchanged_secs: f64 },
    /// The stacks changed again after a hang was reported.
    Resumed,
}

pub struct HangDetector {
    hang_after_nanos: u64,
    last_signature: Option<u64>,
    last_change: Timestamp,
    reported: bool,
}

impl HangDetector {
    pub fn new(hang_after_secs: f64) -> HangDetector {
        HangDetector {
            hang_after_nanos: (hang_after_secs * 1e9) as u64,
            last_signature: None,
            last_change: Timestamp::default(),
            reported: false,
        }
    }

    /// Takes one observation: a fingerprint of every thread's stack at `time`, and whether the
    /// GPU idles (`None` without GPU data). A busy GPU means the job moves even when Python
    /// sits in one place (a long kernel), so it vetoes a hang.
    pub fn observe(
        &mut self,
        time: Timestamp,
        signature: u64,
        gpu_idle: Option<bool>,
    ) -> Option<HangEvent> {
        if self.last_signature != Some(signature) {
            self.last_signature = Some(signature);
            self.last_change = time;
            if self.reported {
                self.reported = false;
                return Some(HangEvent::Resumed);
            }
            return None;
        }
        let unchanged = time.0.saturating_sub(self.last_change.0);
        if !self.reported && unchanged >= self.hang_after_nanos && gpu_idle != Some(false) {
            self.reported = true;
            return Some(HangEvent::Hung {
                unchanged_secs: unchanged as f64 / 1e9,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Timestamp {
        Timestamp(secs * 1_000_000_000)
    }

    #[test]
    fn one_report_per_hang_and_another_after_progress() {
        let mut d = HangDetector::new(5.0);
        assert_eq!(d.observe(at(0), 1, None), None);
        assert_eq!(d.observe(at(4), 1, None), None);
        assert_eq!(
            d.observe(at(5), 1, None),
            Some(HangEvent::Hung {
                unchanged_secs: 5.0
            })
        );
        assert_eq!(d.observe(at(9), 1, None), None, "reported once");
        assert_eq!(d.observe(at(10), 2, None), Some(HangEvent::Resumed));
        assert_eq!(d.observe(at(14), 2, None), None);
        assert!(matches!(
            d.observe(at(15), 2, None),
            Some(HangEvent::Hung { .. })
        ));
    }

    #[test]
    fn changing_stacks_never_hang() {
        let mut d = HangDetector::new(2.0);
        for s in 0..100 {
            assert_eq!(d.observe(at(s), s % 3, None), None);
        }
    }

    #[test]
    fn a_busy_gpu_vetoes_a_hang() {
        let mut d = HangDetector::new(2.0);
        d.observe(at(0), 7, Some(false));
        assert_eq!(d.observe(at(10), 7, Some(false)), None);
        assert!(matches!(
            d.observe(at(11), 7, Some(true)),
            Some(HangEvent::Hung { .. })
        ));
    }
}
