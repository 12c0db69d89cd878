//! The command `record` starts, and ends again whatever happens.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::Context;

/// The process `record` started. Dropping it without `end` kills it: a recording that fails
/// must not leave its command running.
pub struct LaunchedChild {
    child: Child,
    status: Option<ExitStatus>,
    pub was_killed: bool,
}

impl LaunchedChild {
    pub fn spawn(command: &[String]) -> anyhow::Result<LaunchedChild> {
        let (program, args) = command
            .split_first()
            .context("record needs a command after --")?;
        let child = std::process::Command::new(program)
            .args(args)
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        Ok(LaunchedChild {
            child,
            status: None,
            was_killed: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `grace` for a command that is exiting by itself to be reaped; asks it to end
    /// only if it has not by then.
    pub fn wait_for_exit(&mut self, grace: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + grace;
        while self.status.is_none() && Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
            } else {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.end()
    }

    /// Waits for the command to end, asking it to (SIGINT, then SIGKILL) if it has not.
    pub fn end(&mut self) -> Option<ExitStatus> {
        if self.status.is_some() {
            return self.status;
        }
        if let Ok(Some(status)) = self.child.try_wait() {
            self.status = Some(status);
            return self.status;
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
                return self.status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.was_killed = true;
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
        self.status
    }
}

impl Drop for LaunchedChild {
    fn drop(&mut self) {
        self.end();
    }
}
