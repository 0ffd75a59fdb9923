//! What a benchmark found: per-configuration results with their spread, the
//! recommendation, and their table, JSON (`bench.json`, `"schema": 3`) and CSV
//! (`bench.csv`, one row per configuration; `bench-measurements.csv`, one row per
//! measurement) forms.
//!
//! Schema 3 (repeats and spread): every configuration keeps its `measurements` (round,
//! window, aggregate, its standard error, wall time); `aggregate` is their mean, with
//! `aggregate_sd`, `aggregate_min`, `aggregate_max` and `aggregate_u` (± 2 standard
//! errors, [`super::stats`]); `vs_solo_u`, `vs_reference` and `vs_reference_u`;
//! `baseline_problem`; `wall_s` (seconds its measurements ran). The report adds `host`,
//! `started_unix`, `repeat`, `counts`, `modes`, `reference_command`, `reference`,
//! `solo_u`, `warmup_run` (the discarded first run), `mps_limit`, `notes`, `skipped`,
//! `budget_s` and `comparison`; `window` moved into the measurements. Both CSVs carry
//! the schema in a column. The recommendation names `best`, the cells `as_good` as it
//! (mean within 5 %), the `wide` cells with why the answer does not rest on them, and
//! `vs_reference_u`; measurements of rounds after `repeat` re-measured wide cells.
//!
//! The text forms are in [`text`], the CSV forms in [`csv_files`].

use colloc_core::gpu::GpuInfo;
use serde::{Deserialize, Serialize};

pub use super::busy::BusySource;
use super::comparison::Comparison;
use super::host::Host;
use super::stats::{Obs, Ratio, Spread};

mod csv_files;
pub mod html;
#[cfg(any(test, feature = "test-support"))]
pub mod sample;
#[cfg(test)]
mod tests;
mod text;

pub use super::cell::cell_name;
pub use csv_files::{csv, measurements_csv};
pub use text::{gib, pm, recommendation_text, secs, table, times, wide_text};

/// A `gpu` record as a report of any schema holds it: one that reads as [`BenchGpu`], or
/// something else (an older or damaged record).
#[derive(Deserialize)]
#[serde(untagged)]
enum GpuRecord {
    Read(BenchGpu),
    Unread(serde::de::IgnoredAny),
}

/// A `gpu` record of an older report that does not read as [`BenchGpu`] is none, not a
/// report that cannot be read.
fn gpu_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<BenchGpu>, D::Error> {
    Ok(match Option::<GpuRecord>::deserialize(d)? {
        Some(GpuRecord::Read(g)) => Some(g),
        Some(GpuRecord::Unread(_)) | None => None,
    })
}

/// Report format version of `bench.json`, `bench.csv` and `bench-measurements.csv`.
pub const SCHEMA: u32 = 3;

/// The GPU under test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchGpu {
    /// What NVML says about it.
    #[serde(flatten)]
    pub info: GpuInfo,
    /// Driver version.
    pub driver: Option<String>,
}

/// Outcome of one configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Ran and measured (at least once).
    Measured,
    /// Not run; `reason` says why.
    #[default]
    Skipped,
    /// Ran and failed every time; `reason` says how.
    Failed,
}

/// One measurement of a configuration. Read back (`--compare`) with every field an older
/// schema lacks at its default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Measurement {
    /// Round (1-based; the closing solo run has the number after the last round; 0 is
    /// the warm-up run).
    pub round: u32,
    /// Place in the benchmark's order of measurements (0 is the warm-up run).
    pub seq: u32,
    /// Seconds since the benchmark began when its copies started.
    pub started_s: f64,
    /// Seconds it took, from the start of its copies (or of its MIG layout) to their end.
    pub wall_s: f64,
    /// Its common steady-state window, seconds since the benchmark began.
    pub window: [f64; 2],
    /// Aggregate throughput in the window.
    pub aggregate: f64,
    /// Standard error of `aggregate` from the window's blocks, where it had enough
    /// samples.
    pub se: Option<f64>,
    /// Each copy's throughput in the window.
    pub per_copy: Vec<f64>,
    /// Peak GPU memory of the copies' own processes, each copy's peak summed, bytes
    /// ([`crate::telemetry::attempts::bench_legend`]).
    pub peak_memory_bytes: Option<u64>,
    /// Each copy's peak memory, bytes (empty where NVML was not read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy_peak_memory_bytes: Vec<Option<u64>>,
    /// Most memory the MPS server held meanwhile (no copy's), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps_server_bytes: Option<u64>,
    /// Energy of the whole GPU in the window, joules.
    pub energy_j: Option<f64>,
    /// How busy the copies kept the GPU's SMs, percent (GPM's SM activity over the
    /// window on Hopper and later, else their own processes' utilization where NVML
    /// reports it per process, else the whole GPU's: [`BusySource`]); what `--counts
    /// auto` starts from after the solo run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_busy_percent: Option<f64>,
    /// Where `sm_busy_percent` comes from; written where it is GPM (`"gpm"`), absent
    /// where it is utilization, as before GPM was read.
    #[serde(default, skip_serializing_if = "BusySource::unwritten")]
    pub sm_busy_source: Option<BusySource>,
    /// GPM's SM occupancy of the GPU over the window (active warps against the SMs'
    /// maximum), percent; Hopper and later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_occupancy_percent: Option<f64>,
}

