//! The record of a pack: `colloc-report.json` (`"schema": 1`), `colloc-runs.csv`, the
//! summary table, and the figures behind them (aggregate throughput, speed-up).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::sampler::{GpuTotal, RunGpu};

/// Report format version.
pub const SCHEMA: u32 = 1;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Exited 0.
    Succeeded,
    /// Exited non-zero, died of a signal of its own, or could not start.
    Failed,
    /// Hit its timeout and was stopped.
    TimedOut,
    /// Stopped by colloc (signal to colloc, `--fail-fast`) before it finished.
    Interrupted,
    /// Never started (colloc was stopped first).
    NotStarted,
}

impl State {
    /// The name used in the JSON and CSV.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::TimedOut => "timed_out",
            State::Interrupted => "interrupted",
            State::NotStarted => "not_started",
        }
    }
}

/// Throughput of one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Throughput {
    /// Unit (`img/s`, `samples/s`, `it/s`, or `metric` for a manifest regex).
    pub unit: String,
    /// Mean of the samples (the first left out when there are three or more).
    pub mean: f64,
    /// Latest sample.
    pub last: f64,
    /// Largest sample.
    pub max: f64,
    /// Samples seen.
    pub count: u64,
    /// Kept samples: [seconds since the pack started, value].
    pub samples: Vec<(f64, f64)>,
    /// Work integrated from all samples (rate x time since the previous sample), in the
    /// unit's numerator (images for img/s). 0 with fewer than two samples.
    #[serde(default)]
    pub work: f64,
}

/// One finished epoch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Epoch {
    /// Epoch number as printed.
    pub epoch: u64,
    /// Seconds it took.
    pub seconds: f64,
}

/// One run in the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// Name.
    pub name: String,
    /// Position in the manifest (`COLLOC_RUN_INDEX`).
    pub index: usize,
    /// Program and arguments.
    pub command: Vec<String>,
    /// How it ended.
    pub state: State,
    /// Exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Why it could not start, if so.
    pub error: Option<String>,
    /// Start (RFC 3339, UTC).
    pub start: Option<String>,
    /// End (RFC 3339, UTC).
    pub end: Option<String>,
    /// Start, seconds since the pack started.
    pub start_s: Option<f64>,
    /// End, seconds since the pack started.
    pub end_s: Option<f64>,
    /// Wall seconds of its last attempt.
    pub wall_s: Option<f64>,
    /// Slot it ran in.
    pub slot: Option<usize>,
    /// Its CUDA device (`CUDA_VISIBLE_DEVICES`), if any.
    pub device: Option<String>,
    /// Attempts made (more than 1 after CUDA out-of-memory retries).
    pub attempts: u32,
    /// Its output showed a CUDA out-of-memory error.
    pub oom: bool,
    /// Log file (stdout and stderr).
    pub log: Option<String>,
    /// Throughput from its output.
    pub throughput: Option<Throughput>,
    /// Epochs seen in its output.
    pub epochs: Vec<Epoch>,
    /// GPU figures (null without NVML).
    pub gpu: Option<RunGpu>,
    /// Its throughput alone on the GPU, where known.
    pub solo_throughput: Option<f64>,
}

/// The pack as a whole.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Runs in the manifest.
    pub runs: usize,
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
    /// Most runs that ran at once.
    pub max_concurrent: usize,
    /// First start to last end, seconds.
    pub makespan_s: f64,
    /// Mean aggregate throughput over the makespan: sum of (throughput x wall) / makespan.
    pub aggregate_throughput: Option<f64>,
    /// Its unit.
    pub throughput_unit: Option<String>,
    /// Estimated time to run the same work one run after another, seconds.
    pub sequential_s: Option<f64>,
    /// sequential_s / makespan_s.
    pub speedup: Option<f64>,
    /// Where the solo figures came from.
    pub solo_source: Option<String>,
}

/// Slot of the layout.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlotRecord {
    /// Index.
    pub index: usize,
    /// CUDA device, if any.
    pub device: Option<String>,
}

/// `colloc-report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// colloc's version.
    pub colloc_version: String,
    /// Mode (normalized).
    pub mode: String,
    /// `job` (colloc job), `own` (colloc set the GPU up), `plain` (no GPU).
    pub source: String,
    /// `SLURM_JOB_ID`, if any.
    pub job_id: Option<String>,
    /// The slots.
    pub slots: Vec<SlotRecord>,
    /// Start (RFC 3339).
    pub started: String,
    /// End (RFC 3339).
    pub ended: String,
    /// Why colloc stopped early (signal, --fail-fast), if it did.
    pub stopped_by: Option<String>,
    /// GPU sampling interval, seconds.
    pub interval_s: f64,
    /// The figures of the whole pack.
    pub summary: Summary,
    /// Per GPU (null without NVML).
    pub gpus: Option<Vec<GpuTotal>>,
    /// The runs, in manifest order.
    pub runs: Vec<RunRecord>,
}

