//! Each process's memory now: its latest resident memory (`Event::Memory`) and its GPU memory
//! at each device's latest reading that says it (`GpuSample::process_memory`), for `top`'s
//! process lines and the `--metrics-addr` gauges.
//!
//! A process that exits is forgotten: a live view shows the processes there are. Readings come
//! in batches, so one taken before the exit may come after it; it is not let back in. A process
//! whose exit nobody tells (the sampler does not follow it: not Python, or no
//! `--subprocesses`) is forgotten once the memory poller has stopped reading it, by the rule the
//! recording's memory tables end such a process with.

use std::collections::{BTreeMap, BTreeSet};

use crate::memory::{GONE_AFTER_NANOS, GONE_AFTER_ROUNDS};

use stackscope_event::{GpuSample, MemorySample, ProcessEventKind, Timestamp};

/// Exits remembered to keep late readings out; past this the oldest are forgotten.
pub const MAX_EXITS: usize = 4096;

/// One process's memory, as `top` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessMemoryLine {
    pub pid: u32,
    /// Resident memory at the latest reading, in bytes; `None` before the first.
    pub rss: Option<u64>,
    /// GPU memory summed over the devices that list the process, in bytes; `None` where no
    /// device lists it with its memory.
    pub gpu_memory: Option<u64>,
}

/// The latest memory readings, by process.
#[derive(Debug, Clone, Default)]
pub struct LatestMemory {
    /// Each process's latest resident memory, when it was read, and in which of the poller's
    /// rounds.
    rss: BTreeMap<u32, (Timestamp, u64, u64)>,
    /// The poller's rounds so far (a round ends where a process is read again), and the
    /// processes read in the one in progress.
    round: u64,
    in_round: BTreeSet<u32>,
    /// Each process's memory on each GPU.
    gpu: BTreeMap<u32, BTreeMap<u32, u64>>,
    /// Processes that exited, and when: their readings from before are late, not news.
    exited: BTreeMap<u32, Timestamp>,
}

impl LatestMemory {
    /// Takes what an event says of processes' memory: a reading, a GPU reading with its
    /// processes' memory, an exit; other events change nothing.
    pub fn observe(&mut self, event: &stackscope_event::Event) {
        use stackscope_event::Event;
        match event {
            Event::Memory(m) => self.add_memory(m),
            Event::Gpu(g) => self.add_gpu(g),
            Event::Process(p) if p.kind == ProcessEventKind::Exited => self.forget(p.pid, p.time),
            _ => {}
        }
    }

    pub fn add_memory(&mut self, m: &MemorySample) {
        if self.is_late(m.pid, m.time) {
            return;
        }
        if !self.in_round.insert(m.pid) {
            self.round += 1;
            self.in_round.clear();
            self.in_round.insert(m.pid);
            self.forget_unread(m.time);
        }
        let round = self.round;
        let latest = self
            .rss
            .entry(m.pid)
            .or_insert((m.time, m.rss_bytes, round));
        if latest.0 <= m.time {
            *latest = (m.time, m.rss_bytes, round);
        }
    }

    /// Forgets the processes the poller left out of its last [`GONE_AFTER_ROUNDS`] rounds, for
    /// [`GONE_AFTER_NANOS`] at least before `now`: gone, whether or not an exit was told.
    fn forget_unread(&mut self, now: Timestamp) {
        let round = self.round;
        self.rss.retain(|_, &mut (time, _, read_in)| {
            round < read_in + GONE_AFTER_ROUNDS
                || now.as_nanos() < time.as_nanos().saturating_add(GONE_AFTER_NANOS)
        });
    }

    /// A GPU reading that says its processes' memory (it lists some, or the device has no
    /// compute process at all) replaces what the device said before: a process it no longer
    /// lists holds nothing there. An empty list beside listed pids is a driver that does not
    /// say, and changes nothing.
    pub fn add_gpu(&mut self, g: &GpuSample) {
        let nobody = g.compute_pids.as_ref().is_some_and(Vec::is_empty);
        if g.process_memory.is_empty() && !nobody {
            return;
        }
        let listed = |pid: u32| {
            g.process_memory.iter().any(|p| p.pid == pid)
                || g.compute_pids.as_ref().is_some_and(|p| p.contains(&pid))
        };
        self.gpu.retain(|&pid, devices| {
            if !listed(pid) {
                devices.remove(&g.device);
            }
            !devices.is_empty()
        });
        for p in &g.process_memory {
            if !self.is_late(p.pid, g.time) {
                self.gpu.entry(p.pid).or_default().insert(g.device, p.bytes);
            }
        }
    }

    /// Process `pid` exited at `time`: its lines go.
    pub fn forget(&mut self, pid: u32, time: Timestamp) {
        self.rss.remove(&pid);
        self.gpu.remove(&pid);
        self.in_round.remove(&pid);
        if self.exited.len() >= MAX_EXITS && !self.exited.contains_key(&pid) {
            let oldest = self.exited.iter().min_by_key(|(_, t)| **t).map(|(&p, _)| p);
            if let Some(oldest) = oldest {
                self.exited.remove(&oldest);
            }
        }
        self.exited.insert(pid, time);
    }

    /// Whether news of `pid` taken at `time` comes after its exit: a reading or a stack
    /// sample taken before the exit and handed over after it, not to let the process back in.
    pub fn is_late(&self, pid: u32, time: Timestamp) -> bool {
        self.exited.get(&pid).is_some_and(|&exit| time <= exit)
    }

