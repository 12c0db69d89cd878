//! When a process started, on the wall clock: its start in clock ticks after the machine
//! booted (`/proc/PID/stat`), after the boot's own time (`btime` of `/proc/stat`).

use std::fs;

use super::StatLine;

/// When `pid` started, in seconds of the Unix epoch; `None` for a process that is gone.
pub fn started_secs(pid: u32) -> Option<f64> {
    let ticks = start_ticks(pid)?;
    Some(boot_secs()? as f64 + ticks as f64 / ticks_per_sec()?)
}

/// When `pid` started, in clock ticks since boot: with the pid, it names one process even
/// after the pid is reused.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read(format!("/proc/{pid}/stat")).ok()?;
    StatLine::parse(&stat)?.start_ticks()
}

/// When the machine booted, in seconds of the Unix epoch.
fn boot_secs() -> Option<u64> {
    boot_secs_in(&fs::read_to_string("/proc/stat").ok()?)
}

fn boot_secs_in(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|secs| secs.trim().parse().ok())
}

fn ticks_per_sec() -> Option<f64> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then_some(ticks as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_process_started_before_now_and_after_the_boot() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        let started = started_secs(std::process::id()).expect("our own start");
        assert!(started <= now + 0.02, "{started} > {now}");
        assert!(
            started > now - 24.0 * 3600.0,
            "a test process runs for less than a day"
        );
        assert_eq!(
            boot_secs_in("cpu 1 2\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(boot_secs_in("cpu 1 2\n"), None);
    }
}
