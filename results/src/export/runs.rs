//! Views of a run report: `colloc-runs.csv` (through the `csv` crate), the summary table,
//! and the one-line summary of `-q`. A figure NVML cannot give for a run (per-process
//! utilization under MPS or MIG) is empty in the CSV and `n/a` in the table; a run
//! without GPU figures at all (no NVML) shows `-`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::table::{csv_opt as opt, csv_text, or_dash, Table};
use crate::record::model::{Report, RunRecord};
use crate::record::State;

fn f3(v: Option<f64>) -> String {
    super::table::csv_num(v, 3)
}

fn mean_epoch(r: &RunRecord) -> Option<f64> {
    (!r.epochs.is_empty())
        .then(|| r.epochs.iter().map(|e| e.seconds).sum::<f64>() / r.epochs.len() as f64)
}

/// Grid keys and metric names of all runs, sorted.
fn columns(report: &Report) -> (Vec<String>, Vec<String>) {
    let grid: BTreeSet<String> = report
        .runs
        .iter()
        .flat_map(|r| r.grid.iter().flat_map(|g| g.keys().cloned()))
        .collect();
    let metrics: BTreeSet<String> = report
        .runs
        .iter()
        .flat_map(|r| r.metrics.keys().cloned())
        .collect();
    (grid.into_iter().collect(), metrics.into_iter().collect())
}

/// `colloc-runs.csv`: one row per run; its grid values as `grid_KEY` columns and its
/// metrics as `NAME_last` and `NAME_best`.
///
/// # Errors
/// The CSV writer failed (out of memory).
pub fn csv(report: &Report) -> Result<Vec<u8>, csv::Error> {
    csv_to(Vec::new(), report)
}

/// [`csv`] written to `out`, given back at the end.
///
/// # Errors
/// Writing to `out` failed.
pub fn csv_to<W: std::io::Write>(out: W, report: &Report) -> Result<W, csv::Error> {
    let (grid, metrics) = columns(report);
    write_csv(out, (&grid, &metrics), report.runs.iter())
}

