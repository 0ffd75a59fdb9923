//! A job's MPS daemons: the trusted control program, their start in the prolog or in
//! the job's extern step (inside its container), and the check its tasks make.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Instant;

use super::{Failure, NodeFault};
use crate::config::Config;
use crate::container;
use crate::jobfs;
use crate::journal::{self, GpuLock, Journal, Phase};
use crate::mps::{self, MpsDaemon, MpsStart};
use crate::rundir;
use crate::slurmconf::SlurmFacts;

/// Start the job's MPS daemons (`daemons`: one per GPU in `run_dir/job-<id>/gpu<K>`, or
/// one per MIG instance in `…/gpu<K>-gi<G>`, each with its directory's name), as the
/// job's user (or, with [`MpsStart::ExternStep`], make their directories and leave the
/// start to the job's extern step). Failures refuse the job: they concern its files and
/// daemons, not the GPUs.
pub(super) fn start_mps(
    cfg: &Config,
    j: &mut Journal,
    mps_start: MpsStart,
    daemons: Vec<(String, MpsDaemon)>,
) -> Result<(), Failure> {
    let program = mps::trusted_control(cfg).map_err(Failure::Refuse)?;
    j.mps_start = mps_start;
    j.job_dir = Some(rundir::job_dir(cfg, j.job));
    let (names, daemons): (Vec<String>, Vec<MpsDaemon>) = daemons.into_iter().unzip();
    j.mps = daemons;
    // Record before making anything, so a crash in between is cleaned up by restore.
    journal::write(cfg, j)
        .map_err(|e| Failure::Refuse(format!("colloc cannot record the job's setup: {e}")))?;
    rundir::create_named(cfg, j.job, j.uid, j.gid, &names).map_err(|e| {
        let room = match e.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT | libc::ENOMEM) => rundir::space_note(cfg, j.job),
            _ => String::new(),
        };
        let why = format!("cannot set up the job's MPS directories: {e}{room}");
        log::error!("job {}: {why}", j.job);
        Failure::Refuse(why)
    })?;
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
        /// They were put in the extern step's cgroup (v1: its freezer cgroup; v2:
        /// `step_extern/user/task_special`), which Slurm kills when the job ends.
        in_step_cgroup: bool,
    },
    /// They could not be started: the job is refused with this reason (recorded in its
    /// journal where possible, for its tasks to report).
    Refused(String),
}

/// Start the job's MPS daemons from its extern step (root, in slurmd's namespace, in the
/// job's cgroups, after the prolog and before the first task), where its prolog left
/// them to it ([`MpsStart::ExternStep`]): each control program (and the daemon it forks)
/// enters the job's container and the extern step's cgroup, then becomes the
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
    let started = mps::trusted_control(cfg).and_then(|program| {
        // Where the job container cannot be entered, say where colloc looked.
        let entry =
            container::Entry::for_extern_step(&facts, job).map_err(|why| {
                match entry_hint(&facts) {
                    Some(hint) => format!("{why} ({hint})"),
                    None => why,
                }
            })?;
        // The job's tmpfs, mounted by the prolog, where the job's namespace was copied
        // before it (job_container/tmpfs): the daemons' pipes must be where the epilog
        // and the tasks look.
        if let Some(ns) = &entry.ns {
            jobfs::graft(cfg, job, &rundir::job_dir_name(job), ns.as_fd())
                .map_err(|why| format!("cannot set up the job's MPS directories: {why}"))?;
        }
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
        in_step_cgroup: entry.step_procs.is_some(),
    })
}

/// Where to look when the job container could not be entered.
pub(super) fn entry_hint(facts: &SlurmFacts) -> Option<String> {
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
