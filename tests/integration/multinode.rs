//! Jobs larger than one machine: two "nodes" made of real namespaces (a PID, UTS and mount
//! namespace each, with its own host name), each running one node of a torchrun job
//! (fixtures/torchrun_node.py: ranks started with torchrun's environment, one rank stuck
//! computing while the rest wait). stackscope runs inside each node, as a per-node agent does
//! (`nsenter` into its namespaces), and the outputs are merged; a real Prometheus scrapes
//! `watch --metrics-addr`.
//!
//! Needs root and `unshare`; the Prometheus test also Debian's `prometheus` package. Each test
//! says so in one line and passes without them.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{fixture_path, run_with_timeout, serial, spawn_stackscope, Run};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(120);
const RANKS_PER_NODE: u32 = 4;
const STUCK_RANK: u32 = 6;

/// One node: `unshare` with a new PID, UTS and mount namespace, the host name set, and the
/// fixture as its first process. Dropping it kills the namespace's first process, which takes
/// every process of the namespace (stackscope runs included) with it.
struct Node {
    name: String,
    unshare: Child,
    /// The namespace's first process, as the host sees it.
    init: u32,
    dir: tempfile::TempDir,
    ready: Value,
}

impl Node {
    fn start(name: &str, node_rank: u32) -> Node {
        let dir = tempfile::Builder::new()
            .prefix("stackscope-node-")
            .tempdir()
            .expect("temp dir");
        let ready = dir.path().join("ready");
        let script = format!(
            "hostname {name} && exec python3 {} {} --node-rank {node_rank} --nproc \
             {RANKS_PER_NODE} --nnodes 2 --stuck-rank {STUCK_RANK}",
            fixture_path("torchrun_node.py").display(),
            ready.display()
        );
        let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let unshare = Command::new("unshare")
            .args([
                "--pid",
                "--uts",
                "--mount-proc",
                "--fork",
                "--kill-child",
                "sh",
                "-c",
                &script,
            ])
            .env("PYTHONDONTWRITEBYTECODE", "1")
            // As under `srun`: the launcher has the batch system's task rank, which must not
            // make it a rank of the job (its children have torchrun's RANK).
            .env("SLURM_PROCID", node_rank.to_string())
            .env("SLURM_NTASKS", "2")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("unshare");
        let mut node = Node {
            name: name.to_owned(),
            init: 0,
            unshare,
            dir,
            ready: Value::Null,
        };
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if node.init == 0 {
                node.init = first_child(node.unshare.id()).unwrap_or(0);
            }
            if let Ok(text) = std::fs::read_to_string(&ready) {
                node.ready = serde_json::from_str(&text).expect("ready JSON");
                break;
            }
            let stderr =
                std::fs::read_to_string(node.dir.path().join("stderr")).unwrap_or_default();
            assert!(
                Instant::now() < deadline && node.unshare.try_wait().ok().flatten().is_none(),
                "node {name} never became ready: {stderr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_ne!(node.init, 0, "the namespace's first process");
        assert_eq!(node.ready["host"], name, "the node's own host name");
        node
    }

    /// The pid (as the node sees it) of `rank`.
    fn rank_pid(&self, rank: u32) -> u64 {
        self.ready["ranks"][rank.to_string()]
            .as_u64()
            .unwrap_or_else(|| panic!("rank {rank} on {}: {}", self.name, self.ready))
    }

    /// The launcher's pid as the node sees it.
    fn launcher(&self) -> String {
        self.ready["pid"].to_string()
    }

    /// stackscope with `args`, run inside the node.
    fn stackscope(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args([
            "--target",
            &self.init.to_string(),
            "--pid",
            "--uts",
            "--mount",
            "--",
        ])
        .arg(common::bin())
        .args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Run {
        let run = run_with_timeout(self.stackscope(args), RUN_TIMEOUT);
        run.assert_success();
        run
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.init != 0 {
            // SAFETY: plain kill(2) of the namespace's first process, ours.
            unsafe { libc::kill(self.init as i32, libc::SIGKILL) };
        }
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

fn first_child(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether namespaces can be made here; says why not in one line.
fn namespaces_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: making PID and UTS namespaces needs root");
        return false;
    }
    let ok = Command::new("unshare")
        .args(["--pid", "--uts", "--mount-proc", "--fork", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("skipped: unshare --pid --uts --mount-proc does not work here");
    }
    ok
}

fn two_nodes() -> (Node, Node) {
    (Node::start("node-a", 0), Node::start("node-b", 1))
}

#[test]
fn dumps_of_two_nodes_merge_with_the_straggler_first() {
    if !namespaces_available() {
        return;
    }
    let _serial = serial();
    let (a, b) = two_nodes();
    let stuck_pid = b.rank_pid(STUCK_RANK);
    let out = tempfile::tempdir().expect("temp dir");
    let mut files: Vec<PathBuf> = Vec::new();
    for node in [&a, &b] {
        let run = node.run(&[
            "dump",
            "--pid",
            &node.launcher(),
            "--subprocesses",
            "--json",
        ]);
        let dump: Value = serde_json::from_str(&run.stdout).expect("dump --json parses");
        let ranks: Vec<&Value> = dump["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .filter(|p| p.get("rank").is_some())
            .collect();
        assert_eq!(ranks.len(), RANKS_PER_NODE as usize, "{}", run.stdout);
        for p in &ranks {
            assert_eq!(p["world_size"], 8);
            assert_eq!(p["host"], node.name.as_str());
            assert!(p["local_rank"].as_u64().is_some_and(|l| l < 4));
        }
        let path = out.path().join(format!("dump-{}.json", node.name));
        std::fs::write(&path, &run.stdout).expect("write dump");
        files.push(path);
    }
    // The node's own text dump names the rank.
    let text = b.run(&["dump", "--pid", &b.launcher(), "--subprocesses"]);
    assert!(
        text.stdout
            .contains(&format!("Process rank {STUCK_RANK} (pid {stuck_pid})")),
        "{}",
        text.stdout
    );

    let file_args: Vec<&str> = files.iter().map(|f| f.to_str().expect("utf8")).collect();
    let mut args = vec!["merge"];
    args.extend(&file_args);
    let merged = run_with_timeout(common::stackscope(&args), RUN_TIMEOUT);
    merged.assert_success();
    let lines: Vec<&str> = merged.stdout.lines().collect();
    assert_eq!(
        lines[0], "10 processes, 8 ranks, on 2 hosts: node-a, node-b",
        "{}",
        merged.stdout
    );
    let source = common::fixture_source("torchrun_node.py");
    let stuck_line = common::marker_line(&source, "stuck-rank");
    assert!(
        lines[2].starts_with(&format!(
            "Straggler: rank {STUCK_RANK} on node-b (pid {stuck_pid}) is at stuck_rank_compute \
             (torchrun_node.py:{stuck_line}), while 7 of 8 ranks are at "
        )),
        "{}",
        merged.stdout
    );
    assert!(
        merged
            .stdout
            .contains("\n7 ranks: 0-5, 7 on 2 hosts: MainThread (idle"),
        "{}",
        merged.stdout
    );
    // The waiting ranks' stack is printed once, with the line of the collective.
    let wait_line = common::marker_line(&source, "all-reduce");
    assert_eq!(
        merged
            .stdout
            .matches(&format!("all_reduce_wait (torchrun_node.py:{wait_line})"))
            .count(),
        1,
        "{}",
        merged.stdout
    );

    args.push("--json");
    let json = run_with_timeout(common::stackscope(&args), RUN_TIMEOUT);
    json.assert_success();
    let v: Value = serde_json::from_str(&json.stdout).expect("merge --json parses");
    assert_eq!(v["ranks"], 8);
    assert_eq!(v["stragglers"][0]["rank"], STUCK_RANK);
    assert_eq!(v["stragglers"][0]["host"], "node-b");
    assert_eq!(v["stragglers"][0]["pid"], stuck_pid);
    let waiting = v["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["rank_ranges"] == "0-5, 7")
        .expect("a group of the seven waiting ranks");
    assert_eq!(waiting["ranks"].as_array().map(Vec::len), Some(7));
    assert_eq!(waiting["hosts"], serde_json::json!(["node-a", "node-b"]));
}

#[test]
fn recordings_of_two_nodes_merge_with_a_root_per_rank() {
    if !namespaces_available() {
        return;
    }
    let _serial = serial();
    let (a, b) = two_nodes();
    let out = tempfile::tempdir().expect("temp dir");
    let mut dirs: Vec<PathBuf> = Vec::new();
    for node in [&a, &b] {
        let dir = out.path().join(&node.name);
        // node-a's GPU idles at 10%, node-b's is busy at 90% (the fake NVML).
        let utilization = if node.name == "node-a" { 10 } else { 90 };
        let lib = common::fake_nvml();
        let mut cmd = node.stackscope(&["attach", "--nvml-lib", lib.to_str().expect("utf8")]);
        cmd.env(
            "STACKSCOPE_FAKE_NVML",
            format!(r#"{{"devices":[{{"utilization":{utilization}}}],"sample_period_ms":20}}"#),
        )
        .args([
            "--pid",
            &node.launcher(),
            "--subprocesses",
            "--idle",
            "--rate",
            "20",
            "--duration",
            "3",
            "-o",
            dir.to_str().expect("utf8"),
        ]);
        run_with_timeout(cmd, RUN_TIMEOUT).assert_success();
        let summary: Value =
            serde_json::from_slice(&std::fs::read(dir.join("summary.json")).expect("summary"))
                .expect("summary parses");
        assert_eq!(summary["host"], node.name.as_str());
        let ranked = summary["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .filter(|p| p.get("rank").is_some())
            .count();
        assert_eq!(ranked, RANKS_PER_NODE as usize, "{summary}");
        dirs.push(dir);
    }
    // `report` rebuilds a node's recording from its sample log with the same rank roots.
    let stuck_pid = b.rank_pid(STUCK_RANK);
    let rebuilt = out.path().join("rebuilt");
    let report = run_with_timeout(
        common::stackscope(&[
            "report",
            dirs[1].to_str().expect("utf8"),
            "-o",
            rebuilt.to_str().expect("utf8"),
        ]),
        RUN_TIMEOUT,
    );
    report.assert_success();
    let rebuilt = common::Folded::read(&rebuilt.join("stacks.folded"));
    let stuck_prefix = format!("rank {STUCK_RANK} (pid {stuck_pid}) ");
    assert!(
        rebuilt
            .stacks
            .iter()
            .any(|s| s.thread.starts_with(&stuck_prefix) && s.has_function("stuck_rank_compute")),
        "{}",
        rebuilt.excerpt()
    );

    let merged_dir = out.path().join("merged");
    let mut args = vec!["merge"];
    args.extend(dirs.iter().map(|d| d.to_str().expect("utf8")));
    args.extend(["-o", merged_dir.to_str().expect("utf8")]);
    let run = run_with_timeout(common::stackscope(&args), RUN_TIMEOUT);
    run.assert_success();

    let folded = common::Folded::read(&merged_dir.join("stacks.folded"));
    let roots: std::collections::BTreeMap<String, u64> =
        folded.stacks.iter().fold(Default::default(), |mut m, s| {
            let root = s.process.as_ref().unwrap_or(&s.thread);
            *m.entry(root.clone()).or_default() += s.count;
            m
        });
    for rank in 0..8u32 {
        let (node, host) = if rank < 4 {
            (&a, "node-a")
        } else {
            (&b, "node-b")
        };
        let root = format!("rank {rank} on {host} (pid {})", node.rank_pid(rank));
        assert!(
            roots.get(&root).is_some_and(|&n| n > 0),
            "{root} in {roots:?}"
        );
    }
    // The stuck rank's samples are all in its compute loop.
    let stuck_root = format!("rank {STUCK_RANK} on node-b (pid {stuck_pid})");
    let stuck: u64 = folded
        .stacks
        .iter()
        .filter(|s| s.thread == stuck_root && s.has_function("stuck_rank_compute"))
        .map(|s| s.count)
        .sum();
    assert!(stuck * 10 >= roots[&stuck_root] * 9, "{}", folded.excerpt());
    assert!(merged_dir.join("flamegraph.svg").is_file());

    // The rank table: every rank, its samples and top function; the stuck rank named.
    let table: Vec<&str> = run.stdout.lines().collect();
    let row = table
        .iter()
        .find(|l| l.starts_with(&format!("rank {STUCK_RANK} on node-b ")))
        .unwrap_or_else(|| panic!("a row for the stuck rank: {}", run.stdout));
    assert!(
        row.contains("stuck_rank_compute (torchrun_node.py)"),
        "{row}"
    );
    // GPU-idle share per rank: all of node-a's samples were taken while its GPU idled, none of
    // node-b's.
    for rank in 0..8u32 {
        let host = if rank < 4 { "node-a" } else { "node-b" };
        let line = table
            .iter()
            .find(|l| l.starts_with(&format!("rank {rank} on {host} ")))
            .unwrap_or_else(|| panic!("a row for rank {rank}: {}", run.stdout));
        let fields: Vec<&str> = line.split_whitespace().collect();
        let expected = if rank < 4 { "100%" } else { "0%" };
        assert_eq!(fields.get(5), Some(&expected), "{line}");
    }
    assert!(merged_dir.join("stacks-gpu-idle.folded").is_file());
    assert!(merged_dir.join("flamegraph-gpu-busy.svg").is_file());
    assert!(
        run.stdout.contains(&format!(
            "Most different from its peers: rank {STUCK_RANK} on node-b (pid {stuck_pid})"
        )),
        "{}",
        run.stdout
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(merged_dir.join("summary.json")).expect("summary"))
            .expect("merged summary parses");
    let ranks: Vec<u64> = summary["ranks"]
        .as_array()
        .expect("ranks")
        .iter()
        .filter_map(|r| r["rank"].as_u64())
        .collect();
    assert_eq!(ranks, (0..8).collect::<Vec<u64>>());
    assert_eq!(summary["most_different"]["rank"], STUCK_RANK);
    for r in summary["ranks"].as_array().expect("ranks") {
        assert!(r["samples"].as_u64().is_some_and(|n| n > 0), "{r}");
    }

    // report.html of the merged recordings: its embedded data roots every stack at its rank,
    // carries each node's GPU, and its headline has the rank table with the stuck rank marked.
    let html = std::fs::read_to_string(merged_dir.join("report.html")).expect("report.html");
    let data = html
        .split_once("id=\"stackscope-data\">")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(json, _)| json)
        .expect("embedded data");
    let data: Value = serde_json::from_str(data).expect("embedded data parses");
    let frames = data["frames"].as_array().expect("frames");
    let html_roots: std::collections::BTreeSet<&str> = data["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .filter_map(|s| frames.get(s[0].as_u64()? as usize)?.as_str())
        .collect();
    let folded_roots: std::collections::BTreeSet<&str> = roots.keys().map(String::as_str).collect();
    assert_eq!(
        html_roots, folded_roots,
        "the page's roots are the merged folded roots"
    );
    let owners: Vec<&str> = data["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .filter_map(|g| g["owner"].as_str())
        .collect();
    assert_eq!(owners, ["node-a", "node-b"]);
    assert_eq!(data["merged"]["ranks"].as_array().map(Vec::len), Some(10));
    for rank in 0..8u32 {
        let (node, host) = if rank < 4 {
            (&a, "node-a")
        } else {
            (&b, "node-b")
        };
        let cell = format!("<td>rank {rank} on {host} (pid {})", node.rank_pid(rank));
        assert!(html.contains(&cell), "no row {cell}");
    }
    assert!(
        html.contains(&format!(
            "<tr class=\"odd\"><td>rank {STUCK_RANK} on node-b (pid {stuck_pid}) <b class=\"odd-mark\">"
        )),
        "the stuck rank marked in the rank table"
    );
    let verdict = &html[html.find("id=\"verdict\"").expect("verdict")..];
    assert!(
        verdict.starts_with(&format!(
            "id=\"verdict\">rank {STUCK_RANK} on node-b (pid {stuck_pid}) differs most"
        )),
        "{}",
        &verdict[..200.min(verdict.len())]
    );
}

// ------------------------------------------------------------------ Prometheus

/// A Prometheus server of its own: a loopback port, a 1 s scrape interval, its own storage in
/// a temp dir. Stopped on Drop.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: stackscope\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
        .expect("config");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("log")).expect("log");
        let child = Command::new(prometheus_binary())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("prometheus");
        let prometheus = Prometheus {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(port, "/-/ready").map(|(status, _)| status) != Some(200) {
            assert!(Instant::now() < deadline, "Prometheus never became ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        prometheus
    }

    /// The value of an instant query's first series, if it has one.
    fn query(&self, query: &str) -> Option<String> {
        let path = format!("/api/v1/query?query={}", url_encode(query));
        let (status, body) = http_get(self.port, &path)?;
        if status != 200 {
            return None;
        }
        let v: Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1]
            .as_str()
            .map(str::to_owned)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prometheus_binary() -> PathBuf {
    PathBuf::from("/usr/bin/prometheus")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A plain HTTP/1.0 GET on the loopback: (status, body).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

fn tool_available(path: &Path) -> bool {
    path.is_file()
}

#[test]
fn prometheus_scrapes_watch_and_sees_the_stuck_rank_hung() {
    if !namespaces_available() {
        return;
    }
    let promtool = PathBuf::from("/usr/bin/promtool");
    if !tool_available(&prometheus_binary()) || !tool_available(&promtool) {
        println!("skipped: Prometheus is not installed (apt-get install prometheus)");
        return;
    }
    let _serial = serial();
    let node = Node::start("node-b", 1);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let out = tempfile::tempdir().expect("temp dir");
    let watch = spawn_stackscope(node.stackscope(&[
        "watch",
        "--pid",
        &node.launcher(),
        "--subprocesses",
        "--hang-after",
        "2",
        "--gpu",
        "off",
        "--metrics-addr",
        &addr,
        "-o",
        out.path().to_str().expect("utf8"),
    ]));
    let prometheus = Prometheus::start(&addr);

    let query = format!("stackscope_hung{{rank=\"{STUCK_RANK}\",host=\"node-b\"}}");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let last = (
            prometheus.query(&query),
            prometheus.query("up{job=\"stackscope\"}"),
        );
        if last.0.as_deref() == Some("1") && last.1.as_deref() == Some("1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never saw rank {STUCK_RANK} hung: {query} = {:?}, up = {:?}",
            last.0,
            last.1
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // The series carries the stuck rank's own pid, as the node sees it.
    let pid = node.rank_pid(STUCK_RANK);
    assert_eq!(
        prometheus
            .query(&format!(
                "stackscope_hung{{rank=\"{STUCK_RANK}\",pid=\"{pid}\"}}"
            ))
            .as_deref(),
        Some("1")
    );
    assert!(prometheus
        .query("stackscope_samples_total")
        .and_then(|v| v.parse::<f64>().ok())
        .is_some_and(|n| n > 0.0));

    // The page itself passes Prometheus's own checker.
    let (status, page) = http_get(port, "/metrics").expect("/metrics answers");
    assert_eq!(status, 200);
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("write page");
    let result = check.wait_with_output().expect("promtool output");
    assert!(
        result.status.success(),
        "promtool check metrics: {}{}\n{page}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(page.contains("# TYPE stackscope_hung gauge"), "{page}");
    assert!(
        page.contains("stackscope_stack_unchanged_seconds{pid="),
        "{page}"
    );

    // The node going away ends the watch (it ran inside the node's PID namespace).
    drop(prometheus);
    drop(node);
    let _ = watch.finish(Duration::from_secs(30));
}

#[test]
fn attach_serves_metrics_per_rank_while_it_records() {
    let _serial = serial();
    // One node of a job without namespaces: the launcher and two ranks, rank 1 stuck.
    let fixture =
        common::Fixture::start("torchrun_node.py", &["--nproc", "2", "--stuck-rank", "1"]);
    let ready = fixture.ready_json();
    let stuck = ready["ranks"]["1"].as_u64().expect("rank 1's pid");
    let port = free_port();
    let out = common::OutDir::new();
    let launcher = fixture.pid.to_string();
    // A GPU idling at 10% (the fake NVML): GPU utilization and GPU-idle samples are served too.
    let mut cmd = common::stackscope(&["attach", "--nvml-lib"]);
    cmd.arg(common::fake_nvml())
        .env(
            "STACKSCOPE_FAKE_NVML",
            r#"{"devices":[{"utilization":10}],"sample_period_ms":20}"#,
        )
        .args([
            "--pid",
            &launcher,
            "--subprocesses",
            "--idle",
            "--rate",
            "20",
            "--duration",
            "60",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "-o",
            out.arg(),
        ]);
    let attach = spawn_stackscope(cmd);
    let series = format!("stackscope_stack_unchanged_seconds{{pid=\"{stuck}\",rank=\"1\",host=\"");
    let deadline = Instant::now() + Duration::from_secs(60);
    let page = loop {
        if let Some((200, page)) = http_get(port, "/metrics") {
            let samples = page
                .lines()
                .find_map(|l| l.strip_prefix("stackscope_samples_total "))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            let idle_samples = page
                .lines()
                .find_map(|l| l.strip_prefix("stackscope_gpu_idle_samples_total "))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            if samples > 0 && idle_samples > 0 && page.contains(&series) {
                break page;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no samples of rank 1 at /metrics"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        page.contains("# TYPE stackscope_dropped_samples_total counter"),
        "{page}"
    );
    assert!(
        page.contains("stackscope_gpu_utilization_percent{gpu=\"0\"} 10\n"),
        "{page}"
    );
    // Anything but /metrics is a 404.
    assert_eq!(http_get(port, "/").map(|(status, _)| status), Some(404));
    attach.signal("INT");
    let run = attach.finish(Duration::from_secs(60));
    run.assert_success();
}
