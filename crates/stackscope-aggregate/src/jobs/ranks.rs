//! Recordings from many nodes merged into one profile: every stack rooted at its rank
//! (`rank 6 on node-b (pid 5124)`), a table of ranks (samples, GPU-idle share, top function),
//! and the rank whose profile differs most from its peers'.
//!
//! Works on folded lines (`root;thread;frame;frame COUNT`), what each recording wrote, so a
//! recording merges whichever version of stackscope wrote it.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::identity::{function_of, process_root_pid, process_root_rank};
use super::merge::ProcessPlace;

/// One recording directory, as read by the binary.
#[derive(Debug, Clone, Default)]
pub struct RecordingInput {
    /// The host it ran on (from its summary), else a name for the directory.
    pub host: String,
    /// The recorded process.
    pub pid: u32,
    pub rank: Option<u32>,
    /// Rank of each process of a `--subprocesses` recording, by pid.
    pub process_ranks: HashMap<u32, u32>,
    pub all: Vec<(String, u64)>,
    /// The GPU views, when the recording had GPU data.
    pub gpu_idle: Option<Vec<(String, u64)>>,
    pub gpu_busy: Option<Vec<(String, u64)>>,
    /// The recording's trainer while the GPU idled, from `gpu.while_idle.trainer` of its
    /// summary, when it names one: its pid, and where it was (`main (train.py:136) waiting in
    /// Queue.get`).
    pub trainer: Option<(u32, String)>,
    /// What fixing its bottleneck buys, from `gpu.if_fixed` of its summary: `input_pipeline:
    /// steps up to 3.4x faster`; said on its trainer's row.
    pub bottleneck: Option<String>,
}

/// The recording whose trainer is process `pid` of `host`.
fn trainer_of<'a>(
    inputs: &'a [RecordingInput],
    host: &str,
    pid: u32,
) -> Option<&'a RecordingInput> {
    inputs.iter().filter(|i| i.host == host).find(|i| {
        i.trainer
            .as_ref()
            .is_some_and(|(trainer, _)| *trainer == pid)
    })
}

impl RecordingInput {
    fn trainer_line(&self) -> String {
        self.trainer
            .as_ref()
            .map(|(_, line)| line.clone())
            .unwrap_or_default()
    }

    /// Whether `place` is a process of this recording.
    pub fn holds(&self, place: &ProcessPlace) -> bool {
        self.host == place.host
            && (self.pid == place.pid || self.process_ranks.contains_key(&place.pid))
    }
}

/// One row of the rank table.
#[derive(Debug, Clone, Serialize)]
pub struct RankRow {
    #[serde(flatten)]
    pub place: ProcessPlace,
    pub samples: u64,
    /// Share of its samples taken while the GPU idled, when there was GPU data.
    pub gpu_idle_share: Option<f64>,
    /// The function it spent most samples in (innermost frame), `function (file)`.
    pub top_function: Option<String>,
    /// That function's share of its samples.
    pub top_function_share: Option<f64>,
    /// Where its trainer was while the GPU idled, when this process holds its recording's
    /// trainer: `main (train.py:136) waiting in Queue.get`.
    pub trainer: Option<String>,
    /// Its recording's bottleneck and what fixing it buys, on the trainer's row.
    pub bottleneck: Option<String>,
}

