//! The memory gauges of `--metrics-addr`: each process's resident memory and GPU memory, and
//! the job's memory cgroup (usage, limit, OOM kills), at their latest readings.
//!
//! A process's gauges go when it exits: a scraper sees the series end rather than hold its
//! last value forever. What each process holds now is `top`'s own account of it
//! ([`LatestMemory`]), so that the gauges and `top`'s process lines say the same.

use std::fmt::Write as _;

use stackscope_aggregate::top::LatestMemory;
use stackscope_event::{CgroupSample, Event, Timestamp};

/// The latest memory readings, by process, and the cgroup's.
#[derive(Debug, Default)]
pub struct MemoryGauges {
    processes: LatestMemory,
    cgroup: Option<CgroupSample>,
}

impl MemoryGauges {
    /// Takes what an event says of memory: a process's reading, a GPU reading with its
    /// processes' memory, the cgroup's reading. Exits go through [`MemoryGauges::forget`].
    pub fn observe(&mut self, event: &Event) {
        match event {
            Event::Memory(m) => self.processes.add_memory(m),
            Event::Gpu(g) => self.processes.add_gpu(g),
            Event::Cgroup(c) if self.cgroup.as_ref().is_none_or(|l| l.time <= c.time) => {
                self.cgroup = Some(c.clone());
            }
            _ => {}
        }
    }

    /// Process `pid` exited at `time`: its gauges go.
    pub fn forget(&mut self, pid: u32, time: Timestamp) {
        self.processes.forget(pid, time);
    }

    /// Whether news of `pid` taken at `time` comes after its exit ([`LatestMemory::is_late`]).
    pub fn is_late(&self, pid: u32, time: Timestamp) -> bool {
        self.processes.is_late(pid, time)
    }

