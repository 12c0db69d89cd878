//! The signals a recording answers: Ctrl-C and SIGTERM end it cleanly (a second Ctrl-C ends
//! stackscope at once), SIGUSR1 writes a checkpoint and goes on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;

pub struct Signals {
    stop: Arc<AtomicBool>,
    checkpoint: Arc<AtomicBool>,
}

impl Signals {
    pub fn install() -> anyhow::Result<Signals> {
        use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
        use signal_hook::flag;
        let stop = Arc::new(AtomicBool::new(false));
        let checkpoint = Arc::new(AtomicBool::new(false));
        for signal in [SIGINT, SIGTERM] {
            // Registered first, so it sees the flag before this signal sets it: the second
            // signal exits at once. Exiting releases every ptrace stop (the kernel detaches a
            // dead tracer's tracees), so even this cannot leave the target stopped.
            flag::register_conditional_shutdown(signal, 130, stop.clone())
                .context("cannot install signal handlers")?;
            flag::register(signal, stop.clone()).context("cannot install signal handlers")?;
        }
        flag::register(SIGUSR1, checkpoint.clone()).context("cannot install signal handlers")?;
        Ok(Signals { stop, checkpoint })
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether SIGUSR1 came since the last call.
    pub fn take_checkpoint_request(&self) -> bool {
        self.checkpoint.swap(false, Ordering::Relaxed)
    }
}