/// The rank furthest from the others.
#[derive(Debug, Clone, Serialize)]
pub struct OddRank {
    #[serde(flatten)]
    pub place: ProcessPlace,
    /// Half the L1 distance between its share of samples per function and the mean of its
    /// peers': 0 the same profile, 1 nothing in common.
    pub distance: f64,
    /// The next largest distance, for scale.
    pub next_distance: f64,
    pub top_function: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MergedRecordings {
    pub all: Vec<(String, u64)>,
    pub gpu_idle: Vec<(String, u64)>,
    pub gpu_busy: Vec<(String, u64)>,
    /// Whether any recording had GPU data.
    pub gpu: bool,
    /// Ranked processes by rank, then processes without one.
    pub ranks: Vec<RankRow>,
    /// Named when at least three processes were compared.
    pub most_different: Option<OddRank>,
}

/// Merges recordings: roots every stack at its process, named by rank and host.
pub fn merge_recordings(inputs: &[RecordingInput]) -> MergedRecordings {
    let folded = Folded::of(inputs);
    let ranked = rank_rows(inputs, &folded.stats);
    let leaders = leader_pids(inputs, &ranked);
    let is_leader = |row: &RankRow| {
        row.place.rank.is_some_and(|rank| {
            leaders.get(&(row.place.host.clone(), rank)) == Some(&row.place.pid)
        })
    };
    let any_ranked = ranked.iter().filter(|r| is_leader(r)).count() >= 3;
    let profiles: Vec<(&RankRow, &HashMap<String, u64>)> = ranked
        .iter()
        .filter(|row| !any_ranked || is_leader(row))
        .filter_map(|row| {
            folded
                .stats
                .get(&(row.place.rank, row.place.host.clone(), row.place.pid))
                .map(|s| (row, &s.functions))
        })
        .filter(|(row, _)| row.samples > 0)
        .collect();
    let most_different = most_different(&profiles);
    MergedRecordings {
        all: folded.all.into_iter().collect(),
        gpu_idle: folded.idle.into_iter().collect(),
        gpu_busy: folded.busy.into_iter().collect(),
        gpu: folded.gpu,
        ranks: ranked,
        most_different,
    }
}

/// A process of the merged recordings: its rank, host and pid.
type ProcessKey = (Option<u32>, String, u32);

/// Per process: samples, idle and busy samples, samples per innermost function.
#[derive(Default)]
struct Stats {
    samples: u64,
    idle: u64,
    busy: u64,
    functions: HashMap<String, u64>,
}

/// The recordings' folded lines re-rooted at their processes and summed, with each
/// process's counts.
#[derive(Default)]
struct Folded {
    all: BTreeMap<String, u64>,
    idle: BTreeMap<String, u64>,
    busy: BTreeMap<String, u64>,
    stats: BTreeMap<ProcessKey, Stats>,
    /// Whether any recording had GPU data.
    gpu: bool,
}

impl Folded {
    fn of(inputs: &[RecordingInput]) -> Folded {
        let mut f = Folded::default();
        for input in inputs {
            for (stack, count) in &input.all {
                let (place, rest) = rerooted(input, stack);
                *f.all.entry(join(&place, rest)).or_default() += count;
                let s = f
                    .stats
                    .entry((place.rank, place.host.clone(), place.pid))
                    .or_default();
                s.samples += count;
                if let Some(leaf) = rest.rsplit(';').next() {
                    *s.functions.entry(function_of(leaf)).or_default() += count;
                }
            }
            for (view, idle_view) in [(&input.gpu_idle, true), (&input.gpu_busy, false)] {
                let Some(lines) = view else { continue };
                f.gpu = true;
                for (stack, count) in lines {
                    let (place, rest) = rerooted(input, stack);
                    let target = if idle_view { &mut f.idle } else { &mut f.busy };
                    *target.entry(join(&place, rest)).or_default() += count;
                    let s = f
                        .stats
                        .entry((place.rank, place.host.clone(), place.pid))
                        .or_default();
                    if idle_view {
                        s.idle += count;
                    } else {
                        s.busy += count;
                    }
                }
            }
        }
        f
    }
}

/// The rank table's rows: ranked processes first (the BTreeMap puts `None` first), in rank
/// order, then processes without a rank.
fn rank_rows(inputs: &[RecordingInput], stats: &BTreeMap<ProcessKey, Stats>) -> Vec<RankRow> {
    let ranks: Vec<RankRow> = stats
        .iter()
        .map(|((rank, host, pid), s)| {
            let top = top_function(&s.functions);
            RankRow {
                place: ProcessPlace {
                    host: host.clone(),
                    pid: *pid,
                    rank: *rank,
                },
                samples: s.samples,
                gpu_idle_share: (s.idle + s.busy > 0)
                    .then(|| s.idle as f64 / (s.idle + s.busy) as f64),
                top_function_share: top
                    .as_ref()
                    .map(|(_, n)| *n as f64 / s.samples.max(1) as f64),
                top_function: top.map(|(f, _)| f),
                trainer: trainer_of(inputs, host, *pid).map(|i| i.trainer_line()),
                bottleneck: trainer_of(inputs, host, *pid).and_then(|i| i.bottleneck.clone()),
            }
        })
        .collect();
    let (mut ranked, unranked): (Vec<RankRow>, Vec<RankRow>) =
        ranks.into_iter().partition(|r| r.place.rank.is_some());
    ranked.extend(unranked);
    ranked
}

/// The process that stands for each rank on each host: `(host, rank)` to its pid.
///
/// Ranks are compared with ranks: a launcher or a helper process is nobody's peer. A
/// launcher that Slurm or MPI gave a task rank (the recorded process, whose children carry
/// other ranks) is not a rank; a rank's DataLoader workers inherit its rank, and the oldest
/// process of a rank on a host (the lowest pid) stands for it.
fn leader_pids(inputs: &[RecordingInput], ranked: &[RankRow]) -> HashMap<(String, u32), u32> {
    let launchers: Vec<(String, u32)> = inputs
        .iter()
        .filter(|i| i.process_ranks.values().any(|&r| Some(r) != i.rank))
        .map(|i| (i.host.clone(), i.pid))
        .collect();
    let mut leaders: HashMap<(String, u32), u32> = HashMap::new();
    for row in ranked {
        if let Some(rank) = row.place.rank {
            if launchers.contains(&(row.place.host.clone(), row.place.pid)) {
                continue;
            }
            let pid = leaders
                .entry((row.place.host.clone(), rank))
                .or_insert(row.place.pid);
            *pid = (*pid).min(row.place.pid);
        }
    }
    leaders
}

/// The process a folded line belongs to, and the line without a process root. Given only a
/// stack's first frame, the rest is empty when that frame was a process root (report.html's
/// merged page re-roots its stacks this way, as the merged folded lines are).
pub fn rerooted<'s>(input: &RecordingInput, stack: &'s str) -> (ProcessPlace, &'s str) {
    let (first, rest) = stack.split_once(';').unwrap_or((stack, ""));
    if let Some(pid) = process_root_pid(first) {
        // `rank N (pid P) ...` roots carry the rank themselves.
        let rank = input
            .process_ranks
            .get(&pid)
            .copied()
            .or_else(|| process_root_rank(first));
        let place = ProcessPlace {
            host: input.host.clone(),
            pid,
            rank: rank.or((pid == input.pid).then_some(input.rank).flatten()),
        };
        return (place, rest);
    }
    let place = ProcessPlace {
        host: input.host.clone(),
        pid: input.pid,
        rank: input.rank,
    };
    (place, stack)
}