impl Measurement {
    /// As an observation for the statistics.
    pub fn obs(&self) -> Obs {
        Obs {
            value: self.aggregate,
            se: self.se,
        }
    }
}

/// One configuration: a mode and a number of copies, over all its measurements.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigResult {
    /// `solo`, `reference`, `naive`, `mps`, `mps:N` (the thread-percentage limit) or `mig`.
    pub mode: String,
    /// Copies run at once.
    pub n: usize,
    /// What happened.
    pub status: Status,
    /// Why it was skipped or failed.
    pub reason: Option<String>,
    /// MIG layout used, e.g. `3g.71gbx2`.
    pub layout: Option<String>,
    /// Measurements taken.
    pub repeats: usize,
    /// Mean aggregate throughput of the measurements.
    pub aggregate: Option<f64>,
    /// Their sample standard deviation (two or more).
    pub aggregate_sd: Option<f64>,
    /// Smallest measurement.
    pub aggregate_min: Option<f64>,
    /// Largest measurement.
    pub aggregate_max: Option<f64>,
    /// Uncertainty of `aggregate`: 2 standard errors.
    pub aggregate_u: Option<f64>,
    /// Each copy's mean throughput.
    pub per_copy: Vec<f64>,
    /// `aggregate` relative to solo's.
    pub vs_solo: Option<f64>,
    /// Its uncertainty.
    pub vs_solo_u: Option<f64>,
    /// `aggregate` as a fraction of the reference command's.
    pub vs_reference: Option<f64>,
    /// Its uncertainty.
    pub vs_reference_u: Option<f64>,
    /// Mean per-run slowdown against solo (epoch time ratio).
    pub slowdown_mean: Option<f64>,
    /// Worst per-run slowdown against solo.
    pub slowdown_max: Option<f64>,
    /// Each copy ran faster than the solo run beyond the noise: the solo figure is
    /// suspect.
    pub baseline_problem: bool,
    /// `--counts auto`: how much the aggregate rose from the previous count (round 1).
    pub rise: Option<f64>,
    /// Why this count was tried (`--counts auto` chooses them from what it measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried: Option<String>,
    /// The configuration the recommendation names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recommended: bool,
    /// Peak GPU memory of any measurement (its copies' own processes, summed), bytes.
    pub peak_memory_bytes: Option<u64>,
    /// Mean GPU energy in the window, joules.
    pub energy_j: Option<f64>,
    /// GPU energy per unit of work in the windows, joules.
    pub energy_per_sample_j: Option<f64>,
    /// Seconds its measurements ran, together.
    pub wall_s: f64,
    /// Every measurement.
    pub measurements: Vec<Measurement>,
    /// Repeats that failed while others succeeded.
    pub failures: Vec<String>,
    /// The copies' log files.
    pub logs: Vec<String>,
}

impl ConfigResult {
    /// A configuration that was not run.
    pub fn skipped(mode: &str, n: usize, reason: impl Into<String>) -> Self {
        Self::empty(mode, n, Status::Skipped, Some(reason.into()))
    }

    /// A configuration not measured yet.
    pub fn new(mode: &str, n: usize) -> Self {
        Self::empty(mode, n, Status::Skipped, None)
    }

    fn empty(mode: &str, n: usize, status: Status, reason: Option<String>) -> Self {
        ConfigResult {
            mode: mode.into(),
            n,
            status,
            reason,
            layout: None,
            repeats: 0,
            aggregate: None,
            aggregate_sd: None,
            aggregate_min: None,
            aggregate_max: None,
            aggregate_u: None,
            per_copy: vec![],
            vs_solo: None,
            vs_solo_u: None,
            vs_reference: None,
            vs_reference_u: None,
            slowdown_mean: None,
            slowdown_max: None,
            baseline_problem: false,
            rise: None,
            tried: None,
            recommended: false,
            peak_memory_bytes: None,
            energy_j: None,
            energy_per_sample_j: None,
            wall_s: 0.0,
            measurements: vec![],
            failures: vec![],
            logs: vec![],
        }
    }

