//! Apply a mode to a job's GPUs (the prolog, `colloc apply`) and restore them (the epilog,
//! `colloc restore`).
//!
//! Rules (docs/design.md, "Reconfiguration: apply and restore"):
//! - A journal is written before anything changes; per-GPU locks are held throughout.
//! - A user's mistake (a layout that does not fit, a mode the node does not allow) and a
//!   GPU colloc may not touch (processes, foreign instances, MIG off) change nothing and
//!   give [`Outcome::Refused`]: the prolog succeeds and the job's tasks fail with the
//!   reason. Only real node faults are errors ([`NodeFault`]), which fail the prolog.
//! - All or nothing: a failure part way undoes what was made.
//! - Restore is idempotent and undoes a prolog that died at any point.
//! - A job's own files (its MPS directories under `run_dir`, its daemons) are not the
//!   node's state: a failure to set them up refuses the job, a failure to remove them is
//!   a warning. Every wait on something the job's user can stall has a deadline: the MPS
//!   part of a restore takes at most [`MPS_RESTORE_BUDGET`] whatever the GPU count.
//!
//! The rooms: `apply` (the prolog's steps), `modes` (one file per mode: its setup and the
//! environment it gives the job), `create` (MIG instances), `mps_setup` (a job's MPS
//! daemons), `restore` (the epilog: whatever the mode, it undoes what the journal
//! records), `destroy` (its MIG half).

use std::time::Duration;

use crate::config::Config;
use crate::gpu::GpuError;
use crate::hooks;
use crate::journal::{self, Journal, JournalError};
use crate::mode::{Mode, ModeKind};
use crate::mps;
use crate::rundir;

mod apply;
mod create;
mod destroy;
pub mod leftover;
pub mod mig_fit;
mod modes;
mod mps_setup;
mod preflight;
mod restore;
#[cfg(test)]
mod tests;

pub use apply::{prolog, prolog_with, record_refusal};
pub use create::catalog_for;
pub use mps_setup::{mps_reachable, start_mps_in_extern_step, ExternStart};
pub use preflight::EXITING_GRACE;
pub use restore::{restore, restore_all, restore_within, Quarantined, RestoreReport};

/// How long restore waits for killed processes to leave an instance (within
/// [`MIG_RESTORE_BUDGET`]).
pub const KILL_WAIT: Duration = Duration::from_secs(10);
/// The most time one restore spends on a job's MIG instances, all GPUs together: waiting
/// for killed processes, retrying destroys the driver answers IN_USE (DCGM profiling an
/// instance, a leaked NVML handle, a GPU instance busy for a moment after its compute
/// instance went), waiting for destroyed instances to leave the driver's listing. Past it
/// the GPU is left marked (journal kept, see [`crate::gpu::GpuHold`]); the epilog stays well inside
/// Slurm's `PrologEpilogTimeout`.
pub const MIG_RESTORE_BUDGET: Duration = Duration::from_secs(15);
/// How long a prolog spends trying again to restore another job's marked GPU that this
/// job was given (the holder may have gone by now).
pub const MARKED_RETRY_BUDGET: Duration = Duration::from_secs(1);
/// The longest the MPS part of a restore takes, whatever the number of GPUs: all daemons
/// are stopped at once ([`mps::QUIT_TIME`] to quit, [`mps::KILL_TIME`] for what is then
/// killed to go), then the job's files are removed ([`rundir::CLEANUP_TIME`]).
pub const MPS_RESTORE_BUDGET: Duration = mps::QUIT_TIME
    .saturating_add(mps::KILL_TIME)
    .saturating_add(rundir::CLEANUP_TIME);

/// What a job asks for, from the job's environment (never from user input but the mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// Slurm job id.
    pub job: u32,
    /// The job's user.
    pub uid: u32,
    /// The job's group.
    pub gid: u32,
    /// The job's GPUs, as NVML indexes.
    pub gpus: Vec<u32>,
    /// The requested mode.
    pub mode: Mode,
}

/// Why a job may not run, with whose problem it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// One line for the job's stderr.
    pub message: String,
    /// The request itself is wrong (does not fit, not allowed): exit 2 for `colloc apply`.
    pub bad_request: bool,
}

/// The result of [`prolog`] when no node fault occurred.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Mode `off`: nothing done, no journal.
    Off,
    /// The GPUs are set up; the environment for the job's tasks.
    Applied(Vec<(String, String)>),
    /// Nothing was changed; the job must not run.
    Refused(Refusal),
}

/// A real node problem: the prolog fails (and Slurm drains the node).
#[derive(Debug, thiserror::Error)]
pub enum NodeFault {
    /// NVML failed.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// Journal or lock trouble.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// An MPS daemon could not be started or set up.
    #[error(transparent)]
    Mps(#[from] mps::MpsError),
    /// Restore could not bring a GPU back.
    #[error("{0}")]
    Restore(String),
}

fn refuse(message: impl Into<String>, bad_request: bool) -> Outcome {
    Outcome::Refused(Refusal {
        message: message.into(),
        bad_request,
    })
}

/// Why a reconfiguration stopped part way.
#[derive(Debug)]
enum Failure {
    /// The job cannot have it (its files, its daemon, what the driver answered after
    /// every retry): refuse it once undone.
    Refuse(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refuse(m) => f.write_str(m),
        }
    }
}

/// End this job's part of the node-wide hook pause (the post-hook runs if it was the last);
/// its failure is logged, never more (the GPUs are set or undone).
fn run_post_hook(cfg: &Config, change: &hooks::Change, ok: bool) {
    if let Err(e) = hooks::resume(cfg, change, ok) {
        log::warn!("job {}: {e}", change.job);
    }
}

/// The task environment recorded for a job, or why it was refused; `None` without a
/// journal (mode off, or the prolog did not run).
///
/// # Errors
/// [`JournalError`] when the journal cannot be read.
pub fn job_state(cfg: &Config, job: u32) -> Result<Option<Journal>, JournalError> {
    journal::load(cfg, job)
}

/// Which kind of mode a journal was written for.
pub fn journal_kind(j: &Journal) -> Option<ModeKind> {
    j.mode.parse::<Mode>().ok().map(|m| m.kind())
}
