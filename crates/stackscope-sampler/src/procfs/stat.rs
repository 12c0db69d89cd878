//! One line of `/proc/PID/stat` or `/proc/PID/task/TID/stat` (proc(5)):
//! `pid (comm) state ppid ...`, parsed in one place.
//!
//! The command name in parentheses is whatever the process or thread named itself: it may
//! hold spaces, `(`, `)` and `) (`, so the fields that follow it are found after the LAST `)`
//! on the line. A line cut short (a torn or truncated read) answers None for the fields it
//! lacks, never a field of the wrong place.

/// A thread's (or a process's) scheduler state, as the letter of its stat line says (`R`,
/// `S`, `D`, `T`, `t`, `Z`, ...; proc(5)): the one reading of that letter for every reader of
/// it (the liveness checks, the stop checks, the idle rule, the fast reader's thread states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcState(pub(crate) u8);

impl ProcState {
    /// Running or runnable (`R`).
    pub(crate) const RUNNING: ProcState = ProcState(b'R');

    /// The letter itself.
    pub fn letter(self) -> char {
        char::from(self.0)
    }

    /// Running or runnable.
    pub fn is_running(self) -> bool {
        self.0 == b'R'
    }

    /// Asleep in the kernel, waiting for something (`S`, `D`, `I`, `W`, `P`): a lock, I/O, a
    /// sleep, or the GIL itself.
    pub fn is_asleep(self) -> bool {
        matches!(self.0, b'S' | b'D' | b'I' | b'W' | b'P')
    }

    /// Stopped by a signal or a tracer (`T`, `t`): runs nothing until resumed.
    pub fn is_stopped(self) -> bool {
        matches!(self.0, b'T' | b't')
    }

    /// A zombie (`Z`): exited, not yet reaped. A process whose leader is a zombie may still
    /// run other threads.
    pub fn is_zombie(self) -> bool {
        self.0 == b'Z'
    }

    /// Exited: a zombie or dead (`Z`, `X`).
    pub fn is_gone(self) -> bool {
        matches!(self.0, b'Z' | b'X')
    }

    /// The idle rule (`crate::idle`): a thread in this state is idle unless it runs, or sleeps
    /// while holding the GIL (`holds_gil`), which stops every other Python thread.
    pub fn is_idle(self, holds_gil: bool) -> bool {
        !(self.is_running() || (self.is_asleep() && holds_gil))
    }
}

/// The fields of a stat line after the command name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatLine<'a> {
    /// Everything after the last `)`.
    rest: &'a [u8],
}

impl<'a> StatLine<'a> {
    /// Splits a stat line at its last `)`; None where there is none (not a stat line, or one
    /// cut before the end of the command name).
    pub(crate) fn parse(line: &'a [u8]) -> Option<StatLine<'a>> {
        let close = line.iter().rposition(|&b| b == b')')?;
        Some(StatLine {
            rest: line.get(close + 1..)?,
        })
    }

    /// The scheduler state (its letter: `R`, `S`, `D`, `T`, `t`, `Z`, `X`, ...): the first
    /// field after the command name.
    pub(crate) fn state(&self) -> Option<ProcState> {
        self.field(0)?.first().copied().map(ProcState)
    }

    /// utime + stime, in clock ticks: the 12th and 13th fields after the command name (the
    /// 14th and 15th of the line).
    pub(crate) fn cpu_ticks(&self) -> Option<u64> {
        let utime: u64 = std::str::from_utf8(self.field(11)?).ok()?.parse().ok()?;
        let stime: u64 = std::str::from_utf8(self.field(12)?).ok()?.parse().ok()?;
        Some(utime + stime)
    }

    /// When the process started, in clock ticks after the machine booted: the 22nd field of
    /// the line, the 19th after the command name.
    pub(crate) fn start_ticks(&self) -> Option<u64> {
        std::str::from_utf8(self.field(19)?).ok()?.parse().ok()
    }

    /// The parent's pid: the second field after the command name.
    pub(crate) fn parent(&self) -> Option<u32> {
        std::str::from_utf8(self.field(1)?).ok()?.parse().ok()
    }

    /// A zombie's wait status (`exit_code`, field 52 of the line, the 50th after the command
    /// name): what its parent's `waitpid` will get, readable by anyone before it is reaped.
    /// Since Linux 3.5; 0 for a process that has not exited.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        std::str::from_utf8(self.field(49)?).ok()?.parse().ok()
    }

