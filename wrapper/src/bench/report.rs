//! What a benchmark found: per-configuration results, the recommendation, and their
//! table, JSON (`bench.json`, `"schema": 2`) and CSV (`bench.csv`) forms.
//!
//! Schema 2 (since the shared engine): `gpu` is colloc-core's GPU record (`mig_mode` replaces
//! `mig_enabled`) with `driver`; `unit` names the throughput's unit (from the workload's
//! line or `--metric`/`--unit`), used for every figure; `energy_per_sample_j` is per unit of
//! work (per image for img/s).

use colloc_core::gpu::GpuInfo;
use serde::Serialize;

use super::analysis::{gib, Recommendation};
use crate::export::table::Table;

/// Report format version of `bench.json`.
pub const SCHEMA: u32 = 2;

/// The GPU under test.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchGpu {
    /// What NVML says about it.
    #[serde(flatten)]
    pub info: GpuInfo,
    /// Driver version.
    pub driver: Option<String>,
}

/// Outcome of one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Ran and measured.
    Measured,
    /// Not run; `reason` says why.
    Skipped,
    /// Ran and failed; `reason` says how.
    Failed,
}

/// One configuration: a mode and a number of copies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigResult {
    /// `solo`, `naive`, `mps` or `mig`.
    pub mode: String,
    /// Copies run at once.
    pub n: usize,
    /// What happened.
    pub status: Status,
    /// Why it was skipped or failed.
    pub reason: Option<String>,
    /// MIG layout used, e.g. `3g.71gbx2`.
    pub layout: Option<String>,
    /// Common steady-state window, seconds since the benchmark began.
    pub window: Option<[f64; 2]>,
    /// Throughput of all copies together in the window (work over window length).
    pub aggregate: Option<f64>,
    /// Each copy's throughput in the window.
    pub per_copy: Vec<f64>,
    /// Aggregate throughput relative to solo.
    pub vs_solo: Option<f64>,
    /// Mean per-run slowdown against solo (epoch time ratio).
    pub slowdown_mean: Option<f64>,
    /// Worst per-run slowdown against solo.
    pub slowdown_max: Option<f64>,
    /// Peak GPU memory used by the copies (above what was in use before), bytes.
    pub peak_memory_bytes: Option<u64>,
    /// GPU energy in the window, joules.
    pub energy_j: Option<f64>,
    /// GPU energy per unit of work in the window, joules.
    pub energy_per_sample_j: Option<f64>,
    /// The copies' log files.
    pub logs: Vec<String>,
}

impl ConfigResult {
    /// A configuration that was not run.
    pub fn skipped(mode: &str, n: usize, reason: impl Into<String>) -> Self {
        Self::empty(mode, n, Status::Skipped, Some(reason.into()))
    }

    /// A configuration that ran and failed.
    pub fn failed(mode: &str, n: usize, reason: impl Into<String>, logs: Vec<String>) -> Self {
        let mut r = Self::empty(mode, n, Status::Failed, Some(reason.into()));
        r.logs = logs;
        r
    }

    fn empty(mode: &str, n: usize, status: Status, reason: Option<String>) -> Self {
        ConfigResult {
            mode: mode.into(),
            n,
            status,
            reason,
            layout: None,
            window: None,
            aggregate: None,
            per_copy: vec![],
            vs_solo: None,
            slowdown_mean: None,
            slowdown_max: None,
            peak_memory_bytes: None,
            energy_j: None,
            energy_per_sample_j: None,
            logs: vec![],
        }
    }
}

/// The recommendation as written to JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecommendationOut {
    /// Mode of the best configuration.
    pub mode: String,
    /// Copies of the best configuration.
    pub n: usize,
    /// Its aggregate throughput.
    pub aggregate: f64,
    /// Relative to solo.
    pub vs_solo: f64,
    /// Whether collocation pays.
    pub pays: bool,
    /// The sentence printed.
    pub text: String,
}

/// The whole benchmark.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Format version.
    pub schema: u32,
    /// The workload.
    pub command: Vec<String>,
    /// The GPU, when NVML could be read.
    pub gpu: Option<BenchGpu>,
    /// Why there is no GPU information.
    pub gpu_note: Option<String>,
    /// Measurement seconds per configuration after warm-up.
    pub duration_s: f64,
    /// Warm-up seconds.
    pub warmup_s: f64,
    /// What was read as throughput.
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// Solo aggregate throughput.
    pub solo: Option<f64>,
    /// Every configuration, solo first.
    pub results: Vec<ConfigResult>,
    /// What colloc recommends.
    pub recommendation: Option<RecommendationOut>,
    /// Seconds the benchmark took.
    pub wall_s: f64,
}

