//! The job's summary in Slurm's accounting (`colloc_core::jobsummary`), from the batch
//! step's slurmstepd (root): `init_post_opt` listens for what the job's `colloc run`s
//! report (its tasks get the socket's name from `task_init_privileged`), `exit` reads it
//! and writes the job's `AdminComment` before slurmstepd tells slurmctld the batch script
//! ended. Never fails the step: every fault is a log line.

use std::sync::{Mutex, MutexGuard, PoisonError};

use colloc_core::config::{Config, ConfigError};
use colloc_core::jobsummary::{self, Collector, JobSummary};
use colloc_core::journal::Phase;
use colloc_core::reconfig;

use super::{job_id, parse_args, Host};

/// Slurm's step id of a job's batch step (`SLURM_BATCH_SCRIPT` in `<slurm/slurm.h>`).
pub const BATCH_STEP: u32 = 0xffff_fffb;

/// What `init_post_opt` found and opened, for the tasks and `exit` of the same
/// slurmstepd.
struct Pending {
    job: u32,
    mode: String,
    gpus: u32,
    /// `None` where the socket could not be made: the summary has root's facts only.
    collector: Option<Collector>,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

fn pending() -> MutexGuard<'static, Option<Pending>> {
    PENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Is this the batch step's slurmstepd?
fn batch_step(host: &dyn Host) -> bool {
    host.remote() && host.step_id() == Ok(BATCH_STEP)
}

/// The node's config where it keeps summaries; `None` where it does not or cannot.
fn summary_config(args: &[&str]) -> Result<Option<Config>, String> {
    let args = parse_args(args)?;
    match Config::load_trusted(&args.config) {
        Ok(c) => Ok(c.job_summary.then_some(c)),
        Err(ConfigError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => {
            log::debug!("batch step: no job summary: node configuration: {e}");
            Ok(None)
        }
    }
}

/// `slurm_spank_init_post_opt` (root, the batch step's slurmstepd): where the job runs
/// under a colloc mode (its journal says applied), listen for its packs' reports.
///
/// # Errors
/// Bad plugstack arguments only.
pub fn init_post_opt(host: &mut dyn Host, args: &[&str]) -> Result<(), String> {
    if !batch_step(host) {
        return Ok(());
    }
    let Some(cfg) = summary_config(args)? else {
        return Ok(());
    };
    let job = match job_id(host) {
        Ok(j) => j,
        Err(e) => {
            log::debug!("batch step: no job summary: {e}");
            return Ok(());
        }
    };
    let journal = match reconfig::job_state(&cfg, job) {
        Ok(Some(j)) if j.phase == Phase::Applied => j,
        Ok(_) => return Ok(()),
        Err(e) => {
            log::debug!("job {job}: no job summary: {e}");
            return Ok(());
        }
    };
    let collector = match host.job_uid() {
        Ok(uid) => Collector::bind(&cfg.run_dir, job, uid)
            .map_err(|e| log::warn!("job {job}: cannot listen for its packs' reports: {e}"))
            .ok(),
        Err(e) => {
            log::warn!("job {job}: cannot listen for its packs' reports: {e}");
            None
        }
    };
    *pending() = Some(Pending {
        job,
        gpus: u32::try_from(journal.gpus.len()).unwrap_or(u32::MAX),
        mode: journal.mode,
        collector,
    });
    Ok(())
}

/// The socket's path for the task's environment (`task_init_privileged`, in the batch
/// step's tasks), where this step listens.
pub fn socket_env() -> Option<(&'static str, String)> {
    let p = pending();
    let path = p.as_ref()?.collector.as_ref()?.path();
    Some((jobsummary::SOCKET_ENV, path.to_str()?.to_string()))
}

/// `slurm_spank_exit` (root, the batch step's slurmstepd): read the packs' reports and
/// write the job's summary.
///
/// # Errors
/// Bad plugstack arguments only.
pub fn exit(host: &mut dyn Host, args: &[&str]) -> Result<(), String> {
    if !batch_step(host) {
        return Ok(());
    }
    let _ = parse_args(args)?;
    let Some(p) = pending().take() else {
        return Ok(());
    };
    let uid = match host.job_uid() {
        Ok(u) => u,
        Err(e) => {
            log::warn!("job {}: no job summary: {e}", p.job);
            return Ok(());
        }
    };
    // The collector's socket file goes with it, once read.
    let got = p.collector.map(|c| c.collect(uid)).unwrap_or_default();
    if got.strangers > 0 {
        log::warn!(
            "job {}: {} connection(s) to its summary socket from other users, left unread",
            p.job,
            got.strangers
        );
    }
    for why in &got.bad {
        log::warn!("job {}: a pack report refused: {why}", p.job);
    }
    let mut summary = JobSummary::new(&p.mode, p.gpus, &got.reports);
    summary.strangers = got.strangers;
    let word = summary.encode();
    match jobsummary::write(p.job, &word) {
        Ok(how) => log::info!("job {}: summary {word} written ({how:?})", p.job),
        Err(e) => log::warn!("job {}: summary {word} not written: {e}", p.job),
    }
    Ok(())
}
