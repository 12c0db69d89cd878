//! Grouping of a dump's threads: threads whose stacks are the same are shown once, and a thread
//! or process that is somewhere else while its peers all wait in one place is named first.

use std::collections::HashMap;

use serde::Serialize;
use stackscope_event::{FrameDump, ProcessDump, ThreadDump};

use super::helpers::helper_kind;
use super::view::{is_main_thread, natural_key, MAIN_THREAD};

/// One thread, named for a reader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadRef {
    pub pid: u32,
    /// The process's rank, when a launcher started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    pub name: String,
    pub os_thread_id: Option<u64>,
}

/// Threads that share one stack.
#[derive(Debug, Clone)]
pub struct ThreadGroup<'a> {
    /// In the order the dump lists them.
    pub members: Vec<ThreadRef>,
    /// The first member: its frames, state and flags stand for all.
    pub representative: &'a ThreadDump,
}

impl ThreadGroup<'_> {
    /// The distinct processes of the members, in order.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = Vec::new();
        for m in &self.members {
            if !pids.contains(&m.pid) {
                pids.push(m.pid);
            }
        }
        pids
    }
}

/// What makes two threads the same: their frames (not their locals). Not whether the OS saw
/// them running: two threads blocked at the same line are the same whatever the scheduler was
/// doing at the instant each was read.
pub(crate) type StackKey = Vec<(String, String, u32, bool)>;

pub(crate) fn stack_key(thread: &ThreadDump) -> StackKey {
    thread
        .frames
        .iter()
        .map(|f| (f.function.clone(), f.file.clone(), f.line, f.native))
        .collect()
}

/// Groups the threads of all `processes` by identical stacks, in order of first appearance.
pub fn group_threads(processes: &[ProcessDump]) -> Vec<ThreadGroup<'_>> {
    let mut groups: Vec<ThreadGroup<'_>> = Vec::new();
    let mut index: HashMap<StackKey, usize> = HashMap::new();
    for process in processes {
        for thread in &process.threads {
            let member = ThreadRef {
                pid: process.pid,
                rank: process.rank.rank,
                name: thread.display_name(),
                os_thread_id: thread.os_thread_id,
            };
            match index.get(&stack_key(thread)) {
                Some(&at) => groups[at].members.push(member),
                None => {
                    index.insert(stack_key(thread), groups.len());
                    groups.push(ThreadGroup {
                        members: vec![member],
                        representative: thread,
                    });
                }
            }
        }
    }
    for group in &mut groups {
        group.members.sort_by_key(|a| (a.pid, natural_key(&a.name)));
    }
    groups
}

/// A thread or process away from where its peers are.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Straggler {
    /// The process, and the thread when the peers are threads of one family.
    pub pid: u32,
    /// The process's rank, when a launcher started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    pub thread: Option<String>,
    pub command_line: String,
    /// Its innermost frame.
    pub location: String,
    /// Where the others are.
    pub peers_location: String,
    /// How many peers (the straggler included) were compared, and how many are together.
    pub peers: usize,
    pub together: usize,
}

/// Finds stragglers among peers: sibling processes (ranks, workers: same parent) compared by
/// their main thread, and families of threads in one process (`pool-0` … `pool-7`). Peers are
/// compared when there are at least three; the odd ones out are those not where a clear
/// majority is.
pub fn find_stragglers(processes: &[ProcessDump]) -> Vec<Straggler> {
    let mut out = Vec::new();
    // Siblings: the launcher is nobody's peer, its children are each other's; a helper (the
    // resource tracker beside spawned workers) is no one's peer, and a process without
    // threads (a launcher that is not Python) has no stack to compare.
    let mut siblings: HashMap<Option<u32>, Vec<&ProcessDump>> = HashMap::new();
    for p in processes
        .iter()
        .filter(|p| p.parent_pid.is_some() && !p.threads.is_empty() && helper_kind(p).is_none())
    {
        siblings.entry(p.parent_pid).or_default().push(p);
    }
    let mut families: Vec<Vec<&ProcessDump>> = siblings.into_values().collect();
    families.sort_by_key(|f| f.first().map(|p| p.pid));
    for family in families {
        let peers: Vec<(&ProcessDump, &ThreadDump)> = family
            .iter()
            .filter_map(|p| main_thread(p).map(|t| (*p, t)))
            .collect();
        out.extend(odd_ones_out(&peers, false));
    }
    for process in processes {
        let mut by_family: HashMap<String, Vec<&ThreadDump>> = HashMap::new();
        for t in &process.threads {
            if let Some(name) = &t.name {
                by_family.entry(family_name(name)).or_default().push(t);
            }
        }
        let mut families: Vec<(String, Vec<&ThreadDump>)> = by_family.into_iter().collect();
        families.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, threads) in families {
            let peers: Vec<(&ProcessDump, &ThreadDump)> =
                threads.into_iter().map(|t| (process, t)).collect();
            out.extend(odd_ones_out(&peers, true));
        }
    }
    out
}

