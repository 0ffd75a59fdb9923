//! `colloc run` arguments: taken as text by clap, then checked into [`Options`] so every
//! mistake is one line and exit code 2 before anything starts.

use std::path::PathBuf;
use std::time::Duration;

use super::manifest::MAX_RUNS;
pub use super::retry::RetryOn;
use super::retry::MAX_RETRIES;
use super::slots::MAX_SLOTS;
use crate::bad_input;
use colloc_results::duration;

/// Arguments of `colloc run`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  colloc run -f runs.toml                      inside an sbatch --colloc=... job
  colloc run --mode mps -j 4 -f runs.toml      outside Slurm: colloc starts its own MPS daemon
  colloc run -j 4 -- python train.py --seed 1  4 copies of one command (COLLOC_RUN_INDEX differs)
  colloc run --resume --report-dir DIR -f runs.toml   finish what an earlier pack left
  colloc run -f runs.toml                      in an sbatch -N 3 job: every node's slots,
                                               each run a Slurm step on its slot's node

Writes DIR/events/ (the record, as it happens), DIR/colloc-report.json, DIR/colloc-runs.csv,
DIR/colloc-timeline.png, DIR/colloc-runs.png, DIR/colloc-throughput.png and DIR/logs/.
`colloc report DIR` shows it at any time. Exit status: 0 all runs succeeded, 1 a run failed,
timed out or was stopped, or the report could not be written, 2 bad input.")]
pub struct RunArgs {
    /// Runs at once (default: COLLOC_SLOTS; else one per MIG instance, N per GPU for mps:N,
    /// 2 per GPU for naive/mps, the CPU count without a GPU).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX_SLOTS as i64))]
    pub jobs: Option<u32>,
    /// naive, mps or mps:N, outside a colloc job (inside one the job's mode applies).
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Where the record, report and logs go (default: ./colloc-<job id or time>).
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// Continue the record in the report directory: skip runs that succeeded, run the
    /// rest again; an edited manifest's changed and new runs run, removed ones are kept
    /// in the record (automatic in a requeued Slurm job whose directory holds this
    /// manifest's record).
    #[arg(long)]
    pub resume: bool,
    /// Run manifest (runs.toml).
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        conflicts_with = "command"
    )]
    pub file: Option<PathBuf>,
    /// Stop everything when one run fails (after its retries).
    #[arg(long)]
    pub fail_fast: bool,
    /// Start a failed run again, up to N more times (see --retry-on), where runs.toml
    /// sets no `retries` for it.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=MAX_RETRIES as i64))]
    pub retries: u32,
    /// Which failures --retries covers: oom (a CUDA out-of-memory message) or any (any
    /// failure or timeout), where runs.toml sets no `retry_on` for the run.
    #[arg(long, value_name = "WHAT", default_value = "oom")]
    pub retry_on: String,
    /// Time limit per run (e.g. 90m) for runs whose manifest entry sets none.
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// GPU sampling interval.
    #[arg(long, value_name = "DUR", default_value = "1s")]
    pub interval: String,
    /// Before the pack, run each distinct command (each sweep point) alone for
    /// --solo-window to measure its solo throughput, within --solo-budget.
    #[arg(long, conflicts_with = "baseline")]
    pub solo_baseline: bool,
    /// Length of each --solo-baseline measurement, after its warm-up.
    #[arg(long, value_name = "DUR", default_value = "60s")]
    pub solo_window: String,
    /// Time after the command's first throughput line left out of its --solo-baseline
    /// figure (as `colloc bench --warmup`).
    #[arg(long, value_name = "DUR", default_value = colloc_results::rules::solo::DEFAULT_WARMUP)]
    pub solo_warmup: String,
    /// Most time all --solo-baseline measurements together may take.
    #[arg(long, value_name = "DUR", default_value = "10m")]
    pub solo_budget: String,
    /// Take solo throughput figures from an earlier colloc-report.json (runs with the same
    /// command, environment and working directory).
    #[arg(long, value_name = "REPORT")]
    pub baseline: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when runs are stopped.
    #[arg(long, value_name = "DUR", default_value = "10s")]
    pub grace: String,
    /// Inside a Slurm job with a time limit: warn the runs (--warn-signal) this long before
    /// the job ends, give them --warn-grace to checkpoint, stop the rest, write the record
    /// and requeue the job (when it may be requeued); `off`: only when colloc gets SIGUSR1.
    #[arg(
        long,
        value_name = "DUR",
        env = "COLLOC_WARN_BEFORE",
        default_value = "5m"
    )]
    pub warn_before: String,
    /// The signal the runs get as the time-limit warning.
    #[arg(
        long,
        value_name = "SIG",
        env = "COLLOC_WARN_SIGNAL",
        default_value = "USR1"
    )]
    pub warn_signal: String,
    /// How long the warned runs have to save a checkpoint and exit before SIGTERM.
    #[arg(
        long,
        value_name = "DUR",
        env = "COLLOC_WARN_GRACE",
        default_value = "3m"
    )]
    pub warn_grace: String,
    /// Most times colloc requeues its job after the warning (SLURM_RESTART_COUNT counts);
    /// 0: never.
    #[arg(long, value_name = "N", env = "COLLOC_REQUEUE_LIMIT", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub requeue_limit: u32,
    /// How often to print the one-line progress status.
    #[arg(long, value_name = "DUR", default_value = "30s")]
    pub status_every: String,
    /// With `-- CMD`: how many copies to run (default: one per slot).
    #[arg(short = 'n', long = "count", value_name = "N", requires = "command", value_parser = clap::value_parser!(u32).range(1..=MAX_RUNS as i64))]
    pub count: Option<u32>,
    /// With `-- CMD`: throughput regex (named group `value`, else the first group).
    #[arg(long, value_name = "REGEX", requires = "command")]
    pub metric: Option<String>,
    /// With `-- CMD --metric`: the throughput's unit (default: read from the regex).
    #[arg(long, value_name = "UNIT", requires = "metric")]
    pub unit: Option<String>,
    /// Runs as Slurm job steps on every node of the job: auto (when the job has several
    /// nodes), on (also on one node) or off (this node only, as outside Slurm).
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    pub steps: String,
    /// Start each slot's next run only once its current one has ended. By default, where
    /// the runs print throughput lines, a slot's next run starts while the current one
    /// ends, so that its start-up (imports, CUDA context) overlaps the current run's last
    /// seconds instead of leaving the slot's share of the GPU idle; only within the
    /// slot's memory as measured, and on this node only.
    #[arg(long)]
    pub no_overlap: bool,
    /// Print only the one-line summary at the end (warnings still go to stderr); the
    /// runs' output still goes to their logs.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// The command to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// When runs go to Slurm job steps (`--steps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steps {
    /// In a Slurm job of several nodes.
    Auto,
    /// In any Slurm job.
    On,
    /// Never: this node only.
    Off,
}

