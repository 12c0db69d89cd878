//! The log's header: what the recording was, stored once at the start of the file.

use stackscope_event::Timestamp;

use crate::error::DecodeError;
use crate::varint::{put_f32, put_f64, put_str, put_varint, Bytes};

/// What the recording is, written once when the log is created.
#[derive(Debug, Clone, PartialEq)]
pub struct LogHeader {
    /// The recording's start on the event clock (CLOCK_MONOTONIC ns): the zero of every
    /// `--from`/`--to` and of the timeline's times.
    pub start: Timestamp,
    /// The same instant on the wall clock, RFC 3339.
    pub started_at: String,
    pub pid: u32,
    pub command_line: String,
    pub python_version: String,
    pub rate_hz: f64,
    /// Whether the recording kept samples of idle threads (`AggregateConfig::include_idle`). The
    /// log holds idle samples either way; `report` filters them the same way by default.
    pub include_idle: bool,
    /// The recording's `--idle-below` (`AggregateConfig::idle_below`), the default of `report`.
    pub idle_below: f32,
    /// Whether GPU readings were expected (`AggregateConfig::gpu_enabled`).
    pub gpu_enabled: bool,
    /// Whether stacks were rooted at their process (`AggregateConfig::process_root`,
    /// `--subprocesses`).
    pub process_root: bool,
    /// Whether the recording left the target's start-up out of its GPU figures
    /// (`AggregateConfig::leave_out_startup`: `record`, which starts the job); `None` in logs
    /// written before the header said.
    pub leave_out_startup: Option<bool>,
    /// Devices the recording passed to `Aggregator::expect_gpu_devices`, if any.
    pub expected_gpu_devices: Vec<u32>,
    /// CPUs the target's process may use (its affinity capped by its cgroup's quota); `None`
    /// where it could not be read, and in logs written before the header kept it.
    pub cpus_usable: Option<f64>,
    /// Whether like processes were kept apart (`AggregateConfig::processes_apart`,
    /// `--processes-apart`); false in logs written before the header said.
    pub processes_apart: bool,
    /// Whether every thread was kept apart (`AggregateConfig::threads_apart`,
    /// `--threads-apart`); false in logs written before the header said.
    pub threads_apart: bool,
}

/// Header flag: `cpus_usable` follows the expected devices.
const HAS_CPUS_USABLE: u8 = 32;
/// Header flag: like processes were kept apart.
const PROCESSES_APART: u8 = 64;
/// Header flag: every thread was kept apart.
const THREADS_APART: u8 = 128;

impl LogHeader {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.start.as_nanos());
        put_str(out, &self.started_at);
        put_varint(out, u64::from(self.pid));
        put_str(out, &self.command_line);
        put_str(out, &self.python_version);
        put_f64(out, self.rate_hz);
        out.push(
            u8::from(self.include_idle)
                | (u8::from(self.gpu_enabled) << 1)
                | (u8::from(self.process_root) << 2)
                | (u8::from(self.leave_out_startup == Some(true)) << 3)
                | (u8::from(self.leave_out_startup.is_some()) << 4)
                | if self.cpus_usable.is_some() {
                    HAS_CPUS_USABLE
                } else {
                    0
                }
                | if self.processes_apart {
                    PROCESSES_APART
                } else {
                    0
                }
                | if self.threads_apart { THREADS_APART } else { 0 },
        );
        put_f32(out, self.idle_below);
        put_varint(out, self.expected_gpu_devices.len() as u64);
        for &device in &self.expected_gpu_devices {
            put_varint(out, u64::from(device));
        }
        if let Some(cpus) = self.cpus_usable {
            put_f64(out, cpus);
        }
    }

    pub(crate) fn decode(bytes: &mut Bytes<'_>) -> Result<LogHeader, DecodeError> {
        let start = Timestamp(bytes.varint()?);
        let started_at = bytes.str()?.to_owned();
        let pid = bytes.varint_u32()?;
        let command_line = bytes.str()?.to_owned();
        let python_version = bytes.str()?.to_owned();
        let rate_hz = bytes.f64()?;
        let flags = bytes.u8()?;
        let idle_below = bytes.f32()?;
        let devices = bytes.varint_usize()?;
        let mut expected_gpu_devices = Vec::new();
        for _ in 0..devices {
            expected_gpu_devices.push(bytes.varint_u32()?);
        }
        let cpus_usable = if flags & HAS_CPUS_USABLE != 0 {
            Some(bytes.f64()?)
        } else {
            None
        };
        Ok(LogHeader {
            start,
            started_at,
            pid,
            command_line,
            python_version,
            rate_hz,
            include_idle: flags & 1 != 0,
            idle_below,
            gpu_enabled: flags & 2 != 0,
            process_root: flags & 4 != 0,
            leave_out_startup: (flags & 16 != 0).then_some(flags & 8 != 0),
            expected_gpu_devices,
            cpus_usable,
            processes_apart: flags & PROCESSES_APART != 0,
            threads_apart: flags & THREADS_APART != 0,
        })
    }
}

