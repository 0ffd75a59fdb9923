//! The prolog side: the checks that change nothing ([`super::preflight`]), the journal,
//! then the mode's setup
//! (one type per mode in [`super::modes`]: MIG instances through [`super::create`], MPS
//! daemons through [`super::mps_setup`]),
//! undone as a whole where any step fails.

use std::time::Instant;

use super::modes::{self, Setup};
use super::preflight::{marked_refusal, preflight, stop, Checked, Stop};
use super::restore::{keep_marked, restore_job, restore_locked};
use super::{
    refuse, restore::restore, run_post_hook, Failure, JobSpec, NodeFault, Outcome,
    MARKED_RETRY_BUDGET, MIG_RESTORE_BUDGET,
};
use crate::config::Config;
use crate::gpu::{GpuControl, GpuError, GpuInfo};
use crate::hooks;
use crate::journal::{self, GpuLock, Journal, JournalError, Phase};
use crate::migmps;
use crate::mode::Mode;
use crate::mps::MpsStart;
use crate::rundir;

/// Apply `spec.mode` to the job's GPUs. See the module docs for what is refused and what
/// is a fault. Running it again for a job that is already applied returns the same
/// environment; a journal left in `Applying` by a crash is restored first.
///
/// # Errors
/// [`NodeFault`] for real node faults; the GPUs are as before when it returns one.
pub fn prolog(cfg: &Config, ctl: &dyn GpuControl, spec: &JobSpec) -> Result<Outcome, NodeFault> {
    prolog_with(cfg, ctl, spec, MpsStart::Prolog)
}

/// [`prolog`], with the job's MPS daemons started where `mps_start` says: here, or (for
/// a node whose jobs have an extern step) later by [`super::start_mps_in_extern_step`], inside
/// the job's container. With [`MpsStart::ExternStep`] this makes the job's MPS
/// directories and records the job as applied; its tasks check that the daemons run
/// ([`super::mps_reachable`]).
///
/// # Errors
/// As [`prolog`].
pub fn prolog_with(
    cfg: &Config,
    ctl: &dyn GpuControl,
    spec: &JobSpec,
    mps_start: MpsStart,
) -> Result<Outcome, NodeFault> {
    if spec.mode == Mode::Off {
        return Ok(Outcome::Off);
    }
    // Nothing in a state_dir someone else could change is trusted, and nothing can be
    // recorded there: refuse, unrecorded (the job's tasks meet the same error when they
    // look for the journal).
    if let Err(e) = journal::check_state_dir(cfg) {
        log::error!("job {}: refused: {e}", spec.job);
        return Ok(refuse(e.to_string(), false));
    }
    // Journals of an earlier boot describe instances and daemons the reboot removed; they
    // must not hold GPUs (or answer for a requeued job with the same id): restore them.
    for other in journal::list(cfg)?.into_iter().flatten() {
        if other.from_earlier_boot() {
            log::warn!(
                "job {}: restoring its journal from before the last reboot",
                other.job
            );
            restore(cfg, Some(ctl), other.job)?;
        }
    }
    retry_marked(cfg, ctl, spec);
    // What earlier epilogs had to move aside is tried again, briefly, at every prolog.
    for left in rundir::clear_leftovers(cfg, Instant::now() + rundir::LEFTOVERS_TIME) {
        log::warn!("{} is still there: {}", left.path.display(), left.why);
    }
    if let Some(j) = journal::load(cfg, spec.job)? {
        // The same job asking again (a rerun of the prolog) gets what it got; anything
        // else under this id (a reused id, another user, other GPUs) is undone first.
        let same =
            j.uid == spec.uid && j.mode == spec.mode.to_string() && j.requested == requested(spec);
        match j.phase {
            Phase::Applied if same => return Ok(Outcome::Applied(j.env)),
            Phase::Refused if same => {
                return Ok(refuse(j.refused.unwrap_or_default(), false));
            }
            phase => {
                log::warn!(
                    "job {}: restoring an earlier reconfiguration ({phase:?}) first",
                    spec.job
                );
                let r = restore(cfg, Some(ctl), spec.job)?;
                if let Some(h) = r.held.first() {
                    // Its journal stays (marked); the job may not run on those GPUs.
                    return Ok(refuse(marked_refusal(spec.job, h), false));
                }
            }
        }
    }
    let outcome = apply_fresh(cfg, ctl, spec, mps_start)?;
    if let Outcome::Refused(r) = &outcome {
        log::info!("job {}: refused: {}", spec.job, r.message);
    }
    Ok(outcome)
}