/// Solo throughput figures by run name, plus a fallback for runs not in the baseline.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Solo {
    /// By name.
    pub by_name: HashMap<String, f64>,
    /// For any other run.
    pub any: Option<f64>,
    /// Unit of the figures.
    pub unit: Option<String>,
    /// Description for the report.
    pub source: String,
}

impl Solo {
    /// The solo figure for a run.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.by_name.get(name).copied().or(self.any)
    }
}

/// Solo figures from an earlier report: its runs' `solo_throughput`, or their throughput
/// when that report ran one run at a time.
pub fn solo_from_report(path: &Path) -> Result<Solo, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read baseline report {}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("baseline report {} is not JSON: {e}", path.display()))?;
    if v.get("schema").and_then(|s| s.as_u64()) != Some(u64::from(SCHEMA)) {
        return Err(format!(
            "baseline report {} is not a colloc report with \"schema\": {SCHEMA}",
            path.display()
        ));
    }
    let r: Report = serde_json::from_value(v)
        .map_err(|e| format!("baseline report {}: {e}", path.display()))?;
    let alone = r.summary.max_concurrent <= 1;
    let mut s = Solo {
        source: format!("baseline {}", path.display()),
        ..Solo::default()
    };
    for run in &r.runs {
        let fig = run.solo_throughput.or_else(|| {
            alone
                .then(|| run.throughput.as_ref().map(|t| t.mean))
                .flatten()
        });
        if let (Some(f), Some(t)) = (fig, &run.throughput) {
            s.unit.get_or_insert_with(|| t.unit.clone());
            s.by_name.insert(run.name.clone(), f);
        }
    }
    if s.by_name.is_empty() {
        return Err(format!(
            "baseline report {} has no solo figures: make it with -j 1 or --solo-baseline",
            path.display()
        ));
    }
    s.any = Some(s.by_name.values().sum::<f64>() / s.by_name.len() as f64);
    Ok(s)
}

