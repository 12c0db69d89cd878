//! Helper processes: those the standard library and common launchers start beside the
//! workers, which are never the workers' peers.
//!
//! A spawn-based multiprocessing job (every PyTorch DataLoader with workers on some setups)
//! has multiprocessing's resource tracker as a sibling of its workers, waiting in its own
//! `main`; compared with the workers it would always be the odd one out. The fork server and
//! torch.distributed's elastic agent are the same kind of process.

use stackscope_event::ProcessDump;

/// Command-line fragments and the helper they name.
const BY_COMMAND_LINE: &[(&str, &str)] = &[
    (
        "multiprocessing.resource_tracker",
        "multiprocessing resource tracker",
    ),
    (
        "multiprocessing.semaphore_tracker",
        "multiprocessing semaphore tracker",
    ),
    ("multiprocessing.forkserver", "multiprocessing fork server"),
    ("torch.distributed.run", "torch.distributed elastic agent"),
    (
        "torch.distributed.launch",
        "torch.distributed elastic agent",
    ),
    (
        "torch/distributed/run.py",
        "torch.distributed elastic agent",
    ),
    (
        "torch.distributed.elastic",
        "torch.distributed elastic agent",
    ),
    ("bin/torchrun", "torch.distributed elastic agent"),
];

/// Outermost frames (file ending, function) that say the same when the command line does not
/// (a helper started some other way).
const BY_ENTRY_FRAME: &[(&str, &str, &str)] = &[
    (
        "resource_tracker.py",
        "main",
        "multiprocessing resource tracker",
    ),
    (
        "semaphore_tracker.py",
        "main",
        "multiprocessing semaphore tracker",
    ),
    ("forkserver.py", "main", "multiprocessing fork server"),
];

/// What kind of helper a process with this command line is, if the command line says.
/// A process's role in the job's tree, for `processes_ended`: `rank N` (a launcher's rank),
/// `main process` (the one stackscope was given), `helper (KIND)`, or `worker`.
pub fn process_role(pid: u32, root: u32, rank: Option<u32>, command_line: &str) -> String {
    match (rank, helper_by_command_line(command_line)) {
        (Some(rank), _) => format!("rank {rank}"),
        _ if pid == root => "main process".to_owned(),
        (None, Some(kind)) => format!("helper ({kind})"),
        (None, None) => "worker".to_owned(),
    }
}

pub fn helper_by_command_line(command_line: &str) -> Option<&'static str> {
    BY_COMMAND_LINE
        .iter()
        .find(|(fragment, _)| command_line.contains(fragment))
        .map(|(_, kind)| *kind)
}

/// What kind of helper `process` is, if it is one.
pub fn helper_kind(process: &ProcessDump) -> Option<&'static str> {
    let by_command = helper_by_command_line(&process.command_line);
    if by_command.is_some() {
        return by_command;
    }
    // The main thread's outermost frames, from the entry point inward.
    let main = process
        .threads
        .iter()
        .find(|t| t.name.as_deref() == Some("MainThread"))
        .or_else(|| process.threads.first())?;
    main.frames.iter().rev().take(3).find_map(|frame| {
        BY_ENTRY_FRAME
            .iter()
            .find(|(file, function, _)| {
                frame.file.ends_with(file) && frame.function.rsplit('.').next() == Some(*function)
            })
            .map(|(_, _, kind)| *kind)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::ThreadState;
    use stackscope_testkit::dumps;

    fn process(command_line: &str, frames: &[(&str, &str)]) -> ProcessDump {
        let frames = frames
            .iter()
            .map(|(function, file)| dumps::frame(function, file, 1))
            .collect();
        let main = dumps::thread("MainThread", 7, ThreadState::WaitingOnIo, frames);
        ProcessDump {
            parent_pid: Some(1),
            ..dumps::process(7, command_line, vec![main])
        }
    }

    #[test]
    fn helpers_are_known_by_command_line_or_entry_point() {
        let tracker = process(
            "python3 -c from multiprocessing.resource_tracker import main;main(5)",
            &[],
        );
        assert_eq!(
            helper_kind(&tracker),
            Some("multiprocessing resource tracker")
        );
        let agent = process(
            "/venv/bin/python /venv/bin/torchrun --nproc-per-node 8 t.py",
            &[],
        );
        assert_eq!(helper_kind(&agent), Some("torch.distributed elastic agent"));
        let by_frame = process(
            "python3 -c something",
            &[("read", "os.py"), ("main", "multiprocessing/forkserver.py")],
        );
        assert_eq!(helper_kind(&by_frame), Some("multiprocessing fork server"));
        let worker = process(
            "python3 -c from multiprocessing.spawn import spawn_main; spawn_main()",
            &[
                ("feed_worker", "job.py"),
                ("_main", "multiprocessing/spawn.py"),
            ],
        );
        assert_eq!(helper_kind(&worker), None);
    }
}
