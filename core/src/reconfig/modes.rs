//! One type per `--colloc` mode, each in a file of its own: what the mode sets up at the
//! prolog, after the checks every mode shares and with the journal written, and the
//! environment it gives the job's tasks (docs/design.md, "The environment contract";
//! [`crate::jobenv`] reads it back). A new mode is one file here plus its tests, and one
//! line in [`of`].
//!
//! How a mode is restored is not per mode, by design: the journal records what the setup
//! made (MIG instances, MPS daemons, a MIG mode switched for the job) as it makes it, and
//! [`super::restore`] undoes exactly what is recorded, whatever the mode, so that an
//! epilog after a crash at any step (or after an upgrade that added a mode) restores it.
//!
//! The environment, in the order the task hook sets it:
//! - `mig:LAYOUT` ([`mig::Mig`]): `COLLOC_MODE` (the layout made), `COLLOC_SLOTS`
//!   (instances), `COLLOC_DEVICES` (their `MIG-…` UUIDs).
//! - `mig:LAYOUT:mps[:N]` ([`mig_mps::MigMps`]): `COLLOC_MODE` (the layout made, then `:mps`
//!   or `:mps:N`), `COLLOC_SLOTS` (instances × N; unset with `:mps`, as for plain `mps`),
//!   `COLLOC_DEVICES` (the instances' UUIDs, all of them N times over, so one entry is one
//!   slot), the MPS daemons' variables and, with `:mps:N`, the client limits of the
//!   smallest instance (`colloc run` sets each run's from its own instance).
//! - `mps[:N]` ([`mps::Mps`]): `COLLOC_MODE`, with N `COLLOC_SLOTS` and the client limits
//!   of the first GPU, `COLLOC_DEVICES` (each GPU's UUID, N times over with N), the MPS
//!   daemons' variables.
//! - `naive` ([`naive::Naive`]): `COLLOC_MODE`, `COLLOC_DEVICES` (the GPUs' UUIDs).
//! - `off`: nothing (the prolog does not run for it).
//!
//! The MPS daemons' variables: the first daemon's `CUDA_MPS_PIPE_DIRECTORY` and
//! `CUDA_MPS_LOG_DIRECTORY`, and `COLLOC_MPS_PIPES` (`DEVICES=PIPE_DIR` per daemon).

use super::Failure;
use crate::config::Config;
use crate::gpu::{GpuControl, GpuInfo};
use crate::hooks;
use crate::jobenv::MPS_PIPES;
use crate::journal::Journal;
use crate::mig::Catalog;
use crate::mode::Mode;
use crate::mps::MpsStart;

mod mig;
mod mig_mps;
mod mps;
mod naive;
#[cfg(test)]
mod tests;

/// What a mode's setup starts from: the job's GPUs, the MIG catalogs they were planned
/// from (in the journal's GPU order), where the MPS daemons start, and the hooks'
/// description of the change.
pub(super) struct Setup<'a> {
    pub gpus: &'a [GpuInfo],
    pub catalogs: &'a [Catalog],
    pub mps_start: MpsStart,
    pub hook_change: &'a hooks::Change,
}

/// A mode's behaviour on the node.
pub(super) trait JobMode {
    /// Set the job's GPUs up, recording in `j` what is made as it is made (so that a
    /// failure part way, or a crash, is undone from the journal). Every driver answer,
    /// after its retries, is a [`Failure`] that refuses the job once undone.
    fn set_up(
        &self,
        cfg: &Config,
        ctl: &dyn GpuControl,
        j: &mut Journal,
        s: &Setup<'_>,
    ) -> Result<(), Failure>;

    /// The environment of the job's tasks, in the order the task hook sets it, from what
    /// [`JobMode::set_up`] made (`gpus`: the job's GPUs; `catalogs`: as in [`Setup`]).
    fn job_env(&self, j: &Journal, gpus: &[GpuInfo], catalogs: &[Catalog])
        -> Vec<(String, String)>;
}

/// The behaviour of `mode`; `None` for `off`, which changes nothing and gives nothing.
pub(super) fn of(mode: &Mode) -> Option<Box<dyn JobMode + '_>> {
    Some(match mode {
        Mode::Off => return None,
        Mode::Naive => Box::new(naive::Naive),
        Mode::Mps { clients } => Box::new(mps::Mps { clients: *clients }),
        Mode::Mig(_) => Box::new(mig::Mig),
        Mode::MigMps { clients, .. } => Box::new(mig_mps::MigMps { clients: *clients }),
    })
}

/// The environment of the job's tasks under `mode` (empty for `off`).
pub(super) fn job_env(
    j: &Journal,
    gpus: &[GpuInfo],
    mode: &Mode,
    catalogs: &[Catalog],
) -> Vec<(String, String)> {
    of(mode).map_or_else(Vec::new, |m| m.job_env(j, gpus, catalogs))
}

/// The MPS daemons' variables: the first daemon's directories (what a plain CUDA program
/// of the job connects to) and every daemon's pipe directory in `COLLOC_MPS_PIPES`.
fn mps_daemons(j: &Journal, env: &mut Vec<(String, String)>) {
    if let Some(d) = j.mps.first() {
        env.extend(d.env());
    }
    let pipes: Vec<String> = j
        .mps
        .iter()
        .map(|d| format!("{}={}", d.devices, d.pipe_dir.display()))
        .collect();
    env.push((MPS_PIPES.into(), pipes.join(",")));
}
