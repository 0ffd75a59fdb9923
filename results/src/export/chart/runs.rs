//! `colloc-runs.png`: each run's throughput as a bar by outcome, its solo figure marked.

use std::path::Path;

use plotters::prelude::*;

use super::{
    err, font, legend, outcome_color, row_labels, tick, Area, Canvas, Chart, Entries, E,
    FEW_SAMPLES, LEGEND_W, MAX_BARS, OUTCOMES, W,
};
use crate::record::model::{Report, RunRecord};
use crate::record::State;

/// Each run's throughput as a bar, coloured by outcome, its solo figure as a tick. A run
/// with fewer than three samples is drawn hollow and does not set the axis; a bar past the
/// axis ends in a triangle with its value.
pub(super) fn runs_into(
    report: &Report,
    path: &Path,
    canvas: &mut Option<Canvas>,
) -> Result<bool, E> {
    let with: Vec<&RunRecord> = report
        .runs
        .iter()
        .filter(|r| r.throughput.is_some())
        .take(MAX_BARS)
        .collect();
    if with.is_empty() {
        return Ok(false);
    }
    let e = err(path);
    let n = with.len();
    let h = (n as u32 * 24 + 150).clamp(300, 2400);
    let root = Canvas::area(canvas, W, h);
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (plot, side) = root.split_horizontally(W - LEGEND_W);
    let top = axis_top(&with);
    let mut chart = axes(report, &plot, &with, top, path)?;
    let nf = n as f64;
    let rows: Vec<(f64, String)> = with
        .iter()
        .enumerate()
        .map(|(i, r)| (nf - i as f64 - 0.5, r.name.chars().take(30).collect()))
        .collect();
    row_labels(&root, &chart, &rows, 0.0)?;
    for (i, r) in with.iter().enumerate() {
        draw_bar(&root, &mut chart, r, nf - i as f64 - 1.0, top, path)?;
    }
    legend(&side, "runs", &entries(&with))?;
    root.present().map_err(|x| e(&x))?;
    Ok(true)
}

/// Whether a run's throughput rests on enough samples to be drawn solid and set the axis.
fn solid(r: &RunRecord) -> bool {
    r.throughput
        .as_ref()
        .is_some_and(|t| t.count >= FEW_SAMPLES)
}

/// The end of the throughput axis: a little above the highest solid bar or solo figure
/// (the highest bar when none is solid).
fn axis_top(with: &[&RunRecord]) -> f64 {
    let mut values: Vec<f64> = with
        .iter()
        .filter(|r| solid(r))
        .filter_map(|r| r.throughput.as_ref().map(|t| t.mean))
        .chain(with.iter().filter_map(|r| r.solo_throughput))
        .collect();
    if values.is_empty() {
        values = with
            .iter()
            .filter_map(|r| r.throughput.as_ref().map(|t| t.mean))
            .collect();
    }
    values.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.15
}

/// The chart's title and axes on `plot`: throughput up to `top` across, one row per run
/// of `with` (room left for their names).
fn axes<'a, 'b>(
    report: &Report,
    plot: &'a Area<'b>,
    with: &[&RunRecord],
    top: f64,
    path: &Path,
) -> Result<Chart<'a, 'b>, E> {
    let e = err(path);
    let unit = report
        .summary
        .throughput_unit
        .clone()
        .unwrap_or_else(|| "throughput".into());
    let n = with.len();
    let name_w = with
        .iter()
        .map(|r| r.name.chars().count().min(30))
        .max()
        .unwrap_or(4) as u32
        * 7
        + 16;
    let title = if n < report
        .runs
        .iter()
        .filter(|r| r.throughput.is_some())
        .count()
    {
        format!("colloc: throughput per run (first {n})")
    } else {
        "colloc: throughput per run".into()
    };
    let mut chart = ChartBuilder::on(plot)
        .caption(title, font(20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(name_w.min(230))
        .build_cartesian_2d(0f64..top, 0f64..n as f64)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&tick)
        .x_desc(format!("{unit} (work over sampled time)"))
        .label_style(font(12))
        .axis_desc_style(font(14))
        .draw()
        .map_err(|x| e(&x))?;
    Ok(chart)
}

/// One run's bar on the row at `y`: solid or hollow, ending in a triangle with its value
/// past `top`, its solo figure as a black tick.
fn draw_bar(
    root: &Area<'_>,
    chart: &mut Chart<'_, '_>,
    r: &RunRecord,
    y: f64,
    top: f64,
    path: &Path,
) -> Result<(), E> {
    let e = err(path);
    let Some(t) = &r.throughput else {
        return Ok(());
    };
    let v = t.mean;
    let c = outcome_color(r.state, r.attempts.last().is_some_and(|a| a.oom));
    let rect = [(0.0, y + 0.15), (v.min(top), y + 0.85)];
    let style = if solid(r) {
        c.filled()
    } else {
        c.stroke_width(2)
    };
    chart
        .draw_series(std::iter::once(Rectangle::new(rect, style)))
        .map_err(|x| e(&x))?;
    if v > top {
        chart
            .draw_series(std::iter::once(TriangleMarker::new(
                (top, y + 0.5),
                7,
                c.filled(),
            )))
            .map_err(|x| e(&x))?;
        let (px, py) = chart.backend_coord(&(top, y + 0.5));
        root.draw(&Text::new(tick(&v), (px - 60, py - 20), font(11)))
            .map_err(|x| e(&x))?;
    }
    if let Some(s) = r.solo_throughput {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(s.min(top), y + 0.05), (s.min(top), y + 0.95)],
                BLACK.stroke_width(3),
            )))
            .map_err(|x| e(&x))?;
    }
    Ok(())
}

/// The chart's legend: the outcomes its runs had, hollow bars and solo ticks if any.
fn entries(with: &[&RunRecord]) -> Entries {
    let bucket = |r: &RunRecord| {
        (
            r.state,
            r.state == State::Failed && r.attempts.last().is_some_and(|a| a.oom),
        )
    };
    let mut entries: Entries = OUTCOMES
        .iter()
        .filter(|(_, s, oom)| with.iter().any(|r| bucket(r) == (*s, *oom)))
        .map(|(n, s, oom)| (n.to_string(), outcome_color(*s, *oom), true))
        .collect();
    if with.iter().any(|r| !solid(r)) {
        entries.push(("hollow: < 3 samples".into(), RGBColor(120, 120, 120), false));
    }
    if with.iter().any(|r| r.solo_throughput.is_some()) {
        entries.push(("alone (solo)".into(), BLACK, false));
    }
    entries
}
