//! Dumps from many nodes merged into one view: identical stacks once, with the ranks that share
//! them (`7 ranks: 0-5, 7`), and the ranks away from where their peers are named first with
//! their host (`rank 6 on node-b (pid 5124)`).
//!
//! A job of 1000 ranks must fit on one screen: members are shown as rank ranges, and every list
//! of names is cut to a few with a count of the rest.

use std::collections::{BTreeSet, HashMap};

use super::grouping::{
    clear_majority, innermost, main_thread, place_key, stack_key, PlaceKey, StackKey,
};
use super::rank_sets::{rank_ranges, MissingRanks};
use serde::Serialize;
use stackscope_event::{FrameDump, ProcessDump, ThreadDump, ThreadState};

/// The merged view of every process of every dump.
#[derive(Debug, Clone, Serialize)]
pub struct MergedDump {
    /// Distinct hosts, sorted.
    pub hosts: Vec<String>,
    pub processes: usize,
    /// Distinct ranks seen.
    pub ranks: usize,
    /// Ranks whose main thread is away from where a clear majority of ranks is.
    pub stragglers: Vec<RankStraggler>,
    /// Threads grouped by identical stacks: groups holding a straggler first, then by size.
    pub groups: Vec<MergedGroup>,
    /// Ranks the processes' `WORLD_SIZE` says there are that no node's dump has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_ranks: Option<MissingRanks>,
}

/// One process, named for a reader across nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessPlace {
    pub host: String,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

impl ProcessPlace {
    /// `rank 6 on node-b (pid 5124)`, or `process 5124 on node-b`.
    pub fn describe(&self) -> String {
        match self.rank {
            Some(rank) => format!("{} (pid {})", rank_on(rank, &self.host), self.pid),
            None => self.label(),
        }
    }

    /// `rank 6 on node-b`, or `process 5124 on node-b`: [`Self::describe`] without the pid of
    /// a rank, for lane prefixes and the fixed-width column of `ranks.txt`.
    pub fn label(&self) -> String {
        match self.rank {
            Some(rank) => rank_on(rank, &self.host),
            None => format!("process {} on {}", self.pid, self.host),
        }
    }
}

/// `rank 6 on node-b`: a rank named with its host, wherever a rank is named.
pub fn rank_on(rank: u32, host: &str) -> String {
    format!("rank {rank} on {host}")
}

#[derive(Debug, Clone, Serialize)]
pub struct RankStraggler {
    #[serde(flatten)]
    pub place: ProcessPlace,
    /// Its innermost frame.
    pub location: String,
    /// Where the majority is.
    pub peers_location: String,
    /// Ranks compared (the straggler included), and how many are together.
    pub peers: usize,
    pub together: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct MergedGroup {
    /// Threads in the group.
    pub threads: usize,
    /// The ranks of the processes the threads belong to, sorted.
    pub ranks: Vec<u32>,
    /// The same, as `0-5, 7`.
    pub rank_ranges: String,
    /// Member processes that have no rank (a launcher, a helper).
    pub unranked: Vec<ProcessPlace>,
    /// The process, when all the threads are of one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessPlace>,
    /// Distinct hosts of the members.
    pub hosts: Vec<String>,
    /// Distinct thread names, sorted.
    pub thread_names: Vec<String>,
    /// Whether any member's process is a straggler.
    pub straggler: bool,
    pub active: bool,
    pub state: ThreadState,
    /// Innermost first; locals left out (they differ between members).
    pub frames: Vec<FrameDump>,
}

/// A process of one of the dumps, with the host it was dumped on.
#[derive(Debug, Clone, Copy)]
pub struct HostedProcess<'a> {
    pub host: &'a str,
    pub process: &'a ProcessDump,
}

/// Merges the processes of many dumps.
pub fn merge_dumps(processes: &[HostedProcess<'_>]) -> MergedDump {
    let stragglers = rank_stragglers(processes);
    let straggler_keys: BTreeSet<(String, u32)> = stragglers
        .iter()
        .map(|s| (s.place.host.clone(), s.place.pid))
        .collect();
    let mut index: HashMap<StackKey, usize> = HashMap::new();
    let mut building: Vec<Building<'_>> = Vec::new();
    for hp in processes {
        let is_straggler = straggler_keys.contains(&(hp.host.to_owned(), hp.process.pid));
        for thread in &hp.process.threads {
            let at = *index.entry(stack_key(thread)).or_insert_with(|| {
                building.push(Building::new(thread, building.len()));
                building.len() - 1
            });
            building[at].add(hp, thread, is_straggler);
        }
    }
    building.sort_by(|a, b| {
        b.straggler
            .cmp(&a.straggler)
            .then(b.ranks.len().cmp(&a.ranks.len()))
            .then(b.threads.cmp(&a.threads))
            .then(a.first_seen.cmp(&b.first_seen))
    });
    let groups = building.into_iter().map(Building::into_group).collect();
    let hosts: BTreeSet<String> = processes.iter().map(|p| p.host.to_owned()).collect();
    let ranks: BTreeSet<u32> = processes
        .iter()
        .filter_map(|p| p.process.rank.rank)
        .collect();
    MergedDump {
        hosts: hosts.into_iter().collect(),
        processes: processes.len(),
        ranks: ranks.len(),
        stragglers,
        groups,
        missing_ranks: MissingRanks::of(processes.iter().map(|hp| &hp.process.rank), 1),
    }
}

/// A group of threads with one stack, being gathered.
struct Building<'a> {
    representative: &'a ThreadDump,
    threads: usize,
    ranks: BTreeSet<u32>,
    unranked: Vec<ProcessPlace>,
    hosts: BTreeSet<String>,
    names: BTreeSet<String>,
    processes: BTreeSet<(String, u32)>,
    first: Option<ProcessPlace>,
    straggler: bool,
    first_seen: usize,
}