    /// Add a measurement.
    pub fn add(&mut self, m: Measurement, logs: Vec<String>) {
        self.wall_s += m.wall_s;
        self.measurements.push(m);
        self.logs.extend(logs);
        self.status = Status::Measured;
        self.reason = None;
    }

    /// Record a failed attempt at measuring it, in round `round`, after `wall` seconds.
    pub fn fail(&mut self, round: u32, why: String, wall: f64, logs: Vec<String>) {
        self.wall_s += wall;
        self.logs.extend(logs);
        if self.measurements.is_empty() {
            self.status = Status::Failed;
            self.reason = Some(why);
        } else {
            self.failures.push(format!("round {round}: {why}"));
        }
    }

    /// The spread of its measurements.
    pub fn spread(&self) -> Option<Spread> {
        let obs: Vec<Obs> = self.measurements.iter().map(Measurement::obs).collect();
        Spread::of(&obs)
    }

    /// Its observation in round `round`, if measured then.
    pub fn in_round(&self, round: u32) -> Option<Obs> {
        self.measurements
            .iter()
            .find(|m| m.round == round)
            .map(Measurement::obs)
    }

    /// Fill in the figures derived from the measurements: spread, per-copy means, peak
    /// memory, energy.
    pub fn settle(&mut self) {
        let Some(s) = self.spread() else { return };
        self.repeats = s.n;
        self.aggregate = Some(s.mean);
        self.aggregate_sd = s.sd;
        self.aggregate_min = Some(s.min);
        self.aggregate_max = Some(s.max);
        self.aggregate_u = s.u;
        let k = self
            .measurements
            .iter()
            .map(|m| m.per_copy.len())
            .max()
            .unwrap_or(0);
        self.per_copy = (0..k)
            .map(|i| {
                let v: Vec<f64> = self
                    .measurements
                    .iter()
                    .filter_map(|m| m.per_copy.get(i).copied())
                    .collect();
                v.iter().sum::<f64>() / v.len().max(1) as f64
            })
            .collect();
        self.peak_memory_bytes = self
            .measurements
            .iter()
            .filter_map(|m| m.peak_memory_bytes)
            .max();
        let energy: Vec<(f64, f64)> = self
            .measurements
            .iter()
            .filter_map(|m| {
                m.energy_j
                    .map(|j| (j, m.aggregate * (m.window[1] - m.window[0])))
            })
            .collect();
        if !energy.is_empty() {
            let j: f64 = energy.iter().map(|e| e.0).sum();
            let work: f64 = energy.iter().map(|e| e.1).sum();
            self.energy_j = Some(j / energy.len() as f64);
            self.energy_per_sample_j = (work > 0.0).then(|| j / work);
        }
    }

    /// Set `vs_solo` (and `vs_solo_u`) from a ratio.
    pub fn set_vs_solo(&mut self, r: Option<Ratio>) {
        self.vs_solo = r.map(|r| r.value);
        self.vs_solo_u = r.and_then(|r| r.u);
    }

    /// Set `vs_reference` from a ratio.
    pub fn set_vs_reference(&mut self, r: Option<Ratio>) {
        self.vs_reference = r.map(|r| r.value);
        self.vs_reference_u = r.and_then(|r| r.u);
    }
}

/// The recommendation as written to JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecommendationOut {
    /// Mode of the configuration the answer names (to run where `pays`; else the
    /// collocated one the rule would have chosen, and the answer is one at a time).
    pub mode: String,
    /// Its copies.
    pub n: usize,
    /// Its mean aggregate throughput.
    pub aggregate: f64,
    /// Its uncertainty.
    pub aggregate_u: Option<f64>,
    /// Relative to solo.
    pub vs_solo: f64,
    /// Its uncertainty.
    pub vs_solo_u: Option<f64>,
    /// As a fraction of the reference command.
    pub vs_reference: Option<f64>,
    /// Its uncertainty.
    pub vs_reference_u: Option<f64>,
    /// Whether collocation pays.
    pub pays: bool,
    /// Why: `pays`, `one_at_a_time`, `below_min_gain`, `within_noise`.
    pub verdict: String,
    /// How far the low end of `vs_solo` is above the larger of `--min-gain` and 1.
    pub margin: f64,
    /// The collocated configuration with the highest figure (its mean; the low end of
    /// its interval where its repeats stayed wide).
    pub best: String,
    /// The other collocated configurations as good as the best (figure within 5 %).
    pub as_good: Vec<String>,
    /// For each configuration whose repeats stayed wide: which, and why the answer
    /// does not rest on it (printed after the recommendation).
    pub wide: Vec<String>,
    /// The budget ended the search while the aggregate still rose: the answer is a
    /// lower bound, and this says so (printed first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_bound: Option<String>,
    /// The budget (seconds) that would let the search settle where it is a lower bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_budget_s: Option<f64>,
    /// The sentence printed.
    pub text: String,
}

