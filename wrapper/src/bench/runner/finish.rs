//! After the last measurement: the figures and their spread settled, the ratios, the
//! `mps:N` verdict and the recommendation; then the table printed and bench.json, the CSVs
//! and the plot written.

use super::Ctx;
use crate::bench::analysis;
use crate::bench::plan;
use colloc_results::bench::answer::{self, Candidate};
use colloc_results::bench::compare;
use colloc_results::bench::report::{
    self, cell_name, pm, times, ConfigResult, MpsLimit, RecommendationOut, Report, Status,
};
use colloc_results::bench::stats::{self, Spread};
use colloc_results::export::bench;
use colloc_results::output;

impl Ctx<'_> {
    /// Settle the figures, recommend, print the table, write JSON, CSVs and PNG.
    pub(super) fn finish(&mut self) -> anyhow::Result<()> {
        let min_gain = self.spec.min_gain;
        let report = &mut self.report;
        let solo = settle(report);
        report.mps_limit = mps_limit(report);
        if let Some(s) = solo {
            report.recommendation = recommendation(report, &s, min_gain);
        }
        if let Some(rec) = &mut report.recommendation {
            if let Some(cut) = self
                .rising_cut
                .as_ref()
                .filter(|c| base_mode(&rec.mode) == c.mode)
            {
                let lb = format!(
                    "lower bound: the budget ended the search at {} copies of {} while the aggregate still rose; {} or more copies may give more; a --budget of about {} would settle it.",
                    cut.at,
                    cut.mode,
                    cut.next,
                    report::secs(cut.settle_s.ceil())
                );
                rec.text = match rec.text.strip_prefix("recommendation: ") {
                    Some(rest) => format!("recommendation: {lb} So far: {rest}"),
                    None => format!("{lb} {}", rec.text),
                };
                rec.lower_bound = Some(lb);
                rec.settle_budget_s = Some(cut.settle_s.ceil());
            }
            let (mode, n) = (rec.mode.clone(), rec.n);
            if rec.pays {
                report.row_mut(&mode, n).recommended = true;
            }
        }
        report.wall_s = self.clock.now();
        if let (Some(old), Some(path)) = (&self.old, &self.spec.compare) {
            let c = compare::compare(&path.display().to_string(), old, report);
            report.comparison = Some(c);
        }
        output::print(&bench::TABLE, &self.report)?;
        bench::write(&self.out, &self.report)?;
        errln!("colloc bench: reports in {}", self.out.path().display());
        Ok(())
    }
}

/// Each configuration's figures and spread settled, with its ratios to solo and to the
/// reference and its slowdown; a note where copies ran faster than solo beyond the
/// noise, and where solo moved with the host. Solo's spread, where it was measured.
fn settle(report: &mut Report) -> Option<Spread> {
    if report.unit.is_empty() {
        report.unit = crate::engine::scan::FALLBACK_UNIT.into();
    }
    for r in &mut report.results {
        r.settle();
    }
    let solo = report.row("solo", 1).and_then(ConfigResult::spread);
    let reference = report.row("reference", 1).and_then(ConfigResult::spread);
    report.solo = solo.map(|s| s.mean);
    report.solo_u = solo.and_then(|s| s.u);
    report.reference = reference.map(|s| s.mean);
    report.reference_u = reference.and_then(|s| s.u);
    let mut faster: Vec<String> = Vec::new();
    for r in &mut report.results {
        let Some(sp) = r.spread() else { continue };
        r.set_vs_solo(solo.and_then(|s| stats::ratio(&sp, &s)));
        r.set_vs_reference(reference.and_then(|f| stats::ratio(&sp, &f)));
        if r.mode == "solo" || r.mode == "reference" {
            continue;
        }
        if let Some(s) = solo {
            if let Some((mean, max)) = analysis::slowdown(s.mean, &r.per_copy) {
                r.slowdown_mean = Some(mean);
                r.slowdown_max = Some(max);
                let rel = (s.rel_u().powi(2) + sp.rel_u().powi(2)).sqrt();
                r.baseline_problem = analysis::baseline_problem(mean, rel);
                if r.baseline_problem {
                    faster.push(format!("{} ({mean:.2}x)", cell_name(&r.mode, r.n)));
                }
            }
        }
    }
    if !faster.is_empty() {
        report.notes.push(format!(
            "baseline problem: each copy ran faster than the solo run, beyond the noise, in {}: the solo figure is too low (a solo run bound by launching kernels from the host measures the host's CPU as much as the GPU), so ratios to solo overstate collocation{}",
            faster.join(", "),
            if report.reference.is_some() {
                "; the fractions of the reference do not depend on it"
            } else {
                "; give a --reference that saturates the GPU in one process"
            }
        ));
    }
    if let Some(note) = analysis::solo_unsteady(solo, reference) {
        report.notes.push(note);
    }
    solo
}

