//! How a process of the job ended, as far as it could be known from outside: its exit status
//! or the signal that ended it, an OOM kill, or nothing known. `summary.json`'s and the hang
//! report's `processes_ended` write it as `exited N`, `killed by SIGNAL`, `oom_killed` or
//! `unknown`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HowEnded {
    /// It exited with this status.
    Exited(i32),
    /// A signal ended it.
    Killed(i32),
    /// The OOM killer ended it ([`OomEvidence`]: what says so).
    OomKilled(OomEvidence),
    Unknown,
}

/// What says a process was killed for memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomEvidence {
    /// The job's memory cgroup counted this many OOM kills while it died.
    Cgroup(u64),
    /// The kernel log names its pid.
    KernelLog,
}

impl HowEnded {
    /// From a wait status (`exit_code` of `/proc/PID/stat`, or the kernel's exit event).
    pub fn from_wait_status(status: i32) -> HowEnded {
        match status & 0x7f {
            0 => HowEnded::Exited((status >> 8) & 0xff),
            signal => HowEnded::Killed(signal),
        }
    }

    /// `exited 1`, `killed by SIGKILL`, `oom_killed`, `unknown`.
    pub fn describe(&self) -> String {
        match self {
            HowEnded::Exited(code) => format!("exited {code}"),
            HowEnded::Killed(signal) => format!("killed by {}", signal_name(*signal)),
            HowEnded::OomKilled(_) => "oom_killed".to_owned(),
            HowEnded::Unknown => "unknown".to_owned(),
        }
    }

    /// What ended it, for a sentence: "killed by the OOM killer: the job's memory cgroup
    /// counted 1 kill", "exited with status 1", "killed by SIGKILL".
    pub fn sentence(&self) -> String {
        match self {
            HowEnded::Exited(code) => format!("exited with status {code}"),
            HowEnded::Killed(signal) => format!("killed by {}", signal_name(*signal)),
            HowEnded::OomKilled(OomEvidence::Cgroup(n)) => format!(
                "killed by the OOM killer: the job's memory cgroup counted {n} kill{}",
                if *n == 1 { "" } else { "s" }
            ),
            HowEnded::OomKilled(OomEvidence::KernelLog) => {
                "killed by the OOM killer: the kernel log names it".to_owned()
            }
            HowEnded::Unknown => "how it ended is not known".to_owned(),
        }
    }
}

impl HowEnded {
    /// Reads what [`HowEnded::describe`] wrote (an OOM kill's evidence is not in the words:
    /// it reads back as the kernel log's).
    pub fn parse(text: &str) -> Option<HowEnded> {
        if let Some(code) = text.strip_prefix("exited ") {
            return code.parse().ok().map(HowEnded::Exited);
        }
        if let Some(name) = text.strip_prefix("killed by ") {
            let signal = (1..=64).find(|&n| signal_name(n) == name)?;
            return Some(HowEnded::Killed(signal));
        }
        match text {
            "oom_killed" => Some(HowEnded::OomKilled(OomEvidence::KernelLog)),
            "unknown" => Some(HowEnded::Unknown),
            _ => None,
        }
    }

    /// Two numbers that keep it whole (the sample log's encoding): a kind and a value.
    pub fn to_wire(self) -> (u8, u64) {
        match self {
            HowEnded::Exited(code) => (0, u64::from(code as u32)),
            HowEnded::Killed(signal) => (1, u64::from(signal as u32)),
            HowEnded::OomKilled(OomEvidence::Cgroup(n)) => (2, n),
            HowEnded::OomKilled(OomEvidence::KernelLog) => (3, 0),
            HowEnded::Unknown => (4, 0),
        }
    }

    /// The inverse of [`HowEnded::to_wire`]; `None` for a kind it does not know.
    pub fn from_wire(kind: u8, value: u64) -> Option<HowEnded> {
        Some(match kind {
            0 => HowEnded::Exited(value as u32 as i32),
            1 => HowEnded::Killed(value as u32 as i32),
            2 => HowEnded::OomKilled(OomEvidence::Cgroup(value)),
            3 => HowEnded::OomKilled(OomEvidence::KernelLog),
            4 => HowEnded::Unknown,
            _ => return None,
        })
    }
}

impl<'de> Deserialize<'de> for HowEnded {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<HowEnded, D::Error> {
        let text = String::deserialize(d)?;
        HowEnded::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not a way to end: {text:?}")))
    }
}

impl Serialize for HowEnded {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.describe())
    }
}

/// `SIGKILL`, `SIGTERM`...; `signal 40` for one without a name here.
pub fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signal - 1)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("signal {signal}"), |name| (*name).to_owned())
}

/// One process of the job that vanished: `processes_ended` of `summary.json` and the hang
/// report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessEnded {
    pub pid: u32,
    /// `rank 1`, `worker`, `launcher`, `helper (resource tracker)`.
    pub role: String,
    /// When it was first seen and when it was seen gone, RFC 3339.
    pub started: String,
    pub ended: String,
    pub how: HowEnded,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_and_their_words() {
        assert_eq!(HowEnded::from_wait_status(9), HowEnded::Killed(9));
        assert_eq!(HowEnded::from_wait_status(1 << 8), HowEnded::Exited(1));
        assert_eq!(HowEnded::from_wait_status(0), HowEnded::Exited(0));
        assert_eq!(HowEnded::Killed(9).describe(), "killed by SIGKILL");
        assert_eq!(HowEnded::Exited(1).describe(), "exited 1");
        assert_eq!(
            HowEnded::OomKilled(OomEvidence::Cgroup(1)).describe(),
            "oom_killed"
        );
        assert_eq!(
            HowEnded::OomKilled(OomEvidence::Cgroup(1)).sentence(),
            "killed by the OOM killer: the job's memory cgroup counted 1 kill"
        );
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(40), "signal 40");
        assert_eq!(
            serde_json::to_string(&HowEnded::Unknown).expect("json"),
            "\"unknown\""
        );
        for how in [
            HowEnded::Exited(1),
            HowEnded::Killed(9),
            HowEnded::OomKilled(OomEvidence::Cgroup(2)),
            HowEnded::Unknown,
        ] {
            let (kind, value) = how.to_wire();
            assert_eq!(HowEnded::from_wire(kind, value), Some(how));
            let back = HowEnded::parse(&how.describe()).expect("parse");
            assert_eq!(back.describe(), how.describe());
        }
        assert_eq!(HowEnded::from_wire(9, 0), None);
    }
}
