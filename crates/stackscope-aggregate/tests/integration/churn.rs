//! Jobs that start and end threads and processes for as long as they run: like ones are read as
//! one (one root, one entry), what an ended one held is let go, and the tables stay the size of
//! what is alive, on shapes generated from parameters.

use stackscope_aggregate::{
    is_group_pid, parse_group_label, AggregateConfig, Aggregator, RecordingMeta, StackView,
    Summary, OTHER_PROCESSES, OTHER_THREADS,
};
use stackscope_event::{
    Event, Frame, HowEnded, ProcessEvent, ProcessEventKind, RankInfo, StackSample, Timestamp,
};
use stackscope_testkit::events::thread;

const MS: u64 = 1_000_000;

/// A job's event stream, with a clock of 10 ms a read.
struct Job {
    agg: Aggregator,
    now: u64,
    samples: u64,
}

impl Job {
    fn new(apart: bool) -> Job {
        Job::with(AggregateConfig {
            processes_apart: apart,
            ..AggregateConfig::default()
        })
    }

    /// A job read with `config`, processes as roots and no GPU.
    fn with(config: AggregateConfig) -> Job {
        let config = AggregateConfig {
            gpu_enabled: false,
            process_root: true,
            ..config
        };
        Job {
            agg: Aggregator::new(config, Timestamp(0)),
            now: MS,
            samples: 0,
        }
    }

    fn process(&mut self, pid: u32, command: &str, rank: Option<u32>, kind: ProcessEventKind) {
        self.agg.handle(Event::Process(ProcessEvent {
            time: Timestamp(self.now),
            pid,
            command_line: command.to_owned(),
            kind,
            rank: RankInfo {
                rank,
                ..RankInfo::default()
            },
            how: (kind == ProcessEventKind::Exited).then_some(HowEnded::Exited(0)),
        }));
    }

    /// One read of `pid`: each thread `(id, name)` at `function`; an empty name is one not
    /// readable yet.
    fn read(&mut self, pid: u32, threads: &[(u64, String)], function: &str) {
        for (id, name) in threads {
            let name = Some(name.as_str()).filter(|n| !n.is_empty());
            self.agg.handle(Event::Stack(StackSample {
                time: Timestamp(self.now),
                pid,
                thread: thread(*id, Some(*id + 10_000), name, true),
                frames: vec![
                    Frame::python(function, "job.py", 7),
                    Frame::python("run", "job.py", 1),
                ]
                .into(),
            }));
            self.samples += 1;
        }
    }

    fn tick(&mut self) {
        self.now += 10 * MS;
    }

    fn finish(mut self) -> (Aggregator, Summary, u64) {
        self.agg.finish();
        let summary = self.agg.summary(&RecordingMeta::default());
        (self.agg, summary, self.samples)
    }
}

fn main_thread() -> Vec<(u64, String)> {
    vec![(1, "MainThread".to_owned())]
}

/// Process roots of the folded lines with their samples.
fn roots(agg: &Aggregator) -> Vec<(String, u64)> {
    roots_at(agg, 0)
}

/// Thread roots (under the process roots) with their samples.
fn thread_roots(agg: &Aggregator) -> Vec<(String, u64)> {
    roots_at(agg, 1)
}

fn roots_at(agg: &Aggregator, depth: usize) -> Vec<(String, u64)> {
    let mut roots: Vec<(String, u64)> = Vec::new();
    for (line, n) in agg.folded(StackView::All) {
        let root = line.split(';').nth(depth).unwrap_or("").to_owned();
        match roots.iter_mut().find(|(r, _)| *r == root) {
            Some(slot) => slot.1 += n,
            None => roots.push((root, n)),
        }
    }
    roots
}

/// A loop that re-creates `per_epoch` workers every `epoch_reads` reads, `epochs` times: fork
/// workers run the trainer's command line, spawned ones `multiprocessing`'s.
fn epochs(per_epoch: u32, epoch_reads: u32, epochs: u32, spawned: bool, apart: bool) -> Job {
    let mut job = Job::new(apart);
    let trainer = "python train.py --epochs 90";
    let worker = if spawned {
        "python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=7, pipe_handle=9) --multiprocessing-fork".to_owned()
    } else {
        trainer.to_owned()
    };
    job.process(100, trainer, None, ProcessEventKind::Attached);
    let mut pid = 1_000;
    for _ in 0..epochs {
        let workers: Vec<u32> = (0..per_epoch).map(|i| pid + i).collect();
        pid += per_epoch;
        for &w in &workers {
            job.process(w, &worker, None, ProcessEventKind::Attached);
        }
        for _ in 0..epoch_reads {
            job.read(100, &main_thread(), "train_step");
            for &w in &workers {
                job.read(w, &main_thread(), "augment_batch");
            }
            job.tick();
        }
        for &w in &workers {
            job.process(w, "", None, ProcessEventKind::Exited);
        }
    }
    job
}

