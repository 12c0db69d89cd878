//! One view of a process tree, in the order a person reads it: `dump`, the hang report and
//! `merge` all put a tree's processes and threads through [`in_reading_order`], so the three say
//! the same thing in the same order.
//!
//! Processes: the tree depth first, each parent before its children, siblings by rank, then
//! pid. Threads of a process: its main thread first, then threads that were running (they tell
//! the most), then idle ones (helpers waiting for work), each class in name order.
//!
//! A process forked from a thread other than its parent's main one (a `multiprocessing` pool
//! replacing a worker from its `_handle_workers` thread) keeps that thread's Python name for
//! its only thread; the thread is the new process's main thread, and is named so here.

use std::collections::{HashMap, HashSet};

use stackscope_event::{ProcessDump, ThreadDump};

/// What CPython names the main thread.
pub const MAIN_THREAD: &str = "MainThread";

/// Names forked main threads by what they are now and orders processes and threads for a
/// reader. Idempotent.
pub fn in_reading_order(processes: &mut Vec<ProcessDump>) {
    name_forked_main_threads(processes);
    for process in processes.iter_mut() {
        let pid = process.pid;
        let ns_pid = process.ns_pid;
        process.threads.sort_by_cached_key(|t| {
            (
                thread_class(pid, ns_pid, t),
                natural_key(&t.display_name()),
                t.os_thread_id,
            )
        });
    }
    let order = tree_order(processes);
    let mut taken: Vec<Option<ProcessDump>> = processes.drain(..).map(Some).collect();
    processes.extend(order.into_iter().filter_map(|i| taken[i].take()));
}

/// Whether `thread` is the main thread of `process`: the OS calls it by the process's pid
/// (its thread-group leader), or, where the OS thread is not known, Python names it so.
pub fn is_main_thread(process: &ProcessDump, thread: &ThreadDump) -> bool {
    is_main(process.pid, process.ns_pid, thread)
}

fn is_main(pid: u32, ns_pid: Option<u32>, thread: &ThreadDump) -> bool {
    is_leader(pid, ns_pid, thread)
        || (thread.os_thread_id.is_none() && thread.name.as_deref() == Some(MAIN_THREAD))
}

fn is_leader(pid: u32, ns_pid: Option<u32>, thread: &ThreadDump) -> bool {
    thread.os_thread_id == Some(u64::from(pid))
        || (ns_pid.is_some() && thread.ns_thread_id == ns_pid.map(u64::from))
}

/// 0: the main thread; 1: running when read; 2: idle.
fn thread_class(pid: u32, ns_pid: Option<u32>, thread: &ThreadDump) -> u8 {
    if is_main(pid, ns_pid, thread) {
        0
    } else if thread.active {
        1
    } else {
        2
    }
}

/// The main thread of a forked process named `MainThread` where its Python name is one it
/// inherited: a default thread name (`Thread-3 (_handle_workers)`, `Dummy-1`), which CPython
/// never gives a main thread, or the name of a non-main thread of its parent. A main thread
/// the job renamed itself (`trainer`) keeps its name.
fn name_forked_main_threads(processes: &mut [ProcessDump]) {
    let helper_names: HashMap<u32, HashSet<String>> = processes
        .iter()
        .map(|p| {
            let names = p
                .threads
                .iter()
                .filter(|t| !is_leader(p.pid, p.ns_pid, t))
                .filter_map(|t| t.name.clone())
                .collect();
            (p.pid, names)
        })
        .collect();
    for process in processes.iter_mut() {
        let parents_helpers = process.parent_pid.and_then(|ppid| helper_names.get(&ppid));
        let (pid, ns_pid) = (process.pid, process.ns_pid);
        for thread in &mut process.threads {
            let Some(name) = thread.name.as_deref() else {
                continue;
            };
            let inherited = is_default_thread_name(name)
                || parents_helpers.is_some_and(|names| names.contains(name));
            if name != MAIN_THREAD && inherited && is_leader(pid, ns_pid, thread) {
                thread.name = Some(MAIN_THREAD.to_owned());
            }
        }
    }
}

/// `Thread-3`, `Thread-3 (target)`, `Dummy-1`: the names `threading` makes up.
fn is_default_thread_name(name: &str) -> bool {
    ["Thread-", "Dummy-"].iter().any(|prefix| {
        name.strip_prefix(prefix).is_some_and(|rest| {
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            let after = &rest[digits..];
            digits > 0 && (after.is_empty() || after.starts_with(" ("))
        })
    })
}