fn odd_ones_out(peers: &[(&ProcessDump, &ThreadDump)], name_threads: bool) -> Vec<Straggler> {
    let keys: Vec<PlaceKey> = peers.iter().map(|(_, t)| place_key(t)).collect();
    let Some((majority, together)) = clear_majority(&keys) else {
        return Vec::new();
    };
    let Some(peers_location) = peers
        .iter()
        .zip(&keys)
        .find(|(_, k)| **k == majority)
        .map(|((_, t), _)| innermost(t))
    else {
        return Vec::new();
    };
    peers
        .iter()
        .zip(&keys)
        .filter(|(_, k)| **k != majority)
        .map(|((p, t), _)| Straggler {
            pid: p.pid,
            rank: p.rank.rank,
            thread: name_threads.then(|| t.display_name()),
            command_line: p.command_line.clone(),
            location: innermost(t),
            peers_location: peers_location.clone(),
            peers: peers.len(),
            together,
        })
        .collect()
}

/// Where a thread is, as peers are compared: its Python frames, innermost first. Native
/// frames are left out: every waiting thread shares the innermost one (a futex wait in libc),
/// and their addresses differ from process to process.
pub(crate) type PlaceKey = Vec<(String, String, u32)>;

pub(crate) fn place_key(thread: &ThreadDump) -> PlaceKey {
    thread
        .frames
        .iter()
        .filter(|f| !f.native)
        .map(|f| (f.function.clone(), f.file.clone(), f.line))
        .collect()
}

/// The place most peers share and how many share it, when "most wait in one place and one (or
/// a few) is elsewhere": at least three peers, a clear majority, and few apart. `None` when
/// there is no straggler to name (all together, or a job split in halves).
pub(crate) fn clear_majority(keys: &[PlaceKey]) -> Option<(PlaceKey, usize)> {
    if keys.len() < 3 {
        return None;
    }
    let mut counts: HashMap<&PlaceKey, usize> = HashMap::new();
    for key in keys {
        *counts.entry(key).or_default() += 1;
    }
    let (majority, together) = counts.into_iter().max_by_key(|(_, n)| *n)?;
    let apart = keys.len() - together;
    if apart == 0 || together * 2 <= keys.len() || apart > (keys.len() / 4).max(1) {
        return None;
    }
    Some((majority.clone(), together))
}

/// The thread that stands for its process: its main thread, else one Python names
/// `MainThread`, else the first one read.
pub(crate) fn main_thread(process: &ProcessDump) -> Option<&ThreadDump> {
    process
        .threads
        .iter()
        .find(|t| is_main_thread(process, t))
        .or_else(|| {
            process
                .threads
                .iter()
                .find(|t| t.name.as_deref() == Some(MAIN_THREAD))
        })
        .or_else(|| process.threads.first())
}

/// `pool-3` and `pool-12` are one family, `loader` and `worker-1` are not.
fn family_name(name: &str) -> String {
    name.trim_end_matches(|c: char| c.is_ascii_digit())
        .to_owned()
}