#[test]
fn workers_re_created_every_epoch_are_one_root_and_let_go_on_any_shape() {
    for &(per_epoch, epoch_reads, n_epochs, spawned) in &[
        (2, 20, 300, false),
        (1, 3, 500, true),
        (3, 7, 200, false),
        (8, 2, 100, true),
        (5, 31, 40, false),
    ] {
        let case = format!("{per_epoch} workers, {epoch_reads} reads an epoch, {n_epochs} epochs, spawned {spawned}");
        let (agg, summary, samples) =
            epochs(per_epoch, epoch_reads, n_epochs, spawned, false).finish();
        let roots = roots(&agg);
        // The trainer and one group: its workers' work on one tower, the widest.
        assert_eq!(roots.len(), 2, "{case}: {roots:?}");
        let (label, n) = roots
            .iter()
            .max_by_key(|(_, n)| *n)
            .cloned()
            .unwrap_or_default();
        let group = parse_group_label(&label).unwrap_or_else(|| panic!("{case}: {label}"));
        assert_eq!(group.processes, u64::from(per_epoch * n_epochs), "{case}");
        assert_eq!(group.at_a_time, u64::from(per_epoch), "{case}");
        assert_eq!(n, u64::from(per_epoch * epoch_reads * n_epochs), "{case}");
        // Every total right, in one entry for the group.
        assert_eq!(summary.samples, samples, "{case}");
        let total: u64 = summary.processes.iter().map(|p| p.samples).sum();
        assert_eq!(total, samples, "{case}");
        let groups: Vec<_> = summary
            .processes
            .iter()
            .filter(|p| p.group.is_some())
            .collect();
        assert_eq!(groups.len(), 1, "{case}");
        assert!(is_group_pid(groups[0].pid), "{case}");
        assert_eq!(summary.processes.len(), 2, "{case}");
        assert_eq!(
            summary.processes_followed,
            u64::from(per_epoch * n_epochs) + 1,
            "{case}"
        );
        // What is kept is what is alive: the trainer, its main thread and the group's, and the
        // first epoch's workers, which ended before their kind was re-created (as they would
        // apart); every later one is let go.
        let released = agg.released().processes;
        let members = u64::from(per_epoch * n_epochs);
        assert_eq!(released, members - u64::from(per_epoch), "{case}");
        let kept = 1 + per_epoch as usize;
        assert!(
            agg.processes_tracked() <= kept,
            "{case}: {}",
            agg.processes_tracked()
        );
        assert!(
            agg.threads_tracked() <= kept + 1,
            "{case}: {}",
            agg.threads_tracked()
        );
        assert_eq!(agg.stack_table().stacks().len(), 2, "{case}");
        let (kinds, reads, _) = agg.end_tables();
        assert!(
            kinds <= 2 && reads <= 1,
            "{case}: {kinds} kinds, {reads} pids read"
        );
        assert!(
            summary.caps_reached.is_empty(),
            "{case}: {:?}",
            summary.caps_reached
        );
        assert!(!roots.iter().any(|(r, _)| r == OTHER_PROCESSES), "{case}");
    }
}

#[test]
fn processes_apart_keeps_a_root_each() {
    let (agg, summary, _) = epochs(2, 5, 10, false, true).finish();
    assert_eq!(roots(&agg).len(), 21);
    assert!(summary.processes.iter().all(|p| p.group.is_none()));
    assert_eq!(agg.released().processes, 0);
}

#[test]
fn ranks_keep_their_rank_and_each_rank_s_workers_are_its_own() {
    let mut job = Job::new(false);
    job.process(
        1,
        "python -m torch.distributed.run t.py",
        None,
        ProcessEventKind::Attached,
    );
    for rank in 0..4u32 {
        job.process(
            10 + rank,
            "python t.py",
            Some(rank),
            ProcessEventKind::Attached,
        );
    }
    let mut pid = 100;
    for _ in 0..20 {
        for rank in 0..4u32 {
            job.read(10 + rank, &main_thread(), "train_step");
            for _ in 0..2 {
                job.process(pid, "python t.py", Some(rank), ProcessEventKind::Attached);
                job.read(pid, &main_thread(), "augment_batch");
                job.process(pid, "", None, ProcessEventKind::Exited);
                pid += 1;
            }
        }
        job.tick();
    }
    let (agg, _, _) = job.finish();
    let roots = roots(&agg);
    for rank in 0..4 {
        let ranks = roots
            .iter()
            .filter(|(r, _)| r.starts_with(&format!("rank {rank} (pid")))
            .count();
        assert_eq!(ranks, 1, "rank {rank} keeps its root: {roots:?}");
        let group = roots
            .iter()
            .filter_map(|(r, _)| parse_group_label(r))
            .find(|g| g.rank == Some(rank));
        assert_eq!(group.map(|g| g.processes), Some(40), "{roots:?}");
    }
}

