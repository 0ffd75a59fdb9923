//! Sweeps longer than the job's time limit: the warning before the limit, and the requeue.
//!
//! Inside a Slurm job colloc reads how long the job has left (`scontrol -o show job`:
//! `TimeLimit` − `RunTime`, asked again every few minutes, so a limit raised by an admin
//! counts) and warns its runs `--warn-before` ahead of the end; SIGUSR1 to colloc (from
//! `#SBATCH --signal=B:USR1@N` with `exec colloc run`, or `scancel --signal=USR1 --batch`)
//! warns them too, whichever comes first. The warning itself (signal, grace, stop) is the
//! engine's ([`crate::engine::pack::Warn`]). Once the record is written, colloc requeues
//! its own job when [`decide`] allows it; the requeued job resumes the record by itself
//! (`SLURM_RESTART_COUNT` > 0, see [`super::setup::report_dir`]).

use std::time::{Duration, Instant};

use super::args::Settings;
use crate::engine::pack::Deadline;
use crate::slurm::job::{self, JobFacts};
use colloc_results::duration::show;

/// How often colloc asks Slurm again how long the job has left.
const RECHECK: Duration = Duration::from_secs(300);

/// When to warn, from the time the job has left (`left`) and the lead: `lead` before the
/// end, or, when the job has no more than `lead` left at all, half way to its end (so a
/// requeued job always gets work done rather than stopping at once).
pub fn warn_in(left: Duration, lead: Duration) -> Duration {
    if left > lead {
        left - lead
    } else {
        left / 2
    }
}

/// Watches the job's end time: the [`Deadline`] of a pack inside a Slurm job.
#[derive(Debug)]
pub struct EndWatch {
    job: String,
    lead: Duration,
    /// When colloc first learnt the end.
    first: Instant,
    /// The job's end as last learnt (`None`: no time limit).
    end: Option<Instant>,
    asked_at: Instant,
    said_short: bool,
}

/// Ends that differ by less than this are the same end (Slurm says whole seconds).
const SAME_END: Duration = Duration::from_secs(3);

impl EndWatch {
    /// Watch job `job`'s end, warning `lead` ahead. `None` when Slurm cannot say how long
    /// the job has left (the line says why) or it has no time limit.
    pub fn start(job: &str, lead: Duration) -> Option<EndWatch> {
        let now = Instant::now();
        let mut w = EndWatch {
            job: job.to_string(),
            lead,
            first: now,
            end: None,
            asked_at: now,
            said_short: false,
        };
        match job::show_job(job) {
            Ok(f) => {
                w.learn(&f);
                let Some(at) = w.warn_time() else {
                    log::info!("job {job} has no time limit: colloc does not watch its end");
                    return None;
                };
                log::info!(
                    "job {job} ends in {}; its runs are warned in {}",
                    show(f.time_left().unwrap_or_default()),
                    show(at.saturating_duration_since(now))
                );
                Some(w)
            }
            Err(e) => {
                log::warn!(
                    "cannot read job {job}'s time limit ({e}); its runs are warned only if colloc gets SIGUSR1"
                );
                None
            }
        }
    }

    fn learn(&mut self, f: &JobFacts) {
        let now = Instant::now();
        self.asked_at = now;
        let Some(left) = f.time_left() else {
            self.end = None;
            return;
        };
        let end = now + left;
        // Keep the end known unless it really moved (the limit was changed).
        let same = self
            .end
            .is_some_and(|e| e.max(end).saturating_duration_since(e.min(end)) < SAME_END);
        if !same {
            self.end = Some(end);
        }
        if left <= self.lead
            && !self.said_short
            && self.end.is_some_and(|e| e <= self.first + self.lead)
        {
            self.said_short = true;
            log::warn!(
                "job {} has {} left, no more than --warn-before {}: its runs are warned half way to the end",
                self.job,
                show(left),
                show(self.lead)
            );
        }
    }

    /// `lead` before the end; half way there when colloc started with no more than `lead`
    /// left ([`warn_in`], from the moment colloc first learnt the end).
    fn warn_time(&self) -> Option<Instant> {
        let end = self.end?;
        Some(self.first + warn_in(end.saturating_duration_since(self.first), self.lead))
    }
}

impl Deadline for EndWatch {
    fn warn_at(&mut self) -> Option<Instant> {
        let now = Instant::now();
        let due = self.warn_time().is_some_and(|t| now >= t);
        // Ask again now and then, and once more when the moment comes (the limit may have
        // been raised); if Slurm cannot answer, the end known stands.
        if due || now >= self.asked_at + RECHECK {
            match job::show_job(&self.job) {
                Ok(f) => self.learn(&f),
                Err(e) => {
                    self.asked_at = now;
                    log::debug!("cannot read job {}'s time limit again: {e}", self.job);
                }
            }
        }
        self.warn_time()
    }
}

