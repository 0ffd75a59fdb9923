//! The epilog side: lock and read the journal, undo what it records (MPS daemons and
//! files, MIG instances through [`super::destroy`]), then remove the journal or keep it
//! with what holds the GPUs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::destroy::restore_mig;
use super::run_post_hook;
use super::{NodeFault, MIG_RESTORE_BUDGET};
use crate::config::Config;
use crate::gpu::{GpuControl, GpuHold};
use crate::hooks;
use crate::journal::{self, GpuLock, Journal, JournalError, Phase};
use crate::mps;
use crate::rundir;

/// What a restore did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Jobs whose journals were found and cleared.
    pub jobs: Vec<u32>,
    /// MIG instances destroyed.
    pub destroyed: usize,
    /// MPS daemons stopped.
    pub mps_stopped: usize,
    /// Processes killed on the job's instances or as MPS leftovers.
    pub killed: Vec<u32>,
    /// GPUs left marked: instances (or a MIG mode) that could not be brought back within
    /// [`MIG_RESTORE_BUDGET`] because something outside colloc holds them. Their journal
    /// stays; the job is not in `jobs`.
    pub held: Vec<GpuHold>,
    /// Unusable journals moved to `state_dir/corrupt/` (`restore --all`).
    pub quarantined: Vec<Quarantined>,
    /// What could not be cleaned up of the jobs' own files (logged; not a failure).
    pub warnings: Vec<String>,
    /// Trees in `run_dir/.leftovers` still there after `restore --all` tried them.
    pub leftovers: Vec<rundir::Leftover>,
}

/// An unusable journal that `restore --all` moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// Where it was.
    pub file: PathBuf,
    /// Where it is now.
    pub moved_to: PathBuf,
    /// Why it could not be used.
    pub why: String,
}

/// Restore the job's GPUs to what its journal recorded and remove the journal. No journal:
/// nothing to do (the prolog never ran). Idempotent.
///
/// `ctl` may be `None` where NVML cannot be loaded: that is fine for mps/naive jobs and a
/// fault for a MIG journal.
///
/// MIG instances that something outside colloc holds (the driver answers IN_USE with no
/// process listed) are retried within [`MIG_RESTORE_BUDGET`]; what is still held then is
/// a known state, not a fault: the journal stays with the holds recorded
/// ([`RestoreReport::held`]), the GPU is refused to later jobs, and a later restore
/// finishes.
///
/// # Errors
/// [`NodeFault`] when the GPU cannot be brought back; the journal then stays, so a later
/// restore (or an admin) can finish.
pub fn restore(
    cfg: &Config,
    ctl: Option<&dyn GpuControl>,
    job: u32,
) -> Result<RestoreReport, NodeFault> {
    restore_within(cfg, ctl, job, MIG_RESTORE_BUDGET)
}

/// [`restore`] with its own time budget for the MIG instances.
///
/// # Errors
/// As [`restore`].
pub fn restore_within(
    cfg: &Config,
    ctl: Option<&dyn GpuControl>,
    job: u32,
    budget: Duration,
) -> Result<RestoreReport, NodeFault> {
    restore_job(cfg, ctl, job, budget, true)
}

/// [`restore_within`], with the `[mig]` hooks around the destroys or not (a prolog's
/// brief retry of another job's marked GPU runs none: its time is not the hooks').
pub(super) fn restore_job(
    cfg: &Config,
    ctl: Option<&dyn GpuControl>,
    job: u32,
    budget: Duration,
    with_hooks: bool,
) -> Result<RestoreReport, NodeFault> {
    let uuids = |j: &Journal| {
        let mut u: Vec<String> = j.gpus.iter().map(|g| g.uuid.clone()).collect();
        u.sort();
        u
    };
    let Some(mut j) = journal::load(cfg, job)? else {
        return Ok(RestoreReport::default());
    };
    // The job summary's socket, where the batch step was killed before its end.
    match crate::jobsummary::remove_socket(&cfg.run_dir, job) {
        Ok(true) => log::info!("job {job}: removed its summary socket, which its batch step left"),
        Ok(false) => {}
        Err(e) => log::warn!("job {job}: cannot remove its summary socket: {e}"),
    }
    // Lock the journal's GPUs, then read it again: a prolog that held the locks may have
    // changed it meanwhile (more instances, another daemon).
    let mut _locks = Vec::new();
    for attempt in 0.. {
        let order = uuids(&j);
        drop(std::mem::take(&mut _locks));
        _locks = restore_locks(cfg, job, &order)?;
        match journal::load(cfg, job)? {
            None => return Ok(RestoreReport::default()),
            Some(now) if uuids(&now) == order || attempt == 3 => {
                j = now;
                break;
            }
            Some(now) => j = now,
        }
    }
    // The journal writes of a restore are progress markers: where they fail (a full,
    // quota-bound or failing state_dir) the undo goes on; the journal as it was still
    // leads a later restore to the same (idempotent) undo.
    if j.phase != Phase::Refused {
        j.phase = Phase::Restoring;
        if let Err(e) = journal::write(cfg, &j) {
            log::warn!("job {job}: cannot mark its journal Restoring ({e}); restoring anyway");
        }
    }
    let mut report = restore_locked(cfg, ctl, &j, budget, with_hooks)?;
    if !report.held.is_empty() {
        if let Err(e) = keep_marked(cfg, &mut j, report.held.clone()) {
            let w = format!(
                "job {job}: cannot record what holds its GPUs ({e}); its journal stays as it \
                 was, so a later restore tries again"
            );
            log::error!("{w}");
            report.warnings.push(w);
        }
        return Ok(report);
    }
    if let Err(e) = journal::remove(cfg, job) {
        let w = format!(
            "job {job}: restored, but its journal could not be removed ({e}); a later \
             restore finds nothing left to undo and removes it"
        );
        log::error!("{w}");
        report.warnings.push(w);
    }
    report.jobs.push(job);
    log::info!("job {job}: restored");
    Ok(report)
}