/// A server that starts a thread per request, `alive` at a time, each living `lifetime` reads,
/// its name not readable at its first `unnamed` reads.
fn requests(alive: u64, lifetime: u64, requests: u64, unnamed: u64) -> Job {
    serve(Job::new(false), alive, lifetime, requests, unnamed)
}

/// [`requests`], read by `job`.
fn serve(mut job: Job, alive: u64, lifetime: u64, requests: u64, unnamed: u64) -> Job {
    job.process(7, "python serve.py", None, ProcessEventKind::Attached);
    let mut started = 0u64;
    let mut live: Vec<(u64, u64)> = Vec::new();
    while started < requests || !live.is_empty() {
        live.retain(|&(_, left)| left > 0);
        while live.len() < alive as usize && started < requests {
            started += 1;
            live.push((started + 1, lifetime));
        }
        let mut threads = main_thread();
        threads.extend(live.iter().map(|&(id, left)| {
            let name = if lifetime - left < unnamed {
                String::new()
            } else {
                format!("Thread-{id} (process_request_thread)")
            };
            (id, name)
        }));
        job.read(7, &threads, "handle");
        for slot in &mut live {
            slot.1 -= 1;
        }
        job.tick();
    }
    // The main thread alone for a while: the last requests are seen ending.
    for _ in 0..200 {
        job.read(7, &main_thread(), "serve_forever");
        job.tick();
    }
    job
}

#[test]
fn threads_kept_apart_keep_their_own_roots() {
    let apart = AggregateConfig {
        threads_apart: true,
        ..AggregateConfig::default()
    };
    let (agg, summary, _) = serve(Job::with(apart), 2, 5, 300, 0).finish();
    let roots = thread_roots(&agg);
    let own = roots
        .iter()
        .filter(|(r, _)| r.ends_with(" (process_request_thread)") && r.starts_with("Thread-"))
        .count();
    assert_eq!(own, 300, "every request thread its own root: {roots:?}");
    assert!(roots.iter().all(|(r, _)| !r.starts_with("thread pool")));
    assert!(summary.threads.iter().all(|t| t.threads.is_none()));
}

#[test]
fn a_thread_per_request_is_one_root_and_its_ended_threads_are_let_go() {
    for &(alive, lifetime, n) in &[(1, 5, 3_000), (4, 20, 2_000), (6, 3, 5_000), (2, 200, 100)] {
        let case = format!("{alive} at a time, {lifetime} reads each, {n} requests");
        let (agg, summary, samples) = requests(alive, lifetime, n, 0).finish();
        let roots = thread_roots(&agg);
        let kind: u64 = roots
            .iter()
            .filter(|(r, _)| r == "thread pool process_request_thread")
            .map(|(_, n)| n)
            .sum();
        assert_eq!(kind, n * lifetime, "{case}: {roots:?}");
        // The summary says how many threads the pool had, and how many at a time.
        let pool = summary
            .threads
            .iter()
            .find(|t| t.name == "thread pool process_request_thread")
            .expect("the pool's entry");
        assert_eq!(pool.threads, Some(n), "{case}");
        let at_a_time = pool.at_a_time.unwrap_or(0);
        assert!(
            (alive..=alive + 1).contains(&at_a_time),
            "{case}: {at_a_time} at a time"
        );
        // One lane for the pool: those of its threads that ended before it was one are in it
        // (but for those past the lanes' cap, in `[other threads]`).
        let lanes: Vec<(&str, u64)> = agg
            .time_buckets()
            .lanes()
            .iter()
            .filter(|l| l.active + l.idle > 0)
            .map(|l| (l.name.as_str(), l.active + l.idle))
            .collect();
        let pool_lane = lanes.iter().find(|(name, _)| *name == pool.name);
        assert!(
            pool_lane.is_some_and(|l| l.1 * 10 >= n * lifetime * 9),
            "{case}: {lanes:?}"
        );
        assert!(
            lanes.iter().all(|(name, _)| !name.starts_with("Thread-")),
            "{case}: {lanes:?}"
        );
        assert!(
            roots.iter().all(|(r, _)| !r.contains(OTHER_THREADS)),
            "{case}"
        );
        // Only the threads started before one was seen ending have roots of their own (each
        // relabelled as the kind): a fixed number, whatever the number of requests.
        // A thread is seen ending 1 s (100 reads) after its last read, at the latest 64 reads on.
        let before_first_end = (alive * ((100 + 64) / lifetime + 2)) as usize;
        assert!(
            agg.thread_roots() <= before_first_end + 2,
            "{case}: {}",
            agg.thread_roots()
        );
        assert!(
            agg.threads_tracked() <= 2,
            "{case}: {}",
            agg.threads_tracked()
        );
        assert_eq!(agg.released().threads, n, "{case}");
        let total: u64 = summary.threads.iter().map(|t| t.samples).sum();
        assert_eq!(total, samples, "{case}");
        assert!(
            summary.caps_reached.is_empty(),
            "{case}: {:?}",
            summary.caps_reached
        );
    }
}

