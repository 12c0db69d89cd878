//! The verdict read by roles: what the trainer did while the GPU idled, and whether its feeders
//! kept up. Where the roles explain the idle time, this verdict stands instead of the
//! utilization classes of `recording.rs`, and names the trainer's own line:
//!
//! - the trainer waits for its next batch while its feeders are busy: an input pipeline that
//!   cannot keep up (below [`PREPROCESSING_BELOW`]);
//! - otherwise, by mean utilization: starved (the loop itself loads data, or waits on
//!   something else); swinging on a cycle while the loop works between steps (CPU-side
//!   preprocessing); mostly busy with regular stalls (a checkpoint, evaluation, logging).

use super::class::{Verdict, VerdictClass, GPU_BOUND_ABOVE, PREPROCESSING_BELOW, STARVED_BELOW};
use super::idle_path::IdlePath;
use crate::gpu::cycle::Cycle;
use crate::roles::while_idle::{FeedersWhileIdle, TrainerWhileIdle, WhileIdle};
use crate::roles::Role;

/// Feeders count as busy when at least this share of their samples ran.
pub const FEEDERS_BUSY: f64 = 0.6;
/// The trainer's line is named as the cause of a stall when it holds at least this share of
/// its GPU-idle samples.
const TRAINER_LINE_SHARE: f64 = 0.5;

/// The verdict by roles, when the roles explain the GPU's idle time. Where the trainer ran
/// (rather than waited) while the GPU idled, `idle_path`, the call path that sets GPU-idle time
/// apart, is named after its line.
pub fn by_roles(
    mean: f64,
    cycle: Option<&Cycle>,
    while_idle: &WhileIdle,
    idle_path: Option<&IdlePath>,
) -> Option<Verdict> {
    let mut verdict = by_trainer(mean, cycle, while_idle)?;
    if let (Some(path), false) = (idle_path, while_idle.trainer_waits()) {
        verdict.text.push(' ');
        verdict.text.push_str(&path.sentence());
    }
    Some(verdict)
}

fn by_trainer(mean: f64, cycle: Option<&Cycle>, while_idle: &WhileIdle) -> Option<Verdict> {
    let trainer = while_idle.trainer.as_ref()?;
    let busy_feeders: Vec<&FeedersWhileIdle> = while_idle.busy_feeders(FEEDERS_BUSY).collect();
    let rhythm = cycle.map_or(String::new(), |c| format!(": {}", c.describe()));
    if mean < PREPROCESSING_BELOW && trainer.waiting_in.is_some() && !busy_feeders.is_empty() {
        return Some(input_pipeline(mean, &rhythm, trainer, &busy_feeders));
    }
    if mean < STARVED_BELOW {
        return Some(Verdict {
            class: VerdictClass::Starved,
            text: format!(
                "The GPU is starved (mean utilization {mean:.0}%){rhythm}. While it idles, the \
                 training loop {} ({:.0}% of its GPU-idle time): the GPU waits on work the loop \
                 does itself, such as loading data inline; DataLoader workers or a faster step \
                 there feed it.",
                trainer_at(trainer),
                trainer.share * 100.0
            ),
        });
    }
    let cycle = cycle.filter(|_| trainer.share >= TRAINER_LINE_SHARE)?;
    let (class, first, why) = if mean < PREPROCESSING_BELOW {
        (
            VerdictClass::CpuPreprocessing,
            format!(
                "GPU utilization swings between idle and busy, {} (mean {mean:.0}%).",
                cycle.describe()
            ),
            "CPU-side work in the loop between GPU steps (preprocessing, data loaded inline) \
             holds the GPU back",
        )
    } else if mean <= GPU_BOUND_ABOVE {
        (
            VerdictClass::PeriodicStall,
            format!(
                "The GPU idles ~{:.1} s every ~{:.1} s (mean utilization {mean:.0}%): a periodic \
                 stall.",
                cycle.idle_secs, cycle.period_secs
            ),
            "a checkpoint, evaluation or logging every few steps holds the GPU back; doing it \
             less often or in the background helps",
        )
    } else {
        return None;
    };
    Some(Verdict {
        class,
        text: format!(
            "{first} While it idles, the training loop {} ({:.0}% of its GPU-idle time): {why}.",
            trainer_at(trainer),
            trainer.share * 100.0
        ),
    })
}

