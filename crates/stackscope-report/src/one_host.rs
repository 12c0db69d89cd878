//! Runs of one host: recordings of one machine made one after another are before-and-after
//! runs of a job, not the nodes of one job, so `merge` names no rank that differs from its
//! peers among them and points at `compare`, the tool for two runs.

/// When and where a recording was made, as its summary says (`host`, `started_at`,
/// `duration_secs`).
#[derive(Debug, Clone)]
pub struct RecordingSpan {
    pub host: String,
    pub started_at: String,
    pub duration_secs: f64,
}

/// The host, when `spans` are recordings of that one host made one after another (none
/// overlaps another): runs of a job, to compare, rather than the nodes of one job. `None` when
/// a start time cannot be read.
pub fn runs_of_one_host(spans: &[RecordingSpan]) -> Option<String> {
    let (first, rest) = spans.split_first()?;
    if rest.is_empty() || rest.iter().any(|s| s.host != first.host) {
        return None;
    }
    let mut times = spans
        .iter()
        .map(|s| {
            let start = chrono::DateTime::parse_from_rfc3339(&s.started_at).ok()?;
            let length = chrono::Duration::milliseconds((s.duration_secs * 1e3) as i64);
            Some((start, start + length))
        })
        .collect::<Option<Vec<_>>>()?;
    times.sort();
    let apart = times.windows(2).all(|w| w[0].1 <= w[1].0);
    apart.then(|| first.host.clone())
}

/// What merge says of runs of one host, instead of naming a rank that differs from its peers.
pub fn runs_of_one_host_line(host: &str) -> String {
    format!(
        "These recordings are runs of one host ({host}), one after another, not the nodes of one \
         job: no run is compared with the others as peers. `stackscope compare BEFORE AFTER` is \
         the tool for two runs, before and after a change."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_one_host_one_after_another_are_told_from_nodes_of_one_job() {
        let span = |host: &str, started_at: &str| RecordingSpan {
            host: host.to_owned(),
            started_at: started_at.to_owned(),
            duration_secs: 60.0,
        };
        let before = span("box", "2026-01-01T10:00:00+00:00");
        let after = span("box", "2026-01-01T10:05:00+00:00");
        let runs = [after.clone(), before.clone()];
        assert_eq!(runs_of_one_host(&runs).as_deref(), Some("box"));
        // Two nodes, or two processes of one host recorded at once: one job.
        let other = span("node-b", "2026-01-01T10:05:00+00:00");
        assert_eq!(runs_of_one_host(&[before.clone(), other]), None);
        let overlapping = span("box", "2026-01-01T10:00:30+00:00");
        assert_eq!(runs_of_one_host(&[before.clone(), overlapping]), None);
        assert_eq!(runs_of_one_host(std::slice::from_ref(&before)), None);
        assert_eq!(runs_of_one_host(&[before, span("box", "yesterday")]), None);
    }
}