/// What colloc recommends against `solo` ([`answer::recommend`]), as the report holds it.
fn recommendation(report: &Report, solo: &Spread, min_gain: f64) -> Option<RecommendationOut> {
    let cands = judged_candidates(report);
    let rec = answer::recommend(solo, &cands, min_gain)?;
    let vs_ref = report
        .row(&rec.chosen.mode, rec.chosen.n)
        .and_then(|r| r.vs_reference.map(|v| (v, r.vs_reference_u)));
    let solo_moves = report
        .notes
        .iter()
        .any(|n| n.starts_with(analysis::SOLO_MOVES));
    Some(RecommendationOut {
        mode: rec.chosen.mode.clone(),
        n: rec.chosen.n,
        aggregate: rec.chosen.aggregate.mean,
        aggregate_u: rec.chosen.aggregate.u,
        vs_solo: rec.ratio.value,
        vs_solo_u: rec.ratio.u,
        vs_reference: vs_ref.map(|v| v.0),
        vs_reference_u: vs_ref.and_then(|v| v.1),
        pays: rec.pays(),
        verdict: rec.verdict.as_str().into(),
        margin: rec.margin,
        best: cell_name(&rec.best.mode, rec.best.n),
        as_good: rec
            .as_good
            .iter()
            .map(|c| cell_name(&c.mode, c.n))
            .collect(),
        wide: rec
            .wide
            .iter()
            .map(|c| report::wide_text(c, &rec, &report.unit))
            .collect(),
        text: report::recommendation_text(&rec, min_gain, &report.unit, vs_ref, solo_moves),
        lower_bound: None,
        settle_budget_s: None,
    })
}

/// The mode a configuration's search ran under: `mps` for `mps:N`.
fn base_mode(mode: &str) -> &str {
    if mode.starts_with("mps:") {
        "mps"
    } else {
        mode
    }
}

/// Every measured configuration but solo, with the cells whose repeats stayed wide
/// marked ([`answer::wide_cells`]).
pub(super) fn judged_candidates(report: &Report) -> Vec<Candidate> {
    let mut cands: Vec<Candidate> = report
        .results
        .iter()
        .filter(|r| r.status == Status::Measured && r.mode != "solo")
        .filter_map(|r| {
            Some(Candidate {
                mode: r.mode.clone(),
                n: r.n,
                aggregate: r.spread()?,
                wide: None,
            })
        })
        .collect();
    let spreads: Vec<Spread> = cands.iter().map(|c| c.aggregate).collect();
    for (c, w) in cands.iter_mut().zip(answer::wide_cells(&spreads)) {
        c.wide = w;
    }
    cands
}

/// `mps:N` against unlimited MPS at the same N, where both were measured.
fn mps_limit(report: &Report) -> Option<MpsLimit> {
    let limited = report
        .results
        .iter()
        .find(|r| r.mode.starts_with("mps:") && r.status == Status::Measured)?;
    let n = limited.n;
    let unlimited = report.row("mps", n)?;
    let r = stats::ratio(&limited.spread()?, &unlimited.spread()?)?;
    let pct = 100 / n.max(1) as u32;
    // Better only beyond the noise and by the least rise that counts elsewhere: a
    // fraction of a percent between two steady runs is start-up, not the limit.
    let least = 1.0 + plan::MIN_RISE;
    let (better, verdict) = if r.lo() > 1.0 && r.value >= least {
        (
            "limited",
            format!("mps:{n} is better by {:.1} %", (r.value - 1.0) * 100.0),
        )
    } else if r.hi() < 1.0 && 1.0 / r.value >= least {
        (
            "unlimited",
            format!(
                "unlimited mps is better by {:.1} %",
                (1.0 / r.value - 1.0) * 100.0
            ),
        )
    } else {
        (
            "neither",
            format!(
                "the two cannot be told apart (within the noise, or less than {:.0} % apart)",
                plan::MIN_RISE * 100.0
            ),
        )
    };
    let text = format!(
        "mps:{n} (each copy limited to {pct} % of the SMs and 1/{n} of the memory) against unlimited mps, {n} copies: {} vs {} {} ({}): {verdict}",
        pm(limited.aggregate.unwrap_or(0.0), limited.aggregate_u, 1),
        pm(unlimited.aggregate.unwrap_or(0.0), unlimited.aggregate_u, 1),
        report.unit,
        times(r.value, r.u),
    );
    Some(MpsLimit {
        n,
        thread_percentage: pct,
        ratio: r.value,
        ratio_u: r.u,
        better: better.into(),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mps_limit_is_better_only_beyond_the_noise_and_five_percent() {
        use colloc_results::bench::report::sample::{measurement, report};
        let with = |limited: f64| {
            let mut r = report();
            for (mode, v) in [("mps", 200.0), ("mps:2", limited)] {
                let mut row = ConfigResult::new(mode, 2);
                row.add(measurement(1, 2, v), vec![]);
                row.add(measurement(2, 4, v), vec![]);
                row.settle();
                r.results.push(row);
            }
            mps_limit(&r).unwrap()
        };
        // ± 1.4 on 200 (the windows' se 1.0 each): 1 % apart is beyond it, but not 5 %.
        let close = with(202.0);
        assert_eq!(close.better, "neither", "{close:?}");
        assert!(
            close.text.contains("cannot be told apart"),
            "{}",
            close.text
        );
        let worse = with(160.0);
        assert_eq!((worse.better.as_str(), worse.n), ("unlimited", 2));
        assert_eq!(worse.thread_percentage, 50);
        assert!(
            worse.text.contains("unlimited mps is better by 25.0 %"),
            "{}",
            worse.text
        );
        assert_eq!(with(230.0).better, "limited");
    }
}
