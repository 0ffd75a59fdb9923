//! A report's CSV forms: `bench.csv` (one row per configuration) and
//! `bench-measurements.csv` (one row per measurement).

use super::{Measurement, Report, SCHEMA};
use crate::export::table::{csv_num, csv_opt, csv_text};

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
