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

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::rundir;

use crate::config::Config;
use crate::container;
use crate::devfiles;
use crate::gpu::{GpuControl, GpuError, GpuHold, GpuInfo, HoldReason};
use crate::hooks;
use crate::journal::{self, GpuLock, GpuRecord, Journal, JournalError, Phase};
use crate::mig::{self, Catalog, PlannedInstance};
use crate::migmps;
use crate::mode::{Mode, ModeKind};
use crate::mps::{self, MpsDaemon, MpsStart};
use crate::retry;
use crate::slurmconf::SlurmFacts;

/// How long restore waits for killed processes to leave an instance (within
/// [`MIG_RESTORE_BUDGET`]).
pub const KILL_WAIT: Duration = Duration::from_secs(10);
/// The most time one restore spends on a job's MIG instances, all GPUs together: waiting
/// for killed processes, retrying destroys the driver answers IN_USE (DCGM profiling an
/// instance, a leaked NVML handle, a GPU instance busy for a moment after its compute
/// instance went), waiting for destroyed instances to leave the driver's listing. Past it
/// the GPU is left marked (journal kept, see [`GpuHold`]); the epilog stays well inside
/// Slurm's `PrologEpilogTimeout`.
pub const MIG_RESTORE_BUDGET: Duration = Duration::from_secs(15);
/// How long a prolog spends trying again to restore another job's marked GPU that this
/// job was given (the holder may have gone by now).
pub const MARKED_RETRY_BUDGET: Duration = Duration::from_secs(1);
/// First pause between destroys answered IN_USE; it doubles up to [`RETRY_PAUSE_MAX`].
const RETRY_PAUSE_FIRST: Duration = Duration::from_millis(100);
/// Longest pause between destroys answered IN_USE.
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);
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
/// a node whose jobs have an extern step) later by [`start_mps_in_extern_step`], inside
/// the job's container. With [`MpsStart::ExternStep`] this makes the job's MPS
/// directories and records the job as applied; its tasks check that the daemons run
/// ([`mps_reachable`]).
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
fn retry_marked(cfg: &Config, ctl: &dyn GpuControl, spec: &JobSpec) {
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

/// Why a job may not use a GPU another job's restore left marked.
fn marked_refusal(job: u32, h: &GpuHold) -> String {
    format!(
        "GPU {} is not available: job {job}'s {}; once that is stopped, an admin runs \
         `colloc restore --job {job}` (colloc status shows what may hold it)",
        h.index,
        h.describe()
    )
}

/// The job's GPUs as recorded: sorted, without duplicates.
fn requested(spec: &JobSpec) -> Vec<u32> {
    let mut g = spec.gpus.clone();
    g.sort_unstable();
    g.dedup();
    g
}

/// Record a refusal so the job's tasks (task_init) can report it. Called with the GPU
/// locks held where the refusal is about GPUs.
fn refused(
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
    match refused(cfg, spec, message.clone(), false) {
        Ok(o) => o,
        Err(e) => {
            log::error!(
                "job {}: cannot record its refusal ({e}): {message}",
                spec.job
            );
            if let Err(e) = journal::remove(cfg, spec.job) {
                log::error!("job {}: {e}", spec.job);
            }
            refuse(message, false)
        }
    }
}

fn apply_fresh(
    cfg: &Config,
    ctl: &dyn GpuControl,
    spec: &JobSpec,
    mps_start: MpsStart,
) -> Result<Outcome, NodeFault> {
    if let Err(msg) = cfg.check_allowed(&spec.mode) {
        return refused(cfg, spec, msg, true);
    }
    if spec.gpus.is_empty() {
        return refused(
            cfg,
            spec,
            format!(
                "--colloc={} needs GPUs: ask for them with --gres=gpu:N",
                spec.mode
            ),
            true,
        );
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
    // Locks in UUID order, so two colloc processes never wait on each other in a cycle.
    let mut order: Vec<&GpuInfo> = gpus.iter().collect();
    order.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    // A lock that cannot be taken (its file cannot be made in a full state_dir, or
    // another colloc holds it too long): nothing changed yet, so the job is refused.
    let _locks = match order
        .iter()
        .map(|g| GpuLock::acquire(cfg, &g.uuid))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(l) => l,
        Err(e) => {
            return Ok(record_refusal(
                cfg,
                spec,
                format!("colloc cannot lock the job's GPUs: {e}"),
            ))
        }
    };

    // Checks that change nothing.
    let others = journal::list(cfg)?;
    let mut records = Vec::new();
    let mut plans: Vec<Vec<PlannedInstance>> = Vec::new();
    let mut catalogs: Vec<Catalog> = Vec::new();
    if let Some(Err(e)) = others.iter().find(|j| j.is_err()) {
        // It may hold any GPU; touching one could undo another job's setup.
        return refused(
            cfg,
            spec,
            format!(
                "{e}; colloc changes no GPU until an admin runs `colloc restore --all` \
                 (which moves it to {}) and checks the GPUs with `colloc status`",
                cfg.state_dir.join(journal::CORRUPT_DIR).display()
            ),
            false,
        );
    }
    for g in &gpus {
        for other in others.iter().flatten() {
            if other.job != spec.job && other.claims(&g.uuid) {
                if let Some(h) = other.held.iter().find(|h| h.uuid == g.uuid) {
                    return refused(cfg, spec, marked_refusal(other.job, h), false);
                }
                return refused(
                    cfg,
                    spec,
                    format!(
                        "GPU {} is still reconfigured for job {} (its restore did not finish); \
                         an admin must run `colloc restore --job {}`",
                        g.index, other.job, other.job
                    ),
                    false,
                );
            }
        }
        let procs = ctl.processes(g.index)?;
        if !procs.is_empty() {
            let pids: Vec<String> = procs.iter().map(|p| p.pid.to_string()).collect();
            return refused(
                cfg,
                spec,
                format!(
                    "GPU {} is busy: process(es) {} use it; colloc reconfigures only idle GPUs",
                    g.index,
                    pids.join(", ")
                ),
                false,
            );
        }
        let existing = match ctl.instances(g.index) {
            Ok(list) => list,
            // Root without the mig-config capability: MIG jobs cannot run here; other
            // modes create no instance and need not list them.
            Err(e) if e.is_no_permission() => {
                if migmps::layout(&spec.mode).is_some() {
                    let Failure::Refuse(msg) =
                        create::driver_refusal(cfg, g.index, "listing MIG instances", &e);
                    return refused(cfg, spec, msg, false);
                }
                log::warn!(
                    "job {}: GPU {}: {e}; MIG instances not checked",
                    spec.job,
                    g.index
                );
                Vec::new()
            }
            Err(e) => return Err(e.into()),
        };
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
        if let Some(req) = migmps::layout(&spec.mode) {
            if !existing.is_empty() {
                let what: Vec<String> = existing
                    .iter()
                    .map(|i| format!("{} at start {}", i.profile, i.placement.start))
                    .collect();
                return refused(
                    cfg,
                    spec,
                    format!(
                        "GPU {} has MIG instances colloc does not own ({}); refusing to touch them",
                        g.index,
                        what.join(", ")
                    ),
                    false,
                );
            }
            match g.mig_mode {
                Some(m) if m.current => {}
                Some(_) if cfg.allow_mig_mode_change => record.mig_mode_changed = true,
                Some(_) => {
                    return refused(
                        cfg,
                        spec,
                        format!(
                            "GPU {} ({}) is not in MIG mode and this node does not switch it \
                             (allow_mig_mode_change = false); ask the admin, or use mps or naive",
                            g.index, g.name
                        ),
                        false,
                    )
                }
                None => {
                    return refused(
                        cfg,
                        spec,
                        format!(
                            "GPU {} ({}) does not support MIG; use mps or naive",
                            g.index, g.name
                        ),
                        true,
                    )
                }
            }
            let catalog = match catalog_for(ctl, g) {
                Ok(c) => c,
                Err(msg) => return refused(cfg, spec, msg, true),
            };
            match catalog.plan(req) {
                Ok(p) => plans.push(p),
                Err(e) => return refused(cfg, spec, e.to_string(), true),
            }
            if let Err((msg, bad_request)) = migmps::check(cfg, &spec.mode, &catalog, plans.last())
            {
                return refused(cfg, spec, msg, bad_request);
            }
            catalogs.push(catalog);
        }
        records.push(record);
    }

    // From here on the GPUs change: journal first.
    let mut j = Journal::new(spec.job, spec.uid, spec.gid, spec.mode.to_string());
    j.requested = requested(spec);
    for (r, p) in records.iter_mut().zip(plans.iter()) {
        r.planned = p.clone();
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
    let result = match &spec.mode {
        // Every driver answer, after its retries, refuses the job once undone: a known
        // state (the GPU as before), not a node fault.
        Mode::Mig(_) | Mode::MigMps { .. } => {
            hooks::run(cfg, hooks::Phase::Pre, &hook_change, true)
                .map_err(|e| Failure::Refuse(format!("{e}; nothing was changed, ask the admin")))
                .and_then(|()| create::make_instances(cfg, ctl, &mut j))
                // MPS inside the instances: one daemon each, undone with them.
                .and_then(|()| match spec.mode {
                    Mode::MigMps { .. } => migmps::daemons(cfg, &j)
                        .map_err(Failure::Refuse)
                        .and_then(|d| start_mps(cfg, &mut j, mps_start, d)),
                    _ => Ok(()),
                })
        }
        Mode::Mps { .. } => {
            let d = j
                .gpus
                .iter()
                .map(|g| {
                    let dir = rundir::gpu_dir(cfg, j.job, g.index);
                    (
                        rundir::gpu_dir_name(g.index),
                        MpsDaemon::in_dir(&dir, &g.uuid),
                    )
                })
                .collect();
            start_mps(cfg, &mut j, mps_start, d)
        }
        Mode::Naive | Mode::Off => Ok(()),
    }
    .and_then(|()| {
        j.env = match &spec.mode {
            Mode::MigMps { clients, .. } => {
                migmps::job_env(&j, *clients, &migmps::instance_memory(&j, &catalogs))
            }
            _ => job_env(&j, &gpus, &spec.mode),
        };
        j.phase = Phase::Applied;
        journal::write(cfg, &j)
            .map_err(|e| Failure::Refuse(format!("colloc cannot record the job's setup: {e}")))
    });
    if let Err(failure) = result {
        log::info!(
            "job {}: reconfiguration failed, undoing it: {failure}",
            spec.job
        );
        // The undo runs inside the hooks' pause: the post-hook follows it.
        let undone = undo(cfg, ctl, &mut j);
        if is_mig {
            run_post_hook(cfg, &hook_change, false);
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
        return match failure {
            // The journal stays, marked with what holds the GPU: it says why already.
            Failure::Refuse(message) if marked => Ok(refuse(message, false)),
            Failure::Refuse(message) => Ok(record_refusal(cfg, spec, message)),
        };
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

/// Run the post-hook; its failure is logged, never more (the GPUs are set or undone).
fn run_post_hook(cfg: &Config, change: &hooks::Change, ok: bool) {
    if let Err(e) = hooks::run(cfg, hooks::Phase::Post, change, ok) {
        log::warn!("job {}: {e}", change.job);
    }
}

/// Undo a prolog that failed part way: restore what its journal records, then remove the
/// journal, or keep it marked when something outside colloc holds what was made. Returns
/// whether a GPU was left marked.
fn undo(cfg: &Config, ctl: &dyn GpuControl, j: &mut Journal) -> Result<bool, NodeFault> {
    let r = restore_locked(cfg, Some(ctl), j, MIG_RESTORE_BUDGET, false)?;
    if r.held.is_empty() {
        journal::remove(cfg, j.job)?;
        return Ok(false);
    }
    j.phase = Phase::Restoring;
    keep_marked(cfg, j, r.held)?;
    Ok(true)
}

/// Keep a journal whose restore could not finish, with what holds its GPUs.
fn keep_marked(cfg: &Config, j: &mut Journal, held: Vec<GpuHold>) -> Result<(), NodeFault> {
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

/// The MIG catalog of a GPU: what NVML reports, or the built-in table where it cannot say.
///
/// # Errors
/// A one-line message when neither knows the GPU's profiles.
pub fn catalog_for(ctl: &dyn GpuControl, g: &GpuInfo) -> Result<Catalog, String> {
    match ctl.catalog(g.index) {
        Ok(c) if c.profiles.iter().any(|p| !p.placements.is_empty()) => Ok(c),
        other => {
            if let Err(e) = &other {
                log::debug!(
                    "GPU {}: NVML has no MIG profiles ({e}); using built-in tables",
                    g.index
                );
            }
            mig::builtin_catalog(&g.name).map_err(|_| {
                format!(
                    "GPU {} ({}) reports no MIG profiles and colloc has no table for it",
                    g.index, g.name
                )
            })
        }
    }
}

/// The MPS control program, if it is one root may run for a user: a regular file only
/// root can change (else whoever can change it runs code as every MPS job's user).
pub(crate) fn trusted_mps_control(cfg: &Config) -> Result<PathBuf, String> {
    let program = cfg.mps_control_path().ok_or_else(|| {
        format!(
            "the MPS control program {} is not installed on this node (looked in {}); \
             ask the admin",
            cfg.mps_control,
            crate::config::SYSTEM_BIN_DIRS.join(":")
        )
    })?;
    crate::fs::open_trusted_file(&program)
        .map(|_| program)
        .map_err(|e| format!("the MPS control program: {e}"))
}

/// Start the job's MPS daemons (`daemons`: one per GPU in `run_dir/job-<id>/gpu<K>`, or
/// one per MIG instance in `…/gpu<K>-gi<G>`, each with its directory's name), as the
/// job's user (or, with [`MpsStart::ExternStep`], make their directories and leave the
/// start to the job's extern step). Failures refuse the job: they concern its files and
/// daemons, not the GPUs.
fn start_mps(
    cfg: &Config,
    j: &mut Journal,
    mps_start: MpsStart,
    daemons: Vec<(String, MpsDaemon)>,
) -> Result<(), Failure> {
    let program = trusted_mps_control(cfg).map_err(Failure::Refuse)?;
    j.mps_start = mps_start;
    j.job_dir = Some(rundir::job_dir(cfg, j.job));
    let (names, daemons): (Vec<String>, Vec<MpsDaemon>) = daemons.into_iter().unzip();
    j.mps = daemons;
    // Record before making anything, so a crash in between is cleaned up by restore.
    journal::write(cfg, j)
        .map_err(|e| Failure::Refuse(format!("colloc cannot record the job's setup: {e}")))?;
    rundir::create_named(cfg, j.job, j.uid, j.gid, &names)
        .map_err(|e| Failure::Refuse(format!("cannot set up the job's MPS directories: {e}")))?;
    if mps_start == MpsStart::ExternStep {
        log::info!(
            "job {}: its MPS daemons start in its extern step, inside its container",
            j.job
        );
        return Ok(());
    }
    // One deadline for all of them: the prolog's time does not grow with the GPU count.
    let deadline = Instant::now() + mps::START_TIME;
    for d in &j.mps {
        mps::start_daemon(&program, d, Some((j.uid, j.gid)), deadline)
            .map_err(|e| Failure::Refuse(not_started(d, &e)))?;
    }
    j.mps_mount_ns = container::own_mount_ns().ok();
    Ok(())
}

/// Why the job is refused when daemon `d` did not start; a MIG instance's is named.
fn not_started(d: &MpsDaemon, e: &mps::MpsError) -> String {
    if d.devices.starts_with("MIG-") {
        format!(
            "the MPS daemon did not start in MIG instance {}: {e}",
            d.devices
        )
    } else {
        format!("the MPS daemon did not start: {e}")
    }
}

/// What the extern step did about a job's MPS daemons ([`start_mps_in_extern_step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternStart {
    /// Nothing to start here: no journal, not an MPS job, refused, started by the prolog
    /// or already started.
    Nothing,
    /// The daemons run in the mount namespace `mount_ns`, entered through `holder` (none:
    /// the extern step's own, where there is no job container).
    Started {
        /// How many.
        daemons: usize,
        /// The namespace they run in (its inode number).
        mount_ns: u64,
        /// The job container's namespace file they entered through.
        holder: Option<PathBuf>,
        /// They were put in the extern step's freezer cgroup (Slurm kills them when the
        /// job ends).
        in_step_cgroup: bool,
    },
    /// They could not be started: the job is refused with this reason (recorded in its
    /// journal where possible, for its tasks to report).
    Refused(String),
}

/// Start the job's MPS daemons from its extern step (root, in slurmd's namespace, in the
/// job's cgroups, after the prolog and before the first task), where its prolog left
/// them to it ([`MpsStart::ExternStep`]): each control program (and the daemon it forks)
/// enters the job's container and the extern step's freezer cgroup, then becomes the
/// job's user ([`crate::container`]). All daemons share one [`mps::START_TIME`]
/// deadline. A failure kills what was started and refuses the job (recorded in its
/// journal, its tasks report it); it is never a node fault.
///
/// # Errors
/// [`NodeFault`] when the journal cannot be read or its locks taken.
pub fn start_mps_in_extern_step(
    cfg: &Config,
    job: u32,
    facts: impl FnOnce() -> SlurmFacts,
) -> Result<ExternStart, NodeFault> {
    let waiting = |j: &Journal| {
        j.mps_start == MpsStart::ExternStep
            && j.phase == Phase::Applied
            && j.mps_mount_ns.is_none()
            && !j.mps.is_empty()
    };
    let Some(j) = journal::load(cfg, job)? else {
        return Ok(ExternStart::Nothing);
    };
    if !waiting(&j) {
        return Ok(ExternStart::Nothing);
    }
    let mut order: Vec<String> = j.gpus.iter().map(|g| g.uuid.clone()).collect();
    order.sort();
    let _locks = match order
        .iter()
        .map(|u| GpuLock::acquire(cfg, u))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(l) => l,
        Err(e) => {
            // Nothing started: the tasks find the daemons missing and fail with why.
            let message = format!("colloc cannot lock the job's GPUs: {e}");
            log::error!("job {job}: refused: {message}");
            return Ok(ExternStart::Refused(message));
        }
    };
    // Read again under the locks: an epilog may have restored it meanwhile.
    let Some(mut j) = journal::load(cfg, job)? else {
        return Ok(ExternStart::Nothing);
    };
    if !waiting(&j) {
        return Ok(ExternStart::Nothing);
    }
    // Read slurm.conf only for a job that has daemons to start: every job's extern step
    // comes here.
    let facts = facts();
    let user = Some((j.uid, j.gid));
    let started = trusted_mps_control(cfg).and_then(|program| {
        // Where the job container cannot be entered, say where colloc looked.
        let entry =
            container::Entry::for_extern_step(&facts, job).map_err(|why| {
                match entry_hint(&facts) {
                    Some(hint) => format!("{why} ({hint})"),
                    None => why,
                }
            })?;
        let deadline = Instant::now() + mps::START_TIME;
        for d in &j.mps {
            if let Err(e) = mps::start_daemon_in(&program, d, user, Some(&entry), deadline) {
                // Those already started go too.
                mps::stop_all(None, &j.mps, user, Instant::now());
                return Err(not_started(d, &e));
            }
        }
        Ok(entry)
    });
    let entry = match started {
        Ok(e) => e,
        Err(message) => {
            log::error!("job {job}: refused: {message}");
            j.phase = Phase::Refused;
            j.refused = Some(message.clone());
            if let Err(e) = journal::write(cfg, &j) {
                log::error!("job {job}: cannot record its refusal ({e}): {message}");
            }
            return Ok(ExternStart::Refused(message));
        }
    };
    j.mps_mount_ns = Some(entry.ns_id);
    if let Err(e) = journal::write(cfg, &j) {
        // The tasks would find them "not started": stop them now; the epilog removes
        // the rest.
        mps::stop_all(None, &j.mps, user, Instant::now());
        let message = format!("colloc cannot record the job's setup: {e}");
        log::error!("job {job}: refused: {message}");
        return Ok(ExternStart::Refused(message));
    }
    Ok(ExternStart::Started {
        daemons: j.mps.len(),
        mount_ns: entry.ns_id,
        holder: entry.holder.clone(),
        in_step_cgroup: entry.freezer_procs.is_some(),
    })
}

/// Where to look when the job container could not be entered.
fn entry_hint(facts: &SlurmFacts) -> Option<String> {
    facts.tmpfs_container.then(|| {
        format!(
            "JobContainerType=job_container/tmpfs in {}, BasePath from job_container.conf \
             beside it",
            facts.slurm_conf.display()
        )
    })
}

/// Can the job's tasks (in mount namespace `task_ns`) reach its MPS daemons? They must
/// run in the same mount namespace, so that they share the job's `/dev/shm`, which
/// `job_container/tmpfs` makes private to each job. `Ok` for journals of other modes,
/// and for journals written before colloc recorded the namespace.
///
/// # Errors
/// Why they cannot, in one line naming the Slurm setting.
pub fn mps_reachable(j: &Journal, task_ns: u64) -> Result<(), String> {
    if j.phase != Phase::Applied || j.mps.is_empty() {
        return Ok(());
    }
    match (j.mps_start, j.mps_mount_ns) {
        (MpsStart::ExternStep, None) => Err(format!(
            "--colloc={}: the job's MPS daemons were not started: colloc starts them in the \
             job's extern step, which Slurm runs only with PrologFlags=Contain in slurm.conf \
             (and the plugin must be loaded by slurmstepd)",
            j.mode
        )),
        (_, Some(ns)) if ns != task_ns => Err(format!(
            "--colloc={}: the job's MPS daemons run in another mount namespace than its \
             tasks, so they do not share the job's /dev/shm, which \
             JobContainerType=job_container/tmpfs makes private to each job; colloc starts \
             them inside the job container where slurm.conf (SLURM_CONF, else \
             /etc/slurm/slurm.conf) has PrologFlags=Contain",
            j.mode
        )),
        _ => Ok(()),
    }
}

/// The environment of the job's tasks (docs/design.md, "The environment contract").
fn job_env(j: &Journal, gpus: &[GpuInfo], mode: &Mode) -> Vec<(String, String)> {
    let mut env = Vec::new();
    match mode {
        // MigMps: migmps::job_env.
        Mode::Mig(_) | Mode::MigMps { .. } => {
            let planned: Vec<PlannedInstance> = j
                .gpus
                .iter()
                .flat_map(|g| g.planned.iter().cloned())
                .collect();
            let devices: Vec<String> = j
                .gpus
                .iter()
                .flat_map(|g| g.created.iter().filter_map(|i| i.uuid.clone()))
                .collect();
            // With one GPU the summary is the exact layout; with several it is per GPU.
            let per_gpu = j
                .gpus
                .first()
                .map_or(planned.as_slice(), |g| g.planned.as_slice());
            env.push(("COLLOC_MODE".into(), mig::layout_mode_string(per_gpu)));
            env.push(("COLLOC_SLOTS".into(), devices.len().to_string()));
            env.push(("COLLOC_DEVICES".into(), devices.join(",")));
        }
        Mode::Mps { clients } => {
            env.push(("COLLOC_MODE".into(), mode.to_string()));
            let uuids: Vec<String> = gpus.iter().map(|g| g.uuid.clone()).collect();
            let mut devices = Vec::new();
            if let Some(n) = clients {
                for u in &uuids {
                    devices.extend(std::iter::repeat_n(u.clone(), *n as usize));
                }
                env.push(("COLLOC_SLOTS".into(), devices.len().to_string()));
                let mem: Vec<u64> = gpus
                    .iter()
                    .map(|g| g.memory_total / (1024 * 1024))
                    .collect();
                // Limits are per client device; a client sees one GPU (its slot's).
                let first = mem.first().copied().unwrap_or(0);
                env.extend(mps::client_limits(*n, &[first]));
            } else {
                devices = uuids;
            }
            env.push(("COLLOC_DEVICES".into(), devices.join(",")));
            if let Some(d) = j.mps.first() {
                env.extend(d.env());
            }
            let pipes: Vec<String> = j
                .mps
                .iter()
                .map(|d| format!("{}={}", d.devices, d.pipe_dir.display()))
                .collect();
            env.push(("COLLOC_MPS_PIPES".into(), pipes.join(",")));
        }
        Mode::Naive => {
            env.push(("COLLOC_MODE".into(), "naive".into()));
            let uuids: Vec<String> = gpus.iter().map(|g| g.uuid.clone()).collect();
            env.push(("COLLOC_DEVICES".into(), uuids.join(",")));
        }
        Mode::Off => {}
    }
    env
}

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
fn restore_job(
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
fn restore_locks(cfg: &Config, job: u32, order: &[String]) -> Result<Vec<GpuLock>, NodeFault> {
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
fn restore_locked(
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
        if let Err(e) = hooks::run(cfg, hooks::Phase::Pre, &change, true) {
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

/// The MIG half of a restore: kill what still runs on the job's instances, destroy them
/// (retrying what the driver answers IN_USE for until `deadline`), wait until the driver
/// no longer lists them, and set a MIG mode colloc switched back. What cannot be done in
/// time for a known reason goes to `report.held`; NVML failures are faults.
fn restore_mig(
    cfg: &Config,
    ctl: &dyn GpuControl,
    j: &Journal,
    deadline: Instant,
    report: &mut RestoreReport,
) -> Result<(), NodeFault> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for g in &j.gpus {
        // Plain jobs expected a whole GPU here: one left in MIG mode is broken for them.
        let breaks_plain_jobs = g.mig_mode_changed;
        let hold = |gi_ids: Vec<u32>, reason: HoldReason| {
            let holders = held_by(cfg, ctl, g.index, &gi_ids);
            GpuHold {
                index: g.index,
                uuid: g.uuid.clone(),
                gi_ids,
                reason,
                since,
                holders,
                breaks_plain_jobs,
            }
        };
        // Ours: a planned placement (everything created was planned first) that was not
        // there before. The profile and start must match: GI ids follow placements, so
        // another instance at the same place would have the same id.
        let ours = |gi_id: u32, profile_id: u32, start: u32| {
            !g.preexisting.contains(&gi_id)
                && g.planned
                    .iter()
                    .any(|p| p.profile_id == profile_id && p.placement.start == start)
        };
        let listed_ours = || -> Result<Vec<u32>, NodeFault> {
            match ctl.instances(g.index) {
                Ok(list) => Ok(list
                    .iter()
                    .filter(|i| ours(i.gi_id, i.profile_id, i.placement.start))
                    .map(|i| i.gi_id)
                    .collect()),
                Err(GpuError::NotMig(_)) => Ok(Vec::new()),
                Err(e) => Err(e.into()),
            }
        };
        let mine = listed_ours()?;
        if !mine.is_empty() {
            match kill_on_instances(ctl, g.index, &mine, deadline)? {
                Ok(killed) => report.killed.extend(killed),
                Err(survivors) => {
                    report
                        .held
                        .push(hold(mine, HoldReason::Processes { pids: survivors }));
                    continue;
                }
            }
        }
        let (in_use, last) = destroy_with_retries(ctl, g.index, &mine, deadline, report)?;
        if !in_use.is_empty() {
            let reason = match last {
                Some(code) if code != retry::IN_USE => HoldReason::Driver {
                    answer: crate::gpu::nvml_code_name(code).to_string(),
                },
                _ => HoldReason::InUse,
            };
            report.held.push(hold(in_use, reason));
            continue;
        }
        // A destroy that succeeded can leave the instance listed for a while
        // (go-nvml#146): wait for it rather than leave it to the next job.
        let mut still = listed_ours()?;
        while !still.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            still = listed_ours()?;
        }
        if !still.is_empty() {
            report.held.push(hold(still, HoldReason::StillListed));
            continue;
        }
        if g.mig_mode_changed {
            if let Some(before) = g.mig_before {
                // A GPU left in MIG mode without instances has no CUDA device for the next
                // whole-GPU job: if switching back stays pending, keep the GPU marked.
                // nvml.h: IN_USE means "idle the device and retry".
                let mut backoff = retry::Backoff::until(deadline);
                let change = match retry::retry(
                    retry::Op::ModeChange,
                    &format!("GPU {}: MIG mode back", g.index),
                    &mut backoff,
                    || ctl.set_mig_mode(g.index, before.current),
                ) {
                    Ok(c) => c,
                    Err(e @ GpuError::Call { code, .. })
                        if retry::is_transient(retry::Op::ModeChange, &e) =>
                    {
                        log::warn!("GPU {}: MIG mode not set back: {e}", g.index);
                        report.held.push(hold(
                            Vec::new(),
                            HoldReason::ModePending {
                                activation: crate::gpu::nvml_code_name(code).to_string(),
                            },
                        ));
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                if !change.took_effect(before.current) {
                    log::warn!("{}", change.why_pending(g.index, before.current));
                    let activation = crate::gpu::nvml_code_name(change.activation).to_string();
                    report
                        .held
                        .push(hold(Vec::new(), HoldReason::ModePending { activation }));
                }
            }
        }
    }
    Ok(())
}

/// Destroy the GPU instances `gis` of GPU `gpu`, retrying those the driver answers
/// IN_USE or UNKNOWN for (with no process on them: something that is not a process holds
/// them, or the GPU instance is still busy from its compute instance's destroy) with
/// growing pauses until `deadline`. Returns the ones still there and the last answer.
fn destroy_with_retries(
    ctl: &dyn GpuControl,
    gpu: u32,
    gis: &[u32],
    deadline: Instant,
    report: &mut RestoreReport,
) -> Result<(Vec<u32>, Option<u32>), NodeFault> {
    let mut left = gis.to_vec();
    let mut pause = RETRY_PAUSE_FIRST;
    let mut last = None;
    loop {
        let mut in_use = Vec::new();
        for &gi_id in &left {
            match ctl.destroy_instance(gpu, gi_id) {
                Ok(()) => report.destroyed += 1,
                Err(e) if e.is_not_found() => {}
                Err(e) if retry::is_transient(retry::Op::Destroy, &e) => {
                    if let GpuError::Call { code, .. } = e {
                        last = Some(code);
                    }
                    in_use.push(gi_id);
                }
                Err(e) => return Err(e.into()),
            }
        }
        left = in_use;
        if left.is_empty() || Instant::now() + pause > deadline {
            return Ok((left, last));
        }
        log::info!(
            "GPU {gpu}: GPU instance(s) {left:?} in use with no process on them; trying again in {} ms",
            pause.as_millis()
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(RETRY_PAUSE_MAX);
    }
}

/// Who has the device files of GPU `gpu`'s instances `gis` open (from `/proc`), for
/// naming the holder of a GPU that cannot be brought back.
fn held_by(
    cfg: &Config,
    ctl: &dyn GpuControl,
    gpu: u32,
    gis: &[u32],
) -> Vec<crate::holders::DeviceUser> {
    let listed = ctl.instances(gpu).unwrap_or_default();
    let files: Vec<String> = gis
        .iter()
        .flat_map(|&gi| {
            let cis = listed
                .iter()
                .find(|i| i.gi_id == gi)
                .map(|i| i.ci_ids.clone())
                .unwrap_or_default();
            devfiles::instance_files(cfg, ctl.device_minor(gpu), gi, &cis)
        })
        .filter_map(|p| p.to_str().map(str::to_string))
        .collect();
    if files.is_empty() {
        return Vec::new();
    }
    crate::holders::device_users(std::path::Path::new("/proc"), |p| {
        files.iter().any(|f| f == p)
    })
}

/// Stop the job's MPS daemons (all at once) and remove its directories, within
/// [`MPS_RESTORE_BUDGET`]. Never a fault: what is left is reported as a warning.
fn restore_mps(cfg: &Config, j: &Journal, report: &mut RestoreReport) {
    let program = match trusted_mps_control(cfg) {
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

/// Kill processes still running on the job's instances (the job is over) and wait until
/// NVML no longer lists them, at most [`KILL_WAIT`] and not past `deadline`. `Ok(Ok(pids
/// killed))`, or `Ok(Err(pids still listed))`.
fn kill_on_instances(
    ctl: &dyn GpuControl,
    gpu: u32,
    gis: &[u32],
    deadline: Instant,
) -> Result<Result<Vec<u32>, Vec<u32>>, NodeFault> {
    let on_ours = || -> Result<Vec<u32>, GpuError> {
        Ok(ctl
            .processes(gpu)?
            .into_iter()
            .filter(|p| p.gi_id.is_some_and(|g| gis.contains(&g)))
            .map(|p| p.pid)
            .collect())
    };
    let pids = on_ours()?;
    for &pid in &pids {
        log::warn!("GPU {gpu}: killing leftover process {pid} on the job's MIG instance");
        crate::sys::kill(pid, libc::SIGKILL);
    }
    let deadline = deadline.min(Instant::now() + KILL_WAIT);
    loop {
        let left = on_ours()?;
        if left.is_empty() {
            return Ok(Ok(pids));
        }
        if Instant::now() >= deadline {
            return Ok(Err(left));
        }
        std::thread::sleep(Duration::from_millis(100));
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

mod create;
#[cfg(test)]
mod tests;