impl Default for LogHeader {
    /// An empty header with the command line's defaults (`AggregateConfig::default()`'s):
    /// idle threads left out, 30% idle threshold (`stackscope_aggregate::DEFAULT_IDLE_BELOW`,
    /// which this crate does not depend on: `stackscope-report`'s rebuild tests check the two
    /// agree), GPU on, one process.
    fn default() -> Self {
        LogHeader {
            start: Timestamp(0),
            started_at: String::new(),
            pid: 0,
            command_line: String::new(),
            python_version: String::new(),
            rate_hz: 0.0,
            include_idle: false,
            idle_below: 30.0,
            gpu_enabled: true,
            process_root: false,
            leave_out_startup: Some(false),
            expected_gpu_devices: Vec::new(),
            cpus_usable: None,
            processes_apart: false,
            threads_apart: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_usable_round_trips_and_an_older_header_has_none() {
        for cpus in [Some(1.5), Some(16.0), None] {
            let header = LogHeader {
                cpus_usable: cpus,
                expected_gpu_devices: vec![0, 3],
                ..LogHeader::default()
            };
            let mut out = Vec::new();
            header.encode(&mut out);
            // A record after the header still starts where it did.
            out.push(0xAB);
            let mut bytes = Bytes::new(&out);
            let decoded = LogHeader::decode(&mut bytes).expect("decodes");
            assert_eq!(decoded, header);
            assert_eq!(bytes.u8().expect("the next byte"), 0xAB);
        }
    }

    #[test]
    fn processes_apart_round_trips_and_an_older_header_groups_them() {
        let header = LogHeader {
            processes_apart: true,
            threads_apart: true,
            cpus_usable: Some(2.0),
            ..LogHeader::default()
        };
        let mut out = Vec::new();
        header.encode(&mut out);
        assert_eq!(LogHeader::decode(&mut Bytes::new(&out)).ok(), Some(header));
        let mut out = Vec::new();
        LogHeader::default().encode(&mut out);
        let decoded = LogHeader::decode(&mut Bytes::new(&out)).expect("decodes");
        assert!(!decoded.processes_apart);
        assert!(!decoded.threads_apart);
    }

    #[test]
    fn the_start_up_flag_round_trips_and_an_older_header_has_none() {
        for flag in [Some(true), Some(false)] {
            let header = LogHeader {
                leave_out_startup: flag,
                ..LogHeader::default()
            };
            let mut out = Vec::new();
            header.encode(&mut out);
            let decoded = LogHeader::decode(&mut Bytes::new(&out)).expect("decodes");
            assert_eq!(decoded, header);
        }
        // Before the flag: bit 4 clear, so the header does not say.
        let mut out = Vec::new();
        LogHeader::default().encode(&mut out);
        let flags_at = out.len() - 4 - 1 - 1;
        out[flags_at] &= !(8 | 16);
        let decoded = LogHeader::decode(&mut Bytes::new(&out)).expect("decodes");
        assert_eq!(decoded.leave_out_startup, None);
    }
}
