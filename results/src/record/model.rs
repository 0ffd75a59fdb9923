//! `colloc-report.json` (`"schema": 2`): what a pack did, run by run and attempt by
//! attempt, and the figures of the whole pack. Built from the event log by
//! [`super::fold`]; `colloc-runs.csv`, the table and the charts are views of it.
//!
//! Schema 2 differs from 1 (the colloc before the event log): `attempts` is a list of attempt records (was a
//! count), every attempt counts in `wall_s` and the makespan, runs carry `env`, `workdir`,
//! `grid` and `metrics`, GPU energy per run is its time share of the GPU's measured energy
//! (`gpu.energy_j`, was `gpu.gpu_energy_j`, the whole GPU's), figures NVML cannot give are
//! null, and the report has `sessions`, `signals` and `calibrations`. Fields added since
//! within schema 2 are optional, absent where they say nothing (a resume of an edited
//! manifest: a run's `removed`, an attempt's `definition`, `summary.removed`; a resumed
//! pack's per-session `start_s`, `end_s`, `aggregate_throughput`, `steady_throughput`,
//! `steady_s`).

use std::collections::BTreeMap;

use crate::telemetry::{AttemptGpu, GpuTotals};
use serde::{Deserialize, Serialize};

use super::events::{Escaped, SlotRecord};
use crate::record::pairs::Pairs;
use crate::record::Best;
use crate::record::State;

/// Report format version.
pub const SCHEMA: u32 = 2;

/// Throughput of a run or attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputRecord {
    /// Unit (`img/s`, `samples/s`, `it/s`, or what the run's `metric`/`unit` says).
    pub unit: String,
    /// Work over sampled time (see colloc(1), "how figures are made").
    pub mean: f64,
    /// Latest sample.
    pub last: Option<f64>,
    /// Largest sample.
    pub max: Option<f64>,
    /// Samples seen.
    pub count: u64,
    /// Work done (rate x time, in the unit's numerator: images for img/s).
    pub work: f64,
    /// Seconds from first to last sample (summed over attempts).
    pub sampled_s: f64,
    /// Kept samples: [seconds since the report's start, rate].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<(f64, f64)>,
}

/// A user metric of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricRecord {
    /// Latest value.
    pub last: Option<f64>,
    /// Best value.
    pub best: Option<f64>,
    /// Whether the smallest or largest value is best.
    pub best_is: Best,
    /// Values seen.
    pub count: u64,
}

/// One finished epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// Epoch number.
    pub epoch: u64,
    /// Seconds it took.
    pub seconds: f64,
    /// The attempt it belongs to.
    pub attempt: u32,
}

/// One attempt of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Attempt number (1-based).
    pub attempt: u32,
    /// The colloc session that ran it.
    pub session: u32,
    /// How it ended.
    pub state: State,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Signal that ended it.
    pub signal: Option<i32>,
    /// What went wrong, when colloc knows.
    pub error: Option<String>,
    /// Start (RFC 3339).
    pub start: String,
    /// End (RFC 3339), when it ended.
    pub end: Option<String>,
    /// Start, seconds since the report's start.
    pub start_s: f64,
    /// End, seconds since the report's start.
    pub end_s: Option<f64>,
    /// Wall seconds (so far, while running).
    pub wall_s: f64,
    /// Slot.
    pub slot: usize,
    /// Device.
    pub device: Option<String>,
    /// Node.
    pub node: Option<String>,
    /// Its log, relative to the report directory.
    pub log: String,
    /// Its output showed a CUDA out-of-memory error.
    pub oom: bool,
    /// Its throughput (without samples).
    pub throughput: Option<Box<ThroughputRecord>>,
    /// GPU figures.
    pub gpu: Option<Box<AttemptGpu>>,
    /// Processes that had left its session (killed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escaped: Vec<Escaped>,
    /// Its Slurm step, where it ran as one (runs across nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Box<AttemptStep>>,
    /// Start-up: seconds from its start to its first throughput line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_s: Option<f64>,
    /// It started while its slot's previous attempt still ran (its start-up overlapped
    /// that attempt's end).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub started_early: bool,
    /// The definition it ran, where that is not its run's (the manifest was edited and
    /// the pack resumed since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Box<Definition>>,
}