/// Try once more, briefly, to restore other jobs' marked GPUs among this job's: whatever
/// held their instances (DCGM, a leaked handle) may have let go since. What stays held
/// is refused below with the reason.
pub(super) fn retry_marked(cfg: &Config, ctl: &dyn GpuControl, spec: &JobSpec) {
    let Ok(list) = journal::list(cfg) else {
        return;
    };
    for other in list.into_iter().flatten() {
        let ours = other.gpus.iter().any(|g| spec.gpus.contains(&g.index));
        if other.held.is_empty() || other.job == spec.job || !ours {
            continue;
        }
        log::info!(
            "job {}: trying again to restore job {}'s marked GPU(s)",
            spec.job,
            other.job
        );
        match restore_job(cfg, Some(ctl), other.job, MARKED_RETRY_BUDGET, false) {
            Ok(r) if r.held.is_empty() => log::info!(
                "job {}: job {}'s GPU(s) restored, no longer marked",
                spec.job,
                other.job
            ),
            Ok(_) => {}
            Err(e) => log::warn!("job {}: restoring job {}: {e}", spec.job, other.job),
        }
    }
}

/// The job's GPUs as recorded: sorted, without duplicates.
pub(super) fn requested(spec: &JobSpec) -> Vec<u32> {
    let mut g = spec.gpus.clone();
    g.sort_unstable();
    g.dedup();
    g
}

/// Record a refusal so the job's tasks (task_init) can report it. Called with the GPU
/// locks held where the refusal is about GPUs.
pub(super) fn refused(
    cfg: &Config,
    spec: &JobSpec,
    message: String,
    bad_request: bool,
) -> Result<Outcome, NodeFault> {
    let mut j = Journal::new(spec.job, spec.uid, spec.gid, spec.mode.to_string());
    j.requested = requested(spec);
    j.phase = Phase::Refused;
    j.refused = Some(message.clone());
    journal::write(cfg, &j)?;
    Ok(refuse(message, bad_request))
}

/// Refuse a job whose GPUs are as they were, recording why where the journal can be
/// written (the job's tasks report it); where it cannot (a full or unsafe `state_dir`),
/// the refusal is only logged and the tasks fail for want of a record. Never a fault.
pub fn record_refusal(cfg: &Config, spec: &JobSpec, message: String) -> Outcome {
    record_refusal_of(cfg, spec, message, false)
}

/// [`record_refusal`], keeping whether the request itself was at fault.
fn record_refusal_of(cfg: &Config, spec: &JobSpec, message: String, bad_request: bool) -> Outcome {
    match refused(cfg, spec, message.clone(), bad_request) {
        Ok(o) => o,
        Err(e) => {
            log::error!(
                "job {}: cannot record its refusal ({e}): {message}",
                spec.job
            );
            if let Err(e) = journal::remove(cfg, spec.job) {
                log::error!("job {}: {e}", spec.job);
            }
            refuse(message, bad_request)
        }
    }
}

/// Set up a job that has no journal: check the request, lock the GPUs, check them
/// (changing nothing), write the journal, then set the mode up; undo it all where a step
/// fails.
pub(super) fn apply_fresh(
    cfg: &Config,
    ctl: &dyn GpuControl,
    spec: &JobSpec,
    mps_start: MpsStart,
) -> Result<Outcome, NodeFault> {
    let gpus = match check_request(cfg, ctl, spec) {
        Ok(g) => g,
        Err(Stop::Refuse(r)) => return Ok(record_refusal_of(cfg, spec, r.message, r.bad_request)),
        Err(Stop::Fault(e)) => return Err(e),
    };
    // A lock that cannot be taken (its file cannot be made in a full state_dir, or
    // another colloc holds it too long): nothing changed yet, so the job is refused.
    let _locks = match lock_gpus(cfg, &gpus) {
        Ok(l) => l,
        Err(e) => {
            return Ok(record_refusal(
                cfg,
                spec,
                format!("colloc cannot lock the job's GPUs: {e}"),
            ))
        }
    };
    let checked = match preflight(cfg, ctl, spec, &gpus) {
        Ok(c) => c,
        Err(Stop::Refuse(r)) => return Ok(record_refusal_of(cfg, spec, r.message, r.bad_request)),
        Err(Stop::Fault(e)) => return Err(e),
    };
    // From here on the GPUs change: journal first.
    let mut j = Journal::new(spec.job, spec.uid, spec.gid, spec.mode.to_string());
    j.requested = requested(spec);
    let Checked {
        mut records,
        plans,
        catalogs,
    } = checked;
    for (r, p) in records.iter_mut().zip(plans) {
        r.planned = p;
    }
    j.gpus = records;
    if let Err(e) = journal::write(cfg, &j) {
        // Nothing changed yet.
        return Ok(record_refusal(
            cfg,
            spec,
            format!("colloc cannot record the job's setup: {e}"),
        ));
    }
    let hook_change = hooks::Change {
        action: "create",
        mode_change: j.gpus.iter().any(|g| g.mig_mode_changed),
        job: spec.job,
        gpus: j.gpu_indexes(),
        uuids: j.gpus.iter().map(|g| g.uuid.clone()).collect(),
    };
    let is_mig = migmps::layout(&spec.mode).is_some();
    let setup = Setup {
        gpus: &gpus,
        catalogs: &catalogs,
        mps_start,
        hook_change: &hook_change,
    };
    if let Err(failure) = execute(cfg, ctl, spec, &mut j, &setup) {
        return undo_failed(
            cfg,
            ctl,
            spec,
            &mut j,
            failure,
            is_mig.then_some(&hook_change),
        );
    }
    if is_mig {
        run_post_hook(cfg, &hook_change, true);
    }
    log::info!(
        "job {}: applied {} on GPU(s) {:?}",
        spec.job,
        spec.mode,
        j.gpu_indexes()
    );
    Ok(Outcome::Applied(j.env))
}