    /// The `n`th whitespace-separated field after the command name (0: the state).
    fn field(&self, n: usize) -> Option<&'a [u8]> {
        self.rest
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .nth(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_reading_of_the_state_letter() {
        let state = |letter: u8| ProcState(letter);
        assert!(state(b'R').is_running() && !state(b'R').is_idle(false));
        assert!(state(b'S').is_asleep() && state(b'S').is_idle(false));
        assert!(!state(b'D').is_idle(true), "a sleeping GIL holder is busy");
        assert!(state(b't').is_stopped() && state(b'T').is_stopped());
        assert!(state(b't').is_idle(true));
        assert!(state(b'Z').is_gone() && state(b'Z').is_zombie() && state(b'X').is_gone());
        assert!(!state(b'X').is_zombie() && !state(b'S').is_gone());
        assert_eq!(state(b'R').letter(), 'R');
    }

    #[test]
    fn a_plain_line_gives_its_state_and_cpu_time() {
        let line = b"12 (python3) S 1 2 3 4 5 6 7 8 9 10 70 30 0 0 20 0 1 0 5 6 7\n";
        let stat = StatLine::parse(line).expect("a stat line");
        assert_eq!(stat.state(), Some(ProcState(b'S')));
        assert_eq!(stat.cpu_ticks(), Some(100));
        assert_eq!(stat.start_ticks(), Some(5));
    }

    #[test]
    fn the_fields_follow_the_last_parenthesis() {
        // A thread may name itself anything: ") (" and a fake state inside the name.
        let line = b"12 (a) (R 9) b) T 1 2 3 4 5 6 7 8 9 10 7 3 0 0";
        let stat = StatLine::parse(line).expect("a stat line");
        assert_eq!(stat.state(), Some(ProcState(b'T')));
        assert_eq!(stat.cpu_ticks(), Some(10));
        assert_eq!(
            StatLine::parse(b"12 (a) b) S 1 2").and_then(|s| s.state()),
            Some(ProcState(b'S'))
        );
        assert_eq!(
            StatLine::parse(b"12 (x) R 1").and_then(|s| s.state()),
            Some(ProcState(b'R'))
        );
        assert_eq!(
            StatLine::parse(b"12 ( ) Z 1").and_then(|s| s.state()),
            Some(ProcState(b'Z'))
        );
    }

    #[test]
    fn a_short_or_torn_line_answers_none() {
        assert!(StatLine::parse(b"garbage").is_none());
        assert!(StatLine::parse(b"").is_none());
        // Cut inside the command name: no ')' at all.
        assert!(StatLine::parse(b"12 (pyth").is_none());
        // Cut right after the name: no state.
        let stat = StatLine::parse(b"12 (python3)").expect("the name closes");
        assert_eq!(stat.state(), None);
        assert_eq!(stat.cpu_ticks(), None);
        assert_eq!(
            StatLine::parse(b"12 (python3) ").and_then(|s| s.state()),
            None
        );
        // Cut before stime, or inside a number.
        let stat = StatLine::parse(b"12 (x) S 1 2 3 4 5 6 7 8 9 10 70").expect("a stat line");
        assert_eq!(stat.state(), Some(ProcState(b'S')));
        assert_eq!(stat.cpu_ticks(), None);
        let stat = StatLine::parse(b"12 (x) S 1 2 3 4 5 6 7 8 9 10 7x 3").expect("a stat line");
        assert_eq!(stat.cpu_ticks(), None);
    }
}