/// What a run is: its command, environment, working directory and grid values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    /// Program and arguments.
    pub command: Vec<String>,
    /// The manifest's environment for it.
    pub env: Pairs,
    /// Working directory.
    pub workdir: Option<String>,
    /// Its sweep point.
    pub grid: Option<Pairs>,
}

/// The Slurm step an attempt ran as.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptStep {
    /// `JOBID.STEPID` (`None` when the step never ran).
    pub id: Option<String>,
    /// From colloc's `srun` to the run's start on its node, seconds.
    pub dispatch_s: Option<f64>,
    /// Why the step failed, when it ended without saying how the run ended (the node
    /// went away, Slurm could not start it); the run went back to the queue.
    pub failed: Option<String>,
}

/// A node of a pack across nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Its name.
    pub name: String,
    /// Its slots (indexes into the report's `slots`), in the latest session.
    pub slots: Vec<usize>,
    /// Attempts that ran there.
    pub attempts: usize,
    /// Of them, succeeded.
    pub succeeded: usize,
    /// Of them, steps that failed (not their runs).
    pub step_failures: usize,
    /// Why colloc gave it no more runs, if it did (latest session).
    pub out: Option<String>,
    /// When, seconds since the report's start.
    pub out_s: Option<f64>,
}

/// One run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Name.
    pub name: String,
    /// Position in the manifest (`COLLOC_RUN_INDEX`).
    pub index: usize,
    /// Program and arguments.
    pub command: Vec<String>,
    /// The manifest's environment for it.
    pub env: Pairs,
    /// Working directory.
    pub workdir: Option<String>,
    /// Its sweep point (null for a `[[run]]`).
    pub grid: Option<Pairs>,
    /// How its last attempt ended (`not_started` without one).
    pub state: State,
    /// Exit code of its last attempt.
    pub exit_code: Option<i32>,
    /// Signal that ended its last attempt.
    pub signal: Option<i32>,
    /// What went wrong in its last attempt.
    pub error: Option<String>,
    /// Start of its first attempt (RFC 3339).
    pub start: Option<String>,
    /// End of its last attempt (RFC 3339).
    pub end: Option<String>,
    /// First start, seconds since the report's start.
    pub start_s: Option<f64>,
    /// Last end, seconds since the report's start.
    pub end_s: Option<f64>,
    /// Wall seconds of all its attempts together.
    pub wall_s: Option<f64>,
    /// Slot of its last attempt.
    pub slot: Option<usize>,
    /// Device of its last attempt.
    pub device: Option<String>,
    /// Node of its last attempt, where it ran as a Slurm step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// GPU memory it declared it needs (`gpu_memory`), MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_mib: Option<u64>,
    /// GPU memory its last attempt's slot holds, MiB (see the session's slots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_memory_mib: Option<u64>,
    /// Every attempt, first to last.
    pub attempts: Vec<AttemptRecord>,
    /// Some attempt's output showed a CUDA out-of-memory error.
    pub oom: bool,
    /// Log of its last attempt (earlier ones are `logs/NAME.K.log`).
    pub log: Option<String>,
    /// Throughput over all attempts: their work over their sampled time.
    pub throughput: Option<Box<ThroughputRecord>>,
    /// A `metric` regex was given and no line of it matched.
    #[serde(default)]
    pub throughput_unmatched: bool,
    /// User metrics (last value of its last attempt, best of all).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, MetricRecord>,
    /// Epochs of all attempts.
    pub epochs: Vec<EpochRecord>,
    /// GPU figures over all attempts (peak memory, time-weighted utilization, energy share
    /// summed).
    pub gpu: Option<Box<AttemptGpu>>,
    /// Its throughput alone on the GPU, where known.
    pub solo_throughput: Option<f64>,
    /// Processes of it that had left its session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escaped: Vec<Escaped>,
    /// Start-up of its latest attempt that printed a throughput line: seconds from that
    /// attempt's start to its first one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_s: Option<f64>,
    /// No longer in the manifest: removed before a resume; its attempts are kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