fn input_pipeline(
    mean: f64,
    rhythm: &str,
    trainer: &TrainerWhileIdle,
    feeders: &[&FeedersWhileIdle],
) -> Verdict {
    let first = if mean < STARVED_BELOW {
        format!("The GPU is starved (mean utilization {mean:.0}%){rhythm}.")
    } else {
        format!("The GPU swings between idle and busy (mean utilization {mean:.0}%){rhythm}.")
    };
    let named: Vec<String> = feeders.iter().map(|f| feeders_sentence(f)).collect();
    let faster = feeders
        .iter()
        .find_map(|f| f.function.as_deref())
        .map_or("faster data loading".to_owned(), |f| {
            format!("a faster {}", function_name(f))
        });
    Verdict {
        class: VerdictClass::InputPipeline,
        text: format!(
            "{first} While it idles, the training loop waits for its next batch {} ({:.0}% of its \
             GPU-idle time); {}: the input pipeline cannot keep up; more workers or {faster} \
             feed the GPU.",
            place(trainer),
            trainer.share * 100.0,
            named.join("; ")
        ),
    }
}

/// "While the GPU idled, the training loop waits at ... (97% of its GPU-idle time); its 12
/// DataLoader workers are 97% busy, ...": the roles' words where the utilization classes
/// decide; `None` without a trainer.
pub fn while_idle_sentence(while_idle: &WhileIdle) -> Option<String> {
    let trainer = while_idle.trainer.as_ref()?;
    let mut text = format!(
        "While the GPU idled, the training loop {} ({:.0}% of its GPU-idle time)",
        trainer_at(trainer),
        trainer.share * 100.0
    );
    for feeders in &while_idle.feeders {
        text.push_str("; ");
        text.push_str(&feeders_sentence(feeders));
    }
    text.push('.');
    Some(text)
}

/// "waits at main (train.py:136) in Queue.get (...)" or "runs at load (x.py:3)".
pub(super) fn trainer_at(trainer: &TrainerWhileIdle) -> String {
    match &trainer.waiting_in {
        Some(_) => format!("waits {}", place(trainer)),
        None => format!("runs at {}", trainer.frame),
    }
}

/// "at main (train.py:136) in Queue.get (...)", or "at load (x.py:3)".
pub(super) fn place(trainer: &TrainerWhileIdle) -> String {
    match &trainer.waiting_in {
        Some(call) => format!("at {} in {call}", trainer.frame),
        None => format!("at {}", trainer.frame),
    }
}

/// "its 2 DataLoader workers are 99% busy, 97% in augment_pixels (train.py:56)".
pub(super) fn feeders_sentence(f: &FeedersWhileIdle) -> String {
    let who = match (f.role, f.pipelines()) {
        (Role::DataloaderWorker, 1) => "its DataLoader worker is".to_owned(),
        (Role::DataloaderWorker, n) => format!("its {n} DataLoader workers are"),
        (Role::FeederThread, 1) => "its feeder thread is".to_owned(),
        (Role::FeederThread, n) => format!("its {n} feeder threads are"),
        (_, 1) => "its worker process is".to_owned(),
        (_, n) => format!("its {n} worker processes are"),
    };
    match &f.function {
        Some(function) => format!(
            "{who} {:.0}% busy, {:.0}% in {function}",
            f.busy_share * 100.0,
            f.share * 100.0
        ),
        None => format!("{who} {:.0}% busy", f.busy_share * 100.0),
    }
}