#[test]
fn a_pool_whose_threads_never_end_keeps_their_names() {
    let mut job = Job::new(false);
    job.process(7, "python pool.py", None, ProcessEventKind::Attached);
    let pool: Vec<(u64, String)> = (0..4)
        .map(|i| (i + 2, format!("ThreadPoolExecutor-0_{i}")))
        .chain(main_thread())
        .collect();
    for _ in 0..2_000 {
        job.read(7, &pool, "work");
        job.tick();
    }
    let (agg, _, _) = job.finish();
    let roots = thread_roots(&agg);
    for i in 0..4 {
        let name = format!("ThreadPoolExecutor-0_{i}");
        assert!(
            roots.iter().any(|(r, _)| r.ends_with(&name)),
            "{name}: {roots:?}"
        );
    }
    assert_eq!(agg.released().threads, 0);
}

#[test]
fn a_worker_killed_is_still_named_among_the_ends() {
    let mut job = epochs(2, 5, 10, false, false);
    job.process(
        5_000,
        "python train.py --epochs 90",
        None,
        ProcessEventKind::Attached,
    );
    job.read(5_000, &main_thread(), "augment_batch");
    job.agg.handle(Event::Process(ProcessEvent {
        time: Timestamp(job.now),
        pid: 5_000,
        command_line: String::new(),
        kind: ProcessEventKind::Exited,
        rank: RankInfo::default(),
        how: Some(HowEnded::Killed(9)),
    }));
    let (_, summary, _) = job.finish();
    let ended: Vec<u32> = summary.processes_ended.iter().map(|p| p.pid).collect();
    // The first epoch's workers ended before their kind was re-created, as they would apart;
    // of the 18 after them, let go, only the killed one is named.
    assert_eq!(ended, [1_000, 1_001, 5_000], "{ended:?}");
}

#[test]
fn workers_killed_past_the_names_kept_are_counted_and_said() {
    let mut job = epochs(2, 5, 10, false, false);
    for pid in 5_000..5_100 {
        job.process(
            pid,
            "python train.py --epochs 90",
            None,
            ProcessEventKind::Attached,
        );
        job.read(pid, &main_thread(), "augment_batch");
        job.agg.handle(Event::Process(ProcessEvent {
            time: Timestamp(job.now),
            pid,
            command_line: String::new(),
            kind: ProcessEventKind::Exited,
            rank: RankInfo::default(),
            how: Some(HowEnded::Killed(9)),
        }));
        job.tick();
    }
    let (_, summary, _) = job.finish();
    let killed = summary
        .processes_ended
        .iter()
        .filter(|p| p.pid >= 5_000)
        .count();
    assert_eq!(killed, 64, "the newest 64 killed are named");
    let cap = summary
        .caps_reached
        .iter()
        .find(|c| c.contains("named in processes_ended"))
        .unwrap_or_else(|| panic!("{:?}", summary.caps_reached));
    assert!(cap.contains("36 older ones"), "{cap}");
}

#[test]
fn threads_not_named_at_first_are_one_kind_until_named() {
    for &(alive, lifetime, unnamed, n) in &[(1, 5, 2, 3_000), (3, 8, 1, 2_000), (2, 3, 3, 2_000)] {
        let case = format!("{alive} at a time, {lifetime} reads each, {unnamed} unnamed, {n}");
        let (agg, summary, samples) = requests(alive, lifetime, n, unnamed).finish();
        let roots = thread_roots(&agg);
        assert!(
            roots.iter().all(|(r, _)| r != OTHER_THREADS),
            "{case}: {roots:?}"
        );
        let before_first_end = (alive * ((100 + 64) / lifetime + 2)) as usize;
        assert!(
            agg.thread_roots() <= 2 * before_first_end + 3,
            "{case}: {} roots",
            agg.thread_roots()
        );
        // Every request thread's samples are in the kinds, named or not yet named.
        let kinds: u64 = roots
            .iter()
            .filter(|(r, _)| r == "thread pool process_request_thread" || r == "thread N")
            .map(|(_, n)| n)
            .sum();
        assert!(
            kinds * 10 >= n * lifetime * 9,
            "{case}: {kinds} of {}: {roots:?}",
            n * lifetime
        );
        let total: u64 = summary.threads.iter().map(|t| t.samples).sum();
        assert_eq!(total, samples, "{case}");
        assert!(
            summary.caps_reached.is_empty(),
            "{case}: {:?}",
            summary.caps_reached
        );
    }
}