/// A solo calibration (`--solo-baseline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRecord {
    /// The run whose command was measured alone.
    pub name: String,
    /// Its command.
    pub command: Vec<String>,
    /// How the calibration ended.
    pub state: State,
    /// When it started, seconds since the report's start (0 in reports written before
    /// this field was recorded).
    #[serde(default)]
    pub start_s: f64,
    /// The slot it ran on.
    #[serde(default)]
    pub slot: usize,
    /// Wall seconds.
    pub wall_s: f64,
    /// Throughput alone.
    pub throughput: Option<f64>,
    /// Its unit.
    pub unit: Option<String>,
    /// Runs this figure is the solo figure of.
    pub runs: Vec<String>,
    /// Its log.
    pub log: String,
}

/// A signal colloc received and forwarded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalRecord {
    /// When (RFC 3339).
    pub time: String,
    /// Seconds since the report's start.
    pub t_s: f64,
    /// Its name.
    pub signal: String,
    /// Runs it was forwarded to.
    pub runs: Vec<String>,
}

/// One colloc process that wrote this record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// 1, 2, … (resumes).
    pub session: u32,
    /// Start (RFC 3339).
    pub started: String,
    /// End (RFC 3339), once ended.
    pub ended: Option<String>,
    /// Host.
    pub host: String,
    /// colloc's pid.
    pub pid: u32,
    /// `SLURM_JOB_ID`.
    pub job_id: Option<String>,
    /// `SLURM_RESTART_COUNT`.
    pub restart_count: Option<u32>,
    /// Why it stopped early.
    pub stopped_by: Option<String>,
    /// Its first run start to its last run end, seconds.
    pub makespan_s: f64,
    /// Most runs at once.
    pub max_concurrent: usize,
    /// Still running.
    pub running: bool,
    /// Where the pack had more than one session (a resume): its first run's start and its
    /// last run's end, seconds since the report's start (the charts draw the time between
    /// sessions as a gap, not as work); absent before a run of it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_s: Option<f64>,
    /// See `start_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
    /// Where the pack had more than one session: the work of its attempts in the pack's
    /// unit over its own makespan (the summary's is over every session's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_throughput: Option<f64>,
    /// Where the pack had more than one session: its steady aggregate (every slot busy
    /// past start-up), in the pack's unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_throughput: Option<f64>,
    /// Seconds its steady aggregate rests on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_s: Option<f64>,
}

/// The pack as a whole.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Runs in the manifest (the latest session's; the state counts are of these).
    pub runs: usize,
    /// Runs of earlier sessions removed from the manifest since (their attempts count in
    /// the attempts, time and work). Left out when none, so a pack that removed nothing
    /// reports as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub removed: usize,
    /// How many ended in each state.
    pub succeeded: usize,
    /// Failed runs.
    pub failed: usize,
    /// Timed-out runs.
    pub timed_out: usize,
    /// Interrupted runs.
    pub interrupted: usize,
    /// Runs never started.
    pub not_started: usize,
    /// Runs running now.
    pub running: usize,
    /// Attempts made (all runs).
    pub attempts: usize,
    /// Attempts whose output showed a CUDA out-of-memory error.
    pub oom_attempts: usize,
    /// Attempts started while their slot's previous attempt still ran.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub early_starts: usize,
    /// Most runs that ran at once.
    pub max_concurrent: usize,
    /// Sum over sessions of first start to last end, seconds.
    pub makespan_s: f64,
    /// Work of all attempts in the pack's unit over the makespan.
    pub aggregate_throughput: Option<f64>,
    /// The steady aggregate: work per second while every slot was busy with a run past
    /// its start-up ([`crate::rules::steady`]), in the pack's unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_throughput: Option<f64>,
    /// Seconds of such time (over all sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_s: Option<f64>,
    /// Its unit (the most common unit among runs).
    pub throughput_unit: Option<String>,
    /// Estimated time to run the covered runs one after another, seconds.
    pub sequential_s: Option<f64>,
    /// sequential_s / makespan_s; a lower bound when not every run is covered.
    pub speedup: Option<f64>,
    /// Runs with a solo figure that the speed-up covers.
    pub speedup_runs: Option<usize>,
    /// Runs that ran.
    pub speedup_of: Option<usize>,
    /// Where the solo figures came from.
    pub solo_source: Option<String>,
    /// Energy of every GPU while sampled, joules.
    pub energy_j: Option<f64>,
    /// The part of it shared out to runs.
    pub runs_energy_j: Option<f64>,
    /// The part with no run active.
    pub idle_energy_j: Option<f64>,
    /// Attempts whose Slurm step failed (not the run: its node went away, Slurm could not
    /// start it) and whose run went back to the queue.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step_failures: usize,
    /// Median time from colloc's `srun` to a run's start on its node, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_dispatch_s: Option<f64>,
    /// Runs that ran more than [`FASTER_THAN_SOLO`] faster packed than their solo figure:
    /// that figure is too low (a solo run bound by the host's CPU, a cold start), so the
    /// speed-up overstates collocation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faster_than_solo: Vec<FasterThanSolo>,
}

