//! The labels of process root frames in the flamegraph (`process PID COMMAND`, `rank 6 (pid
//! 5124) COMMAND`), for one process and for a group of like ones, and the cut of a command line
//! they share.

/// How much of a command line the root frame shows: enough for `python train.py --config x`.
pub const ROOT_COMMAND_CHARS: usize = 60;

/// The root frame's label: `process PID COMMAND`, the command cut to [`ROOT_COMMAND_CHARS`].
/// The stack table makes it safe for the folded format (no ';', no newline).
pub fn root_label(pid: u32, command_line: &str) -> String {
    let command = shorten(command_line.trim(), ROOT_COMMAND_CHARS);
    if command.is_empty() {
        format!("process {pid}")
    } else {
        format!("process {pid} {command}")
    }
}

/// The root frame of a process a launcher started: `rank 6 (pid 5124) COMMAND`.
pub fn ranked_root_label(pid: u32, rank: u32, command_line: &str) -> String {
    let command = shorten(command_line.trim(), ROOT_COMMAND_CHARS);
    let name = stackscope_event::process_name(pid, Some(rank));
    if command.is_empty() {
        name
    } else {
        format!("{name} {command}")
    }
}

/// At most `chars` characters of `text`, the last three `...` when it was cut.
pub fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(chars.saturating_sub(3)).collect();
    out.push_str("...");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_label_is_short_and_plain() {
        assert_eq!(
            root_label(12, "python train.py"),
            "process 12 python train.py"
        );
        assert_eq!(root_label(12, ""), "process 12");
        assert_eq!(
            ranked_root_label(12, 6, "python train.py"),
            "rank 6 (pid 12) python train.py"
        );
        let long = format!("python {}", "x".repeat(100));
        let label = root_label(3, &long);
        assert_eq!(
            label.chars().count(),
            "process 3 ".len() + ROOT_COMMAND_CHARS
        );
        assert!(label.ends_with("..."), "{label}");
    }
}
