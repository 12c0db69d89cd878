//! The poller on this machine's own /proc and cgroup file system: this test process and a child
//! it starts, the child ended halfway.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stackscope_event::Event;
use stackscope_memory::cgroup::CgroupFiles;
use stackscope_memory::{MemoryConfig, MemoryPoller};

fn wait_polls(poller: &MemoryPoller, polls: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while poller.polls() < polls {
        assert!(Instant::now() < deadline, "timed out waiting for readings");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn reads_this_process_and_its_child_until_the_child_ends() {
    let mut child = Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep starts");
    let me = std::process::id();
    let tree = [me, child.id()].to_vec();
    let (sender, receiver) = crossbeam_channel::bounded(1024);
    let stop = Arc::new(AtomicBool::new(false));
    let config = MemoryConfig {
        rate_hz: 50.0,
        tree_interval: Duration::from_millis(50),
        ..MemoryConfig::default()
    };
    let poller = MemoryPoller::start(
        &config,
        me,
        Arc::new(move || tree.clone()),
        sender,
        stop.clone(),
    )
    .expect("starts");
    wait_polls(&poller, 3);
    child.kill().expect("kill");
    child.wait().expect("reaped");
    let ended = stackscope_event::Timestamp::now();
    wait_polls(&poller, poller.polls() + 3);
    stop.store(true, Ordering::SeqCst);
    let report = poller.join();
    let events: Vec<Event> = receiver.try_iter().flatten().collect();

    let of = |pid: u32| -> Vec<&stackscope_event::MemorySample> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Memory(m) if m.pid == pid => Some(m),
                _ => None,
            })
            .collect()
    };
    let mine = of(me);
    assert!(mine.len() >= 6, "{} readings", mine.len());
    assert!(mine.iter().all(|m| m.rss_bytes > 1 << 20));
    let rollup = mine[0];
    assert!(rollup.private_bytes.is_some_and(|p| p > 0), "{rollup:?}");
    assert!(rollup.shared_bytes.is_some() && rollup.swap_bytes.is_some());
    let childs = of(child.id());
    assert!(!childs.is_empty());
    assert!(
        childs.iter().all(|m| m.time < ended),
        "no reading after the child ended"
    );
    assert_eq!(report.dropped, 0);

    let own_cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| CgroupFiles::locate(&text, &config.cgroup_root));
    let cgroups = events
        .iter()
        .filter(|e| matches!(e, Event::Cgroup(_)))
        .count();
    if own_cgroup.is_some() {
        assert_eq!(cgroups as u64, report.polls);
    } else {
        eprintln!("this process is in no memory cgroup of its own: no cgroup readings to check");
        assert_eq!(cgroups, 0);
    }
}