/// How much faster than its solo figure a packed run may be before the figure is
/// suspect: 5 %.
pub const FASTER_THAN_SOLO: f64 = 1.05;

/// A run that ran faster packed than alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FasterThanSolo {
    /// The run.
    pub run: String,
    /// Its throughput packed (work over sampled time).
    pub throughput: f64,
    /// Its solo figure.
    pub solo: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `colloc-report.json`. Its runs are a `Vec` but for a report written as it is made
/// ([`crate::record::fold::Streamed`]), whose runs are made one at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report<R = Vec<RunRecord>> {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// colloc's version (of the latest session).
    pub colloc_version: String,
    /// Mode (normalized).
    pub mode: String,
    /// `job` (colloc job), `own` (colloc set the GPU up), `plain` (no GPU).
    pub source: String,
    /// `SLURM_JOB_ID`, if any.
    pub job_id: Option<String>,
    /// The slots.
    pub slots: Vec<SlotRecord>,
    /// First start (RFC 3339).
    pub started: String,
    /// Last event (RFC 3339).
    pub ended: String,
    /// A session is still running.
    pub running: bool,
    /// Why colloc stopped early (the latest session), if it did.
    pub stopped_by: Option<String>,
    /// GPU sampling interval, seconds.
    pub interval_s: f64,
    /// The colloc processes that wrote it (more than one after resumes).
    pub sessions: Vec<SessionRecord>,
    /// The figures of the whole pack.
    pub summary: Summary,
    /// Per GPU, summed over sessions (null without NVML).
    pub gpus: Option<Vec<GpuTotals>>,
    /// Signals colloc forwarded.
    #[serde(default)]
    pub signals: Vec<SignalRecord>,
    /// Solo calibrations.
    #[serde(default)]
    pub calibrations: Vec<CalibrationRecord>,
    /// The nodes, where runs went to several as Slurm steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeRecord>,
    /// The runs, in manifest order (removed ones after). The last field: a report written
    /// as its runs are made has every other field first.
    pub runs: R,
}

impl<R> Report<R> {
    /// The same report with `runs` for its runs.
    pub fn with_runs<S>(self, runs: S) -> Report<S> {
        Report {
            schema: self.schema,
            colloc_version: self.colloc_version,
            mode: self.mode,
            source: self.source,
            job_id: self.job_id,
            slots: self.slots,
            started: self.started,
            ended: self.ended,
            running: self.running,
            stopped_by: self.stopped_by,
            interval_s: self.interval_s,
            sessions: self.sessions,
            summary: self.summary,
            gpus: self.gpus,
            signals: self.signals,
            calibrations: self.calibrations,
            nodes: self.nodes,
            runs,
        }
    }
}