fn join(place: &ProcessPlace, rest: &str) -> String {
    if rest.is_empty() {
        place.describe()
    } else {
        format!("{};{rest}", place.describe())
    }
}

fn top_function(functions: &HashMap<String, u64>) -> Option<(String, u64)> {
    functions
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(f, n)| (f.clone(), *n))
}

fn most_different(profiles: &[(&RankRow, &HashMap<String, u64>)]) -> Option<OddRank> {
    if profiles.len() < 3 {
        return None;
    }
    let shares: Vec<HashMap<&str, f64>> = profiles
        .iter()
        .map(|(row, functions)| {
            functions
                .iter()
                .map(|(f, n)| (f.as_str(), *n as f64 / row.samples as f64))
                .collect()
        })
        .collect();
    let mut distances: Vec<(f64, usize)> = (0..shares.len())
        .map(|i| {
            let mut mean: HashMap<&str, f64> = HashMap::new();
            let others = (shares.len() - 1) as f64;
            for (j, s) in shares.iter().enumerate() {
                if j != i {
                    for (f, v) in s {
                        *mean.entry(f).or_default() += v / others;
                    }
                }
            }
            let mut keys: Vec<&str> = mean.keys().copied().collect();
            keys.extend(shares[i].keys().copied());
            keys.sort_unstable();
            keys.dedup();
            let l1: f64 = keys
                .iter()
                .map(|k| {
                    (shares[i].get(k).copied().unwrap_or(0.0) - mean.get(k).copied().unwrap_or(0.0))
                        .abs()
                })
                .sum();
            (l1 / 2.0, i)
        })
        .collect();
    distances.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let (distance, at) = distances[0];
    let row = profiles[at].0;
    Some(OddRank {
        place: row.place.clone(),
        distance,
        next_distance: distances.get(1).map_or(0.0, |d| d.0),
        top_function: row.top_function.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[(&str, u64)]) -> Vec<(String, u64)> {
        v.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect()
    }

    #[test]
    fn process_roots_become_rank_roots_and_the_odd_rank_is_named() {
        let a = RecordingInput {
            host: "node-a".into(),
            pid: 10,
            rank: None,
            process_ranks: HashMap::from([(11, 0), (12, 1)]),
            all: lines(&[
                ("process 10 torchrun;MainThread;wait (run.py:3)", 5),
                (
                    "rank 0 (pid 11) python t.py;MainThread;all_reduce (t.py:40)",
                    90,
                ),
                ("process 12 python t.py;MainThread;all_reduce (t.py:40)", 88),
            ]),
            gpu_idle: Some(lines(&[(
                "rank 0 (pid 11) python t.py;MainThread;all_reduce (t.py:40)",
                45,
            )])),
            gpu_busy: Some(lines(&[(
                "rank 0 (pid 11) python t.py;MainThread;all_reduce (t.py:40)",
                45,
            )])),
            trainer: None,
            bottleneck: None,
        };
        let b = RecordingInput {
            host: "node-b".into(),
            pid: 20,
            rank: None,
            process_ranks: HashMap::from([(21, 2), (22, 3)]),
            all: lines(&[
                (
                    "rank 2 (pid 21) python t.py;MainThread;all_reduce (t.py:40)",
                    90,
                ),
                (
                    "rank 3 (pid 22) python t.py;MainThread;compute (t.py:30)",
                    80,
                ),
                (
                    "rank 3 (pid 22) python t.py;MainThread;all_reduce (t.py:41)",
                    10,
                ),
            ]),
            gpu_idle: None,
            gpu_busy: None,
            trainer: None,
            bottleneck: None,
        };
        let merged = merge_recordings(&[a, b]);
        assert!(merged.all.contains(&(
            "rank 1 on node-a (pid 12);MainThread;all_reduce (t.py:40)".into(),
            88
        )));
        assert!(merged
            .all
            .contains(&("process 10 on node-a;MainThread;wait (run.py:3)".into(), 5)));
        let ranks: Vec<Option<u32>> = merged.ranks.iter().map(|r| r.place.rank).collect();
        assert_eq!(ranks, vec![Some(0), Some(1), Some(2), Some(3), None]);
        assert_eq!(merged.ranks[0].gpu_idle_share, Some(0.5));
        assert_eq!(merged.ranks[1].gpu_idle_share, None);
        assert_eq!(
            merged.ranks[3].top_function.as_deref(),
            Some("compute (t.py)")
        );
        let odd = merged.most_different.expect("named");
        assert_eq!(odd.place.describe(), "rank 3 on node-b (pid 22)");
        assert!(odd.distance > 0.7 && odd.next_distance < 0.5, "{odd:?}");
    }

    #[test]
    fn workers_and_a_slurm_launcher_are_not_compared() {
        // torchrun under srun (SLURM_PROCID=1, so "rank 1"), ranks 4-7, rank 5's DataLoader
        // worker (inherited RANK=5) busy elsewhere than every rank.
        let mut all = vec![(
            "rank 1 (pid 10) torchrun;MainThread;wait (run.py:3)".to_owned(),
            50,
        )];
        for (rank, pid) in [(4, 11), (5, 12), (6, 13), (7, 14)] {
            let f = if rank == 6 { "compute" } else { "all_reduce" };
            all.push((
                format!("rank {rank} (pid {pid}) p;MainThread;{f} (t.py:4)"),
                50,
            ));
        }
        all.push((
            "rank 5 (pid 30) p;MainThread;decode (w.py:2)".to_owned(),
            50,
        ));
        let input = RecordingInput {
            host: "node-b".into(),
            pid: 10,
            rank: Some(1),
            process_ranks: HashMap::from([(10, 1), (11, 4), (12, 5), (13, 6), (14, 7), (30, 5)]),
            all,
            ..RecordingInput::default()
        };
        let merged = merge_recordings(&[input]);
        let odd = merged.most_different.expect("named");
        assert_eq!(odd.place.describe(), "rank 6 on node-b (pid 13)");
        assert_eq!(merged.ranks.len(), 6, "every process keeps its row");
    }

    #[test]
    fn a_one_process_recording_is_rooted_at_its_rank() {
        let input = RecordingInput {
            host: "n1".into(),
            pid: 7,
            rank: Some(4),
            all: lines(&[("MainThread;step (t.py:9)", 3)]),
            ..RecordingInput::default()
        };
        let merged = merge_recordings(&[input]);
        assert_eq!(
            merged.all,
            lines(&[("rank 4 on n1 (pid 7);MainThread;step (t.py:9)", 3)])
        );
        assert!(merged.most_different.is_none());
    }

    #[test]
    fn each_recordings_trainer_is_on_its_process_row() {
        let waiting = "main (train.py:136) waiting in Queue.get";
        let a = RecordingInput {
            host: "node-a".into(),
            pid: 10,
            rank: Some(0),
            process_ranks: HashMap::from([(10, 0), (11, 0)]),
            all: lines(&[
                (
                    "process 10 python t.py;MainThread;poll (connection.py:3)",
                    9,
                ),
                ("process 11 python t.py;MainThread;augment (t.py:56)", 9),
            ]),
            trainer: Some((10, waiting.to_owned())),
            bottleneck: None,
            ..RecordingInput::default()
        };
        let b = RecordingInput {
            host: "node-b".into(),
            pid: 10,
            rank: Some(1),
            all: lines(&[("MainThread;step (t.py:9)", 3)]),
            trainer: Some((10, "main (train.py:136)".to_owned())),
            bottleneck: None,
            ..RecordingInput::default()
        };
        let merged = merge_recordings(&[a, b]);
        let rows: Vec<(String, Option<&str>)> = merged
            .ranks
            .iter()
            .map(|r| (r.place.describe(), r.trainer.as_deref()))
            .collect();
        assert_eq!(
            rows,
            vec![
                (
                    "rank 0 on node-a (pid 10)".to_owned(),
                    Some("main (train.py:136) waiting in Queue.get")
                ),
                ("rank 0 on node-a (pid 11)".to_owned(), None),
                (
                    "rank 1 on node-b (pid 10)".to_owned(),
                    Some("main (train.py:136)")
                ),
            ]
        );
    }
}
