//! A report as text: the recommendation sentence, the wide cells' notes and the
//! results table with the lines below it.

use super::{cell_name, ConfigResult, Report, Status};
use crate::bench::answer::{Candidate, Recommendation, Verdict, AS_GOOD, WIDE_FACTOR, WIDE_FLOOR};
use crate::export::table::{dash_or as opt, Table};

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
pub(super) fn below(x: f64, limit: f64) -> String {
    (2..=6)
        .map(|d| format!("{x:.d$}"))
        .find(|s| s.parse::<f64>().is_ok_and(|v| v < limit))
        .unwrap_or_else(|| format!("{x}"))
}

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
        WIDE_FACTOR,
        wide.others * 100.0,
        WIDE_FLOOR * 100.0
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
    let mut out = results_table(report).render();
    lines_below(report, &mut out);
    out
}

/// One row per configuration (the discarded warm-up run first).
fn results_table(report: &Report) -> Table {
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
        t.row(result_cells(r, same, has_ref));
    }
    t
}

/// A configuration's cells; `same`: skipped for the reason of the row above.
fn result_cells(r: &ConfigResult, same: bool, has_ref: bool) -> Vec<String> {
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
    cells
}

/// The lines below the table: host, GPU figures, solo, reference, the mps:N verdict,
/// notes, budget, recommendation, comparison.
fn lines_below(report: &Report, out: &mut String) {
    let line = |out: &mut String, s: &str| {
        out.push_str(s);
        out.push('\n');
    };
    line(out, &format!("host: {}", report.host.describe()));
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
            out,
            &crate::telemetry::attempts::bench_legend(mps_seen, server),
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
            out,
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
            out,
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
        line(out, &m.text);
    }
    for r in report
        .results
        .iter()
        .filter(|r| r.status == Status::Measured)
    {
        if let Some(why) = &r.tried {
            line(out, &format!("tried {}: {why}", cell_name(&r.mode, r.n)));
        }
    }
    for n in &report.notes {
        line(out, &format!("note: {n}"));
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
        line(out, &s);
    }
    if let Some(r) = &report.recommendation {
        line(out, &r.text);
        for w in &r.wide {
            line(out, w);
        }
    } else if !report
        .results
        .iter()
        .any(|r| r.status == Status::Measured && r.mode != "reference" && r.n > 1)
    {
        line(
            out,
            "recommendation: none: no collocated configuration was measured (see what was skipped; a larger --budget measures them)",
        );
    }
    if let Some(c) = &report.comparison {
        out.push_str(&c.text);
    }
}

/// Bytes as GiB with one decimal.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}