/// `augment_pixels` of `augment_pixels (train.py:56)`.
pub(super) fn function_name(label: &str) -> &str {
    label.split(" (").next().unwrap_or(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trainer(waiting_in: Option<&str>, frame: &str) -> TrainerWhileIdle {
        TrainerWhileIdle {
            pid: 472,
            thread: "MainThread".to_owned(),
            frame: frame.to_owned(),
            waiting_in: waiting_in.map(str::to_owned),
            share: 0.97,
        }
    }

    fn workers(busy: f64) -> FeedersWhileIdle {
        FeedersWhileIdle {
            role: Role::DataloaderWorker,
            pids: vec![622, 623],
            processes: 0,
            threads: 2,
            busy_share: busy,
            function: Some("augment_pixels (train.py:56)".to_owned()),
            share: 0.97,
        }
    }

    const CYCLE: Cycle = Cycle {
        period_secs: 4.7,
        busy_secs: 1.1,
        idle_secs: 3.6,
        cycles: 4,
    };

    #[test]
    fn a_loop_waiting_on_busy_workers_is_an_input_pipeline() {
        let w = WhileIdle {
            trainer: Some(trainer(
                Some("_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:733)"),
                "main (train.py:136)",
            )),
            feeders: vec![workers(0.99)],
        };
        let v = by_roles(21.0, Some(&CYCLE), &w, None).expect("a verdict");
        assert_eq!(v.class, VerdictClass::InputPipeline);
        for part in [
            "starved (mean utilization 21%): busy ~1.1 s every ~4.7 s",
            "waits for its next batch at main (train.py:136) in _BaseDataLoaderIter.__next__",
            "(97% of its GPU-idle time)",
            "its 2 DataLoader workers are 99% busy, 97% in augment_pixels (train.py:56)",
            "a faster augment_pixels",
        ] {
            assert!(v.text.contains(part), "{part:?} not in {}", v.text);
        }
        // Idle workers are not blamed.
        let w = WhileIdle {
            feeders: vec![workers(0.1)],
            ..w
        };
        assert_eq!(
            by_roles(21.0, Some(&CYCLE), &w, None).map(|v| v.class),
            Some(VerdictClass::Starved)
        );
    }

    #[test]
    fn a_stall_in_the_loop_itself() {
        let w = WhileIdle {
            trainer: Some(trainer(None, "save_checkpoint (ckpt.py:40)")),
            feeders: vec![],
        };
        let v = by_roles(70.0, Some(&CYCLE), &w, None).expect("a stall");
        assert_eq!(v.class, VerdictClass::PeriodicStall);
        assert!(v.text.contains("idles ~3.6 s every ~4.7 s"), "{}", v.text);
        assert!(
            v.text.contains("runs at save_checkpoint (ckpt.py:40)"),
            "{}",
            v.text
        );
        let v = by_roles(45.0, Some(&CYCLE), &w, None).expect("a swing");
        assert_eq!(v.class, VerdictClass::CpuPreprocessing);
        assert!(v.text.contains("busy ~1.1 s every ~4.7 s"), "{}", v.text);
        assert!(
            v.text.contains("runs at save_checkpoint (ckpt.py:40)"),
            "{}",
            v.text
        );
        // No cycle, or a GPU-bound job: the utilization classes decide.
        assert_eq!(by_roles(55.0, None, &w, None), None);
        assert_eq!(by_roles(95.0, Some(&CYCLE), &w, None), None);
        let v = by_roles(12.0, None, &w, None).expect("starved");
        assert_eq!(v.class, VerdictClass::Starved);
        assert!(v.text.contains("runs at save_checkpoint"), "{}", v.text);
    }

    #[test]
    fn no_trainer_no_verdict_by_roles() {
        assert_eq!(
            by_roles(10.0, Some(&CYCLE), &WhileIdle::default(), None),
            None
        );
    }
}
