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

use colloc_core::gpu::GpuInfo;
use serde::{Deserialize, Serialize};

use super::analysis::gib;
use super::answer::{Candidate, Recommendation, Verdict, AS_GOOD};
use super::compare::Comparison;
use super::host::Host;
use super::stats::{Obs, Ratio, Spread};
use crate::export::table::{csv_num, csv_opt, csv_text, dash_or as opt, Table};

/// A `gpu` record of an older report that does not read as [`BenchGpu`] is none, not a
/// report that cannot be read.
fn gpu_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<BenchGpu>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.and_then(|v| serde_json::from_value(v).ok()))
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
    /// ([`crate::engine::gpu::bench_legend`]).
    pub peak_memory_bytes: Option<u64>,
    /// Each copy's peak memory, bytes (empty where NVML was not read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy_peak_memory_bytes: Vec<Option<u64>>,
    /// Most memory the MPS server held meanwhile (no copy's), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps_server_bytes: Option<u64>,
    /// Energy of the whole GPU in the window, joules.
    pub energy_j: Option<f64>,
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

/// `x ± u` with `d` decimals, or `x` where `u` is unknown.
pub fn pm(x: f64, u: Option<f64>, d: usize) -> String {
    match u {
        Some(u) => format!("{x:.d$} ± {u:.d$}"),
        None => format!("{x:.d$}"),
    }
}

/// A ratio: `4.00x ± 0.12`, or `4.00x`.
pub fn times(x: f64, u: Option<f64>) -> String {
    match u {
        Some(u) => format!("{x:.2}x ± {u:.2}"),
        None => format!("{x:.2}x"),
    }
}

/// `x` with two decimals, or as many more (up to six) as it takes to print a number
/// below `limit`: 1.0953 against 1.10 reads "1.095", not "1.10".
fn below(x: f64, limit: f64) -> String {
    (2..=6)
        .map(|d| format!("{x:.d$}"))
        .find(|s| s.parse::<f64>().is_ok_and(|v| v < limit))
        .unwrap_or_else(|| format!("{x}"))
}

pub use super::cell::cell_name;

fn copies(n: usize, mode: &str) -> String {
    format!("{n} cop{} under {mode}", if n == 1 { "y" } else { "ies" })
}

/// The recommendation sentence. With a reference it leads with the fraction of the
/// reference (the figure that repeats from one machine to the next), then the ratio to
/// solo, flagged where solo moves with the host (`solo_moves`: the note says so).
pub fn recommendation_text(
    r: &Recommendation,
    min_gain: f64,
    unit: &str,
    vs_reference: Option<(f64, Option<f64>)>,
    solo_moves: bool,
) -> String {
    let ratio = times(r.ratio.value, r.ratio.u);
    let solo_flag = if solo_moves {
        "; solo moves with the host: see its note"
    } else {
        ""
    };
    let c = &r.chosen;
    match r.verdict {
        Verdict::Pays => {
            let mut s = format!("recommendation: run {}: ", copies(c.n, &c.mode));
            match vs_reference {
                Some((f, u)) => s.push_str(&format!(
                    "{} of the reference, {ratio} solo ({} {unit}{solo_flag})",
                    pm(f, u, 2),
                    pm(c.aggregate.mean, c.aggregate.u, 1)
                )),
                None => s.push_str(&format!(
                    "{ratio} the solo aggregate throughput ({} {unit}{solo_flag})",
                    pm(c.aggregate.mean, c.aggregate.u, 1)
                )),
            }
            if r.margin >= 0.0 {
                s.push_str(&format!(
                    "; margin: its low end {:.2}x clears --min-gain {min_gain:.2} by {:.2}",
                    r.ratio.lo(),
                    r.ratio.lo() - min_gain
                ));
            } else if let Some(o) = &r.cleared_by {
                s.push_str(&format!(
                    "; its low end {:.2}x is within the noise of --min-gain {min_gain:.2}, but {}'s clears it: collocation pays, and {} is within {:.0} % of the best",
                    r.ratio.lo(),
                    cell_name(&o.mode, o.n),
                    cell_name(&c.mode, c.n),
                    AS_GOOD * 100.0
                ));
            }
            let above = r.best.figure() / c.figure() - 1.0;
            if above >= 0.0005 {
                s.push_str(&format!(
                    "; the best, {} ({:.1}), is {:.1} % above it (within {:.0} %: as good)",
                    cell_name(&r.best.mode, r.best.n),
                    r.best.figure(),
                    above * 100.0,
                    AS_GOOD * 100.0
                ));
            }
            if !r.as_good.is_empty() {
                let eq: Vec<String> = r
                    .as_good
                    .iter()
                    .map(|e| format!("{} ({:.1})", cell_name(&e.mode, e.n), e.figure()))
                    .collect();
                s.push_str(&format!(
                    "; as good (within {:.0} % of the best): {} ({} would gain too little to count)",
                    AS_GOOD * 100.0,
                    eq.join(", "),
                    if r.as_good.iter().all(|e| e.n > c.n) {
                        "more copies"
                    } else if r.as_good.iter().all(|e| e.n == c.n) {
                        "another mode"
                    } else {
                        "more copies or another mode"
                    }
                ));
            }
            s
        }
        Verdict::OneAtATime => format!(
            "recommendation: collocation does not pay: no collocated configuration beat solo (best {}: {ratio}{solo_flag}); run one at a time",
            cell_name(&c.mode, c.n)
        ),
        Verdict::BelowMinGain => format!(
            "recommendation: collocation does not pay: the best, {}, gives only {}x solo (< {min_gain:.2}x{solo_flag}); run one at a time",
            copies(c.n, &c.mode),
            below(r.ratio.value, min_gain)
        ),
        Verdict::WithinNoise => format!(
            "recommendation: collocation does not pay beyond the noise: {} gives {ratio} solo (its low end {:.2}x{solo_flag}), and no collocated configuration's low end clears --min-gain {min_gain:.2}; run one at a time (a longer --duration or more --repeat narrows the noise)",
            copies(c.n, &c.mode),
            r.ratio.lo()
        ),
    }
}

