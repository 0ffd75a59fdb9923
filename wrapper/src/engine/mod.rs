//! The measuring engine under `colloc run` and `colloc bench`: everything the two
//! commands share, so a fix lands once.
//!
//! - [`launch`], [`supervisor`], [`sys`]: starting runs so that nothing of them outlives
//!   colloc (a supervisor per run, forked by a launcher process), behind the
//!   [`launch::Launcher`] trait.
//! - [`control`]: the requests and messages between colloc and a supervisor.
//! - [`signals`]: the signals colloc handles, as pollable pipes.
//! - [`pack`]: the pack engine: jobs on slots, one event loop over every run's output and
//!   supervisor, timeouts, grace periods, forwarded signals.
//! - [`scan`]: what a line of output says (throughput, user metrics, epochs, OOM).
//! - [`copies`]: N copies of one command on N slots until their measurement window is
//!   complete (the engine call under `colloc bench`).
//!
//! What the runs measured, and the rules that make figures of it (throughput, windows,
//! steady and solo figures, GPU telemetry), belong to the results library,
//! [`colloc_results`].

pub mod control;
pub mod copies;
pub mod launch;
pub mod pack;
pub mod scan;
pub mod signals;
pub mod supervisor;
pub mod sys;

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The engine's clock: seconds since `t0`, and the wall-clock time of `t0`.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Time zero.
    pub t0: Instant,
    /// Unix seconds at time zero.
    pub unix0: f64,
}

impl Clock {
    /// A clock starting now.
    pub fn start() -> Clock {
        Clock {
            t0: Instant::now(),
            unix0: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }
    }

    /// Seconds since time zero.
    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Unix seconds of a clock time: monotonic within one clock, comparable across runs.
    pub fn unix(&self, t: f64) -> f64 {
        self.unix0 + t
    }
}

/// A signal's name for messages and the record.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGUSR1 => "SIGUSR1".into(),
        libc::SIGUSR2 => "SIGUSR2".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGBUS => "SIGBUS".into(),
        s => format!("signal {s}"),
    }
}
