//! What `colloc run` and the step side of a run (`colloc step run`, inside an `srun`
//! step on the node that owns the run's slot) say to each other, through Slurm's own
//! I/O forwarding and nothing else:
//!
//! ```text
//! colloc run ──srun stdin──> colloc step run     first line: the run (StepSpec), then
//!                                                Control lines (signal, kill)
//! colloc run <─srun stdout── the run's output    (stdout and stderr of the run, raw)
//! colloc run <─srun stderr── StepMsg lines       (`@colloc-step {json}`), and whatever
//!                                                srun or slurmstepd print themselves
//! ```
//!
//! End of file on the step's stdin means colloc (or its srun) is gone: the step kills its
//! run, as a local supervisor does when colloc dies. Lines on stderr without the prefix
//! are srun's and slurmstepd's own (`srun: error: Node failure on n3`): colloc keeps them
//! as the reason when a step fails.

use colloc_results::telemetry::{AttemptGpu, GpuId};
use serde::{Deserialize, Serialize};

use crate::engine::launch::LaunchSpec;

/// Prefix of the step side's report lines on its stderr.
pub const PREFIX: &str = "@colloc-step ";

/// Longest line read on either side (a run's spec, a step's GPU report).
pub const MAX_LINE: usize = 16 << 20;

/// The error the step side sends when its supervisor (the process that runs the run)
/// died without saying how the run ended: the step failed, not the run (a node lost
/// mid-run kills them in either order), so the run goes back to the queue.
pub const SUPERVISOR_GONE: &str = "the step's supervisor ended unexpectedly";

/// The run a step starts: the first line on its stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSpec {
    /// Run name (for messages).
    pub run: String,
    /// Attempt number.
    pub attempt: u32,
    /// What to start: the slot's environment (device, MPS pipe, MPS limits, worked out
    /// from the node's own variables) then the run's, applied over the step's environment.
    pub launch: LaunchSpec,
    /// The slot's CUDA device, whose GPU the step samples.
    pub device: Option<String>,
    /// The job's mode on the node (under MPS NVML has no per-process utilization).
    pub mode: String,
    /// GPU sampling interval, seconds.
    pub interval_s: f64,
    /// The slot's number in the pack (for the node's metrics).
    #[serde(default)]
    pub slot: Option<u32>,
    /// The run's index in the manifest (for the node's metrics).
    #[serde(default)]
    pub index: Option<u32>,
}

/// What colloc asks or tells a running step, one JSON line each on its stdin after the
/// spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// Send this signal to the run's process group.
    Signal(i32),
    /// Kill the run's process group and every descendant now.
    Kill,
    /// The run's last throughput sample, as colloc read it from the run's output (for
    /// the metrics the step serves on its node): at most once a second.
    Rate {
        /// The figure.
        value: f64,
        /// Its unit.
        unit: Option<String>,
    },
}

/// One energy counter reading of the step's GPU: Unix seconds on the node, the counter
/// (millijoules since the driver loaded: the same counter for every process on the
/// node), GPU-wide utilization and used memory where read.
pub type EnergyReading = (f64, u64, Option<u32>, Option<u64>);

/// The GPU figures of a run, measured on its node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepGpu {
    /// Its physical GPU.
    pub gpu: GpuId,
    /// Memory and utilization of the run (energy is shared out by colloc run, which
    /// sees every run on the GPU: see [`colloc_results::energy`]).
    pub figures: AttemptGpu,
    /// The GPU's energy counter while the run ran.
    #[serde(default)]
    pub readings: Vec<EnergyReading>,
}

/// What a step reports, one `@colloc-step {json}` line each on its stderr.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepMsg {
    /// The step runs: its node, `JOBID.STEPID` and pid.
    Hello {
        /// `SLURMD_NODENAME`.
        node: String,
        /// `SLURM_JOB_ID.SLURM_STEP_ID`.
        step: Option<String>,
        /// The step side's pid.
        pid: u32,
    },
    /// The run's leader started (its pid on the node, Unix seconds on the node).
    Started {
        /// Its pid.
        pid: u32,
        /// When.
        ts: f64,
    },
    /// The run's leader exited with this code.
    Exit(i32),
    /// The run's leader was killed by this signal.
    Signaled(i32),
    /// The run could not be started: why.
    Error(String),
    /// A process of the run had left its session; it was killed.
    Escaped {
        /// Its pid on the node.
        pid: u32,
        /// Its command name.
        comm: String,
    },
    /// The run's GPU figures.
    Gpu(Box<StepGpu>),
    /// Nothing of the run is left (`left` processes would not go), Unix seconds on the
    /// node.
    Done {
        /// Processes still there when the step gave up on them.
        left: u32,
        /// When.
        ts: f64,
    },
}

impl StepMsg {
    /// The line for the step's stderr.
    pub fn line(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_else(|_| "null".into());
        format!("{PREFIX}{json}\n")
    }
}

/// A line from a step's stderr: a report, or text of srun's and slurmstepd's own.
#[derive(Debug, Clone, PartialEq)]
pub enum StderrLine {
    /// A step report.
    Msg(StepMsg),
    /// Anything else (trimmed).
    Text(String),
}

/// Read one line of a step's stderr.
pub fn parse_stderr(line: &str) -> StderrLine {
    if let Some(json) = line.trim_end().strip_prefix(PREFIX) {
        if let Ok(m) = serde_json::from_str(json) {
            return StderrLine::Msg(m);
        }
    }
    StderrLine::Text(line.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip_and_other_text_stays_text() {
        let msgs = [
            StepMsg::Hello {
                node: "n2".into(),
                step: Some("12.3".into()),
                pid: 9,
            },
            StepMsg::Started { pid: 10, ts: 1.5 },
            StepMsg::Exit(3),
            StepMsg::Signaled(9),
            StepMsg::Error("cannot start \"x\"\nNo such file".into()),
            StepMsg::Escaped {
                pid: 11,
                comm: "sleep".into(),
            },
            StepMsg::Gpu(Box::new(StepGpu {
                gpu: GpuId {
                    index: 1,
                    uuid: "GPU-x".into(),
                    name: "A100".into(),
                },
                figures: AttemptGpu {
                    peak_memory_bytes: Some(5),
                    ..AttemptGpu::default()
                },
                readings: vec![(1.0, 2000, Some(50), None)],
            })),
            StepMsg::Done { left: 0, ts: 2.0 },
        ];
        for m in msgs {
            let l = m.line();
            assert!(l.ends_with('\n') && l.matches('\n').count() == 1, "{l}");
            assert_eq!(parse_stderr(&l), StderrLine::Msg(m));
        }
        assert_eq!(
            parse_stderr("srun: error: Node failure on n3\n"),
            StderrLine::Text("srun: error: Node failure on n3".into())
        );
        assert_eq!(
            parse_stderr("@colloc-step {not json"),
            StderrLine::Text("@colloc-step {not json".into())
        );
        let c = serde_json::to_string(&Control::Signal(10)).unwrap();
        assert_eq!(c, r#"{"signal":10}"#);
        assert_eq!(serde_json::to_string(&Control::Kill).unwrap(), r#""kill""#);
    }
}
