use std::fs;

use super::*;

const V1: &str = "\
9:name=systemd:/
8:pids:/
4:memory:/process_api/4498f7849c6114921686be397e5fefe4
3:cpuset:/
1:cpu,cpuacct:/
0::/
";

const V2: &str = "0::/system.slice/job.scope\n";

#[test]
fn proc_cgroup_v1_memory_line_wins_over_the_unified_one() {
    assert_eq!(
        parse_proc_cgroup(V1),
        Some(CgroupPath::V1(
            "/process_api/4498f7849c6114921686be397e5fefe4".into()
        ))
    );
    assert_eq!(
        parse_proc_cgroup("5:cpu,memory:/a:b\n0::/x\n"),
        Some(CgroupPath::V1("/a:b".into()))
    );
}

#[test]
fn proc_cgroup_v2_and_nothing() {
    assert_eq!(
        parse_proc_cgroup(V2),
        Some(CgroupPath::V2("/system.slice/job.scope".into()))
    );
    assert_eq!(parse_proc_cgroup("3:cpuset:/\n"), None);
    assert_eq!(parse_proc_cgroup(""), None);
    assert_eq!(parse_proc_cgroup("garbage"), None);
}

#[test]
fn limits_unlimited_and_numbers() {
    assert_eq!(parse_v2_max("max\n"), Some(None));
    assert_eq!(parse_v2_max("4294967296\n"), Some(Some(4 << 30)));
    assert_eq!(parse_v2_max("lots"), None);
    assert_eq!(parse_v1_limit("9223372036854771712\n"), Some(None));
    assert_eq!(parse_v1_limit("536870912\n"), Some(Some(512 << 20)));
    assert_eq!(parse_v1_limit(""), None);
    assert_eq!(parse_number(" 5977231360\n"), Some(5977231360));
}

#[test]
fn oom_kills_from_v2_events_and_v1_oom_control() {
    let events = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n";
    assert_eq!(parse_keyed(events, "oom_kill"), Some(2));
    assert_eq!(parse_keyed(events, "oom"), Some(3));
    let control = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n";
    assert_eq!(parse_keyed(control, "oom_kill"), Some(1));
    // Kernels before 4.13 have no oom_kill line.
    assert_eq!(
        parse_keyed("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"),
        None
    );
    assert_eq!(parse_keyed("oom_kill many\n", "oom_kill"), None);
}

fn write(dir: &Path, name: &str, text: &str) {
    fs::create_dir_all(dir).expect("mkdir");
    fs::write(dir.join(name), text).expect("write");
}

#[test]
fn locates_and_reads_a_v1_cgroup() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root
        .path()
        .join("memory/process_api/4498f7849c6114921686be397e5fefe4");
    write(&dir, "memory.usage_in_bytes", "1729318912\n");
    write(&dir, "memory.limit_in_bytes", "9223372036854771712\n");
    write(
        &dir,
        "memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    );
    let files = CgroupFiles::locate(V1, root.path()).expect("found");
    assert_eq!(files.version, CgroupVersion::V1);
    let mut buffer = Vec::new();
    let reading = files.read(true, &mut buffer).expect("read");
    assert_eq!(
        reading,
        CgroupReading {
            usage: 1729318912,
            limit: None,
            oom_kills: Some(0),
        }
    );
    write(&dir, "memory.limit_in_bytes", "2147483648\n");
    assert_eq!(
        files.read(true, &mut buffer).expect("read").limit,
        Some(2 << 30)
    );
    assert_eq!(
        files.read(false, &mut buffer),
        Some(CgroupReading {
            usage: 1729318912,
            limit: None,
            oom_kills: Some(0),
        })
    );
    // The root cgroup is the machine's.
    assert!(CgroupFiles::locate("4:memory:/\n", root.path()).is_none());
}

#[test]
fn locates_and_reads_a_v2_cgroup() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("system.slice/job.scope");
    write(&dir, "memory.current", "1000\n");
    write(&dir, "memory.max", "4096\n");
    write(
        &dir,
        "memory.events",
        "low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n",
    );
    let files = CgroupFiles::locate(V2, root.path()).expect("found");
    assert_eq!(files.dir, dir);
    let mut buffer = Vec::new();
    assert_eq!(
        files.read(true, &mut buffer),
        Some(CgroupReading {
            usage: 1000,
            limit: Some(4096),
            oom_kills: Some(1),
        })
    );
    write(&dir, "memory.current", "torn");
    assert_eq!(files.read(true, &mut buffer), None);
}

#[test]
fn a_containers_own_cgroup_is_the_mounts_root() {
    let root = tempfile::tempdir().expect("tempdir");
    // The host's path is not under the container's mount; the mount's root is the cgroup.
    write(root.path(), "memory.current", "77\n");
    let files = CgroupFiles::locate(V2, root.path()).expect("found");
    assert_eq!(files.dir, root.path());
    // A namespaced v2 root ("/") is read where it has the files...
    assert!(CgroupFiles::locate("0::/\n", root.path()).is_some());
    // ...and the true root, which has none, gives nothing.
    let bare = tempfile::tempdir().expect("tempdir");
    assert!(CgroupFiles::locate("0::/\n", bare.path()).is_none());
    assert!(CgroupFiles::locate(V2, bare.path()).is_none());
}