/// Why the answer does not rest on `w`, a configuration whose repeats stayed wide.
pub fn wide_text(w: &Candidate, r: &Recommendation, unit: &str) -> String {
    let Some(wide) = w.wide else {
        return String::new();
    };
    let a = &w.aggregate;
    let head = format!(
        "wide: {} stayed wide after {} runs ({:.1} to {:.1} {unit}: ± {:.1} % between its repeats, beyond max({:.0} x the other cells' median ± {:.1} %, {:.0} %))",
        cell_name(&w.mode, w.n),
        a.n,
        a.min,
        a.max,
        wide.spread * 100.0,
        super::answer::WIDE_FACTOR,
        wide.others * 100.0,
        super::answer::WIDE_FLOOR * 100.0
    );
    let best = &r.best;
    let line = best.figure() - AS_GOOD * best.figure().abs();
    let why = if w.mode == "reference" {
        "the fractions of the reference carry its uncertainty; the choice of configuration does not depend on it".to_string()
    } else if w.mode == r.chosen.mode && w.n == r.chosen.n {
        format!(
            "it is recommended even judged by the low end of its interval ({:.1}), so its noise does not carry the answer",
            a.lo()
        )
    } else if a.hi() < line {
        format!(
            "even its high end ({:.1}) is more than {:.0} % below the best, {} ({:.1}): the answer does not rest on it",
            a.hi(),
            AS_GOOD * 100.0,
            cell_name(&best.mode, best.n),
            best.figure()
        )
    } else {
        format!(
            "it was judged by the low end of its interval ({:.1}), not its mean ({:.1}), so its noise could not pull the answer its way; more --repeat or a longer --duration may settle it",
            a.lo(),
            a.mean
        )
    };
    format!("{head}: {why}")
}

/// Seconds as `25 s`, `3m 10s`.
pub fn secs(s: f64) -> String {
    if s < 100.0 {
        format!("{s:.0} s")
    } else {
        let s = s.round() as u64;
        format!("{}m {:02}s", s / 60, s % 60)
    }
}

