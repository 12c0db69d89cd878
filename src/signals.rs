//! The signals a recording answers: Ctrl-C and SIGTERM end it cleanly (a second Ctrl-C ends
//! stackscope at once), SIGUSR1 writes a checkpoint and goes on.
//!
//! Each signal that arrives is also handed to a channel ([`Signals::arrivals`]) by a thread
//! that sleeps until one comes, so a consumer waits on its data and its signals at once
//! (`select!`) instead of waking on a timer to look at flags.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use crossbeam_channel::{Receiver, Sender};
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

/// What a signal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Ctrl-C or SIGTERM: end, saving everything.
    Stop,
    /// SIGUSR1: write a checkpoint and go on.
    Checkpoint,
}

pub struct Signals {
    stop: Arc<AtomicBool>,
    /// The number of the signal that asked to stop (SIGINT or SIGTERM); 0 before one came.
    stop_signal: Arc<AtomicUsize>,
    checkpoint: Arc<AtomicBool>,
    arrivals: Receiver<Request>,
    forwarder: Option<(signal_hook::iterator::Handle, JoinHandle<()>)>,
}

impl Signals {
    pub fn install() -> anyhow::Result<Signals> {
        use signal_hook::flag;
        let stop = Arc::new(AtomicBool::new(false));
        let checkpoint = Arc::new(AtomicBool::new(false));
        let stop_signal = Arc::new(AtomicUsize::new(0));
        for signal in [SIGINT, SIGTERM] {
            // Registered first, so it sees the flag before this signal sets it: the second
            // signal exits at once. Exiting releases every ptrace stop (the kernel detaches a
            // dead tracer's tracees), so even this cannot leave the target stopped.
            flag::register_conditional_shutdown(signal, 130, stop.clone())
                .context("cannot install signal handlers")?;
            flag::register(signal, stop.clone()).context("cannot install signal handlers")?;
            // Set in the handler itself, so it is known as soon as the stop flag is.
            flag::register_usize(signal, stop_signal.clone(), signal as usize)
                .context("cannot install signal handlers")?;
        }
        flag::register(SIGUSR1, checkpoint.clone()).context("cannot install signal handlers")?;
        let (sender, arrivals) = crossbeam_channel::unbounded();
        let forwarder = forward(sender).context("cannot install signal handlers")?;
        Ok(Signals {
            stop,
            stop_signal,
            checkpoint,
            arrivals,
            forwarder: Some(forwarder),
        })
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The signal that asked to stop (SIGINT or SIGTERM), once one came.
    pub fn stop_signal(&self) -> Option<i32> {
        match self.stop_signal.load(Ordering::SeqCst) {
            0 => None,
            signal => i32::try_from(signal).ok(),
        }
    }

    /// Whether SIGUSR1 came since the last call.
    pub fn take_checkpoint_request(&self) -> bool {
        self.checkpoint.swap(false, Ordering::Relaxed)
    }

    /// Each signal as it arrives.
    pub fn arrivals(&self) -> &Receiver<Request> {
        &self.arrivals
    }
}

/// Starts the thread that turns signals into [`Request`]s on `sender`.
fn forward(
    sender: Sender<Request>,
) -> std::io::Result<(signal_hook::iterator::Handle, JoinHandle<()>)> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1])?;
    let handle = signals.handle();
    let thread = std::thread::Builder::new()
        .name("stackscope-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let request = if signal == SIGUSR1 {
                    Request::Checkpoint
                } else {
                    Request::Stop
                };
                if sender.send(request).is_err() {
                    return;
                }
            }
        })?;
    Ok((handle, thread))
}

impl Drop for Signals {
    fn drop(&mut self) {
        if let Some((handle, thread)) = self.forwarder.take() {
            handle.close();
            let _ = thread.join();
        }
    }
}