/// Indices of `processes` depth first from each root (a process whose parent is not among
/// them), roots in the order given, siblings by rank then pid.
fn tree_order(processes: &[ProcessDump]) -> Vec<usize> {
    let present: HashSet<u32> = processes.iter().map(|p| p.pid).collect();
    let mut children: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, p) in processes.iter().enumerate() {
        match p
            .parent_pid
            .filter(|ppid| present.contains(ppid) && *ppid != p.pid)
        {
            Some(ppid) => children.entry(ppid).or_default().push(i),
            None => roots.push(i),
        }
    }
    let sibling_key = |&i: &usize| {
        (
            processes[i].rank.rank.is_none(),
            processes[i].rank.rank,
            processes[i].pid,
        )
    };
    for list in children.values_mut() {
        list.sort_by_key(sibling_key);
    }
    let mut order = Vec::with_capacity(processes.len());
    let mut seen = HashSet::new();
    for root in roots {
        let mut stack = vec![root];
        while let Some(i) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            order.push(i);
            if let Some(kids) = children.get(&processes[i].pid) {
                stack.extend(kids.iter().rev());
            }
        }
    }
    // A cycle of parents (pid reuse between reads) leaves some unreached: keep them, in order.
    order.extend((0..processes.len()).filter(|i| !seen.contains(i)));
    order
}

/// Orders `pool-2` before `pool-10`: the name without its trailing number, then the number.
pub(crate) fn natural_key(name: &str) -> (String, u64) {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let number = name[stem.len()..].parse().unwrap_or(0);
    (stem.to_owned(), number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::{FrameDump, RankInfo, ThreadState};

    fn thread(name: &str, tid: u64, active: bool) -> ThreadDump {
        ThreadDump {
            name: Some(name.to_owned()),
            os_thread_id: Some(tid),
            ns_thread_id: None,
            python_thread_id: tid,
            active,
            owns_gil: false,
            state: ThreadState::WaitingOnLock,
            frames: vec![FrameDump {
                function: "wait".into(),
                file: "threading.py".into(),
                line: 320,
                native: false,
                locals: None,
                path: None,
            }],
        }
    }

    fn process(pid: u32, parent: Option<u32>, threads: Vec<ThreadDump>) -> ProcessDump {
        ProcessDump {
            pid,
            parent_pid: parent,
            ns_pid: None,
            command_line: format!("python3 job.py {pid}"),
            python_version: "3.11.7".into(),
            rank: RankInfo::default(),
            host: None,
            threads,
        }
    }

    fn names(p: &ProcessDump) -> Vec<String> {
        p.threads.iter().map(ThreadDump::display_name).collect()
    }

    /// The Pool.map job as the reader lists it: three pool threads first, the main thread
    /// last; a replacement worker forked from `_handle_workers` carries that thread's name.
    #[test]
    fn main_thread_first_then_running_then_idle_and_a_forked_worker_is_its_main_thread() {
        let mut tree = vec![
            process(
                100,
                None,
                vec![
                    thread("Thread-3 (_handle_results)", 103, false),
                    thread("Thread-2 (_handle_tasks)", 102, false),
                    thread("Thread-1 (_handle_workers)", 101, true),
                    thread("MainThread", 100, false),
                ],
            ),
            process(
                209,
                Some(100),
                vec![thread("Thread-1 (_handle_workers)", 209, false)],
            ),
            process(205, Some(100), vec![thread("MainThread", 205, false)]),
        ];
        in_reading_order(&mut tree);
        assert_eq!(
            names(&tree[0]),
            [
                "MainThread",
                "Thread-1 (_handle_workers)",
                "Thread-2 (_handle_tasks)",
                "Thread-3 (_handle_results)"
            ]
        );
        let pids: Vec<u32> = tree.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [100, 205, 209], "parent first, children by pid");
        assert_eq!(names(&tree[2]), ["MainThread"], "named by what it is now");
        // Run again, the same.
        let before = tree.clone();
        in_reading_order(&mut tree);
        assert_eq!(tree, before);
    }

    #[test]
    fn a_main_thread_the_job_renamed_keeps_its_name_and_helpers_keep_theirs() {
        let mut tree = vec![
            process(1, None, vec![thread("MainThread", 1, false)]),
            process(
                2,
                Some(1),
                vec![thread("trainer", 2, true), thread("Thread-1", 7, false)],
            ),
        ];
        in_reading_order(&mut tree);
        assert_eq!(names(&tree[1]), ["trainer", "Thread-1"]);
        assert!(is_main_thread(&tree[1], &tree[1].threads[0]));
        assert!(!is_main_thread(&tree[1], &tree[1].threads[1]));
    }

    #[test]
    fn ranks_in_rank_order_under_their_launcher_depth_first() {
        let ranked = |pid: u32, rank: u32, parent: u32| {
            let mut p = process(
                pid,
                Some(parent),
                vec![thread("MainThread", pid.into(), false)],
            );
            p.rank.rank = Some(rank);
            p
        };
        let mut tree = vec![
            process(10, None, vec![]),
            ranked(13, 0, 10),
            ranked(11, 2, 10),
            process(20, Some(13), vec![thread("MainThread", 20, false)]),
            ranked(12, 1, 10),
        ];
        in_reading_order(&mut tree);
        let pids: Vec<u32> = tree.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [10, 13, 20, 12, 11]);
    }

    #[test]
    fn default_thread_names() {
        for name in ["Thread-1", "Thread-12 (_handle_workers)", "Dummy-3"] {
            assert!(is_default_thread_name(name), "{name}");
        }
        for name in ["Thread-", "Thread-x", "MainThread", "pool-1", "Thread-1x"] {
            assert!(!is_default_thread_name(name), "{name}");
        }
    }
}
