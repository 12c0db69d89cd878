use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;

use super::*;

fn write(dir: &Path, name: &str, text: &str) {
    fs::create_dir_all(dir).expect("mkdir");
    fs::write(dir.join(name), text).expect("write");
}

const ROLLUP: &str = "Rss: 800 kB\nShared_Clean: 100 kB\nShared_Dirty: 0 kB\n\
                      Private_Clean: 20 kB\nPrivate_Dirty: 680 kB\nSwap: 4 kB\n";

/// A procfs and a cgroup v2 file system of one process, pid 100, in `root`.
fn fake_system(root: &Path) -> MemoryConfig {
    let proc_root = root.join("proc");
    let pid = proc_root.join("100");
    write(&pid, "statm", "5000 200 50 1 0 300 0\n");
    write(&pid, "smaps_rollup", ROLLUP);
    write(&pid, "cgroup", "0::/job\n");
    let cgroup_root = root.join("cgroup");
    let job = cgroup_root.join("job");
    write(&job, "memory.current", "123456\n");
    write(&job, "memory.max", "1048576\n");
    write(&job, "memory.events", "oom 0\noom_kill 0\n");
    MemoryConfig {
        rate_hz: 200.0,
        proc_root,
        cgroup_root,
        ..MemoryConfig::default()
    }
}

fn run(config: &MemoryConfig, pids: Vec<u32>, polls: u64) -> (Vec<Event>, MemoryReport) {
    let (sender, receiver) = crossbeam_channel::bounded(1024);
    let stop = Arc::new(AtomicBool::new(false));
    let poller = MemoryPoller::start(
        config,
        100,
        Arc::new(move || pids.clone()),
        sender,
        stop.clone(),
    )
    .expect("starts");
    while poller.polls() < polls {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::SeqCst);
    let report = poller.join();
    (receiver.try_iter().flatten().collect(), report)
}

#[test]
fn reads_rss_every_time_the_rollup_first_and_last_and_the_cgroup() {
    let root = tempfile::tempdir().expect("tempdir");
    let config = fake_system(root.path());
    // 101 is not there: a process that ended. It is left out, silently.
    let (events, report) = run(&config, vec![100, 101], 5);
    let memory: Vec<&MemorySample> = events
        .iter()
        .filter_map(|e| match e {
            Event::Memory(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(memory.len() as u64, report.polls);
    let page = page_size();
    assert!(memory
        .iter()
        .all(|m| m.pid == 100 && m.rss_bytes == 200 * page));
    // The first reading has the rollup, and the last; those between, within the interval,
    // do not.
    assert!(memory.len() >= 3);
    for m in [memory[0], memory[memory.len() - 1]] {
        assert_eq!(m.private_bytes, Some(700 * 1024));
        assert_eq!(m.shared_bytes, Some(100 * 1024));
        assert_eq!(m.swap_bytes, Some(4 * 1024));
    }
    assert!(memory[1..memory.len() - 1]
        .iter()
        .all(|m| m.private_bytes.is_none()));
    assert!(memory.windows(2).all(|w| w[0].time <= w[1].time));

    let cgroup: Vec<&CgroupSample> = events
        .iter()
        .filter_map(|e| match e {
            Event::Cgroup(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(cgroup.len() as u64, report.polls);
    assert!(cgroup.iter().all(|c| c.usage_bytes == 123456
        && c.limit_bytes == Some(1 << 20)
        && c.oom_kills == Some(0)));
    assert!(report.notices.is_empty(), "{:?}", report.notices);
    assert_eq!(report.dropped, 0);
}

#[test]
fn torn_and_missing_files_are_skipped() {
    let root = tempfile::tempdir().expect("tempdir");
    let config = fake_system(root.path());
    let pid = config.proc_root.join("100");
    write(&pid, "smaps_rollup", "Rss: 800 kB\nShared_Cl");
    fs::remove_file(config.cgroup_root.join("job/memory.events")).expect("rm");
    let (events, report) = run(&config, vec![100], 2);
    let first = events
        .iter()
        .find_map(|e| match e {
            Event::Memory(m) => Some(m),
            _ => None,
        })
        .expect("a reading");
    assert_eq!(first.private_bytes, None);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Cgroup(c) if c.oom_kills.is_none())));
    assert!(report.notices.is_empty());

    // statm torn: the process is read as gone.
    write(&pid, "statm", "5000");
    let (events, _) = run(&config, vec![100], 2);
    assert!(!events.iter().any(|e| matches!(e, Event::Memory(_))));
}

#[test]
fn an_unreadable_rollup_of_a_live_process_is_said_once() {
    let root = tempfile::tempdir().expect("tempdir");
    let config = fake_system(root.path());
    // A kernel without smaps_rollup.
    fs::remove_file(config.proc_root.join("100/smaps_rollup")).expect("rm");
    let dir = config.proc_root.join("200");
    write(&dir, "statm", "1 2 3 4 5 6 7\n");
    let config = MemoryConfig {
        rollup_interval: Duration::ZERO,
        ..config
    };
    let (_, report) = run(&config, vec![100, 200], 3);
    assert_eq!(report.notices.len(), 1, "{:?}", report.notices);
    assert!(report.notices[0].contains("smaps_rollup"));
}

#[test]
fn rate_zero_is_off() {
    let (sender, _receiver) = crossbeam_channel::bounded(1);
    let config = MemoryConfig {
        rate_hz: 0.0,
        ..MemoryConfig::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    assert!(matches!(
        MemoryPoller::start(&config, 1, Arc::new(Vec::new), sender, stop),
        Err(MemoryError::Disabled)
    ));
}

/// A process that ended leaves nothing behind: its open `statm` and when its next rollup is
/// due go at the next walk of the tree, or at once when its reading fails.
#[test]
fn what_is_kept_of_a_process_that_ended_goes() {
    let root = tempfile::tempdir().expect("tempdir");
    let config = fake_system(root.path());
    for pid in 101..110 {
        let dir = config.proc_root.join(pid.to_string());
        write(&dir, "statm", "5000 200 50 1 0 300 0\n");
        write(&dir, "smaps_rollup", ROLLUP);
    }
    let tree = Arc::new(std::sync::Mutex::new((100..110).collect::<Vec<u32>>()));
    let listed = tree.clone();
    let target: TargetPids =
        Arc::new(move || listed.lock().map(|pids| pids.clone()).unwrap_or_default());
    let mut reader = Reader::new(config.clone(), 100, target);
    let mut notices = Vec::new();
    let read_all = |reader: &mut Reader, notices: &mut Vec<String>| {
        let pids = reader.pids.clone();
        let gone: Vec<u32> = pids
            .into_iter()
            .filter(|&pid| reader.read_process(pid, true, notices).is_none())
            .collect();
        reader.pids.retain(|pid| !gone.contains(pid));
        reader.forget_others();
    };
    reader.walk();
    read_all(&mut reader, &mut notices);
    assert_eq!((reader.statm.len(), reader.rollup_due.len()), (10, 10));
    // Two end between walks: their readings fail (procfs answers an open file of a process
    // gone with an error; here, a line cut short).
    for pid in [101, 102] {
        write(&config.proc_root.join(pid.to_string()), "statm", "5000");
    }
    read_all(&mut reader, &mut notices);
    assert_eq!((reader.statm.len(), reader.rollup_due.len()), (8, 8));
    // The others leave the tree: the walk lets them go.
    if let Ok(mut pids) = tree.lock() {
        *pids = vec![100];
    }
    reader.walk();
    assert_eq!((reader.statm.len(), reader.rollup_due.len()), (1, 1));
    assert!(notices.is_empty(), "{notices:?}");
}
