//! The simulated GPU of `stackscope demo`, and nothing else: the bundled training loop uses no
//! GPU, so a real one would show nothing.
//!
//! Its utilization follows what the loop says it is doing: the loop writes `0` to a phase file
//! when it starts loading data and `100` when it starts computing (`--gpu-file`), exactly as a
//! real job's GPU would go quiet and busy. The simulator reads that file every
//! [`READ_EVERY`] and sends one reading every [`REPORT_EVERY`], with the share of the reads
//! that found the compute phase, mapped to [`IDLE_UTILIZATION`]..[`BUSY_UTILIZATION`]: like
//! NVML's utilization, the share of the period the GPU was busy. It never looks at the stacks
//! stackscope samples, so the join of stacks and GPU in the report is the same one a real
//! recording makes. Every output says the device is simulated: its name, its UUID (which
//! report.html looks for), and a notice in the summary.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use stackscope_event::producer::{FirstPoll, Flow, Producer, Schedule, Tick};
use stackscope_event::{Batch, Event, GpuSample, Timestamp};

pub const DEVICE_NAME: &str = "simulated GPU (stackscope demo)";
/// report.html says "simulated" for a device whose UUID starts so.
pub const DEVICE_UUID: &str = "simulated-0";
pub const NOTICE: &str = "the GPU is simulated (stackscope demo): its utilization follows the \
                          training loop's phases as the loop reports them; no device was read";
const READ_EVERY: Duration = Duration::from_millis(10);
const REPORT_EVERY: Duration = Duration::from_millis(100);
const IDLE_UTILIZATION: f32 = 3.0;
const BUSY_UTILIZATION: f32 = 97.0;
const MEMORY_TOTAL: u64 = 16 << 30;

/// The simulator on the shared producer's thread ([`stackscope_event::producer`]).
pub struct SimulatedGpu {
    producer: Producer,
}

impl SimulatedGpu {
    pub fn start(
        phase_file: PathBuf,
        sender: Sender<Batch>,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<SimulatedGpu> {
        let schedule = Schedule::every(READ_EVERY, FirstPoll::AfterInterval);
        let producer = Producer::spawn(
            "stackscope-simulated-gpu",
            schedule,
            sender,
            stop,
            move |ticker| {
                let mut phases = Phases::new(phase_file);
                ticker.run(|tick| {
                    phases.read(tick);
                    Flow::Continue
                });
            },
        )?;
        Ok(SimulatedGpu { producer })
    }

    pub fn dropped(&self) -> u64 {
        self.producer.dropped()
    }

    pub fn join(self) -> u64 {
        // A panic in the simulator loses its readings, nothing else.
        self.producer.join().dropped
    }
}

pub fn device_info() -> stackscope_aggregate::GpuDeviceInfo {
    stackscope_aggregate::GpuDeviceInfo {
        index: 0,
        name: DEVICE_NAME.to_owned(),
        uuid: DEVICE_UUID.to_owned(),
    }
}

/// The reads of the phase file since the last reading sent.
struct Phases {
    phase_file: PathBuf,
    reads: u32,
    busy_reads: u32,
    next_report: Instant,
}

impl Phases {
    fn new(phase_file: PathBuf) -> Phases {
        Phases {
            phase_file,
            reads: 0,
            busy_reads: 0,
            next_report: Instant::now() + REPORT_EVERY,
        }
    }

    /// Reads the phase once; every [`REPORT_EVERY`], puts one reading in the tick's batch.
    fn read(&mut self, tick: &mut Tick<'_>) {
        // No file yet (the loop has not started): nothing runs on the "GPU".
        let busy = std::fs::read_to_string(&self.phase_file)
            .map(|text| text.trim() == "100")
            .unwrap_or(false);
        self.reads += 1;
        self.busy_reads += u32::from(busy);
        if Instant::now() < self.next_report {
            return;
        }
        self.next_report += REPORT_EVERY;
        let share = self.busy_reads as f32 / self.reads.max(1) as f32;
        let utilization = IDLE_UTILIZATION + share * (BUSY_UTILIZATION - IDLE_UTILIZATION);
        self.reads = 0;
        self.busy_reads = 0;
        let sample = GpuSample {
            time: Timestamp::now(),
            device: 0,
            utilization: Some(utilization),
            memory_used_bytes: Some(MEMORY_TOTAL / 4 + (MEMORY_TOTAL / 2) * u64::from(share > 0.5)),
            memory_total_bytes: Some(MEMORY_TOTAL),
            power_watts: Some(60.0 + 2.4 * utilization),
            ..GpuSample::default()
        };
        tick.batch.push(Event::Gpu(sample));
    }
}
