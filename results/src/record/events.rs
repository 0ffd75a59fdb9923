//! The event log of a pack: one JSON object per line, appended and flushed as things
//! happen, in `DIR/events/<session>.<writer>.jsonl` (one file per colloc process that
//! writes, so several writers never share a file and a later session never rewrites an
//! earlier one). Everything in the report is rebuilt from these events
//! ([`super::fold`]). Times (`ts`) are Unix seconds.

use std::collections::BTreeMap;

use crate::telemetry::{AttemptGpu, GpuId, GpuTotals};
use serde::{Deserialize, Serialize};

use crate::record::pairs::Pairs;
use crate::record::Best;
use crate::record::State;
use crate::rules::throughput::Stats;

/// Version of the event format (in every `session` event).
pub const EVENTS_VERSION: u32 = 1;

/// What a run is, for resuming: the same name with the same command, environment and
/// working directory is the same run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunIdentity {
    /// Name.
    pub name: String,
    /// Program and arguments, expanded.
    pub command: Vec<String>,
    /// The manifest's environment for it, in order.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub workdir: Option<String>,
    /// Its sweep point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<Pairs>,
    /// Its user metrics and which value is best.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<(String, Best)>,
    /// Its throughput regex, where it has one of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// GPU memory it declared it needs (`gpu_memory`), MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_mib: Option<u64>,
}

impl RunIdentity {
    /// The key of its solo figure: runs with the same command, environment and working
    /// directory run the same work alone.
    pub fn solo_key(&self) -> String {
        serde_json::to_string(&(&self.command, &self.env, &self.workdir)).unwrap_or_default()
    }

    /// Does `other` describe the same run: the same name, command, environment,
    /// working directory and grid values?
    pub fn same_run(&self, other: &RunIdentity) -> bool {
        self.name == other.name && self.changed(other).is_none()
    }

    /// What of its definition `other` changes, the first found: its command,
    /// environment, working directory or grid values.
    pub fn changed(&self, other: &RunIdentity) -> Option<&'static str> {
        if self.command != other.command {
            Some("command")
        } else if self.env != other.env {
            Some("environment")
        } else if self.workdir != other.workdir {
            Some("working directory")
        } else if self.grid != other.grid {
            Some("grid values")
        } else {
            None
        }
    }
}

/// A slot of the layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRecord {
    /// Index.
    pub index: usize,
    /// CUDA device, if any.
    pub device: Option<String>,
    /// Its node, where runs go to several nodes as Slurm steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// GPU memory it holds, MiB: a MIG instance's, an `mps:N` client's limit, or the
    /// usable memory of the GPU its slots share (where NVML told it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
}

/// What an attempt is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// One of the pack's runs.
    #[default]
    Run,
    /// A solo calibration (`--solo-baseline`): the run alone on the GPU.
    Solo,
}

/// Output facts of an attempt since its previous progress event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Unit of its throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Samples newly kept: [ts, rate].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<(f64, f64)>,
    /// The running throughput figures so far (times in Unix seconds).
    #[serde(default)]
    pub stats: Stats,
    /// User metrics so far: last, best, count.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, MetricValue>,
    /// Epochs finished since the previous event: [number, seconds].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub epochs: Vec<(u64, f64)>,
    /// A CUDA out-of-memory message was seen.
    #[serde(default)]
    pub oom: bool,
    /// Lines read so far.
    #[serde(default)]
    pub lines: u64,
}

/// Last and best value of a user metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MetricValue {
    /// Latest value.
    pub last: Option<f64>,
    /// Best value.
    pub best: Option<f64>,
    /// Values seen.
    pub count: u64,
}

/// An attempt that ran as a Slurm step of its own (runs across nodes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// `JOBID.STEPID`, once the step ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// From colloc's `srun` to the run's start on its node, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_s: Option<f64>,
    /// Why the step failed, where it ended without saying how the run ended (its node
    /// went away, Slurm could not start it): the run goes to another node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// The run's start and end on its node (Unix seconds there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<(f64, f64)>,
    /// The run's physical GPU, as NVML named it on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuId>,
    /// That GPU's energy counter while the run ran: [Unix seconds, mJ, utilization %,
    /// used bytes].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readings: Vec<(f64, u64, Option<u32>, Option<u64>)>,
}

