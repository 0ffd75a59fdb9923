//! An interrupted restore is finished before the GPU is used again (issue 34).
//!
//! When slurmd and a job's epilog are killed part way through a restore, Slurm does not
//! run the epilog again ("Not running epilog … File exists"), the job ends COMPLETED and
//! the node goes IDLE with the job's instances and daemons still on the GPU. So the next
//! prolog on the node, any job's (the plugin's prolog runs for jobs without `--colloc`
//! too), first restores every journal of another job that claims one of this job's GPUs.
//!
//! The rule: Slurm gives a GPU to one job at a time, so a journal of another job that
//! claims a GPU Slurm just gave to this job is left over from a job that no longer holds
//! it. Where `scontrol` still calls that job running, the journal is not touched (a
//! journal of a job running on the node's other GPUs is never touched either: only
//! journals claiming this job's GPUs are looked at); where `scontrol` does not know it
//! (ended and purged after `MinJobAge`) or cannot be asked, Slurm's allocation decides.
//! Marked GPUs (a restore that ended with something holding the instances) are not
//! leftovers: that restore ran to its end, and [`super::apply::retry_marked`] tries them.

use std::time::Duration;

use super::restore::restore;
use super::NodeFault;
use crate::config::Config;
use crate::gpu::{GpuControl, GpuHold};
use crate::journal::{self, Journal, JournalError};

/// The longest `scontrol show job` may take.
const SCONTROL_TIMEOUT: Duration = Duration::from_secs(5);

/// What Slurm says of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobAlive {
    /// Pending, running, suspended, completing or configuring: it may hold its GPUs.
    Running,
    /// Ended (any final state), or unknown to Slurm (purged).
    Ended,
    /// `scontrol` could not be asked.
    Unknown,
}

/// The job's state from `scontrol show job -o ID` output (pure, for tests).
pub fn parse_job_state(out: &str) -> JobAlive {
    let state = out
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("JobState="))
        .unwrap_or("");
    match state {
        "RUNNING" | "PENDING" | "SUSPENDED" | "COMPLETING" | "CONFIGURING" | "RESIZING"
        | "REQUEUED" | "SIGNALING" | "STAGE_OUT" | "STOPPED" => JobAlive::Running,
        "" => JobAlive::Unknown,
        _ => JobAlive::Ended,
    }
}

/// Ask Slurm about `job` (`scontrol` from the system directories, root's alone).
pub fn slurm_job_state(job: u32) -> JobAlive {
    let Some(program) = crate::config::resolve_program("scontrol") else {
        return JobAlive::Unknown;
    };
    let conf = std::env::var_os("SLURM_CONF");
    let id = job.to_string();
    match crate::publish::run_scontrol(
        &program,
        "-",
        &["show", "job", "-o", &id],
        SCONTROL_TIMEOUT,
        conf.as_deref(),
    ) {
        Ok(out) => parse_job_state(&out),
        Err(e) if e.to_string().contains("Invalid job id") => JobAlive::Ended,
        Err(e) => {
            log::warn!("cannot ask Slurm about job {job}: {e}");
            JobAlive::Unknown
        }
    }
}

/// Journals of jobs other than `job` that claim one of `gpus` (NVML indexes) and whose
/// restore did not run to its end (no marked GPU). Unusable journals are skipped here:
/// a colloc job's checks refuse GPUs while one exists.
///
/// # Errors
/// `state_dir` cannot be read.
pub fn leftovers(cfg: &Config, job: u32, gpus: &[u32]) -> Result<Vec<Journal>, JournalError> {
    if gpus.is_empty() {
        return Ok(Vec::new());
    }
    Ok(journal::list(cfg)?
        .into_iter()
        .flatten()
        .filter(|j| {
            j.job != job && j.held.is_empty() && j.gpus.iter().any(|g| gpus.contains(&g.index))
        })
        .collect())
}

/// What finishing the leftovers did.
#[derive(Debug, Default)]
pub struct Finished {
    /// Jobs whose journals were restored and removed.
    pub restored: Vec<u32>,
    /// Restores that ended with a GPU marked (their journal stays, with the holds): the
    /// job and the hold.
    pub marked: Vec<(u32, GpuHold)>,
    /// Jobs Slurm still calls running: their journals were left alone.
    pub running: Vec<u32>,
}

/// A leftover that could not be restored: the GPUs' state is unknown.
#[derive(Debug, thiserror::Error)]
#[error("job {job}'s interrupted restore of GPU(s) {gpus:?} could not be finished: {fault}")]
pub struct LeftoverFault {
    /// The job whose journal it is.
    pub job: u32,
    /// Its GPUs.
    pub gpus: Vec<u32>,
    /// What went wrong.
    pub fault: Box<NodeFault>,
}

/// Finish the restores `leftovers` found, asking `alive` (Slurm, in the plugin) about each
/// job first. `ctl` may be `None` where NVML cannot be loaded (a MIG journal is then a
/// fault).
///
/// # Errors
/// The first leftover whose restore failed: a node fault naming its GPUs.
pub fn finish(
    cfg: &Config,
    ctl: Option<&dyn GpuControl>,
    found: Vec<Journal>,
    alive: &dyn Fn(u32) -> JobAlive,
) -> Result<Finished, LeftoverFault> {
    let mut done = Finished::default();
    for j in found {
        if alive(j.job) == JobAlive::Running {
            log::error!(
                "job {}'s journal claims GPU(s) {:?}, which Slurm gave to another job, yet \
                 Slurm calls it still active: left alone",
                j.job,
                j.gpu_indexes()
            );
            done.running.push(j.job);
            continue;
        }
        log::warn!(
            "job {} ended with its restore unfinished ({:?}); restoring GPU(s) {:?} now",
            j.job,
            j.phase,
            j.gpu_indexes()
        );
        match restore(cfg, ctl, j.job) {
            Ok(r) if r.held.is_empty() => done.restored.push(j.job),
            Ok(r) => done.marked.extend(r.held.into_iter().map(|h| (j.job, h))),
            Err(fault) => {
                return Err(LeftoverFault {
                    job: j.job,
                    gpus: j.gpu_indexes(),
                    fault: Box::new(fault),
                })
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_states_from_scontrol() {
        assert_eq!(
            parse_job_state("JobId=5 JobName=x UserId=a(1) JobState=RUNNING Reason=None"),
            JobAlive::Running
        );
        assert_eq!(
            parse_job_state("JobId=5 JobState=COMPLETING Reason=None"),
            JobAlive::Running
        );
        assert_eq!(
            parse_job_state("JobId=5 JobState=COMPLETED"),
            JobAlive::Ended
        );
        assert_eq!(
            parse_job_state("JobId=5 JobState=CANCELLED"),
            JobAlive::Ended
        );
        assert_eq!(
            parse_job_state("JobId=5 JobState=NODE_FAIL"),
            JobAlive::Ended
        );
        assert_eq!(parse_job_state("garbage"), JobAlive::Unknown);
    }
}