/// The label of a thread's innermost Python frame: where it is, for a reader.
pub(crate) fn innermost(thread: &ThreadDump) -> String {
    thread
        .frames
        .iter()
        .find(|f| !f.native)
        .map(FrameDump::label)
        .unwrap_or_else(|| "no Python frames".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::ThreadState;
    use stackscope_testkit::dumps;

    fn thread(name: &str, tid: u64, frames: &[(&str, u32)]) -> ThreadDump {
        let frames = frames
            .iter()
            .map(|(f, line)| dumps::frame(f, "job.py", *line))
            .collect();
        dumps::thread(name, tid, ThreadState::WaitingOnLock, frames)
    }

    fn process(pid: u32, parent: Option<u32>, threads: Vec<ThreadDump>) -> ProcessDump {
        ProcessDump {
            parent_pid: parent,
            ..dumps::process(pid, &format!("python job.py {pid}"), threads)
        }
    }

    #[test]
    fn eight_identical_threads_are_one_group() {
        let mut threads: Vec<ThreadDump> = (0..8)
            .rev()
            .map(|i| thread(&format!("pool-{i}"), 100 + i, &[("wait", 7), ("run", 3)]))
            .collect();
        // One of them caught running at the instant it was read is still the same stack.
        threads[3].active = true;
        threads.push(thread("MainThread", 99, &[("main", 20)]));
        let dump = [process(1, None, threads)];
        let groups = group_threads(&dump);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].members.len(), 8);
        assert_eq!(groups[0].members[7].name, "pool-7");
        assert_eq!(groups[1].members[0].name, "MainThread");
    }

    #[test]
    fn the_same_stack_on_another_line_is_another_group() {
        let dump = [process(
            1,
            None,
            vec![
                thread("a", 1, &[("wait", 7)]),
                thread("b", 2, &[("wait", 8)]),
            ],
        )];
        assert_eq!(group_threads(&dump).len(), 2);
    }

    #[test]
    fn a_rank_elsewhere_is_a_straggler() {
        let mut dump = vec![process(
            10,
            None,
            vec![thread("MainThread", 10, &[("launch", 1)])],
        )];
        for pid in 11..=14 {
            dump.push(process(
                pid,
                Some(10),
                vec![thread(
                    "MainThread",
                    pid.into(),
                    &[("all_reduce", 40), ("step", 9)],
                )],
            ));
        }
        dump.push(process(
            15,
            Some(10),
            vec![thread("MainThread", 15, &[("load", 70), ("step", 8)])],
        ));
        let stragglers = find_stragglers(&dump);
        assert_eq!(stragglers.len(), 1, "{stragglers:?}");
        let s = &stragglers[0];
        assert_eq!(s.pid, 15);
        assert_eq!(s.location, "load (job.py:70)");
        assert_eq!(s.peers_location, "all_reduce (job.py:40)");
        assert_eq!((s.together, s.peers), (4, 5));
        // Groups: the four waiting ranks are one.
        let groups = group_threads(&dump);
        assert_eq!(groups.iter().map(|g| g.members.len()).max(), Some(4));
    }

    #[test]
    fn a_thread_family_with_one_thread_elsewhere() {
        let mut threads: Vec<ThreadDump> = (0..7)
            .map(|i| thread(&format!("pool-{i}"), i, &[("get", 5)]))
            .collect();
        threads.push(thread("pool-7", 7, &[("compute", 30)]));
        let stragglers = find_stragglers(&[process(1, None, threads)]);
        assert_eq!(stragglers.len(), 1);
        assert_eq!(stragglers[0].thread.as_deref(), Some("pool-7"));
    }

    #[test]
    fn no_straggler_without_a_clear_majority() {
        let threads = vec![
            thread("w-0", 0, &[("a", 1)]),
            thread("w-1", 1, &[("a", 1)]),
            thread("w-2", 2, &[("b", 1)]),
            thread("w-3", 3, &[("b", 1)]),
        ];
        assert!(find_stragglers(&[process(1, None, threads)]).is_empty());
        let all_same: Vec<ThreadDump> = (0..4).map(|i| thread("w-", i, &[("a", 1)])).collect();
        assert!(find_stragglers(&[process(1, None, all_same)]).is_empty());
    }

    /// Ranks blocked on a lock and on an event share the innermost native frame (a futex wait
    /// in libc); the straggler is told apart, and named, by its Python frames.
    #[test]
    fn stragglers_are_compared_and_named_by_python_frames() {
        let futex = |frames: &[(&str, u32)]| {
            let mut t = thread("MainThread", 1, frames);
            t.frames.insert(
                0,
                FrameDump {
                    function: "libc.so.6+0x98e51".to_owned(),
                    file: "libc.so.6".to_owned(),
                    line: 0,
                    native: true,
                    locals: None,
                    path: None,
                },
            );
            t
        };
        let waiting = [("all_reduce", 40), ("train", 60)];
        let mut ranks: Vec<ProcessDump> = (1..=3)
            .map(|pid| process(pid, Some(100), vec![futex(&waiting)]))
            .collect();
        ranks.push(process(
            4,
            Some(100),
            vec![futex(&[
                ("refresh_index", 22),
                ("load_shard", 50),
                ("train", 58),
            ])],
        ));
        let found = find_stragglers(&ranks);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, 4);
        assert_eq!(found[0].location, "refresh_index (job.py:22)");
        assert_eq!(found[0].peers_location, "all_reduce (job.py:40)");
    }
}