    /// The gauges in Prometheus's text format; `labels` gives a process's labels.
    pub fn render(&self, out: &mut String, labels: &dyn Fn(u32) -> String) {
        let header = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
        };
        header(
            out,
            "stackscope_process_rss_bytes",
            "gauge",
            "Resident memory of each process of the job at its latest reading, in bytes.",
        );
        let lines = self.processes.lines();
        for line in &lines {
            if let Some(rss) = line.rss {
                let _ = writeln!(
                    out,
                    "stackscope_process_rss_bytes{{{}}} {rss}",
                    labels(line.pid)
                );
            }
        }
        header(
            out,
            "stackscope_process_gpu_memory_bytes",
            "gauge",
            "GPU memory of each process of the job (summed over the GPUs that list it), in \
             bytes.",
        );
        for line in &lines {
            if let Some(bytes) = line.gpu_memory {
                let _ = writeln!(
                    out,
                    "stackscope_process_gpu_memory_bytes{{{}}} {bytes}",
                    labels(line.pid)
                );
            }
        }
        let Some(cgroup) = &self.cgroup else {
            return;
        };
        header(
            out,
            "stackscope_cgroup_memory_usage_bytes",
            "gauge",
            "Memory the job's memory cgroup uses, in bytes.",
        );
        let _ = writeln!(
            out,
            "stackscope_cgroup_memory_usage_bytes {}",
            cgroup.usage_bytes
        );
        if let Some(limit) = cgroup.limit_bytes {
            header(
                out,
                "stackscope_cgroup_memory_limit_bytes",
                "gauge",
                "The memory cgroup's limit, in bytes (absent when unlimited).",
            );
            let _ = writeln!(out, "stackscope_cgroup_memory_limit_bytes {limit}");
        }
        if let Some(kills) = cgroup.oom_kills {
            header(
                out,
                "stackscope_cgroup_oom_kills_total",
                "counter",
                "OOM kills the memory cgroup has counted since it was created.",
            );
            let _ = writeln!(out, "stackscope_cgroup_oom_kills_total {kills}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::MetricsState;
    use stackscope_event::{CgroupSample, Event, ProcessEvent, ProcessEventKind, Timestamp};

    fn secs(s: u64) -> Timestamp {
        Timestamp(s * 1_000_000_000)
    }

    fn rss(time: Timestamp, pid: u32, bytes: u64) -> Event {
        stackscope_testkit::events::rss_event(time, pid, bytes)
    }

    fn gpu(time: Timestamp, device: u32, pids: Option<Vec<u32>>, memory: &[(u32, u64)]) -> Event {
        stackscope_testkit::events::gpu_memory_event(time, device, pids, memory)
    }

    fn state() -> MetricsState {
        let mut m = MetricsState::new(10.0, 30.0);
        m.host = "node-a".into();
        m
    }

    fn line(pid: u32) -> String {
        format!("{{pid=\"{pid}\",rank=\"\",host=\"node-a\"}}")
    }

    #[test]
    fn metrics_show_each_processs_memory_and_forget_it_when_it_exits() {
        let mut m = state();
        m.observe(&rss(secs(1), 11, 1 << 30));
        m.observe(&rss(secs(1), 12, 300 << 20));
        // A later reading replaces it; an older one, late, does not.
        m.observe(&rss(secs(2), 11, 2 << 30));
        m.observe(&rss(secs(1), 11, 5));
        m.observe(&gpu(
            secs(2),
            0,
            Some(vec![11, 12]),
            &[(11, 4 << 30), (12, 1 << 20)],
        ));
        m.observe(&gpu(secs(2), 1, Some(vec![11]), &[(11, 1 << 30)]));
        // The driver's ring: nothing said of processes.
        m.observe(&gpu(secs(2), 0, None, &[]));
        let page = m.render(secs(3));
        assert!(
            page.contains("# TYPE stackscope_process_rss_bytes gauge\n"),
            "{page}"
        );
        assert!(page.contains(&format!(
            "stackscope_process_rss_bytes{} {}\n",
            line(11),
            2u64 << 30
        )));
        assert!(page.contains(&format!(
            "stackscope_process_rss_bytes{} {}\n",
            line(12),
            300u64 << 20
        )));
        // Summed over the GPUs that list it.
        assert!(page.contains(&format!(
            "stackscope_process_gpu_memory_bytes{} {}\n",
            line(11),
            5u64 << 30
        )));
        // Off device 0: pid 12 holds no GPU memory any more.
        m.observe(&gpu(secs(3), 0, Some(vec![11]), &[(11, 4 << 30)]));
        let page = m.render(secs(3));
        assert!(!page.contains(&format!("stackscope_process_gpu_memory_bytes{}", line(12))));
        // Pid 11 exits; a reading taken before, come late, does not bring it back.
        m.observe(&Event::Process(ProcessEvent {
            time: secs(4),
            pid: 11,
            command_line: String::new(),
            kind: ProcessEventKind::Exited,
            rank: Default::default(),
            how: None,
        }));
        m.observe(&rss(secs(3), 11, 7));
        m.observe(&gpu(secs(3), 1, Some(vec![11]), &[(11, 1 << 30)]));
        let page = m.render(secs(5));
        assert!(!page.contains("pid=\"11\""), "{page}");
        assert!(page.contains(&format!("stackscope_process_rss_bytes{}", line(12))));
        // No cgroup read: no cgroup gauges.
        assert!(!page.contains("stackscope_cgroup"), "{page}");
    }

    #[test]
    fn metrics_show_the_memory_cgroup() {
        let mut m = state();
        let cgroup = |time, usage, limit, oom_kills| {
            Event::Cgroup(CgroupSample {
                time,
                usage_bytes: usage,
                limit_bytes: limit,
                oom_kills,
            })
        };
        m.observe(&cgroup(secs(2), 3 << 30, Some(4 << 30), Some(1)));
        m.observe(&cgroup(secs(1), 1, None, None));
        let page = m.render(secs(3));
        for expected in [
            "# TYPE stackscope_cgroup_memory_usage_bytes gauge\n".to_owned(),
            format!("stackscope_cgroup_memory_usage_bytes {}\n", 3u64 << 30),
            format!("stackscope_cgroup_memory_limit_bytes {}\n", 4u64 << 30),
            "# TYPE stackscope_cgroup_oom_kills_total counter\n".to_owned(),
            "stackscope_cgroup_oom_kills_total 1\n".to_owned(),
        ] {
            assert!(page.contains(&expected), "{expected} in {page}");
        }
        // Unlimited, kills unreadable: those two are left out.
        m.observe(&cgroup(secs(3), 5, None, None));
        let page = m.render(secs(3));
        assert!(page.contains("stackscope_cgroup_memory_usage_bytes 5\n"));
        assert!(!page.contains("stackscope_cgroup_memory_limit_bytes"));
        assert!(!page.contains("stackscope_cgroup_oom_kills_total"));
    }
}