/// The table printed at the end, then the lines about it.
pub fn table(report: &Report) -> String {
    let has_ref = report.reference.is_some() || report.reference_command.is_some();
    let mut headers = vec![
        "mode".to_string(),
        "N".into(),
        format!("aggregate {}", report.unit),
        "vs solo".into(),
    ];
    let mut right = vec![false, false, true, true];
    if has_ref {
        headers.push("vs ref".into());
        right.push(true);
    }
    headers.extend(
        [
            "slowdown mean/max",
            "peak memory",
            "J/unit",
            "runs",
            "time",
            "note",
        ]
        .map(String::from),
    );
    right.extend([true, true, true, true, true, false]);
    let mut t = Table::new(headers, right);
    if let Some(w) = &report.warmup_run {
        let mut cells = vec![
            "warm-up".to_string(),
            "1".into(),
            format!("{:.1}", w.aggregate),
            "-".into(),
        ];
        if has_ref {
            cells.push("-".into());
        }
        cells.extend([
            "-".to_string(),
            w.peak_memory_bytes.map_or_else(|| "-".into(), gib),
            "-".into(),
            "1".into(),
            secs(w.wall_s),
            "discarded (warms up the GPU and the workload)".into(),
        ]);
        t.row(cells);
    }
    let mut previous: Option<(&str, &str)> = None;
    for r in &report.results {
        let same = matches!(
            (previous, &r.reason),
            (Some((m, why)), Some(w)) if m == r.mode && why == w
        );
        previous = r.reason.as_deref().map(|w| (r.mode.as_str(), w));
        let mut note = match (&r.status, &r.reason) {
            (Status::Skipped, Some(_)) if same => "skipped (as above)".into(),
            (Status::Measured, _) => String::new(),
            (Status::Skipped, Some(why)) => format!("skipped: {why}"),
            (Status::Failed, Some(why)) => format!("failed: {why}"),
            (s, None) => format!("{s:?}").to_lowercase(),
        };
        let mut add = |s: String| {
            if !note.is_empty() {
                note.push_str("; ");
            }
            note.push_str(&s);
        };
        if let Some(l) = &r.layout {
            add(format!("layout {l}"));
        }
        if let Some(rise) = r.rise {
            add(format!("{:+.0} % over the previous count", rise * 100.0));
        }
        if r.baseline_problem {
            add("baseline problem: each copy faster than solo".into());
        }
        if !r.failures.is_empty() {
            add(format!("{} repeat(s) failed", r.failures.len()));
        }
        let mut cells = vec![
            r.mode.clone(),
            r.n.to_string(),
            opt(r.aggregate, |v| pm(v, r.aggregate_u, 1)),
            opt(r.vs_solo, |v| times(v, r.vs_solo_u)),
        ];
        if has_ref {
            cells.push(opt(r.vs_reference, |v| pm(v, r.vs_reference_u, 2)));
        }
        cells.extend([
            match (r.slowdown_mean, r.slowdown_max) {
                (Some(a), Some(b)) => format!("{a:.2}x / {b:.2}x"),
                _ => "-".into(),
            },
            r.peak_memory_bytes.map_or_else(|| "-".into(), gib),
            opt(r.energy_per_sample_j, |v| format!("{v:.4}")),
            r.repeats.to_string(),
            if r.wall_s > 0.0 {
                secs(r.wall_s)
            } else {
                "-".into()
            },
            note,
        ]);
        t.row(cells);
    }
    let mut out = t.render();
    let line = |out: &mut String, s: &str| {
        out.push_str(s);
        out.push('\n');
    };
    line(&mut out, &format!("host: {}", report.host.describe()));
    if report.gpu.is_some() {
        let measured = report
            .results
            .iter()
            .flat_map(|r| r.measurements.iter().map(move |m| (r, m)));
        let mps_seen = measured
            .clone()
            .any(|(r, _)| r.mode.starts_with("mps") && r.status == Status::Measured);
        let server = measured.filter_map(|(_, m)| m.mps_server_bytes).max();
        line(
            &mut out,
            &crate::engine::gpu::bench_legend(mps_seen, server),
        );
    }
    if let (Some(solo), Some(row)) = (report.solo, report.row("solo", 1)) {
        let spread = match (row.aggregate_min, row.aggregate_max) {
            (Some(lo), Some(hi)) if row.repeats > 1 => format!(
                "; min {lo:.1}, max {hi:.1}: {:.1} % apart",
                (hi - lo) / solo * 100.0
            ),
            _ => String::new(),
        };
        line(
            &mut out,
            &format!(
                "solo: {} {} over {} run(s){spread}",
                pm(solo, report.solo_u, 1),
                report.unit,
                row.repeats
            ),
        );
    }
    if let Some(rf) = report.reference {
        line(
            &mut out,
            &format!(
                "reference (one process, {}): {} {}",
                report
                    .reference_command
                    .as_ref()
                    .map(|c| c.join(" "))
                    .unwrap_or_default(),
                pm(rf, report.reference_u, 1),
                report.unit
            ),
        );
    }
    if let Some(m) = &report.mps_limit {
        line(&mut out, &m.text);
    }
    for n in &report.notes {
        line(&mut out, &format!("note: {n}"));
    }
    if let Some(b) = report.budget_s {
        let mut s = format!(
            "budget {}: the benchmark took {}",
            secs(b),
            secs(report.wall_s)
        );
        if report.skipped.is_empty() {
            s.push_str("; nothing was skipped");
        } else {
            s.push_str(&format!("; skipped to fit: {}", report.skipped.join("; ")));
        }
        line(&mut out, &s);
    }
    if let Some(r) = &report.recommendation {
        line(&mut out, &r.text);
        for w in &r.wide {
            line(&mut out, w);
        }
    } else if !report
        .results
        .iter()
        .any(|r| r.status == Status::Measured && r.mode != "reference" && r.n > 1)
    {
        line(
            &mut out,
            "recommendation: none: no collocated configuration was measured (see what was skipped; a larger --budget measures them)",
        );
    }
    if let Some(c) = &report.comparison {
        out.push_str(&c.text);
    }
    out
}

