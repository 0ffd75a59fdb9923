//! The signals colloc handles while it packs runs, each as a pollable self-pipe, so the
//! pack engine's event loop sees them like any other input. Installed once per command
//! and kept until it ends: a signal between two engine runs (colloc bench's
//! configurations) waits in its pipe instead of killing colloc.
//!
//! SIGTERM, SIGINT, SIGHUP: stop every run (forwarded, then SIGKILL after a grace
//! period); a second one kills them at once. SIGUSR1, SIGUSR2: forwarded to every run
//! and recorded, never fatal to colloc; under `colloc run` SIGUSR1 is the warning that
//! the job's time limit is near (see [`super::pack::Warn`]).
//!
//! Inside a Slurm job, colloc's parent going away (the batch shell killed, the step's
//! slurmstepd gone) counts as a stop too: under `proctrack/linuxproc` Slurm loses track of
//! an orphan, so colloc must end its runs and itself rather than outlive the job. Outside
//! Slurm an orphaned colloc goes on (`nohup colloc run … &` and log out).

use std::cell::Cell;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

/// Signals that stop a pack.
pub const STOP: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];
/// Signals forwarded to every run.
pub const FORWARD: [i32; 2] = [libc::SIGUSR1, libc::SIGUSR2];

/// Handlers for [`STOP`] and [`FORWARD`], one pipe each.
#[derive(Debug)]
pub struct Signals {
    pipes: Vec<(i32, UnixStream)>,
    /// colloc's parent when the handlers were installed (inside a Slurm job).
    parent: Option<u32>,
    /// Its loss was reported already.
    parent_told: Cell<bool>,
}

impl Signals {
    /// Install the handlers.
    ///
    /// # Errors
    /// A pipe or handler could not be made.
    pub fn install() -> io::Result<Signals> {
        let mut pipes = Vec::new();
        for sig in STOP.into_iter().chain(FORWARD) {
            let (r, w) = UnixStream::pair()?;
            r.set_nonblocking(true)?;
            w.set_nonblocking(true)?;
            signal_hook::low_level::pipe::register(sig, w)?;
            pipes.push((sig, r));
        }
        Ok(Signals {
            pipes,
            parent: std::env::var_os("SLURM_JOB_ID").map(|_| parent_pid()),
            parent_told: Cell::new(false),
        })
    }

    /// Inside a Slurm job: colloc's parent at start, once it is gone (colloc was
    /// re-parented); reported once.
    pub fn parent_gone(&self) -> Option<u32> {
        let parent = self.parent?;
        if self.parent_told.get() || parent_pid() == parent {
            return None;
        }
        self.parent_told.set(true);
        Some(parent)
    }

    /// The descriptors to poll.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        self.pipes.iter().map(|(_, p)| p.as_fd()).collect()
    }

    /// Signals received since the last call, in a fixed order (stop signals first).
    pub fn take(&self) -> Vec<i32> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        for (sig, p) in &self.pipes {
            let mut n_got = 0;
            while let Ok(n) = (&*p).read(&mut buf) {
                if n == 0 {
                    break;
                }
                n_got += n;
            }
            // Several deliveries of one signal between two reads count once each.
            out.extend(std::iter::repeat_n(*sig, n_got));
        }
        out
    }
}

/// This process's parent.
fn parent_pid() -> u32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32)
}