    /// Every process with a reading, by pid.
    pub fn lines(&self) -> Vec<ProcessMemoryLine> {
        let mut pids: Vec<u32> = self.rss.keys().chain(self.gpu.keys()).copied().collect();
        pids.sort_unstable();
        pids.dedup();
        pids.into_iter()
            .map(|pid| ProcessMemoryLine {
                pid,
                rss: self.rss.get(&pid).map(|&(_, rss, _)| rss),
                gpu_memory: self.gpu.get(&pid).map(|devices| devices.values().sum()),
            })
            .collect()
    }

    /// Exits remembered (bounded by [`MAX_EXITS`]).
    pub fn exits_remembered(&self) -> usize {
        self.exited.len()
    }

    /// Processes with a line now.
    pub fn processes(&self) -> usize {
        self.rss
            .keys()
            .chain(self.gpu.keys())
            .collect::<BTreeSet<_>>()
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::{Event, ProcessEvent};

    fn secs(s: u64) -> Timestamp {
        Timestamp(s * 1_000_000_000)
    }

    fn rss(time: Timestamp, pid: u32, bytes: u64) -> Event {
        stackscope_testkit::events::rss_event(time, pid, bytes)
    }

    fn gpu(time: Timestamp, device: u32, pids: Option<Vec<u32>>, memory: &[(u32, u64)]) -> Event {
        stackscope_testkit::events::gpu_memory_event(time, device, pids, memory)
    }

    fn line(pid: u32, rss: Option<u64>, gpu_memory: Option<u64>) -> ProcessMemoryLine {
        ProcessMemoryLine {
            pid,
            rss,
            gpu_memory,
        }
    }

    #[test]
    fn the_latest_readings_of_each_process() {
        let mut m = LatestMemory::default();
        m.observe(&rss(secs(1), 12, 300));
        m.observe(&rss(secs(1), 11, 1000));
        m.observe(&rss(secs(2), 11, 2000));
        // Late, older than what is known: not news.
        m.observe(&rss(secs(1), 11, 5));
        m.observe(&gpu(secs(2), 0, Some(vec![11, 12]), &[(11, 40), (12, 1)]));
        m.observe(&gpu(secs(2), 1, Some(vec![11]), &[(11, 10)]));
        // A reading of the driver's ring says nothing of processes; one whose memory is not
        // said (pids listed, no memory) neither.
        m.observe(&gpu(secs(2), 0, None, &[]));
        m.observe(&gpu(secs(2), 0, Some(vec![11, 12]), &[]));
        // A process on a GPU only.
        m.observe(&gpu(secs(2), 2, Some(vec![13]), &[(13, 7)]));
        assert_eq!(
            m.lines(),
            [
                line(11, Some(2000), Some(50)),
                line(12, Some(300), Some(1)),
                line(13, None, Some(7)),
            ]
        );
        // Pid 12 left device 0; nothing on device 2 any more.
        m.observe(&gpu(secs(3), 0, Some(vec![11]), &[(11, 40)]));
        m.observe(&gpu(secs(3), 2, Some(vec![]), &[]));
        assert_eq!(
            m.lines(),
            [line(11, Some(2000), Some(50)), line(12, Some(300), None)]
        );
    }

    #[test]
    fn an_exited_process_goes_and_its_late_readings_stay_out() {
        let mut m = LatestMemory::default();
        m.observe(&rss(secs(1), 11, 1000));
        m.observe(&gpu(secs(1), 0, Some(vec![11]), &[(11, 40)]));
        m.observe(&Event::Process(ProcessEvent {
            time: secs(2),
            pid: 11,
            command_line: String::new(),
            kind: ProcessEventKind::Exited,
            rank: Default::default(),
            how: None,
        }));
        m.observe(&rss(secs(2), 11, 1000));
        m.observe(&gpu(secs(1), 0, Some(vec![11]), &[(11, 40)]));
        assert_eq!(m.lines(), []);
        // The pid again, later: another process.
        m.observe(&rss(secs(9), 11, 5));
        assert_eq!(m.lines(), [line(11, Some(5), None)]);
        for pid in 0..(MAX_EXITS as u32 + 10) {
            m.forget(pid, secs(10 + u64::from(pid)));
        }
        assert_eq!(m.exits_remembered(), MAX_EXITS);
        // The oldest exits went first.
        assert!(!m.is_late(0, secs(10)));
        assert!(m.is_late(MAX_EXITS as u32 + 9, secs(10)));
    }

    /// Processes whose exit nobody tells (new ones each second, each read for a second) go
    /// once the poller has stopped reading them; a gap in the readings ends nobody.
    #[test]
    fn a_process_no_longer_read_goes_without_an_exit() {
        let mut m = LatestMemory::default();
        let tenth = |t: u64| Timestamp(t * 100_000_000);
        for t in 0..6_000u64 {
            m.observe(&rss(tenth(t), 1, 1000));
            let worker = 1000 + (t / 10) as u32;
            m.observe(&rss(tenth(t), worker, 50));
            // At most the workers of the last 10 s (and their next), and the parent.
            assert!(m.processes() <= 13, "{} at {t}", m.processes());
        }
        // Readings stop for a minute, then come again: the parent is still there.
        m.observe(&rss(tenth(6_600), 1, 1000));
        m.observe(&rss(tenth(6_600), 7, 1000));
        m.observe(&rss(tenth(6_601), 1, 1000));
        assert!(m.lines().iter().any(|l| l.pid == 1));
        assert!(m.lines().iter().any(|l| l.pid == 7));
    }
}
