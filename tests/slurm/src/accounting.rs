//! Slurm's accounting on a [`Cluster`] started with
//! [`ClusterSpec::with_accounting`](crate::ClusterSpec::with_accounting): `sacct` and
//! `sacctmgr` against its own slurmdbd, and waiting for a job's record to reach the
//! database.
//!
//! slurmctld sends a job's records to slurmdbd asynchronously, and not in order: seen on
//! 22.05, a job that started right after the cluster did had its batch step's start
//! reach slurmdbd first, which made a stand-in row for the job (name `allocation`, uid 0,
//! no partition: `as_mysql_step_start` on a job without a row); the job's end then
//! updated that row (state, end, `AdminComment`: only the end record carries it), and the
//! job's own start record (user, name, partition) came last. [`Cluster::wait_accounted`]
//! waits for both.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::{run, text, Cluster};

/// Longest [`Cluster::wait_accounted`] waits for a job's end to reach the database.
pub const ACCOUNTING_WAIT: Duration = Duration::from_secs(60);

/// Job states of `sacct` that are not an end.
const NOT_ENDED: &[&str] = &["PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED"];

impl Cluster {
    /// Whether this cluster runs Slurm's accounting (a slurmdbd and MariaDB of its own).
    pub fn has_accounting(&self) -> bool {
        self.accounting
    }

    fn need_accounting(&self, what: &str) {
        assert!(
            self.accounting,
            "{what}: this cluster has no accounting (start it with ClusterSpec::with_accounting)"
        );
    }

    /// `sacct ARGS` as root against this cluster's database (its `SLURM_CONF`).
    ///
    /// # Panics
    /// On a cluster without accounting, or when sacct cannot be run.
    pub fn sacct(&self, args: &[&str]) -> Output {
        self.need_accounting("sacct");
        run(self.slurm("sacct").args(args))
    }

    /// `sacctmgr ARGS` as root against this cluster's slurmdbd (its `SLURM_CONF`). Add
    /// `-i` to a change, or sacctmgr asks for a confirmation.
    ///
    /// # Panics
    /// On a cluster without accounting, or when sacctmgr cannot be run.
    pub fn sacctmgr(&self, args: &[&str]) -> Output {
        self.need_accounting("sacctmgr");
        run(self.slurm("sacctmgr").args(args))
    }

    /// Job `id`'s allocation row in the database (`sacct -j ID -X -n -P -o FIELDS`) as
    /// field name to value, `None` while the database has no row for it. The names are
    /// the `fields` as given (e.g. `AdminComment`).
    ///
    /// # Panics
    /// On a cluster without accounting, or when sacct fails.
    pub fn accounted_job(&self, id: u32, fields: &[&str]) -> Option<BTreeMap<String, String>> {
        let id_arg = id.to_string();
        let format = fields.join(",");
        let out = self.sacct(&["-j", &id_arg, "-X", "-n", "-P", "-o", &format]);
        assert!(
            out.status.success(),
            "sacct -j {id}: {}",
            text(&out.stderr).trim()
        );
        let stdout = text(&out.stdout);
        let line = stdout.lines().find(|l| !l.trim().is_empty())?;
        Some(
            fields
                .iter()
                .map(|f| f.to_string())
                .zip(line.split('|').map(str::to_string))
                .collect(),
        )
    }

    /// Wait until job `id`'s start and end records have both reached the database: its row
    /// shows a `State` that is no longer running or pending, an `End` time, and a
    /// `Partition` (which only the job's own start record writes: see the module's
    /// opening). Returns the row's `fields` (with `JobID`, `State`, `End` and `Partition`
    /// always among them), as [`Cluster::accounted_job`] gives it.
    ///
    /// # Panics
    /// After [`ACCOUNTING_WAIT`], with what sacct last showed and slurmdbd's log; on a
    /// cluster without accounting.
    pub fn wait_accounted(&self, id: u32, fields: &[&str]) -> BTreeMap<String, String> {
        let mut all: Vec<&str> = vec!["JobID", "State", "End", "Partition"];
        for f in fields {
            if !all.contains(f) {
                all.push(f);
            }
        }
        let start = Instant::now();
        let mut last = None;
        loop {
            last = self.accounted_job(id, &all).or(last);
            if let Some(row) = &last {
                // `CANCELLED by 0`: the state is the first word.
                let word = row["State"].split_whitespace().next().unwrap_or_default();
                let end = row["End"].as_str();
                if !word.is_empty()
                    && !NOT_ENDED.contains(&word)
                    && !matches!(end, "" | "Unknown" | "None")
                    && !row["Partition"].is_empty()
                {
                    return row.clone();
                }
            }
            if start.elapsed() > ACCOUNTING_WAIT {
                panic!(
                    "job {id}'s start and end did not both reach the database within {}s; sacct last showed \
                     {last:?}\n--- slurmdbd log ---\n{}",
                    ACCOUNTING_WAIT.as_secs(),
                    self.slurmdbd_log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Last `n` lines of the cluster's slurmdbd log (empty without accounting).
    pub fn slurmdbd_log_tail(&self, n: usize) -> String {
        let all =
            std::fs::read_to_string(self.dir().join("slurmdbd/slurmdbd.log")).unwrap_or_default();
        let lines: Vec<&str> = all.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}
