//! Evaluating a scripted utilization pattern at an instant.

use std::time::Duration;

use crate::script::{Pattern, TaggedPattern};

/// A pattern plus what it remembers between ticks (the last good value read from a file).
#[derive(Debug)]
pub struct PatternState {
    pattern: Pattern,
    last: f64,
}

impl PatternState {
    pub fn new(pattern: Pattern) -> PatternState {
        PatternState { pattern, last: 0.0 }
    }

    /// The value, in whole percent, at `elapsed` since init.
    pub fn value_at(&mut self, elapsed: Duration) -> u32 {
        let value = match &self.pattern {
            Pattern::Number(v) | Pattern::Tagged(TaggedPattern::Constant(v)) => *v,
            Pattern::Tagged(TaggedPattern::Square {
                period_s,
                low,
                high,
                duty,
                phase_s,
            }) => square(
                elapsed.as_secs_f64() + phase_s,
                *period_s,
                *low,
                *high,
                *duty,
            ),
            // A writer replacing the file can leave it empty for an instant: keep the last value
            // rather than report a spurious 0 in the middle of a phase.
            Pattern::Tagged(TaggedPattern::File(path)) => std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.trim().parse::<f64>().ok())
                .unwrap_or(self.last),
        };
        self.last = value;
        value.clamp(0.0, 100.0).round() as u32
    }
}

fn square(t: f64, period: f64, low: f64, high: f64, duty: f64) -> f64 {
    if period <= 0.0 {
        return high;
    }
    let phase = (t / period).rem_euclid(1.0);
    if phase < duty {
        high
    } else {
        low
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn square_pattern() -> Pattern {
        Pattern::Tagged(TaggedPattern::Square {
            period_s: 4.0,
            low: 3.0,
            high: 97.0,
            duty: 0.5,
            phase_s: 0.0,
        })
    }

    #[test]
    fn square_wave_alternates() {
        let mut state = PatternState::new(square_pattern());
        assert_eq!(state.value_at(Duration::from_millis(100)), 97);
        assert_eq!(state.value_at(Duration::from_millis(2100)), 3);
        assert_eq!(state.value_at(Duration::from_millis(4100)), 97);
        assert_eq!(state.value_at(Duration::from_millis(7900)), 3);
    }

    #[test]
    fn constants_are_clamped() {
        let mut state = PatternState::new(Pattern::Number(150.0));
        assert_eq!(state.value_at(Duration::ZERO), 100);
        let mut state = PatternState::new(Pattern::Tagged(TaggedPattern::Constant(-5.0)));
        assert_eq!(state.value_at(Duration::ZERO), 0);
    }

    #[test]
    fn file_keeps_last_good_value() {
        let dir = std::env::temp_dir().join(format!("fake-nvml-pattern-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("util");
        let mut state = PatternState::new(Pattern::Tagged(TaggedPattern::File(path.clone())));
        assert_eq!(
            state.value_at(Duration::ZERO),
            0,
            "missing file reads as 0 at first"
        );
        std::fs::write(&path, "100\n").expect("write");
        assert_eq!(state.value_at(Duration::ZERO), 100);
        std::fs::write(&path, "").expect("write");
        assert_eq!(
            state.value_at(Duration::ZERO),
            100,
            "empty file keeps the last value"
        );
        std::fs::write(&path, "0").expect("write");
        assert_eq!(state.value_at(Duration::ZERO), 0);
        std::fs::remove_dir_all(&dir).ok();
    }
}
