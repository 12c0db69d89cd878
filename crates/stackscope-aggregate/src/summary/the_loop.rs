//! The summary's loop and GIL: the loop's reading at the top level however the loop was found
//! (the GPU section's where there is GPU data, else read from the loop's own time), and each
//! thread's and process's GIL.

use super::GpuSummary;
use crate::fold::{Aggregator, RecordingMeta};
use crate::gil::{GilProcess, GilSummary, GilThread};
use crate::roles::step::{GilHolder, StepBreakdown};
use crate::roles::while_idle::FeedersWhileIdle;
use crate::roles::{self, LoopFoundBy};
use crate::verdict::{loop_verdict_and_fix, IfFixed, Verdict};

/// The loop's step, verdict and feeders, as the summary's top level gives them.
#[derive(Debug, Default)]
pub(super) struct LoopReading {
    pub(super) step: Option<StepBreakdown>,
    pub(super) step_gil_holder: Option<GilHolder>,
    pub(super) if_fixed: Option<IfFixed>,
    pub(super) verdict: Option<Verdict>,
    pub(super) feeders: Vec<FeedersWhileIdle>,
}

impl Aggregator {
    /// The loop's reading, however the loop was found: the GPU section's where there is GPU
    /// data, else read from the loop's own time (`verdict/without_gpu.rs`).
    pub(super) fn loop_reading(
        &self,
        meta: &RecordingMeta,
        roles: &roles::Roles,
        gpu: Option<&GpuSummary>,
    ) -> LoopReading {
        if let Some(gpu) = gpu {
            return LoopReading {
                step: gpu.step,
                step_gil_holder: gpu.step_gil_holder.clone(),
                if_fixed: gpu.if_fixed.clone(),
                verdict: Some(gpu.verdict.clone()),
                feeders: gpu.while_idle.feeders.clone(),
            };
        }
        if roles.found_by != Some(LoopFoundBy::HandOffs) {
            return LoopReading::default();
        }
        let over_recording = roles::while_idle_of(self, roles);
        let Some((step, holder)) = roles::step_of(self, roles) else {
            return LoopReading::default();
        };
        let (verdict, if_fixed) =
            loop_verdict_and_fix(&step, holder.as_ref(), &over_recording, meta.cpus_usable);
        LoopReading {
            step: Some(step.breakdown),
            step_gil_holder: holder,
            if_fixed,
            verdict: Some(verdict),
            feeders: over_recording.feeders,
        }
    }

    /// Each thread's and process's GIL; `None` when no sample said who held it (a reader or a
    /// version that does not know the holder, an old log).
    pub(super) fn gil_summary(&self) -> Option<GilSummary> {
        let mut threads: Vec<GilThread> = self
            .threads
            .iter()
            .filter(|t| t.gil.held + t.gil.waited > 0)
            .map(|t| GilThread {
                pid: t.pid,
                thread: t.name.clone(),
                python_thread_id: t.python_thread_id,
                holds: t.gil.holds(),
                waits: t.gil.waits(),
                runs_without: t.gil.runs_without(),
            })
            .collect();
        if threads.is_empty() {
            return None;
        }
        threads.sort_by(|a, b| {
            b.holds
                .total_cmp(&a.holds)
                .then(a.pid.cmp(&b.pid))
                .then(a.python_thread_id.cmp(&b.python_thread_id))
        });
        let mut by_process: Vec<GilProcess> = self
            .gil_by_process
            .iter()
            .filter(|(_, c)| c.held > 0)
            .map(|(&pid, c)| GilProcess {
                pid,
                held: c.holds(),
                contended: c.waits(),
            })
            .collect();
        by_process.sort_by_key(|p| p.pid);
        Some(GilSummary {
            threads,
            by_process,
        })
    }
}
