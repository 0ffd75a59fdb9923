//! The job's summary in Slurm's accounting (`colloc_core::jobsummary`), from the batch
//! step's slurmstepd (root): `init_post_opt` listens for what the job's `colloc run`s
//! report, `exit` reads it and writes the job's `AdminComment` before slurmstepd tells
//! slurmctld the batch script ended. Never fails the step: every fault is a log line.

use std::sync::Mutex;

use colloc_core::config::{Config, ConfigError};
use colloc_core::jobsummary::{self, Collector, JobSummary};
use colloc_core::journal::Phase;
use colloc_core::reconfig;

use super::{job_id, parse_args, Host};

/// Slurm's step id of a job's batch step (`SLURM_BATCH_SCRIPT` in `<slurm/slurm.h>`).
pub const BATCH_STEP: u32 = 0xffff_fffb;

/// What `init_post_opt` found and opened, for `exit` in the same slurmstepd.
struct Pending {
    job: u32,
    mode: String,
    gpus: u32,
    collector: Collector,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

/// The node's config where this step keeps a summary; `None` (logged where it matters)
/// where it does not.
fn summary_config(host: &dyn Host, args: &[&str]) -> Result<Option<Config>, String> {
    if !host.remote() || host.step_id() != Ok(BATCH_STEP) {
        return Ok(None);
    }
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
    let Some(cfg) = summary_config(host, args)? else {
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
    match Collector::bind(job) {
        Ok(collector) => {
            let gpus = u32::try_from(journal.gpus.len()).unwrap_or(u32::MAX);
            *PENDING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Pending {
                job,
                mode: journal.mode,
                gpus,
                collector,
            });
        }
        // Someone took the name first: the summary has root's facts only.
        Err(e) => {
            log::warn!(
                "job {job}: cannot listen on {} ({e}); its summary will not have its \
                 packs' figures",
                jobsummary::socket_name(job)
            );
            *PENDING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            write(
                job,
                &JobSummary::new(
                    &journal.mode,
                    u32::try_from(journal.gpus.len()).unwrap_or(u32::MAX),
                    &[],
                ),
            );
        }
    }
    Ok(())
}

/// `slurm_spank_exit` (root, the batch step's slurmstepd): read the packs' reports and
/// write the job's summary.
///
/// # Errors
/// Bad plugstack arguments only.
pub fn exit(host: &mut dyn Host, args: &[&str]) -> Result<(), String> {
    if !host.remote() || host.step_id() != Ok(BATCH_STEP) {
        return Ok(());
    }
    let _ = parse_args(args)?;
    let Some(p) = PENDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
    else {
        return Ok(());
    };
    let uid = match host.job_uid() {
        Ok(u) => u,
        Err(e) => {
            log::warn!("job {}: no job summary: {e}", p.job);
            return Ok(());
        }
    };
    let got = p.collector.collect(uid);
    drop(p.collector);
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
    write(p.job, &JobSummary::new(&p.mode, p.gpus, &got.reports));
    Ok(())
}

/// Write the summary, logging how.
fn write(job: u32, summary: &JobSummary) {
    let word = summary.encode();
    match jobsummary::write(job, &word) {
        Ok(how) => log::info!("job {job}: summary {word} written ({how:?})"),
        Err(e) => log::warn!("job {job}: summary {word} not written: {e}"),
    }
}