impl<'a> Building<'a> {
    fn new(representative: &'a ThreadDump, first_seen: usize) -> Self {
        Building {
            representative,
            threads: 0,
            ranks: BTreeSet::new(),
            unranked: Vec::new(),
            hosts: BTreeSet::new(),
            names: BTreeSet::new(),
            processes: BTreeSet::new(),
            first: None,
            straggler: false,
            first_seen,
        }
    }

    /// Counts `thread` of the process `hp` in the group.
    fn add(&mut self, hp: &HostedProcess<'_>, thread: &ThreadDump, is_straggler: bool) {
        let p = hp.process;
        self.threads += 1;
        match p.rank.rank {
            Some(rank) => {
                self.ranks.insert(rank);
            }
            None => {
                let place = ProcessPlace {
                    host: hp.host.to_owned(),
                    pid: p.pid,
                    rank: None,
                };
                if !self.unranked.contains(&place) {
                    self.unranked.push(place);
                }
            }
        }
        self.hosts.insert(hp.host.to_owned());
        self.processes.insert((hp.host.to_owned(), p.pid));
        self.first.get_or_insert_with(|| ProcessPlace {
            host: hp.host.to_owned(),
            pid: p.pid,
            rank: p.rank.rank,
        });
        self.names.insert(thread.display_name());
        // Only the straggler's own stack marks a group: its helper threads wait like
        // everyone else's.
        if is_straggler && main_thread(p).is_some_and(|m| std::ptr::eq(m, thread)) {
            self.straggler = true;
        }
    }

    fn into_group(self) -> MergedGroup {
        let ranks: Vec<u32> = self.ranks.into_iter().collect();
        MergedGroup {
            threads: self.threads,
            rank_ranges: rank_ranges(&ranks),
            ranks,
            unranked: self.unranked,
            process: self.first.filter(|_| self.processes.len() == 1),
            hosts: self.hosts.into_iter().collect(),
            thread_names: self.names.into_iter().collect(),
            straggler: self.straggler,
            active: self.representative.active,
            state: self.representative.state,
            frames: self
                .representative
                .frames
                .iter()
                .map(|f| FrameDump {
                    locals: None,
                    ..f.clone()
                })
                .collect(),
        }
    }
}