/// A process that had left its run's session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escaped {
    /// Its pid.
    pub pid: u32,
    /// Its command name.
    pub command: String,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// A colloc process began writing this record.
    Session {
        /// When.
        ts: f64,
        /// Event format version.
        version: u32,
        /// 1 for the first session of a record, then 2, 3, … (resumes).
        session: u32,
        /// colloc's version.
        colloc_version: String,
        /// Host name.
        host: String,
        /// colloc's pid.
        pid: u32,
        /// `SLURM_JOB_ID`.
        job_id: Option<String>,
        /// `SLURM_RESTART_COUNT`.
        restart_count: Option<u32>,
        /// Mode (normalized).
        mode: String,
        /// `job`, `own` or `plain`.
        source: String,
        /// Runs start as Slurm steps on the nodes of their slots.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        steps: bool,
        /// The slots.
        slots: Vec<SlotRecord>,
        /// GPU sampling interval, seconds.
        interval_s: f64,
        /// The runs, in manifest order.
        runs: Vec<RunIdentity>,
    },
    /// An attempt started.
    Start {
        /// When.
        ts: f64,
        /// Run name.
        run: String,
        /// Run or solo calibration.
        #[serde(default)]
        kind: Kind,
        /// Attempt number (1-based, per run and kind).
        attempt: u32,
        /// Session that ran it.
        session: u32,
        /// Slot.
        slot: usize,
        /// Its device.
        device: Option<String>,
        /// The node it ran on.
        node: Option<String>,
        /// Its log, relative to the report directory.
        log: String,
        /// It started while the slot's previous attempt still ran, so that its start-up
        /// overlapped that attempt's end.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        early: bool,
    },
    /// Output facts of a running attempt.
    Progress {
        /// When.
        ts: f64,
        /// Run name.
        run: String,
        /// Run or solo calibration.
        #[serde(default)]
        kind: Kind,
        /// Attempt.
        attempt: u32,
        /// The facts.
        #[serde(flatten)]
        progress: Progress,
    },
    /// An attempt ended.
    End {
        /// When.
        ts: f64,
        /// Run name.
        run: String,
        /// Run or solo calibration.
        #[serde(default)]
        kind: Kind,
        /// Attempt.
        attempt: u32,
        /// How it ended.
        state: State,
        /// Exit code, when it exited.
        exit_code: Option<i32>,
        /// Signal that ended it.
        signal: Option<i32>,
        /// Why it could not start, or what else went wrong.
        error: Option<String>,
        /// Its leader's pid.
        pid: Option<u32>,
        /// Processes that had left its session (killed).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        escaped: Vec<Escaped>,
        /// GPU figures.
        gpu: Option<AttemptGpu>,
        /// Its Slurm step, where it ran as one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<Box<StepInfo>>,
        /// The last output facts.
        #[serde(flatten)]
        progress: Progress,
    },
    /// colloc received a signal and forwarded it.
    Signal {
        /// When.
        ts: f64,
        /// Signal name.
        signal: String,
        /// Runs it was forwarded to.
        runs: Vec<String>,
    },
    /// colloc began stopping everything.
    Stop {
        /// When.
        ts: f64,
        /// Why.
        reason: String,
    },
    /// Per-GPU figures of a session so far (the latest one of a session counts).
    Gpus {
        /// When.
        ts: f64,
        /// Session.
        session: u32,
        /// The GPUs.
        gpus: Vec<GpuTotals>,
    },
    /// A solo throughput figure.
    Solo {
        /// When.
        ts: f64,
        /// The solo key ([`RunIdentity::solo_key`]).
        key: String,
        /// The run whose command it is (the calibration's name).
        run: String,
        /// Throughput alone.
        throughput: f64,
        /// Its unit.
        unit: String,
        /// Where it comes from.
        source: String,
    },
    /// colloc gives a node no more runs.
    NodeOut {
        /// When.
        ts: f64,
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
    /// A session ended.
    SessionEnd {
        /// When.
        ts: f64,
        /// Session.
        session: u32,
        /// Why it stopped early.
        stopped_by: Option<String>,
        /// Most attempts at once.
        max_concurrent: usize,
    },
}

impl Event {
    /// Its time.
    pub fn ts(&self) -> f64 {
        match self {
            Event::Session { ts, .. }
            | Event::Start { ts, .. }
            | Event::Progress { ts, .. }
            | Event::End { ts, .. }
            | Event::Signal { ts, .. }
            | Event::Stop { ts, .. }
            | Event::Gpus { ts, .. }
            | Event::Solo { ts, .. }
            | Event::NodeOut { ts, .. }
            | Event::SessionEnd { ts, .. } => *ts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_as_one_line_each() {
        let e = Event::End {
            ts: 1.5,
            run: "a".into(),
            kind: Kind::Run,
            attempt: 2,
            state: State::Failed,
            exit_code: Some(1),
            signal: None,
            error: None,
            pid: Some(7),
            escaped: vec![],
            gpu: None,
            step: None,
            progress: Progress {
                unit: Some("img/s".into()),
                samples: vec![(1.0, 2.0)],
                oom: true,
                ..Progress::default()
            },
        };
        let line = serde_json::to_string(&e).unwrap();
        assert!(!line.contains('\n'));
        assert!(line.starts_with("{\"ev\":\"end\""), "{line}");
        let back: Event = serde_json::from_str(&line).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn identity_ignores_what_does_not_change_the_run() {
        let a = RunIdentity {
            name: "a".into(),
            command: vec!["x".into()],
            env: vec![],
            workdir: None,
            grid: None,
            metrics: vec![],
            metric: None,
            gpu_memory_mib: None,
        };
        let mut b = a.clone();
        b.metrics.push(("loss".into(), Best::Min));
        assert!(a.same_run(&b));
        b.grid = Some([("lr".to_string(), "0.1".to_string())].into());
        assert!(!a.same_run(&b));
        assert_eq!(a.changed(&b), Some("grid values"));
        b.command.push("--lr".into());
        assert!(!a.same_run(&b));
        assert_eq!(a.changed(&b), Some("command"));
        assert_ne!(a.solo_key(), b.solo_key());
    }
}
