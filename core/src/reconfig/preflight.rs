//! The prolog's checks that change nothing, under the GPU locks: no unusable journal, no
//! GPU another job's journal claims, no process on a GPU (waiting briefly for processes
//! that have exited but the driver still lists: [`check_idle`], [`EXITING_GRACE`]), and
//! for MIG a GPU colloc may set up with a layout that fits. Any of them refuses the job
//! before anything changes.

use std::time::Instant;

use super::{create, mig_fit, Failure, JobSpec, NodeFault, Refusal};
use crate::config::Config;
use crate::gpu::{GpuControl, GpuHold, GpuInfo, Instance};
use crate::journal::{self, GpuRecord, Journal};
use crate::mig::{Catalog, PlannedInstance};
use crate::migmps;
use crate::mode::{MigRequest, Mode};

/// Why the checks before a reconfiguration stopped: the job is refused (nothing
/// changed), or a node fault.
pub(super) enum Stop {
    Refuse(Refusal),
    Fault(NodeFault),
}

impl<E: Into<NodeFault>> From<E> for Stop {
    fn from(e: E) -> Stop {
        Stop::Fault(e.into())
    }
}

pub(super) fn stop(message: impl Into<String>, bad_request: bool) -> Stop {
    Stop::Refuse(Refusal {
        message: message.into(),
        bad_request,
    })
}

/// Why a job may not use a GPU another job's restore left marked.
pub(super) fn marked_refusal(job: u32, h: &GpuHold) -> String {
    format!(
        "GPU {} is not available: job {job}'s {}; once that is stopped, an admin runs \
         `colloc restore --job {job}` (colloc status shows what may hold it)",
        h.index,
        h.describe()
    )
}

/// What the checks found: each GPU's record (as it is now) and, for MIG, its plan and
/// the catalog it was planned from.
pub(super) struct Checked {
    pub(super) records: Vec<GpuRecord>,
    pub(super) plans: Vec<Vec<PlannedInstance>>,
    pub(super) catalogs: Vec<Catalog>,
}

/// Checks that change nothing, under the locks: no unusable journal, no GPU another
/// job's journal claims, no process on a GPU, and for MIG a GPU colloc may set up with
/// a layout that fits.
pub(super) fn preflight(
    cfg: &Config,
    ctl: &dyn GpuControl,
    spec: &JobSpec,
    gpus: &[GpuInfo],
) -> Result<Checked, Stop> {
    let others = journal::list(cfg)?;
    if let Some(Err(e)) = others.iter().find(|j| j.is_err()) {
        // It may hold any GPU; touching one could undo another job's setup.
        return Err(stop(
            format!(
                "{e}; colloc changes no GPU until an admin runs `colloc restore --all` \
                 (which moves it to {}) and checks the GPUs with `colloc status`",
                cfg.state_dir.join(journal::CORRUPT_DIR).display()
            ),
            false,
        ));
    }
    let mut checked = Checked {
        records: Vec::new(),
        plans: Vec::new(),
        catalogs: Vec::new(),
    };
    let exiting_until = Instant::now() + EXITING_GRACE;
    for g in gpus {
        check_unclaimed(spec, g, others.iter().flatten())?;
        check_idle(ctl, g, exiting_until)?;
        let existing = list_instances(cfg, ctl, spec, g)?;
        let mut record = GpuRecord {
            index: g.index,
            uuid: g.uuid.clone(),
            name: g.name.clone(),
            mig_before: g.mig_mode,
            mig_mode_changed: false,
            preexisting: existing.iter().map(|i| i.gi_id).collect(),
            planned: Vec::new(),
            created: Vec::new(),
        };
        if migmps::layout(&spec.mode).is_none() {
            // CUDA sees no whole GPU in MIG mode: MIG off for the job, or refused.
            record.mig_mode_changed = non_mig_on_mig(cfg, g, &spec.mode, &existing)?;
        }
        if let Some(req) = migmps::layout(&spec.mode) {
            let (plan, catalog) = plan_mig(cfg, ctl, g, req, &existing, &mut record)?;
            migmps::check(cfg, &spec.mode, &catalog, Some(&plan))
                .map_err(|(msg, bad_request)| stop(msg, bad_request))?;
            checked.plans.push(plan);
            checked.catalogs.push(catalog);
        }
        checked.records.push(record);
    }
    Ok(checked)
}

/// A `naive`/`mps` job on GPU `g`: whether colloc turns MIG off for it
/// ([`mig_fit::non_mig_job`]); instances it does not own keep MIG on (refused).
fn non_mig_on_mig(
    cfg: &Config,
    g: &GpuInfo,
    mode: &Mode,
    existing: &[Instance],
) -> Result<bool, Stop> {
    let off = mig_fit::non_mig_job(cfg, g, mode).map_err(|m| stop(m, false))?;
    if off && !existing.is_empty() {
        return Err(stop(
            format!(
                "GPU {} is in MIG mode with {} MIG instance(s) colloc does not own, so MIG \
                 cannot be turned off for --colloc={mode}; use a mig mode, or ask the admin",
                g.index,
                existing.len()
            ),
            false,
        ));
    }
    Ok(off)
}