/// [`csv`] written to `out` as `runs` come (the grid keys and metric names of all of
/// them given first), `out` given back at the end.
///
/// # Errors
/// Writing to `out` failed.
pub fn write_csv<W: std::io::Write, R: std::borrow::Borrow<RunRecord>>(
    out: W,
    (grid, metrics): (&[String], &[String]),
    runs: impl Iterator<Item = R>,
) -> Result<W, csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    let mut header: Vec<String> = [
        "name",
        "index",
        "state",
        "exit_code",
        "signal",
        "attempts",
        "oom_attempts",
        "slot",
        "device",
        "node",
        "start",
        "end",
        "wall_s",
        "startup_s",
        "throughput",
        "throughput_unit",
        "samples",
        "work",
        "solo_throughput",
        "epochs",
        "mean_epoch_s",
        "peak_gpu_memory_mib",
        "mean_util_percent",
        "mean_gpu_util_percent",
        "energy_j",
        "escaped",
        "log",
        "error",
        "gpu_memory_mib",
        "slot_memory_mib",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend(grid.iter().map(|k| csv_text(&format!("grid_{k}"))));
    for m in metrics {
        header.push(csv_text(&format!("{m}_last")));
        header.push(csv_text(&format!("{m}_best")));
    }
    w.write_record(&header)?;
    for r in runs {
        let r = r.borrow();
        let tp = r.throughput.as_ref();
        let gpu = r.gpu.as_ref();
        let text = |v: Option<String>| csv_text(&opt(v));
        let mut row = vec![
            csv_text(&r.name),
            r.index.to_string(),
            if r.removed {
                "removed".to_string()
            } else {
                r.state.as_str().to_string()
            },
            opt(r.exit_code),
            opt(r.signal),
            r.attempts.len().to_string(),
            r.attempts.iter().filter(|a| a.oom).count().to_string(),
            opt(r.slot),
            text(r.device.clone()),
            text(r.node.clone()),
            opt(r.start.clone()),
            opt(r.end.clone()),
            f3(r.wall_s),
            f3(r.startup_s),
            f3(tp.map(|t| t.mean)),
            text(tp.map(|t| t.unit.clone())),
            opt(tp.map(|t| t.count)),
            f3(tp.map(|t| t.work)),
            f3(r.solo_throughput),
            r.epochs.len().to_string(),
            f3(mean_epoch(r)),
            opt(gpu
                .and_then(|g| g.peak_memory_bytes)
                .map(|b| b / (1024 * 1024))),
            f3(gpu.and_then(|g| g.mean_util_percent)),
            f3(gpu.and_then(|g| g.mean_gpu_util_percent)),
            f3(gpu.and_then(|g| g.energy_j)),
            csv_text(
                &r.escaped
                    .iter()
                    .map(|e| format!("{} ({})", e.pid, e.command))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            text(r.log.clone()),
            text(r.error.clone()),
            opt(r.gpu_memory_mib),
            opt(r.slot_memory_mib),
        ];
        for k in grid {
            row.push(text(r.grid.as_ref().and_then(|g| g.get(k).cloned())));
        }
        for m in metrics {
            let v = r.metrics.get(m);
            row.push(f3(v.and_then(|v| v.last)));
            row.push(f3(v.and_then(|v| v.best)));
        }
        w.write_record(&row)?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

/// A run's state with what happened on the way: `failed (OOM)`, `succeeded after 1 OOM`;
/// `removed (failed)` for a run no longer in the manifest.
pub fn state_text(r: &RunRecord) -> String {
    let ooms = r.attempts.iter().filter(|a| a.oom).count();
    let s = r.state.as_str();
    let text = match (r.state, ooms, r.attempts.last().is_some_and(|a| a.oom)) {
        (_, 0, _) => s.to_string(),
        (State::Failed, _, true) => format!("{s} (OOM)"),
        (_, n, _) => format!("{s} after {n} OOM"),
    };
    if r.removed {
        format!("removed ({text})")
    } else {
        text
    }
}

/// The summary table printed at the end.
pub fn table(report: &Report) -> String {
    let mut out = run_table(report).render();
    totals(&mut out, report);
    session_lines(&mut out, report);
    node_lines(&mut out, report);
    notes(&mut out, report);
    // Names (runs, nodes, GPUs, reasons) come from the record: nothing in them reaches
    // the terminal as a control character.
    crate::text::escape_lines(&out).into_owned()
}

/// The optional columns of the summary table and where they go.
struct Columns {
    /// The pack's throughput unit (the throughput column's header).
    unit: String,
    /// Metric names, one `NAME best` column each.
    metrics: Vec<String>,
    /// Across nodes: a node column after the slot.
    nodes: bool,
    /// Some run declared its GPU memory: need and slot columns after the peak.
    declared: bool,
    /// Where the peak column is.
    peak_col: usize,
}

/// The summary table's rows, one per run.
fn run_table(report: &Report) -> Table {
    let s = &report.summary;
    let unit = s
        .throughput_unit
        .clone()
        .unwrap_or_else(|| "throughput".into());
    let (_, metrics) = columns(report);
    // Across nodes, each run's node goes after its slot.
    let nodes = !report.nodes.is_empty();
    let mut headers: Vec<String> = [
        "run", "state", "exit", "tries", "slot", "wall s", "start s", &unit, "solo", "epoch s",
        "peak MiB", "util %", "energy J",
    ]
    .iter()
    .map(|h| h.to_string())
    .collect();
    if nodes {
        headers.insert(5, "node".into());
    }
    // Right-sized slots: what each run declared and what its slot holds, beside its peak.
    let declared = report.runs.iter().any(|r| r.gpu_memory_mib.is_some());
    let peak_col = headers.iter().position(|h| h == "peak MiB").unwrap_or(0);
    if declared {
        headers.insert(peak_col + 1, "need MiB".into());
        headers.insert(peak_col + 2, "slot MiB".into());
    }
    headers.extend(metrics.iter().map(|m| format!("{m} best")));
    let mut right = vec![false, false];
    right.resize(headers.len(), true);
    let mut t = Table::new(headers, right);
    let cols = Columns {
        unit,
        metrics,
        nodes,
        declared,
        peak_col,
    };
    for r in &report.runs {
        t.row(table_row(r, &cols));
    }
    t
}

/// One run's row of the summary table.
fn table_row(r: &RunRecord, cols: &Columns) -> Vec<String> {
    let (unit, peak_col) = (&cols.unit, cols.peak_col);
    let gpu = r.gpu.as_ref();
    let tp = r.throughput.as_ref();
    // NVML read this run, but cannot give this figure (MPS, MIG): n/a, not 0.
    let gpu_fig = |f: Option<f64>, fmt: &dyn Fn(f64) -> String| match (gpu, f) {
        (None, _) => "-".to_string(),
        (Some(_), None) => "n/a".to_string(),
        (Some(_), Some(v)) => fmt(v),
    };
    let mut row = vec![
        r.name.clone(),
        state_text(r),
        match (r.exit_code, r.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(sig)) => format!("sig{sig}"),
            _ => "-".into(),
        },
        r.attempts.len().to_string(),
        or_dash(r.slot.map(|s| s.to_string())),
        or_dash(r.wall_s.map(|w| format!("{w:.1}"))),
        or_dash(r.startup_s.map(|w| format!("{w:.1}"))),
        or_dash(tp.map(|t| {
            if t.unit == *unit {
                format!("{:.1}", t.mean)
            } else {
                format!("{:.1} {}", t.mean, t.unit)
            }
        })),
        or_dash(r.solo_throughput.map(|v| format!("{v:.1}"))),
        or_dash(mean_epoch(r).map(|v| format!("{v:.1}"))),
        gpu_fig(
            gpu.and_then(|g| g.peak_memory_bytes).map(|b| b as f64),
            &|b| format!("{}", b as u64 / (1024 * 1024)),
        ),
        gpu_fig(gpu.and_then(|g| g.mean_util_percent), &|v| {
            format!("{v:.0}")
        }),
        gpu_fig(gpu.and_then(|g| g.energy_j), &|v| format!("{v:.0}")),
    ];
    if cols.nodes {
        row.insert(5, or_dash(r.node.clone()));
    }
    if cols.declared {
        row.insert(
            peak_col + 1,
            or_dash(r.gpu_memory_mib.map(|m| m.to_string())),
        );
        row.insert(
            peak_col + 2,
            or_dash(r.slot_memory_mib.map(|m| m.to_string())),
        );
    }
    for m in &cols.metrics {
        row.push(or_dash(
            r.metrics
                .get(m)
                .and_then(|v| v.best)
                .map(|v| format!("{v:.4}")),
        ));
    }
    row
}

/// The lines under the table: counts, makespan, aggregate and steady throughput,
/// speed-up, and the note on runs faster packed than alone.
fn totals(out: &mut String, report: &Report) {
    let s = &report.summary;
    let _ = writeln!(
        out,
        "{} runs: {} succeeded, {} failed, {} timed out, {} interrupted, {} not started{}; {} slots ({}), at most {} at once; {} attempts{}{}",
        s.runs,
        s.succeeded,
        s.failed,
        s.timed_out,
        s.interrupted,
        s.not_started,
        if s.running > 0 { format!(", {} running", s.running) } else { String::new() },
        report.slots.len(),
        report.mode,
        s.max_concurrent,
        s.attempts,
        if s.oom_attempts > 0 { format!(" ({} with CUDA out of memory)", s.oom_attempts) } else { String::new() },
        if s.early_starts > 0 { format!(", {} started early over the end of the one before", s.early_starts) } else { String::new() },
    );
    let _ = write!(out, "makespan {:.1} s", s.makespan_s);
    if report.sessions.len() > 1 {
        let _ = write!(out, " (over {} sessions)", report.sessions.len());
    }
    match (s.aggregate_throughput, &s.throughput_unit) {
        (Some(a), Some(u)) => {
            let _ = write!(
                out,
                "; aggregate throughput {a:.1} {u} (work over makespan)"
            );
            if let (Some(st), Some(secs)) = (s.steady_throughput, s.steady_s) {
                let _ = write!(
                    out,
                    "; steady {st:.1} {u} (while all {} slots ran past start-up, {secs:.1} s)",
                    report.slots.len()
                );
                if st > 0.0 {
                    let _ = write!(out, "; work over makespan {:.2} of steady", a / st);
                }
            }
        }
        _ => out.push_str("; aggregate throughput unknown (no run printed a throughput we read)"),
    }
    match (s.speedup, s.sequential_s, s.speedup_runs, s.speedup_of) {
        (Some(x), Some(seq), Some(k), Some(n)) if k == n => {
            let _ = write!(
                out,
                "; speed-up {x:.2}x against one after another (est. {seq:.1} s; solo figures of all {n} runs from {})",
                s.solo_source.as_deref().unwrap_or("?")
            );
        }
        (Some(x), Some(seq), Some(k), Some(n)) => {
            let _ = write!(
                out,
                "; speed-up at least {x:.2}x against one after another (est. {seq:.1} s for the {k} of {n} runs with a solo figure, from {}; the others counted as no work)",
                s.solo_source.as_deref().unwrap_or("?")
            );
        }
        _ => out.push_str(
            "; speed-up unknown (no solo figures: use --solo-baseline or --baseline REPORT)",
        ),
    }
    out.push('\n');
    if !s.faster_than_solo.is_empty() {
        let which: Vec<String> = s
            .faster_than_solo
            .iter()
            .map(|f| format!("{} {:+.0} %", f.run, (f.throughput / f.solo - 1.0) * 100.0))
            .collect();
        let _ = writeln!(
            out,
            "note: baseline problem: {} ran faster packed than alone ({}): their solo figures are too low (a solo run bound by the host's CPU measures the host as much as the GPU), so the speed-up overstates collocation",
            if which.len() == 1 { "1 run".to_string() } else { format!("{} runs", which.len()) },
            which.join(", ")
        );
    }
}

/// One line per session of a resumed pack: when its runs ran, the gap before it (not
/// counted in the makespan), its makespan and its own aggregate and steady figures.
fn session_lines(out: &mut String, report: &Report) {
    if report.sessions.len() < 2 {
        return;
    }
    let unit = report.summary.throughput_unit.as_deref().unwrap_or("");
    let mut previous_end: Option<f64> = None;
    for s in &report.sessions {
        let _ = write!(out, "session {}", s.session);
        match (s.start_s, s.end_s) {
            (Some(a), Some(b)) => {
                let _ = write!(out, ": runs from {a:.1} s to {b:.1} s");
                if let Some(p) = previous_end {
                    let gap = std::time::Duration::from_secs_f64((a - p).max(0.0));
                    let _ = write!(
                        out,
                        " (resumed after a gap of {}, not counted)",
                        crate::duration::show(gap)
                    );
                }
                previous_end = Some(b);
            }
            _ => out.push_str(": no run started"),
        }
        let _ = write!(out, "; makespan {:.1} s", s.makespan_s);
        if let Some(a) = s.aggregate_throughput {
            let _ = write!(out, "; aggregate {a:.1} {unit}");
        }
        if let (Some(st), Some(secs)) = (s.steady_throughput, s.steady_s) {
            let _ = write!(out, "; steady {st:.1} {unit} ({secs:.1} s)");
        }
        if s.running {
            out.push_str("; running");
        }
        out.push('\n');
    }
}

/// One line per node: its slots, attempts and why it was given no more runs.
fn node_lines(out: &mut String, report: &Report) {
    for n in &report.nodes {
        let _ = write!(
            out,
            "node {}: {} slots, {} attempts ({} succeeded",
            n.name,
            n.slots.len(),
            n.attempts,
            n.succeeded
        );
        if n.step_failures > 0 {
            let _ = write!(out, ", {} steps failed", n.step_failures);
        }
        out.push(')');
        if let Some(why) = &n.out {
            let _ = write!(
                out,
                "; given no more runs after {:.0} s: {why}",
                n.out_s.unwrap_or(0.0)
            );
        }
        out.push('\n');
    }
}

/// Notes under the table: failed steps, dispatch time, the start column, and the GPUs'
/// energy and utilization with their legend.
fn notes(out: &mut String, report: &Report) {
    let s = &report.summary;
    if s.step_failures > 0 {
        let _ = writeln!(
            out,
            "{} step(s) failed (not their runs) and their runs went back to the queue",
            s.step_failures
        );
    }
    if let Some(d) = s.median_dispatch_s {
        let _ = writeln!(out, "median start of a run's step: {d:.2} s after its srun");
    }
    if report.runs.iter().any(|r| r.startup_s.is_some()) {
        let _ = writeln!(
            out,
            "start s: from a run's start to its first throughput line (start-up: no work counted)"
        );
    }
    if let Some(gpus) = &report.gpus {
        for g in gpus {
            let j = |v: Option<f64>| v.map_or("n/a".to_string(), |e| format!("{e:.0} J"));
            let _ = writeln!(
                out,
                "GPU {} ({}): energy {} ({} shared out to runs by time share, {} idle), mean utilization {}",
                g.id.uuid,
                g.id.name,
                j(g.energy_j),
                j(g.runs_energy_j),
                j(g.idle_energy_j),
                g.mean_util_percent
                    .map_or("n/a".to_string(), |u| format!("{u:.0} %")),
            );
        }
        let mps = report.mode.starts_with("mps");
        for l in crate::telemetry::attempts::run_legend(mps, gpus) {
            let _ = writeln!(out, "{l}");
        }
    }
}

/// The one line of `-q`.
pub fn one_line(report: &Report, where_: &str) -> String {
    let s = &report.summary;
    let mut parts = vec![format!("{} runs", s.runs)];
    let mut states = Vec::new();
    for (n, what) in [
        (s.succeeded, "succeeded"),
        (s.failed, "failed"),
        (s.timed_out, "timed out"),
        (s.interrupted, "interrupted"),
        (s.not_started, "not started"),
        (s.running, "running"),
        (s.removed, "removed"),
    ] {
        if n > 0 {
            states.push(format!("{n} {what}"));
        }
    }
    parts[0] = format!("{}: {}", parts[0], states.join(", "));
    parts.push(format!("makespan {:.1} s", s.makespan_s));
    if let (Some(a), Some(u)) = (s.aggregate_throughput, &s.throughput_unit) {
        parts.push(format!("aggregate {a:.1} {u}"));
    }
    if let Some(x) = s.speedup {
        let lb = if s.speedup_runs < s.speedup_of {
            "≥"
        } else {
            ""
        };
        parts.push(format!("speed-up {lb}{x:.2}x"));
    }
    parts.push(format!("report {where_}"));
    crate::text::escape(&format!("colloc: {}", parts.join("; "))).into_owned()
}
