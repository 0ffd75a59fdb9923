//! What a job's own colloc asks Slurm about the job near its time limit: how long it has
//! left and whether it may be requeued (`scontrol -o show job`), and the requeue itself
//! (`scontrol requeue`). The answers are parsed by pure functions.

use std::time::Duration;

use super::{ask, SlurmError};

/// What `scontrol -o show job ID` says of a job, as far as its time limit and requeue go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts {
    /// `JobState=` (RUNNING, COMPLETING, …).
    pub state: String,
    /// `Requeue=1`: the job may be requeued (`--requeue`, or the site's `JobRequeue=1`).
    pub requeue: bool,
    /// `BatchFlag=1`: a batch job (only a batch job can be requeued).
    pub batch: bool,
    /// `Restarts=`: how often it was requeued so far.
    pub restarts: u32,
    /// `TimeLimit=` (`None`: UNLIMITED or not shown).
    pub limit: Option<Duration>,
    /// `RunTime=`: how long it has run (without time suspended).
    pub run_time: Option<Duration>,
}

impl JobFacts {
    /// Time left before Slurm ends the job (`TimeLimit` − `RunTime`), when it has a limit.
    pub fn time_left(&self) -> Option<Duration> {
        Some(self.limit?.saturating_sub(self.run_time?))
    }
}

/// A Slurm duration: `[D-]HH:MM:SS`, `MM:SS` or `SS` (`None`: `UNLIMITED`,
/// `Partition_Limit`, `INVALID`, anything else).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let (h, m, sec) = match parts[..] {
        [h, m, s] => (h, m, s),
        [m, s] => (0, m, s),
        [s] if days == 0 => (0, 0, s),
        _ => return None,
    };
    if m >= 60 || sec >= 60 {
        return None;
    }
    Some(Duration::from_secs(((days * 24 + h) * 60 + m) * 60 + sec))
}

/// Parse the first line of `scontrol -o show job ID`.
pub fn parse_show_job(out: &str) -> Option<JobFacts> {
    let line = out.lines().find(|l| l.contains("JobId="))?;
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    };
    Some(JobFacts {
        state: field("JobState")?.to_string(),
        requeue: field("Requeue") == Some("1"),
        batch: field("BatchFlag") == Some("1"),
        restarts: field("Restarts").and_then(|r| r.parse().ok()).unwrap_or(0),
        limit: field("TimeLimit").and_then(parse_duration),
        run_time: field("RunTime").and_then(parse_duration),
    })
}

/// What Slurm says of job `id` now.
///
/// # Errors
/// Slurm could not be asked, or its answer has no job in it.
pub fn show_job(id: &str) -> Result<JobFacts, SlurmError> {
    let a = ask("scontrol", &["-o", "show", "job", id])?;
    let fail = |what: String| SlurmError {
        command: format!("scontrol -o show job {id}"),
        what,
    };
    if !a.ok {
        return Err(fail(a.stderr));
    }
    parse_show_job(&a.stdout).ok_or_else(|| fail("shows no job".into()))
}

/// Requeue job `id` (`scontrol requeue ID`): Slurm ends it now and queues it again, with
/// the same id.
///
/// # Errors
/// Slurm could not be asked, or refused.
pub fn requeue(id: &str) -> Result<(), SlurmError> {
    let a = ask("scontrol", &["requeue", id])?;
    if a.ok {
        Ok(())
    } else {
        Err(SlurmError {
            command: format!("scontrol requeue {id}"),
            what: a.stderr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // As Slurm 22.05 prints it (trimmed).
    const SHOW: &str = "JobId=1 JobName=a.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:17 TimeLimit=00:01:00 TimeMin=N/A SubmitTime=2026-12-04T17:42:47 StartTime=2026-12-04T17:42:48 EndTime=2026-12-04T17:43:48 Deadline=N/A NodeList=vm Command=/var/tmp/x y/a.sh WorkDir=/var/tmp\n";

    #[test]
    fn slurm_durations() {
        let s = Duration::from_secs;
        assert_eq!(parse_duration("00:01:00"), Some(s(60)));
        assert_eq!(parse_duration("1-02:03:04"), Some(s(93_784)));
        assert_eq!(parse_duration("4:05"), Some(s(245)));
        assert_eq!(parse_duration("42"), Some(s(42)));
        assert_eq!(parse_duration("2-00:00:00"), Some(s(172_800)));
        for bad in [
            "UNLIMITED",
            "Partition_Limit",
            "INVALID",
            "",
            "1:60",
            "1:2:3:4",
            "-1:00",
            "2-5",
            "a:b",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn show_job_fields() {
        let f = parse_show_job(SHOW).unwrap();
        assert_eq!(
            f,
            JobFacts {
                state: "RUNNING".into(),
                requeue: true,
                batch: true,
                restarts: 2,
                limit: Some(Duration::from_secs(60)),
                run_time: Some(Duration::from_secs(17)),
            }
        );
        assert_eq!(f.time_left(), Some(Duration::from_secs(43)));
        let other = SHOW
            .replace("Requeue=1", "Requeue=0")
            .replace("BatchFlag=1", "BatchFlag=0")
            .replace("TimeLimit=00:01:00", "TimeLimit=UNLIMITED");
        let f = parse_show_job(&other).unwrap();
        assert!(!f.requeue && !f.batch);
        assert_eq!(f.time_left(), None);
        // Over its limit (OverTimeLimit): nothing left, not a negative time.
        let over = SHOW.replace("RunTime=00:00:17", "RunTime=00:01:05");
        assert_eq!(
            parse_show_job(&over).unwrap().time_left(),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_show_job("slurm_load_jobs error: Invalid job id"),
            None
        );
        assert_eq!(parse_show_job(""), None);
    }
}
