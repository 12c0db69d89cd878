//! Where a process sits in a distributed job: its rank, as the launcher (torchrun, DeepSpeed,
//! Accelerate, Slurm, MPI) told it through its environment.

use serde::{Deserialize, Serialize};

/// A process's place in its job. Every field is absent for a process no launcher started.
///
/// Serialized flat (`rank`, `local_rank`, `world_size`, `group_rank` beside the process's other
/// fields), absent fields left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RankInfo {
    /// The global rank (`RANK`, else `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The rank on its node (`LOCAL_RANK`, `SLURM_LOCALID`, `OMPI_COMM_WORLD_LOCAL_RANK`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    /// How many ranks the job has (`WORLD_SIZE`, `SLURM_NTASKS`, `OMPI_COMM_WORLD_SIZE`,
    /// `PMI_SIZE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// The node's rank among the job's nodes (`GROUP_RANK`, torchrun's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_rank: Option<u32>,
}

/// The variables each field is read from, first found wins: torchrun's (also set by DeepSpeed
/// and Accelerate) before the batch system's and MPI's, which describe the launcher's task
/// rather than the Python rank when a launcher runs under them.
const RANK_VARS: &[&str] = &["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"];
const LOCAL_RANK_VARS: &[&str] = &["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"];
const WORLD_SIZE_VARS: &[&str] = &[
    "WORLD_SIZE",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
];
const GROUP_RANK_VARS: &[&str] = &["GROUP_RANK"];

impl RankInfo {
    /// Reads the launchers' variables from an environment block as `/proc/PID/environ` holds
    /// it: `NAME=value` entries separated by NUL bytes. Values that are not numbers are ignored.
    pub fn from_environ(environ: &[u8]) -> RankInfo {
        let vars: Vec<(&[u8], &[u8])> = environ
            .split(|&b| b == 0)
            .filter_map(|entry| {
                let eq = entry.iter().position(|&b| b == b'=')?;
                Some((&entry[..eq], &entry[eq + 1..]))
            })
            .collect();
        let first = |names: &[&str]| {
            names.iter().find_map(|name| {
                vars.iter()
                    .find(|(k, _)| *k == name.as_bytes())
                    .and_then(|(_, v)| std::str::from_utf8(v).ok())
                    .and_then(|v| v.trim().parse::<u32>().ok())
            })
        };
        RankInfo {
            rank: first(RANK_VARS),
            local_rank: first(LOCAL_RANK_VARS),
            world_size: first(WORLD_SIZE_VARS),
            group_rank: first(GROUP_RANK_VARS),
        }
    }

    /// Reads `/proc/PID/environ`; a process whose environment cannot be read has no rank.
    ///
    /// torchrun started by `srun` or `mpirun` has the batch system's task rank (`SLURM_PROCID`)
    /// but is no rank of the job: its children are, with torchrun's `RANK`. Such a launcher
    /// (no `RANK` of its own, children that have one) is given no rank.
    pub fn of_process(pid: u32) -> RankInfo {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            return RankInfo::default();
        };
        let info = RankInfo::from_environ(&environ);
        if info.rank.is_some() && !has_var(&environ, "RANK") && children_have_rank(pid) {
            return RankInfo::default();
        }
        info
    }

    pub fn is_empty(&self) -> bool {
        self.rank.is_none()
    }
}

fn has_var(environ: &[u8], name: &str) -> bool {
    environ.split(|&b| b == 0).any(|entry| {
        entry.len() > name.len() && entry.starts_with(name.as_bytes()) && entry[name.len()] == b'='
    })
}

/// Whether a child of `pid` has torchrun's `RANK` in its environment.
fn children_have_rank(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .any(|child| {
            std::fs::read(format!("/proc/{child}/environ"))
                .is_ok_and(|environ| has_var(&environ, "RANK"))
        })
}

/// How a process is named to a reader: `rank 6 (pid 5124)` when it has a rank, else
/// `process 5124`.
pub fn process_name(pid: u32, rank: Option<u32>) -> String {
    match rank {
        Some(rank) => format!("rank {rank} (pid {pid})"),
        None => format!("process {pid}"),
    }
}

/// This machine's host name (what the per-node agent reports as `host`); `None` when the
/// system will not say.
pub fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchrun_variables_win_over_slurm() {
        let env =
            b"PATH=/usr/bin\0SLURM_PROCID=3\0RANK=6\0LOCAL_RANK=2\0WORLD_SIZE=8\0GROUP_RANK=1\0";
        let r = RankInfo::from_environ(env);
        assert_eq!(
            r,
            RankInfo {
                rank: Some(6),
                local_rank: Some(2),
                world_size: Some(8),
                group_rank: Some(1)
            }
        );
    }

    #[test]
    fn mpi_and_slurm_alone_give_a_rank() {
        assert_eq!(RankInfo::from_environ(b"PMI_RANK=4\0").rank, Some(4));
        assert_eq!(
            RankInfo::from_environ(b"OMPI_COMM_WORLD_RANK=9\0OMPI_COMM_WORLD_SIZE=16").world_size,
            Some(16)
        );
        let slurm = RankInfo::from_environ(b"SLURM_PROCID=12\0SLURM_LOCALID=4\0SLURM_NTASKS=32\0");
        assert_eq!((slurm.rank, slurm.local_rank), (Some(12), Some(4)));
    }

    #[test]
    fn variables_are_matched_by_whole_name() {
        assert!(has_var(b"A=1\0RANK=3\0", "RANK"));
        assert!(!has_var(b"LOCAL_RANK=3\0RANKS=2\0", "RANK"));
    }

    #[test]
    fn nothing_or_garbage_is_no_rank() {
        assert!(RankInfo::from_environ(b"").is_empty());
        assert!(RankInfo::from_environ(b"RANK=abc\0RANKING=3\0").is_empty());
        assert_eq!(process_name(5, None), "process 5");
        assert_eq!(process_name(5124, Some(6)), "rank 6 (pid 5124)");
    }
}