/// One CSV row per configuration.
///
/// # Errors
/// The CSV writer failed.
pub fn csv(report: &Report) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "schema",
        "mode",
        "n",
        "status",
        "repeats",
        "aggregate",
        "aggregate_u",
        "aggregate_sd",
        "aggregate_min",
        "aggregate_max",
        "unit",
        "vs_solo",
        "vs_solo_u",
        "vs_reference",
        "vs_reference_u",
        "slowdown_mean",
        "slowdown_max",
        "baseline_problem",
        "peak_memory_bytes",
        "energy_j",
        "energy_per_sample_j",
        "wall_s",
        "layout",
        "reason",
    ])?;
    let f = |v: Option<f64>| csv_num(v, 6);
    for r in &report.results {
        w.write_record([
            SCHEMA.to_string(),
            csv_text(&r.mode),
            r.n.to_string(),
            format!("{:?}", r.status).to_lowercase(),
            r.repeats.to_string(),
            f(r.aggregate),
            f(r.aggregate_u),
            f(r.aggregate_sd),
            f(r.aggregate_min),
            f(r.aggregate_max),
            csv_text(&report.unit),
            f(r.vs_solo),
            f(r.vs_solo_u),
            f(r.vs_reference),
            f(r.vs_reference_u),
            f(r.slowdown_mean),
            f(r.slowdown_max),
            r.baseline_problem.to_string(),
            csv_opt(r.peak_memory_bytes),
            f(r.energy_j),
            f(r.energy_per_sample_j),
            format!("{:.3}", r.wall_s),
            csv_text(r.layout.as_deref().unwrap_or_default()),
            csv_text(r.reason.as_deref().unwrap_or_default()),
        ])?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

/// One CSV row per measurement, the warm-up run first, in the order they ran.
///
/// # Errors
/// The CSV writer failed.
pub fn measurements_csv(report: &Report) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "schema",
        "mode",
        "n",
        "round",
        "seq",
        "started_s",
        "wall_s",
        "window_start",
        "window_end",
        "aggregate",
        "se",
        "unit",
    ])?;
    let mut all: Vec<(&str, usize, &Measurement)> = Vec::new();
    if let Some(m) = &report.warmup_run {
        all.push(("warm-up", 1, m));
    }
    for r in &report.results {
        all.extend(r.measurements.iter().map(|m| (r.mode.as_str(), r.n, m)));
    }
    all.sort_by_key(|x| x.2.seq);
    for (mode, n, m) in all {
        w.write_record([
            SCHEMA.to_string(),
            mode.to_string(),
            n.to_string(),
            m.round.to_string(),
            m.seq.to_string(),
            format!("{:.3}", m.started_s),
            format!("{:.3}", m.wall_s),
            format!("{:.3}", m.window[0]),
            format!("{:.3}", m.window[1]),
            format!("{:.6}", m.aggregate),
            csv_num(m.se, 6),
            csv_text(&report.unit),
        ])?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn measurement(round: u32, seq: u32, aggregate: f64) -> Measurement {
        Measurement {
            round,
            seq,
            started_s: f64::from(seq) * 10.0,
            wall_s: 10.0,
            window: [1.0, 6.0],
            aggregate,
            se: Some(1.0),
            per_copy: vec![aggregate],
            peak_memory_bytes: Some(1 << 30),
            copy_peak_memory_bytes: vec![Some(1 << 30)],
            mps_server_bytes: None,
            energy_j: Some(aggregate * 5.0 * 0.01),
        }
    }

    pub(crate) fn report() -> Report {
        let mut solo = ConfigResult::new("solo", 1);
        solo.add(measurement(1, 1, 98.0), vec![]);
        solo.add(measurement(2, 3, 102.0), vec![]);
        solo.settle();
        solo.vs_solo = Some(1.0);
        Report {
            schema: SCHEMA,
            command: vec!["w".into()],
            reference_command: None,
            host: Host::default(),
            gpu: None,
            gpu_note: None,
            started_unix: 0.0,
            modes: vec!["mps".into()],
            counts: "auto".into(),
            repeat: 1,
            rounds: 1,
            duration_s: 1.0,
            warmup_s: 0.0,
            budget_s: None,
            min_gain: 1.1,
            metric: "m".into(),
            unit: "img/s".into(),
            solo: Some(100.0),
            solo_u: solo.aggregate_u,
            reference: None,
            reference_u: None,
            warmup_run: Some(measurement(0, 0, 80.0)),
            warmup_note: None,
            results: vec![
                solo,
                ConfigResult::skipped("mps", 7, "would not fit: a, b"),
                ConfigResult::skipped("mps", 8, "would not fit: a, b"),
            ],
            mps_limit: None,
            recommendation: None,
            notes: vec![],
            skipped: vec![],
            comparison: None,
            wall_s: 1.0,
        }
    }

    #[test]
    fn settle_gives_the_spread_means_and_energy_per_unit() {
        let r = report();
        let solo = &r.results[0];
        assert_eq!(solo.repeats, 2);
        assert_eq!(solo.aggregate, Some(100.0));
        assert_eq!(
            (solo.aggregate_min, solo.aggregate_max),
            (Some(98.0), Some(102.0))
        );
        assert!((solo.aggregate_u.unwrap() - 4.0).abs() < 1e-9, "{solo:?}");
        assert_eq!(solo.per_copy, vec![100.0]);
        assert!((solo.energy_per_sample_j.unwrap() - 0.01).abs() < 1e-12);
        assert_eq!(solo.wall_s, 20.0);
    }

    #[test]
    fn table_shows_spread_time_warm_up_and_reasons() {
        let t = table(&report());
        assert!(t.contains("100.0 ± 4.0"), "{t}");
        assert!(t.contains("1.00x") && t.contains("20 s"), "{t}");
        assert!(t.contains("warm-up") && t.contains("discarded"), "{t}");
        assert!(t.contains("skipped: would not fit: a, b"), "{t}");
        assert_eq!(t.matches("would not fit").count(), 1, "{t}");
        assert!(t.contains("skipped (as above)"), "{t}");
        // Only solo measured: no verdict, and the table says why.
        assert!(
            t.contains("recommendation: none: no collocated configuration was measured"),
            "{t}"
        );
        assert!(!t.contains("does not pay"), "{t}");
        assert!(
            t.contains("solo: 100.0 ± 4.0 img/s over 2 run(s); min 98.0, max 102.0: 4.0 % apart"),
            "{t}"
        );
    }

    #[test]
    fn csvs_carry_the_schema_spread_and_every_measurement() {
        let r = report();
        let c = String::from_utf8(csv(&r).unwrap()).unwrap();
        assert_eq!(c.lines().count(), 4);
        assert!(c
            .lines()
            .next()
            .unwrap()
            .contains("aggregate_u,aggregate_sd"));
        assert!(
            c.lines()
                .nth(1)
                .unwrap()
                .starts_with("3,solo,1,measured,2,100.000000,4.000000"),
            "{c}"
        );
        assert!(
            c.lines()
                .nth(2)
                .unwrap()
                .ends_with("\"would not fit: a, b\""),
            "{c}"
        );
        let m = String::from_utf8(measurements_csv(&r).unwrap()).unwrap();
        let rows: Vec<&str> = m.lines().collect();
        assert_eq!(rows.len(), 4, "{m}");
        assert!(rows[1].starts_with("3,warm-up,1,0,0,"), "{m}");
        assert!(rows[3].starts_with("3,solo,1,2,3,"), "{m}");
    }

    fn cand(mode: &str, n: usize, values: &[f64], se: f64) -> Candidate {
        let obs: Vec<Obs> = values
            .iter()
            .map(|&value| Obs {
                value,
                se: Some(se),
            })
            .collect();
        Candidate {
            mode: mode.into(),
            n,
            aggregate: Spread::of(&obs).unwrap(),
            wide: None,
        }
    }

    #[test]
    fn does_not_pay_never_prints_the_threshold_itself() {
        // Measured on the H200: ResNet-152 b128, 2 copies under MPS, 1.0970x solo.
        let solo = cand("solo", 1, &[1000.75], 0.0);
        let two = cand("mps", 2, &[1097.8], 0.0);
        let r = crate::bench::answer::recommend(&solo.aggregate, &[two], 1.1).unwrap();
        assert_eq!(r.verdict, Verdict::BelowMinGain);
        let t = recommendation_text(&r, 1.1, "img/s", None, false);
        assert!(t.contains("gives only 1.097x solo (< 1.10x)"), "{t}");
        assert_eq!(below(1.0999999, 1.1), "1.0999999");
        assert_eq!(below(0.9, 1.1), "0.90");
        let _ = Ratio {
            value: 1.0,
            u: None,
        };
    }

    /// The H200 call: the answer leads with the fraction of the reference, the
    /// ratio to solo second and flagged where solo moves with the host; the wide mps 4
    /// gets a line that says why the answer does not rest on it.
    #[test]
    fn the_answer_leads_with_the_fraction_of_the_reference_and_names_wide_cells() {
        use crate::bench::answer::{recommend, wide_cells};
        let solo = cand("solo", 1, &[13_315.0, 15_681.0, 14_498.0], 500.0);
        let mut all = vec![
            cand("mps", 4, &[49_710.0, 63_145.0], 300.0),
            cand("mps", 7, &[69_222.0, 69_714.0], 100.0),
            cand("mps", 10, &[65_400.0, 65_720.0], 100.0),
        ];
        let sp: Vec<Spread> = all.iter().map(|c| c.aggregate).collect();
        for (c, w) in all.iter_mut().zip(wide_cells(&sp)) {
            c.wide = w;
        }
        let r = recommend(&solo.aggregate, &all, 1.1).unwrap();
        let t = recommendation_text(&r, 1.1, "img/s", Some((0.722, Some(0.006))), true);
        assert!(
            t.starts_with(
                "recommendation: run 7 copies under mps: 0.72 ± 0.01 of the reference, 4.79x ± "
            ),
            "{t}"
        );
        assert!(
            t.contains(" solo (69468.0 ± 492.0 img/s; solo moves with the host: see its note)"),
            "{t}"
        );
        assert!(t.contains("margin: its low end"), "{t}");
        let w = wide_text(&r.wide[0], &r, "img/s");
        assert!(
            w.starts_with("wide: mps 4 stayed wide after 2 runs (49710.0 to 63145.0 img/s: ± 23.8 % between its repeats, beyond max(2 x the other cells' median ± 0.6 %, 3 %))"),
            "{w}"
        );
        // Its high end (69,862.5) reaches the best: judged by its low end.
        assert!(
            w.ends_with("judged by the low end of its interval (42992.5), not its mean (56427.5), so its noise could not pull the answer its way; more --repeat or a longer --duration may settle it"),
            "{w}"
        );
        // Without a reference: the ratio to solo leads, as before.
        let t = recommendation_text(&r, 1.1, "img/s", None, false);
        assert!(
            t.starts_with("recommendation: run 7 copies under mps: 4.79x ± "),
            "{t}"
        );
    }
}