/// Checked options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Time between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// GPU sampling interval.
    pub interval: Duration,
    /// Progress status interval.
    pub status_every: Duration,
    /// Each solo measurement.
    pub solo_window: Duration,
    /// Warm-up before each solo measurement.
    pub solo_warmup: Duration,
    /// All solo measurements.
    pub solo_budget: Duration,
    /// Default per-run time limit.
    pub timeout: Option<Duration>,
    /// Extra attempts, for runs whose manifest entry sets none.
    pub retries: u32,
    /// Which failures they cover, for runs whose manifest entry sets none.
    pub retry_on: RetryOn,
    /// Only the one-line summary.
    pub quiet: bool,
    /// Stop at the first failure.
    pub fail_fast: bool,
    /// Start a slot's next run early, over its start-up (not `--no-overlap`).
    pub overlap: bool,
    /// Runs as Slurm steps.
    pub steps: Steps,
    /// The time-limit warning and the requeue.
    pub warn: Settings,
}

fn dur(flag: &str, v: &str) -> anyhow::Result<Duration> {
    duration::parse(v, false).map_err(|e| bad_input(format!("{flag}: {e}")))
}

impl Options {
    /// Check the arguments.
    ///
    /// # Errors
    /// One line per mistake, as bad input.
    pub fn from(a: &RunArgs) -> anyhow::Result<Options> {
        let interval = dur("--interval", &a.interval)?;
        if interval < Duration::from_millis(50) {
            return Err(bad_input("--interval must be at least 50ms"));
        }
        let retry_on =
            RetryOn::parse(&a.retry_on).map_err(|e| bad_input(format!("--retry-on: {e}")))?;
        let steps = match a.steps.trim() {
            "auto" => Steps::Auto,
            "on" => Steps::On,
            "off" => Steps::Off,
            other => {
                return Err(bad_input(format!(
                    "--steps: {other:?} is not valid; use auto, on or off"
                )))
            }
        };
        let grace = dur("--grace", &a.grace)?;
        let warn = warn_settings(a, grace)?;
        Ok(Options {
            steps,
            warn,
            grace,
            interval,
            status_every: dur("--status-every", &a.status_every)?,
            solo_window: dur("--solo-window", &a.solo_window)?,
            // As bench's --warmup, 0 is valid: the figure from the first line on.
            solo_warmup: duration::parse(&a.solo_warmup, true)
                .map_err(|e| bad_input(format!("--solo-warmup: {e}")))?,
            solo_budget: dur("--solo-budget", &a.solo_budget)?,
            timeout: a
                .timeout
                .as_deref()
                .map(|t| dur("--timeout", t))
                .transpose()?,
            retries: a.retries,
            retry_on,
            quiet: a.quiet,
            fail_fast: a.fail_fast,
            overlap: !a.no_overlap,
        })
    }
}