/// The locks of a restore, in `order`. A lock file that cannot be made (`ENOSPC`,
/// `EDQUOT`, `EIO` in a full or failing `state_dir`) is no one's lock: `O_CREAT` fails only
/// where the file does not exist, so no prolog holds it either; the undo goes on without
/// it (logged) rather than leave the GPUs reconfigured.
///
/// # Errors
/// A lock someone holds past the time-out.
pub(super) fn restore_locks(
    cfg: &Config,
    job: u32,
    order: &[String],
) -> Result<Vec<GpuLock>, NodeFault> {
    let mut locks = Vec::new();
    for u in order {
        match GpuLock::acquire(cfg, u) {
            Ok(l) => locks.push(l),
            Err(
                e @ (JournalError::Io { .. } | JournalError::Dir(crate::fs::FsError::Io { .. })),
            ) => {
                log::warn!("job {job}: {e}; restoring without the lock of {u}");
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(locks)
}

/// Restore every journal, going by the files in `state_dir/jobs`: each journal is
/// restored; anything there that is not a usable journal (corrupt, misnamed, naming
/// another job, not a plain root-owned file) is moved to `state_dir/corrupt/` and listed
/// in the report, since the GPUs it may describe need an admin's look. Then what earlier
/// restores had to move aside under `run_dir` is removed. Continues past failures and
/// returns the first one.
///
/// # Errors
/// The first [`NodeFault`] met.
pub fn restore_all(cfg: &Config, ctl: Option<&dyn GpuControl>) -> Result<RestoreReport, NodeFault> {
    let mut total = RestoreReport::default();
    let mut first_err = None;
    for entry in journal::scan(cfg)? {
        let job = match entry.journal {
            Ok(j) => j.job,
            Err(JournalError::Corrupt { path, message }) => {
                match journal::quarantine(cfg, &entry.name) {
                    Ok(to) => {
                        log::error!(
                            "journal {} is unusable ({message}); moved it to {}",
                            path.display(),
                            to.display()
                        );
                        total.quarantined.push(Quarantined {
                            file: path,
                            moved_to: to,
                            why: message,
                        });
                    }
                    Err(e) => {
                        first_err.get_or_insert(NodeFault::Journal(e));
                    }
                }
                continue;
            }
            Err(e) => {
                first_err.get_or_insert(NodeFault::Journal(e));
                continue;
            }
        };
        match restore(cfg, ctl, job) {
            Ok(r) => {
                total.jobs.extend(r.jobs);
                total.destroyed += r.destroyed;
                total.mps_stopped += r.mps_stopped;
                total.killed.extend(r.killed);
                total.held.extend(r.held);
                total.warnings.extend(r.warnings);
            }
            Err(e) => {
                log::error!("job {job}: {e}");
                first_err.get_or_insert(e);
            }
        }
    }
    total.leftovers = rundir::clear_leftovers(cfg, Instant::now() + rundir::CLEANUP_TIME);
    // A pause of the hooks that no journal holds any more (its holder's journal was
    // removed by hand) is resumed.
    match hooks::settle(cfg) {
        Ok(true) => log::info!("resumed what the [mig] hooks had paused"),
        Ok(false) => {}
        Err(e) => total.warnings.push(e),
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(total),
    }
}

/// Undo what journal `j` records: its MPS part (at most [`MPS_RESTORE_BUDGET`]), then its
/// MIG part within `mig_budget`, counted from the end of the MPS part: a user who makes
/// the MPS part take all of its time (daemons and colloc's children stopped) must not
/// leave the MIG part none, or its instances (which the driver may answer IN_USE for a
/// moment, or keep listed) would stay and the GPU be marked.
pub(super) fn restore_locked(
    cfg: &Config,
    ctl: Option<&dyn GpuControl>,
    j: &Journal,
    mig_budget: Duration,
    with_hooks: bool,
) -> Result<RestoreReport, NodeFault> {
    let mut report = RestoreReport::default();
    if !j.mps.is_empty() || j.job_dir.is_some() {
        restore_mps(cfg, j, &mut report);
    }
    let has_mig = j
        .gpus
        .iter()
        .any(|g| !g.planned.is_empty() || g.mig_mode_changed);
    if !has_mig {
        return Ok(report);
    }
    let Some(ctl) = ctl else {
        return Err(NodeFault::Restore(format!(
            "job {} has MIG instances to destroy but NVML ({}) cannot be loaded",
            j.job, cfg.nvml_library
        )));
    };
    let change = hooks::Change {
        action: "destroy",
        mode_change: j.gpus.iter().any(|g| g.mig_mode_changed),
        job: j.job,
        gpus: j.gpu_indexes(),
        uuids: j.gpus.iter().map(|g| g.uuid.clone()).collect(),
    };
    if with_hooks {
        // The restore must try anyway: a failed pre-hook is a warning.
        if let Err(e) = hooks::pause(cfg, &change) {
            log::warn!("job {}: {e}", j.job);
        }
    }
    // The MIG part's own budget starts now, after the MPS part and the pre-hook (each
    // bounded on its own).
    let deadline = Instant::now() + mig_budget;
    let result = restore_mig(cfg, ctl, j, deadline, &mut report);
    if with_hooks {
        let ok = matches!(&result, Ok(()) if report.held.is_empty());
        run_post_hook(cfg, &change, ok);
    }
    result?;
    Ok(report)
}

/// Keep a journal whose restore could not finish, with what holds its GPUs.
pub(super) fn keep_marked(
    cfg: &Config,
    j: &mut Journal,
    held: Vec<GpuHold>,
) -> Result<(), NodeFault> {
    for h in &held {
        log::warn!(
            "job {}: {}; the GPU stays marked: jobs on this node are refused it until \
             `colloc restore --job {}` succeeds",
            j.job,
            h.describe(),
            j.job
        );
    }
    j.held = held;
    journal::write(cfg, j)?;
    Ok(())
}

/// Stop the job's MPS daemons (all at once) and remove its directories, within
/// [`MPS_RESTORE_BUDGET`]. Never a fault: what is left is reported as a warning.
pub(super) fn restore_mps(cfg: &Config, j: &Journal, report: &mut RestoreReport) {
    // Under Contain the daemons ran in the job's container and its extern step's cgroup,
    // which Slurm ends with the job: what is left (an extern step that died early, an
    // admin's restore of a running job) is killed, never asked to quit. A `quit` would run
    // the control program as the user outside the job's cgroups and mount namespace, where
    // the user may trace it once it has exec'd and use it (open what the job's devices
    // cgroup hid, for as long as its deadline) (SECURITY.md).
    let program = match mps::trusted_control(cfg) {
        Ok(_) if j.mps_start == mps::MpsStart::ExternStep => None,
        Ok(p) => Some(p),
        Err(e) => {
            log::warn!(
                "job {}: {e}; killing its daemons without asking them to quit",
                j.job
            );
            None
        }
    };
    let reports = mps::stop_all(
        program.as_deref(),
        &j.mps,
        Some((j.uid, j.gid)),
        Instant::now(),
    );
    for (d, r) in j.mps.iter().zip(&reports) {
        report.killed.extend(&r.killed);
        if !r.survived.is_empty() {
            let w = format!(
                "MPS processes {:?} of {} are still there after SIGKILL",
                r.survived,
                d.pipe_dir.display()
            );
            log::error!("job {}: {w}", j.job);
            report.warnings.push(w);
        }
    }
    report.mps_stopped += reports.len();
    let cleanup = rundir::remove(cfg, j.job, Instant::now() + rundir::CLEANUP_TIME);
    if let Some(problem) = cleanup.problem {
        report.warnings.push(match cleanup.moved_aside {
            Some(to) => format!(
                "job {}: some of its files could not be removed ({problem}); moved to {}",
                j.job,
                to.display()
            ),
            None => format!("job {}: {problem}", j.job),
        });
    }
}