/// Whether colloc requeues its job after the warning, and why not.
///
/// `restarts`: how often the job was requeued already; `left`: runs that did not succeed.
///
/// # Errors
/// Why not, as one line.
pub fn decide(f: &JobFacts, restarts: u32, limit: u32, left: usize) -> Result<(), String> {
    if left == 0 {
        return Err("every run succeeded".into());
    }
    if !f.batch {
        return Err("it is not a batch job (only sbatch jobs can be requeued)".into());
    }
    if !f.requeue {
        return Err(
            "it may not be requeued (Requeue=0: submit it with --requeue, or ask the site for JobRequeue=1)"
                .into(),
        );
    }
    if restarts >= limit {
        return Err(format!(
            "it was requeued {restarts} time(s) already, the most --requeue-limit allows ({limit})"
        ));
    }
    Ok(())
}

/// After a pack the warning stopped: requeue job `job` (where [`decide`] allows) so the
/// sweep goes on, or say in one line why not and how to go on by hand. `left`: runs that
/// did not succeed. True when the job was requeued.
pub fn requeue_after_warning(job: Option<&str>, s: &Settings, left: usize, dir: &str) -> bool {
    let by_hand = format!("`colloc run --resume --report-dir {dir} -f …` finishes the sweep");
    let Some(job) = job else {
        log::warn!("not requeued: not inside a Slurm job; {by_hand}");
        return false;
    };
    if std::env::var_os("SLURM_STEP_ID").is_some() {
        log::warn!(
            "job {job} not requeued: this colloc runs inside a job step (srun), not as the batch script; {by_hand}"
        );
        return false;
    }
    let facts = match job::show_job(job) {
        Ok(f) => f,
        Err(e) => {
            log::warn!("job {job} not requeued: {e}; {by_hand}");
            return false;
        }
    };
    let restarts = super::setup::restart_count()
        .unwrap_or(0)
        .max(facts.restarts);
    if let Err(why) = decide(&facts, restarts, s.requeue_limit, left) {
        if left == 0 {
            log::warn!("job {job} not requeued: {why}");
        } else {
            log::warn!("job {job} not requeued: {why}; {by_hand}");
        }
        return false;
    }
    // Said before it is done: the requeue ends the job at once, and with it (under
    // proctrack/cgroup, once the batch shell dies of it) this process.
    log::warn!(
        "job {job} requeued ({} of at most {}): {left} run(s) left; the next start resumes the record in {dir}",
        restarts + 1,
        s.requeue_limit
    );
    match job::requeue(job) {
        Ok(()) => true,
        Err(e) => {
            log::warn!("job {job} was not requeued after all: {e}; {by_hand}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(requeue: bool, batch: bool) -> JobFacts {
        JobFacts {
            state: "RUNNING".into(),
            requeue,
            batch,
            restarts: 0,
            limit: Some(Duration::from_secs(3600)),
            run_time: Some(Duration::from_secs(3300)),
        }
    }

    #[test]
    fn requeue_only_when_allowed_and_work_is_left() {
        let ok = facts(true, true);
        assert_eq!(decide(&ok, 0, 3, 2), Ok(()));
        assert_eq!(decide(&ok, 2, 3, 1), Ok(()));
        let e = decide(&ok, 3, 3, 2).unwrap_err();
        assert!(
            e.contains("3 time(s)") && e.contains("--requeue-limit"),
            "{e}"
        );
        assert!(decide(&ok, 0, 0, 2).is_err(), "a limit of 0 never requeues");
        assert!(decide(&ok, 0, 3, 0)
            .unwrap_err()
            .contains("every run succeeded"));
        let e = decide(&facts(false, true), 0, 3, 2).unwrap_err();
        assert!(e.contains("--requeue"), "{e}");
        let e = decide(&facts(true, false), 0, 3, 2).unwrap_err();
        assert!(e.contains("batch"), "{e}");
    }

    #[test]
    fn warned_lead_ahead_or_half_way_when_short() {
        let s = Duration::from_secs;
        assert_eq!(warn_in(s(3600), s(300)), s(3300));
        assert_eq!(warn_in(s(60), s(35)), s(25));
        assert_eq!(warn_in(s(200), s(300)), s(100));
        assert_eq!(warn_in(s(0), s(300)), s(0));
    }
}