/// Fill in the pack's figures from the run records.
pub fn summarize(
    runs: &mut [RunRecord],
    makespan_s: f64,
    max_concurrent: usize,
    solo: Option<&Solo>,
) -> Summary {
    let count = |s: State| runs.iter().filter(|r| r.state == s).count();
    let mut sum = Summary {
        runs: runs.len(),
        succeeded: count(State::Succeeded),
        failed: count(State::Failed),
        timed_out: count(State::TimedOut),
        interrupted: count(State::Interrupted),
        not_started: count(State::NotStarted),
        max_concurrent,
        makespan_s,
        aggregate_throughput: None,
        throughput_unit: None,
        sequential_s: None,
        speedup: None,
        solo_source: None,
    };
    // The most common unit among runs with throughput is the pack's unit.
    let mut units: HashMap<&str, usize> = HashMap::new();
    for r in runs.iter() {
        if let Some(t) = &r.throughput {
            *units.entry(t.unit.as_str()).or_default() += 1;
        }
    }
    let Some(unit) = units
        .into_iter()
        .max_by_key(|&(u, n)| (n, std::cmp::Reverse(u)))
        .map(|(u, _)| u.to_string())
    else {
        return sum;
    };
    // Work per run from its samples; start-up before its first sample did none. With
    // fewer than two samples there is no interval: mean rate x wall time instead.
    let work_of = |r: &RunRecord| -> Option<(f64, f64)> {
        let t = r.throughput.as_ref().filter(|t| t.unit == unit)?;
        let wall = r.wall_s?;
        if t.count >= 2 && t.work > 0.0 {
            let startup = match (t.samples.first(), r.start_s) {
                (Some(&(first, _)), Some(start)) => (first - start).max(0.0),
                _ => 0.0,
            };
            Some((t.work, startup))
        } else {
            Some((t.mean * wall, 0.0))
        }
    };
    let with_tp: Vec<(f64, f64)> = runs.iter().filter_map(work_of).collect();
    if makespan_s > 0.0 && !with_tp.is_empty() {
        sum.aggregate_throughput = Some(with_tp.iter().map(|(w, _)| w).sum::<f64>() / makespan_s);
    }
    if let Some(solo) = solo.filter(|s| s.unit.as_deref().is_none_or(|u| u == unit)) {
        for r in runs.iter_mut() {
            r.solo_throughput = r.solo_throughput.or_else(|| solo.get(&r.name));
        }
        // Every run that ran needs a throughput and a solo figure for the estimate.
        let mut seq = 0.0;
        let mut complete = true;
        // One after another: each run's work at its solo rate, plus its start-up.
        for r in runs.iter().filter(|r| r.wall_s.is_some()) {
            match (work_of(r), r.solo_throughput) {
                (Some((work, startup)), Some(s)) if s > 0.0 => seq += work / s + startup,
                _ => complete = false,
            }
        }
        if complete && seq > 0.0 && makespan_s > 0.0 {
            sum.sequential_s = Some(seq);
            sum.speedup = Some(seq / makespan_s);
            sum.solo_source = Some(solo.source.clone());
        }
    }
    sum.throughput_unit = Some(unit);
    sum
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn f2(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_default()
}

/// `colloc-runs.csv`: one row per run.
pub fn csv(r: &Report) -> String {
    let mut out = String::from(
        "name,index,state,exit_code,signal,slot,device,start,end,wall_s,attempts,throughput,throughput_unit,samples,solo_throughput,epochs,mean_epoch_s,peak_gpu_memory_mib,mean_util_percent,mean_gpu_util_percent,gpu_energy_j,log\n",
    );
    for run in &r.runs {
        let tp = run.throughput.as_ref();
        let gpu = run.gpu.as_ref();
        let mean_epoch = (!run.epochs.is_empty())
            .then(|| run.epochs.iter().map(|e| e.seconds).sum::<f64>() / run.epochs.len() as f64);
        let row = [
            run.name.clone(),
            run.index.to_string(),
            run.state.as_str().to_string(),
            opt(run.exit_code),
            opt(run.signal),
            opt(run.slot),
            opt(run.device.clone()),
            opt(run.start.clone()),
            opt(run.end.clone()),
            f2(run.wall_s),
            run.attempts.to_string(),
            f2(tp.map(|t| t.mean)),
            opt(tp.map(|t| t.unit.clone())),
            opt(tp.map(|t| t.count)),
            f2(run.solo_throughput),
            run.epochs.len().to_string(),
            f2(mean_epoch),
            opt(gpu
                .and_then(|g| g.peak_memory_bytes)
                .map(|b| b / (1024 * 1024))),
            f2(gpu.and_then(|g| g.mean_util_percent)),
            f2(gpu.and_then(|g| g.mean_gpu_util_percent)),
            f2(gpu.and_then(|g| g.gpu_energy_j)),
            opt(run.log.clone()),
        ];
        let row: Vec<String> = row.iter().map(|f| csv_field(f)).collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// The summary table printed at the end.
pub fn table(r: &Report) -> String {
    let s = &r.summary;
    let unit = s
        .throughput_unit
        .clone()
        .unwrap_or_else(|| "throughput".into());
    let headers = [
        "run", "state", "exit", "slot", "wall s", &unit, "solo", "epoch s", "peak MiB", "util %",
        "energy J",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for run in &r.runs {
        let gpu = run.gpu.as_ref();
        let tp = run.throughput.as_ref();
        let mean_epoch = (!run.epochs.is_empty())
            .then(|| run.epochs.iter().map(|e| e.seconds).sum::<f64>() / run.epochs.len() as f64);
        rows.push(vec![
            run.name.clone(),
            run.state.as_str().to_string(),
            match (run.exit_code, run.signal) {
                (Some(c), _) => c.to_string(),
                (None, Some(sig)) => format!("sig{sig}"),
                _ => "-".into(),
            },
            run.slot
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
            run.wall_s
                .map(|w| format!("{w:.1}"))
                .unwrap_or_else(|| "-".into()),
            tp.map(|t| {
                if t.unit == unit {
                    format!("{:.1}", t.mean)
                } else {
                    format!("{:.1} {}", t.mean, t.unit)
                }
            })
            .unwrap_or_else(|| "-".into()),
            run.solo_throughput
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into()),
            mean_epoch
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into()),
            gpu.and_then(|g| g.peak_memory_bytes)
                .map(|b| (b / (1024 * 1024)).to_string())
                .unwrap_or_else(|| "-".into()),
            gpu.and_then(|g| g.mean_util_percent.or(g.mean_gpu_util_percent))
                .map(|v| format!("{v:.0}"))
                .unwrap_or_else(|| "-".into()),
            gpu.and_then(|g| g.gpu_energy_j)
                .map(|v| format!("{v:.0}"))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let fmt_row = |out: &mut String, cells: &[String]| {
        let line: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, &w))| {
                let pad = w.saturating_sub(c.chars().count());
                if i < 2 {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    };
    fmt_row(
        &mut out,
        &headers.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
    );
    for row in &rows {
        fmt_row(&mut out, row);
    }
    let _ = writeln!(
        out,
        "{} runs: {} succeeded, {} failed, {} timed out, {} interrupted, {} not started; {} slots ({}), at most {} at once",
        s.runs, s.succeeded, s.failed, s.timed_out, s.interrupted, s.not_started, r.slots.len(), r.mode, s.max_concurrent
    );
    let _ = write!(out, "makespan {:.1} s", s.makespan_s);
    if let (Some(a), Some(u)) = (s.aggregate_throughput, &s.throughput_unit) {
        let _ = write!(out, "; aggregate throughput {a:.1} {u}");
    }
    match (s.speedup, s.sequential_s) {
        (Some(x), Some(seq)) => {
            let _ = write!(
                out,
                "; speed-up {x:.2}x against one after another (est. {seq:.1} s, solo figures from {})",
                s.solo_source.as_deref().unwrap_or("?")
            );
        }
        _ => out.push_str(
            "; speed-up unknown (no solo figures: use --solo-baseline or --baseline REPORT)",
        ),
    }
    out.push('\n');
    if let Some(gpus) = &r.gpus {
        for g in gpus {
            let _ = writeln!(
                out,
                "GPU {} ({}): energy {}, mean utilization {}",
                g.uuid,
                g.name,
                g.energy_j
                    .map(|e| format!("{e:.0} J"))
                    .unwrap_or_else(|| "n/a".into()),
                g.mean_util_percent
                    .map(|u| format!("{u:.0} %"))
                    .unwrap_or_else(|| "n/a".into()),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(name: &str, tp: Option<f64>, wall: Option<f64>) -> RunRecord {
        RunRecord {
            name: name.into(),
            index: 0,
            command: vec!["x".into()],
            state: if wall.is_some() {
                State::Succeeded
            } else {
                State::NotStarted
            },
            exit_code: wall.map(|_| 0),
            signal: None,
            error: None,
            start: None,
            end: None,
            start_s: None,
            end_s: None,
            wall_s: wall,
            slot: Some(0),
            device: None,
            attempts: 1,
            oom: false,
            log: None,
            throughput: tp.map(|m| Throughput {
                unit: "img/s".into(),
                mean: m,
                last: m,
                max: m,
                count: 3,
                samples: vec![],
                work: 0.0,
            }),
            epochs: vec![],
            gpu: None,
            solo_throughput: None,
        }
    }

    #[test]
    fn aggregate_and_speedup() {
        // two runs side by side for 10 s at 60 img/s each; alone each would do 100 img/s
        let mut runs = vec![
            rec("a", Some(60.0), Some(10.0)),
            rec("b", Some(60.0), Some(10.0)),
        ];
        let solo = Solo {
            any: Some(100.0),
            unit: Some("img/s".into()),
            source: "test".into(),
            ..Solo::default()
        };
        let s = summarize(&mut runs, 10.0, 2, Some(&solo));
        assert_eq!(s.aggregate_throughput, Some(120.0));
        assert_eq!(s.sequential_s, Some(12.0));
        assert!((s.speedup.unwrap() - 1.2).abs() < 1e-9);
        assert_eq!(runs[0].solo_throughput, Some(100.0));
        // a run without throughput makes the speed-up unknown, not wrong
        let mut runs = vec![rec("a", Some(60.0), Some(10.0)), rec("b", None, Some(10.0))];
        let s = summarize(&mut runs, 10.0, 2, Some(&solo));
        assert_eq!(s.speedup, None);
        assert_eq!(s.aggregate_throughput, Some(60.0));
    }

    #[test]
    fn start_up_is_not_counted_as_work() {
        // 60 s run, 20 s of start-up, then 100 img/s every second: 4,000 images, not 6,000.
        let mut r = rec("a", Some(100.0), Some(60.0));
        r.start_s = Some(0.0);
        let t = r.throughput.as_mut().unwrap();
        t.samples = (20..=60).map(|s| (f64::from(s), 100.0)).collect();
        t.count = 41;
        t.work = 4000.0;
        let solo = Solo {
            any: Some(100.0),
            unit: Some("img/s".into()),
            source: "test".into(),
            ..Solo::default()
        };
        let mut runs = vec![r];
        let s = summarize(&mut runs, 60.0, 1, Some(&solo));
        assert!((s.aggregate_throughput.unwrap() - 4000.0 / 60.0).abs() < 1e-9);
        // alone: 40 s of work plus the same 20 s of start-up
        assert_eq!(s.sequential_s, Some(60.0));
    }

    #[test]
    fn csv_quotes() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