/// The time-limit settings: the runs' grace and colloc's own `--grace` must end before the
/// job does.
fn warn_settings(a: &RunArgs, grace: Duration) -> anyhow::Result<Settings> {
    let before = match a.warn_before.trim() {
        "off" | "0" => None,
        v => Some(dur("--warn-before", v)?),
    };
    let warn_grace = dur("--warn-grace", &a.warn_grace)?;
    if let Some(b) = before {
        if warn_grace + grace >= b {
            return Err(bad_input(format!(
                "--warn-grace ({}) plus --grace ({}) must be shorter than --warn-before ({}): the runs would still be stopping when Slurm ends the job",
                duration::show(warn_grace),
                duration::show(grace),
                duration::show(b)
            )));
        }
    }
    Ok(Settings {
        before,
        signal: parse_signal(&a.warn_signal).map_err(bad_input)?,
        grace: warn_grace,
        requeue_limit: a.requeue_limit,
    })
}

/// The checked time-limit settings of `colloc run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long before the job's end the runs are warned (`None`: colloc does not watch
    /// the end time; SIGUSR1 still warns).
    pub before: Option<Duration>,
    /// The signal the runs get.
    pub signal: i32,
    /// How long they have to checkpoint and exit before SIGTERM.
    pub grace: Duration,
    /// Most requeues of the job (counted by `SLURM_RESTART_COUNT`).
    pub requeue_limit: u32,
}

/// Signals a run may be warned with, by name.
const SIGNALS: [(&str, i32); 6] = [
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("TERM", libc::SIGTERM),
    ("INT", libc::SIGINT),
    ("HUP", libc::SIGHUP),
    ("QUIT", libc::SIGQUIT),
];

/// A `--warn-signal` value: a name with or without `SIG` (any case), or its number.
///
/// # Errors
/// What is wrong and what is valid.
pub fn parse_signal(s: &str) -> Result<i32, String> {
    let t = s.trim().to_ascii_uppercase();
    let name = t.strip_prefix("SIG").unwrap_or(&t);
    SIGNALS
        .iter()
        .find(|(n, num)| *n == name || num.to_string() == name)
        .map(|(_, num)| *num)
        .ok_or_else(|| {
            format!("--warn-signal: {s:?} is not valid; use USR1, USR2, TERM, INT, HUP or QUIT")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warn_signals_by_name_or_number() {
        assert_eq!(parse_signal("USR1"), Ok(libc::SIGUSR1));
        assert_eq!(parse_signal("sigusr2"), Ok(libc::SIGUSR2));
        assert_eq!(parse_signal(" SIGTERM "), Ok(libc::SIGTERM));
        assert_eq!(parse_signal("10"), Ok(libc::SIGUSR1));
        for bad in ["KILL", "9", "", "USR3", "STOP"] {
            let e = parse_signal(bad).unwrap_err();
            assert!(e.contains("USR1, USR2"), "{e}");
        }
    }
}