/// MPS with the thread-percentage limit (`mps:N`) against unlimited MPS at the same N.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MpsLimit {
    /// Copies.
    pub n: usize,
    /// The limit each copy had, percent of the SMs.
    pub thread_percentage: u32,
    /// `mps:N` aggregate / unlimited aggregate.
    pub ratio: f64,
    /// Its uncertainty.
    pub ratio_u: Option<f64>,
    /// `limited`, `unlimited` or `neither` (within the noise or 5 % of each other).
    pub better: String,
    /// The sentence printed.
    pub text: String,
}

/// The whole benchmark.
///
/// `bench.json` is written from this and read back through it (`--compare`): every field
/// an older schema (1 to 3) lacks reads as its default, a `gpu` record that does not
/// read as one reads as none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Report {
    /// Format version.
    pub schema: u32,
    /// The workload.
    pub command: Vec<String>,
    /// The yardstick command (`--reference`).
    pub reference_command: Option<Vec<String>>,
    /// Where it ran.
    pub host: Host,
    /// The GPU, when NVML could be read.
    #[serde(deserialize_with = "gpu_or_none")]
    pub gpu: Option<BenchGpu>,
    /// Why there is no GPU information.
    pub gpu_note: Option<String>,
    /// Unix time the benchmark began (time zero of every window).
    pub started_unix: f64,
    /// Modes asked for.
    pub modes: Vec<String>,
    /// Counts asked for (`auto` or a list).
    pub counts: String,
    /// Measurements asked for per configuration.
    pub repeat: u32,
    /// Rounds measured in whole or part, then any rounds that measured wide cells
    /// again (their measurements carry the round numbers after `repeat`).
    pub rounds: u32,
    /// Measurement seconds per configuration after warm-up.
    pub duration_s: f64,
    /// Warm-up seconds.
    pub warmup_s: f64,
    /// The time budget, seconds.
    pub budget_s: Option<f64>,
    /// Least gain for collocation to pay.
    pub min_gain: f64,
    /// What was read as throughput.
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// Solo aggregate throughput (mean of its measurements).
    pub solo: Option<f64>,
    /// Its uncertainty.
    pub solo_u: Option<f64>,
    /// The reference command's throughput.
    pub reference: Option<f64>,
    /// Its uncertainty.
    pub reference_u: Option<f64>,
    /// The warm-up run: measured like solo and discarded.
    pub warmup_run: Option<Measurement>,
    /// Why the warm-up run gave no figure, where it did not.
    pub warmup_note: Option<String>,
    /// Every configuration, solo first.
    pub results: Vec<ConfigResult>,
    /// `mps:N` against unlimited MPS.
    pub mps_limit: Option<MpsLimit>,
    /// What colloc recommends.
    pub recommendation: Option<RecommendationOut>,
    /// Warnings about the figures (baseline problems, where `--counts auto` stopped).
    pub notes: Vec<String>,
    /// What the budget left out.
    pub skipped: Vec<String>,
    /// Comparison with an earlier report (`--compare`).
    pub comparison: Option<Comparison>,
    /// Seconds the benchmark took.
    pub wall_s: f64,
}

impl Report {
    /// The row of `mode` with `n` copies.
    pub fn row(&self, mode: &str, n: usize) -> Option<&ConfigResult> {
        self.results.iter().find(|r| r.mode == mode && r.n == n)
    }

    /// The row of `mode` with `n` copies, made (after the others) where missing.
    pub fn row_mut(&mut self, mode: &str, n: usize) -> &mut ConfigResult {
        match self.results.iter().position(|r| r.mode == mode && r.n == n) {
            Some(i) => &mut self.results[i],
            None => {
                self.results.push(ConfigResult::new(mode, n));
                self.results.last_mut().expect("just pushed")
            }
        }
    }
}