/// Ranks compared by their main thread: those not where a clear majority is. Without ranks
/// (dumps of jobs no launcher started), the processes that have a parent in the dump are the
/// peers, as in one node's dump.
fn rank_stragglers(processes: &[HostedProcess<'_>]) -> Vec<RankStraggler> {
    let leaders = rank_leaders(processes);
    let mut peers: Vec<(&HostedProcess<'_>, &ThreadDump)> = processes
        .iter()
        .zip(&leaders)
        .filter(|(_, leads)| **leads)
        .filter_map(|(p, _)| main_thread(p.process).map(|t| (p, t)))
        .collect();
    if peers.is_empty() {
        peers = processes
            .iter()
            .filter(|p| p.process.parent_pid.is_some())
            .filter_map(|p| main_thread(p.process).map(|t| (p, t)))
            .collect();
    }
    let keys: Vec<PlaceKey> = peers.iter().map(|(_, t)| place_key(t)).collect();
    // A clear majority in one place and a few elsewhere; a job split in halves has no
    // straggler to name, its groups say it all.
    let Some((majority, together)) = clear_majority(&keys) else {
        return Vec::new();
    };
    let peers_location = peers
        .iter()
        .zip(&keys)
        .find(|(_, k)| **k == majority)
        .map(|((_, t), _)| innermost(t))
        .unwrap_or_default();
    let mut out: Vec<RankStraggler> = peers
        .iter()
        .zip(&keys)
        .filter(|(_, k)| **k != majority)
        .map(|((p, t), _)| RankStraggler {
            place: ProcessPlace {
                host: p.host.to_owned(),
                pid: p.process.pid,
                rank: p.process.rank.rank,
            },
            location: innermost(t),
            peers_location: peers_location.clone(),
            peers: peers.len(),
            together,
        })
        .collect();
    out.sort_by(|a, b| {
        (a.place.rank, &a.place.host, a.place.pid).cmp(&(b.place.rank, &b.place.host, b.place.pid))
    });
    out
}

/// Which processes stand for a rank when ranks are compared. A rank's own children (DataLoader
/// workers) inherit its environment, so its rank too: only the topmost process of a rank
/// counts. A launcher that Slurm or MPI gave a task rank (`SLURM_PROCID`) while its children
/// carry ranks of their own (torchrun's `RANK`) is not a rank either.
fn rank_leaders(processes: &[HostedProcess<'_>]) -> Vec<bool> {
    let by_pid: HashMap<(&str, u32), &ProcessDump> = processes
        .iter()
        .map(|p| ((p.host, p.process.pid), p.process))
        .collect();
    let mut child_ranks: HashMap<(&str, u32), Vec<Option<u32>>> = HashMap::new();
    for p in processes {
        if let Some(parent) = p.process.parent_pid {
            child_ranks
                .entry((p.host, parent))
                .or_default()
                .push(p.process.rank.rank);
        }
    }
    processes
        .iter()
        .map(|p| {
            let Some(rank) = p.process.rank.rank else {
                return false;
            };
            let parent = p
                .process
                .parent_pid
                .and_then(|pp| by_pid.get(&(p.host, pp)));
            let inherited = parent.is_some_and(|parent| parent.rank.rank == Some(rank));
            let launcher = child_ranks
                .get(&(p.host, p.process.pid))
                .is_some_and(|ranks| ranks.iter().any(|r| r.is_some_and(|r| r != rank)));
            !inherited && !launcher
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::RankInfo;
    use stackscope_testkit::dumps;

    fn process(pid: u32, rank: Option<u32>, function: &str, line: u32) -> ProcessDump {
        let main = ThreadDump {
            python_thread_id: 1,
            ..dumps::thread(
                "MainThread",
                u64::from(pid),
                ThreadState::WaitingOnLock,
                vec![dumps::frame(function, "train.py", line)],
            )
        };
        ProcessDump {
            parent_pid: Some(1),
            rank: RankInfo {
                rank,
                ..RankInfo::default()
            },
            ..dumps::process(pid, "python train.py", vec![main])
        }
    }

    #[test]
    fn a_thousand_ranks_with_one_straggler_are_two_groups() {
        let dumps: Vec<(String, ProcessDump)> = (0..1000u32)
            .map(|r| {
                let host = format!("node-{}", r / 8);
                let p = if r == 517 {
                    process(5000 + r, Some(r), "compute", 30)
                } else {
                    process(5000 + r, Some(r), "all_reduce", 40)
                };
                (host, p)
            })
            .collect();
        let hosted: Vec<HostedProcess<'_>> = dumps
            .iter()
            .map(|(h, p)| HostedProcess {
                host: h,
                process: p,
            })
            .collect();
        let merged = merge_dumps(&hosted);
        assert_eq!(merged.ranks, 1000);
        assert_eq!(merged.hosts.len(), 125);
        assert_eq!(merged.stragglers.len(), 1);
        let s = &merged.stragglers[0];
        assert_eq!(s.place.describe(), "rank 517 on node-64 (pid 5517)");
        assert_eq!((s.together, s.peers), (999, 1000));
        assert_eq!(merged.groups.len(), 2);
        assert!(merged.groups[0].straggler);
        assert_eq!(merged.groups[0].rank_ranges, "517");
        assert_eq!(merged.groups[1].rank_ranges, "0-516, 518-999");
    }

    #[test]
    fn workers_and_a_slurm_launcher_are_not_compared_as_ranks() {
        // Under srun, torchrun has SLURM_PROCID=1; each rank has two DataLoader workers that
        // inherited its RANK.
        let mut dumps = vec![process(100, Some(1), "wait_children", 9)];
        dumps[0].parent_pid = None;
        let mut pid = 200;
        for rank in 4..8u32 {
            let function = if rank == 6 { "compute" } else { "all_reduce" };
            let mut leader = process(pid, Some(rank), function, 40);
            leader.parent_pid = Some(100);
            dumps.push(leader);
            for worker in 1..=2 {
                let mut w = process(pid + worker, Some(rank), "worker_loop", 5);
                w.parent_pid = Some(pid);
                dumps.push(w);
            }
            pid += 50;
        }
        let hosted: Vec<HostedProcess<'_>> = dumps
            .iter()
            .map(|p| HostedProcess {
                host: "node-b",
                process: p,
            })
            .collect();
        let merged = merge_dumps(&hosted);
        assert_eq!(merged.stragglers.len(), 1, "{:?}", merged.stragglers);
        assert_eq!(merged.stragglers[0].place.rank, Some(6));
        assert_eq!(merged.stragglers[0].peers, 4);
    }

    #[test]
    fn no_straggler_when_the_job_is_split() {
        let a: Vec<ProcessDump> = (0..4u32)
            .map(|r| process(r + 10, Some(r), if r < 2 { "a" } else { "b" }, 1))
            .collect();
        let hosted: Vec<HostedProcess<'_>> = a
            .iter()
            .map(|p| HostedProcess {
                host: "n",
                process: p,
            })
            .collect();
        let merged = merge_dumps(&hosted);
        assert!(merged.stragglers.is_empty());
        assert_eq!(merged.groups.len(), 2);
    }
}