/// The request itself: a mode this node allows, with GPUs NVML knows. Returns the job's
/// GPUs, each once.
fn check_request(cfg: &Config, ctl: &dyn GpuControl, spec: &JobSpec) -> Result<Vec<GpuInfo>, Stop> {
    cfg.check_allowed(&spec.mode).map_err(|m| stop(m, true))?;
    if spec.gpus.is_empty() {
        return Err(stop(
            format!(
                "--colloc={} needs GPUs: ask for them with --gres=gpu:N",
                spec.mode
            ),
            true,
        ));
    }
    let all = ctl.gpus()?;
    let mut gpus: Vec<GpuInfo> = Vec::new();
    for &i in &spec.gpus {
        match all.iter().find(|g| g.index == i) {
            Some(g) if !gpus.contains(g) => gpus.push(g.clone()),
            Some(_) => {}
            None => return Err(GpuError::NoSuchGpu(i).into()),
        }
    }
    Ok(gpus)
}

/// The GPUs' locks, taken in UUID order, so two colloc processes never wait on each
/// other in a cycle.
fn lock_gpus(cfg: &Config, gpus: &[GpuInfo]) -> Result<Vec<GpuLock>, JournalError> {
    let mut order: Vec<&GpuInfo> = gpus.iter().collect();
    order.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    order
        .iter()
        .map(|g| GpuLock::acquire(cfg, &g.uuid))
        .collect()
}

/// The mode's setup ([`modes`]: MIG after the pre-hook), then the journal marked applied
/// with the tasks' environment. Every driver answer, after its retries, refuses the job
/// once undone: a known state (the GPU as before), not a node fault.
fn execute(
    cfg: &Config,
    ctl: &dyn GpuControl,
    spec: &JobSpec,
    j: &mut Journal,
    setup: &Setup<'_>,
) -> Result<(), Failure> {
    if let Some(mode) = modes::of(&spec.mode) {
        mode.set_up(cfg, ctl, j, setup)?;
    }
    j.env = modes::job_env(j, setup.gpus, &spec.mode, setup.catalogs);
    j.phase = Phase::Applied;
    journal::write(cfg, j)
        .map_err(|e| Failure::Refuse(format!("colloc cannot record the job's setup: {e}")))
}

/// A setup that failed part way: undo it (inside the hooks' pause: the post-hook, where
/// there is one, follows the undo) and refuse the job; a failed undo is a node fault.
fn undo_failed(
    cfg: &Config,
    ctl: &dyn GpuControl,
    spec: &JobSpec,
    j: &mut Journal,
    failure: Failure,
    hook_change: Option<&hooks::Change>,
) -> Result<Outcome, NodeFault> {
    log::info!(
        "job {}: reconfiguration failed, undoing it: {failure}",
        spec.job
    );
    let undone = undo(cfg, ctl, j);
    if let Some(change) = hook_change {
        run_post_hook(cfg, change, false);
    }
    let marked = match undone {
        Ok(marked) => marked,
        Err(undo) => {
            log::error!("job {}: undo failed too: {undo}", spec.job);
            return Err(NodeFault::Restore(format!(
                "{failure}; undoing it failed: {undo}"
            )));
        }
    };
    match failure {
        // The journal stays, marked with what holds the GPU: it says why already.
        Failure::Refuse(message) if marked => Ok(refuse(message, false)),
        Failure::Refuse(message) => Ok(record_refusal(cfg, spec, message)),
    }
}

/// Undo a prolog that failed part way: restore what its journal records, then remove the
/// journal, or keep it marked when something outside colloc holds what was made. Returns
/// whether a GPU was left marked.
pub(super) fn undo(cfg: &Config, ctl: &dyn GpuControl, j: &mut Journal) -> Result<bool, NodeFault> {
    let r = restore_locked(cfg, Some(ctl), j, MIG_RESTORE_BUDGET, false)?;
    if r.held.is_empty() {
        journal::remove(cfg, j.job)?;
        return Ok(false);
    }
    j.phase = Phase::Restoring;
    keep_marked(cfg, j, r.held)?;
    Ok(true)
}