/// The recommendation sentence.
pub fn recommendation_text(r: &Recommendation, min_gain: f64, unit: &str) -> String {
    if r.pays {
        format!(
            "recommendation: run {} copies under {}: {:.2}x the solo aggregate throughput ({:.1} {unit})",
            r.best.n, r.best.mode, r.speedup, r.best.aggregate
        )
    } else if r.best.n > 1 {
        format!(
            "recommendation: collocation does not pay: the best, {} copies under {}, gives only {}x solo (< {:.2}x); run one at a time",
            r.best.n,
            r.best.mode,
            below(r.speedup, min_gain),
            min_gain
        )
    } else {
        format!(
            "recommendation: collocation does not pay: no collocated configuration beat solo (best {:.2}x); run one at a time",
            r.speedup
        )
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

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// The table printed at the end.
pub fn table(report: &Report) -> String {
    let mut t = Table::new(
        [
            "mode".to_string(),
            "N".into(),
            format!("aggregate {}", report.unit),
            "vs solo".into(),
            "slowdown mean/max".into(),
            "peak memory".into(),
            "J/unit".into(),
            "note".into(),
        ]
        .to_vec(),
        vec![false, false, true, true, true, true, true, false],
    );
    let mut previous: Option<(&str, &str)> = None;
    for r in &report.results {
        let same = matches!(
            (previous, &r.reason),
            (Some((m, why)), Some(w)) if m == r.mode && why == w
        );
        previous = r.reason.as_deref().map(|w| (r.mode.as_str(), w));
        let note = match (&r.status, &r.reason, &r.layout) {
            (Status::Skipped, Some(_), _) if same => "skipped (as above)".into(),
            (Status::Measured, _, Some(l)) => format!("layout {l}"),
            (Status::Measured, _, None) => String::new(),
            (Status::Skipped, Some(why), _) => format!("skipped: {why}"),
            (Status::Failed, Some(why), _) => format!("failed: {why}"),
            (s, None, _) => format!("{s:?}").to_lowercase(),
        };
        t.row(vec![
            r.mode.clone(),
            r.n.to_string(),
            opt(r.aggregate, |v| format!("{v:.1}")),
            opt(r.vs_solo, |v| format!("{v:.2}x")),
            match (r.slowdown_mean, r.slowdown_max) {
                (Some(a), Some(b)) => format!("{a:.2}x / {b:.2}x"),
                _ => "-".into(),
            },
            r.peak_memory_bytes.map_or_else(|| "-".into(), gib),
            opt(r.energy_per_sample_j, |v| format!("{v:.4}")),
            note,
        ]);
    }
    let mut out = t.render();
    if let Some(r) = &report.recommendation {
        out.push_str(&r.text);
        out.push('\n');
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
        "mode",
        "n",
        "status",
        "aggregate",
        "unit",
        "vs_solo",
        "slowdown_mean",
        "slowdown_max",
        "peak_memory_bytes",
        "energy_j",
        "energy_per_sample_j",
        "window_start",
        "window_end",
        "layout",
        "reason",
    ])?;
    let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    for r in &report.results {
        w.write_record([
            r.mode.clone(),
            r.n.to_string(),
            format!("{:?}", r.status).to_lowercase(),
            f(r.aggregate),
            report.unit.clone(),
            f(r.vs_solo),
            f(r.slowdown_mean),
            f(r.slowdown_max),
            r.peak_memory_bytes.map_or(String::new(), |v| v.to_string()),
            f(r.energy_j),
            f(r.energy_per_sample_j),
            f(r.window.map(|w| w[0])),
            f(r.window.map(|w| w[1])),
            r.layout.clone().unwrap_or_default(),
            r.reason.clone().unwrap_or_default(),
        ])?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let mut solo = ConfigResult::skipped("solo", 1, "x");
        solo.status = Status::Measured;
        solo.reason = None;
        solo.aggregate = Some(100.0);
        solo.vs_solo = Some(1.0);
        Report {
            schema: SCHEMA,
            command: vec!["w".into()],
            gpu: None,
            gpu_note: None,
            duration_s: 1.0,
            warmup_s: 0.0,
            metric: "m".into(),
            unit: "img/s".into(),
            solo: Some(100.0),
            results: vec![
                solo,
                ConfigResult::skipped("mps", 7, "would not fit: a, b"),
                ConfigResult::skipped("mps", 8, "would not fit: a, b"),
            ],
            recommendation: None,
            wall_s: 1.0,
        }
    }

    #[test]
    fn table_shows_values_and_reasons() {
        let t = table(&report());
        assert!(t.contains("solo"), "{t}");
        assert!(t.contains("100.0") && t.contains("1.00x"), "{t}");
        assert!(t.contains("skipped: would not fit: a, b"), "{t}");
        assert_eq!(t.matches("would not fit").count(), 1, "{t}");
        assert!(t.contains("skipped (as above)"), "{t}");
    }

    #[test]
    fn csv_quotes_commas() {
        let c = String::from_utf8(csv(&report()).unwrap()).unwrap();
        assert_eq!(c.lines().count(), 4);
        assert!(
            c.lines()
                .nth(2)
                .unwrap()
                .ends_with("\"would not fit: a, b\""),
            "{c}"
        );
    }

    #[test]
    fn does_not_pay_never_prints_the_threshold_itself() {
        // Measured on the H200: ResNet-152 b128, 2 copies under MPS, 1.0970x solo.
        let r = Recommendation {
            best: crate::bench::analysis::Candidate {
                mode: "mps".into(),
                n: 2,
                aggregate: 1097.8,
            },
            speedup: 1.0970,
            pays: false,
        };
        let t = recommendation_text(&r, 1.1, "img/s");
        assert!(t.contains("gives only 1.097x solo (< 1.10x)"), "{t}");
        assert_eq!(below(1.0999999, 1.1), "1.0999999");
        assert_eq!(below(0.9, 1.1), "0.90");
    }
}