/// No other job's journal claims GPU `g` (a restore that did not finish, a marked GPU).
fn check_unclaimed<'a>(
    spec: &JobSpec,
    g: &GpuInfo,
    others: impl Iterator<Item = &'a Journal>,
) -> Result<(), Stop> {
    for other in others {
        if other.job == spec.job || !other.claims(&g.uuid) {
            continue;
        }
        if let Some(h) = other.held.iter().find(|h| h.uuid == g.uuid) {
            return Err(stop(marked_refusal(other.job, h), false));
        }
        return Err(stop(
            format!(
                "GPU {} is still reconfigured for job {} (its restore did not finish); \
                 an admin must run `colloc restore --job {}`",
                g.index, other.job, other.job
            ),
            false,
        ));
    }
    Ok(())
}

/// How long the prolog waits, for all of a job's GPUs together, for processes that have
/// exited but that the driver still lists while it tears their context down: on an H100
/// (driver 580) an MPS server killed with SIGKILL was listed for about 0.1 s after it
/// became a zombie, as Slurm's kill of an extern step leaves a job's daemons.
pub const EXITING_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// No process runs on GPU `g`: colloc reconfigures only idle GPUs. Listed processes that
/// have all exited (gone, or zombies) are waited for until `exiting_until`; one still
/// running refuses the GPU at once.
fn check_idle(ctl: &dyn GpuControl, g: &GpuInfo, exiting_until: Instant) -> Result<(), Stop> {
    let procs = loop {
        let procs = ctl.processes(g.index)?;
        let exiting = procs
            .iter()
            .all(|p| crate::sys::PidHandle::open(p.pid).is_none_or(|h| h.gone()));
        if procs.is_empty() || !exiting || Instant::now() >= exiting_until {
            break procs;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    if procs.is_empty() {
        return Ok(());
    }
    let pids: Vec<String> = procs.iter().map(|p| p.pid.to_string()).collect();
    Err(stop(
        format!(
            "GPU {} is busy: process(es) {} use it; colloc reconfigures only idle GPUs",
            g.index,
            pids.join(", ")
        ),
        false,
    ))
}

/// The MIG instances GPU `g` has now. Root without the mig-config capability: MIG jobs
/// cannot run here (refused, naming it); other modes create no instance and need not
/// list them.
fn list_instances(
    cfg: &Config,
    ctl: &dyn GpuControl,
    spec: &JobSpec,
    g: &GpuInfo,
) -> Result<Vec<Instance>, Stop> {
    match ctl.instances(g.index) {
        Ok(list) => Ok(list),
        Err(e) if e.is_no_permission() => {
            if migmps::layout(&spec.mode).is_some() {
                let Failure::Refuse(msg) =
                    create::driver_refusal(cfg, g.index, "listing MIG instances", &e);
                return Err(stop(msg, false));
            }
            log::warn!(
                "job {}: GPU {}: {e}; MIG instances not checked",
                spec.job,
                g.index
            );
            Ok(Vec::new())
        }
        Err(e) => Err(e.into()),
    }
}

/// A MIG request on GPU `g`: no instance colloc does not own, MIG mode on (or switched
/// for the job where the node allows it, recorded in `record`), and a layout that fits:
/// the plan and the catalog it comes from.
fn plan_mig(
    cfg: &Config,
    ctl: &dyn GpuControl,
    g: &GpuInfo,
    req: &MigRequest,
    existing: &[Instance],
    record: &mut GpuRecord,
) -> Result<(Vec<PlannedInstance>, Catalog), Stop> {
    if !existing.is_empty() {
        let what: Vec<String> = existing
            .iter()
            .map(|i| format!("{} at start {}", i.profile, i.placement.start))
            .collect();
        return Err(stop(
            format!(
                "GPU {} has MIG instances colloc does not own ({}); refusing to touch them",
                g.index,
                what.join(", ")
            ),
            false,
        ));
    }
    match g.mig_mode {
        Some(m) if m.current => {}
        Some(_) if cfg.allow_mig_mode_change => record.mig_mode_changed = true,
        Some(_) => {
            return Err(stop(
                format!(
                    "GPU {} ({}) is not in MIG mode and this node does not switch it \
                     (allow_mig_mode_change = false); ask the admin, or use mps or naive",
                    g.index, g.name
                ),
                false,
            ))
        }
        None => {
            return Err(stop(
                format!(
                    "GPU {} ({}) does not support MIG; use mps or naive",
                    g.index, g.name
                ),
                true,
            ))
        }
    }
    let catalog = create::catalog_for(ctl, g).map_err(|m| stop(m, true))?;
    let plan = catalog.plan(req).map_err(|e| stop(e.to_string(), true))?;
    Ok((plan, catalog))
}
